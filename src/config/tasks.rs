//! `tasks:`: long-running calls answered as MCP tasks (the `io.modelcontextprotocol/tasks`
//! extension) for clients that declare it: whether they are on, how long a finished task
//! is kept, how many a tenant may have, and the lease a replica holds on the tasks it runs.

use std::time::Duration;

use serde::Deserialize;

use super::problems::Problems;

/// `tasks:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTasks {
    #[serde(default = "enabled")]
    enabled: bool,
    #[serde(default = "retention", with = "humantime_serde")]
    retention: Duration,
    #[serde(default = "max_tasks")]
    max_tasks: usize,
    #[serde(default = "lease", with = "humantime_serde")]
    lease: Duration,
    #[serde(default = "poll_interval", with = "humantime_serde")]
    poll_interval: Duration,
}

impl Default for RawTasks {
    fn default() -> Self {
        RawTasks {
            enabled: enabled(),
            retention: retention(),
            max_tasks: max_tasks(),
            lease: lease(),
            poll_interval: poll_interval(),
        }
    }
}

fn enabled() -> bool {
    true
}

fn retention() -> Duration {
    Duration::from_secs(3600)
}

fn max_tasks() -> usize {
    100
}

fn lease() -> Duration {
    Duration::from_secs(30)
}

fn poll_interval() -> Duration {
    Duration::from_secs(1)
}

/// `tasks:`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TasksConfig {
    /// Whether calls that may wait on an operation become tasks for clients that declare
    /// the tasks extension (default true).
    pub enabled: bool,
    /// How long a finished task (completed, failed, cancelled) is kept for `tasks/get`
    /// (default 1 h); its `ttlMs`.
    pub retention: Duration,
    /// Most tasks one tenant may have at once, finished ones kept included (default 100).
    pub max_tasks: usize,
    /// How long a replica's claim on a running task lasts without renewal (default 30 s):
    /// after it, another replica resumes the task.
    pub lease: Duration,
    /// The polling interval suggested to clients (`pollIntervalMs`, default 1 s).
    pub poll_interval: Duration,
}

impl Default for TasksConfig {
    fn default() -> Self {
        check_tasks(RawTasks::default(), &mut Problems::default())
    }
}

/// Checks `tasks:`.
pub(super) fn check_tasks(raw: RawTasks, problems: &mut Problems) -> TasksConfig {
    if raw.max_tasks == 0 {
        problems.push("tasks.max_tasks", "must be at least 1");
    }
    if raw.lease < Duration::from_secs(1) {
        problems.push("tasks.lease", "must be at least 1s");
    }
    if raw.retention < Duration::from_secs(1) {
        problems.push("tasks.retention", "must be at least 1s");
    }
    TasksConfig {
        enabled: raw.enabled,
        retention: raw.retention,
        max_tasks: raw.max_tasks.max(1),
        lease: raw.lease.max(Duration::from_secs(1)),
        poll_interval: raw.poll_interval,
    }
}
