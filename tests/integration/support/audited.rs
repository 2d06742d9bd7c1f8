//! An in-process server whose tool calls are audited by a sink the test holds, and readers
//! of the records it wrote.

use std::path::Path;
use std::sync::Arc;

use querygate::audit::chain::Stored;
use querygate::audit::file::{FileSink, FileSinkConfig};
use querygate::audit::format::parse_line;
use querygate::audit::{Auditor, FailureMode, FileLocation, location};
use querygate::config::{Config, Sources};
use tokio_util::sync::CancellationToken;

use crate::mcp_support::{install_crypto_provider, test_config};
use crate::mock::Mock;

/// An in-process server whose tool calls are audited by `auditor`.
pub struct AuditedServer {
    pub url: String,
    pub mock: Mock,
    _dir: tempfile::TempDir,
    shutdown: CancellationToken,
}

impl Drop for AuditedServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

pub async fn start(mode: &str, server_extra: &str, auditor: Auditor) -> AuditedServer {
    install_crypto_provider();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = test_config(&mock, dir.path(), mode, server_extra);
    let config = Config::load(&Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::builder(config)
        .audit(Some(auditor))
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    AuditedServer {
        url,
        mock,
        _dir: dir,
        shutdown,
    }
}

pub fn file_auditor(dir: &Path, mode: FailureMode) -> (Auditor, Arc<FileSink>) {
    let sink = Arc::new(
        FileSink::start(FileSinkConfig {
            location: FileLocation::Dir(dir.to_owned()),
            stream: "r1".into(),
            max_size: 0,
            max_files: 0,
            max_age: None,
            mac_key: None,
            format: querygate::audit::Format::Jsonl,
        })
        .unwrap(),
    );
    (Auditor::new(sink.clone(), mode, "r1", None), sink)
}

/// Every record in the files of `dir`, in order.
pub fn records(dir: &Path) -> Vec<Stored> {
    let files = location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap();
    let mut out = Vec::new();
    for file in files {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            out.push(parse_line(line).expect("an intact record").stored);
        }
    }
    out
}

pub fn summary(r: &Stored) -> String {
    format!(
        "{} {} {} {} {}",
        r.record.phase.as_str(),
        r.record.tool,
        r.record.decision.as_str(),
        r.record.outcome.map(|o| o.as_str()).unwrap_or("-"),
        r.record.error_code.as_deref().unwrap_or("-")
    )
}

/// The outcome record (as JSON) of the last call whose SQL is `sql`, from the audit files
/// of `dir/audit` (a served test's folder).
pub fn outcome_json(dir: &Path, sql: &str) -> serde_json::Value {
    let location = FileLocation::Dir(dir.join("audit"));
    let mut records = Vec::new();
    for file in location::files_of(&location).unwrap() {
        let text = std::fs::read_to_string(file).unwrap();
        records.extend(
            text.lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()),
        );
    }
    records
        .into_iter()
        .rev()
        .find(|r| r["phase"] == "outcome" && r["sql"] == sql)
        .unwrap_or_else(|| panic!("no outcome record for {sql}"))
}
