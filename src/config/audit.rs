//! The `audit:` section: whether and where tool calls are audited, and what a failed audit
//! write does to the call. On by default, to files under the user's state folder.

use super::Problems;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::audit_otlp::{RawOtlp, check_otlp};
use super::database::DatabaseConfig;
use crate::audit::{AuditSettings, FailureMode, FileLocation, Format, SinkSettings};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAudit {
    enabled: bool,
    sink: RawSinkKind,
    format: Format,
    otlp: Option<RawOtlp>,
    failure_mode: FailureMode,
    replica: Option<String>,
    hmac_sql_literals: bool,
    hmac_key_file: Option<PathBuf>,
    mac_key_file: Option<PathBuf>,
    cli_reads: bool,
    file: RawFileSink,
    postgres: RawPgSink,
}

impl Default for RawAudit {
    fn default() -> Self {
        RawAudit {
            enabled: true,
            sink: RawSinkKind::File,
            format: Format::Jsonl,
            otlp: None,
            failure_mode: FailureMode::Strict,
            replica: None,
            hmac_sql_literals: false,
            hmac_key_file: None,
            mac_key_file: None,
            cli_reads: false,
            file: RawFileSink::default(),
            postgres: RawPgSink::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawSinkKind {
    #[default]
    File,
    Postgres,
    Otlp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawFileSink {
    path: Option<PathBuf>,
    dir: Option<PathBuf>,
    max_size_mb: u64,
    max_files: usize,
    #[serde(with = "humantime_serde")]
    max_age: Option<Duration>,
}

impl Default for RawFileSink {
    fn default() -> Self {
        RawFileSink {
            path: None,
            dir: None,
            max_size_mb: 100,
            max_files: 0,
            max_age: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawPgSink {
    max_batch: usize,
    #[serde(with = "humantime_serde")]
    write_timeout: Duration,
    partitions_ahead: u32,
    retention: Option<RawRetention>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetention {
    #[serde(with = "humantime_serde")]
    keep: Duration,
    #[serde(default = "default_retention_action")]
    action: crate::audit::partitions::RetentionAction,
}

fn default_retention_action() -> crate::audit::partitions::RetentionAction {
    crate::audit::partitions::RetentionAction::Drop
}

impl Default for RawPgSink {
    fn default() -> Self {
        RawPgSink {
            max_batch: 512,
            write_timeout: Duration::from_secs(5),
            partitions_ahead: 7,
            retention: None,
        }
    }
}

/// Checks the section, adding every problem (naming its key) to `problems`.
pub(super) fn check_audit(
    raw: RawAudit,
    database: &DatabaseConfig,
    env: &HashMap<String, String>,
    problems: &mut Problems,
) -> AuditSettings {
    let replica = raw
        .replica
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| default_replica(env));
    let replica_ok = replica.len() <= 128
        && replica
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !replica_ok {
        problems.push_line(format!(
            "audit.replica '{replica}' must be at most 128 letters, digits, '-', '_' or '.'"
        ));
    }
    let sink = match raw.sink {
        RawSinkKind::File => check_file_sink(raw.file, env, problems),
        RawSinkKind::Otlp => SinkSettings::Otlp,
        RawSinkKind::Postgres => check_pg_sink(raw.postgres, raw.enabled, database, problems),
    };
    if raw.enabled
        && matches!(sink, SinkSettings::Otlp)
        && raw.failure_mode != FailureMode::BestEffort
    {
        problems.push_line(format!(
            "audit.sink: otlp keeps no durable record, so audit.failure_mode {} cannot hold: set failure_mode: best_effort, or keep a file or postgres sink and add audit.otlp for the copy",
            raw.failure_mode.as_str()
        ));
    }
    if raw.format == Format::Otel && !matches!(sink, SinkSettings::File { .. }) {
        problems.push_line(
            "audit.format: otel is how files are written; it needs audit.sink: file (PostgreSQL and OTLP keep their own encodings)"
                .to_owned(),
        );
    }
    let otlp = match (raw.otlp, &sink) {
        (Some(otlp), _) => Some(check_otlp(otlp, env, problems)),
        (None, SinkSettings::Otlp) => Some(check_otlp(RawOtlp::default(), env, problems)),
        (None, _) => None,
    };
    if raw.hmac_key_file.is_some() && !raw.hmac_sql_literals {
        problems.push_line(
            "audit.hmac_key_file is set but audit.hmac_sql_literals is not true".to_owned(),
        );
    }
    AuditSettings {
        enabled: raw.enabled,
        sink,
        format: raw.format,
        otlp,
        failure_mode: raw.failure_mode,
        replica,
        hmac_sql_literals: raw.hmac_sql_literals,
        hmac_key_file: raw.hmac_key_file,
        mac_key_file: raw.mac_key_file,
        cli_reads: raw.cli_reads,
    }
}

/// `audit.file`: where the file sink writes, and its rotation.
fn check_file_sink(
    file: RawFileSink,
    env: &HashMap<String, String>,
    problems: &mut Problems,
) -> SinkSettings {
    let location = match (file.path, file.dir) {
        (Some(_), Some(_)) => {
            problems
                .push_line("audit.file.path and audit.file.dir are both set; keep one".to_owned());
            FileLocation::Dir(crate::audit::location::default_dir(env))
        }
        (Some(path), None) => FileLocation::Path(path),
        (None, Some(dir)) => FileLocation::Dir(dir),
        (None, None) => FileLocation::Dir(crate::audit::location::default_dir(env)),
    };
    SinkSettings::File {
        location,
        max_size: file.max_size_mb.saturating_mul(1024 * 1024),
        max_files: file.max_files,
        max_age: file.max_age.filter(|age| !age.is_zero()),
    }
}

/// `audit.postgres`: the PostgreSQL sink's batches, partitions and retention.
fn check_pg_sink(
    pg: RawPgSink,
    enabled: bool,
    database: &DatabaseConfig,
    problems: &mut Problems,
) -> SinkSettings {
    if enabled && database.url.is_none() {
        problems.push_line(
            "audit.sink is postgres but neither database.url nor database.url_file is set"
                .to_owned(),
        );
    }
    if pg.max_batch == 0 {
        problems.push_line("audit.postgres.max_batch must be greater than 0".to_owned());
    }
    if pg.write_timeout.is_zero() {
        problems.push_line("audit.postgres.write_timeout must be greater than 0".to_owned());
    }
    if !(1..=366).contains(&pg.partitions_ahead) {
        problems.push_line("audit.postgres.partitions_ahead must be between 1 and 366".to_owned());
    }
    let retention = pg.retention.map(|r| {
        if r.keep < Duration::from_secs(86_400) {
            problems.push_line("audit.postgres.retention.keep must be at least 1d".to_owned());
        }
        crate::audit::partitions::Retention {
            keep: r.keep,
            action: r.action,
        }
    });
    SinkSettings::Postgres {
        max_batch: pg.max_batch,
        write_timeout: pg.write_timeout,
        partitions_ahead: pg.partitions_ahead,
        retention,
    }
}

/// `$HOSTNAME`, else the kernel's host name, else `querygate`: in Kubernetes, the pod name.
fn default_replica(env: &HashMap<String, String>) -> String {
    env.get("HOSTNAME")
        .filter(|h| !h.is_empty())
        .cloned()
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "querygate".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(yaml: &str, database: &DatabaseConfig) -> (AuditSettings, Vec<String>) {
        let raw: RawAudit = serde_norway::from_str(yaml).unwrap();
        let env = HashMap::from([
            ("HOME".to_owned(), "/home/u".to_owned()),
            ("HOSTNAME".to_owned(), "pod-1".to_owned()),
        ]);
        let mut problems = Problems::default();
        let settings = check_audit(raw, database, &env, &mut problems);
        (settings, problems.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn on_by_default_to_the_state_folder() {
        let (settings, problems) = check("{}", &DatabaseConfig::default());
        assert!(problems.is_empty(), "{problems:?}");
        assert!(settings.enabled);
        assert_eq!(settings.failure_mode, FailureMode::Strict);
        assert_eq!(settings.replica, "pod-1");
        assert_eq!(
            settings.sink,
            SinkSettings::File {
                location: FileLocation::Dir(PathBuf::from("/home/u/.local/state/querygate/audit")),
                max_size: 100 * 1024 * 1024,
                max_files: 0,
                max_age: None,
            }
        );
    }

    #[test]
    fn otlp_alone_is_best_effort_and_a_copy_is_beside_a_durable_sink() {
        let (settings, problems) = check(
            "sink: otlp\nfailure_mode: best_effort\n",
            &DatabaseConfig::default(),
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.sink, SinkSettings::Otlp);
        assert!(settings.otlp.is_some(), "the sink's export settings");
        let (settings, problems) = check(
            "format: otel\notlp: {endpoint: 'http://127.0.0.1:4318/v1/logs'}\n",
            &DatabaseConfig::default(),
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(settings.format, crate::audit::Format::Otel);
        assert_eq!(
            settings.otlp.map(|o| o.endpoint).as_deref(),
            Some("http://127.0.0.1:4318/v1/logs")
        );
        assert!(check("{}", &DatabaseConfig::default()).0.otlp.is_none());
    }

    #[test]
    fn problems_are_named() {
        let (_, problems) = check(
            "sink: postgres\nreplica: 'a b'\nhmac_key_file: /k\npostgres: {max_batch: 0}\n",
            &DatabaseConfig::default(),
        );
        let text = problems.join("; ");
        for key in [
            "audit.sink: is postgres",
            "audit.replica",
            "audit.hmac_key_file",
            "audit.postgres.max_batch",
        ] {
            assert!(text.contains(key), "{key}: {text}");
        }
        let (_, problems) = check(
            "file: {path: /a.log, dir: /d}\nfailure_mode: strict_mutations\n",
            &DatabaseConfig::default(),
        );
        assert!(problems[0].contains("both set"), "{problems:?}");
        let (_, problems) = check("sink: otlp\n", &DatabaseConfig::default());
        assert!(
            problems.len() == 1 && problems[0].contains("no durable record"),
            "{problems:?}"
        );
        let (_, problems) = check("sink: postgres\nformat: otel\n", &DatabaseConfig::default());
        assert!(
            problems.iter().any(|p| p.contains("audit.format: otel")),
            "{problems:?}"
        );
        let err = serde_norway::from_str::<RawAudit>("failure_mode: lax\n").unwrap_err();
        assert!(err.to_string().contains("lax"), "{err}");
    }

    #[test]
    fn partitions_and_retention_are_read_and_checked() {
        use crate::audit::partitions::{Retention, RetentionAction};
        let database = DatabaseConfig {
            url: Some(crate::config::DatabaseUrl::Inline(
                crate::config::SecretUrl::new("postgres://h/d"),
            )),
            ..DatabaseConfig::default()
        };
        let (settings, problems) = check(
            "sink: postgres\npostgres: {partitions_ahead: 14, retention: {keep: 90d, action: detach}}\n",
            &database,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let SinkSettings::Postgres {
            partitions_ahead,
            retention,
            ..
        } = settings.sink
        else {
            panic!("{:?}", settings.sink);
        };
        assert_eq!(partitions_ahead, 14);
        assert_eq!(
            retention,
            Some(Retention {
                keep: std::time::Duration::from_secs(90 * 86_400),
                action: RetentionAction::Detach,
            })
        );
        let (settings, _) = check(
            "sink: postgres\npostgres: {retention: {keep: 30d}}\n",
            &database,
        );
        assert!(matches!(
            settings.sink,
            SinkSettings::Postgres {
                partitions_ahead: 7,
                retention: Some(Retention {
                    action: RetentionAction::Drop,
                    ..
                }),
                ..
            }
        ));
        let (_, problems) = check(
            "sink: postgres\npostgres: {partitions_ahead: 0, retention: {keep: 2h}}\n",
            &database,
        );
        let text = problems.join("; ");
        assert!(text.contains("audit.postgres.partitions_ahead"), "{text}");
        assert!(text.contains("audit.postgres.retention.keep"), "{text}");
        assert!(
            serde_norway::from_str::<RawAudit>(
                "postgres: {retention: {keep: 1d, action: shred}}\n"
            )
            .is_err()
        );
    }
}
