//! A sink opened at its first record: `querygate query` holds one, so a command that writes
//! no record (a read, without `audit.cli_reads`) starts no audit file and opens no database
//! connection. A sink that cannot be opened fails every write with that error, and
//! `audit.failure_mode` decides as for any failed write.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::sync::OnceCell;

use super::record::AuditRecord;
use super::sink::{AuditError, AuditSink, Receipt};

/// Opens the real sink.
pub type Opener =
    Box<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn AuditSink>, AuditError>> + Send + Sync>;

/// A sink opened by its first write.
pub struct DeferredSink {
    kind: &'static str,
    opener: Opener,
    sink: OnceCell<Result<Arc<dyn AuditSink>, AuditError>>,
}

impl std::fmt::Debug for DeferredSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredSink")
            .field("kind", &self.kind)
            .field("opened", &self.sink.initialized())
            .finish_non_exhaustive()
    }
}

impl DeferredSink {
    /// A sink of `kind` (`file`, `postgres`) that `opener` opens at the first write.
    pub fn new(kind: &'static str, opener: Opener) -> Self {
        DeferredSink {
            kind,
            opener,
            sink: OnceCell::new(),
        }
    }
}

impl AuditSink for DeferredSink {
    fn write(&self, record: AuditRecord) -> BoxFuture<'_, Result<Receipt, AuditError>> {
        Box::pin(async move {
            match self.sink.get_or_init(|| (self.opener)()).await {
                Ok(sink) => sink.write(record).await,
                Err(err) => Err(err.clone()),
            }
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(Ok(sink)) = self.sink.get() {
                sink.close().await;
            }
        })
    }

    fn describe(&self) -> String {
        match self.sink.get() {
            Some(Ok(sink)) => sink.describe(),
            _ => format!("{} (opened at the first record)", self.kind),
        }
    }

    fn kind(&self) -> &'static str {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::memory::MemorySink;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn opens_once_at_the_first_write_and_not_before() {
        let opened = Arc::new(AtomicUsize::new(0));
        let count = opened.clone();
        let sink = DeferredSink::new(
            "memory",
            Box::new(move || {
                count.fetch_add(1, Ordering::SeqCst);
                Box::pin(async { Ok(Arc::new(MemorySink::new("r1")) as Arc<dyn AuditSink>) })
            }),
        );
        sink.close().await;
        assert_eq!(opened.load(Ordering::SeqCst), 0);
        sink.write(AuditRecord::default()).await.unwrap();
        let second = sink.write(AuditRecord::default()).await.unwrap();
        assert_eq!(second.seq, 2);
        assert_eq!(opened.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_sink_that_cannot_open_fails_every_write() {
        let sink = DeferredSink::new(
            "file",
            Box::new(|| Box::pin(async { Err(AuditError::Unavailable("no folder".into())) })),
        );
        for _ in 0..2 {
            assert_eq!(
                sink.write(AuditRecord::default()).await.unwrap_err(),
                AuditError::Unavailable("no folder".into())
            );
        }
        assert_eq!(sink.describe(), "file (opened at the first record)");
    }
}
