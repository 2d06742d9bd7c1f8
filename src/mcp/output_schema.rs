//! The `outputSchema` a tool declares: its result's schema, widened so that a tool error's
//! structured content (`{"error": {"code", "message"}}`) also fits. Clients that check
//! structured content against the schema (the official SDKs, MCP Inspector) then accept both
//! a result and an error. The root stays an object with `properties`; what is required
//! becomes a choice: the result's required fields, or `error`.

use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// `result` (a tool's output schema) widened to accept the tool-error shape too.
pub(crate) fn declared(mut result: JsonObject) -> JsonObject {
    let required = result
        .remove("required")
        .unwrap_or_else(|| Value::Array(Vec::new()));
    let properties = result
        .entry("properties")
        .or_insert_with(|| Value::Object(Default::default()));
    if let Value::Object(properties) = properties {
        properties.insert("error".to_owned(), error_schema());
    }
    result.insert("type".to_owned(), json!("object"));
    result.insert(
        "anyOf".to_owned(),
        json!([{"required": required}, {"required": ["error"]}]),
    );
    result
}

fn error_schema() -> Value {
    json!({
        "description": "Present only on a tool error (isError: true): a stable code and the message.",
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "Stable error code, e.g. upstream.rejected."},
            "message": {"type": "string"}
        },
        "required": ["code", "message"]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_result_or_an_error_fits() {
        let Value::Object(result) = json!({
            "type": "object",
            "properties": {"rows": {"type": "array"}},
            "required": ["rows"]
        }) else {
            unreachable!()
        };
        let declared = Value::Object(declared(result));
        assert_eq!(declared["anyOf"][0], json!({"required": ["rows"]}));
        assert_eq!(declared["anyOf"][1], json!({"required": ["error"]}));
        assert_eq!(
            declared["properties"]["error"]["required"],
            json!(["code", "message"])
        );
        assert!(declared.get("required").is_none());
    }
}
