//! Reading a `/mcp` request body before rmcp sees it: within `server.body_read_timeout`
//! (a half-sent body gets `408`, not a connection held forever) and `server.max_request_bytes`
//! (`413`). A body that is not one JSON-RPC message gets `400` with a JSON-RPC error, as
//! stdio answers it: `-32700` for malformed JSON, `-32600` for a batch array or another
//! value that is not a request, notification or response.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, StatusCode};
use serde_json::{Value, json};

/// The bounds of a body read.
#[derive(Clone, Copy, Debug)]
pub struct BodyLimits {
    /// Longest the whole body may take to arrive.
    pub read_timeout: Duration,
    /// Largest body accepted.
    pub max_bytes: usize,
}

/// Reads a POST body within `limits`, hands it on, and turns rmcp's refusal of an
/// unparsable JSON body (`415`) into `400` with a JSON-RPC error.
pub async fn read_body(State(limits): State<BodyLimits>, request: Request, next: Next) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let json = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
        });
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, limits.max_bytes);
    let bytes = match tokio::time::timeout(limits.read_timeout, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(err)) => {
            let too_large =
                std::iter::successors(Some(&err as &(dyn std::error::Error + 'static)), |e| {
                    e.source()
                })
                .any(|e| e.is::<http_body_util::LengthLimitError>());
            return if too_large {
                plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body exceeds {} bytes", limits.max_bytes),
                )
            } else {
                plain(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read".into(),
                )
            };
        }
        Err(_) => {
            return plain(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {}",
                    humantime::format_duration(limits.read_timeout)
                ),
            );
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes.clone())))
        .await;
    if json && response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE {
        return not_a_message(&bytes);
    }
    response
}

/// `400` with the JSON-RPC error for a body rmcp could not take as one message.
fn not_a_message(bytes: &[u8]) -> Response {
    let (code, message, id) = match serde_json::from_slice::<Value>(bytes) {
        Err(err) => (-32700, format!("Parse error: {err}"), Value::Null),
        Ok(Value::Array(_)) => (
            -32600,
            "Invalid Request: batch arrays are not supported; send one message per request"
                .to_owned(),
            Value::Null,
        ),
        Ok(value) => (
            -32600,
            "Invalid Request: not a JSON-RPC 2.0 request, notification or response".to_owned(),
            value
                .get("id")
                .filter(|id| id.is_string() || id.is_number())
                .cloned()
                .unwrap_or(Value::Null),
        ),
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn plain(status: StatusCode, message: String) -> Response {
    let mut response = (status, format!("{message}\n")).into_response();
    response
        .headers_mut()
        .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    response
}
