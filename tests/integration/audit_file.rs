//! The audit file sink, as the server uses it: records durable before `write` returns, with
//! private permissions, chained across concurrent writers, rotations and restarts; a
//! location that fails and comes back; `kill -9` under load; `querygate audit verify|tail`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use querygate::audit::file::{FileSink, FileSinkConfig};
use querygate::audit::record::{self, class};
use querygate::audit::verify::verify_files;
use querygate::audit::{
    AuditRecord, AuditSink, Auditor, Decision, FailureMode, FileLocation, OnFailure, Outcome,
    Phase, location,
};

use crate::support::querygate_command;

pub fn record(tool: &str, n: usize) -> AuditRecord {
    AuditRecord {
        timestamp: record::timestamp_now(),
        phase: Phase::Outcome,
        call_id: format!("call-{n}"),
        tenant: "acme".into(),
        principal: "alice".into(),
        auth_method: "jwt".into(),
        tool: tool.into(),
        mode: "safe".into(),
        decision: Decision::Allow,
        query_class: Some(class::SELECT.into()),
        sql: Some(format!("SELECT {n} FROM testapi.items.items")),
        outcome: Some(Outcome::Ok),
        duration_ms: Some(3),
        rows_returned: Some(1),
        ..Default::default()
    }
}

fn dir_sink(dir: &Path) -> FileSink {
    FileSink::start(FileSinkConfig {
        location: FileLocation::Dir(dir.to_owned()),
        stream: "r1".into(),
        max_size: 0,
        max_files: 0,
        max_age: None,
        mac_key: None,
        format: querygate::audit::Format::Jsonl,
    })
    .expect("start the file sink")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap()
}

/// Appends the start of a record of stream `r2` to `file`, as a writer that died mid-write
/// leaves it.
fn append_torn_line(file: &Path) {
    let mut torn = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    std::io::Write::write_all(&mut torn, b"{\"v\":1,\"stream\":\"r2\",\"se").unwrap();
}

#[tokio::test]
async fn a_record_is_on_disk_with_private_permissions_when_write_returns() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("nested/audit");
    let sink = dir_sink(&dir);
    let name = sink
        .first_file()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // One file per UTC day, created with the first record.
    assert!(
        name.starts_with("querygate_audit_") && name.ends_with(".log") && name.len() == 28,
        "{name}"
    );
    assert!(!sink.first_file().exists(), "no file before a record");
    let receipt = sink.write(record("run_select_query", 1)).await.unwrap();
    assert_eq!(receipt.seq, 1);
    // Read through a new handle: the line is in the file, with its hash.
    let text = std::fs::read_to_string(sink.first_file()).unwrap();
    assert!(
        text.ends_with(&format!("\"hash\":\"{}\"}}\n", receipt.hash)),
        "{text}"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(sink.first_file()), 0o600);
    assert_eq!(mode(&dir), 0o700);
    let value: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    for field in [
        "timestamp",
        "tool",
        "mode",
        "decision",
        "query_class",
        "sql",
        "duration_ms",
    ] {
        assert!(value.get(field).is_some(), "{field} missing: {value}");
    }
    sink.close().await;
}

#[tokio::test]
async fn concurrent_writers_share_fsyncs_and_the_chain_stays_linear() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Arc::new(dir_sink(dir.path()));
    let writes = (0..300).map(|n| {
        let sink = sink.clone();
        tokio::spawn(async move { sink.write(record("run_select_query", n)).await })
    });
    let mut seqs: Vec<u64> = futures::future::join_all(writes)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap().seq)
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=300).collect::<Vec<u64>>());
    sink.close().await;
    let report = verify_files(&files(dir.path())).unwrap();
    assert!(report.ok(), "{}", report.render());
    assert_eq!(report.records, 300);
}

/// Writers that each wait for their record before sending the next (as calls do), at the
/// concurrencies of the peer bench: every answer comes after the record is in the file
/// (durable: the writer syncs before it answers), no record is lost or written twice, and
/// the chain stays linear whatever batches the group commit cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_loop_writers_find_their_record_in_the_file_when_answered() {
    for (writers, rounds) in [(1, 20), (8, 25), (64, 4)] {
        let dir = tempfile::tempdir().unwrap();
        let sink = Arc::new(dir_sink(dir.path()));
        let tasks = (0..writers).map(|w| {
            let sink = sink.clone();
            let dir = dir.path().to_owned();
            tokio::spawn(async move {
                let mut seqs = Vec::new();
                for round in 0..rounds {
                    let mut r = record("server_info", round);
                    r.call_id = format!("w{w}-r{round}");
                    let receipt = sink.write(r).await.unwrap();
                    let needle = format!("\"seq\":{},", receipt.seq);
                    let id = format!("\"call_id\":\"w{w}-r{round}\"");
                    let written = files(&dir).iter().any(|f| {
                        std::fs::read_to_string(f)
                            .unwrap()
                            .lines()
                            .any(|line| line.contains(&needle) && line.contains(&id))
                    });
                    assert!(written, "w{w}-r{round} answered before it was written");
                    seqs.push(receipt.seq);
                }
                seqs
            })
        });
        let mut seqs: Vec<u64> = futures::future::join_all(tasks)
            .await
            .into_iter()
            .flat_map(|t| t.unwrap())
            .collect();
        seqs.sort_unstable();
        let total = (writers * rounds) as u64;
        assert_eq!(seqs, (1..=total).collect::<Vec<u64>>(), "{writers} writers");
        sink.close().await;
        let report = verify_files(&files(dir.path())).unwrap();
        assert!(report.ok(), "{}", report.render());
        assert_eq!(report.records, total);
    }
}

#[tokio::test]
async fn files_rotate_by_size_and_count_and_the_chain_spans_them() {
    let dir = tempfile::tempdir().unwrap();
    let sink = FileSink::start(FileSinkConfig {
        location: FileLocation::Dir(dir.path().to_owned()),
        stream: "r1".into(),
        max_size: 2000,
        max_files: 3,
        max_age: None,
        mac_key: None,
        format: querygate::audit::Format::Jsonl,
    })
    .unwrap();
    let mut last = 0;
    for n in 0..40 {
        last = sink.write(record("run_select_query", n)).await.unwrap().seq;
    }
    sink.close().await;
    // Each pruning took a place in the chain (its `prune` record).
    assert!(last > 40, "{last}");
    let set = files(dir.path());
    assert_eq!(set.len(), 3, "{set:?}");
    let report = verify_files(&set).unwrap();
    assert!(report.ok(), "{}", report.render());
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("starts at seq") && n.contains("were pruned (recorded at")),
        "{:?}",
        report.notes
    );
    assert_eq!(report.streams["r1"].last_seq, last);
    for file in &set {
        assert!(
            std::fs::metadata(file).unwrap().len() < 2000 + 1000,
            "{file:?}"
        );
    }
}

#[tokio::test]
async fn a_restart_continues_the_chain_and_a_path_is_rotated_beside_itself() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let sink = dir_sink(dir.path());
        for n in 0..3 {
            let receipt = sink.write(record("server_info", n)).await.unwrap();
            assert_eq!(receipt.seq, round * 3 + n as u64 + 1);
        }
        sink.close().await;
    }
    let report = verify_files(&files(dir.path())).unwrap();
    assert!(
        report.ok() && only_the_unanchored_note(&report.notes),
        "{}",
        report.render()
    );

    let path = dir.path().join("fixed/audit.log");
    let start = || {
        FileSink::start(FileSinkConfig {
            location: FileLocation::Path(path.clone()),
            stream: "r2".into(),
            max_size: 1500,
            max_files: 0,
            max_age: None,
            mac_key: None,
            format: querygate::audit::Format::Jsonl,
        })
        .unwrap()
    };
    let sink = start();
    for n in 0..10 {
        sink.write(record("server_info", n)).await.unwrap();
    }
    sink.close().await;
    // A torn last line (a crash mid-write) is cut when the file is opened again.
    append_torn_line(&path);
    let sink = start();
    assert_eq!(sink.write(record("server_info", 10)).await.unwrap().seq, 11);
    sink.close().await;
    let set = location::files_of(&FileLocation::Path(path.clone())).unwrap();
    assert!(set.len() > 2, "{set:?}");
    assert_eq!(set.last(), Some(&path));
    let report = verify_files(&set).unwrap();
    assert!(
        report.ok() && only_the_unanchored_note(&report.notes),
        "{}",
        report.render()
    );
    assert_eq!(report.records, 11);
}

/// Another process appending to the same file crashed mid-line while this sink kept the file
/// open: the sink's next batch cuts the torn line under the lock before it appends (the file
/// no longer ends where the sink's own last append did).
#[tokio::test]
async fn a_torn_line_left_by_another_writer_is_cut_before_the_next_batch() {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir_sink(dir.path());
    sink.write(record("server_info", 1)).await.unwrap();
    let [file] = files(dir.path()).try_into().unwrap();
    let before = std::fs::metadata(&file).unwrap().len();
    append_torn_line(&file);
    sink.write(record("server_info", 2)).await.unwrap();
    sink.write(record("server_info", 3)).await.unwrap();
    sink.close().await;
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains("\"stream\":\"r2\""), "{text}");
    assert!(text.len() as u64 > before && text.ends_with('\n'), "{text}");
    let report = verify_files(&[file]).unwrap();
    assert!(
        report.ok() && only_the_unanchored_note(&report.notes),
        "{}",
        report.render()
    );
    assert_eq!(report.records, 3);
}

#[tokio::test]
async fn an_unwritable_location_fails_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-folder");
    std::fs::write(&blocker, "").unwrap();
    let err = FileSink::start(FileSinkConfig {
        location: FileLocation::Dir(blocker.join("audit")),
        stream: "r1".into(),
        max_size: 0,
        max_files: 0,
        max_age: None,
        mac_key: None,
        format: querygate::audit::Format::Jsonl,
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("cannot create audit folder"), "{err}");
    assert!(err.contains("not-a-folder"), "{err}");
}

#[tokio::test]
async fn a_location_that_fails_refuses_calls_and_is_used_again_when_it_comes_back() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("audit");
    let sink: Arc<dyn AuditSink> = Arc::new(dir_sink(&dir));
    let auditor = Auditor::new(sink.clone(), FailureMode::Strict, "r1", None);
    let intent = |n| AuditRecord {
        phase: Phase::Intent,
        query_class: Some(class::MUTATION_DELETE.into()),
        outcome: None,
        ..record("run_mutation_query", n)
    };
    auditor.record(intent(1)).await.unwrap();
    // The folder disappears and a file takes its place: nothing can be written there.
    std::fs::rename(&dir, root.path().join("moved")).unwrap();
    std::fs::write(&dir, "").unwrap();
    let failure = auditor.record(intent(2)).await.unwrap_err();
    assert_eq!(failure.action, OnFailure::Refuse);
    assert_eq!(failure.code(), querygate::code::Code::AuditUnavailable);
    assert!(
        failure.message.contains("nothing was sent"),
        "{}",
        failure.message
    );
    let relaxed = Auditor::new(sink.clone(), FailureMode::StrictMutations, "r1", None);
    assert_eq!(
        relaxed.record(record("run_select_query", 3)).await,
        Ok(None)
    );
    // It comes back: the same sink writes again, continuing the chain.
    std::fs::remove_file(&dir).unwrap();
    let receipt = auditor.record(intent(4)).await.unwrap().unwrap();
    assert_eq!(receipt.seq, 2);
    sink.close().await;
    let mut set = files(&root.path().join("moved"));
    set.extend(files(&dir));
    let report = verify_files(&set).unwrap();
    assert!(report.ok(), "{}", report.render());
}

const CHILD_VAR: &str = "QUERYGATE_TEST_AUDIT_KILL_CHILD";

/// Runs as the child of `kill_9_under_load_loses_no_acknowledged_record` when the variable
/// names a folder: writes records from 32 tasks and prints `ACK <call id>` after each
/// acknowledged write, until killed.
async fn child_writer(dir: PathBuf) {
    let sink = Arc::new(dir_sink(&dir));
    println!("READY");
    let tasks = (0..32).map(|task| {
        let sink = sink.clone();
        tokio::spawn(async move {
            for n in 0.. {
                let mut r = record("run_select_query", n);
                r.call_id = format!("t{task}-{n}");
                if sink.write(r.clone()).await.is_ok() {
                    use std::io::Write as _;
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "ACK {}", r.call_id);
                    let _ = out.flush();
                }
            }
        })
    });
    futures::future::join_all(tasks).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_under_load_loses_no_acknowledged_record() {
    if let Ok(dir) = std::env::var(CHILD_VAR) {
        child_writer(PathBuf::from(dir)).await;
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "audit_file::kill_9_under_load_loses_no_acknowledged_record",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead as _;
        let mut acked = Vec::new();
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(id) = line.strip_prefix("ACK ") {
                acked.push(id.to_owned());
            }
        }
        acked
    });
    // Let it write under load for a while, then kill it without warning.
    let _enough = crate::support::wait::try_eventually(
        std::time::Duration::from_secs(20),
        std::time::Duration::from_millis(200),
        || {
            let written: u64 = files(dir.path())
                .iter()
                .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
                .sum();
            std::future::ready(written > 200_000)
        },
    )
    .await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let acked = reader.join().unwrap();
    assert!(
        acked.len() > 100,
        "only {} records acknowledged",
        acked.len()
    );
    let set = files(dir.path());
    let report = verify_files(&set).unwrap();
    assert!(report.ok(), "{}", report.render());
    let mut on_disk = std::collections::HashSet::new();
    for file in &set {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            if let Ok(parsed) = querygate::audit::format::parse_line(line) {
                on_disk.insert(parsed.stored.record.call_id);
            }
        }
    }
    let lost: Vec<&String> = acked.iter().filter(|id| !on_disk.contains(*id)).collect();
    assert!(lost.is_empty(), "acknowledged but not on disk: {lost:?}");
}

/// Runs `querygate args…` to its end.
fn querygate(args: &[&str]) -> std::process::Output {
    querygate_command().args(args).output().unwrap()
}

#[tokio::test]
async fn audit_verify_and_tail_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let sink = dir_sink(dir.path());
    for n in 0..5 {
        sink.write(record("run_select_query", n)).await.unwrap();
    }
    sink.close().await;
    let dir_arg = dir.path().to_str().unwrap().to_owned();
    let (verify, tail) = tokio::task::spawn_blocking({
        let dir_arg = dir_arg.clone();
        move || {
            (
                querygate(&["audit", "verify", &dir_arg]),
                querygate(&["audit", "tail", "-n", "2", &dir_arg]),
            )
        }
    })
    .await
    .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{out}");
    assert!(out.contains("ok: 5 records in 1 streams"), "{out}");
    let out = String::from_utf8_lossy(&tail.stdout).into_owned();
    assert!(tail.status.success(), "{out}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains("acme/alice(jwt)") && out.contains("SELECT 4 FROM"),
        "{out}"
    );

    // Edit one line: verify names it and exits 1.
    let file = files(dir.path()).pop().unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replacen("SELECT 2", "SELECT 9", 1)).unwrap();
    let verify = tokio::task::spawn_blocking(move || querygate(&["audit", "verify", &dir_arg]))
        .await
        .unwrap();
    let out = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(1), "{out}");
    assert!(
        out.contains(":3: the record does not match its hash"),
        "{out}"
    );
}

/// Whether `notes` say only that the records carry no MAC (these sinks have no audit key).
fn only_the_unanchored_note(notes: &[String]) -> bool {
    notes.len() == 1 && notes[0].contains("without a verified MAC")
}
