//! `audit.format`: how a file sink writes each record, JSON Lines (`jsonl`) or an OTLP/JSON
//! LogRecord per line (`otel`, [`super::otel::json`]). Both carry the same chain and MAC;
//! readers tell them apart line by line ([`super::chain::parse_line`]).

use serde::Deserialize;

use super::chain::Linked;
use super::otel;
use super::record::AuditRecord;

/// `audit.format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The canonical JSON of the chain, with its hash (and MAC).
    #[default]
    Jsonl,
    /// One OTLP/JSON `LogsData` per line, in OpenTelemetry's semantic conventions.
    Otel,
}

impl Format {
    /// The string in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Otel => "otel",
        }
    }

    /// Appends the line (no newline) of `linked`, the record `record` linked in `stream`,
    /// to `out`. An `otel` line that cannot be encoded is written as JSONL (which readers
    /// accept in the same file) with an error in the log.
    pub fn write_line(
        self,
        stream: &str,
        linked: &Linked,
        record: &AuditRecord,
        out: &mut Vec<u8>,
    ) {
        if self == Format::Otel {
            let start = out.len();
            match otel::json::write_line(stream, linked, record, out) {
                Ok(()) => return,
                Err(err) => {
                    out.truncate(start);
                    tracing::error!("audit record {} written as JSONL: {err}", linked.seq);
                }
            }
        }
        linked.write_line(out);
    }
}
