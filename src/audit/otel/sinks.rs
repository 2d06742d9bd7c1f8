//! The two ways records reach OTLP:
//!
//! - [`CopySink`] (`audit.otlp` beside `audit.sink: file` or `postgres`): the durable sink
//!   writes the record and decides the call (`failure_mode`); once it is durable a copy is
//!   offered to the exporter's queue, which never blocks and never fails the call. The copy
//!   carries the durable record's stream, seq and hash (not its `prev_hash` or MAC: the
//!   durable record is the one `audit verify` checks).
//! - [`OtlpSink`] (`audit.sink: otlp`): no durable record at all. Records are chained (and
//!   MACed) in memory, in a stream of this start's own, and offered to the queue; a write
//!   succeeds once queued or dropped, so the configuration admits it only with
//!   `failure_mode: best_effort`.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use super::exporter::{ExportStats, Exporter};
use super::proto::Entry;
use crate::audit::anchor::MacKey;
use crate::audit::chain::{self, ChainHead};
use crate::audit::record::AuditRecord;
use crate::audit::sink::{AuditError, AuditSink, Receipt};

/// A durable sink and an OTLP copy of each of its records.
#[derive(Debug)]
pub struct CopySink {
    durable: Arc<dyn AuditSink>,
    exporter: Exporter,
    stream: Arc<str>,
}

impl CopySink {
    /// Copies the records `durable` writes in `stream` to `exporter`.
    pub fn new(durable: Arc<dyn AuditSink>, exporter: Exporter, stream: &str) -> CopySink {
        CopySink {
            durable,
            exporter,
            stream: stream.into(),
        }
    }
}

impl AuditSink for CopySink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        Box::pin(async move {
            let copy = record.clone();
            let receipt = self.durable.write(record).await?;
            self.exporter.offer(Entry {
                record: copy,
                stream: self.stream.clone(),
                seq: receipt.seq,
                prev_hash: None,
                hash: receipt.hash.clone(),
                mac: None,
                observed: Exporter::now_nanos(),
            });
            Ok(receipt)
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.durable.close().await;
            self.exporter.close().await;
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} (a copy over OTLP to {})",
            self.durable.describe(),
            self.exporter.endpoint()
        )
    }

    fn kind(&self) -> &'static str {
        self.durable.kind()
    }

    fn export_stats(&self) -> Option<Arc<ExportStats>> {
        Some(self.exporter.stats().clone())
    }
}

/// Records exported over OTLP only.
#[derive(Debug)]
pub struct OtlpSink {
    head: Mutex<ChainHead>,
    stream: Arc<str>,
    key: Option<MacKey>,
    exporter: Exporter,
}

impl OtlpSink {
    /// Chains records in `stream` (from its genesis), MACed under `key` when given.
    pub fn new(exporter: Exporter, stream: &str, key: Option<MacKey>) -> OtlpSink {
        OtlpSink {
            head: Mutex::new(ChainHead::genesis()),
            stream: stream.into(),
            key,
            exporter,
        }
    }
}

impl AuditSink for OtlpSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        Box::pin(async move {
            let entry = {
                let mut head = self.head.lock().unwrap_or_else(|p| p.into_inner());
                let linked = chain::link(&self.stream, &head, &record, self.key.as_ref())
                    .map_err(|err| AuditError::Encode(err.to_string()))?;
                *head = linked.head();
                Entry {
                    record,
                    stream: self.stream.clone(),
                    seq: linked.seq,
                    prev_hash: Some(linked.prev_hash),
                    hash: linked.hash,
                    mac: linked.mac,
                    observed: Exporter::now_nanos(),
                }
            };
            let receipt = Receipt {
                seq: entry.seq,
                hash: entry.hash.clone(),
            };
            self.exporter.offer(entry);
            Ok(receipt)
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.exporter.close())
    }

    fn describe(&self) -> String {
        format!(
            "OTLP {} only (stream {})",
            self.exporter.endpoint(),
            self.stream
        )
    }

    fn kind(&self) -> &'static str {
        "otlp"
    }

    fn export_stats(&self) -> Option<Arc<ExportStats>> {
        Some(self.exporter.stats().clone())
    }
}
