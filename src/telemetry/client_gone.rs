//! rmcp's reports of an HTTP client that went away before its response.
//!
//! Over stateless streamable HTTP, rmcp hands each response to the HTTP response through a
//! channel. When the client has disconnected (a cancelled call, a load generator that
//! stopped, a proxy that timed out), that channel is closed and rmcp logs `fail to response
//! message` or `failed to send pending response during drain` at ERROR with `error=channel
//! closed`. Nothing failed on the server's side, and the call's own outcome is already
//! recorded (`call.cancelled` in the audit and in the tool call's span), so these events are
//! left out of the log lines: an ERROR line stays something an operator should look at.

use tracing::{Event, Level, Metadata};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Filter};

use super::event_fields::Fields;

/// The target rmcp's per-request service logs under.
const TARGET: &str = "rmcp::service";

/// The messages rmcp logs when a response cannot be handed over.
const MESSAGES: [&str; 2] = [
    "fail to response message",
    "failed to send pending response during drain",
];

/// How a closed response channel reads (tokio's `SendError`).
const CLOSED: &str = "channel closed";

/// A per-layer filter that drops rmcp's reports of a client that went away and passes every
/// other event and span.
#[derive(Clone, Copy, Debug, Default)]
pub struct DropClientGone;

impl<S> Filter<S> for DropClientGone {
    fn enabled(&self, _: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        true
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        !is_client_gone(event)
    }

    /// Passes every level, so beside another filter that one's hint stands.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}

/// Whether `event` is rmcp reporting a response it could not hand to a client that is gone.
fn is_client_gone(event: &Event<'_>) -> bool {
    let metadata = event.metadata();
    if *metadata.level() != Level::ERROR || metadata.target() != TARGET {
        return false;
    }
    let mut fields = Fields::default();
    event.record(&mut fields);
    fields.error == CLOSED && MESSAGES.contains(&fields.message.as_str())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};

    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// Records the message of every event that reaches it.
    struct Seen(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> Layer<S> for Seen {
        fn on_event(&self, event: &Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.message);
        }
    }

    fn seen_of(emit: impl FnOnce()) -> Vec<String> {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber =
            tracing_subscriber::registry().with(Seen(seen.clone()).with_filter(DropClientGone));
        tracing::subscriber::with_default(subscriber, emit);
        Arc::try_unwrap(seen).unwrap().into_inner().unwrap()
    }

    #[test]
    fn only_rmcps_reports_of_a_closed_response_channel_are_dropped() {
        let closed = tokio::sync::mpsc::error::SendError(());
        assert_eq!(closed.to_string(), CLOSED, "tokio's wording");
        let seen = seen_of(|| {
            tracing::error!(target: "rmcp::service", error = %closed, "fail to response message");
            tracing::error!(
                target: "rmcp::service",
                error = %closed,
                "failed to send pending response during drain"
            );
            // Kept: another error, another message, another target, another level.
            tracing::error!(target: "rmcp::service", error = "broken pipe", "fail to response message");
            tracing::error!(target: "rmcp::service", error = %closed, "response send task failed during drain");
            tracing::error!(target: "querygate::http", error = %closed, "fail to response message");
            tracing::warn!(target: "rmcp::service", error = %closed, "fail to response message");
        });
        assert_eq!(
            seen,
            [
                "fail to response message",
                "response send task failed during drain",
                "fail to response message",
                "fail to response message",
            ]
        );
    }
}
