//! What a person approving a write is shown of each upstream request: the request as it
//! would go on the wire before auth is added, with secrets masked and its size bounded.
//! Masked as `***`: every value the tenant's credential store holds (in the forms an echo
//! may take, see [`Scrubber`]), and the value of every query parameter, header, form field
//! or JSON body field (nested too) whose name looks secret (`password`, `client_secret`,
//! `apiKey`, `private_key`, `token`, …).

use serde_json::Value;
use url::Url;

use super::types::RequestPreview;
use super::upstream::{Scrubber, UnsignedWire};

/// How many requests of one write are previewed; the rest are counted, not shown.
pub const PREVIEW_REQUESTS: usize = 20;

/// How many bytes of a URL or a body are shown; longer ones are cut with a marker.
pub const PREVIEW_TEXT_BYTES: usize = 2048;

/// What a masked value is shown as.
pub(crate) const MASK: &str = "***";

/// Words that make a name secret wherever they stand in it (compared without separators
/// and case: `clientSecret`, `client-secret` and `CLIENT_SECRET` all hold `secret`).
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "apikey",
    "privatekey",
    "accesskey",
    "signingkey",
    "sessionkey",
    "authorization",
    "cookie",
];

/// Whether a parameter, header or field named `name` likely holds a secret: it holds one of
/// [`SECRET_WORDS`], or it is `key`, `pwd` or `auth` (any case, with or without
/// separators around it).
pub(crate) fn is_secret_name(name: &str) -> bool {
    let squashed: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    matches!(squashed.as_str(), "key" | "keys" | "pwd" | "auth")
        || SECRET_WORDS.iter().any(|word| squashed.contains(word))
}

/// The preview of `wire`, masked with `secrets` (the tenant's credential values).
pub(crate) fn preview(wire: UnsignedWire, media_type: &str, secrets: &Scrubber) -> RequestPreview {
    let url = cut(&masked_url(&wire.url, secrets));
    let media_type = wire
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
        .map_or_else(|| media_type.to_owned(), |(_, value)| value.clone());
    let headers = wire
        .headers
        .into_iter()
        .map(|(name, value)| {
            let value = if is_secret_name(&name) {
                MASK.to_owned()
            } else {
                secrets.replace(&value, MASK)
            };
            (name, value)
        })
        .collect();
    let (body, body_bytes, media_type) = match wire.body {
        Some(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let masked = masked_body(&text, &media_type, secrets);
            (Some(cut(&masked)), bytes.len(), Some(media_type))
        }
        None => (None, 0, None),
    };
    RequestPreview {
        http_method: wire.http_method,
        url,
        headers,
        media_type,
        body,
        body_bytes,
    }
}

/// `url` with secret-named query parameters and credential values masked.
fn masked_url(url: &str, secrets: &Scrubber) -> String {
    let Ok(mut parsed) = Url::parse(url) else {
        return secrets.replace(url, MASK);
    };
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let value = if is_secret_name(&name) {
                    MASK.to_owned()
                } else {
                    secrets.replace(&value, MASK)
                };
                (secrets.replace(&name, MASK), value)
            })
            .collect();
        parsed.set_query(None);
        parsed.query_pairs_mut().extend_pairs(pairs);
    }
    let path = secrets.replace(parsed.path(), MASK);
    parsed.set_path(&path);
    // The query was rebuilt from decoded values: the credential forms are gone from it.
    secrets.replace(parsed.as_str(), MASK)
}

/// A body with secret-named fields and credential values masked: JSON by field (nested
/// objects and arrays too), a form by field, anything else by value only.
fn masked_body(text: &str, media_type: &str, secrets: &Scrubber) -> String {
    if media_type.contains("x-www-form-urlencoded") {
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(text.as_bytes())
            .map(|(name, value)| {
                let value = if is_secret_name(&name) {
                    MASK.to_owned()
                } else {
                    secrets.replace(&value, MASK)
                };
                (name.into_owned(), value)
            })
            .collect();
        let form = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs)
            .finish();
        return secrets.replace(&form, MASK);
    }
    match serde_json::from_str::<Value>(text) {
        // Written back only when a field was masked: otherwise the text as sent.
        Ok(mut value) => {
            if mask_fields(&mut value) {
                secrets.replace(&value.to_string(), MASK)
            } else {
                secrets.replace(text, MASK)
            }
        }
        Err(_) => secrets.replace(text, MASK),
    }
}

/// Replaces the value of every secret-named member of `value`, at any depth, by [`MASK`]:
/// whether it replaced any.
fn mask_fields(value: &mut Value) -> bool {
    match value {
        Value::Object(map) => {
            let mut masked = false;
            for (name, member) in map.iter_mut() {
                if is_secret_name(name) && !member.is_null() {
                    *member = Value::String(MASK.to_owned());
                    masked = true;
                } else {
                    masked |= mask_fields(member);
                }
            }
            masked
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |masked, item| mask_fields(item) | masked),
        _ => false,
    }
}

/// `text` cut at [`PREVIEW_TEXT_BYTES`] (on a character boundary) with a marker saying how
/// long it really is.
fn cut(text: &str) -> String {
    if text.len() <= PREVIEW_TEXT_BYTES {
        return text.to_owned();
    }
    let mut end = PREVIEW_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}…[cut: {end} of {} bytes shown]",
        &text[..end],
        text.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;
    use crate::upstream::AuthParts;
    use bytes::Bytes;

    fn secrets() -> Scrubber {
        let store = CredentialStore::fixed([("API_TOKEN".to_owned(), "tok-9f2e7a".to_owned())]);
        Scrubber::new(&AuthParts::default(), &store)
    }

    fn wire(url: &str, body: Option<&str>) -> UnsignedWire {
        UnsignedWire {
            http_method: "POST".to_owned(),
            url: url.to_owned(),
            headers: vec![
                ("accept".to_owned(), "application/json".to_owned()),
                ("x-api-key".to_owned(), "plain-header-value".to_owned()),
                ("x-trace".to_owned(), "t-tok-9f2e7a".to_owned()),
            ],
            body: body.map(|b| Bytes::from(b.to_owned())),
        }
    }

    #[test]
    fn secret_looking_names_are_recognised_in_any_casing() {
        for name in [
            "password",
            "Password",
            "client_secret",
            "clientSecret",
            "api_key",
            "apiKey",
            "X-API-Key",
            "key",
            "private_key",
            "privateKeyPem",
            "access_token",
            "credentials",
            "db_passwd",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["name", "description", "key_name", "org", "monkey_id", "id"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn nested_json_fields_and_credential_values_are_masked() {
        let body = r#"{"name":"w","config":{"password":"hunter22","items":[{"client_secret":"cs-1","note":"keep"}],"apiKey":null},"copied":"tok-9f2e7a"}"#;
        let shown = preview(
            wire("https://api.example.com/widgets", Some(body)),
            "application/json",
            &secrets(),
        );
        let body: Value = serde_json::from_str(shown.body.as_deref().unwrap()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"name": "w", "config": {"password": "***", "items": [{"client_secret": "***", "note": "keep"}], "apiKey": null}, "copied": "***"})
        );
        assert_eq!(shown.body_bytes, r#"{"name":"w","config":{"password":"hunter22","items":[{"client_secret":"cs-1","note":"keep"}],"apiKey":null},"copied":"tok-9f2e7a"}"#.len());
        assert_eq!(shown.media_type.as_deref(), Some("application/json"));
        assert_eq!(
            shown.headers,
            vec![
                ("accept".to_owned(), "application/json".to_owned()),
                ("x-api-key".to_owned(), "***".to_owned()),
                ("x-trace".to_owned(), "t-***".to_owned()),
            ]
        );
    }

    #[test]
    fn a_credential_percent_encoded_in_a_path_segment_or_query_is_masked() {
        let store = CredentialStore::fixed([("DEPLOY".to_owned(), "My-Secret Dep/2".to_owned())]);
        let secrets = Scrubber::new(&AuthParts::default(), &store);
        // As the url crate writes a path segment (`-` kept, space and `/` encoded), and as
        // a form or a URI component writes the query.
        let shown = preview(
            wire(
                "https://api.example.com/v1/deployments/My-Secret%20Dep%2F2/scale?copy=My-Secret+Dep%2F2&n=1",
                None,
            ),
            "application/json",
            &secrets,
        );
        assert_eq!(
            shown.url,
            "https://api.example.com/v1/deployments/***/scale?copy=***&n=1"
        );
    }

    #[test]
    fn query_string_parameters_are_masked_by_name_and_by_value() {
        let shown = preview(
            wire(
                "https://api.example.com/v1/tok-9f2e7a/items?org=acme&access_token=abc%20def&q=x%2Dtok-9f2e7a",
                None,
            ),
            "application/json",
            &secrets(),
        );
        assert_eq!(
            shown.url,
            "https://api.example.com/v1/***/items?org=acme&access_token=***&q=x-***"
        );
        assert_eq!(shown.body, None);
        assert_eq!(shown.media_type, None);
    }

    #[test]
    fn forms_are_masked_by_field_and_long_bodies_cut() {
        let shown = preview(
            wire(
                "https://api.example.com/f",
                Some("user=ann&password=pa55&x=1"),
            ),
            "application/x-www-form-urlencoded; charset=utf-8",
            &secrets(),
        );
        assert_eq!(shown.body.as_deref(), Some("user=ann&password=***&x=1"));
        let long = format!(r#"{{"data":"{}"}}"#, "é".repeat(3000));
        let shown = preview(
            wire("https://api.example.com/f", Some(&long)),
            "application/json",
            &secrets(),
        );
        let body = shown.body.unwrap();
        assert!(body.len() < PREVIEW_TEXT_BYTES + 64, "{}", body.len());
        assert!(
            body.ends_with(&format!("of {} bytes shown]", long.len())),
            "{body}"
        );
        assert_eq!(shown.body_bytes, long.len());
    }
}
