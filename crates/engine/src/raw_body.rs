//! Bodies of SELECT methods that are neither JSON nor XML (`application/octet-stream`,
//! `text/plain`, `text/csv`, …, as the method's `response.mediaType` declares, with no
//! transform; a vendor type `application/vnd.…` counts as JSON): one row of one column, `column_anon`, holding the body, as StackQL gives a
//! response whose schema is a bare string (any-sdk's anonymous column). The body is that
//! column's text when it is UTF-8, else its standard base64. Without this, such a body was
//! read as JSON and refused (`upstream.rejected`, "not valid JSON").

use base64::Engine as _;
use bytes::Bytes;

use super::document::Method;

/// The column a non-JSON body is given in (any-sdk's `AnonymousColumnName`).
pub(crate) const ANONYMOUS_COLUMN: &str = "column_anon";

/// Whether `method`'s rows come from a body that is neither JSON nor XML: it declares such
/// a media type, has no transform (a transform reads the body itself) and no `objectKey`
/// (which only a structured body could have).
pub(crate) fn is_raw(method: &Method) -> bool {
    let Some(media_type) = &method.response.media_type else {
        return false;
    };
    let media_type = media_type.to_ascii_lowercase();
    // Vendor types (`application/vnd.github.object`) name what is asked for; the body they
    // bring is JSON (GitHub answers `application/json`).
    let structured = media_type.contains("json")
        || media_type.contains("xml")
        || media_type.starts_with("application/vnd.");
    !structured && method.response.transform.is_none() && method.response.object_key.is_none()
}

/// The JSON rows of a raw body: `[{"column_anon": "<body>"}]`; an empty body has none.
pub(crate) fn as_rows(body: &Bytes) -> Bytes {
    if body.is_empty() {
        return Bytes::new();
    }
    let text = match std::str::from_utf8(body) {
        Ok(text) => text.to_owned(),
        Err(_) => base64::engine::general_purpose::STANDARD.encode(body),
    };
    let mut row = serde_json::Map::new();
    row.insert(ANONYMOUS_COLUMN.to_owned(), serde_json::Value::String(text));
    Bytes::from(serde_json::Value::Array(vec![serde_json::Value::Object(row)]).to_string())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn text_and_binary_bodies_become_one_row() {
        let text = as_rows(&Bytes::from_static(b"hello \"world\"\n"));
        assert_eq!(&text[..], br#"[{"column_anon":"hello \"world\"\n"}]"#);
        let binary = as_rows(&Bytes::from_static(&[0xff, 0x00, 0x01]));
        assert_eq!(&binary[..], br#"[{"column_anon":"/wAB"}]"#);
        assert!(as_rows(&Bytes::new()).is_empty());
    }
}
