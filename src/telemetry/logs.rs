//! The process's `tracing` subscriber: log lines on stderr (`log.format` text or JSON,
//! filtered by `QUERYGATE_LOG`, else `log.level`, without rmcp's reports of clients that went
//! away: see `client_gone`), plus the OpenTelemetry layer when traces
//! are on. Installed once, by the CLI, after the configuration is loaded.
//!
//! JSON lines carry the call's `trace_id` (when it has one) and the event's fields at the top
//! level, and the spans it happened in under `spans` (the tool call's span holds `tenant`,
//! `tool`, `class`, `decision`, `code` and `trace_id`). Credentials never reach a field: requests' sensitive headers are marked, the
//! engine logs no header or query values, and the spans carry names, not values.

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{EnvFilter, FilterExt as _, Targets};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

use super::client_gone::DropClientGone;
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
    let filter = EnvFilter::try_from_env("QUERYGATE_LOG")
        .or_else(|_| EnvFilter::try_new(&log.level))
        .unwrap_or_else(|_| EnvFilter::new("warn"))
        .and(DropClientGone)
        .and(tracing_subscriber::filter::filter_fn(|metadata| {
            loggable_target(metadata.target())
        }));
    // Colours only for a terminal (not for log files, pipes or a desktop client's log).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let lines = match log.format {
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
    };
    let provider = traces.map(super::trace::provider).transpose()?;
    // querygate's own spans (tool calls, upstream requests, SQLite evaluations) at INFO.
    let spans = provider.as_ref().map(|provider| {
        super::trace::layer(provider)
            .with_filter(Targets::new().with_target("querygate", Level::INFO))
    });
    tracing_subscriber::registry()
        .with(lines)
        .with(spans)
        .try_init()
        .map_err(|err| format!("cannot install the log subscriber: {err}"))?;
    Ok(Telemetry { provider })
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
    use super::trace_id_of;

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
