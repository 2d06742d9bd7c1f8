//! Planning cost per statement, for a profiler: validates one SELECT `N` times against a
//! registry (parse, resource model, plan, SQLite `EXPLAIN`; no upstream call), with the
//! registry's recheck interval at an hour so that every statement after the first costs the
//! same.
//!
//! `cargo build --release --example plan_cost`, then, with the peer benchmark's `demo`
//! provider (`../shared/bench/peers/querygate/registry`) and its default statement:
//!
//! ```sh
//! valgrind --tool=callgrind --toggle-collect='*select*prepare*' \
//!     --toggle-collect='*ParsedSql*parse*' \
//!     target/release/examples/plan_cost <registry root> 51 [SQL]
//! ```
//!
//! The instructions of one statement's parse and plan are the difference between the
//! totals of two runs (e.g. `N` = 51 and 1) divided by the difference of `N`.

use anyhow::{Context, Result};
use querygate::engine::{Engine, EngineConfig, ExecContext};

const DEFAULT_SQL: &str =
    "SELECT name, stars FROM demo.repos.repos WHERE org='acme' ORDER BY stars DESC LIMIT 10";

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let root = args
        .next()
        .context("usage: plan_cost <registry root> <N> [SQL]")?;
    let n: usize = args.next().context("missing N")?.parse()?;
    let sql = args.next().unwrap_or_else(|| DEFAULT_SQL.to_owned());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let mut config = EngineConfig::new(root);
    // No recheck of the files during the run: every statement costs the same.
    config.registry_recheck = std::time::Duration::from_secs(3600);
    let engine = Engine::new(config)?;
    let cx = ExecContext::anonymous_default();
    runtime.block_on(async {
        for _ in 0..n {
            engine.validate(&cx, &sql).await?;
        }
        anyhow::Ok(())
    })?;
    println!("{n} statements validated");
    Ok(())
}
