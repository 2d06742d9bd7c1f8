//! Property tests of the decoder: for generated element trees, decoding their serialized XML
//! gives the map mxj's rules give the tree (issue 27 item 6).

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::to_mxj_value;

/// A generated element: a name from a small set (so siblings repeat), distinct attributes,
/// then text or children.
#[derive(Debug, Clone)]
struct Elem {
    prefix: bool,
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Elem>,
    /// `<a/>` rather than `<a></a>` when the element has nothing inside.
    self_closing: bool,
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "Key", "x-y", "n.1"]).prop_map(str::to_owned)
}

fn text() -> impl Strategy<Value = String> {
    "[ a-zA-Z0-9&<>\"'=;#é中\u{1F600}]{0,40}"
}

fn attrs() -> impl Strategy<Value = Vec<(String, String)>> {
    prop::collection::btree_map(name(), text(), 0..3).prop_map(|m| m.into_iter().collect())
}

fn leaf() -> impl Strategy<Value = Elem> {
    (any::<bool>(), name(), attrs(), text(), any::<bool>()).prop_map(
        |(prefix, name, attrs, text, self_closing)| Elem {
            prefix,
            name,
            attrs,
            text,
            children: Vec::new(),
            self_closing,
        },
    )
}

fn elem() -> impl Strategy<Value = Elem> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        (
            any::<bool>(),
            name(),
            attrs(),
            text(),
            prop::collection::vec(inner, 1..6),
        )
            .prop_map(|(prefix, name, attrs, text, children)| Elem {
                prefix,
                name,
                attrs,
                text,
                children,
                self_closing: false,
            })
    })
}

fn escape(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

fn serialize(elem: &Elem, out: &mut String) {
    write_elem(elem, escape, "", out);
}

/// `elem` as XML, its text and attribute values escaped by `escape`, `spacing` between tags.
/// Text comes first, then the children: mxj concatenates an element's text pieces.
fn write_elem(elem: &Elem, escape: fn(&str, &mut String), spacing: &str, out: &mut String) {
    let name = match elem.prefix {
        true => format!("p:{}", elem.name),
        false => elem.name.clone(),
    };
    out.push('<');
    out.push_str(&name);
    for (key, value) in &elem.attrs {
        out.push(' ');
        out.push_str(key);
        out.push_str("=\"");
        escape(value, out);
        out.push('"');
    }
    if elem.self_closing && elem.text.is_empty() && elem.children.is_empty() {
        out.push_str("/>");
        return;
    }
    out.push('>');
    escape(&elem.text, out);
    for child in &elem.children {
        out.push_str(spacing);
        write_elem(child, escape, spacing, out);
    }
    out.push_str(spacing);
    out.push_str("</");
    out.push_str(&name);
    out.push('>');
}

/// The element's value by mxj's rules, computed from the tree (not from XML).
fn expected(elem: &Elem) -> Value {
    let text = elem.text.trim_matches(' ');
    if elem.attrs.is_empty() && elem.children.is_empty() {
        return Value::String(text.to_owned());
    }
    let mut map = Map::new();
    for (key, value) in &elem.attrs {
        map.insert(format!("-{key}"), Value::String(value.clone()));
    }
    for child in &elem.children {
        let value = expected(child);
        match map.get_mut(&child.name) {
            None => {
                map.insert(child.name.clone(), value);
            }
            // An element's value is a string or a map: a list is a repeated name's.
            Some(Value::Array(items)) => items.push(value),
            Some(first) => {
                let first = first.take();
                map.insert(child.name.clone(), Value::Array(vec![first, value]));
            }
        }
    }
    if !text.is_empty() {
        map.insert("#text".to_owned(), Value::String(text.to_owned()));
    }
    Value::Object(map)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn decoding_serialized_trees_gives_mxj_maps(root in elem(), decl in any::<bool>()) {
        let mut xml = String::new();
        if decl {
            xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        }
        // The `p:` prefix is declared on the root: the declaration is an attribute (`-p`).
        let mut root = root;
        root.attrs.retain(|(k, _)| k != "xmlns:p");
        let mut decoded_root = root.clone();
        decoded_root.attrs.push(("p".to_owned(), "urn:p".to_owned()));
        root.attrs.push(("xmlns:p".to_owned(), "urn:p".to_owned()));
        serialize(&root, &mut xml);
        let decoded = to_mxj_value(xml.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {xml}")))?;
        let mut want = Map::new();
        want.insert(root.name.clone(), expected(&decoded_root));
        prop_assert_eq!(decoded, Value::Object(want), "{}", xml);
    }
}

/// Text as an API writes it: XML's five entities, `&apos;` for `'` (the fast scanner takes
/// no character reference).
fn escape_named(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
}

/// `elem` as XML with named entities, `spacing` between tags (indentation as APIs send it).
fn serialize_named(elem: &Elem, spacing: &str, out: &mut String) {
    write_elem(elem, escape_named, spacing, out);
}

/// Snippets spliced into bodies: markup the fast scanner leaves to quick-xml, and damage.
fn snippet() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "<",
        ">",
        "&",
        ";",
        "&amp;",
        "&#65;",
        "&bogus;",
        "<!-- c -->",
        "<![CDATA[x<y]]>",
        "]]>",
        "\r\n",
        "\r",
        "<?pi x?>",
        "<!DOCTYPE a>",
        "</a>",
        "<a>",
        "<b/>",
        "/",
        "=",
        "\"",
        "'",
        " x=\"1\"",
        " x='2'",
        " x=3",
        "\t",
        "\n",
        " ",
        "é",
        ":",
        "<1a>",
        "<p:>",
        "\u{0}",
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// What the fast scanner accepts, quick-xml decodes to the same tree; it accepts the
    /// plain bodies APIs send.
    #[test]
    fn the_fast_scanner_agrees_with_quick_xml(
        root in elem(),
        decl in any::<bool>(),
        spacing in prop::sample::select(vec!["", "\n", "\n  ", " \t"]),
        splices in prop::collection::vec((any::<prop::sample::Index>(), snippet(), any::<bool>()), 0..3),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut xml = String::new();
        if decl {
            xml.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        }
        let mut root = root;
        root.attrs.retain(|(k, _)| k != "xmlns:p");
        root.attrs.push(("xmlns:p".to_owned(), "urn:p".to_owned()));
        serialize_named(&root, spacing, &mut xml);
        let plain = splices.is_empty() && cut.is_none();
        for (at, piece, between_tags) in &splices {
            // Between tags (after a `>`) or anywhere.
            let ends: Vec<usize> = xml.match_indices('>').map(|(i, _)| i + 1).collect();
            let mut i = match between_tags {
                true if !ends.is_empty() => ends[at.index(ends.len())],
                _ => at.index(xml.len() + 1),
            };
            while !xml.is_char_boundary(i) {
                i -= 1;
            }
            xml.insert_str(i, piece);
        }
        if let Some(cut) = cut {
            let mut i = cut.index(xml.len() + 1);
            while !xml.is_char_boundary(i) {
                i -= 1;
            }
            xml.truncate(i);
        }
        let fast = super::fast::parse(&xml);
        if plain && !root_has_special_attribute(&root) {
            prop_assert!(fast.is_some(), "not taken by the fast scanner: {}", xml);
        }
        if let Some(fast) = fast {
            let slow = super::tree::read(&xml);
            prop_assert_eq!(Ok(fast), slow, "{}", xml);
        }
    }
}

/// Whether an attribute value of the tree holds what the fast scanner leaves to quick-xml
/// (references, which escaping writes for `&<>"'`).
fn root_has_special_attribute(elem: &Elem) -> bool {
    elem.attrs
        .iter()
        .any(|(_, v)| v.contains(['&', '<', '>', '"', '\'']))
        || elem.children.iter().any(root_has_special_attribute)
}
