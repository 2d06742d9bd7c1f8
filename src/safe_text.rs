//! Text from upstreams, documents and clients made safe to show: characters a terminal or a
//! chat client would act on rather than show are written as visible escapes.
//!
//! What is escaped: C0 controls except tab and line feed (ESC starts ANSI and OSC
//! sequences, BEL, NUL, carriage return, …), DEL, C1 controls (U+0080–U+009F, among them
//! the one-byte CSI), the bidirectional embeddings, overrides and isolates (U+202A–U+202E,
//! U+2066–U+2069) and marks (U+200E, U+200F, U+061C), and the line and paragraph separators
//! (U+2028, U+2029).
//!
//! [`escape_display`] writes each as `\u{hex}` (Rust's notation: `\u{1b}`, `\u{202e}`) and a
//! backslash that would start such an escape as `\u{5c}`, so a reader can tell an escape from
//! text: every `\u{…}` in the output is an escape, and replacing each by its character gives
//! the input back. [`escape_json_text`] does the same for serialized JSON with JSON's own
//! `\uXXXX`, so the text stays valid JSON and parses to the same value.
//!
//! Both scan bytes against a table and copy nothing when there is nothing to escape (the
//! common case: a 10,000-row result is scanned once and returned as it is).

/// Bytes that may start something to escape: for [`escape_display`], the C0 controls but tab
/// and line feed, DEL and `\`; for both, the lead bytes of the escaped non-ASCII characters
/// (`0xC2` of U+0080–U+009F, `0xD8` of U+061C, `0xE2` of U+200E–U+2069).
const DISPLAY: [bool; 256] = flags(true, true);
/// [`DISPLAY`] with tab and line feed, for [`escape_inline`].
const INLINE: [bool; 256] = inline_flags();
/// [`DISPLAY`] without `\`, for [`escape_controls`].
const CONTROLS: [bool; 256] = flags(true, false);
/// [`DISPLAY`] without the C0 controls and `\` (which JSON serialization already escaped).
const JSON: [bool; 256] = flags(false, false);

const fn flags(c0: bool, backslash: bool) -> [bool; 256] {
    let mut table = [false; 256];
    if c0 {
        let mut byte = 0;
        while byte < 0x20 {
            table[byte] = byte != b'\t' as usize && byte != b'\n' as usize;
            byte += 1;
        }
    }
    table[b'\\' as usize] = backslash;
    table[0x7f] = true;
    table[0xc2] = true;
    table[0xd8] = true;
    table[0xe2] = true;
    table
}

const fn inline_flags() -> [bool; 256] {
    let mut table = flags(true, true);
    table[b'\t' as usize] = true;
    table[b'\n' as usize] = true;
    table
}

/// Whether `c` is escaped by both functions (C0 controls aside).
fn is_unsafe(c: char) -> bool {
    matches!(c,
        '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}' | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// `text` with every character a terminal or client would act on written as `\u{hex}`
/// (see the module docs); `text` itself, uncopied, when it has none.
pub fn escape_display(text: String) -> String {
    match first_escaped(&text, &DISPLAY, needs_display_escape) {
        None => text,
        Some(first) => escape_from(&text, first, needs_display_escape, push_display_escape),
    }
}

/// [`escape_display`] of a borrowed text.
pub fn escape_display_str(text: &str) -> std::borrow::Cow<'_, str> {
    match first_escaped(text, &DISPLAY, needs_display_escape) {
        None => std::borrow::Cow::Borrowed(text),
        Some(first) => std::borrow::Cow::Owned(escape_from(
            text,
            first,
            needs_display_escape,
            push_display_escape,
        )),
    }
}

/// [`escape_display_str`] that also escapes tab and line feed: the text stays on one line,
/// so it cannot pose as further lines of what is around it (e.g. the trusted fields of an
/// approval prompt). `text` itself, uncopied, when it has nothing to escape.
pub fn escape_inline(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char, at: &str| matches!(c, '\t' | '\n') || needs_display_escape(c, at);
    match first_escaped(text, &INLINE, needs) {
        None => std::borrow::Cow::Borrowed(text),
        Some(first) => {
            std::borrow::Cow::Owned(escape_from(text, first, needs, push_display_escape))
        }
    }
}

/// [`escape_display`] for text that is already in that notation, such as the engine's error
/// messages (which write an upstream body's controls as `\u{1b}`): the characters are
/// escaped, backslashes are left as they are (they would be escaped twice otherwise).
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let needs = |c: char, _: &str| c != '\\' && needs_display_escape(c, "");
    match first_escaped(text, &CONTROLS, needs) {
        None => std::borrow::Cow::Borrowed(text),
        Some(first) => {
            std::borrow::Cow::Owned(escape_from(text, first, needs, push_display_escape))
        }
    }
}

/// Serialized JSON with the characters of the module docs that JSON leaves raw (DEL, C1,
/// bidirectional controls, the separators) written as `\uXXXX`: still valid JSON, parsing to
/// the same value. `json` itself, uncopied, when it has none.
pub fn escape_json_text(json: String) -> String {
    let needs = |c: char, _: &str| is_unsafe(c);
    match first_escaped(&json, &JSON, needs) {
        None => json,
        Some(first) => escape_from(&json, first, needs, push_json_escape),
    }
}

/// The byte offset of the first character of `text` that `needs` an escape, checking only
/// where `flagged` bytes start one (flagged bytes are ASCII or lead bytes: char boundaries).
fn first_escaped(
    text: &str,
    flagged: &[bool; 256],
    needs: impl Fn(char, &str) -> bool,
) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = bytes[from..].iter().position(|&b| flagged[usize::from(b)]) {
        let at = from + offset;
        let rest = text.get(at..)?;
        if rest.chars().next().is_some_and(|c| needs(c, rest)) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Copies `text`, escaping from byte `first` on (a char boundary) every character that
/// `needs` it with `push`.
fn escape_from(
    text: &str,
    first: usize,
    needs: impl Fn(char, &str) -> bool,
    push: fn(&mut String, char),
) -> String {
    let (clean, rest) = text.split_at(first);
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(clean);
    for (index, c) in rest.char_indices() {
        if needs(c, &rest[index..]) {
            push(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `c`, starting `at`, is escaped for display.
fn needs_display_escape(c: char, at: &str) -> bool {
    match c {
        '\t' | '\n' => false,
        '\\' => at.as_bytes().get(1..3) == Some(&b"u{"[..]),
        c if c.is_ascii_control() => true,
        c => is_unsafe(c),
    }
}

fn push_display_escape(out: &mut String, c: char) {
    use std::fmt::Write as _;
    // Writing into a String cannot fail.
    let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
}

fn push_json_escape(out: &mut String, c: char) {
    use std::fmt::Write as _;
    // Every escaped character is in the Basic Multilingual Plane: four hex digits.
    let _ = write!(out, "\\u{:04x}", u32::from(c));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replaces each `\u{hex}` by its character: what a reader does to get the text back.
    fn unescape(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("\\u{") {
            out.push_str(&rest[..at]);
            let after = &rest[at + 3..];
            let end = after.find('}').unwrap();
            let code = u32::from_str_radix(&after[..end], 16).unwrap();
            out.push(char::from_u32(code).unwrap());
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn controls_and_bidi_become_visible_escapes_that_read_back() {
        let hostile = "a\u{1b}]0;title\u{7}b\u{1b}[31mred\0\r\u{9b}c\u{202e}evil\u{2066}x\u{2069}\u{200f}\u{61c}\u{2028}\u{7f}";
        let shown = escape_display(hostile.to_owned());
        assert_eq!(
            shown,
            "a\\u{1b}]0;title\\u{7}b\\u{1b}[31mred\\u{0}\\u{d}\\u{9b}c\\u{202e}evil\\u{2066}x\\u{2069}\\u{200f}\\u{61c}\\u{2028}\\u{7f}"
        );
        assert!(!shown.chars().any(|c| c.is_control() || is_unsafe(c)));
        assert_eq!(unescape(&shown), hostile);
        // Text that already reads like an escape stays distinguishable.
        let literal = r"C:\dir \u{1b} \n \\u{";
        let shown = escape_display(literal.to_owned());
        assert_eq!(shown, r"C:\dir \u{5c}u{1b} \n \\u{5c}u{");
        assert_eq!(unescape(&shown), literal);
    }

    #[test]
    fn inline_text_stays_on_one_line_and_reads_back() {
        let hostile = "DELETE x\n\nTenant: prod\t\u{202e}\r\\u{a}";
        let shown = escape_inline(hostile);
        assert_eq!(
            shown,
            "DELETE x\\u{a}\\u{a}Tenant: prod\\u{9}\\u{202e}\\u{d}\\u{5c}u{a}"
        );
        assert!(!shown.chars().any(|c| c.is_control() || is_unsafe(c)));
        assert_eq!(unescape(&shown), hostile);
        assert!(matches!(
            escape_inline("plain é"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn escaped_messages_are_not_escaped_twice() {
        let message = "returned 403: {\"m\":\"\\u{1b}[2J\"} \u{1b}]0;x\u{7}\u{202e}";
        assert_eq!(
            escape_controls(message),
            "returned 403: {\"m\":\"\\u{1b}[2J\"} \\u{1b}]0;x\\u{7}\\u{202e}"
        );
        assert!(matches!(
            escape_controls(r"C:\u{1b} plain"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn ordinary_text_is_returned_without_a_copy() {
        let text = "| tab\there | line\nbreak | é — → 日本 😀 \u{200d} |".to_owned();
        let pointer = text.as_ptr();
        let shown = escape_display(text);
        assert_eq!(shown.as_ptr(), pointer);
        assert!(matches!(
            escape_display_str("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        let json = r#"{"a":"\u001b é — \\u{1b}"}"#.to_owned();
        let pointer = json.as_ptr();
        let escaped = escape_json_text(json);
        assert_eq!(escaped.as_ptr(), pointer);
    }

    #[test]
    fn json_text_stays_json_of_the_same_value() {
        let value = serde_json::json!({"v": "\u{1b}[2J\u{7}\u{85}\u{202e}gnp.exe\u{2029}\u{7f}\\u{", "k\u{202d}": 1});
        let text = serde_json::to_string(&value).unwrap();
        let safe = escape_json_text(text);
        assert!(
            !safe.chars().any(|c| c.is_control() || is_unsafe(c)),
            "{safe}"
        );
        assert!(
            safe.contains(r"\u202e") && safe.contains(r"\u0085"),
            "{safe}"
        );
        let parsed: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(parsed, value);
    }
}
