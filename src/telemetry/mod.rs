//! Telemetry: what operators see of a running querygate.
//!
//! - [`metrics`]: the Prometheus metrics of docs/deployment.md, one registry per server,
//!   fed by the tool-call pipeline, the engine's upstream observer and the audit's write
//!   observer; served at `/metrics`.
//! - [`logs`]: the process's log output (`log.format` text or JSON, `log.level`), with the
//!   OpenTelemetry layer when traces are on; [`client_gone`] keeps rmcp's reports of a
//!   client that disconnected before its response out of it, and [`url_elicitation`] its
//!   warning for each URL-mode elicitation sent.
//! - [`trace`]: OpenTelemetry traces exported over OTLP/HTTP (protobuf): the tracer
//!   provider, W3C `traceparent` propagation, the span of each tool call.
//! - [`export`]: the OTLP exporter's HTTP client (our reqwest client, ring TLS).
//!
//! Nothing here is needed for a call to run; the engine and the audit know only their own
//! observer traits, which [`metrics::Metrics`] implements.

pub mod client_gone;
mod event_fields;
pub mod export;
pub mod logs;
pub mod metrics;
pub mod trace;
pub mod url_elicitation;

pub use metrics::Metrics;
