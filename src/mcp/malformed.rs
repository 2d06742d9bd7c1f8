//! Requests rmcp could not read. rmcp parses a request whose `params` do not fit the known
//! method's type (a `tools/call` whose `arguments` is a string) as a custom request, which
//! would be answered `-32601 "tools/call"` as if the method did not exist. A known method
//! with bad params is `-32602` naming what is wrong; an unknown method stays `-32601`.

use rmcp::model::{
    CallToolRequestParams, CustomRequest, ErrorData, GetPromptRequestParams,
    InitializeRequestParams, PaginatedRequestParams, ReadResourceRequestParams,
};
use serde::de::DeserializeOwned;

/// The error for a request that reached rmcp's custom-request fallback.
pub(crate) fn refuse(request: &CustomRequest) -> ErrorData {
    let method = request.method.as_str();
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
