//! The upstreams' request ids of one call, so that an audit record can be joined to the
//! provider's own log (CloudTrail, Azure's Activity Log, …). Whoever runs a call wraps it
//! in [`collecting`]; each upstream answer's id header is then noted for it.
//!
//! The list is bounded ([`MAX_IDS`]), each entry cut to [`MAX_ID_CHARS`] and reduced to
//! printable ASCII (anything else becomes `\u{..}`), so a hostile upstream cannot grow the
//! audit record or inject control characters into it.

use std::sync::{Arc, Mutex};

use reqwest::header::HeaderMap;

/// The headers upstreams name their request id in, tried in this order (the first present
/// one is noted).
pub(crate) const ID_HEADERS: [&str; 8] = [
    "x-ms-request-id",
    "x-amzn-requestid",
    "x-amz-request-id",
    "x-goog-request-id",
    "x-request-id",
    "request-id",
    "x-github-request-id",
    "cf-ray",
];

/// Ids kept per call; later ones are dropped.
pub(crate) const MAX_IDS: usize = 16;

/// Characters kept of one entry (`<header>=<value>`).
pub(crate) const MAX_ID_CHARS: usize = 128;

tokio::task_local! {
    static IDS: Arc<Mutex<Vec<String>>>;
}

/// Runs `call`, returning its output and the request ids of the upstream answers it got,
/// each as `<header>=<value>`, in order.
pub async fn collecting<F: std::future::Future>(call: F) -> (F::Output, Vec<String>) {
    let ids: Arc<Mutex<Vec<String>>> = Arc::default();
    let output = IDS.scope(ids.clone(), call).await;
    let ids = ids.lock().map(|ids| ids.clone()).unwrap_or_default();
    (output, ids)
}

/// Notes the request id of an upstream answer for the call being run (if any is
/// collecting).
pub(crate) fn note(headers: &HeaderMap) {
    let Some(entry) = entry(headers) else {
        return;
    };
    let _ = IDS.try_with(|ids| {
        if let Ok(mut ids) = ids.lock()
            && ids.len() < MAX_IDS
        {
            ids.push(entry);
        }
    });
}

/// `<header>=<value>` of the first id header present, escaped and cut.
fn entry(headers: &HeaderMap) -> Option<String> {
    let (name, value) = ID_HEADERS
        .iter()
        .find_map(|name| headers.get(*name).map(|value| (*name, value)))?;
    let value = String::from_utf8_lossy(value.as_bytes());
    let mut entry = format!("{name}=");
    for c in value.trim().chars() {
        if c.is_ascii_graphic() || c == ' ' {
            entry.push(c);
        } else {
            entry.push_str(&c.escape_unicode().to_string());
        }
    }
    Some(entry.chars().take(MAX_ID_CHARS).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_bytes(value).unwrap());
        }
        map
    }

    #[test]
    fn entries_are_escaped_and_cut() {
        assert_eq!(entry(&headers(&[])), None);
        assert_eq!(
            entry(&headers(&[
                ("cf-ray", b"8f1"),
                ("x-ms-request-id", b"abc-1")
            ]))
            .as_deref(),
            Some("x-ms-request-id=abc-1")
        );
        assert_eq!(
            entry(&headers(&[("x-request-id", "a\u{e9}\tb".as_bytes())])).as_deref(),
            Some("x-request-id=a\\u{e9}\\u{9}b")
        );
        let long = "x".repeat(500);
        let cut = entry(&headers(&[("request-id", long.as_bytes())])).unwrap();
        assert_eq!(cut.chars().count(), MAX_ID_CHARS);
    }

    #[tokio::test]
    async fn a_call_collects_a_bounded_list() {
        let one = headers(&[("x-amzn-requestid", b"r-1")]);
        let ((), ids) = collecting(async {
            for _ in 0..(MAX_IDS + 5) {
                note(&one);
            }
        })
        .await;
        assert_eq!(ids.len(), MAX_IDS);
        assert!(ids.iter().all(|id| id == "x-amzn-requestid=r-1"));
        // Outside a collecting call nothing is kept (and nothing fails).
        note(&one);
    }
}
