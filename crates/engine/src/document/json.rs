//! Small readers of provider-document JSON shared by the model, its parameters and its
//! pagination: string fields, `$ref`s and JSON pointer tokens.

use serde_json::Value;

/// The string at `key` of an object, copied.
pub(super) fn str_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// The `$ref` of the object at `key`.
pub(super) fn ref_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key)?.get("$ref")?.as_str()
}

/// `~1` → `/`, `~0` → `~` (JSON pointer token unescaping).
pub(super) fn unescape_pointer(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// `~` → `~0`, `/` → `~1` (JSON pointer token escaping).
pub(super) fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
