//! A method's request parameters as the document declares them: where each goes (path,
//! query, header, cookie, server variable, body field), its default and allowed values, and
//! the placeholders of server URL templates.

use serde_json::Value;

use super::json::str_field;

/// Where a parameter goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamLocation {
    Path,
    Query,
    Header,
    Cookie,
    /// A server variable (`{region}` in a `servers` URL): a routing parameter.
    Server,
    /// A field of the JSON request body, given in WHERE (a SELECT bound to POST).
    Body,
}

impl ParamLocation {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ParamLocation::Path => "path",
            ParamLocation::Query => "query",
            ParamLocation::Header => "header",
            ParamLocation::Cookie => "cookie",
            ParamLocation::Server => "server",
            ParamLocation::Body => "body",
        }
    }
}

/// One request parameter of a method.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) location: ParamLocation,
    pub(crate) required: bool,
    pub(crate) default: Option<String>,
    pub(crate) allowed: Vec<String>,
    pub(crate) env_var: Option<String>,
    pub(crate) type_name: Option<String>,
    pub(crate) description: Option<String>,
    /// For a body field: where its value goes in the JSON body (`["TypeName"]`,
    /// `["DesiredState", "BucketName"]`); empty for other parameters.
    pub(crate) body_path: Vec<String>,
}

/// An OpenAPI server URL with its variables.
#[derive(Debug, Clone)]
pub(crate) struct Server {
    pub(crate) url: String,
}

pub(super) fn parse_param(p: &Value) -> Option<Param> {
    let name = p.get("name")?.as_str()?.to_owned();
    let location = match p.get("in")?.as_str()? {
        "path" => ParamLocation::Path,
        "query" => ParamLocation::Query,
        "header" => ParamLocation::Header,
        "cookie" => ParamLocation::Cookie,
        _ => return None,
    };
    let schema = p.get("schema");
    Some(Param {
        required: location == ParamLocation::Path
            || p.get("required").and_then(Value::as_bool) == Some(true),
        default: schema.and_then(|s| s.get("default")).and_then(scalar_text),
        allowed: schema
            .and_then(|s| s.get("enum"))
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(scalar_text).collect())
            .unwrap_or_default(),
        env_var: None,
        type_name: schema.and_then(|s| str_field(s, "type")),
        description: str_field(p, "description"),
        body_path: Vec::new(),
        name,
        location,
    })
}

/// The variables of a server, as routing parameters: the `{name}` or `{name:regex}` of its
/// URL, then those its `variables` declare that the URL does not use (StackQL takes every
/// declared one as a parameter, whatever URL, or `base_url` override, is called).
pub(super) fn server_variables(url: &str, variables: Option<&Value>) -> Vec<Param> {
    let mut names = template_variables(url);
    for (declared, _) in variables.and_then(Value::as_object).into_iter().flatten() {
        if !names.contains(&declared.as_str()) {
            names.push(declared.as_str());
        }
    }
    let mut out = Vec::new();
    for name in names {
        let var = variables.and_then(|v| v.get(name));
        let default = var.and_then(|v| v.get("default")).and_then(scalar_text);
        let env_var = var.and_then(|v| str_field(v, "x-stackQL-envVar"));
        out.push(Param {
            required: default.is_none() && env_var.is_none(),
            allowed: var
                .and_then(|v| v.get("enum"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(scalar_text).collect())
                .unwrap_or_default(),
            type_name: Some("string".to_owned()),
            description: var.and_then(|v| str_field(v, "description")),
            name: name.to_owned(),
            location: ParamLocation::Server,
            default,
            env_var,
            body_path: Vec::new(),
        });
    }
    out
}

/// Names of `{var}` / `{var:pattern}` placeholders in a URL template, in order.
pub(crate) fn template_variables(template: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        let Some(end) = find_closing_brace(after) else {
            break;
        };
        let inner = &after[..end];
        let name = inner.split(':').next().unwrap_or(inner);
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
        rest = &after[end + 1..];
    }
    out
}

/// Index of the `}` closing a placeholder, allowing nested braces in a `{name:regex{2}}`.
pub(crate) fn find_closing_brace(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A wire name in snake_case as botocore's `xform_name` (and so StackQL) spells it:
/// `VpcId` → `vpc_id`, `VPCEndpoint` → `vpc_endpoint`, `ResourceARNs` → `resource_arns`. A name already
/// holding `_` is kept.
pub(crate) fn to_snake(name: &str) -> String {
    use std::sync::LazyLock;
    static FIRST_CAP: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new("(.)([A-Z][a-z]+)").ok());
    static NUMBER_CAP: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new("([a-z])([0-9]+)").ok());
    static END_CAP: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new("([a-z0-9])([A-Z])").ok());
    static SPECIAL: LazyLock<Option<regex::Regex>> =
        LazyLock::new(|| regex::Regex::new("[A-Z]{2,}s$").ok());
    if name.contains('_') {
        return name.to_owned();
    }
    let (Some(first), Some(number), Some(end), Some(special)) = (
        FIRST_CAP.as_ref(),
        NUMBER_CAP.as_ref(),
        END_CAP.as_ref(),
        SPECIAL.as_ref(),
    ) else {
        return name.to_ascii_lowercase();
    };
    let mut name = name.to_owned();
    if let Some(found) = special.find(&name).map(|m| m.start()) {
        let tail = name[found..].to_ascii_lowercase();
        name = format!("{}_{tail}", &name[..found]);
    }
    let s1 = first.replace_all(&name, "${1}_${2}");
    let s2 = number.replace_all(&s1, "${1}_${2}");
    let s3 = end.replace_all(&s2, "${1}_${2}");
    s3.to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::to_snake;

    #[test]
    fn snake_case_as_botocore() {
        assert_eq!(to_snake("VpcId"), "vpc_id");
        assert_eq!(to_snake("VPCEndpoint"), "vpc_endpoint");
        assert_eq!(to_snake("DisplayName"), "display_name");
        assert_eq!(to_snake("Ipv6Address"), "ipv_6_address");
        assert_eq!(to_snake("ResourceARNs"), "resource_arns");
        assert_eq!(to_snake("already_snake"), "already_snake");
    }
}
