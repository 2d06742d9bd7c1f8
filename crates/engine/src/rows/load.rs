//! The sink that turns each row into cells and hands them to the [`RowWriter`] in batches.

use std::borrow::Cow;

use rusqlite::types::Value;

use super::RowsError;
use super::binder::ColumnBinder;
use super::scan::{Key, KeyPattern, Scanner};
use super::walk::{Halt, Pair, RowSink, Walk, key_text};
use super::writer::{Cell, RowWriter};

pub(super) struct LoadSink<'s, 'w, 'a> {
    pub(super) writer: &'s mut RowWriter<'w>,
    pub(super) binder: &'s ColumnBinder,
    pub(super) fixed: &'a [(usize, Value)],
    /// Buffered rows, row-major, `writer.width()` cells each.
    pub(super) cells: Vec<Cell<'a>>,
    /// Rows in `cells`.
    pub(super) buffered: usize,
    pub(super) rows: u64,
    /// The keys of the previous row in order, with their positions: rows of one response
    /// nearly always list their keys in the same order, so the key seen at the same index is
    /// compared with the body's bytes ([`Scanner::key_is`]) before the key is scanned and
    /// looked up.
    pub(super) recent_keys: Vec<RecentKey>,
}

impl<'a> LoadSink<'_, '_, 'a> {
    /// The cell of 1-based position `pos` in the row being built.
    fn cell(&mut self, pos: usize) -> Option<&mut Cell<'a>> {
        let width = self.writer.width();
        if pos == 0 || pos > width {
            return None;
        }
        self.cells.get_mut(self.buffered * width + pos - 1)
    }

    /// Starts a row: every position NULL, then the fixed values. A fixed position outside
    /// the table is an error, as binding it would be.
    fn begin_row(&mut self) -> rusqlite::Result<()> {
        let width = self.writer.width();
        let start = self.buffered * width;
        let fixed = self.fixed;
        match self.cells.get_mut(start..start + width) {
            Some(row) => row.fill(Cell::Null),
            None => return Err(rusqlite::Error::InvalidParameterCount(start, width)),
        }
        for (pos, value) in fixed {
            match self.cell(*pos) {
                Some(cell) => *cell = Cell::Fixed(value),
                None => return Err(rusqlite::Error::InvalidParameterCount(*pos, width)),
            }
        }
        Ok(())
    }

    /// Ends a row; a full batch is inserted.
    fn finish_row(&mut self) -> rusqlite::Result<()> {
        self.buffered += 1;
        if self.buffered == self.writer.per_insert() {
            self.flush()?;
        }
        Ok(())
    }

    /// Inserts the buffered rows.
    pub(super) fn flush(&mut self) -> rusqlite::Result<()> {
        let rows = std::mem::take(&mut self.buffered);
        self.rows += self.writer.insert(&self.cells, rows)?;
        Ok(())
    }

    fn set(&mut self, pos: usize, value: Cell<'a>) {
        if let Some(cell) = self.cell(pos) {
            *cell = value;
        }
    }

    fn set_null(&mut self, pos: usize) {
        // A fixed value survives a JSON null; otherwise NULL (a later duplicate key wins).
        if let Some(cell) = self.cell(pos)
            && !matches!(cell, Cell::Fixed(_))
        {
            *cell = Cell::Null;
        }
    }

    /// Sets one property value given as its raw JSON text.
    fn set_raw(&mut self, pos: usize, raw: Cow<'a, str>) -> Result<(), RowsError> {
        match raw.as_bytes().first() {
            Some(b'"') => {
                let inner = raw.get(1..raw.len() - 1).unwrap_or_default();
                let text = if inner.as_bytes().contains(&b'\\') {
                    Cow::Owned(serde_json::from_str::<String>(&raw)?)
                } else {
                    match raw {
                        Cow::Borrowed(raw) => {
                            Cow::Borrowed(raw.get(1..raw.len() - 1).unwrap_or_default())
                        }
                        Cow::Owned(ref raw) => {
                            Cow::Owned(raw.get(1..raw.len() - 1).unwrap_or_default().to_owned())
                        }
                    }
                };
                self.set(pos, Cell::Text(text));
            }
            Some(b'{' | b'[') => self.set(pos, Cell::Text(raw)),
            Some(b't') => self.set(pos, Cell::Integer(1)),
            Some(b'f') => self.set(pos, Cell::Integer(0)),
            Some(b'n') | None => self.set_null(pos),
            Some(_) => {
                let cell = number(raw);
                self.set(pos, cell);
            }
        }
        Ok(())
    }
}

/// A JSON number: INTEGER when it fits i64, the exact digits as TEXT for larger integers,
/// else REAL (TEXT of the digits beyond f64's range).
fn number(raw: Cow<'_, str>) -> Cell<'_> {
    // Integer parsing fails on a fraction or an exponent, so no separate check for them.
    if let Ok(i) = raw.parse::<i64>() {
        return Cell::Integer(i);
    }
    if raw.parse::<u64>().is_ok() {
        return Cell::Text(raw);
    }
    match raw.parse::<f64>() {
        Ok(f) if f.is_finite() => Cell::Real(f),
        // Beyond f64 range: keep the digits rather than store an infinity.
        _ => Cell::Text(raw),
    }
}

impl<'a> RowSink<'a> for LoadSink<'_, '_, 'a> {
    fn object_row(&mut self, scan: &mut Scanner<'a>, allow_empty: bool) -> Walk {
        self.begin_row().map_err(sink_error)?;
        let mut more = scan.open_object()?;
        let mut at = 0;
        while more {
            let pos = match self.recent_keys.get(at) {
                Some(RecentKey {
                    pattern: Some(pattern),
                    pos,
                }) if scan.key_is(pattern) => *pos,
                _ => self.column_of(scan.key()?, at)?,
            };
            match pos {
                Some(pos) => {
                    let raw = scan.raw_value()?;
                    self.set_raw(pos, Cow::Borrowed(raw)).map_err(Halt::Sink)?;
                }
                None => scan.skip_value()?,
            }
            at += 1;
            more = scan.next_property()?;
        }
        if at > 0 || allow_empty {
            self.finish_row().map_err(sink_error)?;
        }
        Ok(())
    }

    fn wants_scalar_rows(&self) -> bool {
        self.binder.value_pos.is_some()
    }

    fn scalar_row(&mut self, raw: Cow<'a, str>) -> Walk {
        let Some(pos) = self.binder.value_pos else {
            return Ok(());
        };
        self.begin_row().map_err(sink_error)?;
        self.set_raw(pos, raw).map_err(Halt::Sink)?;
        self.finish_row().map_err(sink_error)
    }

    fn pairs_row(&mut self, pairs: &[Pair<'a>]) -> Walk {
        self.begin_row().map_err(sink_error)?;
        for (key, raw) in pairs {
            if let Some(pos) = self.binder.position(key) {
                self.set_raw(pos, Cow::Borrowed(raw)).map_err(Halt::Sink)?;
            }
        }
        self.finish_row().map_err(sink_error)
    }
}

fn sink_error(error: rusqlite::Error) -> Halt {
    Halt::Sink(RowsError::Sqlite(error))
}

impl LoadSink<'_, '_, '_> {
    /// The bind position of `key`, the `at`-th key of a row (None: not a column), which is
    /// recorded as the key seen at that index.
    fn column_of(&mut self, key: Key<'_>, at: usize) -> Walk<Option<usize>> {
        let pattern = KeyPattern::of(&key);
        let pos = self.binder.position(&key_text(key)?);
        let seen = RecentKey { pattern, pos };
        let remembered = self.recent_keys.len();
        match self.recent_keys.get_mut(at) {
            Some(slot) => *slot = seen,
            None if at == remembered && at < RECENT_KEYS => self.recent_keys.push(seen),
            None => {}
        }
        Ok(pos)
    }
}

/// A key seen at some index of the previous row.
#[derive(Debug)]
pub(super) struct RecentKey {
    /// The key as the body wrote it before its value; `None` when it holds an escape.
    pattern: Option<KeyPattern>,
    /// Its column's bind position.
    pos: Option<usize>,
}

/// How many leading keys of a row [`LoadSink::column_of`] records.
const RECENT_KEYS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_kind() {
        let cell = |raw: &'static str| number(Cow::Borrowed(raw));
        assert!(matches!(cell("-42"), Cell::Integer(-42)));
        assert!(matches!(
            cell("9223372036854775807"),
            Cell::Integer(i64::MAX)
        ));
        assert!(
            matches!(cell("18446744073709551615"), Cell::Text(t) if t == "18446744073709551615")
        );
        assert!(matches!(cell("1.5"), Cell::Real(f) if f == 1.5));
        assert!(matches!(cell("1e3"), Cell::Real(f) if f == 1000.0));
        assert!(matches!(cell("2E-1"), Cell::Real(f) if f == 0.2));
        assert!(matches!(cell("-0.0"), Cell::Real(f) if f == 0.0));
        assert!(matches!(cell("99999999999999999999999"), Cell::Real(f) if f == 1e23));
        assert!(matches!(cell("1e999"), Cell::Text(t) if t == "1e999"));
    }
}
