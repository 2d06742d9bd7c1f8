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
    /// How the file sink writes records (`jsonl` or `otel`).
    pub format: Format,
    /// The OTLP export: with `SinkSettings::Otlp` the sink itself, beside a file or
    /// PostgreSQL sink a copy of every durable record (`None`: no export).
    pub otlp: Option<OtlpSettings>,
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
    /// OTLP/HTTP only (`audit.otlp`): nothing durable, so only with `failure_mode:
    /// best_effort`; each start a new stream.
    Otlp,
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

/// Where and how records are exported over OTLP/HTTP (`audit.otlp` over the standard
/// `OTEL_EXPORTER_OTLP_*` variables).
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The URL records are POSTed to (`…/v1/logs`).
    pub endpoint: String,
    /// Headers sent with every export (credentials: never logged).
    pub headers: Vec<(String, String)>,
    /// Longest one export request may take.
    pub timeout: Duration,
    /// Whether request bodies are gzipped.
    pub gzip: bool,
    /// Records waiting for export at most; more are dropped (and counted).
    pub queue_size: usize,
    /// Records per export request at most.
    pub max_batch: usize,
    /// The first wait before a retry (doubled after each failure).
    pub initial_backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
    /// A batch still failing this long after its first attempt is given up (and counted).
    pub max_elapsed: Duration,
}

impl std::fmt::Debug for OtlpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("OtlpSettings")
            .field("endpoint", &self.endpoint)
            .field("header_names", &header_names)
            .field("timeout", &self.timeout)
            .field("gzip", &self.gzip)
            .field("queue_size", &self.queue_size)
            .field("max_batch", &self.max_batch)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("max_elapsed", &self.max_elapsed)
            .finish()
    }
}

/// `audit.format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// The canonical JSON of the chain, with its hash (and MAC).
    #[default]
    Jsonl,
    /// One OTLP/JSON `LogsData` per line, in OpenTelemetry's semantic conventions.
    Otel,
}

impl Format {
    /// The string in configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Otel => "otel",
        }
    }
}
