//! The process's `tracing` subscriber: log lines on stderr (`log.format` text or JSON,
//! filtered by `QUERYGATE_LOG`, else `log.level`, without rmcp's reports of clients that went
//! away, see `client_gone`, nor its warning for each URL-mode elicitation sent, see
//! `url_elicitation`), plus the OpenTelemetry layer when traces
//! are on. Installed once, by the CLI, after the configuration is loaded.
//!
//! JSON lines carry the call's `trace_id` (when it has one) and the event's fields at the top
//! level, and the spans it happened in under `spans` (the tool call's span holds `tenant`,
//! `tool`, `class`, `decision`, `code` and `trace_id`). Credentials never reach a field: requests' sensitive headers are marked, the
//! engine logs no header or query values, and the spans carry names, not values.

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer as _;
use tracing_subscriber::Registry;
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, LevelFilter, Targets};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use super::client_gone::DropClientGone;
use super::url_elicitation::DropUrlElicitationWarning;
use crate::config::{LogConfig, LogFormat, TracesConfig};

/// Targets whose events are never logged, at any level: `aws_sigv4` traces the canonical
/// request it signs, which holds the session token (`x-amz-security-token`).
pub const SECRET_BEARING_TARGETS: &[&str] = &["aws_sigv4"];

/// Whether events of `target` may be logged (see [`SECRET_BEARING_TARGETS`]).
pub fn loggable_target(target: &str) -> bool {
    !SECRET_BEARING_TARGETS
        .iter()
        .any(|t| target == *t || target.starts_with(&format!("{t}::")))
}

/// Keeps the trace exporter alive; [`Telemetry::shutdown`] sends the spans still queued.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether traces are exported.
    pub fn tracing(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans still queued and stops the exporter.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            let flushed = tokio::task::spawn_blocking(move || provider.shutdown()).await;
            if let Ok(Err(err)) = flushed {
                eprintln!("querygate: warning: the last traces could not be exported: {err}");
            }
        }
    }
}

/// Installs the subscriber for `log` (and `traces`, when on). Fails when traces cannot be
/// set up or a subscriber is installed already.
pub fn init(log: &LogConfig, traces: Option<&TracesConfig>) -> Result<Telemetry, String> {
    let provider = traces.map(super::trace::provider).transpose()?;
    let level = EnvFilter::try_from_env("QUERYGATE_LOG")
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    install(log.format, level, provider.as_ref())?;
    Ok(Telemetry { provider })
}

/// Installs [`subscriber`] as the process's subscriber.
fn install(
    format: LogFormat,
    level: EnvFilter,
    provider: Option<&SdkTracerProvider>,
) -> Result<(), String> {
    subscriber(format, level, provider)
        .try_init()
        .map_err(|err| format!("cannot install the log subscriber: {err}"))
}

/// The subscriber [`init`] installs: log lines in `format` on stderr at `level`, and
/// querygate's own spans (tool calls, upstream requests, SQLite evaluations, at INFO) to
/// `provider`'s exporter.
///
/// Without traces the registry holds the line layer alone, so a span or event its filter
/// refuses is never built. (An absent layer beside it, `Option::None`, with a filter that
/// states no level, let every span of rmcp, tower-http and querygate be built, entered and
/// closed for no layer.)
fn subscriber(
    format: LogFormat,
    level: EnvFilter,
    provider: Option<&SdkTracerProvider>,
) -> Box<dyn Subscriber + Send + Sync> {
    let lines = lines(format, level);
    match provider {
        Some(provider) => Box::new(
            tracing_subscriber::registry().with(lines).with(
                super::trace::layer(provider)
                    .with_filter(Targets::new().with_target("querygate", Level::INFO)),
            ),
        ),
        None => Box::new(tracing_subscriber::registry().with(lines)),
    }
}

/// The layer that writes log lines in `format` to stderr at `level`, without rmcp's reports
/// of clients that went away or of URL-mode elicitations sent, and without secret-bearing
/// targets.
fn lines(
    format: LogFormat,
    level: EnvFilter,
) -> Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync> {
    let filter = level
        .and(DropClientGone)
        .and(DropUrlElicitationWarning)
        .and(
            // No opinion on levels: the level filter's hint stands, so disabled levels are
            // skipped where they are written.
            tracing_subscriber::filter::filter_fn(|metadata| loggable_target(metadata.target()))
                .with_max_level_hint(LevelFilter::TRACE),
        );
    // Colours only for a terminal (not for log files, pipes or a desktop client's log).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(colour)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => {
            let json = tracing_subscriber::fmt::format()
                .json()
                .flatten_event(true)
                .with_current_span(false)
                .with_span_list(true);
            tracing_subscriber::fmt::layer()
                .fmt_fields(JsonFields::new())
                .event_format(WithTraceId(json))
                .with_writer(std::io::stderr)
                .with_filter(filter)
                .boxed()
        }
    }
}

/// A JSON event format that puts the `trace_id` of the innermost span recording one (the
/// tool call's) first in the line, for log collectors that join logs to traces.
struct WithTraceId<F>(F);

impl<S, F> FormatEvent<S, JsonFields> for WithTraceId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    F: FormatEvent<S, JsonFields>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let trace_id = ctx.event_scope().and_then(|scope| {
            scope.into_iter().find_map(|span| {
                let extensions = span.extensions();
                let fields = extensions.get::<FormattedFields<JsonFields>>()?;
                trace_id_of(fields.as_str())
            })
        });
        let Some(trace_id) = trace_id else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => write!(writer, "{{\"trace_id\":\"{trace_id}\",{rest}"),
            None => writer.write_str(&line),
        }
    }
}

/// The `trace_id` in a span's JSON fields: 32 hex digits, as the pipeline records it.
fn trace_id_of(fields: &str) -> Option<String> {
    const KEY: &str = "\"trace_id\":\"";
    let start = fields.find(KEY)? + KEY.len();
    let id = fields.get(start..start + 32)?;
    (id.bytes().all(|b| b.is_ascii_hexdigit()) && fields[start + 32..].starts_with('"'))
        .then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tracing::{Level, Subscriber as _};
    use tracing_subscriber::filter::{EnvFilter, LevelFilter};

    use super::{LogFormat, install, subscriber, trace_id_of};

    /// Set in the process the test below runs its check in.
    const CHILD: &str = "QUERYGATE_TEST_PROCESS_SUBSCRIBER";

    /// The server's own subscriber, at the default level, without traces, installed as the
    /// process's. The check runs in a process of its own: a process has one subscriber, and
    /// `tracing` caches each callsite's interest across every subscriber alive in it, so the
    /// other tests' subscribers would decide what this one builds.
    #[test]
    fn without_traces_the_server_builds_no_span_and_sends_no_event_its_log_level_refuses() {
        if std::env::var_os(CHILD).is_some() {
            return process_subscriber_check();
        }
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "telemetry::logs::tests::without_traces_the_server_builds_no_span_and_sends_no_event_its_log_level_refuses",
                "--test-threads=1",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && report.contains("1 passed"),
            "{report}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn process_subscriber_check() {
        install(LogFormat::Text, EnvFilter::new("warn"), None).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        runtime.block_on(async {
            tokio::spawn(async {
                // rmcp's span of each stateless request, tower-http's of each HTTP request,
                // the tool call's.
                let spans = [
                    tracing::info_span!(target: "rmcp::service", "serve_inner"),
                    tracing::debug_span!(target: "tower_http::trace::make_span", "request"),
                    tracing::info_span!(target: "querygate::telemetry::trace", "tool_call"),
                ];
                for span in spans {
                    assert!(span.is_disabled(), "{span:?} was built");
                }
                assert!(!tracing::enabled!(target: "rmcp::service", Level::DEBUG));
                assert!(tracing::enabled!(target: "querygate::http", Level::WARN));
            })
            .await
            .unwrap();
        });
        assert_eq!(LevelFilter::current(), LevelFilter::WARN);
    }

    #[test]
    fn the_subscriber_states_its_log_level_so_disabled_levels_are_skipped_where_written() {
        for (level, hint) in [
            ("warn", LevelFilter::WARN),
            ("querygate=debug,info", LevelFilter::DEBUG),
        ] {
            let subscriber = subscriber(LogFormat::Text, EnvFilter::new(level), None);
            assert_eq!(subscriber.max_level_hint(), Some(hint), "{level}");
        }
    }

    #[test]
    fn trace_ids_are_read_from_span_fields() {
        let id = "4bf92f3577b34da6a3ce929d0e0e4736";
        assert_eq!(
            trace_id_of(&format!("{{\"tool\":\"x\",\"trace_id\":\"{id}\"}}")).as_deref(),
            Some(id)
        );
        assert_eq!(trace_id_of("{\"tool\":\"x\"}"), None);
        assert_eq!(trace_id_of("{\"trace_id\":\"4bf9\"}"), None);
    }
}
