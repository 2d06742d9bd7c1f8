//! The sink that binds each row into the prepared `INSERT` statement.

use std::borrow::Cow;
use std::fmt;

use rusqlite::Statement;
use rusqlite::types::Value;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::RowsError;
use super::binder::ColumnBinder;
use super::walk::{RowSink, Scalar};

pub(super) struct LoadSink<'s, 'c> {
    pub(super) insert: &'s mut Statement<'c>,
    pub(super) binder: &'s ColumnBinder,
    pub(super) fixed: &'s [(usize, Value)],
    /// Indexed by bind position: whether `fixed` binds it.
    pub(super) is_fixed: Vec<bool>,
    pub(super) rows: u64,
    /// The real error behind a `custom` serde error raised to abort the parse.
    pub(super) failure: Option<RowsError>,
    /// The keys of the previous row in order, with their positions: rows of one response
    /// nearly always list their keys in the same order, so comparing against the key seen at
    /// the same index is cheaper than a hash lookup.
    pub(super) recent_keys: Vec<(String, Option<usize>)>,
}

impl LoadSink<'_, '_> {
    /// Records `failure` and returns the serde error that aborts the parse.
    fn abort<E: de::Error>(&mut self, failure: impl Into<RowsError>) -> E {
        let failure = failure.into();
        let error = E::custom(&failure);
        self.failure = Some(failure);
        error
    }

    /// NULLs every position, then binds the fixed values.
    fn begin_row(&mut self) -> rusqlite::Result<()> {
        self.insert.clear_bindings();
        for (pos, value) in self.fixed {
            self.insert.raw_bind_parameter(*pos, value)?;
        }
        Ok(())
    }

    fn finish_row(&mut self) -> rusqlite::Result<()> {
        let changed = self.insert.raw_execute()?;
        self.rows += changed as u64;
        Ok(())
    }

    fn is_fixed(&self, pos: usize) -> bool {
        self.is_fixed.get(pos).copied().unwrap_or(false)
    }

    fn bind_null(&mut self, pos: usize) -> rusqlite::Result<()> {
        // A fixed value survives a JSON null; otherwise NULL (a later duplicate key wins).
        if self.is_fixed(pos) {
            Ok(())
        } else {
            self.insert.raw_bind_parameter(pos, rusqlite::types::Null)
        }
    }

    /// Binds one property value given as its raw JSON text.
    fn bind_raw(&mut self, pos: usize, raw: &str) -> Result<(), RowsError> {
        match raw.as_bytes().first() {
            Some(b'"') => {
                let inner = raw.get(1..raw.len() - 1).unwrap_or_default();
                if inner.as_bytes().contains(&b'\\') {
                    let unescaped: String = serde_json::from_str(raw)?;
                    self.insert.raw_bind_parameter(pos, unescaped.as_str())?;
                } else {
                    self.insert.raw_bind_parameter(pos, inner)?;
                }
            }
            Some(b'{' | b'[') => self.insert.raw_bind_parameter(pos, raw)?,
            Some(b't') => self.insert.raw_bind_parameter(pos, 1_i64)?,
            Some(b'f') => self.insert.raw_bind_parameter(pos, 0_i64)?,
            Some(b'n') | None => self.bind_null(pos)?,
            Some(_) => self.bind_number(pos, raw)?,
        }
        Ok(())
    }

    fn bind_number(&mut self, pos: usize, raw: &str) -> rusqlite::Result<()> {
        let integral = !raw.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
        if integral {
            if let Ok(i) = raw.parse::<i64>() {
                return self.insert.raw_bind_parameter(pos, i);
            }
            if raw.parse::<u64>().is_ok() {
                return self.insert.raw_bind_parameter(pos, raw);
            }
        }
        match raw.parse::<f64>() {
            Ok(f) if f.is_finite() => self.insert.raw_bind_parameter(pos, f),
            // Beyond f64 range: keep the digits rather than store an infinity.
            _ => self.insert.raw_bind_parameter(pos, raw),
        }
    }

    fn bind_scalar(&mut self, pos: usize, value: Scalar<'_>) -> rusqlite::Result<()> {
        match value {
            Scalar::Null => self.bind_null(pos),
            Scalar::Bool(b) => self.insert.raw_bind_parameter(pos, i64::from(b)),
            Scalar::I64(i) => self.insert.raw_bind_parameter(pos, i),
            Scalar::U64(u) => match i64::try_from(u) {
                Ok(i) => self.insert.raw_bind_parameter(pos, i),
                Err(_) => self.insert.raw_bind_parameter(pos, u.to_string()),
            },
            Scalar::F64(f) => self.insert.raw_bind_parameter(pos, f),
            Scalar::Str(s) | Scalar::Json(s) => self.insert.raw_bind_parameter(pos, s),
        }
    }
}

impl<'de> RowSink<'de> for LoadSink<'_, '_> {
    fn map_row<A: MapAccess<'de>>(
        &mut self,
        mut map: A,
        allow_empty: bool,
    ) -> Result<(), A::Error> {
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
                    let raw: &'de RawValue = map.next_value()?;
                    if let Err(e) = self.bind_raw(pos, raw.get()) {
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
        let result = self
            .begin_row()
            .and_then(|()| self.bind_scalar(pos, value))
            .and_then(|()| self.finish_row());
        result.map_err(|e| self.abort(e))
    }

    fn pairs_row(
        &mut self,
        pairs: &[(Cow<'de, str>, Cow<'de, RawValue>)],
    ) -> serde_json::Result<()> {
        if let Err(e) = self.begin_row() {
            return Err(self.abort(e));
        }
        for (key, raw) in pairs {
            if let Some(pos) = self.binder.position(key)
                && let Err(e) = self.bind_raw(pos, raw.get())
            {
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

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        match self.recent.get_mut(self.at) {
            Some((key, pos)) if key == v => Ok(*pos),
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
