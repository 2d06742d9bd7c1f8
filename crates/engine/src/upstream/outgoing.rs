//! One outgoing request as the send functions take it: its method, URL, headers and body,
//! before auth signs it. Borrowed: the request is sent (and retried) without copying it.

use bytes::Bytes;
use reqwest::header::HeaderMap;
use url::Url;

/// One request to send. No `Debug`: its headers may carry secrets.
#[derive(Clone, Copy)]
pub(crate) struct Outgoing<'a> {
    pub(crate) method: &'a reqwest::Method,
    pub(crate) url: &'a Url,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: Option<&'a Bytes>,
}

impl<'a> Outgoing<'a> {
    /// A request of `method` to `url` with `headers` and `body`.
    pub(crate) fn new(
        method: &'a reqwest::Method,
        url: &'a Url,
        headers: &'a HeaderMap,
        body: Option<&'a Bytes>,
    ) -> Self {
        Outgoing {
            method,
            url,
            headers,
            body,
        }
    }

    /// `METHOD url` without query and credentials, for messages.
    pub(crate) fn describe(&self) -> String {
        super::describe(self.method, self.url)
    }
}
