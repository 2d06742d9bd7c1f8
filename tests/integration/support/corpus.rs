//! Engines over the real provider documents of the corpus, and row and cell text for
//! assertions.

use std::path::PathBuf;
use std::sync::Arc;

use querygate::engine::{Cell, CredentialStore, Engine, EngineConfig, ExecContext, QueryOutput};
use serde_json::json;

use crate::mock::Mock;

/// The folder of real provider documents used by the corpus and the compatibility tests.
pub fn providers_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers")
}

/// An engine over the real documents whose providers all call `mock`.
pub fn providers_engine(mock: &Mock) -> Engine {
    let mut config = EngineConfig::new(providers_root());
    config.upstream.retry.initial_backoff = std::time::Duration::from_millis(10);
    for provider in [
        "github",
        "okta",
        "google",
        "digitalocean",
        "stackql_native_test",
    ] {
        crate::support::upstream_at(&mut config, provider, mock.url());
    }
    // google's document asks for service_account auth; an operator's override stands in.
    config
        .providers
        .entry("google".to_owned())
        .or_default()
        .auth = Some(json!({"type": "bearer", "credentialsenvvar": "GOOGLE_TOKEN"}));
    Engine::new(config).expect("engine")
}

/// Credentials for every provider of the corpus.
pub fn providers_context() -> ExecContext {
    let vars = [
        ("GITHUB_CREDS", "dXNlcjpwYXNz"),
        ("OKTA_SECRET_KEY", "okta-key"),
        ("GOOGLE_TOKEN", "google-token"),
        ("DIGITALOCEAN_TOKEN", "do-token"),
    ];
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed(
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )),
        ..ExecContext::anonymous_default()
    }
}

/// A cell as the corpus spells it: text as is, numbers in decimal, `NULL`.
pub fn cell_text(cell: &Cell) -> String {
    match cell {
        Cell::Null => "NULL".to_owned(),
        Cell::Boolean(b) => b.to_string(),
        Cell::Integer(i) => i.to_string(),
        Cell::Real(r) => r.to_string(),
        Cell::Text(s) => s.clone(),
        Cell::Blob(b) => format!("<{} bytes>", b.len()),
    }
}

/// Rows as `a|b` lines.
pub fn row_lines(out: &QueryOutput) -> Vec<String> {
    out.rows
        .iter()
        .map(|r| r.iter().map(cell_text).collect::<Vec<_>>().join("|"))
        .collect()
}
