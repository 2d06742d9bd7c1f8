//! Requests rmcp could not read. rmcp parses a request whose `params` do not fit the known
//! method's type (a `tools/call` whose `arguments` is a string) as a custom request, which
//! would be answered `-32601 "tools/call"` as if the method did not exist. A known method
//! with bad params is `-32602` naming what is wrong; an unknown method stays `-32601`, and
//! so does `initialize` sent on the 2026-07-28 wire (per-request `_meta` naming a protocol
//! version), where that method does not exist.

use rmcp::model::{
    CallToolRequestParams, CustomRequest, ErrorData, GetPromptRequestParams,
    InitializeRequestParams, PaginatedRequestParams, ProtocolVersion, ReadResourceRequestParams,
    RequestMetaObject,
};
use serde::de::DeserializeOwned;

/// The error for a request that reached rmcp's custom-request fallback; `meta` is its
/// `_meta` (rmcp takes it out of the params).
pub(crate) fn refuse(request: &CustomRequest, meta: &RequestMetaObject) -> ErrorData {
    let method = request.method.as_str();
    if method == "initialize"
        && let Some(version) = without_initialize(meta)
    {
        return initialize_removed(version.as_str());
    }
    let problem = match method {
        "tools/call" => problem::<CallToolRequestParams>(request),
        "prompts/get" => problem::<GetPromptRequestParams>(request),
        "resources/read" => problem::<ReadResourceRequestParams>(request),
        "initialize" => problem::<InitializeRequestParams>(request),
        "tools/list" | "prompts/list" | "resources/list" | "resources/templates/list" => {
            problem::<PaginatedRequestParams>(request)
        }
        _ => {
            return ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {}", method.escape_debug()),
                None,
            );
        }
    };
    ErrorData::invalid_params(
        format!(
            "invalid params for {}: {}",
            method.escape_debug(),
            problem.unwrap_or_else(|| "they do not fit the method's schema".to_owned())
        ),
        None,
    )
}

/// The protocol version `meta` names when that revision has no `initialize` (2026-07-28 and
/// later, whose clients send `_meta` with every request).
pub(crate) fn without_initialize(meta: &RequestMetaObject) -> Option<ProtocolVersion> {
    meta.protocol_version().filter(|v| !v.has_initialize())
}

/// `-32601` (HTTP 404) for `initialize` on a request whose `_meta` names protocol version
/// `version`: revisions with per-request `_meta` have no `initialize`.
pub(crate) fn initialize_removed(version: &str) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode::METHOD_NOT_FOUND,
        format!(
            "method not found: initialize (this request's _meta names protocol version {}, which has no initialize; send _meta with each request, and server/discover to learn about the server)",
            version.escape_debug()
        ),
        None,
    )
}

/// What serde says is wrong with `params` read as `T`.
fn problem<T: DeserializeOwned>(request: &CustomRequest) -> Option<String> {
    let params = request.params.clone().unwrap_or(serde_json::Value::Null);
    match serde_path_to_error::deserialize::<_, T>(params) {
        Ok(_) => None,
        Err(err) => {
            let path = err.path().to_string();
            Some(if path == "." {
                err.inner().to_string()
            } else {
                format!("{path}: {}", err.inner())
            })
        }
    }
}
