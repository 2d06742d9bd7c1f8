//! The `database:` section: the PostgreSQL database that shared state (audit events,
//! approvals) lives in. The connection URL may carry a password, so it is held as a
//! [`SecretUrl`] that never prints, and it may come from a file (a mounted secret).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::problems::Problems;

/// What the YAML file and environment may say under `database:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawDatabase {
    url: Option<String>,
    url_file: Option<PathBuf>,
    max_connections: u32,
    #[serde(with = "humantime_serde")]
    connect_timeout: Duration,
    migrate_on_start: bool,
}

impl Default for RawDatabase {
    fn default() -> Self {
        RawDatabase {
            url: None,
            url_file: None,
            max_connections: 8,
            connect_timeout: Duration::from_secs(5),
            migrate_on_start: false,
        }
    }
}

/// A connection URL that may hold a password: its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL.
    pub fn new(url: impl Into<String>) -> Self {
        SecretUrl(url.into())
    }

    /// The URL itself, for the database driver only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretUrl(<redacted>)")
    }
}

impl std::fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted database URL>")
    }
}

/// Where the connection URL comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    /// `database.url` (or `QUERYGATE_DATABASE__URL`).
    Inline(SecretUrl),
    /// `database.url_file`: a file whose first line is the URL, read at each connect.
    File(PathBuf),
}

/// Validated `database:` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// The connection URL; `None`: no database is configured.
    pub url: Option<DatabaseUrl>,
    /// Connections in the pool at most.
    pub max_connections: u32,
    /// How long to wait for a connection (establishing one, or one from the pool).
    pub connect_timeout: Duration,
    /// Whether `querygate serve`/`stdio` apply pending migrations when they start.
    pub migrate_on_start: bool,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        check_database(RawDatabase::default(), &mut Problems::default())
    }
}

/// Checks the section, adding every problem (naming its key) to `problems`.
pub(super) fn check_database(raw: RawDatabase, problems: &mut Problems) -> DatabaseConfig {
    let url = raw.url.filter(|u| !u.trim().is_empty());
    let url = match (url, raw.url_file) {
        (Some(_), Some(_)) => {
            problems.push(
                "database.url",
                "database.url and database.url_file are both set; keep one",
            );
            None
        }
        (Some(url), None) => {
            if let Err(problem) = check_url(&url) {
                problems.push("database.url", problem);
            }
            Some(DatabaseUrl::Inline(SecretUrl(url.trim().to_owned())))
        }
        (None, Some(path)) => Some(DatabaseUrl::File(path)),
        (None, None) => None,
    };
    if raw.max_connections == 0 {
        problems.push("database.max_connections", "must be greater than 0");
    }
    if raw.connect_timeout.is_zero() {
        problems.push("database.connect_timeout", "must be greater than 0");
    }
    if raw.migrate_on_start && url.is_none() {
        problems.push(
            "database.migrate_on_start",
            "is set but neither database.url nor database.url_file is",
        );
    }
    DatabaseConfig {
        url,
        max_connections: raw.max_connections,
        connect_timeout: raw.connect_timeout,
        migrate_on_start: raw.migrate_on_start,
    }
}

/// Whether `url` is a PostgreSQL URL. The problem text never repeats the URL (it may hold a
/// password).
pub fn check_url(url: &str) -> Result<(), &'static str> {
    match url::Url::parse(url.trim()) {
        Ok(parsed) if matches!(parsed.scheme(), "postgres" | "postgresql") => Ok(()),
        Ok(_) => Err("must be a postgres:// or postgresql:// URL"),
        Err(_) => Err("is not a valid URL"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(yaml: &str) -> RawDatabase {
        serde_norway::from_str(yaml).unwrap()
    }

    #[test]
    fn defaults_mean_no_database() {
        let config = DatabaseConfig::default();
        assert_eq!(config.url, None);
        assert_eq!(config.max_connections, 8);
        assert_eq!(config.connect_timeout, Duration::from_secs(5));
        assert!(!config.migrate_on_start);
    }

    #[test]
    fn the_url_never_prints() {
        let mut problems = Problems::default();
        let config = check_database(
            raw("url: postgres://svc:hunter2@db.example/qg\nmax_connections: 3\n"),
            &mut problems,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        let Some(DatabaseUrl::Inline(url)) = &config.url else {
            panic!("{config:?}")
        };
        assert!(!url.to_string().contains("hunter2"));
        assert_eq!(url.expose(), "postgres://svc:hunter2@db.example/qg");
    }

    #[test]
    fn problems_name_their_key_and_not_the_secret() {
        let mut problems = Problems::default();
        check_database(
            raw("url: mysql://u:hunter2@x/db\nmax_connections: 0\nconnect_timeout: 0s\n"),
            &mut problems,
        );
        let text = problems.to_string();
        assert!(
            text.contains("database.url: must be a postgres://"),
            "{text}"
        );
        assert!(text.contains("database.max_connections"), "{text}");
        assert!(text.contains("database.connect_timeout"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        let mut problems = Problems::default();
        check_database(
            raw("url: postgres://x/db\nurl_file: /run/secrets/db\n"),
            &mut problems,
        );
        assert!(problems.to_string().contains("both set"), "{problems:?}");
        let mut problems = Problems::default();
        check_database(raw("migrate_on_start: true\n"), &mut problems);
        assert!(
            problems.to_string().contains("migrate_on_start"),
            "{problems:?}"
        );
    }
}
