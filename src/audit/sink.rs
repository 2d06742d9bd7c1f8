//! The one trait every audit sink implements, and its errors.

use futures::future::BoxFuture;

use super::record::AuditRecord;
use crate::code::Code;

/// Where audit records go. A record is durable (on disk, or committed) when
/// [`AuditSink::write`] returns `Ok`; not before. Implementations are shared by all calls
/// and must accept concurrent writes.
pub trait AuditSink: Send + Sync + std::fmt::Debug {
    /// Links `record` into the sink's chain and persists it.
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>>;

    /// Finishes the records already queued and stops accepting new ones.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Where the records go, for people (`file /var/log/querygate/…`, `postgres`).
    fn describe(&self) -> String;

    /// The kind of sink, for metrics: `file`, `postgres`, `otlp` or `memory`.
    fn kind(&self) -> &'static str;

    /// The counts of its OTLP export, when it exports (`audit.sink: otlp`, `audit.otlp`).
    fn export_stats(&self) -> Option<std::sync::Arc<super::export_stats::ExportStats>> {
        None
    }
}

/// Told how long each audit write took and whether it failed (metrics), without the audit
/// knowing who listens.
pub trait WriteObserver: Send + Sync + std::fmt::Debug {
    /// One write to the sink of kind `sink` ended after `elapsed`; `ok` is false when it
    /// failed.
    fn audit_write(&self, sink: &'static str, elapsed: std::time::Duration, ok: bool);
}

/// Proof that a record is durable: its place in the chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// Its sequence number in the stream.
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

/// Why a record could not be persisted.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuditError {
    /// The sink cannot persist records now (disk, file system or database failure). It is
    /// tried again for the next record.
    #[error("the audit log is unavailable: {0}")]
    Unavailable(String),
    /// The sink was closed (the process is stopping).
    #[error("the audit log is closed")]
    Closed,
    /// The record could not be encoded.
    #[error("the audit record could not be encoded: {0}")]
    Encode(String),
}

impl AuditError {
    /// The stable error code a call failed by the audit carries.
    pub fn code(&self) -> Code {
        match self {
            AuditError::Unavailable(_) | AuditError::Closed | AuditError::Encode(_) => {
                Code::AuditUnavailable
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_audit_error_maps_to_audit_unavailable() {
        for err in [
            AuditError::Unavailable("disk full".into()),
            AuditError::Closed,
            AuditError::Encode("bad".into()),
        ] {
            assert_eq!(err.code(), Code::AuditUnavailable, "{err}");
            assert_eq!(err.code().as_str(), "audit.unavailable");
        }
    }
}
