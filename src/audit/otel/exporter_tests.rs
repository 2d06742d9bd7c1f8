//! The exporter against a collector on 127.0.0.1 that answers with a fixed status: what is
//! retried, what is given up, and how each ends in the counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::exporter::{ExportResult, Exporter};
use super::proto::Entry;
use crate::audit::record::AuditRecord;
use crate::audit::settings::OtlpSettings;

/// A collector answering every request with `status` (and `Retry-After: 0`); counts them.
async fn collector(status: &'static str) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicU64::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buffer = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buffer[..n]);
                    // One request per connection is enough here: answer once the headers
                    // and the declared body are in.
                    let text = String::from_utf8_lossy(&seen);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            counted.fetch_add(1, Ordering::SeqCst);
                            let answer = format!(
                                "HTTP/1.1 {status}\r\nretry-after: 0\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                            );
                            let _ = socket.write_all(answer.as_bytes()).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (format!("http://{addr}/v1/logs"), requests)
}

fn settings(endpoint: String) -> OtlpSettings {
    OtlpSettings {
        endpoint,
        headers: vec![("authorization".into(), "Bearer secret".into())],
        timeout: Duration::from_secs(10),
        gzip: true,
        queue_size: 8,
        max_batch: 8,
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(2),
        max_elapsed: Duration::from_millis(200),
    }
}

fn entry(seq: u64) -> Entry {
    Entry {
        record: AuditRecord {
            tool: "server_info".into(),
            ..Default::default()
        },
        stream: "r1".into(),
        seq,
        prev_hash: None,
        hash: "ab".repeat(32),
        mac: None,
        observed: 1,
    }
}

/// Waits until `result` counts `n` (the exporter's task runs on its own).
async fn counted(exporter: &Exporter, result: ExportResult, n: u64) {
    for _ in 0..2000 {
        if exporter.stats().get(result) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "{} never reached {n}: {}",
        result.as_str(),
        exporter.stats().get(result)
    );
}

#[tokio::test]
async fn a_refusal_fails_the_batch_at_once() {
    let (endpoint, requests) = collector("400 Bad Request").await;
    let exporter = Exporter::start(&settings(endpoint)).unwrap();
    exporter.offer(entry(1));
    exporter.offer(entry(2));
    counted(&exporter, ExportResult::Failed, 2).await;
    assert_eq!(exporter.stats().get(ExportResult::Exported), 0);
    assert!(requests.load(Ordering::SeqCst) <= 2, "not retried");
    exporter.close().await;
}

#[tokio::test]
async fn unavailable_is_retried_until_given_up() {
    let (endpoint, requests) = collector("503 Service Unavailable").await;
    let exporter = Exporter::start(&settings(endpoint)).unwrap();
    exporter.offer(entry(1));
    counted(&exporter, ExportResult::Failed, 1).await;
    assert!(requests.load(Ordering::SeqCst) >= 2, "retried");
    exporter.close().await;
    exporter.offer(entry(2));
    assert_eq!(
        exporter.stats().get(ExportResult::Dropped),
        1,
        "closed: dropped"
    );
}

#[tokio::test]
async fn accepted_batches_are_counted_as_exported() {
    let (endpoint, requests) = collector("200 OK").await;
    let exporter = Exporter::start(&settings(endpoint)).unwrap();
    for seq in 1..=5 {
        exporter.offer(entry(seq));
    }
    counted(&exporter, ExportResult::Exported, 5).await;
    assert!(requests.load(Ordering::SeqCst) >= 1);
    exporter.close().await;
}
