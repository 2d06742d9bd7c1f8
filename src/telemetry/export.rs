//! The HTTP client the OTLP exporter sends spans with: a reqwest client (ring TLS, web PKI
//! roots, as the engine's own), driven on the server's tokio runtime. The SDK's batch
//! processor exports from its own thread, outside the runtime, so each request is spawned
//! onto the runtime and awaited from there.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// Sends OTLP requests with reqwest on a tokio runtime.
#[derive(Debug, Clone)]
pub struct OtlpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

/// Largest collector answer read (collectors answer with a small protobuf or nothing).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

impl OtlpClient {
    /// A client for the current tokio runtime, each request bounded by `timeout`.
    pub fn new(timeout: Duration) -> Result<Self, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "traces need the tokio runtime".to_owned())?;
        let tls = crate::client_tls::web_pki()?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| format!("HTTP client set-up failed: {err}"))?;
        Ok(OtlpClient { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let request = reqwest::Request::try_from(request)?;
            let mut response = client.execute(request).await?;
            let mut builder = Response::builder().status(response.status());
            for (name, value) in response.headers() {
                builder = builder.header(name, value);
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await? {
                if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok::<_, HttpError>(builder.body(Bytes::from(body))?)
        });
        sent.await?
    }
}
