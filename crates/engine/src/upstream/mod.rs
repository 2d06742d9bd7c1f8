//! Calls upstream APIs: builds the URL from the method's server and path templates and the
//! statement's parameter values, applies auth, follows pagination, and turns non-success
//! statuses into typed errors. 404 on a read is "no rows" for that request.

mod admission;
mod auth_parts;
mod body;
mod outgoing;
mod pacing;
mod pagination;
pub(crate) mod provenance;
mod request;
mod retry;
mod scrub;

pub(crate) use admission::{AdmissionWait, BodyAdmission};
use admission::{Admitting, LargeAnswers};
pub(crate) use outgoing::Outgoing;
use request::*;
pub(crate) use request::{UnsignedWire, unsigned_request, unsigned_wire};
pub(crate) use scrub::Scrubber;

pub(crate) use auth_parts::{AuthParts, RequestSigner};

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::HeaderMap;
use url::Url;

use self::body::Gathered;
use self::pagination::Next;
use super::credentials::CredentialSource;
use super::document::{DocumentRetry, Method, Param};
use super::error::{Error, ErrorKind, Result, UpstreamFailure};
use super::observe::{UpstreamObserver, UpstreamResult};

/// Limits for upstream calls.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamSettings {
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) page_limit: u32,
    pub(crate) max_response_bytes: usize,
    pub(crate) retry: RetryPolicy,
    /// Requests per second per tenant, by provider.
    pub(crate) max_requests_per_second: std::collections::HashMap<String, f64>,
}

pub use retry::RetryPolicy;

/// The HTTP client shared by every statement.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    client: reqwest::Client,
    settings: UpstreamSettings,
    /// Told about each request to a provider's API.
    observer: Option<Arc<dyn UpstreamObserver>>,
    /// Each tenant's pace towards each provider.
    pacer: Arc<pacing::Pacer>,
    /// The requests whose last answer needed admission on its own.
    large_answers: Arc<LargeAnswers>,
}

/// One request (and its follow-up pages) of a table load.
#[derive(Debug)]
pub(crate) struct Leg<'a> {
    pub(crate) method: &'a Method,
    pub(crate) base_url: Option<&'a str>,
    /// Parameter values of this request.
    pub(crate) values: Vec<(&'a Param, String)>,
    /// The JSON body of a read bound to a method that takes one (every page carries it;
    /// a next-page token may go in it).
    pub(crate) body: Option<LegBody>,
    pub(crate) auth: &'a AuthParts,
    pub(crate) credentials: &'a dyn CredentialSource,
    /// The tenant the request is sent for (its pace towards the provider).
    pub(crate) tenant: &'a str,
    /// When the call ends (`None`: the upstream timeout bounds a pacing wait).
    pub(crate) deadline: Option<tokio::time::Instant>,
    /// Asked before a page's request is sent, when its last answer needed it, and before a
    /// successful page's body is read (see [`admission`]); `None`: sent and read at once.
    pub(crate) admission: Option<&'a dyn BodyAdmission>,
}

/// The JSON body of a read, and its media type.
#[derive(Debug, Clone)]
pub(crate) struct LegBody {
    pub(crate) media_type: String,
    pub(crate) json: serde_json::Value,
}

impl LegBody {
    fn bytes(&self) -> Bytes {
        Bytes::from(self.json.to_string())
    }
}

/// How a leg ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LegEnd {
    /// Every page was read.
    Complete { pages: u32 },
    /// The upstream answered 404: no rows.
    NotFound,
    /// The configured page limit stopped the traversal while more pages existed.
    PageLimit { pages: u32 },
}

/// Upstream bodies quoted in errors are cut to this many bytes.
const ERROR_BODY_LIMIT: usize = 1024;

impl Upstream {
    /// A client with the given limits.
    pub(crate) fn new(settings: UpstreamSettings) -> Result<Self> {
        let tls = crate::client_tls::web_pki().map_err(Error::internal)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(settings.timeout)
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| Error::internal(format!("HTTP client set-up failed: {err}")))?;
        let pacer = Arc::new(pacing::Pacer::new(settings.max_requests_per_second.clone()));
        Ok(Upstream {
            client,
            settings,
            observer: None,
            pacer,
            large_answers: Arc::new(LargeAnswers::new()),
        })
    }

    /// This client, telling `observer` (if any) about each request to a provider's API.
    pub(crate) fn observed(mut self, observer: Option<Arc<dyn UpstreamObserver>>) -> Self {
        self.observer = observer;
        self
    }

    /// The shared HTTP client (timeouts set, redirects not followed), for the remote
    /// registry's downloads.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Fetches every page of `leg`. Each body goes to `on_page` with the paths of the body
    /// scalars the next-page decision needs (none when the headers decide), so that the pass
    /// decoding its rows reads them too; its future yields the page's outcome and those
    /// scalars, in order. The outcomes come back in page order.
    pub(crate) async fn fetch<T, F>(
        &self,
        leg: &Leg<'_>,
        mut on_page: impl FnMut(Bytes, Vec<Vec<String>>) -> Result<F>,
    ) -> Result<(LegEnd, Vec<T>)>
    where
        F: Future<Output = Result<(T, Vec<Option<String>>)>>,
    {
        let (mut url, mut headers) = build_request(leg)?;
        let method =
            reqwest::Method::from_bytes(leg.method.http_method.as_bytes()).map_err(|_| {
                Error::bad_document(format!("{}: bad HTTP method", leg.method.location))
            })?;
        let mut request_body = leg.body.clone();
        if let Some(body) = &request_body {
            set_content_type(&mut headers, leg.method, &body.media_type)?;
        }
        let mut pages = 0u32;
        let mut outcomes = Vec::new();
        let mut seen = std::collections::HashSet::new();
        loop {
            let sent = request_body.as_ref().map(LegBody::bytes);
            let request = Outgoing::new(&method, &url, &headers, sent.as_ref());
            let (status, response_headers, body) = self.send_page(request, leg).await?;
            if status == 404 {
                let end = if pages == 0 {
                    LegEnd::NotFound
                } else {
                    LegEnd::Complete { pages }
                };
                return Ok((end, outcomes));
            }
            if !(200..300).contains(&status) {
                return Err(status_error(leg, &method, &url, status, &body));
            }
            let wanted = pagination::wanted(leg.method, &response_headers);
            let (outcome, found) = on_page(body, wanted)?.await?;
            outcomes.push(outcome);
            pages += 1;
            let Some(next) = pagination::next_page(
                leg.method,
                &url,
                &response_headers,
                &found,
                request_body.is_some(),
            )?
            else {
                return Ok((LegEnd::Complete { pages }, outcomes));
            };
            if self.settings.page_limit > 0 && pages >= self.settings.page_limit {
                return Ok((LegEnd::PageLimit { pages }, outcomes));
            }
            // A token or URL we already followed would loop forever.
            if !seen.insert(format!("{next:?}")) {
                return Ok((LegEnd::Complete { pages }, outcomes));
            }
            match next {
                Next::Url(next_url) => url = next_url,
                Next::Header(name, value) => set_header(&mut headers, &name, &value)?,
                Next::Body(key, token) => {
                    if let Some(serde_json::Value::Object(map)) =
                        request_body.as_mut().map(|b| &mut b.json)
                    {
                        map.insert(key, serde_json::Value::String(token));
                    }
                }
            }
        }
    }

    /// Sends one page request of a read: retried as reads are when the engine knows its
    /// method only reads (see [`reads_only`]); sent exactly once otherwise (a SELECT bound to
    /// a POST that may change something upstream: a broken answer leaves its outcome
    /// unknown).
    async fn send_page(
        &self,
        request: Outgoing<'_>,
        leg: &Leg<'_>,
    ) -> Result<(u16, HeaderMap, Bytes)> {
        // The method's effect decides, not the verb on the wire: a query-protocol GET sent as
        // a form POST is a read, and so is an AWS JSON-protocol Describe.
        let is_read = reads_only(leg);
        let wire = on_the_wire(leg.method, request)?;
        if is_read {
            return self.read_wire(&wire, leg).await;
        }
        self.send_wire(&wire, leg).await
    }

    /// Sends `wire` (a request as [`on_the_wire`] translated it) as a read of `leg`'s method,
    /// retried as its `retry` says.
    async fn read_wire(&self, wire: &Wire, leg: &Leg<'_>) -> Result<(u16, HeaderMap, Bytes)> {
        self.send_read(wire.outgoing(), leg, leg.method.retry.as_ref())
            .await
    }

    /// Sends `wire` once, paced for `leg`'s tenant and provider.
    async fn send_wire(&self, wire: &Wire, leg: &Leg<'_>) -> Result<(u16, HeaderMap, Bytes)> {
        self.send(wire.outgoing(), leg).await
    }

    /// GETs `link` (an operation's `selfLink` or `targetLink`) with `leg`'s auth, as a read
    /// (retried). The link must be on the origin of `leg`'s request: credentials are never
    /// sent to another host.
    pub(crate) async fn get_link(&self, leg: &Leg<'_>, link: &str) -> Result<Bytes> {
        let (request_url, mut headers) = build_request(leg)?;
        headers.remove(reqwest::header::CONTENT_TYPE);
        let url = request_url.join(link).map_err(|err| {
            Error::new(
                ErrorKind::Upstream,
                format!("the operation's link is not a URL: {err}"),
            )
        })?;
        if url.origin() != request_url.origin() {
            return Err(Error::new(
                ErrorKind::Upstream,
                format!(
                    "refusing to follow the operation's link to another origin ({}) than the request's ({})",
                    url.origin().ascii_serialization(),
                    request_url.origin().ascii_serialization()
                ),
            ));
        }
        let method = reqwest::Method::GET;
        let wire = on_the_wire(leg.method, Outgoing::new(&method, &url, &headers, None))?;
        let (status, _, body) = self.read_wire(&wire, leg).await?;
        if !(200..300).contains(&status) {
            return Err(status_error(leg, &method, &url, status, &body));
        }
        Ok(body)
    }

    /// One request of a write or a lifecycle operation: no pagination, and any non-2xx
    /// status (404 included) is an error. GET and HEAD are retried as reads are; anything
    /// else is sent exactly once.
    pub(crate) async fn call(
        &self,
        leg: &Leg<'_>,
        body: Option<(&str, Bytes)>,
    ) -> Result<(u16, Bytes)> {
        let (method, url, wire) = call_wire(leg, body.as_ref())?;
        let is_read = reads_only(leg);
        let (status, _, response) = match &body {
            None if is_read => {
                self.read_wire(&wire, leg)
                .await?
            }
            _ => {
                self.send_wire(&wire, leg)
                    .await
                    .map_err(|err| match err.kind() {
                        ErrorKind::UpstreamOutcomeUnknown => err.with_note(
                            "the change may have been applied: check the provider before sending it again",
                        ),
                        _ => err,
                    })?
            }
        };
        if !(200..300).contains(&status) {
            return Err(status_error(leg, &method, &url, status, &response));
        }
        Ok((status, response))
    }

    /// Sends one request of a read (with `body` for a read bound to a method that takes
    /// one), retrying 408/429/502/503/504 (or the document's
    /// `retryable_conditions.status_codes`) and connection failures with exponential
    /// backoff (honouring `Retry-After`), bounded by the retry policy's attempts and total
    /// time; the document's `config.retry` fields replace the configured ones.
    async fn send_read(
        &self,
        request: Outgoing<'_>,
        leg: &Leg<'_>,
        document_retry: Option<&DocumentRetry>,
    ) -> Result<(u16, HeaderMap, Bytes)> {
        let policy = retry::EffectiveRetry::new(&self.settings.retry, document_retry);
        let started = tokio::time::Instant::now();
        let mut backoff = policy.initial_backoff;
        let mut attempt = 1u32;
        loop {
            // A read changes nothing: a broken answer is the upstream being unavailable.
            let outcome = self
                .send(request, leg)
                .await
                .map_err(|err| match err.kind() {
                    ErrorKind::UpstreamOutcomeUnknown => {
                        err.into_kind(ErrorKind::UpstreamUnavailable)
                    }
                    _ => err,
                });
            let wait = match &outcome {
                Ok((status, response_headers, _)) if policy.retries_status(*status) => {
                    retry::retry_after(response_headers).unwrap_or(backoff)
                }
                Err(err) if err.kind() == ErrorKind::UpstreamUnavailable => backoff,
                _ => return outcome,
            };
            let out_of_time = started.elapsed() + wait > policy.max_elapsed;
            if attempt >= policy.attempts || wait > policy.max_backoff || out_of_time {
                return outcome;
            }
            tracing::debug!(
                request = %request.describe(),
                attempt,
                wait_ms = wait.as_millis() as u64,
                "retrying upstream read"
            );
            tokio::time::sleep(wait).await;
            attempt += 1;
            backoff = policy.next_backoff(backoff);
        }
    }

    /// Sends one request of `leg`, once. Paced first (see [`pacing`]): it waits while its tenant's requests to the provider are
    /// paused or its configured rate is taken, or fails at once (nothing sent) when that
    /// wait would run past the call's deadline.
    async fn send(&self, request: Outgoing<'_>, leg: &Leg<'_>) -> Result<(u16, HeaderMap, Bytes)> {
        let provider = &leg.auth.provider;
        // A request to no named provider is not paced.
        let paced = !provider.is_empty();
        if paced {
            self.pace(leg, request).await?;
        }
        let admitting = self.admitting(leg, request);
        let outcome = self.send_admitted(request, leg.auth, admitting).await;
        if paced && let Ok((status, response_headers, _)) = &outcome {
            self.pacer.answered(
                leg.tenant,
                provider,
                *status,
                retry::retry_after(response_headers),
                tokio::time::Instant::now(),
            );
        }
        outcome
    }

    /// The admission of one request of `leg` (see [`admission`]).
    fn admitting<'a>(&'a self, leg: &Leg<'a>, request: Outgoing<'_>) -> Admitting<'a> {
        Admitting::new(
            leg.admission,
            &self.large_answers,
            leg.tenant,
            (request.method, request.url, request.body),
        )
    }

    /// Sends one request, once, unpaced (token requests), and reads its body within the
    /// size limit; in a span (`upstream_request`: provider, method, status), reported to the
    /// observer.
    pub(crate) async fn send_as(
        &self,
        request: Outgoing<'_>,
        auth: &AuthParts,
    ) -> Result<(u16, HeaderMap, Bytes)> {
        self.send_admitted(request, auth, Admitting::none()).await
    }

    /// [`Upstream::send_as`], with the request sent and a successful answer's body read
    /// once `admitting` admits them; the time that takes is not counted in the request's
    /// duration or its timeout.
    async fn send_admitted(
        &self,
        request: Outgoing<'_>,
        auth: &AuthParts,
        mut admitting: Admitting<'_>,
    ) -> Result<(u16, HeaderMap, Bytes)> {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "upstream_request",
            otel.kind = "client",
            provider = %auth.provider,
            http.request.method = %request.method,
            http.response.status_code = tracing::field::Empty,
        );
        let started = Instant::now();
        let outcome = self
            .send_once(request, auth, &mut admitting)
            .instrument(span.clone())
            .await;
        let result = match &outcome {
            Ok((status, _, _)) => {
                span.record("http.response.status_code", status);
                UpstreamResult::Status(*status)
            }
            Err(err) => upstream_result(err),
        };
        if let Some(observer) = &self.observer
            && !auth.provider.is_empty()
        {
            observer.upstream_request(
                &auth.provider,
                result,
                started.elapsed().saturating_sub(admitting.waited),
            );
        }
        outcome
    }

    /// Waits for the tenant's turn to send to the leg's provider, or fails with
    /// `UpstreamThrottled` when the turn comes after the call's deadline (else, without
    /// one, after the upstream timeout).
    async fn pace(&self, leg: &Leg<'_>, request: Outgoing<'_>) -> Result<()> {
        let now = tokio::time::Instant::now();
        let deadline = leg.deadline.unwrap_or(now + self.settings.timeout);
        match self
            .pacer
            .reserve(leg.tenant, &leg.auth.provider, now, deadline)
        {
            Ok(wait) if wait.is_zero() => Ok(()),
            Ok(wait) => {
                tracing::debug!(
                    request = %request.describe(),
                    provider = %leg.auth.provider,
                    wait_ms = wait.as_millis() as u64,
                    "waiting for the tenant's pace towards the provider"
                );
                tokio::time::sleep(wait).await;
                Ok(())
            }
            Err(wait) => {
                let seconds = (wait.as_secs_f64().ceil() as u64).max(1);
                Err(Error::new(
                    ErrorKind::UpstreamThrottled,
                    format!(
                        "provider '{}' asked this tenant to wait, or its requests per second (providers.{}.max_requests_per_second) are taken, for {seconds}s, longer than the call has left: {} was not sent; retry after {seconds}s",
                        leg.auth.provider,
                        leg.auth.provider,
                        request.describe()
                    ),
                )
                .retry_after_wait(wait))
            }
        }
    }

    /// Sends one request and reads its body, within the upstream timeout. The request is
    /// sent once `admitting` admits the body its last answer announced, and a successful
    /// answer's body read once it admits the `Content-Length` and the bytes read so far:
    /// those waits (at most the upstream timeout each, after which it goes on anyway) are
    /// not counted in the request's timeout, which is then kept here rather than by the
    /// HTTP client.
    async fn send_once(
        &self,
        request: Outgoing<'_>,
        auth: &AuthParts,
        admitting: &mut Admitting<'_>,
    ) -> Result<(u16, HeaderMap, Bytes)> {
        let Outgoing {
            method,
            url,
            headers,
            body,
        } = request;
        let timeout = self.settings.timeout;
        admitting.before_sending(timeout).await;
        let mut deadline = tokio::time::Instant::now() + timeout;
        let mut builder = self
            .client
            .request(method.clone(), url.clone())
            .headers(headers.clone());
        if admitting.asks() {
            // The client's own timeout would count the wait: it stays a backstop past the
            // deadline here, which the wait moves (by at most `timeout`).
            builder = builder.timeout(timeout.saturating_mul(2).saturating_add(BACKSTOP));
        }
        if let Some(body) = body {
            builder = builder.body(body.clone());
        }
        let mut request = builder
            .build()
            .map_err(|err| Error::internal(format!("cannot build upstream request: {err}")))?;
        auth.apply(&mut request)?;
        // `sent`: the request may have reached the upstream (anything but a failure to
        // connect), so a write may have been applied.
        let unavailable = |err: reqwest::Error, sent: bool| {
            // reqwest's text names the URL with its query, which may carry a key.
            let err = err.without_url();
            failed(method, url, err.is_timeout(), sent, &error_chain(&err))
        };
        let timed_out = || failed(method, url, true, true, "operation timed out");
        // One timer for the whole request, moved by the waits; without an admission to wait
        // for, the client's own timeout is the request's.
        let timed = admitting.asks();
        let timer = tokio::time::sleep_until(deadline);
        tokio::pin!(timer);
        let mut response = within(timed, timer.as_mut(), self.client.execute(request))
            .await
            .ok_or_else(timed_out)?
            .map_err(|err| {
                let sent = !err.is_connect();
                unavailable(err, sent)
            })?;
        let status = response.status().as_u16();
        let announced = response.content_length();
        admitting.answered((200..300).contains(&status), announced);
        let response_headers = response.headers().clone();
        provenance::note(&response_headers);
        let mut body = Gathered::new(announced, self.settings.max_response_bytes);
        loop {
            let bytes = announced.unwrap_or(0).max(body.len() as u64);
            let waited = admitting.before_reading(bytes, timeout).await;
            if !waited.is_zero() {
                deadline += waited;
                timer.as_mut().reset(deadline);
            }
            let Some(chunk) = within(timed, timer.as_mut(), response.chunk())
                .await
                .ok_or_else(timed_out)?
                .map_err(|err| unavailable(err, true))?
            else {
                break;
            };
            if body.len() + chunk.len() > self.settings.max_response_bytes {
                return Err(Error::new(
                    ErrorKind::LimitExceeded,
                    format!(
                        "upstream response to {} is larger than {} bytes (upstream.max_response_bytes)",
                        describe(method, url),
                        self.settings.max_response_bytes
                    ),
                ));
            }
            body.push(chunk);
        }
        Ok((status, response_headers, body.finish()))
    }
}

/// `work`'s output, or `None` when `timer` fires first; without `timed`, `work`'s output
/// whenever it comes.
async fn within<F: Future>(
    timed: bool,
    mut timer: std::pin::Pin<&mut tokio::time::Sleep>,
    work: F,
) -> Option<F::Output> {
    if !timed {
        return Some(work.await);
    }
    let mut work = std::pin::pin!(work);
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(out) = work.as_mut().poll(cx) {
            return std::task::Poll::Ready(Some(out));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}

/// How far past an admitted request's own deadline the HTTP client's timeout is set.
const BACKSTOP: Duration = Duration::from_secs(1);

/// The error of a request that failed or timed out (`timed_out`), after it may have reached
/// the upstream (`sent`: a write may have been applied) or not.
fn failed(method: &reqwest::Method, url: &Url, timed_out: bool, sent: bool, cause: &str) -> Error {
    let what = match (timed_out, sent) {
        (true, _) => "timed out",
        (false, true) => "failed after it was sent",
        (false, false) => "failed",
    };
    let kind = if sent {
        ErrorKind::UpstreamOutcomeUnknown
    } else {
        ErrorKind::UpstreamUnavailable
    };
    let error = Error::new(
        kind,
        format!("upstream request {} {what}: {cause}", describe(method, url)),
    );
    if timed_out { error.timed_out() } else { error }
}

/// How a failed request counts in the metrics: a timeout by the flag reqwest set, not by
/// the message's text.
fn upstream_result(err: &Error) -> UpstreamResult {
    if err.is_timeout() {
        UpstreamResult::Timeout
    } else {
        UpstreamResult::Error
    }
}

/// The typed error of a non-success answer, quoting the start of its body with the
/// request's secrets scrubbed out (before the cut, so no secret is left half-shown).
fn status_error(
    leg: &Leg<'_>,
    method: &reqwest::Method,
    url: &Url,
    status: u16,
    body: &[u8],
) -> Error {
    let scrubber = scrub::Scrubber::new(leg.auth, leg.credentials);
    // Enough beyond the cut that a secret straddling it is still found whole.
    let head = &body[..body.len().min(ERROR_BODY_LIMIT + 4096)];
    let scrubbed = scrubber.scrub(&String::from_utf8_lossy(head));
    let mut text = truncate_lossy(scrubbed.as_bytes(), ERROR_BODY_LIMIT);
    if body.len() > head.len() && !text.ends_with("…(truncated)") {
        text.push_str("…(truncated)");
    }
    let error = Error::upstream(UpstreamFailure {
        status,
        retryable: UpstreamFailure::is_retryable_status(status),
        body: text,
        request: describe(method, url),
    });
    // An AWS XML error body names its code and message: said plainly, with the method.
    match crate::xml::aws_error(scrubbed.as_bytes()) {
        Some(aws) => error.with_note(&aws_error_note(leg.method, &aws)),
        None => error,
    }
}

/// `resource 'users', method 'list_users': AWS error AccessDenied: …`.
fn aws_error_note(method: &Method, aws: &crate::xml::AwsError) -> String {
    let resource = method
        .location
        .split_once("/x-stackQL-resources/")
        .and_then(|(_, rest)| rest.split('/').next())
        .map(|r| r.replace("~1", "/").replace("~0", "~"));
    let mut note = match resource {
        Some(resource) => format!("resource '{resource}', method '{}'", method.name),
        None => format!("method '{}'", method.name),
    };
    note.push_str(": AWS error ");
    note.push_str(&truncate_lossy(aws.code.as_bytes(), 128));
    if let Some(message) = &aws.message {
        note.push_str(": ");
        note.push_str(&truncate_lossy(message.as_bytes(), 512));
    }
    note
}

/// An error with its sources: `outer: inner: innermost`.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// `GET http://host/path` — never the query string, which may carry credentials.
pub(crate) fn describe(method: &reqwest::Method, url: &Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    format!("{method} {shown}")
}

fn truncate_lossy(body: &[u8], limit: usize) -> String {
    let cut = &body[..body.len().min(limit)];
    let mut text = String::from_utf8_lossy(cut).into_owned();
    if body.len() > limit {
        text.push_str("…(truncated)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_told_by_its_flag_not_its_text() {
        let flagged =
            Error::new(ErrorKind::UpstreamUnavailable, "upstream request failed").timed_out();
        assert_eq!(upstream_result(&flagged), UpstreamResult::Timeout);
        let worded = Error::new(
            ErrorKind::UpstreamUnavailable,
            "upstream request failed: operation timed out",
        );
        assert_eq!(upstream_result(&worded), UpstreamResult::Error);
    }
}
