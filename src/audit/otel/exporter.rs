//! The OTLP/HTTP exporter of audit records: a bounded queue that never makes a caller wait
//! (a full queue drops the record and counts it), and one background task that takes what
//! is queued (up to `max_batch` records), POSTs it as one protobuf
//! `ExportLogsServiceRequest`, and retries a failed export (connection errors, timeouts,
//! 429, 502, 503, 504) with exponential back-off, waiting what a `Retry-After` asks
//! instead, until `max_elapsed` has passed since the first attempt; then the batch is
//! given up and counted as failed. Other answers (400, 401, 413…) fail the batch at once.
//! While it waits, new records queue behind it up to `queue_size`.
//!
//! Headers are credentials: only their names are ever logged.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use prost::Message as _;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::sync::mpsc;

use super::proto::{self, Entry};
pub use crate::audit::export_stats::{ExportObserver, ExportResult, ExportStats};
use crate::audit::settings::OtlpSettings;
use crate::audit::sink::AuditError;

/// The queue and the background task.
#[derive(Debug)]
pub struct Exporter {
    queue: Mutex<Option<mpsc::Sender<Entry>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    stats: Arc<ExportStats>,
    /// Records queued or being exported.
    pending: Arc<AtomicU64>,
    endpoint: String,
    timeout: Duration,
}

impl Exporter {
    /// Starts the exporter's task on the current tokio runtime. Fails on a malformed
    /// endpoint or header (naming the header, never its value).
    pub fn start(settings: &OtlpSettings) -> Result<Exporter, AuditError> {
        let unavailable = |what: String| AuditError::Unavailable(what);
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| unavailable("the OTLP export needs the tokio runtime".into()))?;
        let url = reqwest::Url::parse(&settings.endpoint)
            .map_err(|err| unavailable(format!("the OTLP logs endpoint is not a URL: {err}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(unavailable(format!(
                "the OTLP logs endpoint '{}' is not http or https",
                shown(&url)
            )));
        }
        let mut headers = HeaderMap::new();
        for (name, value) in &settings.headers {
            let header = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| unavailable(format!("OTLP header '{name}' is not a header name")))?;
            let mut value = HeaderValue::from_str(value).map_err(|_| {
                unavailable(format!(
                    "the value of OTLP header '{name}' is not a header value"
                ))
            })?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        let tls = crate::client_tls::web_pki().map_err(unavailable)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("querygate/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers)
            .build()
            .map_err(|err| unavailable(format!("HTTP client set-up failed: {err}")))?;
        let endpoint = shown(&url);
        let (sender, receiver) = mpsc::channel(settings.queue_size.max(1));
        let stats = Arc::new(ExportStats::default());
        let pending = Arc::new(AtomicU64::new(0));
        let worker = Worker {
            client,
            url,
            settings: settings.clone(),
            stats: stats.clone(),
            pending: pending.clone(),
        };
        let task = runtime.spawn(worker.run(receiver));
        Ok(Exporter {
            queue: Mutex::new(Some(sender)),
            task: Mutex::new(Some(task)),
            stats,
            pending,
            endpoint,
            timeout: settings.timeout,
        })
    }

    /// Queues a record for export without waiting: dropped (and counted) when the queue is
    /// full or the exporter stopped.
    pub fn offer(&self, entry: Entry) {
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let queued = queue.as_ref().is_some_and(|queue| {
            self.pending.fetch_add(1, Ordering::Relaxed);
            let sent = queue.try_send(entry).is_ok();
            if !sent {
                self.pending.fetch_sub(1, Ordering::Relaxed);
            }
            sent
        });
        if !queued {
            self.stats.count(ExportResult::Dropped, 1);
        }
    }

    /// The counts.
    pub fn stats(&self) -> &Arc<ExportStats> {
        &self.stats
    }

    /// Where records go (without credentials the URL may hold).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Stops taking records and exports what is queued, for at most the export timeout;
    /// what is left then is counted as dropped.
    pub async fn close(&self) {
        drop(self.queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut task) = task else {
            return;
        };
        if tokio::time::timeout(self.timeout, &mut task).await.is_err() {
            task.abort();
            let left = self.pending.swap(0, Ordering::Relaxed);
            if left > 0 {
                tracing::warn!("{left} audit records not exported at shutdown (OTLP)");
                self.stats.count(ExportResult::Dropped, left);
            }
        }
    }

    /// Records current time as OTLP nanoseconds, for `observedTimeUnixNano`.
    pub fn now_nanos() -> u64 {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or_default()
    }
}

/// The endpoint as printed: without user information or query (which may hold a
/// credential).
fn shown(url: &reqwest::Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

/// How one POST ended.
enum Sent {
    Accepted,
    /// Worth another try, after the wait the collector asked for (if it did).
    Retry(String, Option<Duration>),
    Refused(String),
}

struct Worker {
    client: reqwest::Client,
    url: reqwest::Url,
    settings: OtlpSettings,
    stats: Arc<ExportStats>,
    pending: Arc<AtomicU64>,
}

impl Worker {
    async fn run(self, mut queue: mpsc::Receiver<Entry>) {
        let max = self.settings.max_batch.max(1);
        let mut batch = Vec::with_capacity(max.min(1024));
        while let Some(first) = queue.recv().await {
            batch.push(first);
            while batch.len() < max {
                match queue.try_recv() {
                    Ok(entry) => batch.push(entry),
                    Err(_) => break,
                }
            }
            let records = batch.len() as u64;
            let result = match self.body(&batch) {
                Ok(body) => self.export(body, records).await,
                Err(err) => {
                    tracing::error!("{records} audit records not exported: {err}");
                    ExportResult::Failed
                }
            };
            self.pending.fetch_sub(records, Ordering::Relaxed);
            self.stats.count(result, records);
            batch.clear();
        }
    }

    /// The request body: protobuf, gzipped when configured.
    fn body(&self, batch: &[Entry]) -> std::io::Result<Vec<u8>> {
        let bytes = proto::request(batch).encode_to_vec();
        if !self.settings.gzip {
            return Ok(bytes);
        }
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes)?;
        gz.finish()
    }

    /// Sends one batch, retrying as the module says.
    async fn export(&self, body: Vec<u8>, records: u64) -> ExportResult {
        let started = Instant::now();
        let mut backoff = self.settings.initial_backoff;
        let body = bytes::Bytes::from(body);
        loop {
            let (why, wait) = match self.send(body.clone()).await {
                Sent::Accepted => return ExportResult::Exported,
                Sent::Refused(why) => {
                    tracing::warn!("{records} audit records refused by the OTLP collector: {why}");
                    return ExportResult::Failed;
                }
                Sent::Retry(why, asked) => (why, asked.unwrap_or(backoff)),
            };
            if started.elapsed() + wait > self.settings.max_elapsed {
                tracing::warn!(
                    "{records} audit records not exported after {:?}: {why}",
                    started.elapsed()
                );
                return ExportResult::Failed;
            }
            tracing::debug!("OTLP audit export failed ({why}); again in {wait:?}");
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(self.settings.max_backoff);
        }
    }

    async fn send(&self, body: bytes::Bytes) -> Sent {
        let mut request = self
            .client
            .post(self.url.clone())
            .header("content-type", "application/x-protobuf")
            .body(body);
        if self.settings.gzip {
            request = request.header("content-encoding", "gzip");
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(err) => return Sent::Retry(without_url(err), None),
        };
        let status = response.status();
        if status.is_success() {
            return Sent::Accepted;
        }
        match status.as_u16() {
            429 | 502 | 503 | 504 => Sent::Retry(
                format!("HTTP {status}"),
                response
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(retry_after),
            ),
            _ => Sent::Refused(format!("HTTP {status}")),
        }
    }
}

/// An HTTP client error without the URL (which may carry a credential in its query).
fn without_url(err: reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    format!("{kind}: {}", err.without_url())
}

/// The wait a `Retry-After` asks for: delay-seconds or an HTTP date.
pub fn retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_is_shown_without_credentials() {
        let url = reqwest::Url::parse("https://user:pw@collector:4318/v1/logs?token=s").unwrap();
        assert_eq!(shown(&url), "https://collector:4318/v1/logs");
    }

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(" 0 "), Some(Duration::ZERO));
        let later = SystemTime::now() + Duration::from_secs(120);
        let wait = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
        assert_eq!(
            retry_after(&httpdate::fmt_http_date(SystemTime::UNIX_EPOCH)),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[derive(Debug, Default)]
    struct Seen(Mutex<Vec<(ExportResult, u64)>>);

    impl ExportObserver for Seen {
        fn audit_export(&self, result: ExportResult, records: u64) {
            self.0.lock().unwrap().push((result, records));
        }
    }

    #[test]
    fn counts_before_an_observer_are_told_to_it() {
        let stats = ExportStats::default();
        stats.count(ExportResult::Dropped, 2);
        let seen = Arc::new(Seen::default());
        stats.observe(seen.clone());
        stats.count(ExportResult::Exported, 3);
        assert_eq!(
            *seen.0.lock().unwrap(),
            vec![
                (ExportResult::Exported, 0),
                (ExportResult::Dropped, 2),
                (ExportResult::Failed, 0),
                (ExportResult::Exported, 3),
            ]
        );
        assert_eq!(stats.get(ExportResult::Exported), 3);
    }
}
