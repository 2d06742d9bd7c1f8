//! An audit record in OpenTelemetry's terms, before any encoding: the LogRecord's time,
//! severity, body, event name, trace id and attributes. The OTLP/JSON lines of
//! `audit.format: otel` ([`super::json`]) and the protobuf export ([`super::proto`]) both
//! encode this.
//!
//! Attribute names follow the GenAI and MCP semantic conventions where a field means the
//! same (`gen_ai.tool.name`, `gen_ai.tool.call.id`, `mcp.method.name`,
//! `mcp.protocol.version`, `error.type`, `error.message`, `client.address`), StackQL's
//! `stackql.*` names for mode, decision, query, class, provider, duration and rows, and
//! `querygate.*` for the rest ([`FIELDS`]). Values are the record's JSON values: strings,
//! integers, booleans, arrays and maps (`args`, `cut`, `pruned`).

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::audit::record::{AuditRecord, Outcome, Phase};

/// Record field (its JSON key) → attribute key. A field missing here is written as
/// `querygate.record.<field>` ([`RECORD_PREFIX`]).
pub const FIELDS: &[(&str, &str)] = &[
    ("phase", "querygate.audit.phase"),
    ("call_id", "gen_ai.tool.call.id"),
    ("request_id", "querygate.request_id"),
    ("task_id", "querygate.task_id"),
    ("replica", "querygate.replica"),
    ("tenant", "querygate.tenant"),
    ("principal", "querygate.principal"),
    ("issuer", "querygate.issuer"),
    ("auth_method", "querygate.auth_method"),
    ("cert_fingerprint", "querygate.cert_fingerprint"),
    ("os_user", "querygate.os_user"),
    ("client_name", "querygate.client.name"),
    ("client_version", "querygate.client.version"),
    ("protocol_version", "mcp.protocol.version"),
    ("tool", "gen_ai.tool.name"),
    ("mode", "stackql.mode"),
    ("decision", "stackql.decision"),
    ("query_class", "stackql.query_class"),
    ("sql", "stackql.query"),
    ("sql_sha256", "querygate.query.sha256"),
    ("args", "querygate.args"),
    ("approval_id", "querygate.approval.id"),
    ("approver", "querygate.approval.approver"),
    ("approver_id", "querygate.approval.approver_id"),
    ("approval_method", "querygate.approval.method"),
    ("approval_reason", "querygate.approval.reason"),
    ("outcome", "querygate.outcome"),
    ("duration_ms", "stackql.duration_ms"),
    ("error_code", "error.type"),
    ("error", "error.message"),
    ("policies", "querygate.policies"),
    ("rows_returned", "stackql.rows_returned"),
    ("upstream_status", "querygate.upstream.status"),
    ("cache_hit", "querygate.cache_hit"),
    ("upstream_request_ids", "querygate.upstream.request_ids"),
    ("client_addr", "client.address"),
    ("suppressed", "querygate.suppressed"),
    ("cut", "querygate.cut"),
    ("pruned", "querygate.pruned"),
];

/// The prefix of a record field [`FIELDS`] does not name.
pub const RECORD_PREFIX: &str = "querygate.record.";

/// The record's `timestamp` when `timeUnixNano` cannot carry it exactly.
pub const TIMESTAMP: &str = "querygate.timestamp";
/// The record's `trace_id` when it is not a W3C trace id (`traceId` cannot carry it).
pub const TRACE_ID: &str = "querygate.trace_id";
/// The record's `span_id` when it is not a W3C span id (`spanId` cannot carry it).
pub const SPAN_ID: &str = "querygate.span_id";

/// Attributes derived from the record's fields (never read back: a line whose derived
/// attributes differ from its fields' is an edited line).
pub const DERIVED: &[&str] = &[OPERATION, METHOD, PROVIDER];
const OPERATION: &str = "gen_ai.operation.name";
const METHOD: &str = "mcp.method.name";
const PROVIDER: &str = "stackql.provider";

/// The chain's attributes.
pub mod chain_keys {
    /// The record format version (`v`).
    pub const V: &str = "querygate.audit.v";
    /// The stream.
    pub const STREAM: &str = "querygate.audit.stream";
    /// The sequence number.
    pub const SEQ: &str = "querygate.audit.seq";
    /// The predecessor's hash.
    pub const PREV_HASH: &str = "querygate.audit.prev_hash";
    /// The record's hash (the chain hash).
    pub const HASH: &str = "querygate.audit.hash";
    /// The HMAC of the hash under the audit key.
    pub const MAC: &str = "querygate.audit.mac";
}

/// A record's place in its chain, as its attributes carry it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainFields<'a> {
    /// The record format version.
    pub v: u32,
    /// The stream.
    pub stream: &'a str,
    /// The sequence number.
    pub seq: u64,
    /// The predecessor's hash (absent in an OTLP copy of a durable sink's record).
    pub prev_hash: Option<&'a str>,
    /// The record's hash.
    pub hash: &'a str,
    /// Its MAC, when there is an audit key (absent in an OTLP copy of a durable record).
    pub mac: Option<&'a str>,
}

/// An audit record as an OpenTelemetry LogRecord, encoding aside.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// The record's timestamp in nanoseconds since the epoch (`None`: not parseable; then
    /// the [`TIMESTAMP`] attribute carries it).
    pub time_unix_nano: Option<u64>,
    /// The severity number (9 INFO, 17 ERROR).
    pub severity_number: i32,
    /// The severity text.
    pub severity_text: &'static str,
    /// The body: `execute_tool <tool>`, `approval_decision <tool>`, `auth_failure`,
    /// `prune`.
    pub body: String,
    /// `querygate.audit.<phase>`.
    pub event_name: String,
    /// The W3C trace id (32 lowercase hex digits).
    pub trace_id: Option<String>,
    /// The W3C span id (16 lowercase hex digits).
    pub span_id: Option<String>,
    /// The attributes, in order.
    pub attributes: Vec<(Cow<'static, str>, Value)>,
}

/// Renders `record` at its place in the chain.
pub fn render(record: &AuditRecord, chain: &ChainFields<'_>) -> serde_json::Result<Rendered> {
    let Value::Object(fields) = serde_json::to_value(record)? else {
        return Err(serde::ser::Error::custom("a record is not a JSON object"));
    };
    let mut attributes: Vec<(Cow<'static, str>, Value)> = Vec::with_capacity(fields.len() + 10);
    let call = matches!(record.phase, Phase::Intent | Phase::Outcome);
    if call || record.phase == Phase::ApprovalDecision {
        attributes.push((OPERATION.into(), Value::from("execute_tool")));
    }
    if call {
        attributes.push((METHOD.into(), Value::from("tools/call")));
    }
    if let Some(Value::String(provider)) = record.args.as_ref().and_then(|a| a.get("provider")) {
        attributes.push((PROVIDER.into(), Value::from(provider.as_str())));
    }
    let time_unix_nano = nanos_of(&record.timestamp);
    let trace_id = record.trace_id.clone().filter(|id| is_hex_id(id, 32));
    let span_id = record.span_id.clone().filter(|id| is_hex_id(id, 16));
    for (field, value) in fields {
        match field.as_str() {
            "timestamp" => {
                if time_unix_nano.is_none() {
                    attributes.push((TIMESTAMP.into(), value));
                }
            }
            "trace_id" => {
                if trace_id.is_none() {
                    attributes.push((TRACE_ID.into(), value));
                }
            }
            "span_id" => {
                if span_id.is_none() {
                    attributes.push((SPAN_ID.into(), value));
                }
            }
            _ => attributes.push((attribute_of(&field), value)),
        }
    }
    attributes.push((chain_keys::V.into(), Value::from(chain.v)));
    attributes.push((chain_keys::STREAM.into(), Value::from(chain.stream)));
    attributes.push((chain_keys::SEQ.into(), Value::from(chain.seq)));
    if let Some(prev) = chain.prev_hash {
        attributes.push((chain_keys::PREV_HASH.into(), Value::from(prev)));
    }
    attributes.push((chain_keys::HASH.into(), Value::from(chain.hash)));
    if let Some(mac) = chain.mac {
        attributes.push((chain_keys::MAC.into(), Value::from(mac)));
    }
    let error = record.error_code.is_some() || record.outcome == Some(Outcome::Error);
    let body = match record.phase {
        Phase::Intent | Phase::Outcome => format!("execute_tool {}", record.tool),
        Phase::ApprovalDecision => format!("approval_decision {}", record.tool),
        phase => phase.as_str().to_owned(),
    };
    Ok(Rendered {
        time_unix_nano,
        severity_number: if error { 17 } else { 9 },
        severity_text: if error { "ERROR" } else { "INFO" },
        body,
        event_name: format!("querygate.audit.{}", record.phase.as_str()),
        trace_id,
        span_id,
        attributes,
    })
}

/// The attribute key of a record field.
fn attribute_of(field: &str) -> Cow<'static, str> {
    FIELDS.iter().find(|(name, _)| *name == field).map_or_else(
        || format!("{RECORD_PREFIX}{field}").into(),
        |(_, key)| (*key).into(),
    )
}

/// The record field of an attribute key: `None` for the chain's, the derived and unknown
/// keys.
pub fn field_of(key: &str) -> Option<Cow<'static, str>> {
    if let Some((field, _)) = FIELDS.iter().find(|(_, name)| *name == key) {
        return Some((*field).into());
    }
    match key {
        TIMESTAMP => Some("timestamp".into()),
        TRACE_ID => Some("trace_id".into()),
        SPAN_ID => Some("span_id".into()),
        _ => key
            .strip_prefix(RECORD_PREFIX)
            .filter(|field| !field.is_empty())
            .map(|field| field.to_owned().into()),
    }
}

/// The nanoseconds of an audit timestamp, when they give it back exactly (RFC 3339, UTC,
/// microseconds).
fn nanos_of(timestamp: &str) -> Option<u64> {
    let at = humantime::parse_rfc3339(timestamp).ok()?;
    let nanos = u64::try_from(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos()).ok()?;
    (timestamp_of(nanos) == timestamp).then_some(nanos)
}

/// The audit timestamp of `timeUnixNano`.
pub fn timestamp_of(nanos: u64) -> String {
    crate::audit::record::timestamp(std::time::UNIX_EPOCH + std::time::Duration::from_nanos(nanos))
}

/// Whether `id` is a valid W3C trace id (`len` 32) or span id (16): lowercase hex digits,
/// not all zero.
fn is_hex_id(id: &str, len: usize) -> bool {
    id.len() == len
        && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && id.bytes().any(|b| b != b'0')
}

/// The record fields of decoded attributes (the chain's and the derived skipped), with
/// the timestamp, trace id and span id of the LogRecord when no attribute carries them.
pub fn fields_of(
    attributes: &[(String, Value)],
    time_unix_nano: Option<u64>,
    trace_id: Option<&str>,
    span_id: Option<&str>,
) -> Result<Map<String, Value>, String> {
    let mut fields = Map::new();
    if let Some(nanos) = time_unix_nano {
        fields.insert("timestamp".into(), Value::from(timestamp_of(nanos)));
    }
    if let Some(id) = trace_id {
        fields.insert("trace_id".into(), Value::from(id));
    }
    if let Some(id) = span_id {
        fields.insert("span_id".into(), Value::from(id));
    }
    for (key, value) in attributes {
        if DERIVED.contains(&key.as_str())
            || key.starts_with("querygate.audit.") && key != "querygate.audit.phase"
        {
            continue;
        }
        let field = field_of(key).ok_or_else(|| format!("unknown attribute '{key}'"))?;
        if fields.insert(field.into_owned(), value.clone()).is_some() {
            return Err(format!("attribute '{key}' is repeated"));
        }
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_one_attribute_and_back() {
        let mut keys = std::collections::BTreeSet::new();
        for (field, key) in FIELDS {
            assert!(keys.insert(*key), "{key} twice");
            assert_eq!(field_of(key).as_deref(), Some(*field));
        }
        assert_eq!(field_of("querygate.record.later").as_deref(), Some("later"));
        assert_eq!(field_of("querygate.audit.hash"), None);
    }

    #[test]
    fn timestamps_and_trace_ids_go_to_their_fields_when_exact() {
        assert_eq!(
            nanos_of("2026-11-30T11:30:01.123456Z"),
            Some(1_796_038_201_123_456_000)
        );
        assert_eq!(
            nanos_of("2026-11-30T11:30:01Z"),
            None,
            "not the micros form"
        );
        assert!(is_hex_id("4bf92f3577b34da6a3ce929d0e0e4736", 32));
        assert!(!is_hex_id("4BF92F3577B34DA6A3CE929D0E0E4736", 32));
        assert!(!is_hex_id(&"0".repeat(32), 32));
        assert!(is_hex_id("00f067aa0ba902b7", 16));
    }
}
