//! `audit.format: otel` lines: each line one OTLP/JSON `LogsData` (the encoding of the
//! OpenTelemetry Collector's `otlpjsonfile` receiver and file exporter) holding one
//! `LogRecord`: resource `service.name=querygate`, scope `querygate.audit`.
//!
//! What is hashed is what JSONL hashes: the record's canonical JSON ([`chain`]), rebuilt
//! from the attributes (the record's fields, `querygate.audit.v`/`stream`/`seq`/
//! `prev_hash`) and `timeUnixNano`/`traceId`. Reading a line checks that rebuilt JSON against
//! `querygate.audit.hash`, then renders the line again from the record and its chain fields
//! and requires the very bytes read: an edit of any attribute (hashed or derived), of the
//! body, severity, order or spacing is an edited record.

use serde_json::{Map, Value};

use super::render::{self, ChainFields, Rendered, chain_keys};
use crate::audit::chain::{self, LineError, Linked, ParsedLine, Stored};
use crate::audit::record::AuditRecord;

/// How an `otel` line begins (and a JSONL line does not).
pub const LINE_START: &str = "{\"resourceLogs\"";

/// The instrumentation scope of audit records.
pub const SCOPE: &str = "querygate.audit";

/// Appends the `otel` line of a linked record (no newline) to `out`.
pub fn write_line(
    stream: &str,
    linked: &Linked,
    record: &AuditRecord,
    out: &mut Vec<u8>,
) -> serde_json::Result<()> {
    let chain = ChainFields {
        v: chain::FORMAT_VERSION,
        stream,
        seq: linked.seq,
        prev_hash: Some(&linked.prev_hash),
        hash: &linked.hash,
        mac: linked.mac.as_deref(),
    };
    let rendered = render::render(record, &chain)?;
    write_logs_data(&rendered, out)
}

/// How every line begins, up to the LogRecord's fields: the resource and the scope.
const LINE_HEAD: &str = concat!(
    "{\"resourceLogs\":[{\"resource\":{\"attributes\":[{\"key\":\"service.name\",",
    "\"value\":{\"stringValue\":\"querygate\"}}]},\"scopeLogs\":[{\"scope\":",
    "{\"name\":\"querygate.audit\"},\"logRecords\":[{"
);

/// Appends the `LogsData` of one rendered record to `out`, written straight from the
/// rendered fields (the one encoder: what is written is what a reader renders again).
fn write_logs_data(rendered: &Rendered, out: &mut Vec<u8>) -> serde_json::Result<()> {
    out.extend_from_slice(LINE_HEAD.as_bytes());
    if let Some(nanos) = rendered.time_unix_nano {
        out.extend_from_slice(format!("\"timeUnixNano\":\"{nanos}\",").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "\"severityNumber\":{},\"severityText\":\"{}\",\"body\":{{\"stringValue\":",
            rendered.severity_number, rendered.severity_text
        )
        .as_bytes(),
    );
    serde_json::to_writer(&mut *out, &rendered.body)?;
    out.extend_from_slice(b"},\"attributes\":[");
    for (index, (key, value)) in rendered.attributes.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        write_key_value(key, value, out)?;
    }
    out.push(b']');
    for (name, id) in [
        ("traceId", &rendered.trace_id),
        ("spanId", &rendered.span_id),
    ] {
        if let Some(id) = id {
            out.extend_from_slice(format!(",\"{name}\":").as_bytes());
            serde_json::to_writer(&mut *out, id)?;
        }
    }
    out.extend_from_slice(b",\"eventName\":");
    serde_json::to_writer(&mut *out, &rendered.event_name)?;
    out.extend_from_slice(b"}]}]}]}");
    Ok(())
}

/// `{"key":…,"value":<AnyValue>}`.
fn write_key_value(key: &str, value: &Value, out: &mut Vec<u8>) -> serde_json::Result<()> {
    out.extend_from_slice(b"{\"key\":");
    serde_json::to_writer(&mut *out, key)?;
    out.extend_from_slice(b",\"value\":");
    write_any_value(value, out)?;
    out.push(b'}');
    Ok(())
}

/// A JSON value as an OTLP/JSON `AnyValue` (64-bit integers as strings, as OTLP/JSON
/// writes them; `null` as the empty `AnyValue`).
fn write_any_value(value: &Value, out: &mut Vec<u8>) -> serde_json::Result<()> {
    match value {
        Value::Null => out.extend_from_slice(b"{}"),
        Value::Bool(b) => out.extend_from_slice(format!("{{\"boolValue\":{b}}}").as_bytes()),
        Value::Number(n) if n.is_f64() => {
            out.extend_from_slice(b"{\"doubleValue\":");
            serde_json::to_writer(&mut *out, n)?;
            out.push(b'}');
        }
        Value::Number(n) => out.extend_from_slice(format!("{{\"intValue\":\"{n}\"}}").as_bytes()),
        Value::String(s) => {
            out.extend_from_slice(b"{\"stringValue\":");
            serde_json::to_writer(&mut *out, s)?;
            out.push(b'}');
        }
        Value::Array(items) => {
            out.extend_from_slice(b"{\"arrayValue\":{\"values\":[");
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_any_value(item, out)?;
            }
            out.extend_from_slice(b"]}}");
        }
        Value::Object(map) => {
            out.extend_from_slice(b"{\"kvlistValue\":{\"values\":[");
            for (index, (key, value)) in map.iter().enumerate() {
                if index > 0 {
                    out.push(b',');
                }
                write_key_value(key, value, out)?;
            }
            out.extend_from_slice(b"]}}");
        }
    }
    Ok(())
}

/// The JSON value of an OTLP/JSON `AnyValue` ([`any_value`] reversed).
fn json_value(any: &Value) -> Result<Value, String> {
    let Value::Object(map) = any else {
        return Err("an attribute value is not an object".into());
    };
    let mut entries = map.iter();
    let Some((kind, inner)) = entries.next() else {
        return Ok(Value::Null);
    };
    if entries.next().is_some() {
        return Err("an attribute value has two kinds".into());
    }
    Ok(match (kind.as_str(), inner) {
        ("boolValue", Value::Bool(b)) => Value::Bool(*b),
        ("doubleValue", Value::Number(n)) => Value::Number(n.clone()),
        ("intValue", Value::String(s)) => s
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| s.parse::<u64>().map(Value::from))
            .map_err(|_| format!("intValue '{s}' is not an integer"))?,
        ("stringValue", Value::String(s)) => Value::String(s.clone()),
        ("arrayValue", Value::Object(array)) => Value::Array(
            values_of(array)?
                .iter()
                .map(json_value)
                .collect::<Result<_, _>>()?,
        ),
        ("kvlistValue", Value::Object(list)) => Value::Object(
            key_values(values_of(list)?)?
                .into_iter()
                .collect::<Map<_, _>>(),
        ),
        (kind, _) => return Err(format!("unexpected attribute value '{kind}'")),
    })
}

fn values_of(container: &Map<String, Value>) -> Result<&Vec<Value>, String> {
    match container.get("values") {
        Some(Value::Array(values)) if container.len() == 1 => Ok(values),
        _ => Err("a list without its values".into()),
    }
}

/// OTLP/JSON `KeyValue`s as pairs of key and JSON value.
fn key_values(pairs: &[Value]) -> Result<Vec<(String, Value)>, String> {
    pairs
        .iter()
        .map(|pair| match (pair.get("key"), pair.get("value")) {
            (Some(Value::String(key)), Some(value)) => Ok((key.clone(), json_value(value)?)),
            _ => Err("an attribute without its key or value".into()),
        })
        .collect()
}

/// Parses an `otel` line and checks it as JSONL lines are checked (hash against content; the
/// MAC is returned, not checked).
pub fn parse_line(line: &str) -> Result<ParsedLine, LineError> {
    let malformed = |what: &str| LineError::Malformed(what.to_owned());
    let value: Value =
        serde_json::from_str(line).map_err(|err| LineError::Malformed(err.to_string()))?;
    let log = value
        .pointer("/resourceLogs/0/scopeLogs/0/logRecords/0")
        .ok_or_else(|| malformed("no LogRecord"))?;
    let attributes = match log.get("attributes") {
        Some(Value::Array(pairs)) => key_values(pairs).map_err(LineError::Malformed)?,
        _ => return Err(malformed("a LogRecord without attributes")),
    };
    let text = |key: &str| -> Option<&str> {
        attributes
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_str())
    };
    let number = |key: &str| -> Option<u64> {
        attributes
            .iter()
            .find(|(k, _)| k == key)
            .and_then(|(_, v)| v.as_u64())
    };
    let time = match log.get("timeUnixNano") {
        Some(Value::String(nanos)) => Some(
            nanos
                .parse::<u64>()
                .map_err(|_| malformed("timeUnixNano is not a number"))?,
        ),
        None => None,
        Some(_) => return Err(malformed("timeUnixNano is not a string")),
    };
    let trace_id = log.get("traceId").and_then(Value::as_str);
    let span_id = log.get("spanId").and_then(Value::as_str);
    let fields =
        render::fields_of(&attributes, time, trace_id, span_id).map_err(LineError::Malformed)?;
    let record: AuditRecord = serde_json::from_value(Value::Object(fields))
        .map_err(|err| LineError::Malformed(err.to_string()))?;
    let stored = Stored {
        v: number(chain_keys::V)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| malformed("no querygate.audit.v"))?,
        stream: text(chain_keys::STREAM)
            .ok_or_else(|| malformed("no querygate.audit.stream"))?
            .to_owned(),
        seq: number(chain_keys::SEQ).ok_or_else(|| malformed("no querygate.audit.seq"))?,
        prev_hash: text(chain_keys::PREV_HASH)
            .ok_or_else(|| malformed("no querygate.audit.prev_hash"))?
            .to_owned(),
        record,
    };
    let hash = text(chain_keys::HASH).ok_or(LineError::NoHash)?.to_owned();
    let mac = text(chain_keys::MAC).map(str::to_owned);
    let canonical =
        chain::canonical(&stored).map_err(|err| LineError::Malformed(err.to_string()))?;
    if chain::hash_of(&canonical) != hash {
        return Err(LineError::HashMismatch);
    }
    let chain = ChainFields {
        v: stored.v,
        stream: &stored.stream,
        seq: stored.seq,
        prev_hash: Some(&stored.prev_hash),
        hash: &hash,
        mac: mac.as_deref(),
    };
    let mut again = Vec::with_capacity(line.len());
    render::render(&stored.record, &chain)
        .and_then(|rendered| write_logs_data(&rendered, &mut again))
        .map_err(|err| LineError::Malformed(err.to_string()))?;
    if again != line.as_bytes() {
        return Err(LineError::HashMismatch);
    }
    Ok(ParsedLine { stored, hash, mac })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::anchor::MacKey;
    use crate::audit::chain::{ChainHead, link};
    use crate::audit::record::{Cut, Decision, Outcome, Phase};
    use serde_json::json;

    fn full_record() -> AuditRecord {
        let args = serde_json::json!({"sql": "SELECT 1", "provider": "github", "limit": 5,
            "ratio": 0.5, "deep": {"list": [1, "a", null, true]}, "big": u64::MAX});
        AuditRecord {
            timestamp: "2026-11-30T11:30:01.123456Z".into(),
            phase: Phase::Outcome,
            call_id: "c1".into(),
            request_id: Some("r-1".into()),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            span_id: Some("00f067aa0ba902b7".into()),
            replica: "pod-1".into(),
            tenant: "acme".into(),
            principal: "agent".into(),
            issuer: Some("https://idp".into()),
            auth_method: "jwt".into(),
            protocol_version: Some("2025-11-25".into()),
            tool: "run_mutation_query".into(),
            mode: "safe".into(),
            decision: Decision::NeedsApprovalAccepted,
            query_class: Some("mutation_delete".into()),
            sql: Some("DELETE FROM x WHERE a = 'b\"'".into()),
            args: args.as_object().cloned(),
            approval_id: Some("ap-1".into()),
            outcome: Some(Outcome::Error),
            duration_ms: Some(12),
            error_code: Some("upstream.rejected".into()),
            error: Some("no ✓".into()),
            policies: Some(vec!["p1".into()]),
            rows_returned: Some(0),
            upstream_status: Some(409),
            cache_hit: Some(false),
            cut: Some(
                [(
                    "sql".to_owned(),
                    Cut {
                        bytes: 9,
                        sha256: "ab".into(),
                    },
                )]
                .into(),
            ),
            ..Default::default()
        }
    }

    fn line_of(record: &AuditRecord, key: Option<&MacKey>) -> (Linked, String) {
        let linked = link("pod-1", &ChainHead::genesis(), record, key).unwrap();
        let mut out = Vec::new();
        write_line("pod-1", &linked, record, &mut out).unwrap();
        (linked, String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_line_reads_back_as_the_record_and_hash_jsonl_has() {
        let key = MacKey::new(&[7u8; 32]).unwrap();
        for record in [full_record(), AuditRecord::default()] {
            let (linked, line) = line_of(&record, Some(&key));
            assert!(line.starts_with(LINE_START), "{line}");
            let parsed = parse_line(&line).unwrap();
            assert_eq!(parsed.stored.record, record);
            assert_eq!(parsed.hash, linked.hash, "the hash of the JSONL record");
            assert_eq!(parsed.mac, linked.mac);
            assert_eq!(
                crate::audit::format::parse_line(&line).unwrap(),
                parsed,
                "detected per line"
            );
        }
    }

    #[test]
    fn the_conventions_names_are_used() {
        let (_, line) = line_of(&full_record(), None);
        let value: Value = serde_json::from_str(&line).unwrap();
        let log = value
            .pointer("/resourceLogs/0/scopeLogs/0/logRecords/0")
            .unwrap();
        assert_eq!(log["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(log["spanId"], "00f067aa0ba902b7");
        assert_eq!(log["timeUnixNano"], "1796038201123456000");
        assert_eq!(log["severityNumber"], 17);
        assert_eq!(
            log["body"]["stringValue"],
            "execute_tool run_mutation_query"
        );
        let attributes = key_values(log["attributes"].as_array().unwrap()).unwrap();
        let get = |key: &str| {
            attributes
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        for (key, value) in [
            ("gen_ai.operation.name", json!("execute_tool")),
            ("mcp.method.name", json!("tools/call")),
            ("gen_ai.tool.name", json!("run_mutation_query")),
            ("gen_ai.tool.call.id", json!("c1")),
            ("mcp.protocol.version", json!("2025-11-25")),
            ("stackql.decision", json!("needs_approval_accepted")),
            ("stackql.query_class", json!("mutation_delete")),
            ("stackql.provider", json!("github")),
            ("stackql.duration_ms", json!(12)),
            ("stackql.rows_returned", json!(0)),
            ("querygate.tenant", json!("acme")),
            ("querygate.principal", json!("agent")),
            ("querygate.approval.id", json!("ap-1")),
            ("error.type", json!("upstream.rejected")),
            ("querygate.audit.seq", json!(1)),
        ] {
            assert_eq!(get(key), Some(value), "{key}");
        }
        assert!(
            line.contains("\"intValue\":\"12\""),
            "OTLP/JSON int64 as strings"
        );
    }

    #[test]
    fn any_edit_is_detected() {
        let key = MacKey::new(&[7u8; 32]).unwrap();
        let (_, line) = line_of(&full_record(), Some(&key));
        for (from, to) in [
            ("\"stringValue\":\"acme\"", "\"stringValue\":\"acmf\""),
            ("\"intValue\":\"12\"", "\"intValue\":\"13\""),
            ("\"stringValue\":\"github\"", "\"stringValue\":\"gitlab\""),
            ("execute_tool run_mutation_query\"}", "execute_tool x\"}"),
            ("\"severityNumber\":17", "\"severityNumber\":9"),
            ("1796038201123456000", "1796038201123457000"),
            (
                "4bf92f3577b34da6a3ce929d0e0e4736",
                "5bf92f3577b34da6a3ce929d0e0e4736",
            ),
            ("\"boolValue\":false", "\"boolValue\":true"),
            ("\"service.name\"", "\"service.nam\""),
        ] {
            assert!(line.contains(from), "{from}");
            let edited = line.replacen(from, to, 1);
            assert!(
                parse_line(&edited).is_err(),
                "{from} -> {to} went unnoticed"
            );
        }
        let dropped = line.replacen(
            "{\"key\":\"querygate.approval.id\",\"value\":{\"stringValue\":\"ap-1\"}},",
            "",
            1,
        );
        assert_ne!(dropped, line);
        assert_eq!(parse_line(&dropped), Err(LineError::HashMismatch));
    }
}
