//! The PostgreSQL database: connecting from the `database:` settings and applying the
//! embedded migrations, from the library and through `querygate migrate`.

use std::process::Command;

use querygate::config::{DatabaseConfig, DatabaseUrl, SecretUrl};
use querygate::db;

use crate::support::pg;

#[tokio::test]
async fn migrations_apply_once_to_a_fresh_database() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let config = DatabaseConfig {
        url: Some(DatabaseUrl::Inline(SecretUrl::new(&database.url))),
        ..DatabaseConfig::default()
    };
    let pool = db::connect(&config).await.expect("connect");
    db::ping(&pool).await.expect("ping");
    assert!(db::applied_versions(&pool).await.unwrap().is_empty());
    let applied = db::migrate(&pool).await.expect("migrate");
    assert_eq!(applied.len(), db::MIGRATOR.iter().count(), "{applied:?}");
    let versions: Vec<i64> = db::MIGRATOR.iter().map(|m| m.version).collect();
    assert_eq!(db::applied_versions(&pool).await.unwrap(), versions);
    assert!(db::migrate(&pool).await.expect("migrate again").is_empty());
}

#[tokio::test]
async fn the_migrate_command_reads_the_url_from_a_file_and_hides_it() {
    let Some(database) = pg::fresh_database().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("db-url");
    std::fs::write(&url_file, format!("{}\n", database.url)).unwrap();
    let run = |url_file: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_querygate"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("QUERYGATE_DATABASE__URL_FILE", url_file)
            .arg("migrate")
            .output()
            .unwrap()
    };
    let first = tokio::task::spawn_blocking({
        let url_file = url_file.clone();
        move || run(&url_file)
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(
        first.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for migration in db::MIGRATOR.iter() {
        assert!(
            stdout.contains(&format!("applied {:04}", migration.version)),
            "{stdout}"
        );
    }
    let again = tokio::task::spawn_blocking({
        let url_file = url_file.clone();
        move || run(&url_file)
    })
    .await
    .unwrap();
    assert!(again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("up to date"),
        "{again:?}"
    );

    // A wrong password: the error names the problem, never the password.
    let mut wrong = url::Url::parse(&database.url).unwrap();
    wrong.set_port(Some(1)).unwrap();
    wrong.set_password(Some("pw-never-shown")).unwrap();
    std::fs::write(&url_file, wrong.as_str()).unwrap();
    let failed = tokio::task::spawn_blocking(move || run(&url_file))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains("cannot connect to the database"),
        "{stderr}"
    );
    assert!(!stderr.contains("pw-never-shown"), "{stderr}");
}

#[tokio::test]
async fn a_private_cluster_stops_and_starts_again() {
    let Some(cluster) = pg::PrivateCluster::start() else {
        return;
    };
    let database = cluster.fresh_database().await;
    let pool = database.pool(2).await;
    db::ping(&pool).await.expect("ping");
    cluster.stop();
    assert!(db::ping(&pool).await.is_err(), "the server is down");
    cluster.start_server();
    // The pool reconnects by itself.
    let last = crate::support::wait::try_eventually(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(100),
        || db::ping(&pool),
    )
    .await
    .err();
    assert!(last.is_none(), "{last:?}\n{}", cluster.server_log());
}
