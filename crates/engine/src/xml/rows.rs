//! `schema_driven_xml_v0.1.0`: the rows of an XML response found and typed by the row
//! schema (`response.schema_override` at `objectKey`), written as the JSON envelope
//! `{"<list>": [rows…]}` the row loader reads, as any-sdk's transform writes it.
//!
//! Finding the rows follows any-sdk: the root element is skipped (`<OpResponse>` of the
//! AWS query protocol, the result element of REST-XML); under the query protocol the
//! `…Result` child is the payload. A payload holding any of the row's fields is the one row
//! (a `Get…` answer). Otherwise the row list is the payload's child that holds rows: a
//! repeated element (`<Contents>` of S3 ListObjectsV2), a `<member>`/`<item>` wrapper
//! (`Users/member`, `vpcSet/item`), or a wrapper of one element name
//! (`Buckets/Bucket`). One deviation makes one-element lists work: a candidate whose
//! elements carry row fields is preferred to one that does not (any-sdk takes the first in
//! name order, so a one-object S3 listing or a listing with `<CommonPrefixes>` gave the
//! wrong rows).
//!
//! Each row has exactly the schema's fields (those the statement loads: a column it does not
//! read is left out, as the row loader would skip it), typed by the schema as any-sdk types them:
//! `integer`/`number`/`boolean` parsed from the text (kept as text when the text is not
//! one), an empty element of a non-string type is null, `object`/`array` fields are the
//! element as JSON (an `array` field is always a JSON array: `<Tags><member>…</member></Tags>`
//! with one member is a one-element array). A property's `xml.name` names its element and
//! `xml.attribute` reads an attribute of the row element.
//!
//! The payload's own text fields (`IsTruncated`, `Marker`, `NextToken`,
//! `NextContinuationToken`…) are written beside the list, so next-page tokens are read from
//! the envelope as from a JSON body.

use std::io::Write as _;

use super::decode;
use super::tree::{Node, XmlError};

/// The query-protocol value of `info.x-protocol`.
const QUERY: &str = "query";

/// One field of a row, as the row schema declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowField {
    /// The property name (the column).
    pub(crate) name: String,
    /// The schema `type` (`string`, `integer`, `number`, `boolean`, `object`, `array`).
    pub(crate) type_name: String,
    /// `xml.name`: the element (or attribute) name, when not the property name.
    pub(crate) xml_name: Option<String>,
    /// `xml.attribute: true`: an attribute of the row element.
    pub(crate) attribute: bool,
    /// Whether the field is written into the rows: false for a column the statement does
    /// not read (the field still counts for finding the rows).
    pub(crate) loaded: bool,
}

impl RowField {
    fn lookup<'n, 'a>(&self, row: &'n Node<'a>) -> Option<&'n Node<'a>> {
        let name = self.xml_name.as_deref().unwrap_or(&self.name);
        if self.attribute {
            return row.attribute(name);
        }
        row.get(name).or_else(|| {
            // An attribute the schema does not mark as one is still found.
            row.attribute(name)
        })
    }
}

/// Decodes `body` into `{"<list_property>": [...], <payload text fields>}`.
pub(crate) fn transform(
    body: &[u8],
    fields: &[RowField],
    protocol: Option<&str>,
    list_property: &str,
) -> Result<Vec<u8>, XmlError> {
    let mut out = Vec::with_capacity(body.len() / 2 + 64);
    if body.iter().all(u8::is_ascii_whitespace) {
        write_envelope(&mut out, list_property, &[], fields, None);
        return Ok(out);
    }
    let (_, root) = decode::parse(body)?;
    let payload = payload(&root, protocol);
    let rows = payload.map(|p| find_rows(p, fields)).unwrap_or_default();
    write_envelope(&mut out, list_property, &rows, fields, payload);
    Ok(out)
}

/// The node whose children are inspected for rows.
fn payload<'n, 'a>(root: &'n Node<'a>, protocol: Option<&str>) -> Option<&'n Node<'a>> {
    let Node::Map(entries) = root else {
        return None;
    };
    if protocol == Some(QUERY) {
        let mut results: Vec<&(std::borrow::Cow<'a, str>, Node<'a>)> = entries
            .iter()
            .filter(|(k, v)| k.ends_with("Result") && matches!(v, Node::Map(_)))
            .collect();
        results.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((_, result)) = results.first() {
            return Some(result);
        }
    }
    Some(root)
}

fn is_element_key(key: &str) -> bool {
    !key.starts_with('-') && key != "#text"
}

fn has_row_field(node: &Node<'_>, fields: &[RowField]) -> bool {
    matches!(node, Node::Map(_)) && fields.iter().any(|f| f.lookup(node).is_some())
}

/// The row elements of a list member, by any-sdk's `normalizeRows`.
fn normalize<'n, 'a>(member: &'n Node<'a>, out: &mut Vec<&'n Node<'a>>) {
    match member {
        Node::Text(_) => {}
        Node::List(items) => out.extend(items.iter().filter(|i| matches!(i, Node::Map(_)))),
        Node::Map(entries) => {
            if let Some(item) = member.get("item") {
                return normalize(item, out);
            }
            let mut elements = entries.iter().filter(|(k, _)| is_element_key(k));
            if let (Some((_, only)), None) = (elements.next(), elements.next())
                && matches!(only, Node::List(_) | Node::Map(_))
            {
                return normalize(only, out);
            }
            out.push(member);
        }
    }
}

/// The rows of `payload`: itself when it holds row fields, else its list member.
fn find_rows<'n, 'a>(payload: &'n Node<'a>, fields: &[RowField]) -> Vec<&'n Node<'a>> {
    if has_row_field(payload, fields) {
        return vec![payload];
    }
    let Node::Map(entries) = payload else {
        return Vec::new();
    };
    let mut children: Vec<&(std::borrow::Cow<'a, str>, Node<'a>)> =
        entries.iter().filter(|(k, _)| is_element_key(k)).collect();
    children.sort_by(|a, b| a.0.cmp(&b.0));
    // First the child whose elements carry row fields.
    for (_, child) in &children {
        if matches!(child, Node::Text(_)) {
            continue;
        }
        let mut rows = Vec::new();
        normalize(child, &mut rows);
        if rows.first().is_some_and(|r| has_row_field(r, fields)) {
            return rows;
        }
    }
    // Then any-sdk's order: a repeated element, an `item` wrapper, a one-element wrapper.
    let candidate = children
        .iter()
        .find(|(_, v)| matches!(v, Node::List(_)))
        .or_else(|| children.iter().find(|(_, v)| v.get("item").is_some()))
        .or_else(|| {
            children.iter().find(|(_, v)| match v {
                Node::Map(inner) => {
                    let mut elements = inner.iter().filter(|(k, _)| is_element_key(k));
                    matches!(
                        (elements.next(), elements.next()),
                        (Some((_, Node::List(_) | Node::Map(_))), None)
                    )
                }
                _ => false,
            })
        });
    let mut rows = Vec::new();
    if let Some((_, member)) = candidate {
        normalize(member, &mut rows);
    }
    rows
}

fn write_envelope(
    out: &mut Vec<u8>,
    list_property: &str,
    rows: &[&Node<'_>],
    fields: &[RowField],
    payload: Option<&Node<'_>>,
) {
    out.push(b'{');
    write_str(out, list_property);
    out.extend_from_slice(b":[");
    for (i, row) in rows.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_row(out, row, fields);
    }
    out.push(b']');
    if let Some(Node::Map(entries)) = payload {
        for (key, value) in entries {
            if let Node::Text(text) = value
                && is_element_key(key)
                && key != list_property
            {
                out.push(b',');
                write_str(out, key);
                out.push(b':');
                write_str(out, text);
            }
        }
    }
    out.push(b'}');
}

fn write_row(out: &mut Vec<u8>, row: &Node<'_>, fields: &[RowField]) {
    out.push(b'{');
    for (i, field) in fields.iter().filter(|f| f.loaded).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, &field.name);
        out.push(b':');
        match field.lookup(row) {
            None => out.extend_from_slice(b"null"),
            Some(value) => write_typed(out, value, &field.type_name),
        }
    }
    out.push(b'}');
}

/// A value typed as any-sdk's `convertValue` types it.
fn write_typed(out: &mut Vec<u8>, value: &Node<'_>, type_name: &str) {
    if let Node::Text(text) = value {
        if text.is_empty() && type_name != "string" {
            out.extend_from_slice(b"null");
            return;
        }
        match type_name {
            "integer" if text.parse::<i64>().is_ok() => {
                out.extend_from_slice(text.as_bytes());
                return;
            }
            "number" => {
                if let Ok(n) = text.parse::<f64>()
                    && n.is_finite()
                    && let Some(number) = serde_json::Number::from_f64(n)
                {
                    let _ = write!(out, "{number}");
                    return;
                }
            }
            "boolean" => {
                if let Some(b) = go_parse_bool(text) {
                    out.extend_from_slice(if b { b"true" } else { b"false" });
                    return;
                }
            }
            "array" => {
                out.push(b'[');
                write_str(out, text);
                out.push(b']');
                return;
            }
            _ => {}
        }
        write_str(out, text);
        return;
    }
    if type_name == "array" {
        write_array(out, value);
    } else {
        write_json(out, value);
    }
}

/// Go's `strconv.ParseBool`.
fn go_parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// An `array` field: the list inside its wrapper (`member`, `item`, or the one element
/// name), a single element as a one-element list.
fn write_array(out: &mut Vec<u8>, value: &Node<'_>) {
    let items: Vec<&Node<'_>> = match value {
        Node::List(items) => items.iter().collect(),
        Node::Map(entries) => {
            let mut elements = entries.iter().filter(|(k, _)| is_element_key(k));
            match (elements.next(), elements.next()) {
                (Some((_, Node::List(items))), None) => items.iter().collect(),
                (Some((_, only)), None) => vec![only],
                _ => vec![value],
            }
        }
        Node::Text(_) => vec![value],
    };
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json(out, item);
    }
    out.push(b']');
}

/// A node as JSON: text as a string, maps as objects, lists as arrays.
pub(crate) fn write_json(out: &mut Vec<u8>, value: &Node<'_>) {
    match value {
        Node::Text(text) => write_str(out, text),
        Node::List(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, item);
            }
            out.push(b']');
        }
        Node::Map(entries) => {
            out.push(b'{');
            for (i, (key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(out, key);
                out.push(b':');
                write_json(out, item);
            }
            out.push(b'}');
        }
    }
}

/// A JSON string literal.
fn write_str(out: &mut Vec<u8>, text: &str) {
    // Most texts need no escape: copied between quotes.
    if !text.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return;
    }
    // Writing to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}
