//! Keeping string literals of SQL out of audit records: with `audit.hmac_sql_literals`, each
//! quoted literal is replaced by `'hmac:<HMAC-SHA256 hex>'` under the audit key, so equal
//! values stay recognisable (the same literal gives the same HMAC) without being readable.
//!
//! This is a lexical pass over quotes and comments, not a parse, with SQLite's rules (the
//! engine's dialect): `'…'` (with `''` for a quote inside) and `"…"` are replaced, comments
//! are kept as they are, a backslash escapes nothing. When quotes do not balance,
//! everything from the open quote on is replaced: more is hidden, never less.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;

use crate::digest::hex;

/// The key literals are HMACed with (at least 32 bytes).
#[derive(Clone)]
pub struct HmacKey(Vec<u8>);

impl std::fmt::Debug for HmacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HmacKey(<redacted>)")
    }
}

/// The shortest key accepted.
pub const MIN_KEY_BYTES: usize = 32;

impl HmacKey {
    /// A key from bytes; `None` when shorter than [`MIN_KEY_BYTES`].
    pub fn new(bytes: Vec<u8>) -> Option<Self> {
        (bytes.len() >= MIN_KEY_BYTES).then_some(HmacKey(bytes))
    }

    /// A random key (records of different processes then do not match up).
    pub fn random() -> std::io::Result<Self> {
        use std::io::Read as _;
        let mut bytes = vec![0u8; MIN_KEY_BYTES];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(HmacKey(bytes))
    }

    /// HMAC-SHA256 of `data`, hex.
    pub fn mac_hex(&self, data: &[u8]) -> String {
        // HMAC accepts keys of any length, so this cannot fail.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.0) else {
            return String::new();
        };
        mac.update(data);
        hex(&mac.finalize().into_bytes())
    }
}

/// `sql` with every quoted literal replaced by its HMAC.
pub fn hmac_literals(sql: &str, key: &HmacKey) -> String {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = sql[i + 2..]
                    .find("*/")
                    .map_or(bytes.len(), |n| i + 2 + n + 2);
            }
            quote @ (b'\'' | b'"') => {
                let end = literal_end(bytes, i, quote);
                out.push_str(&sql[copied..i]);
                let content = &sql[i + 1..end.min(bytes.len()).max(i + 1)];
                let q = quote as char;
                out.push(q);
                out.push_str("hmac:");
                out.push_str(&key.mac_hex(content.as_bytes()));
                out.push(q);
                i = (end + 1).min(bytes.len());
                copied = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    out
}

/// The index of the closing quote of the literal opened at `start` (`bytes.len()` when it
/// is never closed).
fn literal_end(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b if b == quote && bytes.get(i + 1) == Some(&quote) => i += 2,
            b if b == quote => return i,
            _ => i += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> HmacKey {
        HmacKey::new(vec![7u8; 32]).unwrap()
    }

    #[test]
    fn literals_are_hidden_and_structure_kept() {
        let sql =
            "INSERT INTO github.repos.repos (org, token) SELECT 'acme', 'tk-secret''s' -- it's\n";
        let out = hmac_literals(sql, &key());
        assert!(!out.contains("acme") && !out.contains("tk-secret"), "{out}");
        assert!(out.starts_with("INSERT INTO github.repos.repos (org, token) SELECT 'hmac:"));
        assert!(out.ends_with("-- it's\n"), "{out}");
        assert_eq!(out.matches("'hmac:").count(), 2, "{out}");
        // Equal literals give equal HMACs; the key matters.
        let again = hmac_literals("SELECT 'acme'", &key());
        assert!(out.contains(&again["SELECT ".len()..]), "{out} / {again}");
        let other = hmac_literals("SELECT 'acme'", &HmacKey::new(vec![8u8; 32]).unwrap());
        assert_ne!(again, other);
    }

    #[test]
    fn unbalanced_quotes_hide_the_rest() {
        let out = hmac_literals("SELECT 'abc\\' , 'secret", &key());
        assert!(!out.contains("secret"), "{out}");
        let out = hmac_literals("SELECT \"pw\" FROM t /* 'x' */ WHERE a = 'é'", &key());
        assert!(!out.contains("pw") && !out.contains('é'), "{out}");
        assert!(out.contains("/* 'x' */"), "{out}");
        assert!(HmacKey::new(vec![1; 31]).is_none());
    }

    /// A literal's text as SQL writes it inside `quote`: the quote doubled.
    fn quoted(text: &str, quote: char) -> String {
        let doubled: String = [quote, quote].iter().collect();
        format!("{quote}{}{quote}", text.replace(quote, &doubled))
    }

    proptest::proptest! {
        /// Whatever the text (unbalanced quotes, comments, any characters), the pass ends
        /// without panicking, and text without a quote comes out unchanged.
        #[test]
        fn any_text_is_passed_without_panic(sql in "\\PC{0,80}") {
            let out = hmac_literals(&sql, &key());
            if !sql.contains(['\'', '"']) {
                proptest::prop_assert_eq!(out, sql);
            }
        }

        /// Values in literals of either quote (quotes inside doubled, any characters) never
        /// reach the output; the SQL around them, comments included, is kept as written.
        #[test]
        fn no_literal_value_survives(
            values in proptest::collection::vec(("[a-z'\"\\-/*é ]{0,10}", proptest::bool::ANY), 1..5),
            comment in "[a-z' ]{0,10}",
        ) {
            let marker = |n: usize| format!("zq{n}x");
            let mut sql = String::from("SELECT c FROM t WHERE");
            let mut shape = sql.clone();
            for (n, (value, double)) in values.iter().enumerate() {
                let quote = if *double { '"' } else { '\'' };
                let text = format!("{value}{}{value}", marker(n));
                sql.push_str(&format!(" a{n} = {}", quoted(&text, quote)));
                shape.push_str(&format!(" a{n} = {quote}hmac:{quote}"));
            }
            sql.push_str(&format!(" /* {comment} */ -- {comment}\n"));
            shape.push_str(&format!(" /* {comment} */ -- {comment}\n"));
            let out = hmac_literals(&sql, &key());
            for n in 0..values.len() {
                proptest::prop_assert!(!out.contains(&marker(n)), "{out}");
            }
            // With each HMAC's hex taken out, what is left is the statement's shape.
            let mut stripped = String::new();
            let mut rest = out.as_str();
            while let Some(at) = rest.find("hmac:") {
                stripped.push_str(&rest[..at + 5]);
                rest = rest[at + 5..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
            }
            stripped.push_str(rest);
            proptest::prop_assert_eq!(stripped, shape);
        }
    }
}
