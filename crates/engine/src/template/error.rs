//! Why a template did not parse or did not run.

/// A template failure: where (the line of the action) and what, in Go's words where Go has
/// them (`function "x" not defined`, `error calling index: …`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TemplateError {
    /// The template does not parse.
    #[error("template does not parse: line {line}: {message}")]
    Parse { line: usize, message: String },
    /// The template failed while running over a response.
    #[error("template failed: line {line}: {message}")]
    Exec { line: usize, message: String },
    /// The template ran past its step or output bound.
    #[error("template stopped: {0}")]
    Limit(String),
}

impl TemplateError {
    pub(super) fn parse(line: usize, message: impl Into<String>) -> Self {
        TemplateError::Parse {
            line,
            message: message.into(),
        }
    }

    pub(super) fn exec(line: usize, message: impl Into<String>) -> Self {
        TemplateError::Exec {
            line,
            message: message.into(),
        }
    }
}
