//! `querygate audit query`: the records that match a filter (time range, tenant, principal,
//! issuer, tool, class, decision, outcome), read from audit files or from the
//! `audit_events` table, ordered by their calls' start (`timestamp`; records of one start in
//! the order they were written).
//!
//! Files are read through the chain's line parser, so only intact records (their content
//! matching their hash) are returned; a line that is not one is reported, never shown.
//! They are read a line at a time and merged in call-start order through a bounded window
//! (`query/merge.rs`), so memory does not grow with their size. In
//! PostgreSQL the filter is one fixed statement with bind parameters over the indexed
//! columns (`tenant`, `principal`, `tool`, `decision`, `query_class`, `at`), ordered by
//! `at` so that each `(column, at)` index yields the records in order and a `--limit` stops
//! early.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use futures::TryStreamExt as _;
use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::chain::{self, Linked, Stored};
use super::record::{Decision, Outcome, Phase, class};

mod merge;

pub use merge::{FileMatches, WINDOW_BYTES};

/// Why a filter value is not acceptable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FilterError {
    /// Neither an RFC 3339 time nor a relative one.
    #[error(
        "'{0}' is not a time: give RFC 3339 (2026-11-30T11:30:00Z, 2026-11-30T12:30:00+01:00, 2026-11-30) or a time ago (30m, 1h, 7d)"
    )]
    Time(String),
    /// Not one of the decision strings.
    #[error("'{0}' is not a decision: one of {DECISIONS}")]
    Decision(String),
    /// Not one of the statement classes.
    #[error("'{0}' is not a query class: one of {CLASSES}")]
    Class(String),
    /// Not one of the outcomes.
    #[error("'{0}' is not an outcome: one of ok, error, unknown")]
    Outcome(String),
    /// `--since` is not before `--until`.
    #[error("--since ({since}) is not before --until ({until})")]
    EmptyRange {
        /// The start, as given.
        since: String,
        /// The end, as given.
        until: String,
    },
}

const DECISIONS: &str = "allow, refuse_immediate, needs_approval_requested, needs_approval_accepted, needs_approval_declined, needs_approval_cancelled, needs_approval_unavailable";
const CLASSES: &str = "select, mutation_create, mutation_delete, lifecycle, unknown";

/// A `--since`/`--until` value: RFC 3339 with `Z` or an offset (`2026-11-30T11:30:00Z`,
/// `…+01:00`, fractions allowed), a UTC date (`2026-11-30`, its midnight), or a time ago
/// (`30m`, `1h`, `7d`, `1h30m`: now minus that).
pub fn parse_time(text: &str) -> Result<SystemTime, FilterError> {
    parse_time_at(text, SystemTime::now())
}

fn parse_time_at(text: &str, now: SystemTime) -> Result<SystemTime, FilterError> {
    let bad = || FilterError::Time(text.to_owned());
    let text = text.trim();
    let is_date = text.len() >= 10
        && text.as_bytes().get(4) == Some(&b'-')
        && text.as_bytes()[..4].iter().all(u8::is_ascii_digit);
    if !is_date {
        let ago = humantime::parse_duration(text).map_err(|_| bad())?;
        return now.checked_sub(ago).ok_or_else(bad);
    }
    if text.len() == 10 {
        return humantime::parse_rfc3339(&format!("{text}T00:00:00Z")).map_err(|_| bad());
    }
    // humantime reads UTC only: take the offset off and apply it.
    let (local, offset) = if let Some(local) = text.strip_suffix(['Z', 'z']) {
        (local, 0i64)
    } else {
        let split = text.len().checked_sub(6).ok_or_else(bad)?;
        let (local, zone) = text.split_at_checked(split).ok_or_else(bad)?;
        let zone = zone.as_bytes();
        let sign = match zone[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return Err(bad()),
        };
        let digits = |pair: &[u8]| -> Option<i64> {
            let text = std::str::from_utf8(pair).ok()?;
            text.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| text.parse().ok())
                .flatten()
        };
        let (hours, minutes) = match (digits(&zone[1..3]), zone[3], digits(&zone[4..6])) {
            (Some(h), b':', Some(m)) if h < 24 && m < 60 => (h, m),
            _ => return Err(bad()),
        };
        (local, sign * (hours * 3600 + minutes * 60))
    };
    let at = humantime::parse_rfc3339_weak(local).map_err(|_| bad())?;
    let shift = Duration::from_secs(offset.unsigned_abs());
    if offset >= 0 {
        at.checked_sub(shift)
    } else {
        at.checked_add(shift)
    }
    .ok_or_else(bad)
}

/// A `--decision` value: one of StackQL's decision strings.
pub fn parse_decision(text: &str) -> Result<Decision, FilterError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| FilterError::Decision(text.to_owned()))
}

/// A `--class` value: one of the statement classes.
pub fn parse_class(text: &str) -> Result<String, FilterError> {
    [
        class::SELECT,
        class::MUTATION_CREATE,
        class::MUTATION_DELETE,
        class::LIFECYCLE,
        class::UNKNOWN,
    ]
    .contains(&text)
    .then(|| text.to_owned())
    .ok_or_else(|| FilterError::Class(text.to_owned()))
}

/// An `--outcome` value: `ok`, `error` or `unknown`.
pub fn parse_outcome(text: &str) -> Result<Outcome, FilterError> {
    serde_json::from_value(serde_json::Value::String(text.to_owned()))
        .map_err(|_| FilterError::Outcome(text.to_owned()))
}

/// What records to return. Every field set must match; `None` matches anything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Records of calls that started at or after this time.
    pub since: Option<SystemTime>,
    /// Records of calls that started before this time.
    pub until: Option<SystemTime>,
    /// The tenant.
    pub tenant: Option<String>,
    /// The principal's subject.
    pub principal: Option<String>,
    /// The JWT issuer that vouched for the principal.
    pub issuer: Option<String>,
    /// The tool.
    pub tool: Option<String>,
    /// The statement class.
    pub class: Option<String>,
    /// The gate's decision.
    pub decision: Option<Decision>,
    /// How the call ended (intent records have none, so they never match).
    pub outcome: Option<Outcome>,
    /// At most this many records (the earliest).
    pub limit: Option<usize>,
}

impl Filter {
    /// The filter, refused when its time range is empty.
    pub fn checked(self) -> Result<Self, FilterError> {
        match (self.since, self.until) {
            (Some(since), Some(until)) if since >= until => Err(FilterError::EmptyRange {
                since: humantime::format_rfc3339_micros(since).to_string(),
                until: humantime::format_rfc3339_micros(until).to_string(),
            }),
            _ => Ok(self),
        }
    }

    /// Whether `stored` matches. A record whose timestamp cannot be read matches no time
    /// bound.
    pub fn matches(&self, stored: &Stored) -> bool {
        let r = &stored.record;
        // An absent field is stored as empty text here and as NULL in PostgreSQL: no filter
        // value matches it in either.
        let same = |wanted: &Option<String>, value: &str| {
            wanted
                .as_deref()
                .is_none_or(|w| !value.is_empty() && w == value)
        };
        if self.since.is_some() || self.until.is_some() {
            let Ok(at) = humantime::parse_rfc3339(&r.timestamp) else {
                return false;
            };
            if self.since.is_some_and(|since| at < since)
                || self.until.is_some_and(|until| at >= until)
            {
                return false;
            }
        }
        same(&self.tenant, &r.tenant)
            && same(&self.principal, &r.principal)
            && same(&self.issuer, r.issuer.as_deref().unwrap_or_default())
            && same(&self.tool, &r.tool)
            && same(&self.class, r.query_class.as_deref().unwrap_or_default())
            && self.decision.is_none_or(|d| d == r.decision)
            && self.outcome.is_none_or(|o| Some(o) == r.outcome)
    }
}

/// One matching record.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// The record as stored: the file's line, or in PostgreSQL the `record` column with its
    /// `hash` (the line the file sink would have written).
    pub line: String,
    /// The record, parsed.
    pub stored: Stored,
}

/// What a query found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Matches {
    /// The matching records, by their calls' start.
    pub records: Vec<Found>,
    /// Lines that are not intact records (`file:line: reason`); an incomplete last line of
    /// a file (a write a crash cut short, never acknowledged) is not counted.
    pub unreadable: Vec<String>,
    /// Records of files given after one of a later start: their call outlasted more
    /// matching records than the reorder window holds ([`WINDOW_BYTES`]).
    pub out_of_order: u64,
}

/// The matching records of `files`, by their calls' start (records of one start in the
/// order of the files given and of their lines), all at once: [`FileMatches`] gives them
/// one at a time, in bounded memory.
pub fn query_files(files: &[PathBuf], filter: &Filter) -> std::io::Result<Matches> {
    let mut found = FileMatches::open(files, filter)?;
    let records = found.by_ref().collect::<std::io::Result<Vec<_>>>()?;
    Ok(Matches {
        records,
        unreadable: std::mem::take(&mut found.unreadable),
        out_of_order: found.out_of_order,
    })
}

/// The filter in SQL: every condition is a bind parameter that is NULL when not filtered on.
/// It reads the view `audit_records` (the table's rows, for `querygate_auditor` too).
const SELECT: &str = "\
SELECT id, seq, prev_hash, record, hash, mac FROM audit_records
WHERE ($1::text IS NULL OR at >= $1::text::timestamptz)
  AND ($2::text IS NULL OR at < $2::text::timestamptz)
  AND ($3::text IS NULL OR tenant = $3)
  AND ($4::text IS NULL OR principal = $4)
  AND ($5::text IS NULL OR issuer = $5)
  AND ($6::text IS NULL OR tool = $6)
  AND ($7::text IS NULL OR query_class = $7)
  AND ($8::text IS NULL OR decision = $8)
  AND ($9::text IS NULL OR outcome = $9)
ORDER BY at, id
LIMIT $10";

/// The matching records of the `audit_events` table, by `at` (the call's start), then in
/// insertion order. A row whose
/// `record` is not a record, or does not match its `hash`, is reported, never returned.
pub async fn query_database(pool: &PgPool, filter: &Filter) -> Result<Matches, sqlx_core::Error> {
    let time =
        |at: Option<SystemTime>| at.map(|at| humantime::format_rfc3339_micros(at).to_string());
    let limit = filter
        .limit
        .map_or(i64::MAX, |n| i64::try_from(n).unwrap_or(i64::MAX));
    let mut rows = query_as::<Postgres, (i64, i64, String, String, String, Option<String>)>(SELECT)
        .bind(time(filter.since))
        .bind(time(filter.until))
        .bind(filter.tenant.as_deref())
        .bind(filter.principal.as_deref())
        .bind(filter.issuer.as_deref())
        .bind(filter.tool.as_deref())
        .bind(filter.class.as_deref())
        .bind(filter.decision.map(Decision::as_str))
        .bind(filter.outcome.map(Outcome::as_str))
        .bind(limit)
        .fetch(pool);
    let mut matches = Matches::default();
    while let Some((id, seq, prev_hash, record, hash, mac)) = rows.try_next().await? {
        let stored = match chain::parse_canonical(&record) {
            Ok(stored) if chain::hash_of(&record) == hash => stored,
            Ok(_) => {
                matches
                    .unreadable
                    .push(format!("row id {id}: {}", chain::LineError::HashMismatch));
                continue;
            }
            Err(err) => {
                matches.unreadable.push(format!("row id {id}: {err}"));
                continue;
            }
        };
        let line = Linked {
            seq: u64::try_from(seq).unwrap_or_default(),
            prev_hash,
            hash,
            canonical: record,
            mac,
        }
        .line();
        matches.records.push(Found { line, stored });
    }
    Ok(matches)
}

/// The columns of the table format.
pub const COLUMNS: [&str; 13] = [
    "time",
    "stream#seq",
    "tenant",
    "principal",
    "tool",
    "class",
    "decision",
    "outcome",
    "approver",
    "ms",
    "rows",
    "code",
    "sql",
];

/// How many characters of the SQL the table shows.
const SQL_SHOWN: usize = 80;

/// One record as a row of the table format: the principal with its issuer, `AUTH_FAILURE`
/// as the tool of an authentication failure, `APPROVAL_DECISION <tool>` as the tool of an
/// approval decision (its principal is the decider, its outcome `approved` or `denied`),
/// `intent` as the outcome of an intent, the approver of an approved call or of a decision,
/// the SQL on one line and shortened (or `provider=<p>` of a pull). The text is unescaped:
/// the renderer escapes it.
pub fn table_row(stored: &Stored) -> Vec<String> {
    let r = &stored.record;
    let principal = match &r.issuer {
        Some(issuer) => format!("{} ({issuer})", r.principal),
        None => r.principal.clone(),
    };
    let tool = match r.phase {
        Phase::AuthFailure => "AUTH_FAILURE".to_owned(),
        Phase::ApprovalDecision => format!("APPROVAL_DECISION {}", r.tool),
        _ => r.tool.clone(),
    };
    let outcome = match (r.phase, r.outcome) {
        (Phase::Intent, _) => "intent".to_owned(),
        (Phase::ApprovalDecision, _) if r.decision == Decision::NeedsApprovalAccepted => {
            "approved".to_owned()
        }
        (Phase::ApprovalDecision, _) => "denied".to_owned(),
        (_, Some(outcome)) => outcome.as_str().to_owned(),
        (_, None) => String::new(),
    };
    let provider = r
        .args
        .as_ref()
        .and_then(|args| args.get("provider"))
        .and_then(|p| p.as_str())
        .map(|p| format!("provider={p}"));
    let sql = match (&r.sql, provider) {
        (Some(sql), _) => {
            let flat: String = sql
                .chars()
                .map(|c| if c.is_whitespace() { ' ' } else { c })
                .collect();
            let short: String = flat.chars().take(SQL_SHOWN).collect();
            if flat.chars().count() > SQL_SHOWN {
                format!("{short}…")
            } else {
                short
            }
        }
        (None, Some(provider)) => provider,
        (None, None) => String::new(),
    };
    let optional = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    vec![
        r.timestamp.clone(),
        format!("{}#{}", stored.stream, stored.seq),
        r.tenant.clone(),
        principal,
        tool,
        r.query_class.clone().unwrap_or_default(),
        r.decision.as_str().to_owned(),
        outcome,
        r.approver.clone().unwrap_or_default(),
        optional(r.duration_ms),
        optional(r.rows_returned),
        r.error_code.clone().unwrap_or_default(),
        sql,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::chain::{ChainHead, link};
    use crate::audit::record::AuditRecord;

    fn at(text: &str) -> SystemTime {
        humantime::parse_rfc3339(text).unwrap()
    }

    #[test]
    fn times_are_rfc3339_dates_or_ago() {
        let now = at("2026-11-30T12:00:00Z");
        for (text, expected) in [
            ("2026-11-30T11:30:00Z", "2026-11-30T11:30:00Z"),
            ("2026-11-30T11:30:00.5z", "2026-11-30T11:30:00.5Z"),
            ("2026-11-30T12:30:00+01:00", "2026-11-30T11:30:00Z"),
            ("2026-11-30T06:00:00-05:30", "2026-11-30T11:30:00Z"),
            ("2026-11-30", "2026-11-30T00:00:00Z"),
            ("30m", "2026-11-30T11:30:00Z"),
            ("1h", "2026-11-30T11:00:00Z"),
            ("7d", "2026-11-23T12:00:00Z"),
            ("1h30m", "2026-11-30T10:30:00Z"),
        ] {
            assert_eq!(parse_time_at(text, now), Ok(at(expected)), "{text}");
        }
        for text in [
            "",
            "yesterday",
            "2026-11-30T11:30:00",
            "2026-13-30",
            "2026-11-30T11:30:00+1:00",
            "2026-11-30T11:30:00+25:00",
            "-1h",
        ] {
            assert_eq!(
                parse_time_at(text, now),
                Err(FilterError::Time(text.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn decisions_classes_and_outcomes_are_checked() {
        assert_eq!(
            parse_decision("needs_approval_declined"),
            Ok(Decision::NeedsApprovalDeclined)
        );
        let err = parse_decision("deny").unwrap_err().to_string();
        assert!(err.contains("'deny' is not a decision") && err.contains("refuse_immediate"));
        assert_eq!(
            parse_class("mutation_delete").as_deref(),
            Ok("mutation_delete")
        );
        assert!(parse_class("delete").is_err());
        assert_eq!(parse_outcome("unknown"), Ok(Outcome::Unknown));
        assert!(parse_outcome("failed").is_err());
        let empty = Filter {
            since: Some(at("2026-11-30T12:00:00Z")),
            until: Some(at("2026-11-30T12:00:00Z")),
            ..Default::default()
        };
        assert!(matches!(
            empty.checked(),
            Err(FilterError::EmptyRange { .. })
        ));
    }

    #[test]
    fn files_are_filtered_and_broken_lines_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut head = ChainHead::genesis();
        let mut lines = Vec::new();
        // The third call started before the second (its record was written after).
        for (hour, tenant, decision) in [
            (10, "acme", Decision::Allow),
            (12, "globex", Decision::RefuseImmediate),
            (11, "acme", Decision::RefuseImmediate),
        ] {
            let record = AuditRecord {
                timestamp: format!("2026-11-30T{hour}:00:00.000000Z"),
                tenant: tenant.into(),
                tool: "run_select_query".into(),
                decision,
                ..Default::default()
            };
            let linked = link("r1", &head, &record, None).unwrap();
            head = linked.head();
            lines.push(linked.line());
        }
        lines.insert(1, lines[0].replace("acme", "evil"));
        let path = dir.path().join("a.log");
        std::fs::write(&path, format!("{}\n{{\"v\":1,", lines.join("\n"))).unwrap();
        let filter = Filter {
            tenant: Some("acme".into()),
            since: Some(at("2026-11-30T10:30:00Z")),
            ..Default::default()
        };
        let found = query_files(std::slice::from_ref(&path), &filter).unwrap();
        assert_eq!(found.records.len(), 1);
        assert_eq!(found.records[0].line, lines[3]);
        assert_eq!(found.records[0].stored.seq, 3);
        assert_eq!(found.unreadable.len(), 1, "{:?}", found.unreadable);
        assert!(
            found.unreadable[0].ends_with("a.log:2: the record does not match its hash (edited)")
        );
        let limited = Filter {
            decision: Some(Decision::RefuseImmediate),
            limit: Some(1),
            ..Default::default()
        };
        let found = query_files(std::slice::from_ref(&path), &limited).unwrap();
        assert_eq!(found.records.len(), 1);
        assert_eq!(found.records[0].stored.record.tenant, "acme");
        let all = query_files(&[path], &Filter::default()).unwrap();
        let seqs: Vec<u64> = all.records.iter().map(|f| f.stored.seq).collect();
        assert_eq!(seqs, [1, 3, 2]);
    }
}
