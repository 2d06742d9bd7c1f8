//! The problems a configuration has, each with the key it is about. Every section's check
//! adds to one [`Problems`], so a configuration with several mistakes is reported once, whole.

use std::fmt;
use std::time::Duration;

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key path, e.g. `server.max_rows` or `tenants[acme].credentials.process_env`.
    pub key: String,
    /// What is wrong with it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Every problem found, in the order the checks found them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// Records that `key` is wrong.
    pub fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            key: key.into(),
            message: message.into(),
        });
    }

    /// Records a problem written as one line that starts with its key
    /// (`server.tls.reload_interval must be greater than 0`).
    pub fn push_line(&mut self, line: impl Into<String>) {
        let line = line.into();
        match line.split_once(' ') {
            Some((key, message)) => self.push(key.trim_end_matches(':'), message),
            None => self.push(line, "is invalid"),
        }
    }

    /// Renames the keys `label` gives a new name for (a key set on the command line is
    /// named by its option).
    pub(super) fn relabel(&mut self, label: impl Fn(&str) -> Option<String>) {
        for problem in &mut self.0 {
            if let Some(named) = label(&problem.key) {
                problem.key = named;
            }
        }
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The problems found.
    pub fn iter(&self) -> impl Iterator<Item = &Problem> {
        self.0.iter()
    }

    /// A count or size: greater than 0 and at most `max`.
    pub fn in_range(&mut self, key: &str, value: u64, max: u64) {
        if value == 0 {
            self.push(key, "must be greater than 0");
        } else if value > max {
            self.push(
                key,
                format!("{value} is more than the largest allowed, {max}"),
            );
        }
    }

    /// A duration: greater than 0 and at most `max`.
    pub fn duration_in_range(&mut self, key: &str, value: Duration, max: Duration) {
        if value.is_zero() {
            self.push(key, "must be greater than 0");
        } else if value > max {
            self.push(
                key,
                format!(
                    "{} is more than the longest allowed, {}",
                    humantime::format_duration(value),
                    humantime::format_duration(max)
                ),
            );
        }
    }

    /// A URL whose scheme is one of `schemes`.
    pub fn url(&mut self, key: &str, value: &str, schemes: &[&str]) {
        let ok = url::Url::parse(value).is_ok_and(|u| schemes.contains(&u.scheme()));
        if !ok {
            let what = if schemes.contains(&"file") {
                "an http(s) or file URL"
            } else {
                "an http(s) URL"
            };
            self.push(key, format!("'{value}' is not {what}"));
        }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, problem) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// Sizes in bytes.
pub(super) const MIB: u64 = 1024 * 1024;
/// Sizes in bytes.
pub(super) const GIB: u64 = 1024 * MIB;
/// One hour.
pub(super) const HOUR: Duration = Duration::from_secs(3600);
