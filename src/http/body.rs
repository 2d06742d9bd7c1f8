//! Reading a `/mcp` request body before rmcp sees it: within `server.body_read_timeout`
//! (a half-sent body gets `408`, not a connection held forever) and `server.max_request_bytes`
//! (`413`). A body that is not one JSON-RPC message gets `400` with a JSON-RPC error, as
//! stdio answers it: `-32700` for malformed JSON, `-32600` for a batch array or another
//! value that is not a request, notification or response.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
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

/// A request whose body has been read into memory.
pub(super) struct ReadRequest {
    /// The request, its body now the bytes read.
    pub request: Request,
    /// The body, when it was a POST declared `application/json` (for [`answer_refusal`]).
    pub json_body: Option<bytes::Bytes>,
}

/// Reads a POST body within `limits`; other methods pass as they are. A body too large, too
/// slow or broken gets its response (`413`, `408`, `400`) instead.
pub(super) async fn read(request: Request, limits: BodyLimits) -> Result<ReadRequest, Response> {
    if request.method() != Method::POST {
        return Ok(ReadRequest {
            request,
            json_body: None,
        });
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
            return Err(if too_large {
                plain(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("request body exceeds {} bytes", limits.max_bytes),
                )
            } else {
                plain(
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read".into(),
                )
            });
        }
        Err(_) => {
            return Err(plain(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {}",
                    humantime::format_duration(limits.read_timeout)
                ),
            ));
        }
    };
    Ok(ReadRequest {
        json_body: json.then(|| bytes.clone()),
        request: Request::from_parts(parts, Body::from(bytes)),
    })
}

/// rmcp's answer to a request read by [`read`], with its refusal of an unparsable JSON body
/// (`415`) turned into `400` with a JSON-RPC error.
pub(super) fn answer_refusal(json_body: Option<&[u8]>, response: Response) -> Response {
    match json_body {
        Some(bytes) if response.status() == StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            not_a_message(bytes)
        }
        _ => response,
    }
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
