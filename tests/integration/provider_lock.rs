//! The provider lock: the same documents on every replica. Two replicas share a lock of the
//! fixture provider and an approval key ring over one PostgreSQL; the second one's copy of a
//! document differs by one byte. It stays unready naming the file, and an approval given on
//! the first replica is refused there as a changed plan, with nothing sent. A `registry pull`
//! records what it installs in the lock and refuses a package that differs from it.

use std::path::Path;

use rmcp::model::ElicitationAction;
use serde_json::Value;

use crate::mcp_support::*;
use crate::support::gate::{Approver, DELETE, approver_client, first_round, retry, route_all};
use crate::support::{SECRET, fixture_registry};

/// The fixture registry copied to `<dir>/registry`, locked by `lock` (the lock of the
/// fixture, made with its own code, as `registry pull` writes it).
fn registry_copy(dir: &Path, lock: &querygate::engine::lock::ProviderLock) -> std::path::PathBuf {
    let root = dir.join("registry");
    copy_tree(&fixture_registry(), &root);
    lock.write(&root.join("providers.lock")).unwrap();
    root
}

/// The configuration of a replica over `root`, sending to `upstream`, with approvals sealed
/// by `key` and redeemed in `database`.
fn replica_yaml(root: &Path, dir: &Path, upstream: &str, key: &Path, database: &str) -> String {
    let env_file = dir.join("creds.env");
    std::fs::write(&env_file, format!("TESTAPI_KEY={SECRET}\n")).unwrap();
    format!(
        "registry:\n  root: {}\nproviders:\n  testapi:\n    base_url: {upstream}\ncredentials:\n  env_file: {}\n  process_env: false\ntenants:\n  - id: default\n    mode: safe\nserver:\n  listen: 127.0.0.1:0\napproval:\n  key_files: [{}]\n  store: postgres\ndatabase:\n  url: {database}\n",
        root.display(),
        env_file.display(),
        key.display()
    )
}

async fn readyz(server: &TestServer) -> (u16, Value) {
    let url = server.url.trim_end_matches("/mcp").to_owned() + "/readyz";
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_replica_whose_documents_differ_from_the_lock_is_unready_and_refuses_another_replicas_approval()
 {
    let Some(db) = crate::support::pg::fresh_database().await else {
        return;
    };
    let pool = db.pool(2).await;
    querygate::db::migrate(&pool).await.unwrap();
    pool.close().await;
    let keys = tempfile::tempdir().unwrap();
    let key = keys.path().join("k1");
    std::fs::write(&key, "k".repeat(48)).unwrap();
    let lock = querygate::engine::lock::ProviderLock::of_installed(&fixture_registry().join("src"))
        .unwrap();
    let (key_a, url) = (key.clone(), db.url.clone());
    let lock_a = lock.clone();
    let a = start_yaml(move |mock, dir| {
        let root = registry_copy(dir, &lock_a);
        replica_yaml(&root, dir, mock, &key_a, &url)
    })
    .await;
    route_all(&a.mock);
    let upstream = a.mock.url();
    let (key_b, url) = (key.clone(), db.url.clone());
    let b = start_yaml(move |_, dir| {
        let root = registry_copy(dir, &lock);
        // One byte more in a document: the same requests, other documents.
        let widgets = root.join("src/testapi/v1/services/widgets.yaml");
        let mut text = std::fs::read_to_string(&widgets).unwrap();
        text.push_str("# edited on this replica\n");
        std::fs::write(&widgets, text).unwrap();
        replica_yaml(&root, dir, &upstream, &key_b, &url)
    })
    .await;

    // The first replica is ready; the second says its registry differs, and its log names
    // the file.
    let (status, body) = readyz(&a).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = readyz(&b).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["checks"]["registry"], "differs from providers.lock",
        "{body}"
    );

    // An approval given on the first replica runs there...
    let on_a = approver_client(&a.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let state = first_round(&on_a, "run_mutation_query", DELETE).await;
    let ran = retry(&on_a, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ran.is_error, Some(true), "{}", text_of(&ran));
    assert_eq!(a.mock.requests().len(), 1);
    // ...and is refused on the replica with other documents: its plan is another.
    let state = first_round(&on_a, "run_mutation_query", DELETE).await;
    let on_b = approver_client(&b.url, Approver::new(Some(ElicitationAction::Accept))).await;
    let refused = retry(&on_b, "run_mutation_query", DELETE, &state, "accept").await;
    assert_eq!(
        error_code(&refused),
        "policy.approval_invalid",
        "{}",
        text_of(&refused)
    );
    assert!(
        error_message(&refused).contains("changed since it was approved"),
        "{}",
        error_message(&refused)
    );
    assert_eq!(
        a.mock.requests().len(),
        1,
        "the refused approval sent nothing"
    );
}

#[tokio::test]
async fn a_pull_records_what_it_installs_in_the_lock_and_refuses_a_package_that_differs() {
    use crate::mock::{Mock, Reply};
    use crate::support::packages::good_items;
    use querygate::engine::lock::{LockChecker, ProviderLock};
    let mock = Mock::start().await;
    let serve = |title: &str| {
        mock.route(
            "/providers/dist/providers.yaml",
            Reply::bytes(
                "application/yaml",
                b"providers:\n  evil:\n    versions:\n    - v1\n".to_vec(),
            ),
        );
        mock.route(
            "/providers/dist/evil/v1.tgz",
            Reply::bytes(
                "application/gzip",
                crate::support::signing::signed_tgz(good_items(title)),
            ),
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("registry");
    copy_tree(&fixture_registry(), &root);
    let engine_with = |lock_file: Option<std::path::PathBuf>| {
        let mut config = querygate::engine::EngineConfig::new(&root);
        config.remote.url = Some(format!("{}/providers", mock.url()));
        config.remote.lock_file = lock_file;
        config.remote.trusted_certificates =
            vec![crate::support::signing::signer().cert_path().to_owned()];
        querygate::engine::Engine::new(config).unwrap()
    };
    let engine = engine_with(None);

    // The first pull makes the lock, of what the registry held and of the package.
    serve("one");
    crate::support::query(&engine, "REGISTRY PULL evil v1").await;
    let lock_file = root.join("providers.lock");
    let lock = ProviderLock::read(&lock_file)
        .unwrap()
        .expect("a lock was written");
    assert_eq!(
        lock.providers.keys().collect::<Vec<_>>(),
        ["evil/v1", "testapi/v1"]
    );
    assert_eq!(
        lock.providers["evil/v1"]
            .documents
            .keys()
            .collect::<Vec<_>>(),
        ["provider.yaml", "services/things.yaml"],
        "signature files are not documents"
    );
    assert_eq!(LockChecker::new(lock_file.clone(), &root).check(), Ok(true));
    // The same package again is what the lock holds.
    crate::support::query(&engine, "REGISTRY PULL evil v1").await;
    // The registry's own lock follows a re-pull of a version that was published anew...
    serve("two");
    crate::support::query(&engine, "REGISTRY PULL evil v1").await;
    let lock = ProviderLock::read(&lock_file).unwrap().unwrap();
    assert_eq!(LockChecker::new(lock_file.clone(), &root).check(), Ok(true));
    // ...while a lock the configuration names is authoritative: another package under a
    // version it holds is refused, and nothing is installed.
    let engine = engine_with(Some(lock_file.clone()));
    serve("three");
    let err = crate::support::query_err(&engine, "REGISTRY PULL evil v1").await;
    assert!(
        err.message().contains("provider.yaml has another digest")
            && err.message().contains("nothing was installed"),
        "{err}"
    );
    let installed = std::fs::read_to_string(root.join("src/evil/v1/provider.yaml")).unwrap();
    assert!(installed.contains("title: two"), "{installed}");
    assert_eq!(ProviderLock::read(&lock_file).unwrap(), Some(lock));
}

#[tokio::test]
async fn registry_lock_writes_the_lock_and_check_names_a_changed_document() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("registry");
    copy_tree(&fixture_registry(), &root);
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, format!("registry:\n  root: {}\n", root.display())).unwrap();
    let run = |args: &[&str]| {
        let out = crate::support::querygate_command()
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, said) = run(&["registry", "lock", "--check"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("there is no provider lock"), "{said}");
    let (code, said) = run(&["registry", "lock"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("1 provider versions, 3 documents"), "{said}");
    let (code, said) = run(&["registry", "lock", "--check"]);
    assert_eq!(code, Some(0), "{said}");
    std::fs::write(
        root.join("src/testapi/v1/services/items.yaml"),
        "changed: true\n",
    )
    .unwrap();
    let (code, said) = run(&["registry", "lock", "--check"]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("src/testapi/v1/services/items.yaml has another digest"),
        "{said}"
    );
}
