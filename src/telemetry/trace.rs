//! OpenTelemetry traces: the tracer provider (OTLP over HTTP with protobuf, batch export),
//! W3C trace context taken from a call's `traceparent`, and the span of each tool call.
//!
//! Off unless `telemetry.traces` is on (see [`crate::config::TracesConfig`]): then no
//! OpenTelemetry layer is installed, the spans below are disabled (unless logs ask for
//! them) and nothing is exported.

use std::time::Duration;

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::config::TracesConfig;

use super::export::OtlpClient;

/// How long one export to the collector may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tracer provider for `config`: spans batched and sent to the OTLP endpoint. Must be
/// called on the tokio runtime (the exporter's requests run there).
pub fn provider(config: &TracesConfig) -> Result<SdkTracerProvider, String> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(OtlpClient::new(EXPORT_TIMEOUT)?);
    if let Some(endpoint) = &config.endpoint {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter
        .build()
        .map_err(|err| format!("the OTLP exporter cannot be built: {err}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if let Some(name) = &config.service_name {
        resource = resource.with_service_name(name.clone());
    } else if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("querygate");
    }
    let resource = resource
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    let mut builder = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource);
    if let Some(ratio) = config.sample_ratio {
        builder = builder.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            ratio,
        ))));
    }
    Ok(builder.build())
}

/// The `tracing` layer that turns querygate's spans into OpenTelemetry spans.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer().with_tracer(provider.tracer("querygate"))
}

/// The span of one tool call (`tool_call`): tenant and tool now; class, decision and code
/// are recorded as the call goes. With a valid W3C `traceparent` (and `tracestate`) the
/// span joins the caller's trace.
pub fn call_span(tool: &str, tenant: &str, traceparent: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        "tool_call",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        tenant = %tenant,
        tool = %tool,
        class = tracing::field::Empty,
        decision = tracing::field::Empty,
        code = tracing::field::Empty,
        trace_id = tracing::field::Empty,
    );
    if let Some(traceparent) = traceparent {
        let parent = TraceContextPropagator::new().extract(&Carrier(traceparent));
        if parent.span().span_context().is_valid() {
            // Fails only when no OpenTelemetry layer is installed: then there is no trace
            // to join.
            let _ = span.set_parent(parent);
        }
    }
    span
}

/// The trace id (32 lowercase hex digits) and span id (16) of `span`, when an OpenTelemetry
/// layer traces it.
pub fn trace_and_span_id(span: &tracing::Span) -> Option<(String, String)> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| {
        (
            span_context.trace_id().to_string(),
            span_context.span_id().to_string(),
        )
    })
}

/// The span id (the caller's span) of a W3C `traceparent`, if it is valid.
pub fn traceparent_span_id(traceparent: &str) -> Option<String> {
    let context = TraceContextPropagator::new().extract(&Carrier(traceparent));
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.span_id().to_string())
}

/// The trace id of a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), if it is valid.
pub fn traceparent_trace_id(traceparent: &str) -> Option<String> {
    let context = TraceContextPropagator::new().extract(&Carrier(traceparent));
    let span_context = context.span().span_context().clone();
    span_context
        .is_valid()
        .then(|| span_context.trace_id().to_string())
}

/// A carrier holding only a `traceparent`.
struct Carrier<'a>(&'a str);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_ids_are_checked() {
        assert_eq!(
            traceparent_trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
                .as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01x",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(traceparent_trace_id(bad), None, "{bad}");
        }
    }
}
