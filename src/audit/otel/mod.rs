//! Audit records in OpenTelemetry's conventions (issue 48): the `otel` line format and the
//! OTLP/HTTP export.
//!
//! - [`render`]: a record as a LogRecord (attribute names of the GenAI and MCP semantic
//!   conventions, StackQL's `stackql.*`, ours `querygate.*`), before encoding.
//! - [`json`]: `audit.format: otel`, one OTLP/JSON `LogsData` per line, chained and MACed as
//!   JSONL is, read back by `audit verify`, `query` and `tail`.
//! - [`proto`]: records as an `ExportLogsServiceRequest` (the official protobuf definitions).
//! - [`exporter`]: the bounded queue and the background task that batches, POSTs, retries
//!   and counts.
//! - [`sinks`]: `audit.sink: otlp` alone, and the copy beside a durable sink (`audit.otlp`).

pub mod exporter;
#[cfg(test)]
mod exporter_tests;
pub mod json;
pub mod proto;
pub mod render;
pub mod sinks;
