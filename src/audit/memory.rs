//! An in-memory sink for tests: records are linked like in the other sinks and kept in a
//! list; it can be told to fail, to test what a failed audit does to a call.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::future::BoxFuture;

use super::chain::{self, ChainHead, Linked};
use super::record::AuditRecord;
use super::sink::{AuditError, AuditSink, Receipt};

/// The memory sink.
#[derive(Debug)]
pub struct MemorySink {
    stream: String,
    state: Mutex<(ChainHead, Vec<(AuditRecord, Linked)>)>,
    failing: AtomicBool,
}

impl MemorySink {
    /// An empty sink for `stream`.
    pub fn new(stream: impl Into<String>) -> Self {
        MemorySink {
            stream: stream.into(),
            state: Mutex::new((ChainHead::genesis(), Vec::new())),
            failing: AtomicBool::new(false),
        }
    }

    /// From now on, writes fail (`true`) or succeed (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    /// The records written so far, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.state
            .lock()
            .map(|state| state.1.iter().map(|(r, _)| r.clone()).collect())
            .unwrap_or_default()
    }

    /// The JSONL lines written so far (what a file sink would hold).
    pub fn lines(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|state| state.1.iter().map(|(_, l)| l.line()).collect())
            .unwrap_or_default()
    }
}

impl AuditSink for MemorySink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        let result = if self.failing.load(Ordering::SeqCst) {
            Err(AuditError::Unavailable(
                "the memory sink is set to fail".to_owned(),
            ))
        } else {
            match self.state.lock() {
                Ok(mut state) => match chain::link(&self.stream, &state.0, &record, None) {
                    Ok(linked) => {
                        state.0 = linked.head();
                        let receipt = Receipt {
                            seq: linked.seq,
                            hash: linked.hash.clone(),
                        };
                        state.1.push((record, linked));
                        Ok(receipt)
                    }
                    Err(err) => Err(AuditError::Encode(err.to_string())),
                },
                Err(_) => Err(AuditError::Unavailable("poisoned".to_owned())),
            }
        };
        Box::pin(async move { result })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn describe(&self) -> String {
        "memory".to_owned()
    }

    fn kind(&self) -> &'static str {
        "memory"
    }
}
