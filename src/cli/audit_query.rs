//! `querygate audit query`: runs the filter of [`crate::audit::query`] over files or the
//! database and prints the records as a table or as JSON Lines.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;

use crate::audit::query::{self, Filter, Matches};
use crate::engine::{Cell, QueryOutput};

use super::{Output, RecordFormat};

/// Where the records are read.
pub(super) enum Source<'a> {
    /// The `audit_events` table.
    Database(&'a crate::db::PgPool),
    /// These files (or the error of listing them).
    Files(std::io::Result<Vec<PathBuf>>),
}

/// Runs the query and prints what it found; the exit code: 0, 1 when the records cannot be
/// read or some are not intact, 2 when the filter is refused.
pub(super) async fn run(source: Source<'_>, filter: Filter, format: RecordFormat) -> i32 {
    let filter = match filter.checked() {
        Ok(filter) => filter,
        Err(err) => {
            eprintln!("error: {err}");
            return 2;
        }
    };
    let found = match source {
        Source::Database(pool) => query::query_database(pool, &filter)
            .await
            .map_err(|err| err.to_string()),
        Source::Files(files) => files
            .and_then(|files| query::query_files(&files, &filter))
            .map_err(|err| err.to_string()),
    };
    let found = match found {
        Ok(found) => found,
        Err(err) => {
            eprintln!(
                "error: cannot read the audit records: {}",
                super::said(&err)
            );
            return 1;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let to_terminal = stdout.is_terminal();
    let text = render(&found, format, to_terminal);
    if stdout.write_all(text.as_bytes()).is_err() || stdout.flush().is_err() {
        return 1;
    }
    for problem in &found.unreadable {
        eprintln!(
            "warning: not an intact record, left out (run `querygate audit verify`): {}",
            super::said(problem)
        );
    }
    if found.unreadable.is_empty() { 0 } else { 1 }
}

/// JSON Lines: each record as stored (escaped as the JSON output of `querygate query` when
/// it goes to a terminal, byte for byte otherwise); the table: through the table renderer of
/// `querygate query`, which escapes control and bidirectional characters.
fn render(found: &Matches, format: RecordFormat, to_terminal: bool) -> String {
    match format {
        RecordFormat::Json => {
            let mut out = String::new();
            for record in &found.records {
                if to_terminal {
                    out.push_str(&crate::safe_text::escape_json_text(record.line.clone()));
                } else {
                    out.push_str(&record.line);
                }
                out.push('\n');
            }
            out
        }
        RecordFormat::Table => {
            let table = QueryOutput {
                columns: query::COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
                rows: found
                    .records
                    .iter()
                    .map(|r| {
                        query::table_row(&r.stored)
                            .into_iter()
                            .map(Cell::Text)
                            .collect()
                    })
                    .collect(),
                ..Default::default()
            };
            super::render(&table, Output::Table, to_terminal)
        }
    }
}
