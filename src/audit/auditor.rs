//! The audit as the tool-call pipeline uses it: [`Auditor::record`] prepares a record (the
//! replica, the SQL policy, the SQL digest), writes it, and applies `audit.failure_mode`:
//! `Ok` means go on, `Err` means stop (refuse the call before it runs when the record was
//! an intent; replace the tool's result with the error when it was an outcome).

use std::sync::Arc;

use sha2::{Digest as _, Sha256};

use super::failure::{FailureMode, OnFailure};
use super::record::{AuditRecord, Phase};
use super::redact::{HmacKey, hmac_literals};
use super::sink::{AuditError, AuditSink, Receipt, WriteObserver};
use crate::code::Code;
use crate::digest::hex;

/// The sink, the failure mode and the SQL policy, shared by all calls.
#[derive(Clone, Debug)]
pub struct Auditor {
    sink: Arc<dyn AuditSink>,
    failure_mode: FailureMode,
    replica: String,
    hmac: Option<HmacKey>,
    observer: Option<Arc<dyn WriteObserver>>,
    health: Arc<WriteHealth>,
}

/// Whether the sink's last write failed (a full disk, a lost database), for `/readyz`: set
/// by every write, so it clears with the first write that succeeds again. The change is
/// logged once each way.
#[derive(Debug, Default)]
pub struct WriteHealth {
    failing: std::sync::Mutex<Option<String>>,
}

impl WriteHealth {
    /// The error of the last write, when it failed.
    pub fn failing(&self) -> Option<String> {
        self.failing.lock().ok().and_then(|f| f.clone())
    }

    fn observe(&self, sink: &str, written: &Result<Receipt, AuditError>) {
        let Ok(mut failing) = self.failing.lock() else {
            return;
        };
        match (written, failing.is_some()) {
            (Err(err), false) => {
                tracing::error!(
                    "the audit sink ({sink}) cannot write: {err}; /readyz answers 503 until a write succeeds"
                );
                *failing = Some(err.to_string());
            }
            (Err(err), true) => *failing = Some(err.to_string()),
            (Ok(_), true) => {
                tracing::warn!("the audit sink ({sink}) writes again");
                *failing = None;
            }
            (Ok(_), false) => {}
        }
    }
}

/// A failed audit write that stops the call.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
#[error("{message}")]
pub struct AuditFailure {
    /// What the pipeline does: refuse before running, or fail the call after it ran.
    pub action: OnFailure,
    /// The text the caller gets.
    pub message: String,
    /// The underlying error.
    pub error: AuditError,
}

impl AuditFailure {
    /// The stable error code (`audit.unavailable`).
    pub fn code(&self) -> Code {
        self.error.code()
    }
}

impl Auditor {
    /// An auditor writing to `sink`. With `hmac`, SQL string literals are HMACed.
    pub fn new(
        sink: Arc<dyn AuditSink>,
        failure_mode: FailureMode,
        replica: impl Into<String>,
        hmac: Option<HmacKey>,
    ) -> Self {
        Auditor {
            sink,
            failure_mode,
            replica: replica.into(),
            hmac,
            observer: None,
            health: Arc::default(),
        }
    }

    /// Whether the last write failed, shared with every clone of this auditor.
    pub fn health(&self) -> Arc<WriteHealth> {
        self.health.clone()
    }

    /// This auditor, telling `observer` how long each write took and whether it failed.
    pub fn observed(mut self, observer: Arc<dyn WriteObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// This process's stream name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// `audit.failure_mode`.
    pub fn failure_mode(&self) -> FailureMode {
        self.failure_mode
    }

    /// The sink.
    pub fn sink(&self) -> &Arc<dyn AuditSink> {
        &self.sink
    }

    /// Fills in what the auditor owns: the replica, `sql_sha256`, (with
    /// `hmac_sql_literals`) the SQL with its literals HMACed, in `sql` and in `args.sql`,
    /// and then the size limits of [`super::limits`] (the SQL once, fields cut and
    /// digested).
    pub fn prepare(&self, record: &mut AuditRecord) {
        self.redact(record);
        super::limits::bound(record);
    }

    fn redact(&self, record: &mut AuditRecord) {
        record.replica.clone_from(&self.replica);
        let sql = record.sql.as_deref().or_else(|| {
            record
                .args
                .as_ref()
                .and_then(|args| args.get("sql"))
                .and_then(|v| v.as_str())
        });
        if let Some(sql) = sql {
            record.sql_sha256 = Some(match &self.hmac {
                Some(key) => key.mac_hex(sql.as_bytes()),
                None => hex(&Sha256::digest(sql.as_bytes())),
            });
        }
        let Some(key) = &self.hmac else {
            return;
        };
        if let Some(sql) = record.sql.as_mut() {
            *sql = hmac_literals(sql, key);
        }
        if let Some(serde_json::Value::String(sql)) =
            record.args.as_mut().and_then(|args| args.get_mut("sql"))
        {
            *sql = hmac_literals(sql, key);
        }
    }

    /// Prepares and writes `record`. `Ok`: the call goes on (the record is durable, or the
    /// failure mode lets it proceed without; a failure is then logged). `Err`: the call
    /// stops as the failure says.
    pub async fn record(&self, mut record: AuditRecord) -> Result<Option<Receipt>, AuditFailure> {
        self.prepare(&mut record);
        let phase = record.phase;
        let side_effect = record.has_side_effect();
        let tool = record.tool.clone();
        let started = std::time::Instant::now();
        let written = self.sink.write(record).await;
        if let Some(observer) = &self.observer {
            observer.audit_write(self.sink.kind(), started.elapsed(), written.is_ok());
        }
        self.health.observe(self.sink.kind(), &written);
        match written {
            Ok(receipt) => Ok(Some(receipt)),
            Err(error) => match self.failure_mode.on_failure(phase, side_effect) {
                OnFailure::Proceed => {
                    tracing::error!(
                        "audit write failed ({}; the call of '{tool}' proceeds): {error}",
                        self.failure_mode.as_str()
                    );
                    Ok(None)
                }
                action => {
                    tracing::error!(
                        "audit write failed ({}; the call of '{tool}' is stopped): {error}",
                        self.failure_mode.as_str()
                    );
                    let message = match (action, phase) {
                        (OnFailure::Refuse, _) | (_, Phase::Intent) => format!(
                            "tool \"{tool}\" refused: {error}; nothing was sent (audit.failure_mode {})",
                            self.failure_mode.as_str()
                        ),
                        _ => format!(
                            "tool \"{tool}\" failed: its audit record could not be written ({error}); its result is withheld (audit.failure_mode {}){}",
                            self.failure_mode.as_str(),
                            if side_effect {
                                ". The statement may have run: check the provider"
                            } else {
                                ""
                            }
                        ),
                    };
                    Err(AuditFailure {
                        action,
                        message,
                        error,
                    })
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::memory::MemorySink;
    use crate::audit::record::class;

    fn mutation(phase: Phase) -> AuditRecord {
        AuditRecord {
            phase,
            tool: "run_mutation_query".into(),
            query_class: Some(class::MUTATION_DELETE.into()),
            sql: Some("DELETE FROM x WHERE token = 'tk-1'".into()),
            args: Some(
                serde_json::json!({"sql": "DELETE FROM x WHERE token = 'tk-1'"})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn failure_modes_are_enforced() {
        let sink = Arc::new(MemorySink::new("r1"));
        sink.set_failing(true);
        let strict = Auditor::new(sink.clone(), FailureMode::Strict, "r1", None);
        let err = strict.record(mutation(Phase::Intent)).await.unwrap_err();
        assert_eq!(err.action, OnFailure::Refuse);
        assert!(err.message.contains("nothing was sent"), "{}", err.message);
        assert_eq!(err.code(), Code::AuditUnavailable);
        let err = strict.record(mutation(Phase::Outcome)).await.unwrap_err();
        assert_eq!(err.action, OnFailure::FailCall);
        assert!(
            err.message.contains("check the provider"),
            "{}",
            err.message
        );
        let read = AuditRecord {
            tool: "run_select_query".into(),
            query_class: Some(class::SELECT.into()),
            ..Default::default()
        };
        assert!(strict.record(read.clone()).await.is_err());
        let relaxed = Auditor::new(sink.clone(), FailureMode::StrictMutations, "r1", None);
        assert_eq!(relaxed.record(read.clone()).await, Ok(None));
        assert!(relaxed.record(mutation(Phase::Intent)).await.is_err());
        let best = Auditor::new(sink.clone(), FailureMode::BestEffort, "r1", None);
        assert_eq!(best.record(mutation(Phase::Intent)).await, Ok(None));
        // The sink comes back: the same auditor writes again.
        sink.set_failing(false);
        let receipt = strict
            .record(mutation(Phase::Intent))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(receipt.seq, 1);
        assert_eq!(sink.records()[0].replica, "r1");
    }

    #[tokio::test]
    async fn literals_are_hmaced_in_sql_and_args() {
        let sink = Arc::new(MemorySink::new("r1"));
        let key = HmacKey::new(vec![3; 32]).unwrap();
        let auditor = Auditor::new(sink.clone(), FailureMode::Strict, "r1", Some(key.clone()));
        auditor.record(mutation(Phase::Outcome)).await.unwrap();
        let line = sink.lines().join("\n");
        assert!(!line.contains("tk-1"), "{line}");
        let record = &sink.records()[0];
        assert_eq!(
            record.sql_sha256.as_deref(),
            Some(key.mac_hex(b"DELETE FROM x WHERE token = 'tk-1'").as_str())
        );
        let plain = Auditor::new(sink.clone(), FailureMode::Strict, "r1", None);
        plain.record(mutation(Phase::Outcome)).await.unwrap();
        assert_eq!(
            sink.records()[1].sql_sha256.as_deref(),
            Some(hex(&Sha256::digest(b"DELETE FROM x WHERE token = 'tk-1'")).as_str())
        );
    }
}
