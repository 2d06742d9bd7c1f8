//! What `audit:` configures, as the audit module receives it (the configuration loader
//! builds it; see `config/audit.rs`).

use std::path::PathBuf;
use std::time::Duration;

use super::failure::FailureMode;
use super::location::FileLocation;

/// Validated audit settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditSettings {
    /// Whether calls are audited (on by default).
    pub enabled: bool,
    /// Where records go.
    pub sink: SinkSettings,
    /// What a failed write does to the call.
    pub failure_mode: FailureMode,
    /// This process's stream name (`replica` in records).
    pub replica: String,
    /// Whether string literals of SQL are replaced by their HMAC.
    pub hmac_sql_literals: bool,
    /// The HMAC key file (≥ 32 bytes); `None`: a random key per start.
    pub hmac_key_file: Option<PathBuf>,
    /// The audit key file (≥ 32 bytes) every record and head is MACed under, anchoring the
    /// chains; `None`: records are chained but not MACed.
    pub mac_key_file: Option<PathBuf>,
    /// Whether reads that `querygate query` runs get records (`false`: only its writes,
    /// EXECs, installs and refusals do).
    pub cli_reads: bool,
}

/// The sink and its settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkSettings {
    /// JSON Lines files.
    File {
        /// `path` or `dir`.
        location: FileLocation,
        /// Rotate at this many bytes (0: never).
        max_size: u64,
        /// Files kept at most (0: all).
        max_files: usize,
        /// Rotated files older than this are deleted (`None`: kept).
        max_age: Option<Duration>,
    },
    /// The `audit_events` table of the `database:` server.
    Postgres {
        /// Records per INSERT at most.
        max_batch: usize,
        /// Longest one INSERT may take.
        write_timeout: Duration,
        /// Days of partitions `querygate audit maintain` makes ahead.
        partitions_ahead: u32,
        /// What `querygate audit maintain` removes (`None`: nothing).
        retention: Option<super::partitions::Retention>,
    },
}
