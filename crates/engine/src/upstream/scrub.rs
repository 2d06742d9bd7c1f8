//! Secrets out of upstream error bodies. Some APIs echo the request's credential back in an
//! error ("invalid key abc…"); the body is quoted in the error the caller, the logs and the
//! audit trail see. Before that, every secret value the tenant's credential store holds and
//! every auth header or query value sent is replaced, in the forms an echo may take: as sent,
//! without its scheme (`Bearer `), base64 (standard and URL-safe, padded or not),
//! percent-encoded as each part of a URL encodes (every non-alphanumeric byte; a path
//! segment, a path, a query, a URI component; a form, with `+` for a space) and
//! JSON-escaped.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use percent_encoding::{AsciiSet, CONTROLS, NON_ALPHANUMERIC, utf8_percent_encode};

use super::AuthParts;
use crate::credentials::CredentialSource;

/// What replaces a secret.
pub(crate) const REDACTED: &str = "[REDACTED]";

/// Shorter values are not scrubbed: they would mangle ordinary text and are no secret.
const MIN_SECRET_LEN: usize = 4;

/// What a URL's query leaves encoded (WHATWG URL: the query percent-encode set).
const QUERY: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'#').add(b'<').add(b'>');

/// What a URL's path leaves encoded (the path percent-encode set).
const PATH: &AsciiSet = &QUERY.add(b'?').add(b'`').add(b'{').add(b'}');

/// What one path segment leaves encoded (the url crate's path segment set).
const PATH_SEGMENT: &AsciiSet = &PATH.add(b'/').add(b'%');

/// What `encodeURIComponent` leaves encoded: all but alphanumerics and `-_.!~*'()`.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// The secrets of one request.
#[derive(Default)]
pub(crate) struct Scrubber {
    /// Every form of every secret, longest first.
    needles: Vec<String>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("needles", &self.needles.len())
            .finish()
    }
}

impl Scrubber {
    /// The secrets of a request sent with `auth` for a tenant whose store is `credentials`.
    pub(crate) fn new(auth: &AuthParts, credentials: &dyn CredentialSource) -> Self {
        let mut values = credentials.secret_values();
        if let Some(signer) = &auth.signer {
            values.extend(signer.secrets());
        }
        for (_, value) in auth.headers.iter().chain(&auth.query) {
            values.push(value.clone());
            // `Bearer <token>`, `Basic <base64>`, `api_key <key>`: the part after the scheme.
            if let Some((_, token)) = value.split_once(' ') {
                values.push(token.to_owned());
                if let Ok(decoded) = STANDARD.decode(token.trim())
                    && let Ok(decoded) = String::from_utf8(decoded)
                {
                    values.extend(decoded.split_once(':').map(|(_, p)| p.to_owned()));
                    values.push(decoded);
                }
            }
        }
        let mut needles = Vec::new();
        for value in values {
            let value = value.trim();
            if value.chars().count() < MIN_SECRET_LEN {
                continue;
            }
            for engine in [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD] {
                needles.push(engine.encode(value));
            }
            for set in [NON_ALPHANUMERIC, PATH_SEGMENT, PATH, QUERY, COMPONENT] {
                needles.push(utf8_percent_encode(value, set).to_string());
            }
            needles.push(url::form_urlencoded::byte_serialize(value.as_bytes()).collect());
            if let Ok(json) = serde_json::to_string(value) {
                let json = &json[1..json.len() - 1];
                // Some encoders also escape `/`.
                needles.push(json.replace('/', "\\/"));
                needles.push(json.to_owned());
            }
            needles.push(value.to_owned());
        }
        needles.retain(|n| n.chars().count() >= MIN_SECRET_LEN);
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        needles.dedup();
        Scrubber { needles }
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.replace(text, REDACTED)
    }

    /// `text` with every secret replaced by `marker`.
    pub(crate) fn replace(&self, text: &str, marker: &str) -> String {
        let mut text = text.to_owned();
        for needle in &self.needles {
            if text.contains(needle.as_str()) {
                text = text.replace(needle.as_str(), marker);
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;

    #[test]
    fn every_form_of_a_secret_is_replaced() {
        let store = CredentialStore::fixed([
            ("TOKEN".to_owned(), "s3cr3t/value+x".to_owned()),
            ("SHORT".to_owned(), "ab".to_owned()),
        ]);
        let basic = STANDARD.encode("ann:pa55word");
        let auth = AuthParts {
            headers: vec![("authorization".to_owned(), format!("Basic {basic}"))],
            query: vec![("key".to_owned(), "query-key-1".to_owned())],
            signer: None,
            provider: String::new(),
        };
        let scrubber = Scrubber::new(&auth, &store);
        let echoed = format!(
            "raw s3cr3t/value+x b64 {} url {} json s3cr3t\\/value+x header Basic {basic} user ann:pa55word pass pa55word q query-key-1 short ab",
            STANDARD.encode("s3cr3t/value+x"),
            utf8_percent_encode("s3cr3t/value+x", NON_ALPHANUMERIC),
        );
        let scrubbed = scrubber.scrub(&echoed);
        assert_eq!(
            scrubbed,
            "raw [REDACTED] b64 [REDACTED] url [REDACTED] json [REDACTED] header [REDACTED] user [REDACTED] pass [REDACTED] q [REDACTED] short ab"
        );
    }
}
