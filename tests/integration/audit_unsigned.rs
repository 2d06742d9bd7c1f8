//! Issue 46, item 3: under `audit.mac_key_file`, `querygate audit verify` (the binary) takes
//! every record and head without a valid MAC as a break, not only those after MACed ones:
//! a file stream whose MACs were stripped, a record dropped and the chain relinked with a
//! head written without a MAC; a stream `ghost` the PostgreSQL writer role inserts with
//! NULL MACs. Two heads for one stream (a rolled-back copy beside the real one) are a break.
//! `--allow-unsigned STREAM` accepts a stream written before the key, still chained.

use std::time::Duration;

use querygate::audit::AuditSink as _;
use querygate::audit::chain::{self, ChainHead};
use querygate::audit::head::{Head, HeadFile};
use querygate::audit::postgres::{PgSink, PgSinkConfig};
use querygate::config::SecretUrl;
use querygate::db;
use sqlx_core::query::query;
use sqlx_core::query_as::query_as;
use sqlx_postgres::Postgres;

use crate::audit_anchor::{
    Setup, assert_break, copy_of, lines_of, name, pg_record, set_of, verify, write_lines,
};
use crate::support::{pg, querygate_command};

#[tokio::test]
async fn a_stream_stripped_of_its_macs_relinked_and_given_an_unsigned_head_is_a_break() {
    let setup = Setup::new().await;
    let (plain, keyed) = (setup.config(false), setup.config(true));
    setup.serve(&keyed, 4).await;
    let (ok, out) = verify(&keyed, &[]);
    assert!(ok && out.contains("anchored (MACs verified)"), "{out}");

    // Someone who can write the folder but has no key: every MAC stripped, the second
    // record dropped, the rest relinked from the genesis hash, and a head without a MAC
    // naming the new end.
    let copy = copy_of(&setup.audit());
    let [file] = set_of(copy.path()).try_into().unwrap();
    let mut head = ChainHead::genesis();
    let mut relinked = Vec::new();
    for (n, line) in lines_of(&file).iter().enumerate() {
        if n == 1 {
            continue;
        }
        let parsed = querygate::audit::format::parse_line(line).unwrap();
        let linked = chain::link("r1", &head, &parsed.stored.record, None).unwrap();
        head = linked.head();
        relinked.push(linked.line());
    }
    write_lines(&file, &relinked);
    HeadFile::open(copy.path(), "r1")
        .unwrap()
        .write(&Head::new("r1", &head, None))
        .unwrap();
    let set = copy.path().to_str().unwrap();

    // Without the key verify cannot tell, and says so.
    let (ok, out) = verify(&plain, &[set]);
    assert!(ok, "{out}");
    assert!(
        out.contains(&format!("ok: {} records in 1 streams", relinked.len())),
        "{out}"
    );
    // With it, the first record without a MAC is the break, named by stream and seq.
    assert_break(
        verify(&keyed, &[set]),
        &format!("{}:1", name(&file)),
        "stream r1 seq 1 has no MAC, and audit.mac_key_file is set",
    );
    // The head alone, rewritten without a MAC over intact records, is a break too.
    let copy = copy_of(&setup.audit());
    let [file] = set_of(copy.path()).try_into().unwrap();
    let last = querygate::audit::format::parse_line(lines_of(&file).last().unwrap()).unwrap();
    HeadFile::open(copy.path(), "r1")
        .unwrap()
        .write(&Head::new(
            "r1",
            &ChainHead {
                seq: last.stored.seq,
                hash: last.hash,
            },
            None,
        ))
        .unwrap();
    assert_break(
        verify(&keyed, &[copy.path().to_str().unwrap()]),
        "r1.head",
        &format!("the head of stream r1 (seq {}, written", last.stored.seq),
    );
}

#[tokio::test]
async fn two_heads_for_one_stream_are_a_break_not_the_one_that_sorts_last() {
    let setup = Setup::new().await;
    let (plain, keyed) = (setup.config(false), setup.config(true));
    setup.serve(&keyed, 2).await;
    // The head as it was then, MACed under the key: kept aside by someone with write access
    // to the folder.
    let heads = setup.audit().join(".querygate_heads");
    let saved = std::fs::read(heads.join("r1.head")).unwrap();
    let saved_head: Head =
        serde_json::from_str(String::from_utf8_lossy(&saved).trim_end()).unwrap();
    setup.serve(&keyed, 2).await;
    let (ok, out) = verify(&keyed, &[]);
    assert!(ok, "{out}");

    // Later, the newest records are removed and the saved head put back beside the real
    // one, under a name that sorts after it.
    let copy = copy_of(&setup.audit());
    let [file] = set_of(copy.path()).try_into().unwrap();
    let lines = lines_of(&file);
    write_lines(&file, &lines[..usize::try_from(saved_head.seq).unwrap()]);
    std::fs::write(copy.path().join(".querygate_heads/r1.old.head"), &saved).unwrap();
    let set = copy.path().to_str().unwrap();
    for config in [&keyed, &plain] {
        assert_break(
            verify(config, &[set]),
            "r1.old.head",
            &format!(
                "stream r1 has two heads: {}",
                copy.path().join(".querygate_heads/r1.head").display()
            ),
        );
    }
}

#[tokio::test]
async fn allow_unsigned_accepts_a_stream_written_before_the_key_still_chained() {
    let setup = Setup::new().await;
    let (plain, keyed) = (setup.config(false), setup.config(true));
    // Stream r1 was written before the key was set: no record and no head has a MAC.
    setup.serve(&plain, 3).await;
    let (ok, out) = verify(&plain, &[]);
    assert!(ok, "{out}");
    let [file] = setup.files().try_into().unwrap();
    assert_break(
        verify(&keyed, &[]),
        &format!("{}:1", name(&file)),
        "stream r1 seq 1 has no MAC",
    );
    // Named as written before the key, it passes, said to be unanchored.
    let (ok, out) = verify(&keyed, &["--allow-unsigned", "r1"]);
    assert!(ok, "{out}");
    assert!(out.contains("unanchored (no MAC checked)"), "{out}");
    assert!(
        out.contains("records without a verified MAC, written before audit.mac_key_file was set (--allow-unsigned): r1"),
        "{out}"
    );
    // Other streams named are noted, and the flag repeats.
    let (ok, out) = verify(
        &keyed,
        &["--allow-unsigned", "r1", "--allow-unsigned", "elsewhere"],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("--allow-unsigned names streams with no records here: elsewhere"),
        "{out}"
    );
    // Its records must still chain.
    let copy = copy_of(&setup.audit());
    let [copied] = set_of(copy.path()).try_into().unwrap();
    let mut lines = lines_of(&copied);
    lines.remove(1);
    write_lines(&copied, &lines);
    assert_break(
        verify(
            &keyed,
            &["--allow-unsigned", "r1", copy.path().to_str().unwrap()],
        ),
        &format!("{}:2", name(&copied)),
        "seq 3 follows seq 1 in stream r1",
    );
    // Once the key is set the stream continues MACed; a record without one after that is
    // a break even for a stream allowed to be unsigned.
    setup.serve(&keyed, 1).await;
    let (ok, out) = verify(&keyed, &["--allow-unsigned", "r1"]);
    assert!(ok, "{out}");
    setup.serve(&plain, 1).await;
    let total = lines_of(&file).len();
    assert_break(
        verify(&keyed, &["--allow-unsigned", "r1"]),
        &format!("{}:{total}", name(&file)),
        "a record without a valid MAC after MACed records of stream r1",
    );
}

#[tokio::test]
async fn postgres_a_ghost_stream_without_macs_and_a_second_head_are_breaks() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let setup = Setup::new().await;
    let pool = database.pool(4).await;
    db::migrate(&pool).await.unwrap();
    let key = querygate::audit::anchor::MacKey::load(&setup.key()).unwrap();
    for stream in ["r1", "r2"] {
        let sink = PgSink::start(
            pool.clone(),
            PgSinkConfig {
                stream: stream.into(),
                max_batch: 64,
                write_timeout: Duration::from_secs(5),
                mac_key: Some(key.clone()),
            },
        )
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
    let verify_db = |args: &'static [&'static str]| {
        let (url, config) = (url.clone(), config.clone());
        async move {
            tokio::task::spawn_blocking(move || {
                let output = querygate_command()
                    .env("QUERYGATE_DATABASE__URL", &url)
                    .arg("--config")
                    .arg(&config)
                    .args(["audit", "verify", "--database"])
                    .args(args)
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
            })
            .await
            .unwrap()
        }
    };
    let (ok, out) = verify_db(&[]).await;
    assert!(ok && out.contains("ok: 10 records in 2 streams"), "{out}");

    // The writer role (the service's login, no key) inserts a whole stream of its own,
    // linked, with NULL MACs, and moves its head through the function it may execute.
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
    let mut head = ChainHead::genesis();
    for n in 0..45 {
        let mut record = pg_record(&format!("ghost-{n}"));
        record.replica = "ghost".into();
        let linked = chain::link("ghost", &head, &record, None).unwrap();
        query::<Postgres>(
            "INSERT INTO audit_events (stream, seq, at, record, doc, prev_hash, hash) \
             VALUES ('ghost', $1, $2::timestamptz, $3, $3::jsonb, $4, $5)",
        )
        .bind(i64::try_from(linked.seq).unwrap())
        .bind("2026-12-01T10:00:00.000001Z")
        .bind(&linked.canonical)
        .bind(&linked.prev_hash)
        .bind(&linked.hash)
        .execute(&writer)
        .await
        .unwrap();
        head = linked.head();
    }
    query::<Postgres>("SELECT audit_advance_head('ghost', $1, $2, $3, NULL)")
        .bind(i64::try_from(head.seq).unwrap())
        .bind(&head.hash)
        .bind("2026-12-01T10:00:00.000001Z")
        .execute(&writer)
        .await
        .unwrap();
    writer.close().await;
    assert_break(
        verify_db(&[]).await,
        "stream ghost seq 1",
        "stream ghost seq 1 has no MAC, and audit.mac_key_file is set",
    );
    // Named as written before the key, it passes (the auditor's word, not the key's).
    let (ok, out) = verify_db(&["--allow-unsigned", "ghost"]).await;
    assert!(ok && out.contains("ok: 55 records in 3 streams"), "{out}");

    // One head per stream: the owner drops the key of audit_heads and puts an older head
    // of r1 (validly MACed when it was current) beside the real one.
    let (seq, hash, at, mac): (i64, String, String, Option<String>) =
        query_as("SELECT seq, hash, at, mac FROM audit_heads WHERE stream = 'r1'")
            .fetch_one(&pool)
            .await
            .unwrap();
    query::<Postgres>("ALTER TABLE audit_heads DROP CONSTRAINT audit_heads_pkey")
        .execute(&pool)
        .await
        .unwrap();
    query::<Postgres>(
        "INSERT INTO audit_heads (stream, seq, hash, at, mac) VALUES ('r1', $1, $2, $3, $4)",
    )
    .bind(seq)
    .bind(&hash)
    .bind(&at)
    .bind(&mac)
    .execute(&pool)
    .await
    .unwrap();
    assert_break(
        verify_db(&["--allow-unsigned", "ghost"]).await,
        "audit_heads stream r1",
        "stream r1 has two heads: audit_heads stream r1 (seq 5",
    );
}
