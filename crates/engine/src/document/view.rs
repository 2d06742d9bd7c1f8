//! A resource's SQL views (`config.views.select`): StackQL's provider-authored DDL over
//! other resources, with a predicate naming its SQL dialect and the parameters a statement
//! must give, and a `fallback` chain of alternatives.

use serde_json::Value;

/// The dialect the view DDL of this engine is written in (SQLite runs it).
const DIALECT: &str = "sqlite3";

/// How deep a `fallback` chain is read; a longer one is cut there.
const MAX_CHAIN: usize = 16;

/// One view of a resource that this engine can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    /// The SELECT the view stands for, as the document writes it.
    pub(crate) ddl: String,
    /// The names the statement's WHERE clause must give (`requiredParams == [ … ]`).
    pub(crate) required_params: Vec<String>,
}

/// The views of `config.views.select` in chain order that are for SQLite, or for any
/// dialect (a predicate that names none), as any-sdk's `GetViewsForSqlDialect` lists them.
/// Views with a DDL that is not a string are skipped.
pub(crate) fn select_views(config: Option<&Value>) -> Vec<View> {
    let mut out = Vec::new();
    let mut next = config
        .and_then(|c| c.get("views"))
        .and_then(|v| v.get("select"));
    for _ in 0..MAX_CHAIN {
        let Some(container) = next.filter(|c| c.is_object()) else {
            break;
        };
        let predicate = container
            .get("predicate")
            .and_then(Value::as_str)
            .unwrap_or("");
        let dialect = predicate_dialect(predicate);
        if let Some(ddl) = container.get("ddl").and_then(Value::as_str)
            && (dialect.is_none() || dialect == Some(DIALECT))
        {
            out.push(View {
                ddl: ddl.to_owned(),
                required_params: required_params(predicate),
            });
        }
        next = container.get("fallback");
    }
    out
}

/// The `"…"` of `sqlDialect == "…"`, if the predicate names a dialect.
fn predicate_dialect(predicate: &str) -> Option<&str> {
    let rest = after_operator(predicate, "sqlDialect")?;
    let rest = rest.strip_prefix('"')?;
    rest.split_once('"').map(|(dialect, _)| dialect)
}

/// The names of `requiredParams == [ a, "b" ]` (spaces and quotes removed, empty ones
/// dropped); none when the predicate has no such clause.
fn required_params(predicate: &str) -> Vec<String> {
    let Some(rest) = after_operator(predicate, "requiredParams") else {
        return Vec::new();
    };
    let Some(list) = rest
        .strip_prefix('[')
        .and_then(|r| r.split_once(']'))
        .map(|(list, _)| list)
    else {
        return Vec::new();
    };
    list.split(',')
        .map(|name| name.trim().replace('"', ""))
        .filter(|name| !name.is_empty())
        .collect()
}

/// What follows `<key> ==` (spaces trimmed), if the predicate has that comparison.
fn after_operator<'a>(predicate: &'a str, key: &str) -> Option<&'a str> {
    let start = predicate.find(key)? + key.len();
    let rest = predicate[start..].trim_start().strip_prefix("==")?;
    Some(rest.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chain_keeps_sqlite_views_in_order() {
        let config = json!({"views": {"select": {
            "predicate": "sqlDialect == \"sqlite3\" && requiredParams == [ Identifier ]",
            "ddl": "SELECT 1",
            "fallback": {
                "predicate": "sqlDialect == \"postgres\"",
                "ddl": "SELECT 2",
                "fallback": {"predicate": "sqlDialect == \"sqlite3\"", "ddl": "SELECT 3",
                    "fallback": {"ddl": "SELECT 4"}}
            }
        }}});
        let views = select_views(Some(&config));
        assert_eq!(
            views,
            vec![
                View {
                    ddl: "SELECT 1".into(),
                    required_params: vec!["Identifier".into()]
                },
                View {
                    ddl: "SELECT 3".into(),
                    required_params: vec![]
                },
                View {
                    ddl: "SELECT 4".into(),
                    required_params: vec![]
                },
            ]
        );
    }

    #[test]
    fn predicates_parse_as_any_sdk_reads_them() {
        assert_eq!(
            predicate_dialect("sqlDialect==\"sqlite3\""),
            Some("sqlite3")
        );
        assert_eq!(predicate_dialect("requiredParams == [a]"), None);
        assert_eq!(
            required_params("sqlDialect == \"x\" && requiredParams == [ \"a\", b ,, ]"),
            vec!["a".to_owned(), "b".to_owned()]
        );
        assert!(required_params("requiredParams == [ ]").is_empty());
        assert!(required_params("requiredParams == a").is_empty());
    }
}
