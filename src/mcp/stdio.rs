//! `querygate stdio`: newline-delimited JSON-RPC on stdin/stdout for desktop clients.
//! Only protocol goes to stdout; logs go to stderr.
//!
//! rmcp's line codec is not handed the raw stdin. A framing layer sits in front of it:
//!
//! ```text
//! stdin → bounded line reader → strip `\r`, skip blank lines → classify
//!           ├─ not JSON            → -32700 (id null) ─┐
//!           ├─ not JSON-RPC 2.0    → -32600 (id null) ─┤
//!           ├─ over-long line      → -32600 (id null) ─┤
//!           ├─ id already in flight → -32600 (its id) ─┤
//!           └─ a message → duplex pipe → rmcp → pipe ──┴→ one writer → stdout
//! ```
//!
//! Every line that reaches stdout goes through one writer task, whole, so the framing
//! layer's error responses never split one of rmcp's. The session survives every bad
//! frame; it ends at EOF on stdin (exit 0) or when a stream fails (an error naming which).

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::ServiceExt as _;
use rmcp::service::ServerInitializeError;
use rmcp::transport::async_rw::AsyncRwTransport;
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::QuerygateMcp;

/// Bytes of the in-process pipe between the framing layer and rmcp, each way.
const PIPE_BYTES: usize = 256 * 1024;
/// Lines queued for stdout before producers wait.
const OUT_QUEUE: usize = 256;

/// JSON-RPC: the frame is not JSON.
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the frame is JSON but not a JSON-RPC 2.0 message.
const INVALID_REQUEST: i64 = -32600;

/// Why the stdio session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// Reading stdin failed.
    #[error("stdio transport failed: reading stdin: {0}")]
    Input(#[source] std::io::Error),
    /// Writing stdout failed.
    #[error("stdio transport failed: writing stdout: {0}")]
    Output(#[source] std::io::Error),
    /// The MCP session inside failed.
    #[error("stdio transport failed: {0}")]
    Transport(String),
}

/// Serves one session on stdin/stdout until the client closes stdin.
pub async fn serve(handler: QuerygateMcp) -> Result<(), StdioError> {
    // Non-blocking pipe handles when both streams are FIFOs (how clients start us), the
    // blocking standard handles otherwise.
    let (input, output) = rmcp::transport::stdio_pipes();
    serve_io(handler, input, output).await
}

/// Serves one session over any byte streams (stdin/stdout in production, pipes in tests).
#[expect(
    clippy::too_many_lines,
    reason = "one session's select loop over stdin, the writer and rmcp, whose arms share the session's state"
)]
pub async fn serve_io<R, W>(handler: QuerygateMcp, input: R, output: W) -> Result<(), StdioError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let max_line = handler.max_request_bytes().max(1024);
    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let (from_rmcp, mut to_rmcp) = tokio::io::split(ours);
    let (rmcp_read, rmcp_write) = tokio::io::split(theirs);
    // Our limit applies first; rmcp's must not be the tighter one.
    let transport =
        AsyncRwTransport::new_server(rmcp_read, rmcp_write).with_max_line_length(max_line + 2);
    // Cancelled when stdout fails or the session ends: stop reading stdin then.
    let stop = CancellationToken::new();
    let session_done = stop.clone().drop_guard();
    let session = tokio::spawn(async move {
        let _done = session_done;
        match handler.serve(transport).await {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|err| format!("the MCP session failed: {err}")),
            // EOF before the client's first message: a clean, empty session.
            Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(err) => Err(format!("the MCP session could not start: {err}")),
        }
    });

    let (lines, queue) = mpsc::channel::<Vec<u8>>(OUT_QUEUE);
    let writer_failed = stop.clone();
    let writer = tokio::spawn(async move {
        let written = write_lines(queue, output).await;
        if written.is_err() {
            writer_failed.cancel();
        }
        written
    });
    let in_flight = InFlight::default();
    let pump = tokio::spawn(pump_lines(
        BufReader::new(from_rmcp),
        lines.clone(),
        in_flight.clone(),
    ));

    let mut reader = BufReader::new(input);
    let mut buf = Vec::new();
    let mut lifecycle_started = false;
    let mut outcome = Ok(());
    loop {
        let read = tokio::select! {
            read = read_bounded_line(&mut reader, &mut buf, max_line) => read,
            () = stop.cancelled() => break,
        };
        let read = match read {
            Ok(read) => read,
            Err(err) => {
                outcome = Err(StdioError::Input(err));
                break;
            }
        };
        let frame = match read {
            LineRead::Eof => break,
            LineRead::TooLong => Frame::Reject(error_response(
                INVALID_REQUEST,
                format!("invalid request: the line exceeds {max_line} bytes"),
            )),
            LineRead::Line => in_flight.admit(classify(&buf)),
        };
        match frame {
            Frame::Skip => {}
            Frame::Reject(response) => {
                tracing::debug!("stdio: refused a frame: {response}");
                if lines.send(line_of(&response)).await.is_err() {
                    // The writer stopped: its error is the outcome.
                    break;
                }
            }
            Frame::Forward { line, is_request } => {
                // rmcp ends the session when its first message is not a request; a stray
                // notification or response before any request is dropped instead.
                if !lifecycle_started && !is_request {
                    tracing::warn!(
                        "stdio: dropped a notification or response sent before any request"
                    );
                    continue;
                }
                lifecycle_started |= is_request;
                let sent = async {
                    to_rmcp.write_all(&line).await?;
                    to_rmcp.write_all(b"\n").await?;
                    to_rmcp.flush().await
                }
                .await;
                if sent.is_err() {
                    // rmcp's side is gone: its result says why.
                    break;
                }
            }
        }
    }
    drop(lines);
    // EOF for rmcp: it answers what it has in flight, then ends.
    let _ = to_rmcp.shutdown().await;
    drop(to_rmcp);

    let session = session
        .await
        .map_err(|err| StdioError::Transport(format!("the MCP session panicked: {err}")))
        .and_then(|ended| ended.map_err(StdioError::Transport));
    let _ = pump.await;
    let written = match writer.await {
        Ok(written) => written.map_err(StdioError::Output),
        Err(err) => Err(StdioError::Transport(format!(
            "the stdout writer panicked: {err}"
        ))),
    };
    outcome.and(written).and(session)
}

/// The ids of the client's requests that rmcp has not answered yet. rmcp keeps one entry
/// per id, so a second request with the same id would replace the first and one of them
/// would never be answered: the duplicate is refused instead.
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<HashSet<String>>>);

impl InFlight {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a request's id, or turns a request whose id is in flight into an error
    /// response carrying that id; a cancellation frees the id it names.
    fn admit(&self, frame: Frame) -> Frame {
        let Frame::Forward { line, is_request } = frame else {
            return frame;
        };
        let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(&line) else {
            return Frame::Forward { line, is_request };
        };
        let method = message.get("method").and_then(Value::as_str);
        if method == Some("notifications/cancelled")
            && let Some(id) = message.get("params").and_then(|p| p.get("requestId"))
        {
            self.ids().remove(&id.to_string());
        }
        if is_request
            && let Some(id) = message.get("id")
            && !self.ids().insert(id.to_string())
        {
            return Frame::Reject(json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": INVALID_REQUEST,
                    "message": format!("invalid request: a request with id {id} is still in flight; use a new id"),
                },
            }));
        }
        Frame::Forward { line, is_request }
    }

    /// Frees the id of a response rmcp wrote.
    fn answered(&self, line: &[u8]) {
        if let Ok(Value::Object(message)) = serde_json::from_slice::<Value>(line)
            && !message.contains_key("method")
            && let Some(id) = message.get("id")
        {
            self.ids().remove(&id.to_string());
        }
    }
}

/// What one line of input is.
#[derive(Debug, PartialEq)]
enum Frame {
    /// Blank: nothing to do.
    Skip,
    /// A JSON-RPC 2.0 message for rmcp (`\r` removed); `is_request` when it has a method
    /// and an id.
    Forward { line: Vec<u8>, is_request: bool },
    /// Answer with this error response and go on.
    Reject(Value),
}

/// Classifies one line (without its `\n`).
fn classify(raw: &[u8]) -> Frame {
    let line: Vec<u8> = raw.iter().copied().filter(|b| *b != b'\r').collect();
    if line.iter().all(u8::is_ascii_whitespace) {
        return Frame::Skip;
    }
    let value: Value = match serde_json::from_slice(&line) {
        Ok(value) => value,
        Err(err) => {
            return Frame::Reject(error_response(PARSE_ERROR, format!("parse error: {err}")));
        }
    };
    let Value::Object(message) = &value else {
        return Frame::Reject(error_response(
            INVALID_REQUEST,
            format!(
                "invalid request: expected a JSON-RPC 2.0 object, got {}",
                kind_of(&value)
            ),
        ));
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Frame::Reject(error_response(
            INVALID_REQUEST,
            "invalid request: \"jsonrpc\" must be \"2.0\"".to_owned(),
        ));
    }
    let has_id = message.get("id").is_some_and(|id| !id.is_null());
    match message.get("method") {
        Some(Value::String(_)) => Frame::Forward {
            line,
            is_request: has_id,
        },
        Some(_) => Frame::Reject(error_response(
            INVALID_REQUEST,
            "invalid request: \"method\" must be a string".to_owned(),
        )),
        None if message.contains_key("result") || message.contains_key("error") => {
            Frame::Forward {
                line,
                is_request: false,
            }
        }
        None => Frame::Reject(error_response(
            INVALID_REQUEST,
            "invalid request: neither a request or notification (\"method\") nor a response (\"result\" or \"error\")".to_owned(),
        )),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array (batches are not supported)",
        Value::Object(_) => "an object",
    }
}

fn error_response(code: i64, message: String) -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}})
}

fn line_of(value: &Value) -> Vec<u8> {
    let mut line = value.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// The outcome of reading one line.
#[derive(Debug, PartialEq)]
enum LineRead {
    /// A line is in the buffer (without its `\n`); a last line without one counts too.
    Line,
    /// The line was longer than the limit; it has been skipped to its end.
    TooLong,
    /// No more input.
    Eof,
}

/// Reads one `\n`-terminated line into `buf` without holding more than `max` bytes of it.
async fn read_bounded_line<R>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<LineRead>
where
    R: AsyncBufRead + Unpin,
{
    buf.clear();
    let mut too_long = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if too_long {
                LineRead::TooLong
            } else if buf.is_empty() {
                LineRead::Eof
            } else {
                LineRead::Line
            });
        }
        let (chunk, used, done) = match available.iter().position(|b| *b == b'\n') {
            Some(end) => (&available[..end], end + 1, true),
            None => (available, available.len(), false),
        };
        if !too_long {
            if buf.len() + chunk.len() > max {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(chunk);
            }
        }
        reader.consume(used);
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

/// Copies rmcp's output, line by line, into the stdout queue.
async fn pump_lines<R>(mut from_rmcp: R, lines: mpsc::Sender<Vec<u8>>, in_flight: InFlight)
where
    R: AsyncBufRead + Unpin,
{
    loop {
        let mut line = Vec::new();
        match from_rmcp.read_until(b'\n', &mut line).await {
            Ok(0) => return,
            Ok(_) => {
                in_flight.answered(&line);
                if !line.ends_with(b"\n") {
                    line.push(b'\n');
                }
                if lines.send(line).await.is_err() {
                    return;
                }
            }
            Err(err) => {
                tracing::error!("stdio: reading rmcp's output failed: {err}");
                return;
            }
        }
    }
}

/// The one writer of stdout: whole lines, flushed whenever the queue runs dry.
async fn write_lines<W>(mut queue: mpsc::Receiver<Vec<u8>>, mut output: W) -> std::io::Result<()>
where
    W: AsyncWrite + Unpin,
{
    let mut pending = VecDeque::new();
    while let Some(line) = queue.recv().await {
        pending.push_back(line);
        while let Ok(more) = queue.try_recv() {
            pending.push_back(more);
        }
        while let Some(line) = pending.pop_front() {
            output.write_all(&line).await?;
        }
        output.flush().await?;
    }
    output.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_of(frame: &Frame) -> i64 {
        match frame {
            Frame::Reject(v) => {
                assert_eq!(v["id"], Value::Null);
                assert_eq!(v["jsonrpc"], "2.0");
                v["error"]["code"].as_i64().unwrap_or_default()
            }
            other => panic!("not rejected: {other:?}"),
        }
    }

    #[test]
    fn classifies_frames() {
        assert_eq!(classify(b""), Frame::Skip);
        assert_eq!(classify(b" \r\r"), Frame::Skip);
        assert_eq!(code_of(&classify(b"{this is not json")), PARSE_ERROR);
        assert_eq!(code_of(&classify(b"{\"jsonrpc\":")), PARSE_ERROR);
        assert_eq!(code_of(&classify(b"not-json-token")), PARSE_ERROR);
        assert_eq!(code_of(&classify(b"hello")), PARSE_ERROR);
        assert_eq!(code_of(&classify(b"\xff\xfe")), PARSE_ERROR);
        assert_eq!(code_of(&classify(b"42")), INVALID_REQUEST);
        assert_eq!(code_of(&classify(b"\"hello\"")), INVALID_REQUEST);
        assert_eq!(code_of(&classify(b"[]")), INVALID_REQUEST);
        assert_eq!(code_of(&classify(b"{\"foo\":1}")), INVALID_REQUEST);
        assert_eq!(
            code_of(&classify(br#"{"jsonrpc":"2.0","nonsense":true}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(&classify(br#"{"jsonrpc":"1.0","method":"ping","id":1}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            code_of(&classify(br#"{"jsonrpc":"2.0","method":3,"id":1}"#)),
            INVALID_REQUEST
        );
        assert_eq!(
            classify(b"{\"jsonrpc\":\"2.0\",\r\"method\":\"ping\",\"id\":1}\r"),
            Frame::Forward {
                line: br#"{"jsonrpc":"2.0","method":"ping","id":1}"#.to_vec(),
                is_request: true
            }
        );
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Frame::Forward {
                is_request: false,
                ..
            }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":4,"result":{}}"#),
            Frame::Forward {
                is_request: false,
                ..
            }
        ));
    }

    #[tokio::test]
    async fn lines_are_bounded_and_the_reader_goes_on() {
        let input: &[u8] = b"short\nthis line is far too long\r\n\nlast";
        let mut reader = BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut seen = Vec::new();
        loop {
            let read = read_bounded_line(&mut reader, &mut buf, 10).await.unwrap();
            if read == LineRead::Eof {
                break;
            }
            seen.push((read, String::from_utf8_lossy(&buf).into_owned()));
        }
        assert_eq!(
            seen,
            vec![
                (LineRead::Line, "short".to_owned()),
                (LineRead::TooLong, String::new()),
                (LineRead::Line, String::new()),
                (LineRead::Line, "last".to_owned()),
            ]
        );
    }
}
