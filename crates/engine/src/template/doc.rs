//! The JSON tree a template runs over, decoded once from the response body and borrowing it.
//!
//! Go's `encoding/json` decodes into `map[string]interface {}`, whose order no template can
//! observe: `range`, printing and `toJson` all visit a map's keys sorted, and a key given twice
//! keeps its last value. So an object here is its members sorted by key once, as decoded,
//! with the last of equal keys kept: ranging and marshalling walk it in order with no sort per
//! use, and a lookup is a binary search. Strings without escapes borrow the body; numbers keep
//! `serde_json`'s kinds (integers are written with all their digits). Why not
//! `serde_json::Value`: it owns every key and string and, with `preserve_order`, hashes every
//! key into an index map that is then sorted again on each visit.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value as Json};

/// One JSON value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Doc<'a> {
    Null,
    Bool(bool),
    Number(Number),
    Str(Cow<'a, str>),
    Array(Vec<Doc<'a>>),
    Object(Obj<'a>),
}

/// An object's members, sorted by key, keys unique; equal to another with the same members.
#[derive(Debug, Clone, Default)]
pub(super) struct Obj<'a> {
    members: Vec<(Cow<'a, str>, Doc<'a>)>,
    /// Members of the body's object left out of `members` when decoded (see `projected`).
    skipped: usize,
}

impl PartialEq for Obj<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members
    }
}

impl<'a> Obj<'a> {
    /// The members as decoded (any order, repeated keys: the last one counts).
    pub(super) fn from_members(members: Vec<(Cow<'a, str>, Doc<'a>)>) -> Self {
        Self::from_members_skipping(members, 0)
    }

    /// The members as decoded, `skipped` more left out of them.
    pub(super) fn from_members_skipping(
        mut members: Vec<(Cow<'a, str>, Doc<'a>)>,
        skipped: usize,
    ) -> Self {
        if !members.is_sorted_by(|a, b| a.0 < b.0) {
            // Stable: of equal keys, the last decoded stays last in its run.
            members.sort_by(|a, b| a.0.cmp(&b.0));
            members.dedup_by(|later, kept| {
                let same = later.0 == kept.0;
                if same {
                    std::mem::swap(later, kept);
                }
                same
            });
        }
        Obj { members, skipped }
    }

    /// The value of `key`.
    pub(super) fn get(&self, key: &str) -> Option<&Doc<'a>> {
        self.members
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| &self.members[i].1)
    }

    /// The members in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &Doc<'a>)> {
        self.members.iter().map(|(k, v)| (k.as_ref(), v))
    }

    pub(super) fn len(&self) -> usize {
        self.members.len()
    }

    /// The members the body's object had: at least [`Obj::len`], and more when some were
    /// left out when decoded (what a run over the whole object is charged for).
    pub(super) fn charged_len(&self) -> usize {
        self.members.len() + self.skipped
    }

    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl<'a> Doc<'a> {
    /// The tree of a `serde_json` value, borrowing its strings.
    pub(super) fn of_json(value: &'a Json) -> Doc<'a> {
        match value {
            Json::Null => Doc::Null,
            Json::Bool(b) => Doc::Bool(*b),
            Json::Number(n) => Doc::Number(n.clone()),
            Json::String(s) => Doc::Str(Cow::Borrowed(s)),
            Json::Array(items) => Doc::Array(items.iter().map(Doc::of_json).collect()),
            Json::Object(map) => Doc::Object(Obj::from_members(
                map.iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_str()), Doc::of_json(v)))
                    .collect(),
            )),
        }
    }

    /// The same tree owning all its strings.
    pub(super) fn into_owned(self) -> Doc<'static> {
        match self {
            Doc::Null => Doc::Null,
            Doc::Bool(b) => Doc::Bool(b),
            Doc::Number(n) => Doc::Number(n),
            Doc::Str(s) => Doc::Str(Cow::Owned(s.into_owned())),
            Doc::Array(items) => Doc::Array(items.into_iter().map(Doc::into_owned).collect()),
            Doc::Object(obj) => Doc::Object(Obj {
                members: obj
                    .members
                    .into_iter()
                    .map(|(k, v)| (Cow::Owned(k.into_owned()), v.into_owned()))
                    .collect(),
                skipped: obj.skipped,
            }),
        }
    }
}

impl<'de> Deserialize<'de> for Doc<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(DocVisitor)
    }
}

/// Decodes any JSON value into a [`Doc`].
pub(super) struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<Doc<'de>, E> {
        Ok(Doc::Bool(b))
    }

    fn visit_i64<E>(self, i: i64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(i.into()))
    }

    fn visit_u64<E>(self, u: u64) -> Result<Doc<'de>, E> {
        Ok(Doc::Number(u.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<Doc<'de>, E> {
        Ok(Number::from_f64(f).map_or(Doc::Null, Doc::Number))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Doc<'de>, E> {
        Ok(Doc::Str(Cow::Owned(s)))
    }

    fn visit_none<E>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }

    fn visit_unit<E>(self) -> Result<Doc<'de>, E> {
        Ok(Doc::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Doc<'de>, D::Error> {
        Deserialize::deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc<'de>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(item) = seq.next_element()? {
            reserve_first(&mut items);
            items.push(item);
        }
        Ok(Doc::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<'de>, A::Error> {
        let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0).min(4096));
        while let Some(key) = map.next_key::<Key<'de>>()? {
            reserve_first(&mut members);
            members.push((key.0, map.next_value()?));
        }
        Ok(Doc::Object(Obj::from_members(members)))
    }
}

/// Room for a few elements at the first push: the JSON decoder tells no sizes, and growing
/// one by one from nothing takes three allocations to reach the members of a typical object.
fn reserve_first<T>(items: &mut Vec<T>) {
    if items.capacity() == 0 {
        items.reserve_exact(8);
    }
}

/// An object key, borrowed from the body when it has no escapes.
pub(super) struct Key<'a>(pub(super) Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_sorted_and_the_last_of_repeated_keys_counts() {
        let doc: Doc<'_> =
            serde_json::from_str(r#"{"b":1,"a":2,"b":3,"c":{"z":1,"y":2}}"#).unwrap();
        let Doc::Object(obj) = &doc else {
            panic!("{doc:?}")
        };
        let keys: Vec<&str> = obj.iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        assert_eq!(obj.get("b"), Some(&Doc::Number(3.into())));
        assert_eq!(obj.get("nope"), None);
    }

    #[test]
    fn unescaped_strings_borrow_the_body() {
        let body = r#"{"plain":"text","esc\"aped":"a\nb"}"#;
        let doc: Doc<'_> = serde_json::from_str(body).unwrap();
        let Doc::Object(obj) = &doc else {
            panic!("{doc:?}")
        };
        assert!(matches!(
            obj.get("plain"),
            Some(Doc::Str(Cow::Borrowed("text")))
        ));
        assert!(matches!(obj.get("esc\"aped"), Some(Doc::Str(Cow::Owned(s))) if s == "a\nb"));
    }
}
