//! `querygate audit maintain`: the partitions of `audit_events` ahead, and retention.

use crate::audit::SinkSettings;
use crate::config::Config;

/// Runs maintenance on `database.url`; prints what it did, exits 1 on failure.
pub(super) async fn run(config: &Config) -> i32 {
    let (ahead, retention) = match &config.audit.sink {
        SinkSettings::Postgres {
            partitions_ahead,
            retention,
            ..
        } => (*partitions_ahead, *retention),
        SinkSettings::File { .. } | SinkSettings::Otlp => {
            eprintln!("error: audit maintain needs audit.sink: postgres");
            return 1;
        }
    };
    let key = match crate::audit::open::mac_key(&config.audit) {
        Ok(key) => key,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let pool = match crate::db::connect(&config.database).await {
        Ok(pool) => pool,
        Err(err) => {
            eprintln!("error: {err}");
            return 1;
        }
    };
    let outcome = crate::audit::partitions::maintain(&pool, ahead, retention, key.as_ref()).await;
    pool.close().await;
    match outcome {
        Ok(report) => {
            for name in &report.created {
                println!("created {name}");
            }
            for (partition, cuts) in &report.removed {
                let verb = retention.map_or("removed", |r| match r.action {
                    crate::audit::partitions::RetentionAction::Drop => "dropped",
                    crate::audit::partitions::RetentionAction::Detach => "detached",
                });
                println!("{verb} {partition}");
                for cut in cuts {
                    println!(
                        "  stream {}: {} records, seq {}..{}",
                        cut.stream, cut.records, cut.first_seq, cut.last_seq
                    );
                }
            }
            println!(
                "ok: {} partitions created, {} removed",
                report.created.len(),
                report.removed.len()
            );
            0
        }
        Err(err) => {
            eprintln!("error [{}]: {err}", err.code());
            1
        }
    }
}
