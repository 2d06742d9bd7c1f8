//! The sink that turns each row into cells and hands them to the [`RowWriter`] in batches.

use std::borrow::Cow;
use std::fmt;

use rusqlite::types::Value;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::RowsError;
use super::binder::ColumnBinder;
use super::walk::{RowSink, Scalar};
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
    /// The real error behind a `custom` serde error raised to abort the parse.
    pub(super) failure: Option<RowsError>,
    /// The keys of the previous row in order, with their positions: rows of one response
    /// nearly always list their keys in the same order, so comparing against the key seen at
    /// the same index is cheaper than a hash lookup.
    pub(super) recent_keys: Vec<(String, Option<usize>)>,
}

impl<'a> LoadSink<'_, '_, 'a> {
    /// Records `failure` and returns the serde error that aborts the parse.
    fn abort<E: de::Error>(&mut self, failure: impl Into<RowsError>) -> E {
        let failure = failure.into();
        let error = E::custom(&failure);
        self.failure = Some(failure);
        error
    }

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

    fn set_scalar(&mut self, pos: usize, value: Scalar<'_>) {
        let cell = match value {
            Scalar::Null => return self.set_null(pos),
            Scalar::Bool(b) => Cell::Integer(i64::from(b)),
            Scalar::I64(i) => Cell::Integer(i),
            Scalar::U64(u) => match i64::try_from(u) {
                Ok(i) => Cell::Integer(i),
                Err(_) => Cell::Text(Cow::Owned(u.to_string())),
            },
            Scalar::F64(f) => Cell::Real(f),
            Scalar::Str(s) | Scalar::Json(s) => Cell::Text(Cow::Owned(s.to_owned())),
        };
        self.set(pos, cell);
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
    fn map_row<A: MapAccess<'a>>(&mut self, mut map: A, allow_empty: bool) -> Result<(), A::Error> {
        if let Err(e) = self.begin_row() {
            return Err(self.abort(e));
        }
        let mut at = 0;
        while let Some(pos) = map.next_key_seed(ColumnSeed {
            binder: self.binder,
            recent: &mut self.recent_keys,
            at,
        })? {
            at += 1;
            match pos {
                Some(pos) => {
                    let raw: &'a RawValue = map.next_value()?;
                    if let Err(e) = self.set_raw(pos, Cow::Borrowed(raw.get())) {
                        return Err(self.abort(e));
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if (at > 0 || allow_empty)
            && let Err(e) = self.finish_row()
        {
            return Err(self.abort(e));
        }
        Ok(())
    }

    fn wants_scalar_rows(&self) -> bool {
        self.binder.value_pos.is_some()
    }

    fn scalar_row<E: de::Error>(&mut self, value: Scalar<'_>) -> Result<(), E> {
        let Some(pos) = self.binder.value_pos else {
            return Ok(());
        };
        if let Err(e) = self.begin_row() {
            return Err(self.abort(e));
        }
        self.set_scalar(pos, value);
        self.finish_row().map_err(|e| self.abort(e))
    }

    fn pairs_row(&mut self, pairs: &[(Cow<'a, str>, Cow<'a, RawValue>)]) -> serde_json::Result<()> {
        if let Err(e) = self.begin_row() {
            return Err(self.abort(e));
        }
        for (key, raw) in pairs {
            let Some(pos) = self.binder.position(key) else {
                continue;
            };
            let text = match raw {
                Cow::Borrowed(raw) => Cow::Borrowed(raw.get()),
                Cow::Owned(raw) => Cow::Owned(raw.get().to_owned()),
            };
            if let Err(e) = self.set_raw(pos, text) {
                return Err(self.abort(e));
            }
        }
        if let Err(e) = self.finish_row() {
            return Err(self.abort(e));
        }
        Ok(())
    }
}

/// Deserializes the `at`-th key of a row object into the bind position of its column
/// (None: not a column), consulting and updating the previous row's key order in `recent`.
struct ColumnSeed<'a> {
    binder: &'a ColumnBinder,
    recent: &'a mut Vec<(String, Option<usize>)>,
    at: usize,
}

/// How many leading keys of a row [`ColumnSeed`] remembers.
const RECENT_KEYS: usize = 256;

impl<'de> DeserializeSeed<'de> for ColumnSeed<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for ColumnSeed<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    #[inline]
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        match self.recent.get_mut(self.at) {
            Some((key, pos)) if same_key(key.as_bytes(), v.as_bytes()) => Ok(*pos),
            Some((key, pos)) => {
                key.clear();
                key.push_str(v);
                *pos = self.binder.position(v);
                Ok(*pos)
            }
            None => {
                let pos = self.binder.position(v);
                if self.at == self.recent.len() && self.at < RECENT_KEYS {
                    self.recent.push((v.to_owned(), pos));
                }
                Ok(pos)
            }
        }
    }
}

/// Whether two keys are the same bytes. Row keys are short: up to 16 bytes they are
/// compared as two (overlapping) words each, without a call to `memcmp`.
#[inline]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0..4 => a == b,
        4..8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => a == b,
    }
}

/// The `N` bytes of `bytes` from `at` (zeros past its end, which [`same_key`] never reads).
#[inline]
fn word<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes
        .get(at..at + N)
        .and_then(|w| <[u8; N]>::try_from(w).ok())
        .unwrap_or([0; N])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_is_byte_equality() {
        let long = "abcdefghijklmnopqrstuvwxyz0123456789";
        for n in 0..=long.len() {
            let key = &long.as_bytes()[..n];
            assert!(same_key(key, key), "{n}");
            assert!(!same_key(key, &long.as_bytes()[..n.saturating_sub(1)]) || n == 0);
            for at in 0..n {
                let mut other = key.to_vec();
                other[at] ^= 0x20;
                assert!(!same_key(key, &other), "{n} bytes, differing at {at}");
            }
        }
    }

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
