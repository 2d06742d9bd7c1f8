//! Audit records as an OTLP `ExportLogsServiceRequest`, built from the official protobuf
//! definitions (`opentelemetry-proto`) and encoded with prost: what the exporter POSTs
//! (`Content-Type: application/x-protobuf`).

use std::sync::Arc;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Kind;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use serde_json::Value;

use super::render::{self, ChainFields};
use crate::audit::chain::FORMAT_VERSION;
use crate::audit::record::AuditRecord;

/// One record to export, with its place in its chain.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The record.
    pub record: AuditRecord,
    /// Its stream.
    pub stream: Arc<str>,
    /// Its sequence number.
    pub seq: u64,
    /// Its predecessor's hash (known to the OTLP sink, not to a durable sink's copy).
    pub prev_hash: Option<String>,
    /// Its hash.
    pub hash: String,
    /// Its MAC (known to the OTLP sink).
    pub mac: Option<String>,
    /// When it was handed to the exporter, nanoseconds since the epoch
    /// (`observedTimeUnixNano`).
    pub observed: u64,
}

/// The request exporting `entries` (one resource, one scope).
pub fn request(entries: &[Entry]) -> ExportLogsServiceRequest {
    let log_records = entries.iter().filter_map(log_record).collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    key_value("service.name", &Value::from("querygate")),
                    key_value("service.version", &Value::from(env!("CARGO_PKG_VERSION"))),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: super::json::SCOPE.to_owned(),
                    ..Default::default()
                }),
                log_records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The LogRecord of one entry (`None`: the record cannot be encoded; logged).
fn log_record(entry: &Entry) -> Option<LogRecord> {
    let chain = ChainFields {
        v: FORMAT_VERSION,
        stream: &entry.stream,
        seq: entry.seq,
        prev_hash: entry.prev_hash.as_deref(),
        hash: &entry.hash,
        mac: entry.mac.as_deref(),
    };
    let rendered = match render::render(&entry.record, &chain) {
        Ok(rendered) => rendered,
        Err(err) => {
            tracing::error!("audit record {} not exported: {err}", entry.seq);
            return None;
        }
    };
    Some(LogRecord {
        time_unix_nano: rendered.time_unix_nano.unwrap_or_default(),
        observed_time_unix_nano: entry.observed,
        severity_number: rendered.severity_number,
        severity_text: rendered.severity_text.to_owned(),
        body: Some(AnyValue {
            value: Some(Kind::StringValue(rendered.body)),
        }),
        attributes: rendered
            .attributes
            .iter()
            .map(|(key, value)| key_value(key, value))
            .collect(),
        trace_id: rendered
            .trace_id
            .as_deref()
            .and_then(trace_id_bytes)
            .unwrap_or_default(),
        span_id: rendered
            .span_id
            .as_deref()
            .and_then(trace_id_bytes)
            .unwrap_or_default(),
        event_name: rendered.event_name,
        ..Default::default()
    })
}

fn key_value(key: &str, value: &Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(any_value(value)),
        ..Default::default()
    }
}

/// A JSON value as an `AnyValue` (an integer beyond `i64` as a double).
fn any_value(value: &Value) -> AnyValue {
    let kind = match value {
        Value::Null => None,
        Value::Bool(b) => Some(Kind::BoolValue(*b)),
        Value::Number(n) => Some(match n.as_i64() {
            Some(i) => Kind::IntValue(i),
            None => Kind::DoubleValue(n.as_f64().unwrap_or_default()),
        }),
        Value::String(s) => Some(Kind::StringValue(s.clone())),
        Value::Array(items) => Some(Kind::ArrayValue(ArrayValue {
            values: items.iter().map(any_value).collect(),
        })),
        Value::Object(map) => Some(Kind::KvlistValue(KeyValueList {
            values: map.iter().map(|(k, v)| key_value(k, v)).collect(),
        })),
    };
    AnyValue { value: kind }
}

/// The bytes of a trace or span id in hex.
fn trace_id_bytes(hex: &str) -> Option<Vec<u8>> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    #[test]
    fn a_request_decodes_with_the_records_attributes() {
        let record = AuditRecord {
            timestamp: "2026-11-30T11:30:01.123456Z".into(),
            tool: "server_info".into(),
            tenant: "acme".into(),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            args: serde_json::json!({"n": 1, "x": [true]})
                .as_object()
                .cloned(),
            ..Default::default()
        };
        let entry = Entry {
            record,
            stream: "pod-1".into(),
            seq: 7,
            prev_hash: None,
            hash: "ab".repeat(32),
            mac: None,
            observed: 5,
        };
        let bytes = request(std::slice::from_ref(&entry)).encode_to_vec();
        let back = ExportLogsServiceRequest::decode(bytes.as_slice()).unwrap();
        let log = &back.resource_logs[0].scope_logs[0].log_records[0];
        assert_eq!(log.trace_id.len(), 16);
        assert_eq!(log.time_unix_nano, 1_796_038_201_123_456_000);
        assert_eq!(log.observed_time_unix_nano, 5);
        let get = |key: &str| {
            log.attributes
                .iter()
                .find(|kv| kv.key == key)
                .and_then(|kv| kv.value.clone()?.value)
        };
        assert_eq!(
            get("gen_ai.tool.name"),
            Some(Kind::StringValue("server_info".into()))
        );
        assert_eq!(
            get("querygate.tenant"),
            Some(Kind::StringValue("acme".into()))
        );
        assert_eq!(get("querygate.audit.seq"), Some(Kind::IntValue(7)));
        assert_eq!(get("querygate.audit.prev_hash"), None);
        assert!(matches!(get("querygate.args"), Some(Kind::KvlistValue(_))));
    }
}
