//! What became of the records the OTLP exporter was handed (exported, dropped, failed):
//! counted here, told to whoever observes them (metrics). A leaf the sink trait and the
//! exporter both read.

use std::sync::{Arc, Mutex};

/// What became of exported records, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportResult {
    /// The collector accepted them.
    Exported,
    /// The queue was full (or the exporter stopped): never sent.
    Dropped,
    /// Sent and refused, or still failing after the retries: given up.
    Failed,
}

impl ExportResult {
    /// The label value in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ExportResult::Exported => "exported",
            ExportResult::Dropped => "dropped",
            ExportResult::Failed => "failed",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Told how many records of the export ended how (metrics), without the audit knowing who
/// listens.
pub trait ExportObserver: Send + Sync + std::fmt::Debug {
    /// `records` more records ended as `result`.
    fn audit_export(&self, result: ExportResult, records: u64);
}

/// The exporter's counts; told to an observer once one watches (what was counted before
/// is told to it then).
#[derive(Debug, Default)]
pub struct ExportStats {
    inner: Mutex<StatsInner>,
}

#[derive(Debug, Default)]
struct StatsInner {
    counts: [u64; 3],
    observer: Option<Arc<dyn ExportObserver>>,
}

impl ExportStats {
    /// Counts `records` as ending as `result`, and tells the observer.
    pub(crate) fn count(&self, result: ExportResult, records: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.counts[result.index()] += records;
        if let Some(observer) = &inner.observer {
            observer.audit_export(result, records);
        }
    }

    /// Tells `observer` every count from now on, and the counts so far.
    pub fn observe(&self, observer: Arc<dyn ExportObserver>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for result in [
            ExportResult::Exported,
            ExportResult::Dropped,
            ExportResult::Failed,
        ] {
            observer.audit_export(result, inner.counts[result.index()]);
        }
        inner.observer = Some(observer);
    }

    /// How many records ended as `result` so far.
    pub fn get(&self, result: ExportResult) -> u64 {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).counts[result.index()]
    }
}
