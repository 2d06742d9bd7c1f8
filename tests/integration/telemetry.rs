//! Telemetry as operators see it: `/metrics` scraped after real calls, JSON logs of a
//! `querygate serve` process, and OpenTelemetry traces received by an OTLP/HTTP collector on
//! 127.0.0.1 — each driven by real MCP clients over HTTP.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use querygate::audit::FileLocation;
use querygate::audit::format::parse_line;
use querygate::audit::location;
use rmcp::model::{CallToolRequestParams, MetaObject};
use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};
use crate::support::raw::RawCall;
use crate::support::wait::eventually;
use crate::support::{SECRET, fixture_registry};

const SELECT: &str = "SELECT id, name FROM testapi.items.items WHERE org = 'acme'";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn metrics_url(mcp_url: &str) -> String {
    format!("{}/metrics", mcp_url.trim_end_matches("/mcp"))
}

async fn scrape(mcp_url: &str) -> String {
    let response = reqwest::Client::new()
        .get(metrics_url(mcp_url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{:?}",
        response.headers()
    );
    response.text().await.unwrap()
}

/// The value of the sample `name{labels}` (exact label text), or 0 when absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|value| value.trim().parse().unwrap())
        .unwrap_or(0.0)
}

/// Every value the label `label` takes in samples of metric `name`.
fn label_values(text: &str, name: &str, label: &str) -> BTreeSet<String> {
    let needle = format!("{label}=\"");
    text.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")))
        .filter_map(|line| {
            let start = line.find(&needle)? + needle.len();
            let end = line[start..].find('"')?;
            Some(line[start..start + end].to_owned())
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_real_calls_with_bounded_labels() {
    // (Appended after `server:`, so a top-level section.)
    let server = start(
        "safe",
        "upstream:\n  timeout: 300ms\n  retry:\n    attempts: 1\n",
    )
    .await;
    server.mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])),
    );
    server
        .mock
        .route("/orgs/broken/items", Reply::status(503, "down"));
    server.mock.route(
        "/orgs/slow/items",
        Reply::json(json!([])).delayed(Duration::from_secs(2)),
    );
    let before = scrape(&server.url).await;
    let build = format!(
        "querygate_build_info{{version=\"{}\",commit=\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        before
            .lines()
            .any(|line| line.starts_with(&build) && line.ends_with("} 1")),
        "{before}"
    );
    let client = modern_client(&server.url).await;

    let ok = call(&client, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(ok.is_error, Some(true), "{}", text_of(&ok));
    let refused = call(
        &client,
        "run_select_query",
        json!({"sql": "DELETE FROM testapi.items.items WHERE org = 'acme'"}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true));
    let failed = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'broken'"}),
    )
    .await;
    assert_eq!(error_code(&failed), "upstream.rejected");
    let slow = call(
        &client,
        "run_select_query",
        json!({"sql": "SELECT id FROM testapi.items.items WHERE org = 'slow'"}),
    )
    .await;
    assert_eq!(
        error_code(&slow),
        "upstream.unavailable",
        "{}",
        text_of(&slow)
    );
    // A write needs approval, and this client cannot be asked.
    let held = call(
        &client,
        "run_mutation_query",
        json!({"sql": crate::support::gate::DELETE}),
    )
    .await;
    assert_eq!(error_code(&held), "policy.approval_required");
    // An unknown tool and a hostile name: refused, and no new label values.
    let hostile = "x\"} 1\nquerygate_pwned_total{a=\"b";
    for name in ["no_such_tool", hostile] {
        assert!(try_call(&client, name, json!({})).await.is_err());
    }

    let text = scrape(&server.url).await;
    let calls = |labels: &str| sample(&text, &format!("querygate_tool_calls_total{{{labels}}}"));
    assert_eq!(
        calls("tool=\"run_select_query\",decision=\"allow\",code=\"ok\",tenant=\"default\""),
        1.0,
        "{text}"
    );
    assert_eq!(
        calls(
            "tool=\"run_select_query\",decision=\"refuse_immediate\",code=\"policy.wrong_tool\",tenant=\"default\""
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        calls(
            "tool=\"run_select_query\",decision=\"allow\",code=\"upstream.rejected\",tenant=\"default\""
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        calls(
            "tool=\"unknown\",decision=\"refuse_immediate\",code=\"arguments.invalid\",tenant=\"default\""
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        calls(
            "tool=\"run_mutation_query\",decision=\"needs_approval_unavailable\",code=\"policy.approval_required\",tenant=\"default\""
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "querygate_approvals_total{outcome=\"unavailable\"}"),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "querygate_tool_call_duration_seconds_count{tool=\"run_select_query\",tenant=\"default\"}"
        ),
        4.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "querygate_calls_in_flight{tenant=\"default\"}"),
        0.0
    );
    // The upstream saw one 2xx and one 5xx (a 503 is retried: each attempt is a request).
    assert_eq!(
        sample(
            &text,
            "querygate_upstream_requests_total{provider=\"testapi\",status_class=\"2xx\"}"
        ),
        1.0,
        "{text}"
    );
    let failures = sample(
        &text,
        "querygate_upstream_requests_total{provider=\"testapi\",status_class=\"5xx\"}",
    );
    assert_eq!(
        failures,
        server
            .mock
            .paths()
            .iter()
            .filter(|p| p.contains("broken"))
            .count() as f64,
        "{text}"
    );
    assert_eq!(failures, 1.0, "retry.attempts is 1");
    assert_eq!(
        sample(
            &text,
            "querygate_upstream_requests_total{provider=\"testapi\",status_class=\"timeout\"}"
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        calls(
            "tool=\"run_select_query\",decision=\"allow\",code=\"upstream.unavailable\",tenant=\"default\""
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "querygate_upstream_request_duration_seconds_count{provider=\"testapi\"}"
        ),
        3.0
    );
    // Every call's outcome record was written to the file sink and timed; none failed.
    assert!(
        sample(
            &text,
            "querygate_audit_write_duration_seconds_count{sink=\"file\"}"
        ) >= 5.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "querygate_audit_write_failures_total{sink=\"file\"}"),
        0.0
    );
    assert!(text.contains("querygate_audit_write_failures_total{sink=\"file\"} 0"));

    // Bounded label sets: the catalogue plus `unknown`; the configured tenant; nothing of
    // the hostile name anywhere.
    let tools = label_values(&text, "querygate_tool_calls_total", "tool");
    assert_eq!(
        tools,
        BTreeSet::from([
            "run_mutation_query".to_owned(),
            "run_select_query".to_owned(),
            "unknown".to_owned()
        ])
    );
    assert_eq!(
        label_values(&text, "querygate_tool_calls_total", "tenant"),
        BTreeSet::from(["default".to_owned()])
    );
    assert!(
        !text.contains("pwned") && !text.contains("no_such_tool"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));
    check_contract(&text);
}

/// Every metric of docs/deployment.md's contract table is exposed with its type and exactly
/// its labels, and nothing else is.
fn check_contract(text: &str) {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment.md"))
            .unwrap();
    let mut names = BTreeSet::new();
    for line in doc.lines().filter(|l| l.starts_with("| `querygate_")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let name = cells[1].trim_matches('`');
        let kind = cells[2];
        let labels: BTreeSet<String> = cells[3]
            .split(',')
            .map(|l| l.trim().trim_matches('`').to_owned())
            .collect();
        // OpenMetrics names a counter's family without `_total`.
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            text.contains(&format!("# TYPE {family} {kind}\n")),
            "{name} is not a {kind}: {text}"
        );
        names.insert(family.to_owned());
        let series = match kind {
            "histogram" => format!("{name}_count{{"),
            _ => format!("{name}{{"),
        };
        let sample = text
            .lines()
            .find(|l| l.starts_with(&series))
            .unwrap_or_else(|| panic!("no sample of {name}: {text}"));
        let inner = &sample[series.len()..sample.find('}').unwrap()];
        let found: BTreeSet<String> = inner
            .split("\",")
            .map(|pair| pair.split('=').next().unwrap().to_owned())
            .collect();
        assert_eq!(found, labels, "labels of {name}");
    }
    let exposed: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    assert_eq!(exposed, names, "exposed metrics differ from the contract");
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    let server = start_yaml(|mock, _dir| {
        format!(
            "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {mock}\naudit:\n  enabled: false\ntelemetry:\n  metrics:\n    enabled: false\nserver:\n  listen: 127.0.0.1:0\n",
            fixture_registry().display()
        )
    })
    .await;
    let response = reqwest::get(metrics_url(&server.url)).await.unwrap();
    assert_eq!(response.status(), 404);
}

// --- logs and traces: a `querygate serve` process -------------------------------------------

/// A JWT signing key, its public key file, and tokens for the tenant `acme`.
struct Jwt {
    pair: rcgen::KeyPair,
}

impl Jwt {
    fn new() -> Self {
        Jwt {
            pair: rcgen::KeyPair::generate().unwrap(),
        }
    }

    fn token(&self) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let claims = json!({"iss": "https://idp.test", "aud": "https://querygate.test/mcp",
            "sub": "acme-agent", "tenant": "acme", "exp": now + 600, "nbf": now - 10, "iat": now});
        let key =
            jsonwebtoken::EncodingKey::from_ec_pem(self.pair.serialize_pem().as_bytes()).unwrap();
        jsonwebtoken::encode(
            &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
            &claims,
            &key,
        )
        .unwrap()
    }
}

/// A configuration for `serve`: tenant `acme` authenticated by JWT (static key), its
/// credential `SECRET` for the mock upstream, audit files in `dir/audit`, and `extra`.
fn serve_config(mock: &Mock, dir: &Path, jwt: &Jwt, extra: &str) -> std::path::PathBuf {
    let key = dir.join("jwt.pub.pem");
    std::fs::write(&key, jwt.pair.public_key_pem()).unwrap();
    let creds = dir.join("acme.env");
    std::fs::write(&creds, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    let yaml = format!(
        "registry:\n  root: {root}\n  url: {url}/registry\nproviders:\n  testapi:\n    base_url: {url}\ncredentials:\n  process_env: false\ntenants:\n  - id: default\n  - id: acme\n    mode: read_only\n    credentials:\n      env_file: {creds}\naudit:\n  file:\n    dir: {audit}\nauth:\n  resource: https://querygate.test/mcp\n  authorization_servers: [https://idp.test]\n  jwt:\n    issuers:\n      - issuer: https://idp.test\n        public_keys: [{key}]\n        algorithms: [ES256]\n        tenants: [default, acme]\nserver:\n  listen: 127.0.0.1:0\n{extra}",
        root = fixture_registry().display(),
        url = mock.url(),
        creds = creds.display(),
        audit = dir.join("audit").display(),
        key = key.display(),
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Calls `run_select_query` with `traceparent` in the request's `_meta`.
async fn traced_select(client: &Client, traceparent: &str) {
    let mut meta = MetaObject::new();
    meta.set_traceparent(traceparent);
    let mut arguments = serde_json::Map::new();
    arguments.insert("sql".into(), Value::from(SELECT));
    let mut params = CallToolRequestParams::new("run_select_query").with_arguments(arguments);
    params.meta = Some(meta.into());
    let result = client.call_tool(params).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
}

/// The trace ids of the outcome records in the audit folder, by tool.
fn audited_trace_ids(dir: &Path) -> Vec<(String, Option<String>)> {
    let files = location::files_of(&FileLocation::Dir(dir.join("audit"))).unwrap();
    let mut out = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            let record = parse_line(line).unwrap().stored.record;
            out.push((record.tool.clone(), record.trace_id.clone()));
        }
    }
    out
}

#[tokio::test]
async fn json_logs_carry_the_trace_id_and_never_credentials() {
    install_crypto_provider();
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let jwt = Jwt::new();
    let config = serve_config(
        &mock,
        dir.path(),
        &jwt,
        "log:\n  format: json\n  level: debug\n",
    );
    let (url, mut child, stderr) = spawn_serve(&config).await;
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let collected = lines.clone();
    let reader = tokio::spawn(async move {
        let mut stderr = stderr;
        while let Ok(Some(line)) = stderr.next_line().await {
            collected.lock().unwrap().push(line);
        }
    });
    let token = jwt.token();
    let client =
        crate::support::identity::rmcp_client(reqwest::Client::new(), &url, Some(&token)).await;
    traced_select(&client, TRACEPARENT).await;
    drop(client);
    // The call's log line is written before its reply; wait until the pipe brought it, then
    // stop.
    let _ = crate::support::wait::try_eventually(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let seen = lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("tool call finished"));
            std::future::ready(seen)
        },
    )
    .await;
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = reader.await;
    let lines = lines.lock().unwrap().clone();
    let all = lines.join("\n");
    assert!(!all.contains(&token), "the bearer token is in the logs");
    for part in token.split('.') {
        assert!(
            !all.contains(part),
            "part of the bearer token is in the logs"
        );
    }
    assert!(
        !all.contains(SECRET),
        "the upstream credential is in the logs"
    );
    let json: Vec<Value> = lines
        .iter()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!json.is_empty(), "no JSON log lines: {all}");
    let finished = json
        .iter()
        .find(|line| line["message"] == "tool call finished")
        .unwrap_or_else(|| panic!("no line for the call: {all}"));
    let span = finished["spans"]
        .as_array()
        .and_then(|spans| spans.iter().find(|s| s["name"] == "tool_call"))
        .unwrap_or_else(|| panic!("no tool_call span: {finished}"));
    assert_eq!(span["trace_id"], TRACE_ID, "{finished}");
    assert_eq!(finished["trace_id"], TRACE_ID, "{finished}");
    assert!(
        lines
            .iter()
            .find(|l| l.contains("tool call finished"))
            .unwrap()
            .starts_with(&format!("{{\"trace_id\":\"{TRACE_ID}\",")),
    );
    assert_eq!(span["tenant"], "acme");
    assert_eq!(span["tool"], "run_select_query");
    assert_eq!(finished["decision"], "allow", "{finished}");
    assert_eq!(finished["code"], "ok", "{finished}");
    // Without traces the audit record takes the trace id of the caller's traceparent.
    assert!(
        audited_trace_ids(dir.path())
            .iter()
            .any(|(tool, id)| tool == "run_select_query" && id.as_deref() == Some(TRACE_ID))
    );
}

/// An OTLP/HTTP collector on 127.0.0.1: every span of every `POST /v1/traces`.
struct Collector {
    endpoint: String,
    spans: Arc<Mutex<Vec<Span>>>,
    /// The `service.name` of every resource that sent spans.
    services: Arc<Mutex<BTreeSet<String>>>,
}

impl Collector {
    async fn start() -> Self {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let services: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let (received, named) = (spans.clone(), services.clone());
        let app =
            axum::Router::new().route(
                "/v1/traces",
                axum::routing::post(move |body: axum::body::Bytes| {
                    let (received, named) = (received.clone(), named.clone());
                    async move {
                        let request = ExportTraceServiceRequest::decode(body).unwrap();
                        let mut received = received.lock().unwrap();
                        for resource in request.resource_spans {
                            if let Some(name) = resource.resource.as_ref().and_then(|r| {
                                r.attributes.iter().find(|kv| kv.key == "service.name")
                            }) {
                                use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
                                if let Some(V::StringValue(name)) =
                                    name.value.as_ref().and_then(|v| v.value.as_ref())
                                {
                                    named.lock().unwrap().insert(name.clone());
                                }
                            }
                            for scope in resource.scope_spans {
                                received.extend(scope.spans);
                            }
                        }
                        (
                            [("content-type", "application/x-protobuf")],
                            Vec::<u8>::new(),
                        )
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Collector {
            endpoint: format!("http://{addr}"),
            spans,
            services,
        }
    }

    /// Waits (at most 20 s) until a span named `name` of trace `trace_id` arrived; returns
    /// that trace's spans.
    async fn wait_for(&self, trace_id: &str, name: &str) -> Vec<Span> {
        let what = format!("a span '{name}' of trace {trace_id}");
        eventually(
            &what,
            Duration::from_secs(20),
            Duration::from_millis(100),
            || {
                let trace: Vec<Span> = self
                    .spans
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|s| hex(&s.trace_id) == trace_id)
                    .cloned()
                    .collect();
                if trace.iter().any(|s| s.name == name) {
                    return std::future::ready(Ok(trace));
                }
                let received: Vec<(String, String)> = self
                    .spans
                    .lock()
                    .unwrap()
                    .iter()
                    .map(|s| (s.name.clone(), hex(&s.trace_id)))
                    .collect();
                std::future::ready(Err(received))
            },
        )
        .await
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attribute(span: &Span, key: &str) -> Option<String> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            V::StringValue(s) => Some(s.clone()),
            V::IntValue(i) => Some(i.to_string()),
            other => Some(format!("{other:?}")),
        })
}

#[tokio::test]
async fn traces_join_the_callers_trace_and_reach_the_audit() {
    install_crypto_provider();
    let collector = Collector::start().await;
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let jwt = Jwt::new();
    let config = serve_config(
        &mock,
        dir.path(),
        &jwt,
        &format!(
            "telemetry:\n  traces:\n    enabled: true\n    endpoint: {}\n    service_name: qg-test\n",
            collector.endpoint
        ),
    );
    let (url, mut child, _stderr) = spawn_serve(&config).await;
    let token = jwt.token();
    let client =
        crate::support::identity::rmcp_client(reqwest::Client::new(), &url, Some(&token)).await;

    // The traceparent in MCP `_meta`.
    traced_select(&client, TRACEPARENT).await;
    let trace = collector.wait_for(TRACE_ID, "sqlite_eval").await;
    let call = trace
        .iter()
        .find(|s| s.name == "tools/call run_select_query")
        .unwrap_or_else(|| panic!("no tool call span: {trace:?}"));
    assert_eq!(hex(&call.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(attribute(call, "tenant").as_deref(), Some("acme"));
    assert_eq!(attribute(call, "tool").as_deref(), Some("run_select_query"));
    assert_eq!(attribute(call, "class").as_deref(), Some("select"));
    assert_eq!(attribute(call, "decision").as_deref(), Some("allow"));
    assert_eq!(attribute(call, "code").as_deref(), Some("ok"));
    let children: Vec<&Span> = trace
        .iter()
        .filter(|s| s.parent_span_id == call.span_id)
        .collect();
    let upstream = children
        .iter()
        .find(|s| s.name == "upstream_request")
        .unwrap_or_else(|| panic!("no upstream span under the call: {trace:?}"));
    assert_eq!(attribute(upstream, "provider").as_deref(), Some("testapi"));
    assert_eq!(
        attribute(upstream, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(
        children.iter().any(|s| s.name == "sqlite_eval"),
        "{trace:?}"
    );

    // The traceparent as an HTTP header of a raw request.
    let other_trace = "0af7651916cd43dd8448eb211c80319c";
    let response = RawCall::new("run_select_query", json!({"sql": SELECT}))
        .id(7)
        .bearer(&token)
        .header(
            "traceparent",
            format!("00-{other_trace}-b7ad6b7169203331-01"),
        )
        .send(&reqwest::Client::new(), &url)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let answer = response.text().await.unwrap();
    assert!(!answer.contains("isError\":true"), "{answer}");
    collector
        .wait_for(other_trace, "tools/call run_select_query")
        .await;

    // A call without a traceparent starts a trace of its own, named in its audit record.
    let started = call_tool_plain(&client).await;
    let audited = audited_trace_ids(dir.path());
    let ids: Vec<Option<&str>> = audited
        .iter()
        .filter(|(tool, _)| tool == "run_select_query")
        .map(|(_, id)| id.as_deref())
        .collect();
    assert_eq!(ids.len(), 3, "{audited:?}");
    assert_eq!(ids[0], Some(TRACE_ID));
    assert_eq!(ids[1], Some(other_trace));
    let own = ids[2].expect("a trace id without a traceparent");
    assert_eq!(own.len(), 32);
    assert_ne!(own, TRACE_ID);
    collector.wait_for(own, "tools/call run_select_query").await;
    assert!(started);
    assert_eq!(
        *collector.services.lock().unwrap(),
        BTreeSet::from(["qg-test".to_owned()])
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Starts `querygate --config CONFIG serve --listen 127.0.0.1:0` with extra environment
/// variables; returns its MCP URL and the child.
async fn spawn_serve_with_env(
    config: &Path,
    env: &[(&str, &str)],
) -> (String, tokio::process::Child) {
    use crate::support::served::{serve_command, spawn_announced};
    let served = spawn_announced(
        serve_command(config)
            .args(["--listen", "127.0.0.1:0"])
            .envs(env.iter().copied()),
    )
    .await;
    let (url, child, mut stderr) = (served.url, served.child, served.stderr);
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    (url, child)
}

#[tokio::test]
async fn traces_are_configured_by_the_standard_otel_variables() {
    install_crypto_provider();
    let collector = Collector::start().await;
    let mock = Mock::start().await;
    mock.route(
        "/orgs/acme/items",
        Reply::json(json!([{"id": 1, "name": "a"}])),
    );
    let dir = tempfile::tempdir().unwrap();
    let jwt = Jwt::new();
    let config = serve_config(&mock, dir.path(), &jwt, "");
    let (url, mut child) = spawn_serve_with_env(
        &config,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_SERVICE_NAME", "qg-from-env"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    )
    .await;
    let client =
        crate::support::identity::rmcp_client(reqwest::Client::new(), &url, Some(&jwt.token()))
            .await;
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    traced_select(&client, &format!("00-{trace}-00f067aa0ba902b7-01")).await;
    collector.wait_for(trace, "upstream_request").await;
    assert_eq!(
        *collector.services.lock().unwrap(),
        BTreeSet::from(["qg-from-env".to_owned()])
    );
    let _ = child.start_kill();
    let _ = child.wait().await;
}

async fn call_tool_plain(client: &Client) -> bool {
    let result = call(client, "run_select_query", json!({"sql": SELECT})).await;
    result.is_error != Some(true)
}

#[tokio::test]
async fn failed_audit_writes_are_counted_by_sink() {
    use querygate::audit::memory::MemorySink;
    use querygate::audit::{Auditor, FailureMode};
    use querygate::config::{Config, Sources};
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(&mock, dir.path(), "read_only", "");
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let sink = Arc::new(MemorySink::new("r1"));
    // best_effort: the call goes on without its record; the failure is only counted.
    let auditor = Auditor::new(sink.clone(), FailureMode::BestEffort, "r1", None);
    let app = querygate::app::App::builder(config)
        .audit(Some(auditor))
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
    let client = modern_client(&url).await;
    call(&client, "server_info", json!({})).await;
    sink.set_failing(true);
    call(&client, "server_info", json!({})).await;
    call(&client, "server_info", json!({})).await;
    let text = scrape(&url).await;
    assert_eq!(
        sample(
            &text,
            "querygate_audit_write_failures_total{sink=\"memory\"}"
        ),
        2.0,
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "querygate_audit_write_duration_seconds_count{sink=\"memory\"}"
        ),
        3.0,
        "{text}"
    );
    stop.cancel();
}

#[tokio::test]
async fn the_admin_listener_serves_the_same_metrics() {
    use querygate::config::{Config, Sources};
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(
        &mock,
        dir.path(),
        "read_only",
        "  admin_listen: 127.0.0.1:0\n",
    );
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::build(config).await.unwrap();
    let url = app.mcp_url();
    let admin = format!(
        "http://{}/mcp",
        app.admin_addr().expect("an admin listener")
    );
    let stop = tokio_util::sync::CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
    let client = modern_client(&url).await;
    call(&client, "server_info", json!({})).await;
    let series = "querygate_tool_calls_total{tool=\"server_info\",decision=\"allow\",code=\"ok\",tenant=\"default\"}";
    assert_eq!(sample(&scrape(&admin).await, series), 1.0);
    assert_eq!(sample(&scrape(&url).await, series), 1.0);
    stop.cancel();
}
