//! The anchored audit chains under attack: a served App writes real records (MACed under
//! `audit.mac_key_file`, with a head beside the files), someone then tampers with them in
//! each of the ways issue 28 lists, and `querygate audit verify` (the binary) exits 1 naming
//! the file and line and what happened. PostgreSQL: rows the writer role forges into
//! another replica's stream, and rows the owner removes or rewrites behind disabled
//! triggers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use querygate::app::App;
use querygate::audit::chain::{self, ChainHead};
use querygate::audit::file::{FileSink, FileSinkConfig};
use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::audit::record::class;
use querygate::audit::{AuditRecord, AuditSink, Decision, FileLocation, Outcome, Phase, location};
use querygate::config::{Config, SecretUrl, Sources};
use querygate::db;
use serde_json::json;
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::Postgres;
use tokio_util::sync::CancellationToken;

use crate::mcp_support::{call, install_crypto_provider, modern_client, test_config};
use crate::mock::Mock;
use crate::support::{pg, querygate_command};

/// A folder with a key file and the configuration of a server writing `audit/` (stream
/// `r1`), with or without the key.
pub(crate) struct Setup {
    pub(crate) dir: tempfile::TempDir,
    mock: Mock,
}

impl Setup {
    pub(crate) async fn new() -> Setup {
        install_crypto_provider();
        let setup = Setup {
            dir: tempfile::tempdir().unwrap(),
            mock: Mock::start().await,
        };
        std::fs::write(
            setup.key(),
            b"an audit key of at least 32 bytes, never in the DB",
        )
        .unwrap();
        setup
    }

    pub(crate) fn key(&self) -> PathBuf {
        self.dir.path().join("audit.key")
    }

    pub(crate) fn audit(&self) -> PathBuf {
        self.dir.path().join("audit")
    }

    /// The configuration file, with the key or without.
    pub(crate) fn config(&self, with_key: bool) -> PathBuf {
        let path = test_config(&self.mock, self.dir.path(), "read_only", "");
        let yaml = std::fs::read_to_string(&path).unwrap();
        let key = if with_key {
            format!("  mac_key_file: {}\n", self.key().display())
        } else {
            String::new()
        };
        let yaml = yaml.replacen("audit:\n", &format!("audit:\n  replica: r1\n{key}"), 1);
        let path = self
            .dir
            .path()
            .join(if with_key { "keyed.yaml" } else { "plain.yaml" });
        std::fs::write(&path, yaml).unwrap();
        path
    }

    /// Serves the App of `config` in-process, makes `calls` calls of `server_info` with a
    /// real MCP client, and stops it (its audit closed).
    pub(crate) async fn serve(&self, config: &Path, calls: usize) {
        let config = Config::load(&Sources {
            file: Some(config.to_owned()),
            env: Default::default(),
        })
        .unwrap();
        let app = App::build(config).await.unwrap();
        let url = app.mcp_url();
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let running = tokio::spawn(app.run_until(async move { stopped.cancelled().await }));
        let client = modern_client(&url).await;
        for _ in 0..calls {
            let result = call(&client, "server_info", json!({})).await;
            assert_ne!(result.is_error, Some(true), "{result:?}");
        }
        drop(client.cancel().await);
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(30), running)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }

    pub(crate) fn files(&self) -> Vec<PathBuf> {
        location::files_of(&FileLocation::Dir(self.audit())).unwrap()
    }
}

/// `querygate --config CONFIG audit verify ARGS…`: whether it exited 0, and its output.
pub(crate) fn verify(config: &Path, args: &[&str]) -> (bool, String) {
    let output = querygate_command()
        .arg("--config")
        .arg(config)
        .args(["audit", "verify"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.code() == Some(0) || output.status.code() == Some(1),
        "{output:?}"
    );
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// A copy of the audit folder (files and heads) to tamper with.
pub(crate) fn copy_of(audit: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    copy_dir(audit, copy.path());
    copy
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

pub(crate) fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub(crate) fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// The files of `dir`, oldest first.
pub(crate) fn set_of(dir: &Path) -> Vec<PathBuf> {
    location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap()
}

pub(crate) fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Asserts a BREAK whose location and reason contain `at` and `reason`.
pub(crate) fn assert_break(outcome: (bool, String), at: &str, reason: &str) {
    let (ok, out) = outcome;
    assert!(!ok, "verify passed: {out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("BREAK at "))
        .unwrap_or_else(|| panic!("no BREAK line: {out}"));
    let (location, why) = line["BREAK at ".len()..]
        .split_once(": ")
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        location.contains(at),
        "location {location:?}, wanted {at:?}: {out}"
    );
    assert!(
        why.contains(reason),
        "reason {why:?}, wanted {reason:?}: {out}"
    );
}

/// Two runs of a served App with the key: the first day's file (renamed to an older day)
/// and today's, one stream `r1` across them.
async fn two_files() -> (Setup, PathBuf) {
    let setup = Setup::new().await;
    let config = setup.config(true);
    setup.serve(&config, 4).await;
    let first = setup.files();
    assert_eq!(first.len(), 1, "{first:?}");
    std::fs::rename(
        &first[0],
        setup.audit().join("querygate_audit_20200101.log"),
    )
    .unwrap();
    setup.serve(&config, 4).await;
    assert_eq!(setup.files().len(), 2);
    (setup, config)
}

#[tokio::test]
async fn verify_finds_every_kind_of_tampering_with_anchored_files() {
    let (setup, config) = two_files().await;
    let (ok, out) = verify(&config, &[setup.audit().to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains("anchored (MACs verified)"), "{out}");
    let total: usize = setup.files().iter().map(|f| lines_of(f).len()).sum();
    assert!(
        out.contains(&format!("seq 1..{total}")) && out.contains(&format!("head seq {total}")),
        "{out}"
    );

    // The newest records deleted: what is left is a valid chain, but the head names more.
    let copy = copy_of(&setup.audit());
    let [oldest, newest] = set_of(copy.path()).try_into().unwrap();
    let mut lines = lines_of(&newest);
    lines.truncate(lines.len() - 2);
    write_lines(&newest, &lines);
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:{}", name(&newest), lines.len()),
        &format!("ends at seq {} but its head", total - 2),
    );

    // The newest file deleted.
    let copy = copy_of(&setup.audit());
    let [oldest_copy, newest] = set_of(copy.path()).try_into().unwrap();
    let in_oldest = lines_of(&oldest_copy).len();
    std::fs::remove_file(&newest).unwrap();
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:{in_oldest}", name(&oldest)),
        &format!("ends at seq {in_oldest} but its head"),
    );

    // A cut that leaves a partial line: not "never acknowledged", the head names it.
    let copy = copy_of(&setup.audit());
    let [_, newest] = set_of(copy.path()).try_into().unwrap();
    let text = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &text[..text.len() - 40]).unwrap();
    let outcome = verify(&config, &[copy.path().to_str().unwrap()]);
    assert!(outcome.1.contains("incomplete last line"), "{}", outcome.1);
    assert_break(
        outcome,
        &name(&newest),
        "acknowledged records after it were removed",
    );

    // The oldest records deleted: no prune record names them.
    let copy = copy_of(&setup.audit());
    let [oldest, _] = set_of(copy.path()).try_into().unwrap();
    let lines = lines_of(&oldest);
    write_lines(&oldest, &lines[2..]);
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:1", name(&oldest)),
        "starts at seq 3 but no prune record names seq 1..2",
    );

    // The oldest file deleted (max_files: 0, nothing is ever pruned here).
    let copy = copy_of(&setup.audit());
    let [oldest, newest] = set_of(copy.path()).try_into().unwrap();
    std::fs::remove_file(&oldest).unwrap();
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:1", name(&newest)),
        &format!("starts at seq {} but no prune record", in_oldest + 1),
    );

    // Forged records appended with recomputed hashes (and a head moved to match them):
    // without the key their MAC cannot be right.
    let copy = copy_of(&setup.audit());
    let [_, newest] = set_of(copy.path()).try_into().unwrap();
    let mut lines = lines_of(&newest);
    let last = querygate::audit::format::parse_line(lines.last().unwrap()).unwrap();
    let forged = AuditRecord {
        tool: "run_select_query".into(),
        replica: "r1".into(),
        ..Default::default()
    };
    let linked = chain::link(
        "r1",
        &ChainHead {
            seq: last.stored.seq,
            hash: last.hash.clone(),
        },
        &forged,
        None,
    )
    .unwrap();
    lines.push(linked.line());
    write_lines(&newest, &lines);
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:{}", name(&newest), lines.len()),
        "a record without a valid MAC after MACed records of stream r1",
    );
    // … with a MAC under a key of the forger's own.
    let wrong = querygate::audit::anchor::MacKey::new(&[1u8; 32]).unwrap();
    let mut forged_line = chain::link(
        "r1",
        &ChainHead {
            seq: last.stored.seq,
            hash: last.hash.clone(),
        },
        &forged,
        Some(&wrong),
    )
    .unwrap();
    *lines.last_mut().unwrap() = forged_line.line();
    write_lines(&newest, &lines);
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:{}", name(&newest), lines.len()),
        "MAC does not verify under audit.mac_key_file",
    );
    // … and the head rewritten to name them.
    forged_line.mac = None;
    let head_file = copy.path().join(".querygate_heads/r1.head");
    let head: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&head_file).unwrap().trim()).unwrap();
    let mut moved = head.clone();
    moved["seq"] = json!(forged_line.seq);
    moved["hash"] = json!(forged_line.hash);
    std::fs::write(&head_file, moved.to_string()).unwrap();
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        "r1.head",
        "does not verify under audit.mac_key_file: forged, edited or rewound",
    );

    // A byte that is not UTF-8, in the middle of a record.
    let copy = copy_of(&setup.audit());
    let [oldest, _] = set_of(copy.path()).try_into().unwrap();
    let mut bytes = std::fs::read(&oldest).unwrap();
    let second_line = bytes.iter().position(|b| *b == b'\n').unwrap() + 1;
    bytes[second_line + 10] = 0xfe;
    std::fs::write(&oldest, bytes).unwrap();
    assert_break(
        verify(&config, &[copy.path().to_str().unwrap()]),
        &format!("{}:2", name(&oldest)),
        "not UTF-8: byte 0xfe at column 11",
    );

    // The configured folder (no path argument) is what is checked by default.
    let (ok, out) = verify(&config, &[]);
    assert!(ok, "{out}");
}

#[tokio::test]
async fn old_records_without_a_mac_are_unanchored_and_losing_the_anchor_is_a_break() {
    let setup = Setup::new().await;
    let (plain, keyed) = (setup.config(false), setup.config(true));
    // Records written before the key was set, then with it.
    setup.serve(&plain, 2).await;
    setup.serve(&keyed, 2).await;
    // Under the key, records without a MAC are a break unless their stream is named as
    // written before it.
    assert_break(
        verify(&keyed, &[]),
        ":1",
        "stream r1 seq 1 has no MAC, and audit.mac_key_file is set",
    );
    let (ok, out) = verify(&keyed, &["--allow-unsigned", "r1"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("records without a verified MAC, written before audit.mac_key_file was set"),
        "{out}"
    );
    // Without the key, verify says it cannot check the MACs.
    let (ok, out) = verify(&plain, &[]);
    assert!(ok, "{out}");
    assert!(
        out.contains("no audit.mac_key_file to check MACs with"),
        "{out}"
    );
    // The key is dropped from the configuration: the chain loses its anchor.
    setup.serve(&plain, 1).await;
    let files = setup.files();
    let newest = files.last().unwrap();
    let total = lines_of(newest).len();
    assert_break(
        verify(&keyed, &["--allow-unsigned", "r1"]),
        &format!("{}:{total}", name(newest)),
        "a record without a valid MAC after MACed records of stream r1",
    );
    // A server refuses to start over a head forged without the key.
    let head_file = setup.audit().join(".querygate_heads/r1.head");
    let mut head: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&head_file).unwrap().trim()).unwrap();
    head["mac"] = json!("00".repeat(32));
    std::fs::write(&head_file, head.to_string()).unwrap();
    let config = Config::load(&Sources {
        file: Some(keyed.clone()),
        env: Default::default(),
    })
    .unwrap();
    let Err(err) = App::build(config).await else {
        panic!("the start is refused");
    };
    assert!(err.to_string().contains("does not verify"), "{err}");
}

#[tokio::test]
async fn pruning_is_recorded_and_verifies() {
    let setup = Setup::new().await;
    let key = querygate::audit::anchor::MacKey::load(&setup.key()).unwrap();
    let sink = FileSink::start(FileSinkConfig {
        location: FileLocation::Dir(setup.audit()),
        stream: "r1".into(),
        max_size: 2000,
        max_files: 2,
        max_age: None,
        mac_key: Some(key),
        format: querygate::audit::Format::Jsonl,
    })
    .unwrap();
    for n in 0..30 {
        sink.write(AuditRecord {
            tool: format!("tool{n}"),
            replica: "r1".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    sink.close().await;
    let files = setup.files();
    assert_eq!(files.len(), 2, "{files:?}");
    let config = setup.config(true);
    let (ok, out) = verify(&config, &[]);
    assert!(ok, "{out}");
    assert!(out.contains("were pruned (recorded at"), "{out}");
    // The prune record explains only what it names: one more line gone is a break.
    let oldest = &files[0];
    let lines = lines_of(oldest);
    write_lines(oldest, &lines[1..]);
    assert_break(
        verify(&config, &[]),
        &format!("{}:1", name(oldest)),
        "no prune record",
    );
}

pub(crate) fn pg_record(call: &str) -> AuditRecord {
    AuditRecord {
        timestamp: "2026-12-01T10:00:00.000001Z".into(),
        phase: Phase::Outcome,
        call_id: call.into(),
        replica: "r1".into(),
        tenant: "acme".into(),
        principal: "alice".into(),
        auth_method: "jwt".into(),
        tool: "run_select_query".into(),
        mode: "read_only".into(),
        decision: Decision::Allow,
        query_class: Some(class::SELECT.into()),
        outcome: Some(Outcome::Ok),
        ..Default::default()
    }
}

#[tokio::test]
async fn postgres_forged_rows_and_changes_behind_disabled_triggers_are_found() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let setup = Setup::new().await;
    let pool = database.pool(4).await;
    db::migrate(&pool).await.unwrap();
    let key = querygate::audit::anchor::MacKey::load(&setup.key()).unwrap();
    let sink_config = |stream: &str| PgSinkConfig {
        stream: stream.into(),
        max_batch: 64,
        write_timeout: Duration::from_secs(5),
        mac_key: Some(key.clone()),
    };
    for stream in ["r1", "r2"] {
        let sink = PgSink::start(pool.clone(), sink_config(stream))
            .await
            .unwrap();
        for n in 0..5 {
            sink.write(pg_record(&format!("{stream}-{n}")))
                .await
                .unwrap();
        }
        sink.close().await;
    }
    let config = setup.dir.path().join("pg.yaml");
    std::fs::write(
        &config,
        format!(
            "audit:\n  sink: postgres\n  mac_key_file: {}\n",
            setup.key().display()
        ),
    )
    .unwrap();
    let url = database.url.clone();
    let run = move || {
        let output = querygate_command()
            .env("QUERYGATE_DATABASE__URL", &url)
            .arg("--config")
            .arg(&config)
            .args(["audit", "verify", "--database"])
            .output()
            .unwrap();
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    let verify_db = || {
        let run = run.clone();
        async move { tokio::task::spawn_blocking(run).await.unwrap() }
    };
    let (ok, out) = verify_db().await;
    assert!(ok, "{out}");
    assert!(out.contains("ok: 10 records in 2 streams"), "{out}");

    // The writer role (the service's login, no key) links forged rows into r2's stream,
    // and r2 then continues on top of them.
    let service = format!("svc_{}", &database.url.rsplit('/').next().unwrap()[8..]);
    query::<Postgres>(&format!(
        "CREATE ROLE {service} LOGIN IN ROLE querygate_writer"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut service_url = url::Url::parse(&database.url).unwrap();
    service_url.set_username(&service).unwrap();
    let writer = db::connect_url(
        &SecretUrl::new(service_url.as_str()),
        1,
        Duration::from_secs(10),
    )
    .await
    .unwrap();
    let (seq, hash): (i64, String) = query_as("SELECT seq, hash FROM audit_stream_head('r2')")
        .fetch_one(&writer)
        .await
        .unwrap();
    let forged = chain::link(
        "r2",
        &ChainHead {
            seq: seq as u64,
            hash,
        },
        &pg_record("forged"),
        None,
    )
    .unwrap();
    query::<Postgres>(
        "INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash) \
         VALUES ('r2', $1, $2::timestamptz, $3, $3::jsonb, $4, $5)",
    )
    .bind(forged.seq as i64)
    .bind("2026-12-01T10:00:00.000001Z")
    .bind(&forged.canonical)
    .bind(&forged.prev_hash)
    .bind(&forged.hash)
    .execute(&writer)
    .await
    .unwrap();
    let sink = PgSink::start(pool.clone(), sink_config("r2"))
        .await
        .unwrap();
    assert_eq!(sink.write(pg_record("after")).await.unwrap().seq, 7);
    sink.close().await;
    assert_break(
        verify_db().await,
        "stream r2 seq 6",
        "a record without a valid MAC after MACed records of stream r2",
    );
    // It cannot move a head either: it has no right on audit_heads but the function, which
    // only moves forward, and a head it moves carries no valid MAC.
    let err = query::<Postgres>("UPDATE audit_heads SET seq = 1")
        .execute(&writer)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("permission denied"), "{err}");
    writer.close().await;

    // The owner switches the triggers off. Here in r1: the newest rows removed …
    query::<Postgres>("ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>("DELETE FROM audit_events WHERE stream = 'r2'")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>("ALTER TABLE audit_heads DISABLE TRIGGER audit_heads_forward_only")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>("DELETE FROM audit_heads WHERE stream = 'r2'")
        .execute(&pool)
        .await
        .unwrap();
    let (ok, out) = verify_db().await;
    assert!(ok, "only r1 is left, intact: {out}");
    query::<Postgres>("DELETE FROM audit_events WHERE stream = 'r1' AND seq > 3")
        .execute(&pool)
        .await
        .unwrap();
    assert_break(
        verify_db().await,
        "stream r1 seq 3",
        "ends at seq 3 but its head (audit_heads stream r1",
    );
    // … and the head rewound to match: its MAC names seq 5.
    query::<Postgres>(
        "UPDATE audit_heads h SET seq = 3, hash = e.hash FROM audit_events e \
         WHERE h.stream = 'r1' AND e.stream = 'r1' AND e.seq = 3",
    )
    .execute(&pool)
    .await
    .unwrap();
    assert_break(
        verify_db().await,
        "audit_heads stream r1",
        "does not verify under audit.mac_key_file",
    );
    // The oldest rows removed (PostgreSQL never prunes), the head put back.
    query::<Postgres>("DELETE FROM audit_heads")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>("DELETE FROM audit_events WHERE seq = 1")
        .execute(&pool)
        .await
        .unwrap();
    assert_break(
        verify_db().await,
        "stream r1 seq 2",
        "starts at seq 2: its oldest records were deleted (PostgreSQL never prunes)",
    );
    // A row rewritten with a recomputed hash (its successors re-linked is no help).
    query::<Postgres>("DELETE FROM audit_events")
        .execute(&pool)
        .await
        .unwrap();
    let sink = PgSink::start(pool.clone(), sink_config("r3"))
        .await
        .unwrap();
    for n in 0..3 {
        sink.write(pg_record(&format!("r3-{n}"))).await.unwrap();
    }
    sink.close().await;
    let rewritten =
        chain::link("r3", &ChainHead::genesis(), &pg_record("rewritten"), None).unwrap();
    query::<Postgres>(
        "UPDATE audit_events SET record = $1, doc = $1::jsonb, hash = $2 \
         WHERE stream = 'r3' AND seq = 1",
    )
    .bind(&rewritten.canonical)
    .bind(&rewritten.hash)
    .execute(&pool)
    .await
    .unwrap();
    assert_break(
        verify_db().await,
        "stream r3 seq 1",
        "MAC does not verify under audit.mac_key_file",
    );
}

#[tokio::test]
async fn a_restart_over_cut_files_continues_after_the_head_and_never_rewinds_it() {
    let setup = Setup::new().await;
    let key = querygate::audit::anchor::MacKey::load(&setup.key()).unwrap();
    let start = || {
        FileSink::start(FileSinkConfig {
            location: FileLocation::Dir(setup.audit()),
            stream: "r1".into(),
            max_size: 0,
            max_files: 0,
            max_age: None,
            mac_key: Some(key.clone()),
            format: querygate::audit::Format::Jsonl,
        })
        .unwrap()
    };
    let record = |n: usize| AuditRecord {
        tool: format!("tool{n}"),
        replica: "r1".into(),
        ..Default::default()
    };
    let sink = start();
    for n in 0..5 {
        sink.write(record(n)).await.unwrap();
    }
    sink.close().await;
    // The two newest records are cut away; the restarted writer goes on after its head
    // (seq 5), not after what is left (seq 3), so the gap stays.
    let file = setup.files().pop().unwrap();
    let lines = lines_of(&file);
    write_lines(&file, &lines[..3]);
    let sink = start();
    assert_eq!(sink.write(record(9)).await.unwrap().seq, 6);
    sink.close().await;
    assert_break(
        verify(&setup.config(true), &[]),
        &format!("{}:4", name(&file)),
        "seq 6 follows seq 3 in stream r1",
    );
}
