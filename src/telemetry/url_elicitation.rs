//! rmcp's warning for each URL-mode elicitation querygate sends.
//!
//! With `approval.url_elicitation`, a client of MCP 2025-11-25 (or older) over stateless
//! HTTP whose call goes out of band gets the JSON-RPC error -32042 (URL elicitation
//! required) pointing at the approval page, on every such call: such requests declare no
//! capabilities, so no client can say it takes URL mode. rmcp logs every error response it
//! sends at WARN (`response error`, with the whole payload), so each of these calls, which
//! is querygate working as configured, was a warning. These events are left out of the log
//! lines; querygate logs the elicitation itself at DEBUG (`mcp::handler`), and the call's
//! outcome is in the audit (`needs_approval_requested`, `policy.approval_pending`).
//! rmcp's warnings about other error responses are kept.

use tracing::{Event, Level, Metadata};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

use super::event_fields::Fields;

/// The target rmcp's per-request service logs under.
const TARGET: &str = "rmcp::service";

/// rmcp's message for an error response it sends.
const MESSAGE: &str = "response error";

/// How the `error` field of such an event names the code of a URL-mode elicitation
/// (`ErrorData`'s `Debug`).
const URL_ELICITATION_REQUIRED: &str = "code: ErrorCode(-32042)";

/// A per-layer filter that drops rmcp's warning for each URL-mode elicitation sent and
/// passes every other event and span.
#[derive(Clone, Copy, Debug, Default)]
pub struct DropUrlElicitationWarning;

impl<S> Filter<S> for DropUrlElicitationWarning {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        !is_url_elicitation_warning(event)
    }

    /// Passes every level, so beside another filter that one's hint stands.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}

/// Whether `event` is rmcp's warning that it sent a URL-mode elicitation (error -32042).
fn is_url_elicitation_warning(event: &Event<'_>) -> bool {
    let metadata = event.metadata();
    if *metadata.level() != Level::WARN || metadata.target() != TARGET {
        return false;
    }
    let mut fields = Fields::default();
    event.record(&mut fields);
    fields.message == MESSAGE && fields.error.contains(URL_ELICITATION_REQUIRED)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use rmcp::model::{ErrorCode, ErrorData};
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Records the `error` field of every event that reaches it.
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.error);
        }
    }

    fn seen_of(emit: impl FnOnce()) -> Vec<String> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry()
            .with(Seen(seen.clone()).with_filter(DropUrlElicitationWarning));
        tracing::subscriber::with_default(subscriber, emit);
        Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
    }

    #[test]
    fn only_rmcps_warning_of_a_url_elicitation_is_dropped() {
        let url = ErrorData::new(ErrorCode(-32042), "approval 4f is pending", None);
        let params = ErrorData::invalid_params("row_limit: must be a whole number ≥ 0", None);
        let seen = seen_of(|| {
            // As rmcp's service logs an error response (`tracing::warn!(%id, ?error, …)`).
            tracing::warn!(target: "rmcp::service", id = 2, error = ?url, "response error");
            // Kept: another error, another message, another level, another target.
            tracing::warn!(target: "rmcp::service", id = 3, error = ?params, "response error");
            tracing::warn!(target: "rmcp::service", id = 4, error = ?url, "rejected peer request");
            tracing::error!(target: "rmcp::service", id = 5, error = ?url, "response error");
            tracing::warn!(target: "querygate::mcp", id = 6, error = ?url, "response error");
        });
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(seen[0].contains("ErrorCode(-32602)"), "{seen:?}");
        assert!(
            seen[1..]
                .iter()
                .all(|error| error.contains(URL_ELICITATION_REQUIRED)),
            "{seen:?}"
        );
    }
}
