//! Bulk work at a lower OS priority (`limits.bulk_work_priority`, `limits.bulk_work_nice`),
//! seen from the threads of a `querygate serve` child process (only this test's statements
//! run there): while a statement that has loaded 256 KiB of responses waits for its next
//! page, its SQLite thread runs at the lowered priority (by default in Linux's `SCHED_IDLE`
//! class; with `nice`, at a higher nice value) and no other thread does; the render thread of
//! its large result runs lowered too and stays so; once the statement ends, no SQLite thread
//! is left at that priority. Linux only (priorities are per thread there).
#![cfg(target_os = "linux")]

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::{Mock, Reply};
use crate::support::wait::eventually;

/// `SCHED_IDLE`'s number in `/proc/…/stat`.
const SCHED_IDLE: i32 = 5;

/// One thread: its name (as the kernel shortens it), nice value and scheduling policy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Thread {
    name: String,
    nice: i32,
    policy: i32,
}

/// A thread's name, nice value (the 19th field) and policy (the 41st) from its `stat`.
fn parse(stat: &str) -> Option<Thread> {
    // `pid (name) state …`: the name may hold spaces.
    let name = stat[stat.find('(')? + 1..stat.rfind(')')?].to_owned();
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    Some(Thread {
        name,
        nice: fields.get(16)?.parse().ok()?,
        policy: fields.get(38)?.parse().ok()?,
    })
}

/// Every thread of process `pid`.
fn threads(pid: u32) -> Vec<Thread> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter_map(|stat| parse(&stat))
        .collect()
}

/// The calling thread (the child process's threads start as this one is).
fn this_thread() -> Thread {
    parse(&std::fs::read_to_string("/proc/thread-self/stat").unwrap()).unwrap()
}

#[tokio::test]
async fn a_bulk_statements_sqlite_thread_runs_in_sched_idle_until_it_ends() {
    let base = this_thread();
    assert_ne!(base.policy, SCHED_IDLE, "run the tests outside SCHED_IDLE");
    bulk_statement_lowers_only_its_sqlite_thread("", |thread| thread.policy == SCHED_IDLE).await;
}

#[tokio::test]
async fn with_nice_a_bulk_statements_sqlite_thread_runs_at_a_higher_nice_value_until_it_ends() {
    const BY: i32 = 7;
    let base = this_thread();
    assert!(
        base.nice + BY <= 19,
        "run the tests at nice 12 or less (now {})",
        base.nice
    );
    let lowered = base.nice + BY;
    bulk_statement_lowers_only_its_sqlite_thread(
        &format!("limits:\n  bulk_work_priority: nice\n  bulk_work_nice: {BY}\n"),
        move |thread| thread.nice == lowered && thread.policy == base.policy,
    )
    .await;
}

/// Runs a statement of two pages, the first past 256 KiB, in a `serve` process configured
/// with `limits`: while the statement waits for page 2, one of its SQLite threads is
/// `lowered` and every thread outside querygate's SQLite and render pools keeps this one's
/// priority; once it has ended, no SQLite thread is left lowered.
async fn bulk_statement_lowers_only_its_sqlite_thread(
    limits: &str,
    lowered: impl Fn(&Thread) -> bool,
) {
    install_crypto_provider();
    let base = this_thread();
    let mock = Mock::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = test_config(
        &mock,
        dir.path(),
        "read_only",
        &format!("  max_rows: 10000\n{limits}"),
    );
    let (url, child, stderr) = spawn_serve(&config).await;
    let stderr = collect_lines(stderr);
    let pid = child.id().unwrap();
    // Page 1: about 340 KB (past the 256 KiB from which a statement's work is bulk work);
    // page 2 comes 3 s later, while the statement waits with its SQLite thread lowered.
    let rows: Vec<Value> = (0..2000)
        .map(|i| json!({"id": i, "name": format!("{i:0>150}")}))
        .collect();
    let next = format!("<{}/orgs/big/items?page=2>; rel=\"next\"", mock.url());
    mock.route(
        "/orgs/big/items",
        Reply::json(Value::Array(rows)).header("link", &next),
    );
    mock.route(
        "/orgs/big/items?page=2",
        Reply::json(json!([{"id": 2000, "name": "last"}])).delayed(Duration::from_secs(3)),
    );
    let client = modern_client(&url).await;
    let call = tokio::spawn(async move {
        let result = call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT id, name FROM testapi.items.items WHERE org = 'big'", "format": "json"}),
        )
        .await;
        (client, result)
    });

    // The statement's SQLite thread lowers itself once page 1 is loaded.
    eventually(
        "a SQLite thread lowered",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let now = threads(pid);
            if now
                .iter()
                .any(|thread| thread.name.starts_with("querygate-sqlit") && lowered(thread))
            {
                // Nothing else is lowered with it (the render threads serve large results).
                let others: Vec<&Thread> = now
                    .iter()
                    .filter(|thread| {
                        !thread.name.starts_with("querygate-sqlit")
                            && !thread.name.starts_with("querygate-rende")
                    })
                    .collect();
                assert!(
                    others
                        .iter()
                        .all(|thread| (thread.nice, thread.policy) == (base.nice, base.policy)),
                    "{others:?}"
                );
                return std::future::ready(Ok(()));
            }
            std::future::ready(Err(now))
        },
    )
    .await;

    let (_client, result) = call.await.unwrap();
    let rows = result.structured_content.as_ref().unwrap()["rows"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(rows, 2001, "{}", text_of(&result));
    // Its 4,002 values were rendered on a render thread, which stays lowered.
    assert!(
        threads(pid)
            .iter()
            .any(|thread| thread.name.starts_with("querygate-rende") && lowered(thread)),
        "no render thread lowered: {:?}",
        threads(pid)
    );
    // The thread went back to its priority (or, where that is not allowed, ended).
    eventually(
        "the SQLite threads back at their priority (a SQLite thread stayed lowered)",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || {
            let now = threads(pid);
            let stayed = now
                .iter()
                .any(|thread| thread.name.starts_with("querygate-sqlit") && lowered(thread));
            std::future::ready(if stayed { Err(now) } else { Ok(()) })
        },
    )
    .await;
    drop(child);
    drop(stderr);
}
