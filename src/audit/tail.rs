//! `querygate audit tail`: the latest records, one line each, for a person at a terminal;
//! with `--follow`, new records as they are written (across rotations).

use std::collections::VecDeque;
use std::io::{Read as _, Seek as _, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx_core::query_as::query_as;
use sqlx_postgres::{PgPool, Postgres};

use super::chain::{self, Stored};
use super::lines::FileLines;
use super::location::{self, FileLocation};
use super::record::Phase;

/// How often `--follow` looks for new records.
const POLL: Duration = Duration::from_millis(500);

/// One record as a line: time, tenant/principal (issuer), tool (or `AUTH_FAILURE` with the
/// client address), class, decision, outcome, duration, rows, error code, and the SQL
/// (shortened).
pub fn format_record(stored: &Stored) -> String {
    let r = &stored.record;
    let issuer = r
        .issuer
        .as_ref()
        .map(|issuer| format!(" ({issuer})"))
        .unwrap_or_default();
    let mut parts = vec![
        r.timestamp.clone(),
        format!("{}#{}", stored.stream, stored.seq),
        format!("{}/{}{issuer}({})", r.tenant, r.principal, r.auth_method),
    ];
    if r.phase == Phase::Prune {
        parts.push("PRUNE".to_owned());
        for (stream, pruned) in r.pruned.iter().flatten() {
            parts.push(format!("{stream}#..{}", pruned.seq));
        }
        return parts.join(" ");
    }
    if r.phase == Phase::AuthFailure {
        parts.push("AUTH_FAILURE".to_owned());
        if let Some(client) = &r.client_addr {
            parts.push(format!("from {client}"));
        }
        if let Some(n) = r.suppressed.filter(|n| *n > 0) {
            parts.push(format!("+{n} suppressed"));
        }
    } else {
        parts.push(r.tool.clone());
    }
    if let Some(class) = &r.query_class {
        parts.push(class.clone());
    }
    parts.push(r.decision.as_str().to_owned());
    match (r.phase, r.outcome) {
        (Phase::Intent, _) => parts.push("INTENT".to_owned()),
        (_, Some(outcome)) => parts.push(outcome.as_str().to_owned()),
        _ => {}
    }
    if let Some(ms) = r.duration_ms {
        parts.push(format!("{ms}ms"));
    }
    if let Some(rows) = r.rows_returned {
        parts.push(format!("rows={rows}"));
    }
    if let Some(code) = &r.error_code {
        parts.push(format!("[{code}]"));
    }
    if r.sql.is_none()
        && let Some(provider) = r
            .args
            .as_ref()
            .and_then(|args| args.get("provider"))
            .and_then(|p| p.as_str())
    {
        parts.push(format!("provider={provider}"));
    }
    if let Some(sql) = &r.sql {
        let flat: String = sql
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let short: String = flat.chars().take(120).collect();
        let ellipsis = if flat.chars().count() > 120 {
            "…"
        } else {
            ""
        };
        parts.push(format!("{short}{ellipsis}"));
    }
    parts.join("  ")
}

/// Prints the last `n` records of the newest files of `location`; with `follow`, keeps
/// printing new ones (and moves to a newer file when one appears) until `stop` resolves.
/// Files are read a line at a time, holding the last `n` lines, and `follow` reads only
/// what was appended: memory does not grow with the files.
pub async fn tail_files(
    location: &FileLocation,
    n: usize,
    follow: bool,
    out: &mut (dyn Write + Send),
    stop: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let files = location::files_of(location)?;
    // The last `n` lines, newest file first, each file read a line at a time.
    let mut lines: VecDeque<String> = VecDeque::new();
    let mut offset = 0;
    for (i, file) in files.iter().rev().enumerate() {
        if i > 0 && lines.len() >= n {
            break;
        }
        let (mut these, complete) = last_lines(file, n - lines.len())?;
        if i == 0 {
            offset = complete;
        }
        these.append(&mut lines);
        lines = these;
    }
    for line in &lines {
        print_line(out, line)?;
    }
    if !follow {
        return Ok(());
    }
    let mut current: Option<PathBuf> = files.last().cloned();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(POLL) => {}
        }
        if let Some(file) = &current {
            let text = read_from(file, offset).unwrap_or_default();
            let end = complete_len(&text);
            for line in complete_lines(&text[..end]) {
                print_line(out, line)?;
            }
            offset += end as u64;
        }
        let newest = location::files_of(location)?.last().cloned();
        if newest.is_some() && newest != current {
            current = newest;
            offset = 0;
        }
    }
}

/// Prints the last `n` records of `audit_events`; with `follow`, keeps printing new ones
/// until `stop` resolves.
pub async fn tail_database(
    pool: &PgPool,
    n: usize,
    follow: bool,
    out: &mut (dyn Write + Send),
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), sqlx_core::Error> {
    let mut last = query_as::<Postgres, (i64, String, String)>(
        "SELECT id, record, hash FROM (SELECT id, record, hash FROM audit_events ORDER BY id DESC LIMIT $1) t ORDER BY id",
    )
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await?;
    let mut last_id = print_rows(out, &mut last);
    if !follow {
        return Ok(());
    }
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = tokio::time::sleep(POLL) => {}
        }
        let mut rows = query_as::<Postgres, (i64, String, String)>(
            "SELECT id, record, hash FROM audit_events WHERE id > $1 ORDER BY id LIMIT 1000",
        )
        .bind(last_id)
        .fetch_all(pool)
        .await?;
        if !rows.is_empty() {
            last_id = print_rows(out, &mut rows);
        }
    }
}

fn print_rows(out: &mut (dyn Write + Send), rows: &mut [(i64, String, String)]) -> i64 {
    let mut last = 0;
    for (id, record, _) in rows.iter() {
        let text = match chain::parse_canonical(record) {
            Ok(stored) => format_record(&stored),
            Err(err) => format!("(record {id} is unreadable: {err})"),
        };
        let _ = writeln!(out, "{text}");
        last = *id;
    }
    let _ = out.flush();
    last
}

fn print_line(out: &mut (dyn Write + Send), line: &str) -> std::io::Result<()> {
    let text = match crate::audit::format::parse_line(line) {
        Ok(parsed) => format_record(&parsed.stored),
        Err(err) => format!("(a line that is not an intact record: {err})"),
    };
    writeln!(out, "{text}")?;
    out.flush()
}

/// The last `n` complete, non-empty lines of `file` (a line at a time: never the whole
/// file), and the length of its complete lines.
fn last_lines(file: &Path, n: usize) -> std::io::Result<(VecDeque<String>, u64)> {
    let mut lines = FileLines::open(file)?;
    let mut last = VecDeque::with_capacity(n.min(1024));
    let mut complete = 0;
    while let Some(line) = lines.next_line()? {
        if line.torn {
            break;
        }
        // A line too long to be a record is shown as one that is not (it is not held).
        let text = match line.oversized {
            Some(_) => "(oversized)",
            None => std::str::from_utf8(line.bytes)
                .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))?,
        };
        let text = text.strip_suffix('\r').unwrap_or(text);
        if n > 0 && !text.trim().is_empty() {
            if last.len() == n {
                last.pop_front();
            }
            last.push_back(text.to_owned());
        }
        complete = lines.consumed();
    }
    Ok((last, complete))
}

/// What `file` holds after `offset` (nothing when it is shorter).
fn read_from(file: &Path, offset: u64) -> std::io::Result<String> {
    let mut file = std::fs::File::open(file)?;
    if file.metadata()?.len() <= offset {
        return Ok(String::new());
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

fn complete_len(text: &str) -> usize {
    text.rfind('\n').map_or(0, |i| i + 1)
}

fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text[..complete_len(text)]
        .lines()
        .filter(|l| !l.trim().is_empty())
}
