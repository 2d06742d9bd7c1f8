//! A registry-wide execution sweep over the current StackQL registry (ignored by default:
//! `scripts/sweep.sh` runs it). For each resource with a SELECT method, a response is
//! synthesized from that method's own response schema (JSON, or XML for XML media types),
//! served by a mock upstream on 127.0.0.1, and `SELECT *` runs with every required
//! parameter filled; the columns DESCRIBE lists must come back with values. The report,
//! per provider (resources, ok, failures by cause), is printed and written to
//! `target/sweep-report.md`. `QUERYGATE_SWEEP_PROVIDERS=a,b` limits the providers.
//! Resources whose SELECT is only a view (`config.views`) are counted apart, not swept.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use querygate::engine::{
    Cell, CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings,
};
use querygate::policy::{Mode, QueryClass};
use serde_json::{Map, Value, json};

use crate::sweep_reads::{
    CaseMethod, Knowledge, Sent, SentLog, case_method, class_of, runs_unattended,
};

/// The body the mock answers every request with.
type Current = Arc<Mutex<(String, Vec<u8>)>>;

async fn start_mock(current: Current, log: SentLog) -> String {
    let app = Router::new().fallback(move |request: Request<Body>| {
        let current = current.clone();
        let log = log.clone();
        async move {
            let (parts, body) = request.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX)
                .await
                .map(|b| b.to_vec())
                .unwrap_or_default();
            log.lock().unwrap().push(Sent {
                method: parts.method.to_string(),
                path_and_query: parts
                    .uri
                    .path_and_query()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_default(),
                target: parts
                    .headers
                    .get("x-amz-target")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body,
            });
            let (content_type, body) = current.lock().unwrap().clone();
            Response::builder()
                .status(200)
                .header("content-type", content_type)
                .body(Body::from(body))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

/// Per provider: resources swept, ok, view-only resources, failures by cause.
#[derive(Default)]
struct Tally {
    swept: usize,
    ok: usize,
    views: usize,
    causes: BTreeMap<String, Vec<String>>,
    /// Cases that run, and are ok, with nobody to approve them in `read_only` and `safe`.
    read_only_ok: usize,
    safe_ok: usize,
    /// Cases the gate would not run unattended in `read_only`, by class and evidence.
    refused: BTreeMap<String, Vec<String>>,
}

/// Keys a synthesized response leaves out: next-page tokens would send the sweep after
/// pages that do not exist.
const TOKENS: [&str; 12] = [
    "nextLink",
    "@odata.nextLink",
    "NextToken",
    "nextToken",
    "nextPageToken",
    "NextMarker",
    "Marker",
    "NextContinuationToken",
    "ContinuationToken",
    "next_cursor",
    "next_page_token",
    "cursor",
];

/// The snake_case column names of [`TOKENS`] that differ from them.
const SNAKE_TOKENS: [&str; 6] = [
    "next_link",
    "next_token",
    "next_marker",
    "marker",
    "next_continuation_token",
    "continuation_token",
];

fn load_yaml(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_norway::from_str::<Value>(&text).ok()
}

/// `#/a/b` in `doc`.
fn at<'a>(doc: &'a Value, pointer: &str) -> Option<&'a Value> {
    doc.pointer(pointer.strip_prefix('#').unwrap_or(pointer))
}

fn deref<'a>(doc: &'a Value, mut value: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match value.get("$ref").and_then(Value::as_str) {
            Some(r) if r.starts_with('#') => match at(doc, r) {
                Some(target) => value = target,
                None => return value,
            },
            _ => return value,
        }
    }
    value
}

/// Bounds on a synthesized value: a `$ref` already being expanded on the way down (a
/// recursive schema) and anything past the depth or node budget becomes a leaf, so
/// Google's deep, wide schemas do not grow into gigabytes.
struct Synth<'a> {
    doc: &'a Value,
    refs: Vec<String>,
    nodes: usize,
}

/// Nodes one synthesized response may have.
const NODE_BUDGET: usize = 20_000;

/// A value for `schema`: every property filled, one item per array.
fn synthesize(doc: &Value, schema: &Value) -> Value {
    let mut st = Synth {
        doc,
        refs: Vec::new(),
        nodes: 0,
    };
    synth(&mut st, schema, 0)
}

fn synth(st: &mut Synth<'_>, schema: &Value, depth: usize) -> Value {
    st.nodes += 1;
    if depth > 7 || st.nodes > NODE_BUDGET {
        return json!("v1");
    }
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        if st.refs.iter().any(|seen| seen == r) {
            return json!("v1");
        }
        let target = deref(st.doc, schema);
        st.refs.push(r.to_owned());
        let out = synth(st, target, depth);
        st.refs.pop();
        return out;
    }
    if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for part in parts {
            if let Value::Object(m) = synth(st, part, depth + 1) {
                merge_into(&mut merged, m);
            }
        }
        if let Value::Object(m) = synth_plain(st, schema, depth) {
            merge_into(&mut merged, m);
        }
        return Value::Object(merged);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(parts) = schema.get(key).and_then(Value::as_array)
            && let Some(first) = parts.first()
        {
            // Objects of every alternative merged (DESCRIBE lists the union of their
            // properties), else the first alternative.
            let values: Vec<Value> = parts.iter().map(|p| synth(st, p, depth + 1)).collect();
            if values.iter().all(Value::is_object) {
                let mut merged = Map::new();
                for value in values {
                    if let Value::Object(m) = value {
                        merge_into(&mut merged, m);
                    }
                }
                return Value::Object(merged);
            }
            return synth(st, first, depth + 1);
        }
    }
    synth_plain(st, schema, depth)
}

/// `from` merged into `into`, objects under the same key merged in turn (two `allOf`
/// parts may each describe some of one nested object's properties).
fn merge_into(into: &mut Map<String, Value>, from: Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(&key), value) {
            (Some(Value::Object(old)), Value::Object(new)) => merge_into(old, new),
            (_, value) => {
                into.insert(key, value);
            }
        }
    }
}

fn synth_plain(st: &mut Synth<'_>, schema: &Value, depth: usize) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return first.clone();
    }
    let type_name = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string"),
        _ if schema.get("properties").is_some() => "object",
        _ if schema.get("items").is_some() => "array",
        _ => "",
    };
    match type_name {
        "object" => {
            let mut out = Map::new();
            if let Some(Value::Object(props)) = schema.get("properties") {
                for (name, prop) in props {
                    if TOKENS.contains(&name.as_str()) {
                        continue;
                    }
                    out.insert(name.clone(), synth(st, prop, depth + 1));
                }
            } else if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object())
            {
                out.insert("k1".to_owned(), synth(st, extra, depth + 1));
            } else {
                out.insert("k1".to_owned(), json!("v1"));
            }
            Value::Object(out)
        }
        "array" => {
            let item = schema
                .get("items")
                .cloned()
                .unwrap_or(json!({"type": "string"}));
            Value::Array(vec![synth(st, &item, depth + 1)])
        }
        "integer" => json!(7),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "string" => match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => json!("2024-01-02T03:04:05Z"),
            Some("date") => json!("2024-01-02"),
            _ => json!("v1"),
        },
        _ => json!("v1"),
    }
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `value` as XML elements named by `name`: objects as children, arrays as `member`
/// items under the wrapper (AWS's query protocol lists).
fn to_xml(name: &str, value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            out.push_str(&format!("<{name}>"));
            for (k, v) in map {
                to_xml(k, v, out);
            }
            out.push_str(&format!("</{name}>"));
        }
        Value::Array(items) => {
            out.push_str(&format!("<{name}>"));
            for item in items {
                to_xml("member", item, out);
            }
            out.push_str(&format!("</{name}>"));
        }
        Value::String(s) => out.push_str(&format!("<{name}>{}</{name}>", xml_escape(s))),
        other => out.push_str(&format!("<{name}>{other}</{name}>")),
    }
}

/// The XML body of an AWS query-protocol or REST-XML response whose rows are `rows`
/// (the display schema's `line_items`): two row elements under a wrapper no row field is
/// named after (a row with an `Items` field, CloudFront's, would be taken for the one row).
fn xml_body(action: &str, protocol: Option<&str>, row: &Value) -> String {
    let mut rows = String::new();
    for _ in 0..2 {
        to_xml("member", row, &mut rows);
    }
    match protocol {
        Some("query") => format!(
            "<{action}Response><{action}Result><SweepRows>{rows}</SweepRows><IsTruncated>false</IsTruncated></{action}Result><ResponseMetadata><RequestId>r1</RequestId></ResponseMetadata></{action}Response>"
        ),
        _ => format!("<{action}Result><SweepRows>{rows}</SweepRows></{action}Result>"),
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

struct Case {
    full: String,
    sql: String,
    content_type: String,
    body: Vec<u8>,
    /// Columns that may be NULL: next-page tokens (left out of the response) and the
    /// method's optional parameters the statement does not give.
    may_be_null: Vec<String>,
    /// The SELECT method the case reads, for the check of what `read_only` sent.
    method: CaseMethod,
}

/// The resource's first SELECT method: the first `sqlVerbs.select` entry, else StackQL's
/// fallback names.
fn select_method(resource: &Value) -> Option<String> {
    let methods = resource.get("methods").and_then(Value::as_object)?;
    resource
        .pointer("/sqlVerbs/select")
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(|m| m.get("$ref").and_then(Value::as_str))
        .and_then(|r| r.rsplit('/').next())
        .map(str::to_owned)
        .or_else(|| {
            ["select", "list", "aggregatedList", "get"]
                .into_iter()
                .find(|m| methods.contains_key(*m))
                .map(str::to_owned)
        })
}

/// The sweep's case for one resource, or `Err(cause)` when none can be made.
fn case_of(
    provider: &str,
    service: &str,
    name: &str,
    resource: &Value,
    doc: &Value,
    required: &[String],
) -> Result<Case, String> {
    let methods = resource
        .get("methods")
        .and_then(Value::as_object)
        .ok_or("no methods")?;
    let select = select_method(resource).ok_or("no select method")?;
    let method = methods.get(&select).ok_or("dangling select $ref")?;
    let op_ref = method
        .pointer("/operation/$ref")
        .and_then(Value::as_str)
        .ok_or("no operation")?;
    let pointer = op_ref.split_once('#').map_or(op_ref, |(_, p)| p);
    let (path_ptr, verb) = pointer.rsplit_once('/').ok_or("bad operation ref")?;
    let path_item = doc.pointer(path_ptr).ok_or("operation not found")?;
    let op = path_item
        .get(verb.to_ascii_lowercase())
        .ok_or("operation not found")?;
    let response = method.get("response");
    let doc_key = match response.and_then(|r| r.get("openAPIDocKey")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "200".to_owned(),
    };
    let responses = op.get("responses").ok_or("no responses")?;
    let answer = responses
        .get(&doc_key)
        .or_else(|| responses.get("200"))
        .or_else(|| responses.get("201"))
        .map(|r| deref(doc, r))
        .ok_or("no response for the doc key")?;
    let content = answer.get("content").and_then(Value::as_object);
    let wanted = response
        .and_then(|r| r.get("mediaType"))
        .and_then(Value::as_str);
    let (media, schema) = match content {
        Some(content) => {
            let chosen = wanted
                .and_then(|m| content.get_key_value(m))
                .or_else(|| content.iter().find(|(m, _)| m.contains("json")))
                .or_else(|| content.iter().next());
            match chosen {
                Some((m, c)) => (m.clone(), c.get("schema").cloned().unwrap_or(json!({}))),
                None => ("application/json".to_owned(), json!({})),
            }
        }
        None => ("application/json".to_owned(), json!({})),
    };
    // The registry's REST-XML methods (S3, Route 53, CloudFront, S3 Control) declare an XML
    // `mediaType` and an XML transform while their operation's content is the JSON display
    // schema: the upstream answers in XML.
    let media = match wanted {
        Some(m) if m.contains("xml") => m.to_owned(),
        _ => media,
    };
    let mut value = synthesize(doc, &schema);
    // A text transform wrapping the upstream's body (`printf "{\"key\":%s}" .`, okta's
    // bare arrays) over a response schema that is already the wrapped display shape: the
    // upstream sends what is inside the wrapper.
    if let Some(key) = response
        .and_then(|r| r.pointer("/transform/body"))
        .and_then(Value::as_str)
        .and_then(printf_wrapper_key)
        && let Value::Object(map) = &value
        && map.len() == 1
    {
        if let Some(inner) = map.get(&key) {
            value = inner.clone();
        } else if let Some(Value::Array(rows)) = map.values().next() {
            // `{"items":%s}` then one display field per item (`{"schema_type":"{{ $v }}"}`):
            // the upstream's body is the bare list of those values.
            let scalars: Option<Vec<Value>> = rows
                .iter()
                .map(|row| match row {
                    Value::Object(fields) if fields.len() == 1 => fields.values().next().cloned(),
                    _ => None,
                })
                .collect();
            if let Some(scalars) = scalars {
                value = Value::Array(scalars);
            }
        }
    }
    if let Some(template) = response
        .and_then(|r| r.pointer("/transform/body"))
        .and_then(Value::as_str)
        && let Some(raw) = raw_of_template(template, &value)
    {
        value = raw;
    }
    let (content_type, body) = if media.contains("xml") {
        // The registry's XML responses name the display schema (`line_items`): its row
        // is what the XML carries.
        let row = value
            .get("line_items")
            .and_then(|l| l.get(0))
            .cloned()
            .unwrap_or(value);
        let action = path_ptr
            .split("Action=")
            .nth(1)
            .and_then(|a| a.split('&').next())
            .unwrap_or("List")
            .to_owned();
        let protocol = doc.pointer("/info/x-protocol").and_then(Value::as_str);
        (
            "text/xml".to_owned(),
            xml_body(&action, protocol, &row).into_bytes(),
        )
    } else {
        (
            "application/json".to_owned(),
            value.to_string().into_bytes(),
        )
    };
    // Parameter values: an enum's first value, a default, else by type.
    let mut params: BTreeMap<String, &Value> = BTreeMap::new();
    for source in [op.get("parameters"), path_item.get("parameters")] {
        for p in source.and_then(Value::as_array).into_iter().flatten() {
            let p = deref(doc, p);
            if let Some(n) = p.get("name").and_then(Value::as_str) {
                params.entry(n.to_owned()).or_insert(p);
            }
        }
    }
    let variables = doc
        .pointer("/servers/0/variables")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut conditions = Vec::new();
    for param in required {
        if variables.contains_key(param) {
            continue;
        }
        let schema = params
            .get(param)
            .and_then(|p| p.get("schema"))
            .map(|s| deref(doc, s));
        let value = match schema {
            Some(s) => match s
                .get("enum")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
            {
                Some(Value::String(e)) => e.clone(),
                Some(other) => other.to_string(),
                None => match s.get("default") {
                    Some(Value::String(d)) if !d.is_empty() => d.clone(),
                    _ => match s.get("type").and_then(Value::as_str) {
                        Some("integer" | "number") => "7".to_owned(),
                        Some("boolean") => "true".to_owned(),
                        _ => "v1".to_owned(),
                    },
                },
            },
            None => "v1".to_owned(),
        };
        conditions.push(format!(
            "{} = '{}'",
            quote_ident(param),
            value.replace('\'', "''")
        ));
    }
    // Under `config.snake_case_aliases` the token columns are named in snake_case.
    let mut may_be_null: Vec<String> = TOKENS
        .iter()
        .chain(&SNAKE_TOKENS)
        .map(|t| (*t).to_owned())
        .collect();
    may_be_null.extend(params.keys().filter(|p| !required.contains(p)).cloned());
    let full = format!("{provider}.{service}.{name}");
    let mut sql = format!("SELECT * FROM {full}");
    if !conditions.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conditions.join(" AND "));
    }
    let path = crate::sweep_reads::unescape(path_ptr.strip_prefix("/paths/").unwrap_or(path_ptr));
    Ok(Case {
        method: case_method([provider, service, name, &select], verb, &path, op, doc),
        full,
        sql,
        content_type,
        body,
        may_be_null,
    })
}

/// The upstream's body for a JSON transform whose operation's response schema is already
/// the display shape the template writes (the registry's processed documents describe the
/// output, not the input), for the two forms the sweep found: AWS's scalar lists
/// (`$lst := index . "Names"` … `{"name": {{ toJson $v }}}` into `line_items`) and
/// Cloudflare's renames (`[{"contents": {{ toJson .result }}}]`). `None`: leave the value.
fn raw_of_template(template: &str, display: &Value) -> Option<Value> {
    use std::sync::OnceLock;
    static LIST: OnceLock<(regex::Regex, regex::Regex)> = OnceLock::new();
    static RENAME: OnceLock<regex::Regex> = OnceLock::new();
    let (list, field) = LIST.get_or_init(|| {
        (
            regex::Regex::new(r#"\$lst := index \. "([^"]+)""#).unwrap(),
            regex::Regex::new(r#"\{"([^"]+)": \{\{ toJson \$v \}\}\}"#).unwrap(),
        )
    });
    if let (Some(key), Some(name)) = (list.captures(template), field.captures(template)) {
        if display.get(&key[1]).is_some() {
            return None;
        }
        let rows = display.get("line_items")?.as_array()?;
        let values: Vec<Value> = rows
            .iter()
            .filter_map(|row| row.get(&name[1]).cloned())
            .collect();
        let mut out = Map::new();
        out.insert(key[1].to_owned(), Value::Array(values));
        return Some(Value::Object(out));
    }
    let rename = RENAME.get_or_init(|| {
        regex::Regex::new(r#""([^"]+)": \{\{ toJson \.([A-Za-z_]+) \}\}"#).unwrap()
    });
    let mut out = Map::new();
    for found in rename.captures_iter(template) {
        if found[1] == found[2] || display.get(&found[2]).is_some() {
            return None;
        }
        let value = display.get(&found[1])?;
        out.insert(found[2].to_owned(), value.clone());
    }
    (!out.is_empty()).then_some(Value::Object(out))
}

/// The key of a text transform that only wraps the body: `printf "{\"key\":%s}" .`.
fn printf_wrapper_key(template: &str) -> Option<String> {
    let rest = template.split("printf \"{\\\"").nth(1)?;
    let (key, _) = rest.split_once("\\\":%s}\" .")?;
    Some(key.to_owned())
}

/// The cause of a failed statement, short enough to group by.
fn cause_of(err: &querygate::engine::Error) -> String {
    let text = err.message().to_owned();
    let short: String = text
        .split([':', '(', '\''])
        .next()
        .unwrap_or("")
        .chars()
        .take(60)
        .collect();
    format!("{:?}: {}", err.kind(), short.trim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the registry-wide sweep: scripts/sweep.sh"]
async fn registry_sweep() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    let only: Vec<String> = std::env::var("QUERYGATE_SWEEP_PROVIDERS")
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    // `QUERYGATE_SWEEP_SHOW=provider.service.resource,…` prints those cases' statement,
    // synthesized response and outcome.
    let show: Vec<String> = std::env::var("QUERYGATE_SWEEP_SHOW")
        .unwrap_or_default()
        .split(',')
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect();
    let current: Current = Arc::new(Mutex::new((String::new(), Vec::new())));
    let log: SentLog = Arc::default();
    let url = start_mock(current.clone(), log.clone()).await;
    let knowledge = Knowledge::load();
    // Requests a statement the gate runs in read_only sent that the knowledge does not call
    // reads: each fails the sweep.
    let mut violations: Vec<String> = Vec::new();
    let src = root.join("src");
    let mut folders: Vec<_> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    folders.sort();
    let cx = ExecContext {
        credentials: Arc::new(CredentialStore::fixed([(
            "TOKEN".to_owned(),
            "t0ken".to_owned(),
        )])),
        ..ExecContext::anonymous_default()
    };
    let mut report: BTreeMap<String, Tally> = BTreeMap::new();
    for folder in folders {
        let dir = src.join(&folder).join("v00.00.00000");
        let Some(provider_doc) = load_yaml(&dir.join("provider.yaml")) else {
            continue;
        };
        let provider = provider_doc
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or(&folder)
            .to_owned();
        if !only.is_empty() && !only.contains(&provider) {
            continue;
        }
        let mut config = EngineConfig::new(root.clone());
        config.providers.insert(
            provider.clone(),
            ProviderSettings {
                base_url: Some(url.clone()),
                auth: Some(json!({"type": "bearer", "credentialsenvvar": "TOKEN"})),
                ..Default::default()
            },
        );
        config.upstream.page_limit = 3;
        let engine = Engine::new(config).unwrap();
        let tally = report.entry(provider.clone()).or_default();
        let services = provider_doc
            .get("providerServices")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (service, entry) in services {
            let Some(file) = entry.pointer("/service/$ref").and_then(Value::as_str) else {
                continue;
            };
            let Some(doc) = load_yaml(&src.join(file)) else {
                continue;
            };
            let resources = doc
                .pointer("/components/x-stackQL-resources")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            for (name, resource) in resources {
                let has_select = resource
                    .pointer("/sqlVerbs/select")
                    .and_then(Value::as_array)
                    .is_some_and(|s| !s.is_empty())
                    || resource
                        .get("methods")
                        .and_then(Value::as_object)
                        .is_some_and(|m| {
                            resource.pointer("/sqlVerbs/select").is_none()
                                && ["select", "list", "aggregatedList", "get"]
                                    .iter()
                                    .any(|n| m.contains_key(*n))
                        });
                if !has_select {
                    if resource.pointer("/config/views/select").is_some() {
                        tally.views += 1;
                    }
                    continue;
                }
                tally.swept += 1;
                let full = format!("{provider}.{service}.{name}");
                let required = match engine
                    .execute(&cx, &format!("SHOW METHODS IN {full}"))
                    .await
                {
                    Ok(out) => {
                        // The required parameters of the method the case answers for
                        // (the first SELECT method): given them all, the engine takes it.
                        let chosen = select_method(&resource);
                        let named = out.columns.iter().position(|c| c == "MethodName");
                        let params = out.columns.iter().position(|c| c == "RequiredParams");
                        out.rows
                            .iter()
                            .find(|r| {
                                named.is_some_and(|n| {
                                    matches!(&r[n], Cell::Text(t) if Some(t) == chosen.as_ref())
                                })
                            })
                            .map(|r| match params.map(|p| &r[p]) {
                                Some(Cell::Text(t)) => t
                                    .split(',')
                                    .map(str::trim)
                                    .filter(|s| !s.is_empty())
                                    .map(str::to_owned)
                                    .collect::<Vec<_>>(),
                                _ => Vec::new(),
                            })
                            .unwrap_or_default()
                    }
                    Err(err) => {
                        tally.causes.entry(cause_of(&err)).or_default().push(full);
                        continue;
                    }
                };
                let case = match case_of(&provider, &service, &name, &resource, &doc, &required) {
                    Ok(case) => case,
                    Err(why) => {
                        tally
                            .causes
                            .entry(format!("document: {why}"))
                            .or_default()
                            .push(full);
                        continue;
                    }
                };
                *current.lock().unwrap() = (case.content_type.clone(), case.body.clone());
                let class = class_of(&engine, &cx, &case.sql).await;
                log.lock().unwrap().clear();
                let outcome =
                    tokio::time::timeout(Duration::from_secs(20), engine.execute(&cx, &case.sql))
                        .await;
                match &class {
                    Ok((QueryClass::Select, _)) => {}
                    Ok((class, why)) => tally
                        .refused
                        .entry(format!("{class}: {why}"))
                        .or_default()
                        .push(case.full.clone()),
                    Err(err) => tally
                        .refused
                        .entry("does not plan".to_owned())
                        .or_default()
                        .push(format!("{}: {err}", case.full)),
                }
                if show.contains(&case.full) {
                    println!(
                        "{}\n{}\n{}\n{:?}",
                        case.sql,
                        case.content_type,
                        String::from_utf8_lossy(&case.body),
                        outcome
                    );
                }
                match outcome {
                    Err(_) => tally
                        .causes
                        .entry("timed out".to_owned())
                        .or_default()
                        .push(case.full),
                    Ok(Err(err)) => tally
                        .causes
                        .entry(cause_of(&err))
                        .or_default()
                        .push(format!(
                            "{} ({}): {}",
                            case.full,
                            case.sql,
                            err.message().chars().take(300).collect::<String>()
                        )),
                    Ok(Ok(out)) if out.rows.is_empty() => tally
                        .causes
                        .entry("no rows".to_owned())
                        .or_default()
                        .push(case.full),
                    Ok(Ok(out)) => {
                        let nulls: Vec<&str> = out
                            .columns
                            .iter()
                            .zip(&out.rows[0])
                            .filter(|(c, cell)| {
                                matches!(cell, Cell::Null) && !case.may_be_null.contains(c)
                            })
                            .map(|(c, _)| c.as_str())
                            .collect();
                        if nulls.is_empty() {
                            tally.ok += 1;
                            if let Ok((class, _)) = &class {
                                if runs_unattended(Mode::ReadOnly, *class) {
                                    tally.read_only_ok += 1;
                                    for sent in log.lock().unwrap().iter() {
                                        if let Some(why) = knowledge.not_a_read(&case.method, sent)
                                        {
                                            violations.push(format!("{}: {why}", case.full));
                                        }
                                    }
                                }
                                if runs_unattended(Mode::Safe, *class) {
                                    tally.safe_ok += 1;
                                }
                            }
                        } else {
                            tally
                                .causes
                                .entry("columns without values".to_owned())
                                .or_default()
                                .push(format!("{} ({})", case.full, nulls.join(", ")));
                        }
                    }
                }
            }
        }
    }
    let mut table = String::from(
        "| provider | resources | ok (full_access) | % | ok (read_only) | % | ok (safe, nobody approves) | % | view-only (not swept) | failures by cause |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    let (mut all_ro, mut all_safe) = (0, 0);
    let mut details = String::new();
    let (mut all, mut all_ok) = (0, 0);
    for (provider, tally) in &report {
        all += tally.swept;
        all_ok += tally.ok;
        let pct = if tally.swept == 0 {
            100.0
        } else {
            100.0 * tally.ok as f64 / tally.swept as f64
        };
        let causes: Vec<String> = tally
            .causes
            .iter()
            .map(|(c, l)| format!("{c} ×{}", l.len()))
            .collect();
        let share = |n: usize| {
            if tally.swept == 0 {
                100.0
            } else {
                100.0 * n as f64 / tally.swept as f64
            }
        };
        all_ro += tally.read_only_ok;
        all_safe += tally.safe_ok;
        table.push_str(&format!(
            "| {provider} | {} | {} | {pct:.1} | {} | {:.1} | {} | {:.1} | {} | {} |\n",
            tally.swept,
            tally.ok,
            tally.read_only_ok,
            share(tally.read_only_ok),
            tally.safe_ok,
            share(tally.safe_ok),
            tally.views,
            causes.join("; ")
        ));
        for (cause, list) in &tally.refused {
            details.push_str(&format!(
                "\n## {provider}: not run unattended in read_only or safe: {cause} ({})\n",
                list.len()
            ));
            for item in list {
                details.push_str(&format!("- {item}\n"));
            }
        }
        for (cause, list) in &tally.causes {
            details.push_str(&format!("\n## {provider}: {cause} ({})\n", list.len()));
            for item in list {
                details.push_str(&format!("- {item}\n"));
            }
        }
    }
    table.push_str(&format!(
        "| all | {all} | {all_ok} | | {all_ro} | | {all_safe} | | | |\n"
    ));
    details.push_str(&format!(
        "\n## requests sent in read_only that the shipped knowledge does not call reads ({})\n",
        violations.len()
    ));
    for item in &violations {
        details.push_str(&format!("- {item}\n"));
    }
    println!("{table}");
    let out = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/sweep-report.md");
    std::fs::write(&out, format!("{table}\n{details}")).unwrap();
    println!("written to {}", out.display());
    assert!(
        violations.is_empty(),
        "{} requests sent in read_only are not reads: {:?}",
        violations.len(),
        &violations[..violations.len().min(20)]
    );
}
