//! Captures every tracing event and span (all levels) the process emits, so tests can
//! search the logs for secrets.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber, span};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

type Lines = Arc<Mutex<Vec<String>>>;

static LINES: OnceLock<Lines> = OnceLock::new();

/// Installs the recorder (once per process) and returns the recorded lines.
pub fn capture() -> Lines {
    LINES
        .get_or_init(|| {
            let lines: Lines = Arc::default();
            let subscriber = tracing_subscriber::registry().with(Recorder(lines.clone()));
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in the test binary");
            lines
        })
        .clone()
}

/// Every line recorded so far.
pub fn recorded() -> String {
    capture().lock().unwrap().join("\n")
}

struct Recorder(Lines);

struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        // As the server's own log filter does (src/telemetry/logs.rs).
        if !querygate::telemetry::logs::loggable_target(event.metadata().target()) {
            return;
        }
        let mut text = Text(format!(
            "{} {}",
            event.metadata().level(),
            event.metadata().target()
        ));
        event.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, _: &span::Id, _: Context<'_, S>) {
        let mut text = Text(format!("span {}", attrs.metadata().name()));
        attrs.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }

    fn on_record(&self, _: &span::Id, values: &span::Record<'_>, _: Context<'_, S>) {
        let mut text = Text("span record".to_owned());
        values.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
}
