//! A strict JSON scanner over a response body: the row walk reads keys and the raw text of
//! the values it binds, and skips everything else without building values.
//!
//! The grammar is RFC 8259's, checked as strictly as `serde_json` checks it: no trailing
//! commas, no leading zeros, no bare control characters in strings, escapes from the JSON
//! set only; and at most [`MAX_DEPTH`] nested arrays and objects. A body that is valid UTF-8
//! throughout is checked once up front; otherwise UTF-8 is checked only in the keys and
//! values handed out, as `serde_json` does over bytes. Strings are skipped eight bytes at a
//! time.

use std::borrow::Cow;

/// Most arrays and objects open at once. Deeper bodies are refused: the scanner skips
/// nested values by recursion, and this bounds its stack (a few hundred bytes a level).
const MAX_DEPTH: usize = 512;

/// Where and why a body stopped being JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SyntaxError {
    /// Byte offset of the problem.
    pub(super) at: usize,
    /// What was wrong there.
    pub(super) what: &'static str,
}

/// The result of a scanner step.
pub(super) type Scan<T> = Result<T, SyntaxError>;

/// An object key as it appears in the body.
#[derive(Debug, Clone, Copy)]
pub(super) struct Key<'a> {
    /// The key with its quotes.
    quoted: &'a str,
    /// Whether it holds an escape (its text differs from its bytes).
    escaped: bool,
}

impl<'a> Key<'a> {
    /// The key's bytes between the quotes, escapes as written.
    pub(super) fn raw(&self) -> &'a str {
        self.quoted
            .get(1..self.quoted.len().saturating_sub(1))
            .unwrap_or_default()
    }

    /// Whether the key holds an escape.
    pub(super) fn is_escaped(&self) -> bool {
        self.escaped
    }

    /// The key's text, escapes decoded.
    pub(super) fn text(&self) -> serde_json::Result<Cow<'a, str>> {
        if self.escaped {
            serde_json::from_str::<String>(self.quoted).map(Cow::Owned)
        } else {
            Ok(Cow::Borrowed(self.raw()))
        }
    }
}

/// A plain key as a body writes it before its value: `"key":`, quotes and colon included
/// (see [`Scanner::key_is`]).
#[derive(Debug)]
pub(super) struct KeyPattern(Vec<u8>);

impl KeyPattern {
    /// The pattern of `key`, unless it holds an escape: the text of an escaped key differs
    /// from its bytes, so no pattern of it can be compared with the body.
    pub(super) fn of(key: &Key<'_>) -> Option<KeyPattern> {
        if key.is_escaped() {
            return None;
        }
        let raw = key.raw().as_bytes();
        let mut pattern = Vec::with_capacity(raw.len() + 3);
        pattern.push(b'"');
        pattern.extend_from_slice(raw);
        pattern.extend_from_slice(b"\":");
        Some(KeyPattern(pattern))
    }
}

/// A cursor over a JSON body.
#[derive(Debug)]
pub(super) struct Scanner<'a> {
    bytes: &'a [u8],
    /// The body as text, when it is valid UTF-8 throughout.
    text: Option<&'a str>,
    at: usize,
    depth: usize,
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of every byte of `word` that is zero.
#[inline]
fn zero_bytes(word: u64) -> u64 {
    word.wrapping_sub(ONES) & !word & HIGH
}

/// How many of the bytes of `word`, from its lowest, are ASCII digits before the first
/// that is not.
#[inline]
fn leading_digits(word: u64) -> usize {
    // A digit is 0x30..=0x39: its high nibble is 3, and adding 6 leaves it 3. A carry out of
    // a byte at or above 0xfa changes only the bytes above it, which come after a non-digit.
    const NIBBLE: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    const THREES: u64 = 0x3030_3030_3030_3030;
    let off = ((word & NIBBLE) ^ THREES) | ((word.wrapping_add(ONES * 6) & NIBBLE) ^ THREES);
    // The high bit of every byte of `off` that is not zero.
    let nonzero = (off | ((off & !HIGH).wrapping_add(!HIGH))) & HIGH;
    (nonzero.trailing_zeros() / 8) as usize
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `body`.
    pub(super) fn new(body: &'a [u8]) -> Self {
        Scanner {
            bytes: body,
            text: std::str::from_utf8(body).ok(),
            at: 0,
            depth: 0,
        }
    }

    /// The eight bytes from the scanner on, as a little-endian word, when there are eight.
    #[inline]
    fn word(&self) -> Option<u64> {
        let chunk = self.bytes.get(self.at..self.at + 8)?;
        <[u8; 8]>::try_from(chunk).ok().map(u64::from_le_bytes)
    }

    fn fail<T>(&self, what: &'static str) -> Scan<T> {
        Err(SyntaxError { at: self.at, what })
    }

    /// Skips whitespace.
    #[inline]
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    pub(super) fn peek(&mut self) -> Scan<u8> {
        self.skip_space();
        match self.bytes.get(self.at) {
            Some(&byte) => Ok(byte),
            None => self.fail("EOF while parsing a value"),
        }
    }

    /// Consumes `byte` after whitespace, or fails with `what`.
    #[inline]
    fn expect(&mut self, byte: u8, what: &'static str) -> Scan<()> {
        self.skip_space();
        if self.bytes.get(self.at) == Some(&byte) {
            self.at += 1;
            Ok(())
        } else {
            self.fail(what)
        }
    }

    /// The text of `start..end` of the body.
    fn slice(&self, start: usize, end: usize) -> Scan<&'a str> {
        let found = match self.text {
            Some(text) => text.get(start..end),
            None => self
                .bytes
                .get(start..end)
                .and_then(|bytes| std::str::from_utf8(bytes).ok()),
        };
        match found {
            Some(text) => Ok(text),
            None => Err(SyntaxError {
                at: start,
                what: "invalid unicode code point",
            }),
        }
    }

    /// Checks that only whitespace is left.
    pub(super) fn end(&mut self) -> Scan<()> {
        self.skip_space();
        if self.at < self.bytes.len() {
            return self.fail("trailing characters");
        }
        Ok(())
    }

    /// Consumes the `{` that [`Scanner::peek`] saw; whether the object has a property (for
    /// `{}` its `}` is consumed too). The first key is read next.
    pub(super) fn open_object(&mut self) -> Scan<bool> {
        self.open(b'}')
    }

    /// After a property's value: whether another property follows (its `,` consumed; its
    /// key is read next), or false at the `}` that closes the object (consumed).
    pub(super) fn next_property(&mut self) -> Scan<bool> {
        self.next_member(b'}', "expected `,` or `}`")
    }

    /// Enters the array or object whose opening byte is next (after [`Scanner::peek`]);
    /// whether it holds anything before `close` (which is consumed when it does not).
    fn open(&mut self, close: u8) -> Scan<bool> {
        if self.depth >= MAX_DEPTH {
            return self.fail("recursion limit exceeded");
        }
        self.depth += 1;
        self.at += 1;
        if self.peek()? == close {
            self.close();
            return Ok(false);
        }
        Ok(true)
    }

    /// After a member of an array or object: whether another follows (its `,` consumed),
    /// or false at `close` (consumed); anything else is `what` went wrong.
    fn next_member(&mut self, close: u8, what: &'static str) -> Scan<bool> {
        match self.peek()? {
            b',' => {
                self.at += 1;
                Ok(true)
            }
            byte if byte == close => {
                self.close();
                Ok(false)
            }
            _ => self.fail(what),
        }
    }

    fn close(&mut self) {
        self.at += 1;
        self.depth = self.depth.saturating_sub(1);
    }

    /// Reads a property's key through its `:`.
    pub(super) fn key(&mut self) -> Scan<Key<'a>> {
        self.skip_space();
        let start = self.at;
        let escaped = self.quoted_key()?;
        let quoted = self.slice(start, self.at)?;
        self.expect(b':', "expected `:`")?;
        Ok(Key { quoted, escaped })
    }

    /// Passes over a property's key through its `:`. Its bytes are not checked as UTF-8,
    /// as `serde_json` does not check a key it ignores.
    fn skip_key(&mut self) -> Scan<()> {
        self.skip_space();
        self.quoted_key()?;
        self.expect(b':', "expected `:`")
    }

    /// Consumes the quoted key at the scanner; whether it held an escape.
    #[inline]
    fn quoted_key(&mut self) -> Scan<bool> {
        match self.bytes.get(self.at) {
            Some(b'"') => self.at += 1,
            Some(_) => return self.fail("key must be a string"),
            None => return self.fail("EOF while parsing an object"),
        }
        self.string_rest()
    }

    /// Reads a property's key through its `:` when the body holds `pattern` there (after
    /// whitespace); whether it did. Otherwise nothing is consumed but whitespace. Rows of
    /// one response list the same keys in the same order, so this compares a few bytes where
    /// [`Scanner::key`] would scan them. A key written with whitespace before its `:` never
    /// matches, and is read by [`Scanner::key`] instead.
    #[inline]
    pub(super) fn key_is(&mut self, pattern: &KeyPattern) -> bool {
        self.skip_space();
        let end = self.at + pattern.0.len();
        if self
            .bytes
            .get(self.at..end)
            .is_some_and(|written| same_key(written, &pattern.0))
        {
            self.at = end;
            return true;
        }
        false
    }

    /// Runs `visit` at each element of the array, or at each property's value (its key read
    /// and passed over) of the object, that is next, through its closing bracket.
    pub(super) fn each_value<E: From<SyntaxError>>(
        &mut self,
        mut visit: impl FnMut(&mut Self) -> Result<(), E>,
    ) -> Result<(), E> {
        let (object, close, what) = match self.peek()? {
            b'{' => (true, b'}', "expected `,` or `}`"),
            b'[' => (false, b']', "expected `,` or `]`"),
            _ => return self.fail("expected `[` or `{`").map_err(E::from),
        };
        let mut more = self.open(close)?;
        while more {
            if object {
                self.skip_key()?;
            }
            visit(self)?;
            more = self.next_member(close, what)?;
        }
        Ok(())
    }

    /// Consumes the `[` that [`Scanner::peek`] saw; whether the array has an element.
    pub(super) fn open_array(&mut self) -> Scan<bool> {
        self.open(b']')
    }

    /// After an element: whether another follows (its `,` consumed), or false at the `]`
    /// that closes the array (consumed).
    pub(super) fn next_element(&mut self) -> Scan<bool> {
        self.next_member(b']', "expected `,` or `]`")
    }

    /// The raw text of the next value (a string with its quotes), which is consumed.
    pub(super) fn raw_value(&mut self) -> Scan<&'a str> {
        self.skip_space();
        let start = self.at;
        self.value_here()?;
        self.slice(start, self.at)
    }

    /// Consumes the next value.
    #[inline]
    pub(super) fn skip_value(&mut self) -> Scan<()> {
        self.skip_space();
        self.value_here()
    }

    /// Consumes the value that starts at the scanner.
    fn value_here(&mut self) -> Scan<()> {
        let Some(&first) = self.bytes.get(self.at) else {
            return self.fail("EOF while parsing a value");
        };
        match first {
            b'"' => {
                self.at += 1;
                self.string_rest().map(drop)
            }
            b'{' | b'[' => self.each_value(Self::skip_value),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.fail("expected value"),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Scan<()> {
        if self.bytes.get(self.at..self.at + word.len()) == Some(word) {
            self.at += word.len();
            Ok(())
        } else {
            self.fail("expected value")
        }
    }

    /// Consumes ASCII digits, eight at a time; how many.
    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(word) = self.word() {
            let leading = leading_digits(word);
            self.at += leading;
            if leading < 8 {
                return self.at - start;
            }
        }
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        self.at - start
    }

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`
    fn number(&mut self) -> Scan<()> {
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at) {
            Some(b'0') => {
                self.at += 1;
                if self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
                    return self.fail("invalid number");
                }
            }
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return self.fail("invalid number"),
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return self.fail("invalid number");
            }
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return self.fail("invalid number");
            }
        }
        Ok(())
    }

    /// Consumes a string after its opening quote, through the closing one; whether it held
    /// an escape. A string of plain bytes is read here; one with an escape or a byte that
    /// stops the word-wise skip is read by [`Scanner::string_tail`].
    #[inline(always)]
    fn string_rest(&mut self) -> Scan<bool> {
        self.skip_plain();
        if self.bytes.get(self.at) == Some(&b'"') {
            self.at += 1;
            return Ok(false);
        }
        self.string_tail()
    }

    /// [`Scanner::string_rest`] from a byte that is not its closing quote.
    #[inline(never)]
    fn string_tail(&mut self) -> Scan<bool> {
        let mut escaped = false;
        loop {
            self.skip_plain();
            match self.bytes.get(self.at) {
                Some(b'"') => {
                    self.at += 1;
                    return Ok(escaped);
                }
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                Some(0..0x20) => {
                    return self
                        .fail("control character (\\u0000-\\u001F) found while parsing a string");
                }
                Some(_) => self.at += 1,
                None => return self.fail("EOF while parsing a string"),
            }
        }
    }

    /// Skips string bytes that need no look: not `"`, `\` or a control character, eight at
    /// a time.
    #[inline]
    fn skip_plain(&mut self) {
        while let Some(word) = self.word() {
            let quote = zero_bytes(word ^ (ONES * u64::from(b'"')));
            let backslash = zero_bytes(word ^ (ONES * u64::from(b'\\')));
            let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
            let stops = quote | backslash | control;
            if stops != 0 {
                self.at += (stops.trailing_zeros() / 8) as usize;
                return;
            }
            self.at += 8;
        }
    }

    /// Consumes the escape at the scanner (its `\`).
    fn escape(&mut self) -> Scan<()> {
        self.at += 1;
        match self.bytes.get(self.at) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.at += 1;
                Ok(())
            }
            Some(b'u') => {
                self.at += 1;
                match self.bytes.get(self.at..self.at + 4) {
                    Some(hex) if hex.iter().all(u8::is_ascii_hexdigit) => {
                        self.at += 4;
                        Ok(())
                    }
                    Some(_) => self.fail("invalid escape"),
                    None => self.fail("EOF while parsing a string"),
                }
            }
            Some(_) => self.fail("invalid escape"),
            None => self.fail("EOF while parsing a string"),
        }
    }
}

/// Whether two keys are the same bytes. Row keys (and XML element names) are short: up to
/// 16 bytes they are compared as two (overlapping) words each, without a call to `memcmp`.
#[inline]
pub(crate) fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0..4 => a == b,
        4..8 => word::<4>(a, 0) == word::<4>(b, 0) && word::<4>(a, n - 4) == word::<4>(b, n - 4),
        8..=16 => word::<8>(a, 0) == word::<8>(b, 0) && word::<8>(a, n - 8) == word::<8>(b, n - 8),
        _ => a == b,
    }
}

/// The `N` bytes of `bytes` from `at` (zeros past its end, which [`same_key`] never reads).
#[inline]
fn word<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    bytes
        .get(at..at + N)
        .and_then(|w| <[u8; N]>::try_from(w).ok())
        .unwrap_or([0; N])
}

/// `error` as a `serde_json` error: `serde_json`'s own account of the body when it finds the
/// body malformed too (line and column included), else `error`'s reason and offset.
pub(super) fn json_error(body: &[u8], error: SyntaxError) -> serde_json::Error {
    use serde::de::Error as _;
    match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
        Err(found) => found,
        Ok(_) => serde_json::Error::custom(format!("{} at byte {}", error.what, error.at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skim(body: impl AsRef<[u8]>) -> Scan<()> {
        let mut scan = Scanner::new(body.as_ref());
        scan.skip_value()?;
        scan.end()
    }

    /// Whether the scanner, and then serde_json, accept `body` as one JSON value.
    fn verdicts(body: impl AsRef<[u8]>) -> (bool, bool) {
        let theirs = serde_json::from_slice::<serde::de::IgnoredAny>(body.as_ref()).is_ok();
        (skim(body).is_ok(), theirs)
    }

    /// JSON texts: any value serde_json writes, with whitespace between tokens.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            ".{0,12}".prop_map(serde_json::Value::String),
        ];
        let value = leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        (value, any::<bool>()).prop_map(|(v, pretty)| {
            if pretty {
                serde_json::to_string_pretty(&v).unwrap_or_default()
            } else {
                serde_json::to_string(&v).unwrap_or_default()
            }
        })
    }

    proptest::proptest! {
        /// A text serde_json wrote is accepted, and its raw value is the text itself.
        #[test]
        fn the_scanner_accepts_what_serde_json_writes(text in json_text()) {
            let mut scan = Scanner::new(text.as_bytes());
            let raw = scan.raw_value();
            proptest::prop_assert_eq!(raw, Ok(text.as_str()));
            proptest::prop_assert_eq!(scan.end(), Ok(()));
        }

        /// With one byte changed, inserted or removed, the scanner and serde_json agree on
        /// whether the body is one JSON value.
        #[test]
        fn the_scanner_agrees_with_serde_json_on_damaged_bodies(
            text in json_text(),
            at in 0..4096_usize,
            byte in proptest::prelude::any::<u8>(),
            how in 0..3_u8,
        ) {
            let mut body = text.into_bytes();
            let at = at % (body.len() + 1);
            match how {
                0 if at < body.len() => body[at] = byte,
                1 => body.insert(at, byte),
                _ if at < body.len() => {
                    body.remove(at);
                }
                _ => body.push(byte),
            }
            let (ours, theirs) = verdicts(&body);
            proptest::prop_assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&body));
        }

        /// Any bytes at all: the same verdict as serde_json, and no panic.
        #[test]
        fn the_scanner_agrees_with_serde_json_on_any_bytes(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64),
        ) {
            let (ours, theirs) = verdicts(&body);
            proptest::prop_assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(&body));
        }
    }

    #[test]
    fn same_key_is_byte_equality() {
        let long = "abcdefghijklmnopqrstuvwxyz0123456789";
        for n in 0..=long.len() {
            let key = &long.as_bytes()[..n];
            assert!(same_key(key, key), "{n}");
            assert!(!same_key(key, &long.as_bytes()[..n.saturating_sub(1)]) || n == 0);
            for at in 0..n {
                let mut other = key.to_vec();
                other[at] ^= 0x20;
                assert!(!same_key(key, &other), "{n} bytes, differing at {at}");
            }
        }
    }

    #[test]
    fn digits_are_counted_as_one_at_a_time_would() {
        let all: Vec<u8> = (0..=255).collect();
        for len in 0..20 {
            for &stop in &all {
                let mut body = vec![b'7'; len];
                body.push(stop);
                body.extend_from_slice(b"123456789");
                let mut scan = Scanner::new(&body);
                let expected = if stop.is_ascii_digit() { len + 10 } else { len };
                assert_eq!(scan.digits(), expected, "{len} digits then {stop:#x}");
            }
        }
    }

    #[test]
    fn accepts_what_serde_json_accepts() {
        for body in [
            r#"{"a":[1,-0,0.5,1e9,-2E-3,1.25e+2,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9y"],"b":{}}"#,
            "  [ ]  ",
            "\"long string without any escapes at all, past eight bytes\"",
            "[[[[[[]]]]]]",
            r#"{"é":"ü","k":"\ud83d\ude00"}"#,
            "0",
        ] {
            assert_eq!(verdicts(body), (true, true), "{body}");
        }
    }

    #[test]
    fn rejects_what_serde_json_rejects() {
        for body in [
            "",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "-",
            "1.",
            "1e",
            "1e+",
            ".5",
            "tru",
            "nul",
            "{\"a\" 1}",
            "{1:2}",
            "[1 2]",
            "\"a\u{1}b\"",
            "\"\\x\"",
            "\"\\u12g4\"",
            "\"abc",
            "[1]x",
            "{\"a\":1",
            "[",
            "+1",
            "NaN",
        ] {
            assert_eq!(verdicts(body), (false, false), "{body:?}");
        }
    }

    /// Every truncation of a document, and every one-byte change to it from a set of
    /// JSON-significant bytes, is accepted by the scanner exactly when `serde_json` accepts it.
    #[test]
    fn agrees_with_serde_json_on_damaged_documents() {
        let document = br#" {"a": [1, -0.5e+3, true, null, "s\u00e9\n"], "b" : {"c": false, "d": []},"e":"xyzxyzxyz0123","f":-12} "#;
        let bytes = b" \"\\/,:[]{}0123456789+-.eEtrufalsnxu\x01\x7f";
        let agree = |body: &[u8]| {
            let (ours, theirs) = verdicts(body);
            assert_eq!(ours, theirs, "{:?}", String::from_utf8_lossy(body));
        };
        for end in 0..=document.len() {
            agree(&document[..end]);
        }
        for at in 0..document.len() {
            for &byte in bytes {
                let mut body = document.to_vec();
                body[at] = byte;
                agree(&body);
                body.insert(at, byte);
                agree(&body);
            }
            let mut body = document.to_vec();
            body.remove(at);
            agree(&body);
        }
    }

    #[test]
    fn nesting_stops_at_the_recursion_limit() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(skim(deep(MAX_DEPTH)).is_ok());
        let body = deep(MAX_DEPTH + 1);
        let error = skim(&body).expect_err("too deep");
        assert_eq!(error.at, MAX_DEPTH);
        // serde_json skips any depth, so the message is the scanner's own.
        assert_eq!(
            json_error(body.as_bytes(), error).to_string(),
            format!("recursion limit exceeded at byte {MAX_DEPTH}")
        );
    }

    #[test]
    fn raw_values_and_keys_are_slices_of_the_body() {
        let body = r#" { "plain" : "a b" , "es\u0063aped" : [1, {"x": 2}] , "n": -1.5e3 } "#;
        let mut scan = Scanner::new(body.as_bytes());
        assert_eq!(scan.peek(), Ok(b'{'));
        let mut seen = Vec::new();
        let mut more = scan.open_object().unwrap();
        while more {
            let k = scan.key().unwrap();
            let value = scan.raw_value().unwrap();
            let text = k.text().map(Cow::into_owned).unwrap();
            seen.push((k.raw().to_owned(), k.is_escaped(), text, value.to_owned()));
            more = scan.next_property().unwrap();
        }
        assert_eq!(scan.end(), Ok(()));
        let expected = [
            ("plain", false, "plain", r#""a b""#),
            (r"es\u0063aped", true, "escaped", r#"[1, {"x": 2}]"#),
            ("n", false, "n", "-1.5e3"),
        ];
        assert_eq!(seen.len(), expected.len());
        for (got, want) in seen.iter().zip(expected) {
            assert_eq!(
                (got.0.as_str(), got.1, got.2.as_str(), got.3.as_str()),
                want
            );
        }
    }

    #[test]
    fn an_expected_key_is_taken_whole_or_not_at_all() {
        let pattern = |key: &str| {
            let quoted = format!("{key:?}");
            KeyPattern::of(&Key {
                quoted: &quoted,
                escaped: false,
            })
            .expect("a plain key")
        };
        let body = br#"{ "name":1, "names": 2, "nam":3, "x\"":4, "spaced" :5}"#;
        let mut scan = Scanner::new(body);
        assert_eq!(scan.peek(), Ok(b'{'));
        assert_eq!(scan.open_object(), Ok(true));
        assert!(!scan.key_is(&pattern("nam")));
        assert!(scan.key_is(&pattern("name")));
        assert_eq!(scan.raw_value(), Ok("1"));
        assert_eq!(scan.next_property(), Ok(true));
        assert!(!scan.key_is(&pattern("name")));
        assert_eq!(scan.key().map(|k| k.raw()), Ok("names"));
        assert_eq!(scan.skip_value(), Ok(()));
        assert_eq!(scan.next_property(), Ok(true));
        assert!(!scan.key_is(&pattern("names")));
        assert!(scan.key_is(&pattern("nam")));
        assert_eq!(scan.skip_value(), Ok(()));
        assert_eq!(scan.next_property(), Ok(true));
        assert!(!scan.key_is(&pattern("x")));
        assert_eq!(
            scan.key().map(|k| (k.raw(), k.is_escaped())),
            Ok((r#"x\""#, true))
        );
        assert_eq!(scan.skip_value(), Ok(()));
        assert_eq!(scan.next_property(), Ok(true));
        // Whitespace before the colon: not the pattern, read as a key.
        assert!(!scan.key_is(&pattern("spaced")));
        assert_eq!(scan.key().map(|k| k.raw()), Ok("spaced"));
        assert_eq!(scan.raw_value(), Ok("5"));
        assert_eq!(scan.next_property(), Ok(false));
        let mut missing_colon = Scanner::new(br#"{"a" 1}"#);
        assert_eq!(missing_colon.peek(), Ok(b'{'));
        assert_eq!(missing_colon.open_object(), Ok(true));
        assert!(!missing_colon.key_is(&pattern("a")));
        assert!(missing_colon.key().is_err());
    }

    #[test]
    fn invalid_utf8_is_refused_only_where_it_is_read() {
        let mut body = br#"{"skipped":"x","bound":"y"}"#.to_vec();
        body[12] = 0xff;
        let mut scan = Scanner::new(&body);
        assert_eq!(scan.peek(), Ok(b'{'));
        assert_eq!(scan.open_object(), Ok(true));
        assert!(scan.key().is_ok());
        assert_eq!(scan.skip_value(), Ok(()));
        body[12] = b'x';
        body[24] = 0xff;
        let mut scan = Scanner::new(&body);
        assert_eq!(scan.peek(), Ok(b'{'));
        assert_eq!(scan.open_object(), Ok(true));
        assert!(scan.key().is_ok());
        assert_eq!(scan.skip_value(), Ok(()));
        assert_eq!(scan.next_property(), Ok(true));
        assert!(scan.key().is_ok());
        assert_eq!(
            scan.raw_value().map_err(|e| e.what),
            Err("invalid unicode code point")
        );
    }

    /// A key inside a value that is passed over is not checked as UTF-8, as `serde_json`
    /// does not check it; the same key is refused where it is read.
    #[test]
    fn a_key_passed_over_is_not_checked_as_utf8() {
        let mut body = br#"{"skipped":{"kx":1},"bound":"y"}"#.to_vec();
        body[14] = 0xff;
        assert_eq!(verdicts(&body), (true, true));
        let mut scan = Scanner::new(&body);
        assert_eq!(scan.peek(), Ok(b'{'));
        assert_eq!(scan.open_object(), Ok(true));
        assert!(scan.key().is_ok());
        assert_eq!(scan.peek(), Ok(b'{'));
        assert_eq!(scan.open_object(), Ok(true));
        assert_eq!(
            scan.key().map(|k| k.raw()).map_err(|e| e.what),
            Err("invalid unicode code point")
        );
    }

    #[test]
    fn errors_read_as_serde_json_tells_them() {
        let body = b"[1,2,";
        let mut scan = Scanner::new(body);
        let error = scan.skip_value().expect_err("a cut body");
        assert_eq!(
            json_error(body, error).to_string(),
            "EOF while parsing a value at line 1 column 5"
        );
    }
}
