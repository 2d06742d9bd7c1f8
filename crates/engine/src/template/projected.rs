//! The body of a flatten run that writes only some columns, decoded for that run alone.
//!
//! When a statement loads only some columns, the compiled flatten (see `flatten`) writes only
//! the members of the rows (and of their `properties`) that are among them. Decoding the
//! others into the tree only to pass them over costs most of a transformed page: this
//! decoder skips them (still checking that they are JSON) and counts them, so the run
//! charges the steps it would for the whole row. Everything else (the body's other members,
//! a row or `properties` that is not an object) is decoded whole, as [`Doc`] decodes it.
//!
//! The tree is only for the compiled flatten: where it gives up, the interpreter runs over
//! the body decoded whole.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::doc::{Doc, DocVisitor, Key, Obj};
use super::flatten::Columns;

/// What the run reads: the key of the rows and the members it writes.
#[derive(Clone, Copy)]
pub(super) struct Projection<'p> {
    /// The root member holding the rows.
    pub(super) rows: &'p str,
    /// The member of a row whose members are written beside the row's own.
    pub(super) nested: &'p str,
    /// The members written.
    pub(super) columns: &'p Columns<'p>,
}

/// The first JSON value of `body`, decoded for `projection`; `None` for a body that is not
/// UTF-8, not JSON or holds no value (the caller then decodes it whole, which says why).
/// The body is checked as UTF-8 once, so its strings are not checked one by one.
pub(super) fn decode<'de>(body: &'de [u8], projection: Projection<'_>) -> Option<Doc<'de>> {
    let text = std::str::from_utf8(body).ok()?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    Part::Root
        .seed(projection)
        .deserialize(&mut deserializer)
        .ok()
}

/// Where in the body a value is.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// The body.
    Root,
    /// The root member holding the rows.
    Rows,
    /// A row.
    Row,
    /// A row's nested member.
    Nested,
}

impl Part {
    fn seed(self, projection: Projection<'_>) -> Seed<'_> {
        Seed {
            part: self,
            projection,
        }
    }
}

/// Decodes one value at `part`.
struct Seed<'p> {
    part: Part,
    projection: Projection<'p>,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Doc<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Doc<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// Every visit but of a map (or, for the rows, a list) is [`DocVisitor`]'s.
macro_rules! as_doc {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $name<E: serde::de::Error>(self, $($arg: $ty),*) -> Result<Doc<'de>, E> {
            DocVisitor.$name($($arg),*)
        })*
    };
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Doc<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    as_doc! {
        visit_bool(b: bool);
        visit_i64(i: i64);
        visit_u64(u: u64);
        visit_f64(f: f64);
        visit_borrowed_str(s: &'de str);
        visit_str(s: &str);
        visit_string(s: String);
        visit_none();
        visit_unit();
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Doc<'de>, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc<'de>, A::Error> {
        if self.part != Part::Rows {
            return DocVisitor.visit_seq(seq);
        }
        let mut rows = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(row) = seq.next_element_seed(Part::Row.seed(self.projection))? {
            rows.push(row);
        }
        Ok(Doc::Array(rows))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<'de>, A::Error> {
        let Projection {
            rows,
            nested,
            columns,
        } = self.projection;
        let keep = |key: &str| columns.contains(key);
        let mut members = Vec::new();
        let mut skipped = 0_usize;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let part = match self.part {
                Part::Root if key == rows => Some(Part::Rows),
                Part::Root => None,
                Part::Row if key == nested && !keep(&key) => Some(Part::Nested),
                Part::Row | Part::Nested if keep(&key) => None,
                Part::Row | Part::Nested => {
                    map.next_value::<IgnoredAny>()?;
                    skipped += 1;
                    continue;
                }
                Part::Rows => None,
            };
            let value = match part {
                Some(part) => map.next_value_seed(part.seed(self.projection))?,
                None => map.next_value::<Doc<'de>>()?,
            };
            members.push((key, value));
        }
        Ok(Doc::Object(Obj::from_members_skipping(members, skipped)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded(body: &str, columns: &[&str]) -> Doc<'static> {
        let names: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        let columns = Columns::new(&names);
        let projection = Projection {
            rows: "value",
            nested: "properties",
            columns: &columns,
        };
        decode(body.as_bytes(), projection).unwrap().into_owned()
    }

    fn json(text: &str) -> Doc<'static> {
        serde_json::from_str::<Doc<'_>>(text).unwrap().into_owned()
    }

    #[test]
    fn only_the_kept_members_of_rows_and_their_properties_are_decoded() {
        let body = r#"{"value": [{"id": "i", "Name": "n", "properties": {"size": 3, "big": {"x": [1]}, "NAME": "p"}}],
                       "nextLink": {"any": "thing"}}"#;
        let doc = decoded(body, &["name", "size"]);
        let expected = json(
            r#"{"value": [{"Name": "n", "properties": {"size": 3, "NAME": "p"}}], "nextLink": {"any": "thing"}}"#,
        );
        assert_eq!(doc, expected);
        let Doc::Object(root) = &doc else { panic!() };
        let Some(Doc::Array(rows)) = root.get("value") else {
            panic!()
        };
        let Doc::Object(row) = &rows[0] else { panic!() };
        assert_eq!(row.charged_len(), 3, "the skipped id counts");
        let Some(Doc::Object(properties)) = row.get("properties") else {
            panic!()
        };
        assert_eq!(properties.charged_len(), 3, "the skipped big counts");
    }

    #[test]
    fn a_kept_properties_member_and_values_of_other_shapes_are_whole() {
        let body =
            r#"{"value": [{"properties": {"a": 1}}, {"properties": "text"}, 7, [1, {"b": 2}]]}"#;
        assert_eq!(decoded(body, &["properties"]), json(body));
        assert_eq!(
            decoded(body, &[]),
            json(r#"{"value": [{"properties": {}}, {"properties": "text"}, 7, [1, {"b": 2}]]}"#)
        );
        assert_eq!(decoded(r#"[{"x": 1}]"#, &[]), json(r#"[{"x": 1}]"#));
        assert_eq!(decoded(r#""value""#, &[]), json(r#""value""#));
    }

    #[test]
    fn a_skipped_member_must_still_be_json_and_the_body_utf8() {
        let columns = Columns::new(&[]);
        let projection = Projection {
            rows: "value",
            nested: "properties",
            columns: &columns,
        };
        assert!(decode(br#"{"value": [{"x": [1, }]}"#, projection).is_none());
        assert!(decode(b"  ", projection).is_none());
        assert!(decode(b"{\"value\": [{\"x\": \"\xff\"}]}", projection).is_none());
        assert!(decode(br#"{"value": [{"x": "\u00ff"}]}"#, projection).is_some());
    }

    #[test]
    fn escaped_keys_are_compared_decoded() {
        let doc = decoded(
            r#"{"val\u0075e": [{"n\u0061me": 1, "other": 2}]}"#,
            &["name"],
        );
        assert_eq!(doc, json(r#"{"value": [{"name": 1}]}"#));
    }
}
