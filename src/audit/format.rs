//! `audit.format`: how a file sink writes each record, JSON Lines (`jsonl`) or an OTLP/JSON
//! LogRecord per line (`otel`, [`super::otel::json`]). Both carry the same chain and MAC;
//! readers tell them apart line by line ([`parse_line`]).

use super::chain::{LineError, Linked, ParsedLine};
use super::otel;
use super::record::AuditRecord;
pub use super::settings::Format;

impl Format {
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

/// Parses a line, JSONL or `otel` (told apart by how it begins, so one file may hold
/// both), and checks its hash against its content (not its MAC).
pub fn parse_line(line: &str) -> Result<ParsedLine, LineError> {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.starts_with(otel::json::LINE_START) {
        return otel::json::parse_line(line);
    }
    super::chain::parse_jsonl_line(line)
}
