//! `querygate audit query` over records a real server wrote: JWT clients of two tenants
//! calling several tools with several decisions, then the binary run with each filter over
//! the audit files and over PostgreSQL, its output (JSON Lines and table) checked record by
//! record against what is stored; bad filter values exit 2.

use std::path::Path;
use std::process::Output;
use std::time::SystemTime;

use querygate::audit::format::parse_line;
use querygate::audit::record::AuditRecord;
use querygate::audit::{FileLocation, location};
use serde_json::{Value, json};
use sqlx_core::query_as::query_as;
use sqlx_postgres::Postgres;

use crate::mcp_support::{TestServer, call, start_yaml};
use crate::support::gate::{DELETE, SELECT, route_all};
use crate::support::identity::{ISSUER, RESOURCE, SigningKey, now, rmcp_client, write};
use crate::support::{SECRET, fixture_registry, pg, querygate_command};

/// A SELECT whose literal holds an ESC sequence and a bidi override: the table must show
/// them escaped.
const HOSTILE: &str = "SELECT id FROM testapi.items.items WHERE org = 'x\u{1b}[2J\u{202e}y'";

/// A server with tenants acme (`safe`) and globex (`read_only`) named by JWTs of one issuer;
/// `audit` is its `audit:` section (and anything else at the top level).
async fn server(key: &SigningKey, audit: &str) -> TestServer {
    let pem = key.public_pem();
    let audit = audit.to_owned();
    start_yaml(move |mock, dir| {
        let acme = write(dir, "acme.env", &format!("TESTAPI_KEY={SECRET}\n"));
        let globex = write(dir, "globex.env", "TESTAPI_KEY=globex-key\n");
        let audit = audit.replace("{dir}", &dir.display().to_string());
        format!(
            "registry:\n  root: {root}\nproviders:\n  testapi:\n    base_url: {mock}\ncredentials:\n  process_env: false\n{audit}server:\n  listen: 127.0.0.1:0\ntenants:\n  - id: default\n  - id: acme\n    mode: safe\n    credentials:\n      env_file: {acme}\n  - id: globex\n    mode: read_only\n    credentials:\n      env_file: {globex}\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme, globex]\n",
            root = fixture_registry().display(),
            pem = write(dir, "issuer.pem", &pem),
        )
    })
    .await
}

/// Calls of alice (acme) and bob (globex); returns a time between alice's calls and bob's.
async fn calls(server: &TestServer, key: &SigningKey) -> SystemTime {
    route_all(&server.mock);
    let token = |sub: &str, tenant: &str| {
        key.sign(
            &json!({"iss": ISSUER, "aud": RESOURCE, "sub": sub, "tenant": tenant,
                         "exp": now() + 600, "iat": now()}),
        )
    };
    let http = reqwest::Client::new();
    let alice = rmcp_client(http.clone(), &server.url, Some(&token("alice", "acme"))).await;
    call(&alice, "server_info", json!({})).await;
    call(&alice, "run_select_query", json!({"sql": SELECT})).await;
    // `safe` holds a delete for approval; this client cannot be asked.
    call(&alice, "run_mutation_query", json!({"sql": DELETE})).await;
    let between = SystemTime::now();
    let bob = rmcp_client(http, &server.url, Some(&token("bob", "globex"))).await;
    call(&bob, "run_select_query", json!({"sql": SELECT})).await;
    // `read_only` refuses it.
    call(&bob, "run_mutation_query", json!({"sql": DELETE})).await;
    call(&bob, "run_select_query", json!({"sql": HOSTILE})).await;
    between
}

/// Runs `querygate audit query <args>` with `env`.
async fn audit_query(env: &[(&str, String)], args: Vec<String>) -> Output {
    let mut cmd = querygate_command();
    cmd.args(["audit", "query"]).args(&args);
    for (key, value) in env {
        cmd.env(key, value);
    }
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

type Predicate = Box<dyn Fn(&AuditRecord) -> bool>;

/// Each filter, as arguments and as the test's own predicate, with how many records of the
/// calls above it must select.
fn cases(between: SystemTime) -> Vec<(Vec<String>, Predicate, usize)> {
    let t = humantime::format_rfc3339_micros(between).to_string();
    let at = |r: &AuditRecord| humantime::parse_rfc3339(&r.timestamp).unwrap();
    let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    vec![
        (
            args(&["--tenant", "globex"]),
            Box::new(|r| r.tenant == "globex"),
            3,
        ),
        (
            args(&["--decision", "refuse_immediate"]),
            Box::new(|r| r.decision.as_str() == "refuse_immediate"),
            1,
        ),
        (
            args(&["--class", "mutation_delete", "--tenant", "acme"]),
            Box::new(|r| r.tenant == "acme" && r.query_class.as_deref() == Some("mutation_delete")),
            1,
        ),
        (
            args(&["--tool", "run_select_query", "--principal", "alice"]),
            Box::new(|r| r.tool == "run_select_query" && r.principal == "alice"),
            1,
        ),
        (
            args(&["--outcome", "ok", "--tenant", "acme"]),
            Box::new(|r| r.tenant == "acme" && r.outcome.map(|o| o.as_str()) == Some("ok")),
            2,
        ),
        (
            args(&["--since", &t]),
            Box::new(move |r| at(r) >= between),
            3,
        ),
        (
            args(&["--until", &t, "--issuer", ISSUER]),
            Box::new(move |r| at(r) < between),
            3,
        ),
        (args(&["--since", "1h"]), Box::new(|_| true), 6),
        (args(&["--until", "1h"]), Box::new(|_| false), 0),
    ]
}

/// Runs every case over `source` (`[dir]` or `[--database]`) and checks the output against
/// `stored`: every record written, each as (its stored line, the record); `between` falls
/// between alice's calls and bob's.
async fn check(
    env: &[(&str, String)],
    source: &[&str],
    stored: &[(String, AuditRecord)],
    between: SystemTime,
) {
    assert_eq!(stored.len(), 6, "one record per call: {stored:#?}");
    let source: Vec<String> = source.iter().map(|s| (*s).to_owned()).collect();
    let with = |mut args: Vec<String>, format: &str| {
        args.extend(["--format".to_owned(), format.to_owned()]);
        args.extend(source.iter().cloned());
        args
    };
    for (args, predicate, count) in cases(between) {
        // By call start (a stable sort: one start keeps the written order).
        let mut selected: Vec<&(String, AuditRecord)> =
            stored.iter().filter(|(_, r)| predicate(r)).collect();
        selected.sort_by_key(|(_, r)| humantime::parse_rfc3339(&r.timestamp).unwrap());
        let expected: Vec<&String> = selected.iter().map(|(line, _)| line).collect();
        assert_eq!(
            expected.len(),
            count,
            "{args:?} selects {count} of {stored:#?}"
        );
        let out = audit_query(env, with(args.clone(), "json")).await;
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, expected, "{args:?}");

        let out = audit_query(env, with(args.clone(), "table")).await;
        let table = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{args:?}: {table}");
        let rows: Vec<&str> = table
            .lines()
            .skip(2)
            .filter(|l| l.starts_with('|'))
            .collect();
        assert_eq!(rows.len(), count, "{args:?}: {table}");
        assert!(table.starts_with("| time "), "{table}");
        assert!(
            table.ends_with(&format!(
                "({count} row{})\n",
                if count == 1 { "" } else { "s" }
            )),
            "{table}"
        );
        for (row, line) in rows.iter().zip(&expected) {
            let stored = parse_line(line).unwrap().stored;
            let cells: Vec<&str> = row.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells[0], stored.record.timestamp, "{row}");
            assert_eq!(
                cells[1],
                format!("{}#{}", stored.stream, stored.seq),
                "{row}"
            );
            assert_eq!(cells[2], stored.record.tenant, "{row}");
            assert_eq!(cells[3], format!("{} ({ISSUER})", stored.record.principal));
            assert_eq!(cells[4], stored.record.tool, "{row}");
            assert_eq!(cells[6], stored.record.decision.as_str(), "{row}");
        }
    }
    // `--limit`: the earliest records that match.
    let out = audit_query(
        env,
        with(
            vec!["--tenant".into(), "globex".into(), "-n".into(), "2".into()],
            "json",
        ),
    )
    .await;
    let globex: Vec<&String> = stored
        .iter()
        .filter(|(_, r)| r.tenant == "globex")
        .map(|(line, _)| line)
        .take(2)
        .collect();
    assert_eq!(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .collect::<Vec<_>>(),
        globex
    );

    // Untrusted text is escaped in the table and stored verbatim in JSON.
    let hostile = |format: &str| {
        with(
            vec![
                "--tenant".into(),
                "globex".into(),
                "--tool".into(),
                "run_select_query".into(),
            ],
            format,
        )
    };
    let table = audit_query(env, hostile("table")).await;
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(
        table.contains("'x\\u{1b}[2J\\u{202e}y'")
            && !table.contains('\u{1b}')
            && !table.contains('\u{202e}'),
        "{table}"
    );
    let json = audit_query(env, hostile("json")).await;
    let json = String::from_utf8(json.stdout).unwrap();
    let sqls: Vec<String> = json
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["sql"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(sqls.iter().any(|s| s == HOSTILE), "{sqls:?}");

    // Bad filter values: a clear error and exit 2.
    for (args, message) in [
        (vec!["--since", "yesterday"], "'yesterday' is not a time"),
        (vec!["--until", "2026-11-30T11:30:00"], "is not a time"),
        (vec!["--decision", "deny"], "'deny' is not a decision"),
        (vec!["--class", "delete"], "'delete' is not a query class"),
        (vec!["--outcome", "failed"], "'failed' is not an outcome"),
        (
            vec!["--since", "1h", "--until", "2h"],
            "is not before --until",
        ),
    ] {
        let out = audit_query(
            env,
            with(args.iter().map(|s| (*s).to_owned()).collect(), "json"),
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

/// Every line of the audit files of `dir`, with its record.
fn file_records(dir: &Path) -> Vec<(String, AuditRecord)> {
    let mut out = Vec::new();
    for file in location::files_of(&FileLocation::Dir(dir.to_owned())).unwrap() {
        for line in std::fs::read_to_string(file).unwrap().lines() {
            out.push((line.to_owned(), parse_line(line).unwrap().stored.record));
        }
    }
    out
}

#[tokio::test]
async fn audit_query_filters_the_files_of_a_server() {
    let key = SigningKey::new("q1");
    let server = server(&key, "audit:\n  file:\n    dir: {dir}/audit\n").await;
    let between = calls(&server, &key).await;
    let dir = server._dir.path().join("audit");
    let stored = file_records(&dir);
    check(&[], &[dir.to_str().unwrap()], &stored, between).await;

    // A tampered line is left out, named on stderr, and the exit code says so.
    let file = location::files_of(&FileLocation::Dir(dir.clone()))
        .unwrap()
        .pop()
        .unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replacen("\"tenant\":\"globex\"", "\"tenant\":\"acme\"", 1),
    )
    .unwrap();
    let out = audit_query(
        &[],
        vec![
            "--tenant".into(),
            "acme".into(),
            "--format".into(),
            "json".into(),
            dir.display().to_string(),
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(":4: the record does not match its hash"),
        "{stderr}"
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 3);
}

#[tokio::test]
async fn audit_query_filters_the_database_in_sql() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let pool = database.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    let key = SigningKey::new("q2");
    let audit = format!(
        "audit:\n  sink: postgres\ndatabase:\n  url: {}\n",
        database.url
    );
    let server = server(&key, &audit).await;
    let between = calls(&server, &key).await;
    let rows =
        query_as::<Postgres, (String, String)>("SELECT record, hash FROM audit_events ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    // The line of each row: `record` with its `hash` as the last field, as a file holds it.
    let stored: Vec<(String, AuditRecord)> = rows
        .iter()
        .map(|(record, hash)| {
            let line = format!("{},\"hash\":\"{hash}\"}}", &record[..record.len() - 1]);
            let parsed = parse_line(&line).unwrap().stored.record;
            (line, parsed)
        })
        .collect();
    let env = [("QUERYGATE_DATABASE__URL", database.url.clone())];
    check(&env, &["--database"], &stored, between).await;
}
