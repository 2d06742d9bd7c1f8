//! Which transport serves the calls: a leaf the handler, the tools and the pipeline all read.

/// Which transport serves the calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Streamable HTTP.
    Http,
    /// Newline-delimited JSON-RPC on stdin/stdout.
    Stdio,
    /// `querygate query` and `querygate registry pull`: one call of the local user.
    Cli,
}

impl Transport {
    /// `http` or `stdio`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Stdio => "stdio",
            Transport::Cli => "cli",
        }
    }
}
