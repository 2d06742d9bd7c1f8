//! Audit records in OpenTelemetry's conventions, as a SIEM's collector receives them:
//! `audit.format: otel` files that `audit verify`, `tail` and `query` read (and whose every
//! edited attribute verify names), and the `audit.otlp` copy of a real server's records
//! to an OTLP/HTTP receiver decoding the official protobuf definitions, through a collector
//! outage: calls go on, records beyond the queue are dropped and counted in `/metrics`,
//! the export resumes (honouring `Retry-After`) and every record is either received or
//! counted as dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Kind;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message as _;
use querygate::audit::chain::Stored;
use querygate::audit::format::parse_line;
use querygate::audit::{FileLocation, location};
use querygate::config::{Config, Sources};
use serde_json::json;
use tokio::sync::watch;

use crate::mcp_support::{call, install_crypto_provider, modern_client, test_config};
use crate::mock::{Mock, Reply};
use crate::support::querygate_command;
use crate::support::wait::eventually;

const SELECT: &str = "SELECT id, name FROM testapi.items.items WHERE org = 'acme'";

/// An OTLP/HTTP logs receiver on 127.0.0.1. While `down`, each export waits until the
/// receiver is up again and is then answered `503` with `Retry-After: 0` (a collector that
/// hangs, then sheds load); up, it decodes the request and keeps its LogRecords.
struct Receiver {
    endpoint: String,
    records: Arc<Mutex<Vec<LogRecord>>>,
    down: watch::Sender<bool>,
    /// Exports that arrived while down (held).
    held: watch::Receiver<u64>,
}

impl Receiver {
    async fn start() -> Receiver {
        let records: Arc<Mutex<Vec<LogRecord>>> = Arc::default();
        let (down, down_rx) = watch::channel(false);
        let (held_tx, held) = watch::channel(0u64);
        let held_tx = Arc::new(held_tx);
        let kept = records.clone();
        let app = axum::Router::new().route(
            "/v1/logs",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                    let (kept, mut down_rx, held_tx) =
                        (kept.clone(), down_rx.clone(), held_tx.clone());
                    async move {
                        use axum::response::IntoResponse as _;
                        if *down_rx.borrow_and_update() {
                            held_tx.send_modify(|n| *n += 1);
                            let _ = down_rx.wait_for(|down| !*down).await;
                            return (
                                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                [("retry-after", "0")],
                            )
                                .into_response();
                        }
                        assert_eq!(
                            headers["content-type"], "application/x-protobuf",
                            "{headers:?}"
                        );
                        assert_eq!(headers["x-siem-token"], "t0ken");
                        let request = ExportLogsServiceRequest::decode(body).unwrap();
                        let mut kept = kept.lock().unwrap();
                        for resource in request.resource_logs {
                            for scope in resource.scope_logs {
                                kept.extend(scope.log_records);
                            }
                        }
                        (
                            [("content-type", "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                            .into_response()
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            endpoint: format!("http://{addr}/v1/logs"),
            records,
            down,
            held,
        }
    }

    fn received(&self) -> Vec<LogRecord> {
        self.records.lock().unwrap().clone()
    }
}

fn attribute(record: &LogRecord, key: &str) -> Option<Kind> {
    record
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

fn text(record: &LogRecord, key: &str) -> String {
    match attribute(record, key) {
        Some(Kind::StringValue(s)) => s,
        other => panic!("{key}: {other:?}"),
    }
}

fn seq(record: &LogRecord) -> u64 {
    match attribute(record, "querygate.audit.seq") {
        Some(Kind::IntValue(n)) => u64::try_from(n).unwrap(),
        other => panic!("seq: {other:?}"),
    }
}

/// The records in the audit files of `dir`.
fn durable(dir: &std::path::Path) -> Vec<(Stored, String)> {
    let files = location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap();
    let mut out = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            assert!(line.starts_with("{\"resourceLogs\""), "{line}");
            let parsed = parse_line(line).expect("an intact otel record");
            out.push((parsed.stored, parsed.hash));
        }
    }
    out
}

/// The counter `querygate_audit_otlp_records_total{result="<result>"}` at `/metrics`.
async fn exported(url: &str, result: &str) -> u64 {
    let metrics = format!("{}/metrics", url.trim_end_matches("/mcp"));
    let text = reqwest::get(metrics).await.unwrap().text().await.unwrap();
    let series = format!("querygate_audit_otlp_records_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(&series))
        .map(|v| v.trim().parse::<f64>().unwrap() as u64)
        .unwrap_or_else(|| panic!("no {series}in {text}"))
}

/// Waits until `/metrics` counts `n` exported records (the exporter counts a batch once
/// the receiver has answered).
async fn counted_exported(url: &str, n: u64) {
    eventually(
        &format!("{n} exported records counted"),
        Duration::from_secs(20),
        Duration::from_millis(20),
        || async move {
            let counted = exported(url, "exported").await;
            if counted == n { Ok(()) } else { Err(counted) }
        },
    )
    .await;
}

/// A served App whose audit is written as `otel` lines to `dir/audit`, with `otlp` (YAML
/// flow mapping) as its `audit.otlp`.
async fn serve(
    mock: &Mock,
    dir: &std::path::Path,
    otlp: Option<&str>,
) -> (String, tokio_util::sync::CancellationToken) {
    install_crypto_provider();
    let file = test_config(mock, dir, "read_only", "");
    let yaml = std::fs::read_to_string(&file).unwrap();
    let otlp = otlp.map(|o| format!("  otlp: {o}\n")).unwrap_or_default();
    let yaml = yaml.replacen("audit:\n", &format!("audit:\n  format: otel\n{otlp}"), 1);
    std::fs::write(&file, yaml).unwrap();
    serve_file(file).await
}

/// Serves the configuration in `file` in-process until the token is cancelled; its MCP URL.
async fn serve_file(file: std::path::PathBuf) -> (String, tokio_util::sync::CancellationToken) {
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::build(config).await.unwrap();
    let url = app.mcp_url();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
    (url, stop)
}

#[tokio::test]
async fn the_otlp_copy_reaches_the_collector_and_survives_its_outage() {
    let receiver = Receiver::start().await;
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let otlp = format!(
        "{{endpoint: '{}', headers: {{x-siem-token: t0ken}}, queue_size: 4, max_batch: 2, timeout: 60s, retry: {{initial_backoff: 10ms, max_backoff: 100ms, max_elapsed: 10m}}}}",
        receiver.endpoint
    );
    let (url, stop) = serve(&mock, dir.path(), Some(&otlp)).await;
    let audit = dir.path().join("audit");
    let client = modern_client(&url).await;
    call(&client, "server_info", json!({})).await;
    // The caller's trace context: its traceparent in `_meta`.
    let mut meta = rmcp::model::MetaObject::new();
    meta.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let mut arguments = serde_json::Map::new();
    arguments.insert("sql".into(), json!(SELECT));
    let mut params =
        rmcp::model::CallToolRequestParams::new("run_select_query").with_arguments(arguments);
    params.meta = Some(meta.into());
    let result = client.call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{result:?}");

    // Up: every durable record arrives, with the conventions' attributes and its hash.
    let first = durable(&audit);
    assert_eq!(first.len(), 2, "one outcome record per call");
    let received = eventually(
        "the first records at the receiver",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let got = receiver.received();
            std::future::ready(if got.len() == first.len() {
                Ok(got)
            } else {
                Err(got.len())
            })
        },
    )
    .await;
    for (stored, hash) in &first {
        let copy = received
            .iter()
            .find(|r| seq(r) == stored.seq)
            .unwrap_or_else(|| panic!("no copy of seq {}", stored.seq));
        assert_eq!(text(copy, "querygate.audit.hash"), *hash);
        assert_eq!(text(copy, "gen_ai.tool.name"), stored.record.tool);
        assert_eq!(text(copy, "gen_ai.tool.call.id"), stored.record.call_id);
        assert_eq!(text(copy, "mcp.method.name"), "tools/call");
        assert_eq!(text(copy, "querygate.tenant"), "default");
        assert_eq!(text(copy, "stackql.decision"), "allow");
        assert_eq!(text(copy, "stackql.mode"), "read_only");
        assert_eq!(copy.event_name, "querygate.audit.outcome");
        assert!(copy.time_unix_nano > 0 && copy.observed_time_unix_nano >= copy.time_unix_nano);
    }
    let select = received
        .iter()
        .find(|r| text(r, "gen_ai.tool.name") == "run_select_query")
        .unwrap();
    assert_eq!(text(select, "stackql.query"), SELECT);
    assert_eq!(text(select, "stackql.query_class"), "select");
    assert_eq!(
        attribute(select, "stackql.rows_returned"),
        Some(Kind::IntValue(1))
    );
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    assert_eq!(hex(&select.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        hex(&select.span_id),
        "00f067aa0ba902b7",
        "the caller's span"
    );
    counted_exported(&url, 2).await;

    // Down: the first export hangs; calls go on; the queue (4) fills and the rest drop.
    receiver.down.send_replace(true);
    call(&client, "server_info", json!({})).await;
    let mut held = receiver.held.clone();
    tokio::time::timeout(Duration::from_secs(20), held.wait_for(|n| *n >= 1))
        .await
        .expect("the export reached the collector that is down")
        .unwrap();
    for _ in 0..10 {
        let result = call(&client, "server_info", json!({})).await;
        assert_ne!(result.is_error, Some(true), "calls go on: {result:?}");
    }
    let dropped = exported(&url, "dropped").await;
    // 11 records while down: one in the held export, 4 queued, 6 dropped.
    assert_eq!(
        dropped, 6,
        "records beyond the queue are dropped and counted"
    );

    // Up again: the held export is answered 503 + Retry-After: 0, retried and accepted;
    // the queue drains (1 held + 4 queued); then new calls are exported again.
    receiver.down.send_replace(false);
    eventually(
        "the held and queued records at the receiver",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let got = receiver.received().len();
            std::future::ready(if got == 2 + 5 { Ok(()) } else { Err(got) })
        },
    )
    .await;
    call(&client, "server_info", json!({})).await;
    let all = durable(&audit);
    assert_eq!(all.len(), 2 + 11 + 1);
    let received = eventually(
        "every record received or counted as dropped",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let got = receiver.received();
            std::future::ready(if got.len() as u64 + dropped == all.len() as u64 {
                Ok(got)
            } else {
                Err(got.len())
            })
        },
    )
    .await;
    let last = all.last().unwrap();
    assert!(
        received
            .iter()
            .any(|r| seq(r) == last.0.seq && text(r, "querygate.audit.hash") == last.1),
        "the export resumed"
    );
    counted_exported(&url, received.len() as u64).await;
    assert_eq!(exported(&url, "failed").await, 0);
    assert_eq!(exported(&url, "dropped").await, dropped);
    stop.cancel();
}

#[tokio::test]
async fn otlp_alone_exports_a_chained_stream_of_its_own() {
    let receiver = Receiver::start().await;
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    install_crypto_provider();
    let file = test_config(&mock, dir.path(), "read_only", "");
    let yaml = std::fs::read_to_string(&file).unwrap().replacen(
        "audit:\n",
        &format!(
            "audit:\n  sink: otlp\n  failure_mode: best_effort\n  otlp: {{endpoint: '{}', headers: {{x-siem-token: t0ken}}}}\n",
            receiver.endpoint
        ),
        1,
    );
    std::fs::write(&file, yaml).unwrap();
    let (url, stop) = serve_file(file).await;
    let client = modern_client(&url).await;
    for _ in 0..3 {
        call(&client, "server_info", json!({})).await;
    }
    let mut received = eventually(
        "three records at the receiver",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let got = receiver.received();
            std::future::ready(if got.len() == 3 {
                Ok(got)
            } else {
                Err(got.len())
            })
        },
    )
    .await;
    received.sort_by_key(seq);
    assert_eq!(received.iter().map(seq).collect::<Vec<_>>(), [1, 2, 3]);
    let stream = text(&received[0], "querygate.audit.stream");
    assert!(
        stream.contains('.'),
        "a stream of this start's own: {stream}"
    );
    assert_eq!(
        text(&received[0], "querygate.audit.prev_hash"),
        "0".repeat(64)
    );
    for pair in received.windows(2) {
        assert_eq!(text(&pair[1], "querygate.audit.stream"), stream);
        assert_eq!(
            text(&pair[1], "querygate.audit.prev_hash"),
            text(&pair[0], "querygate.audit.hash")
        );
    }
    assert!(
        !dir.path().join("audit").exists(),
        "nothing is written to files"
    );
    stop.cancel();
}

fn querygate(args: &[&str]) -> std::process::Output {
    querygate_command().args(args).output().unwrap()
}

#[tokio::test]
async fn otel_files_are_verified_read_and_every_edit_is_named() {
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let (url, stop) = serve(&mock, dir.path(), None).await;
    let client = modern_client(&url).await;
    call(&client, "server_info", json!({})).await;
    call(&client, "run_select_query", json!({"sql": SELECT})).await;
    call(&client, "server_info", json!({})).await;
    stop.cancel();
    let audit = dir.path().join("audit");
    assert_eq!(durable(&audit).len(), 3);
    let dir_arg = audit.to_str().unwrap().to_owned();
    let (verify, tail, query) = tokio::task::spawn_blocking({
        let dir_arg = dir_arg.clone();
        move || {
            (
                querygate(&["audit", "verify", &dir_arg]),
                querygate(&["audit", "tail", "-n", "3", &dir_arg]),
                querygate(&["audit", "query", "--tool", "run_select_query", &dir_arg]),
            )
        }
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("ok: 3 records in 1 streams"), "{out}");
    let out = String::from_utf8_lossy(&tail.stdout).into_owned();
    assert!(tail.status.success(), "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
    assert!(out.contains("SELECT id, name"), "{out}");
    let out = String::from_utf8_lossy(&query.stdout).into_owned();
    assert!(query.status.success(), "{out}");
    assert!(out.contains("(1 row)") && out.contains(SELECT), "{out}");

    let file = location::files_of(&FileLocation::Dir(audit.clone()))
        .unwrap()
        .pop()
        .unwrap();
    let original = std::fs::read_to_string(&file).unwrap();
    for (from, to) in [
        (
            "{\"stringValue\":\"default\"}",
            "{\"stringValue\":\"acme\"}",
        ),
        (
            "{\"stringValue\":\"read_only\"}",
            "{\"stringValue\":\"full_access\"}",
        ),
        ("\"severityNumber\":9", "\"severityNumber\":17"),
        (
            "{\"key\":\"mcp.method.name\",\"value\":{\"stringValue\":\"tools/call\"}}",
            "{\"key\":\"mcp.method.name\",\"value\":{\"stringValue\":\"tools/list\"}}",
        ),
    ] {
        assert!(original.contains(from), "{from}");
        std::fs::write(&file, original.replacen(from, to, 1)).unwrap();
        let verify = tokio::task::spawn_blocking({
            let dir_arg = dir_arg.clone();
            move || querygate(&["audit", "verify", &dir_arg])
        })
        .await
        .unwrap();
        let out = String::from_utf8_lossy(&verify.stdout);
        assert_eq!(verify.status.code(), Some(1), "{from}: {out}");
        assert!(
            out.contains(":1: the record does not match its hash"),
            "{from}: {out}"
        );
    }
}
