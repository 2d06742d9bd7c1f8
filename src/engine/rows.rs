//! Response bytes → rows, decoded straight into SQLite binds.
//!
//! Row data is never materialised as a `serde_json::Value` tree. A chain of
//! [`DeserializeSeed`]s walks a [`serde_json::Deserializer`] over the body to the rows named by
//! a [`RowLocator`]; each row object is then read key by key, matching keys are looked up in a
//! [`ColumnBinder`] and their values are captured as borrowed [`RawValue`] slices and bound
//! directly into a prepared `INSERT` statement. Unknown properties are skipped with
//! [`IgnoredAny`]. On the common paths (unescaped strings, numbers, booleans, nested JSON) no
//! heap allocation happens per row or per property.
//!
//! Besides [`load_rows`], the module offers two skims over the same bytes:
//! [`extract_scalars`] (pagination tokens and similar) and [`discover_columns`] (column names
//! for responses whose schema declares none).

use std::borrow::Cow;
use std::fmt;

use rusqlite::Statement;
use rusqlite::types::Value;
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// Maximum number of column names [`discover_columns`] returns.
const MAX_DISCOVERED_COLUMNS: usize = 512;

/// Name of the column that receives rows which are not JSON objects.
const VALUE_COLUMN: &str = "value";

// ---------------------------------------------------------------------------------------------
// Row locator
// ---------------------------------------------------------------------------------------------

/// One step of a row locator (parsed from a StackQL `objectKey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Descend into the object property with this exact name.
    Key(String),
    /// `[*]`: iterate the elements of an array or the values of an object.
    Each,
}

/// Where the rows sit in a response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RowLocator {
    /// Follow these steps from the document root. The value(s) reached are the rows:
    /// an array reached → each element is a row; an object reached → one row
    /// (an empty object `{}` → zero rows); null/missing/scalar → zero rows.
    /// `Each` (`[*]`) iterates array elements OR object values (Google aggregated lists:
    /// `items` is a map `{"zones/a": {"instances": [...]}, ...}`).
    ///
    /// A `Key` step applies to objects only: on an array or a scalar it finds nothing.
    /// A trailing `Each` yields the elements (or object values) themselves as rows, exactly
    /// like an array reached by a trailing key: `$.items[*]` and `$.items` load the same rows
    /// when `items` is an array.
    Path(Vec<Step>),
    /// No objectKey and no schema hint: a top-level array → its elements are rows; a top-level
    /// object with an `items` array → those are the rows; any other non-empty object → one
    /// row; `{}` → zero rows.
    Auto,
}

impl RowLocator {
    /// Parses an objectKey: JSONPath like `$.items[*].instances[*]`, `$.value`, `$[*]`,
    /// `$.policyResults`, `$['key.with.dots']` / `$["k"]`, and legacy keys without `$`
    /// (`subnetworks`, `items`, `a.b`) meaning `$.subnetworks` etc. `$` alone → root.
    /// `.*` is accepted as a synonym of `[*]`; surrounding whitespace is ignored.
    /// Errors (a String message naming the bad input) for anything else (filters `?(…)`,
    /// recursive descent `..`, slices, indexes, unions, unbalanced brackets, empty).
    pub(crate) fn parse(object_key: &str) -> Result<RowLocator, String> {
        let fail = |why: &str| format!("unsupported objectKey `{object_key}`: {why}");
        let input = object_key.trim();
        if input.is_empty() {
            return Err(fail("it is empty"));
        }
        let steps = match input.strip_prefix('$') {
            Some(rest) => parse_steps(rest),
            // Legacy keys: `items`, `a.b`, `items[*]` mean `$.items`, `$.a.b`, `$.items[*]`.
            None if input.starts_with(['.', '[']) => parse_steps(input),
            None => parse_steps(&format!(".{input}")),
        };
        steps.map(RowLocator::Path).map_err(|why| fail(&why))
    }
}

/// Parses the part of a JSONPath after `$` into steps.
fn parse_steps(path: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let mut rest = path;
    while let Some(c) = rest.chars().next() {
        match c {
            '.' => {
                rest = &rest[1..];
                if rest.starts_with('.') {
                    return Err("recursive descent `..` is not supported".to_owned());
                }
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                let segment = &rest[..end];
                rest = &rest[end..];
                if segment.is_empty() {
                    return Err("a `.` must be followed by a key".to_owned());
                }
                if segment == "*" {
                    steps.push(Step::Each);
                } else if let Some(bad) = segment
                    .chars()
                    .find(|c| matches!(c, ']' | '(' | ')' | '?' | '\'' | '"' | '*' | '@' | ':'))
                {
                    return Err(format!(
                        "unexpected `{bad}` in key `{segment}` (filters, scripts and slices \
                         are not supported; quote unusual keys as ['…'])"
                    ));
                } else if segment.chars().any(char::is_whitespace) {
                    return Err(format!(
                        "whitespace in key `{segment}` (quote such keys as ['…'])"
                    ));
                } else {
                    steps.push(Step::Key(segment.to_owned()));
                }
            }
            '[' => {
                let (step, after) = parse_bracket(&rest[1..])?;
                steps.push(step);
                rest = after;
            }
            ']' => return Err("unbalanced `]`".to_owned()),
            other => {
                return Err(format!("expected `.` or `[` but found `{other}`"));
            }
        }
    }
    Ok(steps)
}

/// Parses the inside of a bracket (the text after `[`); returns the step and the text after `]`.
fn parse_bracket(text: &str) -> Result<(Step, &str), String> {
    let inner = text.trim_start();
    if let Some(quote) = inner.chars().next().filter(|c| matches!(c, '\'' | '"')) {
        let mut key = String::new();
        let mut chars = inner.char_indices().skip(1);
        let mut closed_at = None;
        while let Some((i, c)) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some((_, escaped)) => key.push(escaped),
                    None => break,
                }
            } else if c == quote {
                closed_at = Some(i + c.len_utf8());
                break;
            } else {
                key.push(c);
            }
        }
        let Some(after_quote) = closed_at else {
            return Err(format!("unterminated quoted key starting `{inner}`"));
        };
        let after = inner[after_quote..].trim_start();
        if let Some(after) = after.strip_prefix(']') {
            return Ok((Step::Key(key), after));
        }
        if after.starts_with(',') {
            return Err("unions `[…, …]` are not supported".to_owned());
        }
        return Err(format!("unbalanced `[` after quoted key `{key}`"));
    }
    let Some(close) = inner.find(']') else {
        return Err("unbalanced `[`".to_owned());
    };
    let content = inner[..close].trim();
    let after = &inner[close + 1..];
    if content == "*" {
        Ok((Step::Each, after))
    } else if content.starts_with('?') {
        Err(format!("filter `[{content}]` is not supported"))
    } else if content.starts_with('(') {
        Err(format!("script expression `[{content}]` is not supported"))
    } else if content.contains(':') {
        Err(format!("slice `[{content}]` is not supported"))
    } else if content.contains(',') {
        Err(format!("union `[{content}]` is not supported"))
    } else if content.is_empty() {
        Err("empty brackets `[]`".to_owned())
    } else if content.parse::<i64>().is_ok() {
        Err(format!("array index `[{content}]` is not supported"))
    } else if content.contains('[') {
        Err("unbalanced `[`".to_owned())
    } else {
        Err(format!("unquoted key `[{content}]` (write ['{content}'])"))
    }
}

// ---------------------------------------------------------------------------------------------
// Column binder
// ---------------------------------------------------------------------------------------------

/// Maps lower-cased column names to 1-based bind positions of the INSERT statement.
///
/// Lookups are ASCII-case-insensitive (like SQLite's own column names), an exact match is
/// preferred, and they never allocate.
#[derive(Debug, Clone)]
pub(crate) struct ColumnBinder {
    index: CiIndex,
    value_pos: Option<usize>,
}

impl ColumnBinder {
    /// `columns[i]` is bound at position i+1. Lookup of a JSON key is case-insensitive
    /// (SQLite column names are), exact match tried first; the hot path is allocation-free.
    /// When a name occurs more than once, its first position wins.
    pub(crate) fn new(columns: &[String]) -> ColumnBinder {
        let mut index = CiIndex::default();
        for column in columns {
            index.push(column);
        }
        let value_pos = index.find(VALUE_COLUMN).map(|i| i + 1);
        ColumnBinder { index, value_pos }
    }

    /// Number of columns (the highest position this binder binds).
    pub(crate) fn len(&self) -> usize {
        self.index.names.len()
    }

    /// The 1-based position of the column named `key`, if any.
    fn position(&self, key: &str) -> Option<usize> {
        self.index.find(key).map(|i| i + 1)
    }
}

/// An insertion-ordered list of names with an ASCII-case-insensitive open-addressing hash
/// index over it. [`CiIndex::find`] prefers an exact match, otherwise returns the first
/// case-insensitive one. No allocation on lookup.
#[derive(Debug, Clone, Default)]
struct CiIndex {
    names: Vec<Box<str>>,
    /// Linear-probing table of (hash, 1 + index into `names`); index 0 marks an empty slot.
    slots: Vec<(u64, usize)>,
    /// Number of occupied slots.
    linked: usize,
}

impl CiIndex {
    fn find(&self, key: &str) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let hash = fold_hash(key.as_bytes());
        let mask = self.slots.len() - 1;
        let mut slot = slot_of(hash, mask);
        let mut folded = None;
        loop {
            let (entry_hash, entry) = self.slots.get(slot).copied().unwrap_or((0, 0));
            if entry == 0 {
                return folded;
            }
            let idx = entry - 1;
            if entry_hash == hash
                && let Some(name) = self.names.get(idx)
                && name.len() == key.len()
            {
                if **name == *key {
                    return Some(idx);
                }
                if folded.is_none() && name.eq_ignore_ascii_case(key) {
                    folded = Some(idx);
                }
            }
            slot = (slot + 1) & mask;
        }
    }

    fn find_exact(&self, key: &str) -> Option<usize> {
        self.find(key)
            .filter(|&i| self.names.get(i).is_some_and(|n| **n == *key))
    }

    /// Appends `name`; it is indexed unless the exact same name is already present.
    fn push(&mut self, name: &str) {
        let idx = self.names.len();
        let duplicate = self.find_exact(name).is_some();
        self.names.push(name.into());
        if duplicate {
            return;
        }
        if (self.linked + 1) * 2 > self.slots.len() {
            self.grow();
        }
        self.link(idx);
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(16);
        let mut linked: Vec<usize> = self
            .slots
            .iter()
            .filter(|&&(_, e)| e != 0)
            .map(|&(_, e)| e - 1)
            .collect();
        // Relinking in insertion order keeps "first name wins" among case-insensitive twins.
        linked.sort_unstable();
        self.slots = vec![(0, 0); capacity];
        self.linked = 0;
        for idx in linked {
            self.link(idx);
        }
    }

    fn link(&mut self, idx: usize) {
        let Some(name) = self.names.get(idx) else {
            return;
        };
        let hash = fold_hash(name.as_bytes());
        let mask = self.slots.len() - 1;
        let mut slot = slot_of(hash, mask);
        while let Some(entry) = self.slots.get_mut(slot) {
            if entry.1 == 0 {
                *entry = (hash, idx + 1);
                self.linked += 1;
                return;
            }
            slot = (slot + 1) & mask;
        }
    }
}

/// A hash that is equal for names equal under ASCII case folding: every byte is hashed with
/// its 0x20 bit set (which maps `A`→`a`; the few other bytes it conflates are told apart by
/// the final comparison). Eight bytes at a time, FxHash-style.
fn fold_hash(bytes: &[u8]) -> u64 {
    const SEED: u64 = 0x517c_c1b7_2722_0a95;
    const CASE: u64 = 0x2020_2020_2020_2020;
    let mut hash = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0_u8; 8];
        word.copy_from_slice(chunk);
        hash = (hash.rotate_left(5) ^ (u64::from_le_bytes(word) | CASE)).wrapping_mul(SEED);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0_u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        hash = (hash.rotate_left(5) ^ (u64::from_le_bytes(word) | CASE)).wrapping_mul(SEED);
    }
    hash
}

fn slot_of(hash: u64, mask: usize) -> usize {
    ((hash >> 32) ^ hash) as usize & mask
}

// ---------------------------------------------------------------------------------------------
// Errors and public entry points
// ---------------------------------------------------------------------------------------------

/// Why [`load_rows`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowsError {
    /// The body is not valid JSON (or is truncated).
    #[error("response body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// SQLite rejected a bind or the insert itself.
    #[error("sqlite insert failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Decodes the rows of `body` found at `locator` and inserts each into `insert`
/// (a prepared `INSERT INTO t VALUES (?1, …, ?N)`).
///
/// For each row: every column position is first set to NULL, then `fixed` values are bound
/// (pairs of (1-based position, value): the request parameters of this call, e.g. `org`),
/// then each JSON property whose name matches a column is bound: JSON string → TEXT;
/// integer fitting i64 → INTEGER; u64 above i64::MAX → TEXT of its exact digits; other numbers
/// → REAL (a number too large for f64 → TEXT of its digits); true/false → INTEGER 1/0;
/// null → NULL; nested object/array → TEXT holding that value's JSON exactly as it appears in
/// the body, so SQLite `json_extract(col, '$.a.b')` works. A JSON property matching a position
/// that `fixed` also binds wins over the fixed value only if it is non-null. Unknown properties
/// are skipped without allocation. A row element that is not an object binds that scalar (or
/// an array's JSON text) to the column named `value` if the binder has one, else it is
/// skipped. An empty (all-whitespace) body holds zero rows.
///
/// Rows are inserted while the body is read, so on an error the rows before it have already
/// been inserted: run this inside a transaction or savepoint. Returns the number of rows
/// inserted (the sum of the statement's change counts).
pub(crate) fn load_rows(
    body: &[u8],
    locator: &RowLocator,
    binder: &ColumnBinder,
    fixed: &[(usize, Value)],
    insert: &mut Statement<'_>,
) -> Result<u64, RowsError> {
    if is_blank(body) {
        return Ok(0);
    }
    // Positions beyond the statement's parameters cannot be bound (SQLite reports them).
    let mut is_fixed = vec![false; insert.parameter_count().max(binder.len()) + 1];
    for (pos, _) in fixed {
        if let Some(flag) = is_fixed.get_mut(*pos) {
            *flag = true;
        }
    }
    let mut sink = LoadSink {
        insert,
        binder,
        fixed,
        is_fixed,
        rows: 0,
        failure: None,
        recent_keys: Vec::new(),
    };
    let walked = walk(body, locator, &mut sink);
    if let Some(failure) = sink.failure.take() {
        return Err(failure);
    }
    walked?;
    Ok(sink.rows)
}

/// Skims `body` once and returns, for each path (object keys from the root, e.g.
/// ["nextPageToken"], ["result_info", "page"], ["@odata.nextLink"]), the scalar found there as a
/// string (numbers as their decimal text exactly as written, bools as "true"/"false"), or None
/// when absent, null or not a scalar. Everything not on a requested path is skipped with
/// `IgnoredAny`. An empty (all-whitespace) body → all None. An empty path names the root.
pub(crate) fn extract_scalars(
    body: &[u8],
    paths: &[Vec<String>],
) -> Result<Vec<Option<String>>, serde_json::Error> {
    let mut out = vec![None; paths.len()];
    if is_blank(body) {
        return Ok(out);
    }
    let active: Vec<usize> = (0..paths.len()).collect();
    let mut de = serde_json::Deserializer::from_slice(body);
    ScalarSeed {
        paths,
        active: &active,
        depth: 0,
        out: &mut out,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(out)
}

/// Collects the distinct top-level property names of the rows at `locator` (for responses
/// whose schema declares no properties), in first-seen order, capped at 512 names. Names that
/// differ only in ASCII case count as one (SQLite columns are case-insensitive); the first
/// spelling seen is kept. Rows that are not objects contribute the column `value` (where
/// [`load_rows`] binds them). An empty (all-whitespace) body → no names.
pub(crate) fn discover_columns(
    body: &[u8],
    locator: &RowLocator,
) -> Result<Vec<String>, serde_json::Error> {
    if is_blank(body) {
        return Ok(Vec::new());
    }
    let mut sink = DiscoverSink::default();
    walk(body, locator, &mut sink)?;
    Ok(sink.names.names.into_iter().map(String::from).collect())
}

fn is_blank(body: &[u8]) -> bool {
    body.iter().all(u8::is_ascii_whitespace)
}

// ---------------------------------------------------------------------------------------------
// Walking to the rows
// ---------------------------------------------------------------------------------------------

/// A non-object row, as delivered to [`RowSink::scalar_row`].
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Null,
    Bool(bool),
    I64(i64),
    U64(u64),
    F64(f64),
    Str(&'a str),
    /// JSON text of an array row.
    Json(&'a str),
}

/// Receives the rows found by the walk.
trait RowSink<'de> {
    /// One row that is a JSON object. `allow_empty`: whether `{}` still counts as a row
    /// (it does as an array element, not as the single object a path reached).
    fn map_row<A: MapAccess<'de>>(&mut self, map: A, allow_empty: bool) -> Result<(), A::Error>;

    /// Whether non-object rows are of interest (otherwise they are skipped unread).
    fn wants_scalar_rows(&self) -> bool;

    /// One row that is not a JSON object.
    fn scalar_row<E: de::Error>(&mut self, value: Scalar<'_>) -> Result<(), E>;

    /// The single row of a top-level object under [`RowLocator::Auto`] (never empty).
    fn pairs_row(
        &mut self,
        pairs: &[(Cow<'de, str>, Cow<'de, RawValue>)],
    ) -> serde_json::Result<()>;
}

/// Parses the whole body, feeding the rows at `locator` into `sink`.
fn walk<'de, S: RowSink<'de>>(
    body: &'de [u8],
    locator: &RowLocator,
    sink: &mut S,
) -> serde_json::Result<()> {
    let mut de = serde_json::Deserializer::from_slice(body);
    match locator {
        RowLocator::Path(steps) => {
            PathSeed { steps, sink }.deserialize(&mut de)?;
            de.end()
        }
        RowLocator::Auto => {
            let outcome = de.deserialize_any(AutoVisitor { sink: &mut *sink })?;
            de.end()?;
            match outcome {
                AutoOutcome::Done => Ok(()),
                AutoOutcome::Object(pairs) if pairs.is_empty() => Ok(()),
                AutoOutcome::Object(pairs) => sink.pairs_row(&pairs),
            }
        }
    }
}

/// Implements the scalar `visit_*` methods of a `Visitor<Value = ()>` as "ignore".
macro_rules! ignore_scalars {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Ok(())
        }
    };
}

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

fn drain_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Every element of an array is a row.
fn rows_of_seq<'de, S: RowSink<'de>, A: SeqAccess<'de>>(
    sink: &mut S,
    mut seq: A,
) -> Result<(), A::Error> {
    while seq
        .next_element_seed(RowSeed { sink: &mut *sink })?
        .is_some()
    {}
    Ok(())
}

/// Follows the remaining `steps` from the value being deserialized.
struct PathSeed<'a, S> {
    steps: &'a [Step],
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> DeserializeSeed<'de> for PathSeed<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let sink = self.sink;
        match self.steps.split_first() {
            None => deserializer.deserialize_any(ReachedVisitor { sink }),
            Some((Step::Each, [])) => deserializer.deserialize_any(EachRowVisitor { sink }),
            Some((Step::Each, rest)) => deserializer.deserialize_any(EachVisitor { rest, sink }),
            Some((Step::Key(key), rest)) => {
                deserializer.deserialize_any(KeyVisitor { key, rest, sink })
            }
        }
    }
}

/// The value the path reached: an array's elements are rows, an object is one row.
struct ReachedVisitor<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for ReachedVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        rows_of_seq(self.sink, seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.sink.map_row(map, false)
    }
}

/// A trailing `[*]`: each array element or object value is a row.
struct EachRowVisitor<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for EachRowVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        rows_of_seq(self.sink, seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(RowSeed {
                sink: &mut *self.sink,
            })?;
        }
        Ok(())
    }
}

/// A `[*]` with more steps after it.
struct EachVisitor<'a, S> {
    rest: &'a [Step],
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for EachVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(PathSeed {
                steps: self.rest,
                sink: &mut *self.sink,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(PathSeed {
                steps: self.rest,
                sink: &mut *self.sink,
            })?;
        }
        Ok(())
    }
}

/// A `.key` step: descend into that property of an object; anything else holds no rows.
struct KeyVisitor<'a, S> {
    key: &'a str,
    rest: &'a [Step],
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for KeyVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        drain_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(hit) = map.next_key_seed(KeyIs(self.key))? {
            if hit {
                map.next_value_seed(PathSeed {
                    steps: self.rest,
                    sink: &mut *self.sink,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// Deserializes an object key and tells whether it equals the given name.
struct KeyIs<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<bool, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

/// Deserializes an object key, borrowing it from the body unless it contains escapes.
struct KeyCow;

impl<'de> DeserializeSeed<'de> for KeyCow {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyCow {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// One row: an object, or any other value (a "scalar row").
struct RowSeed<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> DeserializeSeed<'de> for RowSeed<'_, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.sink.wants_scalar_rows() {
            deserializer.deserialize_any(RowVisitor { sink: self.sink })
        } else {
            deserializer.deserialize_any(ObjectRowVisitor { sink: self.sink })
        }
    }
}

/// A row whose non-object forms are skipped.
struct ObjectRowVisitor<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for ObjectRowVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        drain_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.sink.map_row(map, true)
    }
}

/// A row of any form.
struct RowVisitor<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for RowVisitor<'_, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a row")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.sink.scalar_row(Scalar::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.sink.scalar_row(Scalar::I64(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.sink.scalar_row(Scalar::U64(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.sink.scalar_row(Scalar::F64(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.sink.scalar_row(Scalar::Str(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.sink.scalar_row(Scalar::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // The array's elements are captured raw (no re-serialisation of their content); only
        // the whitespace between them is normalised.
        let mut text = String::from("[");
        while let Some(element) = seq.next_element::<&'de RawValue>()? {
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(element.get());
        }
        text.push(']');
        self.sink.scalar_row(Scalar::Json(&text))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        self.sink.map_row(map, true)
    }
}

/// What [`AutoVisitor`] found at the root.
enum AutoOutcome<'de> {
    /// Rows (if any) were already delivered.
    Done,
    /// A top-level object without an `items` array: its properties form one row.
    Object(Vec<(Cow<'de, str>, Cow<'de, RawValue>)>),
}

/// [`RowLocator::Auto`] at the document root.
struct AutoVisitor<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for AutoVisitor<'_, S> {
    type Value = AutoOutcome<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(AutoOutcome::Done)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        rows_of_seq(self.sink, seq)?;
        Ok(AutoOutcome::Done)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Properties are kept as borrowed raw slices until we know whether an `items` array
        // holds the rows; if it does, its rows are streamed as soon as it is reached.
        let mut pairs = Vec::new();
        while let Some(key) = map.next_key_seed(KeyCow)? {
            if key == "items" {
                match map.next_value_seed(ItemsSeed {
                    sink: &mut *self.sink,
                })? {
                    None => {
                        drain_map(map)?;
                        return Ok(AutoOutcome::Done);
                    }
                    Some(raw) => pairs.push((key, Cow::Owned(raw))),
                }
            } else {
                let raw: &'de RawValue = map.next_value()?;
                pairs.push((key, Cow::Borrowed(raw)));
            }
        }
        Ok(AutoOutcome::Object(pairs))
    }
}

/// The `items` property under [`RowLocator::Auto`]: an array's elements are streamed as rows
/// (→ `None`); any other value is returned as JSON text for the single-row case.
struct ItemsSeed<'a, S> {
    sink: &'a mut S,
}

impl<'de, S: RowSink<'de>> DeserializeSeed<'de> for ItemsSeed<'_, S> {
    type Value = Option<Box<RawValue>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

fn owned_raw<E: de::Error>(json: String) -> Result<Option<Box<RawValue>>, E> {
    RawValue::from_string(json).map(Some).map_err(E::custom)
}

impl<'de, S: RowSink<'de>> Visitor<'de> for ItemsSeed<'_, S> {
    type Value = Option<Box<RawValue>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        owned_raw(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        owned_raw(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        owned_raw(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        owned_raw(serde_json::to_string(&v).map_err(E::custom)?)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        owned_raw(serde_json::to_string(v).map_err(E::custom)?)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        owned_raw("null".to_owned())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        rows_of_seq(self.sink, seq)?;
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut text = String::from("{");
        while let Some(key) = map.next_key_seed(KeyCow)? {
            let value: &'de RawValue = map.next_value()?;
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(&serde_json::to_string(&*key).map_err(de::Error::custom)?);
            text.push(':');
            text.push_str(value.get());
        }
        text.push('}');
        owned_raw(text)
    }
}

// ---------------------------------------------------------------------------------------------
// Sink: binding rows into the INSERT statement
// ---------------------------------------------------------------------------------------------

struct LoadSink<'s, 'c> {
    insert: &'s mut Statement<'c>,
    binder: &'s ColumnBinder,
    fixed: &'s [(usize, Value)],
    /// Indexed by bind position: whether `fixed` binds it.
    is_fixed: Vec<bool>,
    rows: u64,
    /// The real error behind a `custom` serde error raised to abort the parse.
    failure: Option<RowsError>,
    /// The keys of the previous row in order, with their positions: rows of one response
    /// nearly always list their keys in the same order, so comparing against the key seen at
    /// the same index is cheaper than a hash lookup.
    recent_keys: Vec<(String, Option<usize>)>,
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

// ---------------------------------------------------------------------------------------------
// Sink: discovering column names
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct DiscoverSink {
    names: CiIndex,
}

impl DiscoverSink {
    fn add(&mut self, name: &str) {
        if self.names.names.len() < MAX_DISCOVERED_COLUMNS && self.names.find(name).is_none() {
            self.names.push(name);
        }
    }
}

impl<'de> RowSink<'de> for DiscoverSink {
    fn map_row<A: MapAccess<'de>>(&mut self, mut map: A, _: bool) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeyCow)? {
            self.add(&key);
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn wants_scalar_rows(&self) -> bool {
        true
    }

    fn scalar_row<E: de::Error>(&mut self, _: Scalar<'_>) -> Result<(), E> {
        self.add(VALUE_COLUMN);
        Ok(())
    }

    fn pairs_row(
        &mut self,
        pairs: &[(Cow<'de, str>, Cow<'de, RawValue>)],
    ) -> serde_json::Result<()> {
        for (key, _) in pairs {
            self.add(key);
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Scalar extraction
// ---------------------------------------------------------------------------------------------

/// The value at `depth` on the requested paths listed in `active` (indexes into `paths`).
struct ScalarSeed<'a> {
    paths: &'a [Vec<String>],
    active: &'a [usize],
    depth: usize,
    out: &'a mut [Option<String>],
}

impl ScalarSeed<'_> {
    /// Sets every path that ends at this depth to `value`.
    fn set_ending(&mut self, value: Option<&str>) {
        for &i in self.active {
            if self.paths.get(i).is_some_and(|p| p.len() == self.depth)
                && let Some(slot) = self.out.get_mut(i)
            {
                *slot = value.map(str::to_owned);
            }
        }
    }

    fn any_continuing(&self) -> bool {
        self.active
            .iter()
            .any(|&i| self.paths.get(i).is_some_and(|p| p.len() > self.depth))
    }
}

/// The text of a raw JSON scalar (strings unescaped, numbers verbatim), None otherwise.
fn scalar_text(raw: &str) -> serde_json::Result<Option<Cow<'_, str>>> {
    Ok(match raw.as_bytes().first() {
        Some(b'"') => {
            let inner = raw.get(1..raw.len() - 1).unwrap_or_default();
            if inner.as_bytes().contains(&b'\\') {
                Some(Cow::Owned(serde_json::from_str::<String>(raw)?))
            } else {
                Some(Cow::Borrowed(inner))
            }
        }
        Some(b't') => Some(Cow::Borrowed("true")),
        Some(b'f') => Some(Cow::Borrowed("false")),
        Some(b'-' | b'0'..=b'9') => Some(Cow::Borrowed(raw)),
        _ => None,
    })
}

impl<'de> DeserializeSeed<'de> for ScalarSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(mut self, deserializer: D) -> Result<(), D::Error> {
        if self.any_continuing() {
            return deserializer.deserialize_any(self);
        }
        // Only paths ending here: capture the raw text so numbers keep their exact digits.
        let raw = <&'de RawValue>::deserialize(deserializer)?;
        let text = scalar_text(raw.get()).map_err(de::Error::custom)?;
        self.set_ending(text.as_deref());
        Ok(())
    }
}

impl<'de> Visitor<'de> for ScalarSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(mut self, v: bool) -> Result<(), E> {
        self.set_ending(Some(if v { "true" } else { "false" }));
        Ok(())
    }

    fn visit_i64<E: de::Error>(mut self, v: i64) -> Result<(), E> {
        self.set_ending(Some(&v.to_string()));
        Ok(())
    }

    fn visit_u64<E: de::Error>(mut self, v: u64) -> Result<(), E> {
        self.set_ending(Some(&v.to_string()));
        Ok(())
    }

    fn visit_f64<E: de::Error>(mut self, v: f64) -> Result<(), E> {
        let text = serde_json::to_string(&v).map_err(E::custom)?;
        self.set_ending(Some(&text));
        Ok(())
    }

    fn visit_str<E: de::Error>(mut self, v: &str) -> Result<(), E> {
        self.set_ending(Some(v));
        Ok(())
    }

    fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
        self.set_ending(None);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, seq: A) -> Result<(), A::Error> {
        self.set_ending(None);
        drain_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.set_ending(None);
        let depth = self.depth;
        while let Some(key) = map.next_key_seed(KeyCow)? {
            let next: Vec<usize> = self
                .active
                .iter()
                .copied()
                .filter(|&i| {
                    self.paths
                        .get(i)
                        .and_then(|p| p.get(depth))
                        .is_some_and(|k| *k == *key)
                })
                .collect();
            if next.is_empty() {
                map.next_value::<IgnoredAny>()?;
            } else {
                map.next_value_seed(ScalarSeed {
                    paths: self.paths,
                    active: &next,
                    depth: depth + 1,
                    out: &mut *self.out,
                })?;
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use rusqlite::Connection;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    fn path(steps: Vec<Step>) -> RowLocator {
        RowLocator::Path(steps)
    }

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    /// Creates table `t` with `columns` (+ `extra` columns for fixed params), loads `body`,
    /// and returns (rows inserted, connection).
    fn load_with(
        body: &str,
        locator: &RowLocator,
        columns: &[&str],
        extra: &[&str],
        fixed: &[(usize, Value)],
    ) -> (u64, Connection) {
        let conn = Connection::open_in_memory().unwrap();
        let all: Vec<String> = columns
            .iter()
            .chain(extra)
            .map(|c| format!("\"{c}\""))
            .collect();
        conn.execute_batch(&format!("CREATE TABLE t ({})", all.join(", ")))
            .unwrap();
        let binder = ColumnBinder::new(&cols(columns));
        let placeholders: Vec<String> = (1..=all.len()).map(|i| format!("?{i}")).collect();
        let n = {
            let mut stmt = conn
                .prepare(&format!(
                    "INSERT INTO t VALUES ({})",
                    placeholders.join(", ")
                ))
                .unwrap();
            load_rows(body.as_bytes(), locator, &binder, fixed, &mut stmt).unwrap()
        };
        (n, conn)
    }

    fn load(body: &str, locator: &RowLocator, columns: &[&str]) -> (u64, Connection) {
        load_with(body, locator, columns, &[], &[])
    }

    fn query(conn: &Connection, sql: &str) -> Vec<Vec<Value>> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_map([], |row| (0..n).map(|i| row.get::<_, Value>(i)).collect())
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn text(s: &str) -> Value {
        Value::Text(s.to_owned())
    }

    // --- locator parsing ---------------------------------------------------------------------

    #[test]
    fn parses_jsonpath_forms() {
        let p = |s: &str| RowLocator::parse(s).unwrap();
        assert_eq!(p("$"), path(vec![]));
        assert_eq!(p("  $  "), path(vec![]));
        assert_eq!(p("$.value"), path(vec![key("value")]));
        assert_eq!(p("$[*]"), path(vec![Step::Each]));
        assert_eq!(p("$.policyResults"), path(vec![key("policyResults")]));
        assert_eq!(
            p("$.items[*].instances[*]"),
            path(vec![key("items"), Step::Each, key("instances"), Step::Each])
        );
        assert_eq!(p("$.items.*"), path(vec![key("items"), Step::Each]));
        assert_eq!(p("$['key.with.dots']"), path(vec![key("key.with.dots")]));
        assert_eq!(p("$[\"k\"]"), path(vec![key("k")]));
        assert_eq!(p("$[ 'a b' ][*]"), path(vec![key("a b"), Step::Each]));
        assert_eq!(p(r"$['it\'s']"), path(vec![key("it's")]));
        assert_eq!(p("$['a]b']"), path(vec![key("a]b")]));
        assert_eq!(p("$.a['b'].c"), path(vec![key("a"), key("b"), key("c")]));
        assert_eq!(p("$.data-set_1"), path(vec![key("data-set_1")]));
    }

    #[test]
    fn parses_legacy_keys() {
        let p = |s: &str| RowLocator::parse(s).unwrap();
        assert_eq!(p("subnetworks"), path(vec![key("subnetworks")]));
        assert_eq!(p("items"), path(vec![key("items")]));
        assert_eq!(p("a.b"), path(vec![key("a"), key("b")]));
        assert_eq!(p("items[*]"), path(vec![key("items"), Step::Each]));
    }

    #[test]
    fn rejects_unsupported_object_keys() {
        for bad in [
            "",
            "   ",
            "$..items",
            "$.items[?(@.x == 1)]",
            "$.items[0:2]",
            "$.items[:1]",
            "$.items[0]",
            "$.items['a','b']",
            "$.items[*",
            "$.items]",
            "$['unterminated",
            "$['a'",
            "$.",
            "$.items.",
            "$a",
            "$.a b",
            "a..b",
            "$.items[]",
            "$.items[(@.length-1)]",
            "$.items[abc]",
        ] {
            let err = RowLocator::parse(bad).expect_err(bad);
            assert!(err.contains(&format!("`{bad}`")), "{bad:?} → {err}");
        }
    }

    // --- column binder -----------------------------------------------------------------------

    #[test]
    fn binder_is_case_insensitive_and_prefers_exact() {
        let binder = ColumnBinder::new(&cols(&["id", "selfLink", "ID", "Name", "id"]));
        assert_eq!(binder.len(), 5);
        assert_eq!(binder.position("id"), Some(1));
        assert_eq!(binder.position("ID"), Some(3));
        assert_eq!(binder.position("Id"), Some(1));
        assert_eq!(binder.position("selflink"), Some(2));
        assert_eq!(binder.position("SELFLINK"), Some(2));
        assert_eq!(binder.position("name"), Some(4));
        assert_eq!(binder.position("nope"), None);
        assert_eq!(binder.position(""), None);
        assert_eq!(binder.value_pos, None);
        let many: Vec<String> = (0..300).map(|i| format!("Col{i}")).collect();
        let binder = ColumnBinder::new(&many);
        for i in 0..300 {
            assert_eq!(binder.position(&format!("col{i}")), Some(i + 1));
        }
        assert_eq!(ColumnBinder::new(&[]).position("x"), None);
    }

    // --- loading rows ------------------------------------------------------------------------

    #[test]
    fn array_root() {
        let body = r#"[{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {}]"#;
        let (n, conn) = load(body, &RowLocator::Auto, &["id", "name"]);
        assert_eq!(n, 3);
        let rows = query(&conn, "SELECT id, name FROM t ORDER BY rowid");
        assert_eq!(
            rows,
            vec![
                vec![Value::Integer(1), text("a")],
                vec![Value::Integer(2), text("b")],
                vec![Value::Null, Value::Null],
            ]
        );
        let (n, _) = load(body, &RowLocator::parse("$").unwrap(), &["id"]);
        assert_eq!(n, 3);
        let (n, _) = load(body, &RowLocator::parse("$[*]").unwrap(), &["id"]);
        assert_eq!(n, 3);
    }

    #[test]
    fn auto_items_array() {
        let body = r#"{"kind": "list", "items": [{"id": "x"}, {"id": "y"}], "nextPageToken": "t",
                       "items2": 1}"#;
        let (n, conn) = load(body, &RowLocator::Auto, &["id", "kind"]);
        assert_eq!(n, 2);
        let rows = query(&conn, "SELECT id, kind FROM t ORDER BY rowid");
        assert_eq!(
            rows,
            vec![vec![text("x"), Value::Null], vec![text("y"), Value::Null]]
        );
        let (n, _) = load(
            r#"{"items": [], "kind": "x"}"#,
            &RowLocator::Auto,
            &["kind"],
        );
        assert_eq!(n, 0);
    }

    #[test]
    fn auto_single_object_and_empty() {
        let body = r#"{"id": 7, "name": "solo", "items": {"a": [1, 2]}, "tags": ["x"]}"#;
        let (n, conn) = load(body, &RowLocator::Auto, &["id", "name", "items", "tags"]);
        assert_eq!(n, 1);
        let rows = query(
            &conn,
            "SELECT id, name, json_extract(items, '$.a[1]'), json_extract(tags, '$[0]') FROM t",
        );
        assert_eq!(
            rows,
            vec![vec![
                Value::Integer(7),
                text("solo"),
                Value::Integer(2),
                text("x")
            ]]
        );
        let (n, _) = load("{}", &RowLocator::Auto, &["id"]);
        assert_eq!(n, 0);
        let (n, _) = load(" {} ", &RowLocator::parse("$").unwrap(), &["id"]);
        assert_eq!(n, 0);
        let (n, _) = load("null", &RowLocator::Auto, &["id"]);
        assert_eq!(n, 0);
        let (n, _) = load("  ", &RowLocator::Auto, &["id"]);
        assert_eq!(n, 0);
        // Scalar `items` under Auto: still a single row.
        let (n, conn) = load(
            r#"{"items": "s", "id": 3}"#,
            &RowLocator::Auto,
            &["items", "id"],
        );
        assert_eq!(n, 1);
        assert_eq!(
            query(&conn, "SELECT items, id FROM t"),
            vec![vec![text("s"), Value::Integer(3)]]
        );
    }

    #[test]
    fn path_reaching_single_object_or_nothing() {
        let body = r#"{"result": {"id": 1, "name": "one"}, "empty": {}, "n": null, "s": "x"}"#;
        let (n, conn) = load(
            body,
            &RowLocator::parse("$.result").unwrap(),
            &["id", "name"],
        );
        assert_eq!(n, 1);
        assert_eq!(
            query(&conn, "SELECT id, name FROM t"),
            vec![vec![Value::Integer(1), text("one")]]
        );
        for key in [
            "$.empty",
            "$.n",
            "$.s",
            "$.missing",
            "$.result.id.deeper",
            "$.s[*]",
        ] {
            let (n, _) = load(body, &RowLocator::parse(key).unwrap(), &["id"]);
            assert_eq!(n, 0, "{key}");
        }
    }

    #[test]
    fn google_aggregated_list() {
        let body = r#"{
          "kind": "compute#instanceAggregatedList",
          "items": {
            "zones/us-east1-b": {
              "instances": [
                {"id": "1001", "name": "vm-a", "zone": "us-east1-b"},
                {"id": "1002", "name": "vm-b", "zone": "us-east1-b"}
              ]
            },
            "zones/us-west1-a": {
              "warning": {"code": "NO_RESULTS_ON_PAGE", "message": "none",
                          "data": [{"key": "scope", "value": "zones/us-west1-a"}]}
            },
            "zones/europe-west1-c": {
              "instances": [{"id": "2001", "name": "vm-c", "zone": "europe-west1-c"}]
            }
          },
          "nextPageToken": "abc"
        }"#;
        let locator = RowLocator::parse("$.items[*].instances[*]").unwrap();
        let (n, conn) = load(body, &locator, &["id", "name", "zone"]);
        assert_eq!(n, 3);
        let rows = query(&conn, "SELECT id, name FROM t ORDER BY rowid");
        assert_eq!(
            rows,
            vec![
                vec![text("1001"), text("vm-a")],
                vec![text("1002"), text("vm-b")],
                vec![text("2001"), text("vm-c")],
            ]
        );
        // Without the trailing [*] the reached arrays are rows all the same.
        let (n, _) = load(
            body,
            &RowLocator::parse("$.items[*].instances").unwrap(),
            &["id"],
        );
        assert_eq!(n, 3);
        // Object values as rows.
        let (n, conn) = load(
            body,
            &RowLocator::parse("$.items[*]").unwrap(),
            &["warning"],
        );
        assert_eq!(n, 3);
        assert_eq!(
            query(
                &conn,
                "SELECT json_extract(warning, '$.code') FROM t WHERE warning IS NOT NULL"
            ),
            vec![vec![text("NO_RESULTS_ON_PAGE")]]
        );
    }

    #[test]
    fn legacy_key() {
        let body = r#"{"subnetworks": [{"name": "a"}, {"name": "b"}], "other": [{"name": "z"}]}"#;
        let (n, conn) = load(body, &RowLocator::parse("subnetworks").unwrap(), &["name"]);
        assert_eq!(n, 2);
        assert_eq!(
            query(&conn, "SELECT name FROM t ORDER BY rowid"),
            vec![vec![text("a")], vec![text("b")]]
        );
        let body = r#"{"a": {"b": [{"name": "deep"}]}}"#;
        let (n, _) = load(body, &RowLocator::parse("a.b").unwrap(), &["name"]);
        assert_eq!(n, 1);
    }

    #[test]
    fn value_types() {
        let body = r#"[{
            "big": 18446744073709551615,
            "id": 9223372036854775807,
            "neg": -9223372036854775808,
            "huge": 123456789012345678901234567890,
            "f": 1.5, "e": 2e3, "negf": -0.25,
            "t": true, "fl": false, "nul": null,
            "esc": "a\"b\u00e9\n",
            "plain": "héllo",
            "empty": "",
            "nested": {"a": {"b": [1, {"c": "d"}]}},
            "arr": [1, 2, 3]
        }]"#;
        let columns = [
            "big", "id", "neg", "huge", "f", "e", "negf", "t", "fl", "nul", "esc", "plain",
            "empty", "nested", "arr",
        ];
        let (n, conn) = load(body, &RowLocator::Auto, &columns);
        assert_eq!(n, 1);
        let rows = query(&conn, &format!("SELECT {} FROM t", columns.join(", ")));
        assert_eq!(
            rows[0],
            vec![
                text("18446744073709551615"),
                Value::Integer(i64::MAX),
                Value::Integer(i64::MIN),
                Value::Real(1.2345678901234568e29),
                Value::Real(1.5),
                Value::Real(2000.0),
                Value::Real(-0.25),
                Value::Integer(1),
                Value::Integer(0),
                Value::Null,
                text("a\"b\u{e9}\n"),
                text("héllo"),
                text(""),
                text(r#"{"a": {"b": [1, {"c": "d"}]}}"#),
                text("[1, 2, 3]"),
            ]
        );
        let types = query(
            &conn,
            "SELECT typeof(big), typeof(id), typeof(f), typeof(t), typeof(nul), typeof(nested) \
             FROM t",
        );
        assert_eq!(
            types[0],
            ["text", "integer", "real", "integer", "null", "text"].map(text)
        );
        let extracted = query(
            &conn,
            "SELECT json_extract(nested, '$.a.b[1].c'), json_extract(arr, '$[2]') FROM t",
        );
        assert_eq!(extracted[0], vec![text("d"), Value::Integer(3)]);
    }

    #[test]
    fn case_insensitive_columns_and_unknown_properties() {
        let body = r#"[{"SelfLink": "l", "NAME": "n", "unknown": {"deep": [1, 2, {"x": null}]},
                        "zz": "ignored", "Id": 5}]"#;
        let (n, conn) = load(body, &RowLocator::Auto, &["selfLink", "name", "id"]);
        assert_eq!(n, 1);
        assert_eq!(
            query(&conn, "SELECT selfLink, name, id FROM t"),
            vec![vec![text("l"), text("n"), Value::Integer(5)]]
        );
    }

    #[test]
    fn fixed_params_and_overrides() {
        // Columns: id, org (both from JSON), then `region` only fixed. org is also fixed.
        let body = r#"[{"id": 1}, {"id": 2, "org": "json-org"}, {"id": 3, "org": null},
                       {"id": 4, "region": "json-region"}]"#;
        let fixed = vec![(2, text("param-org")), (3, text("param-region"))];
        let (n, conn) = load_with(body, &RowLocator::Auto, &["id", "org"], &["region"], &fixed);
        assert_eq!(n, 4);
        assert_eq!(
            query(&conn, "SELECT id, org, region FROM t ORDER BY id"),
            vec![
                vec![Value::Integer(1), text("param-org"), text("param-region")],
                vec![Value::Integer(2), text("json-org"), text("param-region")],
                vec![Value::Integer(3), text("param-org"), text("param-region")],
                // `region` is not a binder column: the fixed value stays.
                vec![Value::Integer(4), text("param-org"), text("param-region")],
            ]
        );
    }

    #[test]
    fn every_row_starts_from_null() {
        let body = r#"[{"a": 1, "b": 2}, {"a": 3}, {"b": 4}]"#;
        let (_, conn) = load(body, &RowLocator::Auto, &["a", "b"]);
        assert_eq!(
            query(&conn, "SELECT a, b FROM t ORDER BY rowid"),
            vec![
                vec![Value::Integer(1), Value::Integer(2)],
                vec![Value::Integer(3), Value::Null],
                vec![Value::Null, Value::Integer(4)],
            ]
        );
    }

    #[test]
    fn duplicate_keys_last_wins() {
        let (_, conn) = load(
            r#"[{"a": 1, "a": 2}, {"a": 1, "a": null}]"#,
            &RowLocator::Auto,
            &["a"],
        );
        assert_eq!(
            query(&conn, "SELECT a FROM t ORDER BY rowid"),
            vec![vec![Value::Integer(2)], vec![Value::Null]]
        );
    }

    #[test]
    fn escaped_keys() {
        let (n, conn) = load(
            r#"[{"n\u0061me": "x", "\"q\"": 1}]"#,
            &RowLocator::Auto,
            &["name", "\"q\""],
        );
        assert_eq!(n, 1);
        assert_eq!(query(&conn, "SELECT name FROM t"), vec![vec![text("x")]]);
        let (n, _) = load(
            r#"{"w\u0061pper": [{"name": 1}]}"#,
            &RowLocator::parse("$.wapper").unwrap(),
            &["name"],
        );
        assert_eq!(n, 1);
    }

    #[test]
    fn non_object_rows_bind_to_value() {
        let body = r#"["a", 1, 18446744073709551615, 2.5, true, null, [1, [2]], {"value": "obj"}]"#;
        let (n, conn) = load(body, &RowLocator::Auto, &["value"]);
        assert_eq!(n, 8);
        assert_eq!(
            query(&conn, "SELECT value FROM t ORDER BY rowid"),
            vec![
                vec![text("a")],
                vec![Value::Integer(1)],
                vec![text("18446744073709551615")],
                vec![Value::Real(2.5)],
                vec![Value::Integer(1)],
                vec![Value::Null],
                vec![text("[1,[2]]")],
                vec![text("obj")],
            ]
        );
        // No `value` column: non-object rows are skipped.
        let (n, _) = load(body, &RowLocator::Auto, &["other"]);
        assert_eq!(n, 1);
    }

    #[test]
    fn invalid_json_is_an_error() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (id)").unwrap();
        let mut stmt = conn.prepare("INSERT INTO t VALUES (?1)").unwrap();
        let binder = ColumnBinder::new(&cols(&["id"]));
        for bad in [
            "[{\"id\": 1},",
            "{\"items\": [1,]}",
            "[1] trailing",
            "nope",
            "{\"id\": \"\\x\"}",
            "{\"a\":}",
        ] {
            for locator in [RowLocator::Auto, RowLocator::parse("$.items").unwrap()] {
                let err =
                    load_rows(bad.as_bytes(), &locator, &binder, &[], &mut stmt).expect_err(bad);
                assert!(matches!(err, RowsError::Json(_)), "{bad}: {err}");
                assert!(
                    err.to_string()
                        .starts_with("response body is not valid JSON")
                );
            }
        }
    }

    #[test]
    fn sqlite_errors_surface() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (id INTEGER NOT NULL)")
            .unwrap();
        let mut stmt = conn.prepare("INSERT INTO t VALUES (?1)").unwrap();
        let binder = ColumnBinder::new(&cols(&["id"]));
        let err = load_rows(
            b"[{\"id\": 1}, {}]",
            &RowLocator::Auto,
            &binder,
            &[],
            &mut stmt,
        )
        .unwrap_err();
        assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
        let err = load_rows(b"{\"x\": 1}", &RowLocator::Auto, &binder, &[], &mut stmt).unwrap_err();
        assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
        let err = load_rows(
            b"[{}]",
            &RowLocator::Auto,
            &binder,
            &[(5, text("x"))],
            &mut stmt,
        )
        .unwrap_err();
        assert!(matches!(err, RowsError::Sqlite(_)), "{err}");
    }

    // --- extract_scalars ---------------------------------------------------------------------

    #[test]
    fn extracts_scalars() {
        let body = br#"{
            "nextPageToken": "tok\"en",
            "result_info": {"page": 2, "per_page": 50, "total": 1.50, "more": true, "n": null,
                            "obj": {"x": 1}},
            "@odata.nextLink": "https://x/y?$skip=10",
            "rows": [{"nextPageToken": "inner"}],
            "big": 18446744073709551615
        }"#;
        let paths: Vec<Vec<String>> = [
            &["nextPageToken"][..],
            &["result_info", "page"],
            &["result_info", "total"],
            &["result_info", "more"],
            &["result_info", "n"],
            &["result_info", "obj"],
            &["result_info", "missing"],
            &["@odata.nextLink"],
            &["rows"],
            &["rows", "nextPageToken"],
            &["nextPageToken", "deeper"],
            &["big"],
            &["absent", "x"],
        ]
        .iter()
        .map(|p| p.iter().map(|s| (*s).to_owned()).collect())
        .collect();
        let got = extract_scalars(body, &paths).unwrap();
        let want: Vec<Option<String>> = [
            Some("tok\"en"),
            Some("2"),
            Some("1.50"),
            Some("true"),
            None,
            None,
            None,
            Some("https://x/y?$skip=10"),
            None,
            None,
            None,
            Some("18446744073709551615"),
            None,
        ]
        .iter()
        .map(|v| v.map(str::to_owned))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn extract_scalars_edge_cases() {
        let paths = vec![vec!["a".to_owned()], vec!["a".to_owned(), "b".to_owned()]];
        assert_eq!(extract_scalars(b"", &paths).unwrap(), vec![None, None]);
        assert_eq!(extract_scalars(b" \n", &paths).unwrap(), vec![None, None]);
        assert_eq!(
            extract_scalars(b"[1, 2]", &paths).unwrap(),
            vec![None, None]
        );
        // A path ending where another continues: whichever shape the value has.
        assert_eq!(
            extract_scalars(br#"{"a": {"b": -3}}"#, &paths).unwrap(),
            vec![None, Some("-3".to_owned())]
        );
        assert_eq!(
            extract_scalars(br#"{"a": 2.5}"#, &paths).unwrap(),
            vec![Some("2.5".to_owned()), None]
        );
        assert_eq!(
            extract_scalars(br#"{"a": false}"#, &paths).unwrap(),
            vec![Some("false".to_owned()), None]
        );
        // Root path.
        assert_eq!(
            extract_scalars(b"\"x\"", &[vec![]]).unwrap(),
            vec![Some("x".to_owned())]
        );
        assert!(extract_scalars(b"{\"a\": ", &paths).is_err());
        assert!(extract_scalars(b"{\"a\": 1} x", &[]).is_err());
    }

    // --- discover_columns --------------------------------------------------------------------

    #[test]
    fn discovers_columns() {
        let body = br#"{"items": [{"id": 1, "name": "a"}, {"name": "b", "Labels": {"k": "v"}},
                                  {"ID": 3, "extra": null}], "nextPageToken": "x"}"#;
        assert_eq!(
            discover_columns(body, &RowLocator::Auto).unwrap(),
            cols(&["id", "name", "Labels", "extra"])
        );
        assert_eq!(
            discover_columns(body, &RowLocator::parse("$").unwrap()).unwrap(),
            cols(&["items", "nextPageToken"])
        );
        assert_eq!(
            discover_columns(br#"["a", "b"]"#, &RowLocator::Auto).unwrap(),
            cols(&["value"])
        );
        assert!(discover_columns(b"", &RowLocator::Auto).unwrap().is_empty());
        assert!(
            discover_columns(b"{}", &RowLocator::Auto)
                .unwrap()
                .is_empty()
        );
        let wide: String = (0..600)
            .map(|i| format!("\"c{i}\": {i}"))
            .collect::<Vec<_>>()
            .join(",");
        let got = discover_columns(format!("[{{{wide}}}]").as_bytes(), &RowLocator::Auto).unwrap();
        assert_eq!(got.len(), MAX_DISCOVERED_COLUMNS);
        assert_eq!(got[511], "c511");
        assert!(discover_columns(b"[{\"a\": 1", &RowLocator::Auto).is_err());
    }
}
