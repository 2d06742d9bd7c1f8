//! Fetching the library from `server.query_library_url`: small JSON documents, with a
//! timeout and a size cap, over rustls (ring) like the engine's upstream client.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::LibrarySetupError;

/// Longest a library request may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Largest library document accepted.
pub(crate) const MAX_BYTES: usize = 4 * 1024 * 1024;

/// An HTTP client for the library.
#[derive(Debug, Clone)]
pub(crate) struct Fetcher {
    client: reqwest::Client,
    base: String,
}

impl Fetcher {
    /// A client for `base` (a trailing `/` is dropped).
    pub(crate) fn new(base: &str) -> Result<Self, LibrarySetupError> {
        let tls = crate::client_tls::web_pki().map_err(LibrarySetupError::Tls)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::limited(3))
            .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(LibrarySetupError::Client)?;
        Ok(Fetcher {
            client,
            base: base.trim_end_matches('/').to_owned(),
        })
    }

    /// The URL of `path` under the base.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}/{path}", self.base)
    }

    /// GETs `path` and parses it as JSON.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, String> {
        let url = self.url(path);
        let mut response = self
            .client
            .get(&url)
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|err| format!("GET {url}: {}", without_url(&err)))?;
        let status = response.status();
        if status != reqwest::StatusCode::OK {
            return Err(format!("GET {url}: http status {}", status.as_u16()));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_BYTES as u64)
        {
            return Err(format!("GET {url}: the body is over {MAX_BYTES} bytes"));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|err| format!("GET {url}: {}", without_url(&err)))?
        {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(format!("GET {url}: the body is over {MAX_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|err| format!("GET {url}: invalid JSON: {err}"))
    }
}

/// A transport error without the URL reqwest puts in its text (the caller names it once).
fn without_url(err: &reqwest::Error) -> String {
    if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connect() {
        "connection failed".to_owned()
    } else if err.is_body() || err.is_decode() {
        "the body could not be read".to_owned()
    } else {
        "request failed".to_owned()
    }
}
