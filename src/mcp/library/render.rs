//! Turning a template and the caller's values into SQL. Values are checked against their
//! declared type, enum or pattern and then written into the SQL as literals: strings and enum
//! values single-quoted with quotes doubled, numbers and booleans bare, identifiers verbatim
//! after a strict check. Any problem means no SQL at all, and every problem is reported.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::model::Param;

/// What rendering produced.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Rendered {
    /// The SQL, when every check passed.
    pub(crate) sql: Option<String>,
    /// Required parameters with neither a value nor a default.
    pub(crate) missing: Vec<Param>,
    /// Supplied names the template does not declare (sorted).
    pub(crate) unknown: Vec<String>,
    /// Everything that is wrong, one message each.
    pub(crate) errors: Vec<String>,
}

const IDENTIFIER: &str = "^[A-Za-z_][A-Za-z0-9_-]*$";

/// Validates `values` against `params` and fills in `template`.
pub(crate) fn render(template: &str, params: &[Param], values: &Map<String, Value>) -> Rendered {
    let mut out = Rendered::default();
    let declared: BTreeSet<&str> = params.iter().map(|p| p.name.as_str()).collect();
    out.unknown = values
        .keys()
        .filter(|k| !declared.contains(k.as_str()))
        .cloned()
        .collect();
    out.unknown.sort();
    if !out.unknown.is_empty() {
        out.errors.push(format!(
            "unknown params rejected: {}",
            out.unknown.join(", ")
        ));
    }
    let mut literals: Vec<(&str, String)> = Vec::new();
    for param in params {
        let value = match values.get(&param.name).filter(|v| !v.is_null()) {
            Some(v) => v,
            None => match &param.default {
                Some(default) => default,
                None if param.required => {
                    out.missing.push(param.clone());
                    continue;
                }
                // An optional placeholder without a value renders as nothing.
                None => {
                    literals.push((param.name.as_str(), String::new()));
                    continue;
                }
            },
        };
        match literal(param, value) {
            Ok(text) => literals.push((param.name.as_str(), text)),
            Err(message) => out.errors.push(message),
        }
    }
    if !out.missing.is_empty() {
        let names: Vec<&str> = out.missing.iter().map(|p| p.name.as_str()).collect();
        out.errors
            .push(format!("missing required params: {}", names.join(", ")));
    }
    if !out.errors.is_empty() {
        return out;
    }
    match substitute(template, &literals) {
        Ok(sql) => out.sql = Some(sql),
        Err(message) => out.errors.push(message),
    }
    out
}

/// A JSON value as the text the caller meant (strings unquoted).
fn plain(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A single-quoted SQL string literal.
pub(crate) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The SQL text of one value.
fn literal(param: &Param, value: &Value) -> Result<String, String> {
    let name = &param.name;
    let text = plain(value);
    match param.kind.as_str() {
        "number" => match text.trim().parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(text.trim().to_owned()),
            _ => Err(format!("param \"{name}\" must be a number, got \"{text}\"")),
        },
        "boolean" => match text.to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => Ok(b.to_owned()),
            _ => Err(format!(
                "param \"{name}\" must be a boolean, got \"{text}\""
            )),
        },
        "identifier" => {
            let ok = text
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && text
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if ok {
                Ok(text)
            } else {
                Err(format!("param \"{name}\" must match {IDENTIFIER}"))
            }
        }
        "enum" => {
            let choices = param.choices.as_deref().unwrap_or_default();
            if choices.contains(&text) {
                Ok(quote(&text))
            } else {
                Err(format!(
                    "param \"{name}\" must be one of [{}], got \"{text}\"",
                    choices.join(" ")
                ))
            }
        }
        _ => {
            if let Some(pattern) = &param.pattern {
                let anchored = format!("^(?:{pattern})$");
                let re = regex::Regex::new(&anchored).map_err(|err| {
                    format!("param \"{name}\" has an invalid declared pattern: {err}")
                })?;
                if !re.is_match(&text) {
                    return Err(format!("param \"{name}\" must match pattern {pattern}"));
                }
            }
            Ok(quote(&text))
        }
    }
}

/// Replaces every `{{name}}` (letters, digits, `_`); a placeholder without a value is an error.
fn substitute(template: &str, literals: &[(&str, String)]) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        let name = &after[..name_len];
        if name_len == 0 || !after[name_len..].starts_with("}}") {
            out.push_str("{{");
            rest = after;
            continue;
        }
        match literals.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => out.push_str(value),
            None => return Err(format!("unresolved placeholder {{{{{name}}}}} in template")),
        }
        rest = &after[name_len + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Placeholder names in a template, in order of first use.
pub(crate) use crate::mcp::content::placeholders;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(name: &str, kind: &str, required: bool) -> Param {
        Param {
            name: name.into(),
            kind: kind.into(),
            required,
            default: None,
            description: None,
            example: None,
            choices: None,
            pattern: None,
        }
    }

    fn values(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn strings_are_quoted_with_quotes_doubled() {
        let params = [param("org", "string", true)];
        let out = render(
            "SELECT name FROM github.repos.repos WHERE org = {{org}}",
            &params,
            &values(json!({"org": "o'brien'; DROP TABLE x; --"})),
        );
        assert_eq!(
            out.sql.as_deref(),
            Some("SELECT name FROM github.repos.repos WHERE org = 'o''brien''; DROP TABLE x; --'")
        );
        assert!(out.errors.is_empty());
    }

    #[test]
    fn types_enums_patterns_and_defaults() {
        let mut zone = param("zone", "string", true);
        zone.pattern = Some("[a-z]+-[a-z]+[0-9]-[a-z]".into());
        let mut role = param("role", "enum", false);
        role.choices = Some(vec!["all".into(), "admin".into(), "member".into()]);
        role.default = Some(json!("all"));
        let params = [
            zone,
            role,
            param("limit", "number", false),
            param("private", "boolean", false),
            param("col", "identifier", false),
        ];
        let template = "SELECT {{col}} FROM t WHERE zone = {{zone}} AND role = {{role}} AND private = {{private}} LIMIT {{limit}}";
        let ok = render(
            template,
            &params,
            &values(
                json!({"zone": "us-central1-a", "limit": 10, "private": "TRUE", "col": "name"}),
            ),
        );
        assert_eq!(
            ok.sql.as_deref(),
            Some(
                "SELECT name FROM t WHERE zone = 'us-central1-a' AND role = 'all' AND private = true LIMIT 10"
            )
        );

        let bad = render(
            template,
            &params,
            &values(
                json!({"zone": "us-central1-a' OR 1=1", "role": "owner", "limit": "ten", "private": "yes", "col": "name; --", "extra": 1, "another": 2}),
            ),
        );
        assert_eq!(bad.sql, None);
        assert_eq!(bad.unknown, ["another", "extra"]);
        assert_eq!(
            bad.errors,
            [
                "unknown params rejected: another, extra",
                "param \"zone\" must match pattern [a-z]+-[a-z]+[0-9]-[a-z]",
                "param \"role\" must be one of [all admin member], got \"owner\"",
                "param \"limit\" must be a number, got \"ten\"",
                "param \"private\" must be a boolean, got \"yes\"",
                "param \"col\" must match ^[A-Za-z_][A-Za-z0-9_-]*$",
            ]
        );
    }

    #[test]
    fn missing_required_and_unresolved_placeholders() {
        let params = [param("org", "string", true), param("team", "string", true)];
        let out = render("SELECT 1 WHERE org = {{org}}", &params, &values(json!({})));
        assert_eq!(out.sql, None);
        assert_eq!(out.missing.len(), 2);
        assert_eq!(out.errors, ["missing required params: org, team"]);

        let out = render(
            "SELECT 1 WHERE org = {{org}} AND x = {{undeclared}}",
            &params[..1],
            &values(json!({"org": "acme"})),
        );
        assert_eq!(
            out.errors,
            ["unresolved placeholder {{undeclared}} in template"]
        );

        let mut bad = param("p", "string", true);
        bad.pattern = Some("(".into());
        let out = render("{{p}}", &[bad], &values(json!({"p": "x"})));
        assert!(
            out.errors[0].starts_with("param \"p\" has an invalid declared pattern"),
            "{:?}",
            out.errors
        );
    }

    #[test]
    fn json_braces_are_left_alone_and_placeholders_listed() {
        let params = [param("id", "string", true)];
        let out = render(
            "EXEC a.b.c.m @id = {{id}}, @@json = '{\"k\": {\"n\": 1}}'",
            &params,
            &values(json!({"id": "7"})),
        );
        assert_eq!(
            out.sql.as_deref(),
            Some("EXEC a.b.c.m @id = '7', @@json = '{\"k\": {\"n\": 1}}'")
        );
        assert_eq!(placeholders("{{a}} {{b}} {{a}} {{ c }} {{"), ["a", "b"]);
    }
}
