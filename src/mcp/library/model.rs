//! The query library's documents: the manifest, the index and one document per query, as
//! served under a base URL (`manifest.json`, `index.json`, `queries/<id>.json`) and as
//! embedded in the snapshot under `content/library/`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `manifest.json`: identifies a build of the library.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Manifest {
    /// Changes whenever the index or a document changes.
    pub(crate) build_id: String,
    /// When the build was made (informational).
    #[serde(default)]
    #[allow(dead_code)] // informational
    pub(crate) generated_at: Option<String>,
    /// How many entries the index holds (informational).
    #[serde(default)]
    #[allow(dead_code)] // informational
    pub(crate) entry_count: Option<u64>,
}

/// `index.json`: what search ranks.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Index {
    #[serde(default)]
    pub(crate) build_id: Option<String>,
    pub(crate) entries: Vec<IndexEntry>,
}

/// One entry of the index.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct IndexEntry {
    pub(crate) id: String,
    pub(crate) title: String,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) providers: Vec<String>,
    #[serde(default)]
    pub(crate) services: Vec<String>,
    #[serde(default)]
    pub(crate) tags: Vec<String>,
    #[serde(default)]
    pub(crate) keywords: Vec<String>,
    #[serde(default)]
    pub(crate) intent_keywords: Vec<String>,
    #[serde(default)]
    pub(crate) mutation: bool,
    #[serde(default)]
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) required_params: Vec<String>,
}

/// `queries/<id>.json`: a query template and what it needs.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct QueryDoc {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) title: Option<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) mutation: bool,
    /// `select`, `mutation` or `lifecycle`; wins over `mutation` for `next_tool`.
    #[serde(default)]
    pub(crate) verb: Option<String>,
    #[serde(default)]
    #[allow(dead_code)] // filtered on in the index
    pub(crate) status: Option<String>,
    #[serde(default)]
    pub(crate) auth: Vec<String>,
    #[serde(default)]
    pub(crate) permissions: Vec<String>,
    #[serde(default)]
    pub(crate) params: Vec<Param>,
    #[serde(default)]
    pub(crate) outputs: Vec<OutputColumn>,
    #[serde(default)]
    pub(crate) cost: Option<Cost>,
    #[serde(default)]
    pub(crate) related: Vec<String>,
    pub(crate) template: String,
    #[serde(default)]
    pub(crate) notes: Option<String>,
    #[serde(default)]
    pub(crate) doc_url: Option<String>,
}

/// A template parameter.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
pub(crate) struct Param {
    /// Placeholder name (`{{name}}` in the template).
    pub(crate) name: String,
    /// `string` (default; single quotes doubled), `number`, `boolean`, `identifier`
    /// (inserted verbatim, letters, digits, `_` and `-`) or `enum`.
    #[serde(rename = "type", default = "string_type")]
    pub(crate) kind: String,
    /// Whether a value must be supplied (when there is no default).
    #[serde(default)]
    pub(crate) required: bool,
    /// Used when no value is supplied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) default: Option<serde_json::Value>,
    /// What the value is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
    /// An example value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) example: Option<serde_json::Value>,
    /// Legal values of an `enum` parameter.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "enum")]
    pub(crate) choices: Option<Vec<String>>,
    /// A regular expression a `string` value must match (whole value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pattern: Option<String>,
}

fn string_type() -> String {
    "string".to_owned()
}

/// A column the query returns.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
pub(crate) struct OutputColumn {
    /// Column name.
    pub(crate) name: String,
    /// Its type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// What it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) description: Option<String>,
}

/// What running the query costs.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema, PartialEq)]
pub(crate) struct Cost {
    /// How requests multiply: none, region, project, account, subscription.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) fan_out: Option<String>,
    /// Whether it makes many requests or reads much data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) expensive: Option<bool>,
    /// How to keep it cheap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) notes: Option<String>,
}

/// Whether `id` is a well-formed query id (`seg/seg/...`, lowercase letters, digits, `_`, `-`).
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.split('/').all(|segment| {
            !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids() {
        assert!(valid_id("github/repos/repos-by-org"));
        assert!(valid_id("a_b"));
        for bad in ["", "/a", "a/", "a//b", "A/b", "a/../b", "a b", "a/b.json"] {
            assert!(!valid_id(bad), "{bad}");
        }
    }
}
