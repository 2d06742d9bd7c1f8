//! The `message` and `error` fields of a log event, as text: what the filters that leave out
//! rmcp's expected warnings (`client_gone`, `url_elicitation`) look at.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};

/// The `message` and `error` fields of an event, as text.
#[derive(Default)]
pub(super) struct Fields {
    /// The `message` field.
    pub(super) message: String,
    /// The `error` field.
    pub(super) error: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            "error" => self.error.push_str(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = match field.name() {
            "message" => write!(self.message, "{value:?}"),
            "error" => write!(self.error, "{value:?}"),
            _ => Ok(()),
        };
    }
}
