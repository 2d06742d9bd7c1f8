//! An XML body decoded into a tree with the conventions of Go's `mxj` (`NewMapXml`, no
//! casting), which any-sdk uses for both its XML transforms: an element with only text is
//! its text (trimmed), an empty element is `""`, an element with attributes or children is
//! a map of them (attributes as `-name`, its text as `#text`), and an element name that
//! repeats among its siblings holds a list. Names are local names: a namespace prefix is
//! dropped, as mxj drops it (`xmlns` declarations are attributes like any other).
//!
//! Parsed with `quick-xml` over the borrowed body (names and most texts are not copied);
//! the body must be well-formed UTF-8 XML, nesting is bounded, entity references other than
//! XML's five and character references are refused.

use std::borrow::Cow;
use std::collections::HashMap;

use quick_xml::XmlVersion;
use quick_xml::events::{BytesStart, Event};

use crate::rows::same_key;

/// Nesting deeper than this is refused (a hostile body must not exhaust the stack of
/// whatever walks the tree).
pub(crate) const MAX_DEPTH: usize = 128;

/// Children of an element are looked up through an index once there are this many.
const INDEX_FROM: usize = 16;

/// One XML value in mxj's shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node<'a> {
    /// A simple element's text (`""` for an empty element).
    Text(Cow<'a, str>),
    /// Attributes (`-name`), child elements and `#text`, in document order of first
    /// appearance.
    Map(Vec<(Cow<'a, str>, Node<'a>)>),
    /// The values of a repeated child element, in document order.
    List(Vec<Node<'a>>),
}

impl<'a> Node<'a> {
    /// The value of `key` in a map.
    pub(crate) fn get(&self, key: &str) -> Option<&Node<'a>> {
        match self {
            Node::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of attribute `name` (key `-name`) in a map.
    pub(crate) fn attribute(&self, name: &str) -> Option<&Node<'a>> {
        match self {
            Node::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.strip_prefix('-') == Some(name))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a simple element.
    pub(crate) fn text(&self) -> Option<&str> {
        match self {
            Node::Text(text) => Some(text),
            _ => None,
        }
    }
}

/// Why a body is not XML this decoder takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum XmlError {
    /// Not UTF-8.
    #[error("the XML body is not UTF-8 (byte {0})")]
    NotUtf8(usize),
    /// Not well-formed, with quick-xml's reason and the byte offset.
    #[error("the XML body is not well-formed at byte {offset}: {reason}")]
    Malformed { offset: u64, reason: String },
    /// No root element.
    #[error("the XML body has no root element")]
    NoRoot,
    /// Nested beyond [`MAX_DEPTH`].
    #[error("the XML body nests elements deeper than {MAX_DEPTH}")]
    TooDeep,
}

/// An element being read.
pub(super) struct Open<'a> {
    name: Cow<'a, str>,
    entries: Vec<(Cow<'a, str>, Node<'a>)>,
    /// Position of each key in `entries`, once there are many (boxed: most elements have
    /// none, and every element is moved on and off the stack of open elements: 8 bytes to
    /// move instead of a map's 48, which is why clippy's `box_collection` is allowed here).
    #[allow(clippy::box_collection)]
    index: Option<Box<HashMap<Cow<'a, str>, usize>>>,
    text: Cow<'a, str>,
}

impl<'a> Open<'a> {
    /// An element named `name` with nothing in it yet.
    pub(super) fn named(name: Cow<'a, str>) -> Self {
        Open {
            name,
            entries: Vec::new(),
            index: None,
            text: Cow::Borrowed(""),
        }
    }

    fn new(start: &BytesStart<'a>, owned_name: Cow<'a, str>) -> Result<Self, String> {
        let mut open = Open::named(owned_name);
        for attr in start.attributes() {
            let attr = attr.map_err(|err| err.to_string())?;
            let local = local(attr.key.into_inner());
            let value = attr
                .normalized_value(XmlVersion::Implicit1_0)
                .map_err(|err| err.to_string())?
                .into_owned();
            open.insert(
                Cow::Owned(format!("-{local}")),
                Node::Text(Cow::Owned(value)),
            );
        }
        Ok(open)
    }

    /// Adds attribute `local` (a local name) with its value.
    pub(super) fn attribute(&mut self, local: &str, value: Cow<'a, str>) {
        self.insert(Cow::Owned(format!("-{local}")), Node::Text(value));
    }

    /// Appends a piece of the element's text.
    pub(super) fn push_text(&mut self, piece: Cow<'a, str>) {
        if self.text.is_empty() {
            self.text = piece;
            return;
        }
        if let Cow::Borrowed(first) = self.text {
            // Pieces come in runs (text between references): room for a few more.
            let mut joined = String::with_capacity(2 * (first.len() + piece.len()));
            joined.push_str(first);
            self.text = Cow::Owned(joined);
        }
        self.text.to_mut().push_str(&piece);
    }

    /// Adds a child value; a key seen before turns into (or extends) a list.
    pub(super) fn insert(&mut self, key: Cow<'a, str>, value: Node<'a>) {
        let last = self.entries.len().checked_sub(1);
        // A repeated element usually follows its previous sibling of the same name.
        let found = match (last, &self.index) {
            (Some(at), _) if same_key(self.entries[at].0.as_bytes(), key.as_bytes()) => Some(at),
            (_, Some(index)) => index.get(key.as_ref()).copied(),
            (_, None) => self
                .entries
                .iter()
                .position(|(k, _)| same_key(k.as_bytes(), key.as_bytes())),
        };
        match found {
            Some(at) => {
                let slot = &mut self.entries[at].1;
                match slot {
                    Node::List(items) => items.push(value),
                    other => {
                        let first = std::mem::replace(other, Node::List(Vec::new()));
                        *other = Node::List(vec![first, value]);
                    }
                }
            }
            None => {
                if let Some(index) = &mut self.index {
                    index.insert(key.clone(), self.entries.len());
                }
                if self.entries.capacity() == 0 {
                    // Most elements with children have a few: one allocation for them.
                    self.entries.reserve_exact(8);
                }
                self.entries.push((key, value));
                if self.index.is_none() && self.entries.len() >= INDEX_FROM {
                    self.index = Some(Box::new(
                        self.entries
                            .iter()
                            .enumerate()
                            .map(|(i, (k, _))| (k.clone(), i))
                            .collect(),
                    ));
                }
            }
        }
    }

    /// The element's value, by mxj's rules.
    pub(super) fn finish(mut self) -> (Cow<'a, str>, Node<'a>) {
        let text = trim_cow(self.text);
        if self.entries.is_empty() {
            return (self.name, Node::Text(text));
        }
        if !text.is_empty() {
            self.entries
                .push((Cow::Borrowed("#text"), Node::Text(text)));
        }
        (self.name, Node::Map(self.entries))
    }
}

/// mxj trims these from text (`"\t\r\b\n "`).
fn is_trimmed(c: char) -> bool {
    matches!(c, '\t' | '\r' | '\u{8}' | '\n' | ' ')
}

fn trim_cow(text: Cow<'_, str>) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let trimmed =
        |c: Option<&u8>| c.is_some_and(|&c| matches!(c, b'\t' | b'\r' | 8 | b'\n' | b' '));
    if !trimmed(bytes.first()) && !trimmed(bytes.last()) {
        return text;
    }
    match text {
        Cow::Borrowed(s) => Cow::Borrowed(s.trim_matches(is_trimmed)),
        Cow::Owned(s) => {
            let trimmed = s.trim_matches(is_trimmed);
            if trimmed.len() == s.len() {
                Cow::Owned(s)
            } else {
                Cow::Owned(trimmed.to_owned())
            }
        }
    }
}

/// The local part of a qualified name.
fn local(name: &str) -> &str {
    match name.rfind(':') {
        // `:` is one byte: the byte after it starts a character.
        Some(at) => name.get(at + 1..).unwrap_or(name),
        None => name,
    }
}

/// Decodes `text` (without a byte-order mark) with quick-xml.
pub(super) fn read(text: &str) -> Result<(Cow<'_, str>, Node<'_>), XmlError> {
    let mut reader = quick_xml::Reader::from_str(text);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.expand_empty_elements = false;
    let mut stack: Vec<Open<'_>> = Vec::new();
    let malformed = |reader: &quick_xml::Reader<&[u8]>, reason: String| XmlError::Malformed {
        offset: reader.error_position(),
        reason,
    };
    loop {
        let event = reader
            .read_event()
            .map_err(|err| malformed(&reader, err.to_string()))?;
        match event {
            Event::Start(start) => {
                if stack.len() >= MAX_DEPTH {
                    return Err(XmlError::TooDeep);
                }
                let name = element_name(text, &start);
                let open = Open::new(&start, name).map_err(|reason| malformed(&reader, reason))?;
                stack.push(open);
            }
            Event::Empty(start) => {
                let name = element_name(text, &start);
                let open = Open::new(&start, name).map_err(|reason| malformed(&reader, reason))?;
                let (name, node) = open.finish();
                match stack.last_mut() {
                    Some(parent) => parent.insert(name, node),
                    None => return Ok((name, node)),
                }
            }
            Event::End(_) => {
                let Some(open) = stack.pop() else {
                    return Err(malformed(&reader, "unmatched end tag".to_owned()));
                };
                let (name, node) = open.finish();
                match stack.last_mut() {
                    Some(parent) => parent.insert(name, node),
                    None => return Ok((name, node)),
                }
            }
            Event::Text(text) => {
                if let Some(open) = stack.last_mut() {
                    open.push_text(text.xml10_content());
                } else if !text.xml10_content().trim().is_empty() {
                    return Err(malformed(
                        &reader,
                        "text outside the root element".to_owned(),
                    ));
                }
            }
            Event::CData(data) => {
                if let Some(open) = stack.last_mut() {
                    open.push_text(data.xml10_content());
                }
            }
            Event::GeneralRef(reference) => {
                let Some(open) = stack.last_mut() else {
                    return Err(malformed(
                        &reader,
                        "a reference outside the root element".to_owned(),
                    ));
                };
                let resolved = match reference
                    .resolve_char_ref()
                    .map_err(|err| malformed(&reader, err.to_string()))?
                {
                    Some(c) => Cow::Owned(c.to_string()),
                    None => {
                        let name = reference.xml10_content();
                        match quick_xml::escape::resolve_predefined_entity(&name) {
                            Some(s) => Cow::Borrowed(s),
                            None => {
                                return Err(malformed(
                                    &reader,
                                    format!("undeclared entity '&{name};'"),
                                ));
                            }
                        }
                    }
                };
                open.push_text(resolved);
            }
            Event::Eof => {
                return Err(if stack.is_empty() {
                    XmlError::NoRoot
                } else {
                    malformed(
                        &reader,
                        format!("element <{}> is not closed", stack[stack.len() - 1].name),
                    )
                });
            }
            Event::Comment(_) | Event::Decl(_) | Event::PI(_) | Event::DocType(_) => {}
        }
    }
}

/// An element's local name, borrowed from the body where it can be.
fn element_name<'a>(body: &'a str, start: &BytesStart<'_>) -> Cow<'a, str> {
    // `BytesStart::name` borrows from the event, not from the body, though a reader over a
    // `&str` hands out events whose content is the body's: the same bytes are found in the
    // body by their address (names would otherwise be copied once per element).
    let name = local(start.name().into_inner());
    borrowed_from(body, name).map_or_else(|| Cow::Owned(name.to_owned()), Cow::Borrowed)
}

/// `part` as a slice of `body`, when it is one (the same memory, not equal text elsewhere).
fn borrowed_from<'a>(body: &'a str, part: &str) -> Option<&'a str> {
    let at = (part.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
    let slice = body.get(at..at.checked_add(part.len())?)?;
    std::ptr::eq(slice.as_ptr(), part.as_ptr()).then_some(slice)
}
