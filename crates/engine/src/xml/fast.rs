//! A scanner for the plain XML APIs answer with (elements, attributes, text with XML's five
//! entities, an XML declaration), building the tree that `tree.rs` builds from quick-xml's
//! events, with the same [`Open`] rules.
//!
//! It takes a strict subset of XML and gives `None` for anything else: comments, CDATA,
//! processing instructions, a DOCTYPE, character references, carriage returns, attribute values
//! holding references, whitespace to normalize or `<`, names with other than ASCII letters,
//! digits and `_-.:`, duplicate attributes, nesting beyond [`MAX_DEPTH`], and every body that
//! is not well formed. The caller then reads the body with quick-xml, which decides and
//! reports errors, so what this scanner accepts is always what quick-xml would have given.
//!
//! Hand-written rather than a second crate because quick-xml's event reader alone costs more
//! instructions per S3 object than the whole plain-JSON path spends per row (issue 26's
//! bench, point f): this scanner finds each `<` in one pass over the text before it (a byte
//! loop over short text, `memchr` over longer), borrows every name and text from the body
//! and checks nothing twice.

use std::borrow::Cow;

use super::tree::{MAX_DEPTH, Node, Open};
use crate::rows::same_key;

/// Attributes of one element this scanner takes; an element with more is left to quick-xml.
const MAX_ATTRIBUTES: usize = 8;

/// The root element's name and value, or `None` when `text` is not in the subset.
pub(super) fn parse(text: &str) -> Option<(Cow<'_, str>, Node<'_>)> {
    let bytes = text.as_bytes();
    let mut at = declaration_end(text)?;
    // Each open element with its qualified name (the end tag must repeat it).
    let mut stack: Vec<(&str, Open<'_>)> = Vec::new();
    loop {
        // The text up to the next tag, noting what needs a closer look.
        let (lt, special) = next_tag(bytes, at)?;
        if lt > at {
            let piece = text.get(at..lt)?;
            match stack.last_mut() {
                Some((_, open)) if !special => open.push_text(Cow::Borrowed(piece)),
                Some((_, open)) => push_text(open, piece)?,
                None if piece.bytes().all(is_space) => {}
                None => return None,
            }
        }
        at = lt + 1;
        if *bytes.get(at)? == b'/' {
            // The end tag repeats the open element's name, then `>` after any spaces (a
            // longer name has a name character there).
            let start = at + 1;
            let (qname, open) = stack.pop()?;
            let end = start + qname.len();
            if !same_key(bytes.get(start..end)?, qname.as_bytes()) {
                return None;
            }
            let mut close = end;
            while bytes.get(close).copied().is_some_and(is_space) {
                close += 1;
            }
            if bytes.get(close) != Some(&b'>') {
                return None;
            }
            at = close + 1;
            let (key, node) = open.finish();
            match stack.last_mut() {
                Some((_, parent)) => parent.insert(key, node),
                None => return Some((key, node)),
            }
            continue;
        }
        let (end, local) = name_end(bytes, at)?;
        let qname = text.get(at..end)?;
        let mut open = Open::named(Cow::Borrowed(text.get(local..end)?));
        let mut seen: [&str; MAX_ATTRIBUTES] = [""; MAX_ATTRIBUTES];
        let mut attributes = 0;
        let mut i = end;
        loop {
            let spaced = i;
            while bytes.get(i).copied().is_some_and(is_space) {
                i += 1;
            }
            match *bytes.get(i)? {
                b'>' => {
                    if stack.len() >= MAX_DEPTH {
                        return None;
                    }
                    stack.push((qname, open));
                    at = i + 1;
                    break;
                }
                b'/' => {
                    if bytes.get(i + 1) != Some(&b'>') {
                        return None;
                    }
                    let (key, node) = open.finish();
                    match stack.last_mut() {
                        Some((_, parent)) => parent.insert(key, node),
                        None => return Some((key, node)),
                    }
                    at = i + 2;
                    break;
                }
                _ if i == spaced || attributes == MAX_ATTRIBUTES => return None,
                _ => {
                    let (name_end, local) = name_end(bytes, i)?;
                    let name = text.get(i..name_end)?;
                    if bytes.get(name_end) != Some(&b'=') || seen[..attributes].contains(&name) {
                        return None;
                    }
                    seen[attributes] = name;
                    attributes += 1;
                    let quote = *bytes.get(name_end + 1)?;
                    if quote != b'"' && quote != b'\'' {
                        return None;
                    }
                    let start = name_end + 2;
                    let close = start + text.get(start..)?.find(char::from(quote))?;
                    let value = text.get(start..close)?;
                    if value
                        .bytes()
                        .any(|c| matches!(c, b'<' | b'&' | b'\t' | b'\n' | b'\r'))
                    {
                        return None;
                    }
                    open.attribute(text.get(local..name_end)?, Cow::Borrowed(value));
                    i = close + 1;
                }
            }
        }
    }
}

/// Text this long or shorter is scanned byte by byte: most text between the tags of an API
/// answer is short, and a vectorised search costs more to set up than it saves there.
const SHORT_TEXT: usize = 24;

/// What a byte of text is to [`next_tag`]: most are [`PLAIN`].
const PLAIN: u8 = 0;
const TAG: u8 = 1;
const SPECIAL: u8 = 2;
const TEXT_BYTE: [u8; 256] = {
    let mut table = [PLAIN; 256];
    table[b'<' as usize] = TAG;
    table[b'&' as usize] = SPECIAL;
    table[b'\r' as usize] = SPECIAL;
    table[b']' as usize] = SPECIAL;
    table
};

/// The next `<` at or after `at`, and whether the text before it holds `&`, `]` or a
/// carriage return (what [`push_text`] looks at); `None` when there is no `<`.
fn next_tag(bytes: &[u8], at: usize) -> Option<(usize, bool)> {
    let rest = bytes.get(at..)?;
    let mut special = false;
    for (i, &c) in rest.iter().take(SHORT_TEXT).enumerate() {
        match TEXT_BYTE[usize::from(c)] {
            PLAIN => {}
            TAG => return Some((at + i, special)),
            _ => special = true,
        }
    }
    let longer = rest.get(SHORT_TEXT..)?;
    let lt = SHORT_TEXT + memchr::memchr(b'<', longer)?;
    let special =
        special || memchr::memchr3(b'&', b'\r', b']', rest.get(SHORT_TEXT..lt)?).is_some();
    Some((at + lt, special))
}

/// Where the markup starts: after an XML declaration `<?xml …?>` at the very start (its
/// pseudo-attributes of plain characters only), else 0.
fn declaration_end(text: &str) -> Option<usize> {
    let Some(rest) = text.strip_prefix("<?xml ") else {
        return Some(0);
    };
    let close = rest.find("?>")?;
    let inside = rest.get(..close)?;
    inside
        .bytes()
        .all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(c, b' ' | b'=' | b'"' | b'\'' | b'.' | b'-' | b'_')
        })
        .then_some("<?xml ".len() + close + 2)
}

/// Appends a text piece holding `&`, `]` or a carriage return: XML's five entities are
/// resolved; any other reference, a carriage return (line ends to normalize) or `]]>` gives
/// `None`.
fn push_text<'a>(open: &mut Open<'a>, piece: &'a str) -> Option<()> {
    let bytes = piece.as_bytes();
    if bytes.contains(&b'\r') || (bytes.contains(&b']') && piece.contains("]]>")) {
        return None;
    }
    let mut rest = piece;
    while let Some(amp) = rest.bytes().position(|c| c == b'&') {
        if amp > 0 {
            open.push_text(Cow::Borrowed(rest.get(..amp)?));
        }
        let after = rest.get(amp + 1..)?;
        let semi = after.bytes().position(|c| c == b';')?;
        let resolved = match after.get(..semi)? {
            "lt" => "<",
            "gt" => ">",
            "amp" => "&",
            "apos" => "'",
            "quot" => "\"",
            _ => return None,
        };
        open.push_text(Cow::Borrowed(resolved));
        rest = after.get(semi + 1..)?;
    }
    if !rest.is_empty() {
        open.push_text(Cow::Borrowed(rest));
    }
    Some(())
}

/// The end of the name starting at `at` (a letter or `_`, then letters, digits and `_-.:`)
/// and where its local part starts (after its last `:`); `None` when no name starts there.
fn name_end(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    let first = *bytes.get(at)?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let mut end = at + 1;
    let mut local = at;
    while let Some(&c) = bytes.get(end) {
        if c == b':' {
            local = end + 1;
        } else if !(c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')) {
            break;
        }
        end += 1;
    }
    Some((end, local))
}

/// XML whitespace this scanner takes (a carriage return is left to quick-xml).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n')
}
