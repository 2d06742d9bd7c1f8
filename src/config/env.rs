//! Environment overrides: `QUERYGATE_UPSTREAM__TIMEOUT=10s` sets `upstream.timeout`.
//! Key segments match case-insensitively: a key the file already has keeps its spelling, the
//! camelCase auth fields (`keyIDenvvar`, `valuePrefix`, `keyID`) take theirs, anything else
//! is lower-cased. Values are read as YAML scalars (`7` is a number, `[a, b]` a list); a
//! plain string is taken as it is, spaces included.
//! Variables without `__` (like `QUERYGATE_CONFIG`) are not overrides and are ignored.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::ConfigError;

const PREFIX: &str = "QUERYGATE_";

/// Keys whose spelling is not lower case (fields of a provider's `auth` object, as StackQL
/// documents spell them).
const MIXED_CASE_KEYS: &[&str] = &["keyID", "keyIDenvvar", "valuePrefix"];

/// One `QUERYGATE_<SECTION>__<KEY>` variable (or command-line [`Flag`]) applied to the
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Override {
    /// The variable, e.g. `QUERYGATE_SERVER__MAX_ROWS`, or the option, e.g. `--listen`.
    pub(super) variable: String,
    /// The key it set, as the configuration spells it: `server.max_rows`.
    pub(super) key: String,
    /// Its value, as the environment holds it.
    pub(super) raw: String,
}

/// The overrides applied to a configuration, in variable order.
#[derive(Debug, Default)]
pub(super) struct Overrides(Vec<Override>);

impl Overrides {
    /// The override that set exactly the key at `path`.
    pub(super) fn set_exactly(&self, path: &str) -> Option<&Override> {
        self.0.iter().rev().find(|o| o.key == path)
    }

    /// Whether any variable was applied.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The override that set the key at `path` (`server.max_rows`, `tenants[0].mode`), or a
    /// key inside it, or the section holding it: the variable a problem at `path` comes from.
    pub(super) fn at(&self, path: &str) -> Option<&Override> {
        let within = |inner: &str, outer: &str| {
            inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
        };
        self.0
            .iter()
            .find(|o| within(path, &o.key) || within(&o.key, path))
    }
}

/// Applies the `QUERYGATE_<SECTION>__<KEY>` variables of `env` to `tree`; which there were.
pub(super) fn apply_overrides(
    tree: &mut Value,
    env: &HashMap<String, String>,
) -> Result<Overrides, ConfigError> {
    let mut keys: Vec<&String> = env
        .keys()
        .filter(|k| k.starts_with(PREFIX) && k.contains("__"))
        .collect();
    keys.sort();
    let mut applied = Vec::with_capacity(keys.len());
    for key in keys {
        let path: Vec<&str> = key[PREFIX.len()..].split("__").collect();
        if path.iter().any(|segment| segment.is_empty()) {
            return Err(invalid(key, "empty key segment"));
        }
        let raw = &env[key];
        let value = match serde_norway::from_str(raw) {
            // A plain string keeps its spaces (`valuePrefix=Bearer `); a quoted one is YAML's.
            Ok(Value::String(_)) | Err(_) if !raw.trim_start().starts_with(['"', '\'']) => {
                Value::String(raw.clone())
            }
            Ok(value) => value,
            Err(_) => Value::String(raw.clone()),
        };
        let spelled = set(tree, &path, value).map_err(|message| invalid(key, &message))?;
        applied.push(Override {
            variable: key.clone(),
            key: spelled.join("."),
            raw: raw.clone(),
        });
    }
    Ok(Overrides(applied))
}

/// A command-line option that sets a configuration key (`serve --listen` sets
/// `server.listen`), applied over the file and the environment before validation, so its
/// value is checked as the file's would be and a problem with it names the option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    /// The option as typed, e.g. `--listen`.
    pub option: &'static str,
    /// The key it sets, e.g. `server.listen`.
    pub key: &'static str,
    /// Its value, taken as a string.
    pub value: String,
}

/// Applies `flags` to `tree` after the environment's overrides, recording each in `overrides`.
pub(super) fn apply_flags(
    tree: &mut Value,
    flags: &[Flag],
    overrides: &mut Overrides,
) -> Result<(), ConfigError> {
    for flag in flags {
        let path: Vec<&str> = flag.key.split('.').collect();
        let spelled = set(tree, &path, Value::String(flag.value.clone())).map_err(|message| {
            ConfigError::Invalid {
                origin: "command line".to_owned(),
                message: format!("{}: {message}", flag.option),
            }
        })?;
        overrides.0.push(Override {
            variable: flag.option.to_owned(),
            key: spelled.join("."),
            raw: flag.value.clone(),
        });
    }
    Ok(())
}

fn invalid(key: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        origin: "environment".to_owned(),
        message: format!("{key}: {message}"),
    }
}

/// The spelling of `segment` in `map`: an existing key that matches case-insensitively, a
/// known mixed-case key, or the segment in lower case.
fn spelling(map: &Map<String, Value>, segment: &str) -> String {
    map.keys()
        .map(String::as_str)
        .chain(MIXED_CASE_KEYS.iter().copied())
        .find(|known| known.eq_ignore_ascii_case(segment))
        .map_or_else(|| segment.to_ascii_lowercase(), str::to_owned)
}

/// Sets the key at `path` to `value`; the key's segments as spelled in `tree`.
fn set(tree: &mut Value, path: &[&str], value: Value) -> Result<Vec<String>, String> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(Vec::new());
    };
    let mut spelled = Vec::with_capacity(path.len());
    let mut node = tree;
    for segment in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            return Err("not a section".to_owned());
        };
        let key = spelling(map, segment);
        spelled.push(key.clone());
        node = map.entry(key).or_insert_with(|| Value::Object(Map::new()));
    }
    match node {
        Value::Object(map) => {
            let key = spelling(map, last);
            spelled.push(key.clone());
            map.insert(key, value);
            Ok(spelled)
        }
        _ => Err(format!(
            "'{}' is not a section",
            parents.join(".").to_ascii_lowercase()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn apply(tree: Value, vars: &[(&str, &str)]) -> Value {
        let mut tree = tree;
        let env = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        apply_overrides(&mut tree, &env).unwrap();
        tree
    }

    #[test]
    fn mixed_case_keys_are_matched() {
        let tree = apply(
            json!({"providers": {"aws": {"auth": {"type": "aws_signing_v4", "credentialsEnvVar": "S"}}}}),
            &[
                ("QUERYGATE_PROVIDERS__AWS__AUTH__KEYIDENVVAR", "AWS_KEY"),
                (
                    "QUERYGATE_PROVIDERS__AWS__AUTH__CREDENTIALSENVVAR",
                    "AWS_SECRET",
                ),
                ("QUERYGATE_PROVIDERS__DD__AUTH__VALUEPREFIX", "Token "),
                ("QUERYGATE_UPSTREAM__PAGE_LIMIT", "3"),
            ],
        );
        assert_eq!(
            tree,
            json!({
                "providers": {
                    "aws": {"auth": {"type": "aws_signing_v4", "credentialsEnvVar": "AWS_SECRET", "keyIDenvvar": "AWS_KEY"}},
                    "dd": {"auth": {"valuePrefix": "Token "}}
                },
                "upstream": {"page_limit": 3}
            })
        );
    }
}
