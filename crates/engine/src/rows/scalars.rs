//! Skimming a body for scalars at given paths (pagination tokens and similar).

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

/// The value at `depth` on the requested paths listed in `active` (indexes into `paths`).
pub(super) struct ScalarSeed<'a> {
    pub(super) paths: &'a [Vec<String>],
    pub(super) active: &'a [usize],
    pub(super) depth: usize,
    pub(super) out: &'a mut [Option<String>],
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
pub(super) fn scalar_text(raw: &str) -> serde_json::Result<Option<Cow<'_, str>>> {
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

fn drain_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
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
