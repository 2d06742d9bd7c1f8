//! Walking a body to its rows: a chain of [`DeserializeSeed`]s follows a [`RowLocator`] and
//! hands every row found to a [`RowSink`].

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::capture::Captures;
use super::locator::{RowLocator, Step};

/// A non-object row, as delivered to [`RowSink::scalar_row`].
#[derive(Debug, Clone, Copy)]
pub(super) enum Scalar<'a> {
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
pub(super) trait RowSink<'de> {
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

/// Parses the whole body, feeding the rows at `locator` into `sink` and keeping the
/// properties `captures` asks for.
///
/// The body is validated as UTF-8 once, up front, and then parsed as text, so the parser
/// does not validate each key and captured value again. A body that is not valid UTF-8
/// throughout is parsed as bytes instead, which rejects invalid UTF-8 only where it is read
/// (keys, bound values), not in skipped values, as before.
pub(super) fn walk<'de, S: RowSink<'de>>(
    body: &'de [u8],
    locator: &RowLocator,
    sink: &mut S,
    captures: &mut Captures<'de>,
) -> serde_json::Result<()> {
    match std::str::from_utf8(body) {
        Ok(text) => walk_with(
            serde_json::Deserializer::from_str(text),
            locator,
            sink,
            captures,
        ),
        Err(_) => walk_with(
            serde_json::Deserializer::from_slice(body),
            locator,
            sink,
            captures,
        ),
    }
}

fn walk_with<'de, R: serde_json::de::Read<'de>, S: RowSink<'de>>(
    mut de: serde_json::Deserializer<R>,
    locator: &RowLocator,
    sink: &mut S,
    captures: &mut Captures<'de>,
) -> serde_json::Result<()> {
    match locator {
        RowLocator::Path(steps) => {
            PathSeed {
                steps,
                depth: 0,
                sink,
                captures,
            }
            .deserialize(&mut de)?;
            de.end()
        }
        RowLocator::Auto => {
            let outcome = de.deserialize_any(AutoVisitor {
                sink: &mut *sink,
                captures,
            })?;
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

pub(super) fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
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

/// Follows the remaining `steps` from the value being deserialized, at `depth` steps from
/// the root.
struct PathSeed<'a, 'de, S> {
    steps: &'a [Step],
    depth: usize,
    sink: &'a mut S,
    captures: &'a mut Captures<'de>,
}

impl<'de, S: RowSink<'de>> DeserializeSeed<'de> for PathSeed<'_, 'de, S> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let PathSeed {
            steps,
            depth,
            sink,
            captures,
        } = self;
        match steps.split_first() {
            None => deserializer.deserialize_any(ReachedVisitor { sink }),
            Some((Step::Each, [])) => deserializer.deserialize_any(EachRowVisitor { sink }),
            Some((Step::Each, rest)) => deserializer.deserialize_any(EachVisitor {
                rest,
                depth: depth + 1,
                sink,
                captures,
            }),
            Some((Step::Key(key), rest)) => deserializer.deserialize_any(KeyVisitor {
                key,
                rest,
                depth,
                sink,
                captures,
            }),
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

/// A `[*]` with more steps after it (`depth`: that of the values it iterates).
struct EachVisitor<'a, 'de, S> {
    rest: &'a [Step],
    depth: usize,
    sink: &'a mut S,
    captures: &'a mut Captures<'de>,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for EachVisitor<'_, 'de, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq
            .next_element_seed(PathSeed {
                steps: self.rest,
                depth: self.depth,
                sink: &mut *self.sink,
                captures: &mut *self.captures,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(PathSeed {
                steps: self.rest,
                depth: self.depth,
                sink: &mut *self.sink,
                captures: &mut *self.captures,
            })?;
        }
        Ok(())
    }
}

/// A `.key` step from an object at `depth`: descend into that property; anything else holds
/// no rows (other properties are skipped, or kept when `captures` asks for them).
struct KeyVisitor<'a, 'de, S> {
    key: &'a str,
    rest: &'a [Step],
    depth: usize,
    sink: &'a mut S,
    captures: &'a mut Captures<'de>,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for KeyVisitor<'_, 'de, S> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        drain_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        loop {
            let seed = KeyIs {
                key: self.key,
                depth: self.depth,
                captures: &*self.captures,
            };
            let Some(hit) = map.next_key_seed(seed)? else {
                break;
            };
            match hit {
                KeyHit::Step => map.next_value_seed(PathSeed {
                    steps: self.rest,
                    depth: self.depth + 1,
                    sink: &mut *self.sink,
                    captures: &mut *self.captures,
                })?,
                KeyHit::Capture(slot) => {
                    let raw: &'de RawValue = map.next_value()?;
                    self.captures.keep(slot, raw);
                }
                KeyHit::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// What an object key on the rows' path is.
enum KeyHit {
    /// The key of the next step.
    Step,
    /// A property to capture into this slot.
    Capture(usize),
    /// Anything else.
    Other,
}

/// Deserializes an object key at `depth` and tells whether it is the step's key or one to
/// capture.
struct KeyIs<'a, 'de> {
    key: &'a str,
    depth: usize,
    captures: &'a Captures<'de>,
}

impl<'de> DeserializeSeed<'de> for KeyIs<'_, '_> {
    type Value = KeyHit;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<KeyHit, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_, '_> {
    type Value = KeyHit;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyHit, E> {
        if v == self.key {
            return Ok(KeyHit::Step);
        }
        Ok(match self.captures.slot(self.depth, v) {
            Some(slot) => KeyHit::Capture(slot),
            None => KeyHit::Other,
        })
    }
}

/// Deserializes an object key, borrowing it from the body unless it contains escapes.
pub(super) struct KeyCow;

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
struct AutoVisitor<'a, 'de, S> {
    sink: &'a mut S,
    captures: &'a mut Captures<'de>,
}

impl<'de, S: RowSink<'de>> Visitor<'de> for AutoVisitor<'_, 'de, S> {
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
                        self.skip_rest(map)?;
                        return Ok(AutoOutcome::Done);
                    }
                    Some(raw) => pairs.push((key, Cow::Owned(raw))),
                }
            } else {
                let raw: &'de RawValue = map.next_value()?;
                self.captures.keep_root(&key, raw);
                pairs.push((key, Cow::Borrowed(raw)));
            }
        }
        Ok(AutoOutcome::Object(pairs))
    }
}

impl<'de, S> AutoVisitor<'_, 'de, S> {
    /// The root properties after a streamed `items` array: skipped, or kept when captured.
    fn skip_rest<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeyCow)? {
            match self.captures.slot(0, &key) {
                Some(slot) => {
                    let raw: &'de RawValue = map.next_value()?;
                    self.captures.keep(slot, raw);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
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
