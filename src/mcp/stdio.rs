//! `querygate stdio`: newline-delimited JSON-RPC on stdin/stdout for desktop clients.
//! Only protocol goes to stdout; logs go to stderr.

use rmcp::ServiceExt as _;

use super::QuerygateMcp;

/// Why the stdio session ended badly.
#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    /// The transport failed.
    #[error("stdio transport failed: {0}")]
    Transport(String),
}

/// Serves one session on stdin/stdout until the client closes stdin.
pub async fn serve(handler: QuerygateMcp) -> Result<(), StdioError> {
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|err| StdioError::Transport(err.to_string()))?;
    running
        .waiting()
        .await
        .map_err(|err| StdioError::Transport(err.to_string()))?;
    Ok(())
}
