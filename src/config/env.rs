//! Environment overrides: `QUERYGATE_UPSTREAM__TIMEOUT=10s` sets `upstream.timeout`.
//! Keys are lower-cased; values are read as YAML scalars (`7` is a number, `[a, b]` a list).
//! Variables without `__` (like `QUERYGATE_CONFIG`) are not overrides and are ignored.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::ConfigError;

const PREFIX: &str = "QUERYGATE_";

pub(super) fn apply_overrides(
    tree: &mut Value,
    env: &HashMap<String, String>,
) -> Result<(), ConfigError> {
    let mut keys: Vec<&String> = env
        .keys()
        .filter(|k| k.starts_with(PREFIX) && k.contains("__"))
        .collect();
    keys.sort();
    for key in keys {
        let path: Vec<String> = key[PREFIX.len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        if path.iter().any(String::is_empty) {
            return Err(invalid(key, "empty key segment"));
        }
        let raw = &env[key];
        let value: Value =
            serde_norway::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()));
        set(tree, &path, value).map_err(|message| invalid(key, &message))?;
    }
    Ok(())
}

fn invalid(key: &str, message: &str) -> ConfigError {
    ConfigError::Invalid {
        origin: "environment".to_owned(),
        message: format!("{key}: {message}"),
    }
}

fn set(tree: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut node = tree;
    for segment in parents {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(map) = node else {
            return Err("not a section".to_owned());
        };
        node = map
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    match node {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        _ => Err(format!("'{}' is not a section", parents.join("."))),
    }
}
