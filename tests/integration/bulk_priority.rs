//! Bulk work at a lower OS priority (`limits.bulk_work_nice`), seen from the threads of the
//! server (in this process): while a statement that has loaded 256 KiB of responses waits for
//! its next page, its SQLite thread runs at the lowered priority and no async worker does;
//! once the statement ends, no thread is left at that priority. Linux only (nice values are
//! per thread there).
#![cfg(target_os = "linux")]

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::*;
use crate::mock::Reply;

/// The name (as the kernel shortens it) and nice value of every thread of this process.
fn threads() -> Vec<(String, i32)> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
        .filter_map(|stat| {
            // `pid (name) state …`: the name may hold spaces; nice is the 19th field.
            let name = stat[stat.find('(')? + 1..stat.rfind(')')?].to_owned();
            let nice = stat[stat.rfind(')')? + 2..]
                .split(' ')
                .nth(16)?
                .parse()
                .ok()?;
            Some((name, nice))
        })
        .collect()
}

fn own_nice() -> i32 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    stat[stat.rfind(')').unwrap() + 2..]
        .split(' ')
        .nth(16)
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_bulk_statements_sqlite_thread_runs_at_the_lowered_priority_until_it_ends() {
    const BY: i32 = 7;
    let base = own_nice();
    assert!(
        base + BY <= 19,
        "run the tests at nice 12 or less (now {base})"
    );
    let lowered = base + BY;
    let server = start_with("read_only", |_| {
        format!("  max_rows: 10000\nlimits:\n  bulk_work_nice: {BY}\n")
    })
    .await;
    // Page 1: about 340 KB (past the 256 KiB from which a statement's work is bulk work);
    // page 2 comes 3 s later, while the statement waits with its SQLite thread lowered.
    let rows: Vec<Value> = (0..2000)
        .map(|i| json!({"id": i, "name": format!("{i:0>150}")}))
        .collect();
    let next = format!(
        "<{}/orgs/big/items?page=2>; rel=\"next\"",
        server.mock.url()
    );
    server.mock.route(
        "/orgs/big/items",
        Reply::json(Value::Array(rows)).header("link", &next),
    );
    server.mock.route(
        "/orgs/big/items?page=2",
        Reply::json(json!([{"id": 2000, "name": "last"}])).delayed(Duration::from_secs(3)),
    );
    let client = modern_client(&server.url).await;
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
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let now = threads();
        if now
            .iter()
            .any(|(name, nice)| name.starts_with("querygate-sqlit") && *nice == lowered)
        {
            // Nothing else is lowered with it (the render threads serve large results).
            assert!(
                now.iter()
                    .filter(|(name, _)| !name.starts_with("querygate-")
                        || name.starts_with("querygate-audit"))
                    .all(|(_, nice)| *nice == base),
                "{now:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no SQLite thread at nice {lowered}: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (_client, result) = call.await.unwrap();
    let rows = result.structured_content.as_ref().unwrap()["rows"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(rows, 2001, "{}", text_of(&result));
    // The thread went back to its priority (or, where that is not allowed, ended).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while threads()
        .iter()
        .any(|(name, nice)| name.starts_with("querygate-sqlit") && *nice == lowered)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a SQLite thread stayed at nice {lowered}: {:?}",
            threads()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
