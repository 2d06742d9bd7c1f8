//! The table format of `querygate audit query` written a row at a time: the same text as
//! the table renderer of `querygate query` (untrusted text escaped, columns as wide as
//! their widest cell, a closing row count), from the widths measured first, so no row is
//! held.

use std::io::Write;

use crate::audit::chain::Stored;
use crate::audit::query;

/// A record's cells as the table shows them: escaped, on one line.
pub(super) fn cells(stored: &Stored) -> Vec<String> {
    query::table_row(stored)
        .into_iter()
        .map(|cell| super::shown(&cell.replace(['\n', '\r'], " ")).into_owned())
        .collect()
}

/// The widths of the columns, measured over every row.
#[derive(Debug)]
pub(super) struct Widths {
    header: Vec<String>,
    widths: Vec<usize>,
}

impl Widths {
    /// The widths of the header alone.
    pub(super) fn new() -> Self {
        let header: Vec<String> = query::COLUMNS
            .iter()
            .map(|c| super::shown(c).into_owned())
            .collect();
        let widths = header.iter().map(|c| c.chars().count()).collect();
        Widths { header, widths }
    }

    /// Widens the columns to fit `row`.
    pub(super) fn fit(&mut self, row: &[String]) {
        for (width, cell) in self.widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }

    /// Writes `values` as a row.
    pub(super) fn line(&self, out: &mut impl Write, values: &[String]) -> std::io::Result<()> {
        out.write_all(b"| ")?;
        for (i, (value, width)) in values.iter().zip(&self.widths).enumerate() {
            if i > 0 {
                out.write_all(b" | ")?;
            }
            let pad = width.saturating_sub(value.chars().count());
            write!(out, "{value}{}", " ".repeat(pad))?;
        }
        out.write_all(b" |\n")
    }

    /// Writes the header and the rule under it.
    pub(super) fn head(&self, out: &mut impl Write) -> std::io::Result<()> {
        self.line(out, &self.header)?;
        let rule: Vec<String> = self.widths.iter().map(|w| "-".repeat(w + 2)).collect();
        writeln!(out, "|{}|", rule.join("|"))
    }

    /// Writes the closing row count.
    pub(super) fn foot(out: &mut impl Write, rows: usize) -> std::io::Result<()> {
        writeln!(out, "({rows} row{})", if rows == 1 { "" } else { "s" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::AuditRecord;
    use crate::engine::{Cell, QueryOutput};

    #[test]
    fn rows_written_one_at_a_time_are_the_rendered_table() {
        let records: Vec<Stored> = ["a", "a much longer tool\nname", "\u{202e}x"]
            .iter()
            .enumerate()
            .map(|(i, tool)| Stored {
                v: 2,
                stream: "r1".into(),
                seq: i as u64 + 1,
                prev_hash: String::new(),
                record: AuditRecord {
                    tool: (*tool).into(),
                    ..Default::default()
                },
            })
            .collect();
        for n in [0, 1, 3] {
            let table = QueryOutput {
                columns: query::COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
                rows: records[..n]
                    .iter()
                    .map(|r| query::table_row(r).into_iter().map(Cell::Text).collect())
                    .collect(),
                ..Default::default()
            };
            let expected = super::super::render(&table, super::super::Output::Table, false);
            let mut widths = Widths::new();
            for r in &records[..n] {
                widths.fit(&cells(r));
            }
            let mut out = Vec::new();
            widths.head(&mut out).unwrap();
            for r in &records[..n] {
                widths.line(&mut out, &cells(r)).unwrap();
            }
            Widths::foot(&mut out, n).unwrap();
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }
}
