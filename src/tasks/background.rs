//! What a replica does for tasks besides running them, every third of `tasks.lease`: renews
//! its leases on the tasks it runs (and stops those it lost: cancelled, or taken over),
//! takes over working tasks whose lease ran out (their replica stopped) and resumes them,
//! and drops finished tasks older than `tasks.retention`.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Tasks, duration_ms};
use crate::mcp::pipeline::Pipeline;

impl Tasks {
    /// Runs the lease, takeover and retention work until `shutdown` fires.
    pub fn spawn_background(
        self: &Arc<Self>,
        pipeline: Pipeline,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let tasks = self.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(
                (tasks.config.lease / 3).max(std::time::Duration::from_millis(100)),
            );
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        tasks.release().await;
                        return;
                    }
                    _ = every.tick() => tasks.tick(&pipeline).await,
                }
            }
        })
    }

    /// At stop: the leases of the tasks still running here end now, so that another
    /// replica resumes them without waiting for `tasks.lease` (this replica's own end of
    /// such a task is then not stored: the store keeps the new holder's).
    async fn release(&self) {
        let ids = self.running_ids();
        if ids.is_empty() {
            return;
        }
        match self.store.renew(&self.replica, &ids, 0).await {
            Ok(_) => tracing::info!(
                tasks = ids.len(),
                "stopping: running tasks left to the other replicas"
            ),
            Err(err) => {
                tracing::warn!(error = %err, "stopping: task leases were not released; they run out after tasks.lease")
            }
        }
    }

    /// One round of the background work.
    pub async fn tick(self: &Arc<Self>, pipeline: &Pipeline) {
        let ids = self.running_ids();
        match self
            .store
            .renew(&self.replica, &ids, self.lease_until_ms())
            .await
        {
            Ok(lost) => {
                for id in lost {
                    self.stop_local(&id);
                }
            }
            Err(err) => tracing::warn!(error = %err, "task leases were not renewed"),
        }
        loop {
            let claimed = self
                .store
                .claim_expired(&self.replica, self.now_ms(), self.lease_until_ms())
                .await;
            match claimed {
                Ok(Some(record)) => {
                    tokio::spawn(self.clone().resume(pipeline.clone(), record));
                }
                Ok(None) => break,
                Err(err) => {
                    tracing::warn!(error = %err, "expired tasks were not taken over");
                    break;
                }
            }
        }
        let before = self
            .now_ms()
            .saturating_sub(duration_ms(self.config.retention));
        if let Err(err) = self.store.prune(before).await {
            tracing::warn!(error = %err, "finished tasks were not pruned");
        }
    }
}
