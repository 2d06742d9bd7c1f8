//! A method's `response.transform`: the template StackQL runs over the upstream response
//! before rows are read from it.
//!
//! As any-sdk does, a transform is applied only when the response also names an
//! `overrideMediaType` (the media type of the transformed text); the rows, and next-page
//! tokens found in the body, are then read from the transformed text. The template types
//! run here are `golang_template_json_*` (the body decoded as JSON is the template's dot),
//! `golang_template_text_*` (the body as one string is dot) and `golang_template_mxj_*`
//! (the XML body decoded as mxj decodes it is dot); `schema_driven_xml_v0.1.0` is no
//! template: the rows of the XML body are found and typed by the row schema (see
//! [`super::xml`]). Other types are not applied: [`ResponseTransform::from_response`] gives
//! `None` for them.

use bytes::Bytes;
use serde_json::Value;

use super::document::{ColumnSpec, Method};
use super::error::{Error, ErrorKind, Result};
use super::plan::contains_ci;
use super::template::{BodyError, Dialect, Limits, Template, TemplateError};
use super::xml::{self, RowField, XmlError};

/// What the template gets as dot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// The body decoded as JSON.
    Json,
    /// The body as text.
    Text,
    /// The body decoded from XML into mxj's map.
    Mxj,
}

/// The type name of the schema-driven XML transform.
const SCHEMA_DRIVEN_XML: &str = "schema_driven_xml_v0.1.0";

/// A parsed response transform.
#[derive(Debug)]
pub(crate) enum ResponseTransform {
    /// A Go template over the decoded body.
    Template { input: Input, template: Template },
    /// `schema_driven_xml_v0.1.0`: rows of the XML body by the row schema, written as
    /// `{"<list_property>": [...]}`.
    SchemaDrivenXml {
        /// `objectKey` without `$.`.
        list_property: String,
        /// The service document's `info.x-protocol` (`query`, `rest-xml`, `ec2`).
        protocol: Option<String>,
    },
}

/// Steps allowed per byte of response body, beyond a fixed allowance.
const STEPS_PER_BYTE: u64 = 64;
const BASE_STEPS: u64 = 1_000_000;
/// Output allowed per byte of response body, beyond a fixed allowance.
const OUTPUT_PER_BYTE: usize = 8;
const BASE_OUTPUT: usize = 1 << 20;

impl ResponseTransform {
    /// The transform of a method's `response` definition: `None` when it has none, when it
    /// names no `overrideMediaType` (any-sdk applies none then), or when its type is not one
    /// of the Go template types for JSON or text; an error when its template does not parse.
    /// `protocol` is the service document's `info.x-protocol`. A schema-driven XML transform
    /// needs an `objectKey` of the form `$.<property>`.
    pub(crate) fn from_response(
        response: &Value,
        protocol: Option<&str>,
    ) -> Result<Option<Self>, String> {
        let Some(transform) = response.get("transform") else {
            return Ok(None);
        };
        let applied = response
            .get("overrideMediaType")
            .and_then(Value::as_str)
            .is_some_and(|m| !m.is_empty());
        let kind = transform.get("type").and_then(Value::as_str).unwrap_or("");
        if kind == SCHEMA_DRIVEN_XML {
            if !applied {
                return Ok(None);
            }
            let key = response
                .get("objectKey")
                .and_then(Value::as_str)
                .unwrap_or("");
            let list_property = key.strip_prefix("$.").unwrap_or("");
            if list_property.is_empty() || list_property.contains(['.', '[']) {
                return Err(format!(
                    "response.transform ({kind}) needs an objectKey of the form '$.<property>', not '{key}'"
                ));
            }
            return Ok(Some(ResponseTransform::SchemaDrivenXml {
                list_property: list_property.to_owned(),
                protocol: protocol.map(str::to_owned),
            }));
        }
        let Some((input, dialect)) = template_type(kind) else {
            return Ok(None);
        };
        if !applied {
            return Ok(None);
        }
        let body = transform.get("body").and_then(Value::as_str).unwrap_or("");
        let template = Template::parse(body, dialect)
            .map_err(|err| format!("response.transform ({kind}): {err}"))?;
        Ok(Some(ResponseTransform::Template { input, template }))
    }

    /// Runs the transform over one response body; `columns` are the row schema's (what a
    /// schema-driven transform types rows by), `loaded` the columns the rows are loaded
    /// into (`None`: all; a schema-driven transform writes only these). An empty body gives an empty output for a
    /// template (the template does not run, as in any-sdk), an empty row list for the
    /// schema-driven transform.
    pub(crate) fn apply(
        &self,
        body: &[u8],
        columns: &[ColumnSpec],
        loaded: Option<&[String]>,
    ) -> Result<Vec<u8>, TransformError> {
        let (input, template) = match self {
            ResponseTransform::Template { input, template } => (*input, template),
            ResponseTransform::SchemaDrivenXml {
                list_property,
                protocol,
            } => {
                let fields: Vec<RowField> = columns
                    .iter()
                    .map(|c| RowField {
                        // Rows are written under the wire name; the table binds it to the
                        // column (see `ColumnSpec::wire`).
                        name: c.wire.clone().unwrap_or_else(|| c.name.clone()),
                        type_name: c.type_name.clone(),
                        xml_name: c.xml_name.clone(),
                        attribute: c.xml_attribute,
                        loaded: loaded.is_none_or(|loaded| {
                            loaded.iter().any(|l| l.eq_ignore_ascii_case(&c.name))
                        }),
                    })
                    .collect();
                return Ok(xml::schema_driven(
                    body,
                    &fields,
                    protocol.as_deref(),
                    list_property,
                )?);
            }
        };
        let limits = Limits {
            max_steps: BASE_STEPS.saturating_add(STEPS_PER_BYTE.saturating_mul(body.len() as u64)),
            max_output: BASE_OUTPUT.saturating_add(OUTPUT_PER_BYTE.saturating_mul(body.len())),
        };
        let out = match input {
            Input::Json => match template.execute_json_body(body, limits, loaded) {
                Ok(Some(out)) => out,
                Ok(None) => return Ok(Vec::new()),
                Err(BodyError::Json(err)) => return Err(TransformError::Body(err.to_string())),
                Err(BodyError::Template(err)) => return Err(err.into()),
            },
            Input::Text => {
                if body.is_empty() {
                    return Ok(Vec::new());
                }
                template.execute_text(&String::from_utf8_lossy(body), limits)?
            }
            Input::Mxj => {
                if body.is_empty() {
                    return Ok(Vec::new());
                }
                template.execute_json(&xml::to_mxj_value(body)?, limits)?
            }
        };
        Ok(out.into_bytes())
    }
}

/// The body rows are read from for `method` of `resource`: the upstream body, or what the
/// method's transform makes of it (`columns`: the method's row columns; `loaded`: the
/// columns the rows are loaded into, `None` for all). A failure is an error naming the
/// resource and method.
pub(crate) fn rows_body(
    method: &Method,
    resource: &str,
    body: Bytes,
    columns: &[ColumnSpec],
    loaded: Option<&[String]>,
) -> Result<Bytes> {
    let Some(transform) = &method.response.transform else {
        if super::raw_body::is_raw(method) {
            return Ok(super::raw_body::as_rows(&body));
        }
        return Ok(body);
    };
    // A template writes members under their wire names: the columns loaded are asked for
    // under those names too.
    let with_wire: Option<Vec<String>> = loaded
        .filter(|_| columns.iter().any(|c| c.wire.is_some()))
        .map(|loaded| {
            let wire = columns.iter().filter_map(|c| {
                let wire = c.wire.as_ref()?;
                contains_ci(loaded, &c.name).then(|| wire.clone())
            });
            loaded.iter().cloned().chain(wire).collect()
        });
    let loaded = with_wire.as_deref().or(loaded);
    match transform.apply(&body, columns, loaded) {
        Ok(out) => Ok(Bytes::from(out)),
        Err(err) => {
            let kind = match err {
                TransformError::Template(TemplateError::Limit(_)) => ErrorKind::LimitExceeded,
                _ => ErrorKind::Upstream,
            };
            Err(Error::new(
                kind,
                format!(
                    "'{resource}': the response transform of method '{}' failed: {err}",
                    method.name
                ),
            ))
        }
    }
}

/// Why a transform failed over a body.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TransformError {
    /// A JSON transform's body is not JSON.
    #[error("response body is not valid JSON: {0}")]
    Body(String),
    /// An XML transform's body is not XML.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// The template failed or ran past its bounds.
    #[error(transparent)]
    Template(#[from] TemplateError),
}

/// The input and function set of a template type: `<name>_v<semver>`, functions of v0.2.0
/// from that version on.
/// The dialect of a `golang_template_json_v*` type name (what `request.transform` names);
/// `None` for any other type.
pub(crate) fn json_template_dialect(kind: &str) -> Option<Dialect> {
    match template_type(kind)? {
        (Input::Json, dialect) => Some(dialect),
        _ => None,
    }
}

fn template_type(kind: &str) -> Option<(Input, Dialect)> {
    let (name, version) = kind.rsplit_once("_v")?;
    let input = match name {
        "golang_template_json" => Input::Json,
        "golang_template_text" | "golang_template" => Input::Text,
        "golang_template_mxj" => Input::Mxj,
        _ => return None,
    };
    let mut parts = version.split('.').map(str::parse::<u64>);
    let (Some(Ok(major)), Some(Ok(minor)), Some(Ok(_)), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((
        input,
        Dialect {
            v2: major > 0 || minor >= 2,
        },
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn types_and_versions() {
        assert_eq!(
            template_type("golang_template_json_v0.3.0"),
            Some((Input::Json, Dialect { v2: true }))
        );
        assert_eq!(
            template_type("golang_template_json_v0.1.0"),
            Some((Input::Json, Dialect { v2: false }))
        );
        assert_eq!(
            template_type("golang_template_text_v0.3.0"),
            Some((Input::Text, Dialect { v2: true }))
        );
        assert_eq!(
            template_type("golang_template_mxj_v0.3.0"),
            Some((Input::Mxj, Dialect { v2: true }))
        );
        assert_eq!(template_type("schema_driven_xml_v0.1.0"), None);
    }

    #[test]
    fn applied_only_with_an_override_media_type() {
        let transform = json!({"type": "golang_template_json_v0.3.0", "body": "{{toJson .}}"});
        let without = json!({"transform": transform});
        assert!(
            ResponseTransform::from_response(&without, None)
                .unwrap()
                .is_none()
        );
        let with = json!({"transform": transform, "overrideMediaType": "application/json"});
        let t = ResponseTransform::from_response(&with, None)
            .unwrap()
            .unwrap();
        assert_eq!(
            t.apply(br#"{"b":1,"a":2}"#, &[], None).unwrap(),
            br#"{"a":2,"b":1}"#
        );
        assert!(t.apply(b"", &[], None).unwrap().is_empty());
        assert!(matches!(
            t.apply(b"{nope", &[], None),
            Err(TransformError::Body(_))
        ));
    }

    #[test]
    fn a_template_that_does_not_parse_is_an_error() {
        let bad = json!({"overrideMediaType": "application/json",
            "transform": {"type": "golang_template_json_v0.3.0", "body": "{{nope .}}"}});
        let err = ResponseTransform::from_response(&bad, None).unwrap_err();
        assert!(err.contains("function \"nope\" not defined"), "{err}");
    }
}

/// Every JSON, text and mxj transform template of the current StackQL registry parses
/// (`$QUERYGATE_COMPAT_REGISTRY/current/registry-src.tar.gz`; skipped when that is not set,
/// except under CI).
#[cfg(test)]
mod registry_tests {
    use std::io::Read;

    use serde_json::Value;

    use super::{Template, template_type};

    fn tarball() -> Option<std::path::PathBuf> {
        match std::env::var("QUERYGATE_COMPAT_REGISTRY") {
            Ok(root) if !root.is_empty() => {
                Some(std::path::Path::new(&root).join("current/registry-src.tar.gz"))
            }
            _ if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
                panic!("QUERYGATE_COMPAT_REGISTRY is not set: under CI this test must run")
            }
            _ => None,
        }
    }

    /// The `(type, body)` of every `transform` object under `value`.
    fn transforms<'a>(value: &'a Value, out: &mut Vec<(&'a str, &'a str)>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(t)) = map.get("transform")
                    && let (Some(Value::String(kind)), Some(Value::String(body))) =
                        (t.get("type"), t.get("body"))
                {
                    out.push((kind, body));
                }
                map.values().for_each(|v| transforms(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| transforms(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_template_transform_of_the_current_registry_parses() {
        let Some(path) = tarball() else {
            eprintln!("QUERYGATE_COMPAT_REGISTRY is not set: skipping");
            return;
        };
        let file = std::fs::File::open(&path).unwrap();
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
        let (mut parsed, mut failures, mut known_mxj) = (0usize, Vec::new(), 0usize);
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".yaml") {
                continue;
            }
            let mut text = String::new();
            if entry.read_to_string(&mut text).is_err()
                || !(text.contains("golang_template_json")
                    || text.contains("golang_template_text")
                    || text.contains("golang_template_mxj"))
            {
                continue;
            }
            let doc: Value = serde_norway::from_str(&text).unwrap();
            let mut found = Vec::new();
            transforms(&doc, &mut found);
            for (kind, body) in found {
                let Some((_, dialect)) = template_type(kind) else {
                    continue;
                };
                match Template::parse(body, dialect) {
                    Ok(_) => parsed += 1,
                    // Known, and named in docs/engine.md: mxj templates that open an action
                    // with `{{{-` (Go's parser refuses them too) or call `separator` (a
                    // function value for `call`, which this interpreter does not have).
                    Err(_)
                        if kind.starts_with("golang_template_mxj")
                            && (body.contains("{{{") || body.contains("separator")) =>
                    {
                        known_mxj += 1
                    }
                    Err(err) => failures.push(format!("{name}: {kind}: {err}")),
                }
            }
        }
        assert!(failures.is_empty(), "{failures:#?}");
        assert_eq!(known_mxj, 8, "the known mxj template failures changed");
        // 6,951 JSON and text transforms (request and response) as of the copy's commit.
        assert!(parsed > 6_900, "only {parsed} transforms found");
    }
}
