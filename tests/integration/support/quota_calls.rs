//! Raw `tools/call` requests of SQL and the tool error code of their replies, for the
//! quota and admission tests.

use serde_json::{Value, json};

use crate::support::raw::RawCall;

/// A `tools/call` of `tool` with `sql`, as a 2026-07-28 client sends it; the JSON-RPC reply.
pub async fn call_sql(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    tool: &str,
    sql: &str,
) -> Value {
    RawCall::new(tool, json!({"sql": sql, "format": "json"}))
        .bearer(token)
        .reply(http, url)
        .await
}

/// The code of a tool error (`""` for a success).
pub fn code_of(reply: &Value) -> &str {
    reply["result"]["structuredContent"]["error"]["code"]
        .as_str()
        .unwrap_or("")
}
