//! The remote registry: listing and pulling from a registry served by the mock on 127.0.0.1.
//! The real packages come from `QUERYGATE_COMPAT_REGISTRY`'s `dist/` (required under CI;
//! outside it those tests skip without it), re-signed by the test root every engine here trusts; hostile packages
//! are built here with the `tar` builder. Signature checks themselves: `signed_packages`.

use std::path::{Path, PathBuf};

use querygate::engine::{Engine, EngineConfig, ErrorKind, ProviderSettings};
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::signing::{signed_tgz, signer};
use crate::support::*;

/// The compat registry's `dist/` (its packages); `None` only outside CI without it (under
/// CI a missing registry fails the test: [`compat_registry`]).
fn dist() -> Option<PathBuf> {
    compat_registry().map(|root| root.join("dist"))
}

/// Serves `dist/` as a registry at `<mock>/providers`, its packages re-signed by the test
/// root.
fn serve_dist(mock: &Mock, dist: &Path) {
    crate::support::packages::serve_compat_dist(mock, "/providers", dist, |p| {
        signer().resign_package(p)
    });
}

fn registry_engine(root: &Path, mock: &Mock, tweak: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = EngineConfig::new(root);
    config.remote.url = Some(format!("{}/providers", mock.url()));
    config.remote.trusted_certificates = vec![signer().cert_path().to_owned()];
    config.providers.insert(
        "google".to_owned(),
        ProviderSettings {
            base_url: Some(mock.url()),
            auth: Some(json!({"type": "null_auth"})),
            ..Default::default()
        },
    );
    tweak(&mut config);
    Engine::new(config).unwrap()
}

/// Every path under `root`, relative, sorted.
fn tree(root: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(base).unwrap().display().to_string());
            if entry.file_type().unwrap().is_dir() {
                walk(base, &path, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn list_all_one_and_forbidden_characters() {
    let Some(dist) = dist() else { return };
    let mock = Mock::start().await;
    serve_dist(&mock, &dist);
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, |_| {});

    let all = query(&e, "REGISTRY LIST").await;
    assert_eq!(all.columns, ["provider", "versions"]);
    assert_eq!(
        column(&all, "provider"),
        [
            text("github"),
            text("google"),
            text("netlify"),
            text("okta")
        ]
    );
    assert_eq!(
        all.rows[1][1],
        text("v0.1.0, v0.1.1-alpha01, v0.1.2, v0.2.1")
    );

    let one = query(&e, "registry list google;").await;
    assert_eq!(one.columns, ["provider", "version"]);
    assert_eq!(
        column(&one, "version"),
        [
            text("v0.1.0"),
            text("v0.1.1-alpha01"),
            text("v0.1.2"),
            text("v0.2.1")
        ]
    );
    assert!(
        column(&one, "provider")
            .iter()
            .all(|p| *p == text("google"))
    );

    let listed = e.registry_list(Some("okta")).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].versions, ["v0.1.0"]);

    for bad in [
        "REGISTRY LIST \"goo gle\"",
        "REGISTRY LIST 'a;b'",
        "REGISTRY LIST \"a\\b\"",
    ] {
        let err = query_err(&e, bad).await;
        assert_eq!(err.kind(), ErrorKind::Registry);
        assert_eq!(err.message(), "forbidden characters in provider", "{bad}");
    }
    let err = query_err(&e, "REGISTRY LIST nosuch").await;
    assert!(
        err.message()
            .contains("'nosuch' is not in the remote registry"),
        "{err}"
    );
    // Listing reads nothing but the index and writes nothing.
    assert!(tree(root.path()).is_empty());
}

#[tokio::test]
async fn pull_newest_usable_version_then_query_it() {
    let Some(dist) = dist() else { return };
    let mock = Mock::start().await;
    serve_dist(&mock, &dist);
    mock.route(
        "/b/photos",
        Reply::json(json!({"name": "photos", "location": "EU"})),
    );
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, |_| {});
    // The engine exists before the provider does: no restart is needed to see it.
    assert!(e.providers(&context()).await.unwrap().is_empty());

    let out = query(&e, "REGISTRY PULL google").await;
    assert!(out.columns.is_empty() && out.timestamp.is_some());
    let message = out.messages[0].clone();
    assert!(
        message.starts_with("google provider, version 'v0.1.2' successfully installed"),
        "{message}"
    );
    assert!(
        message.contains("'v0.2.1'") && message.contains("minStackQLVersion"),
        "{message}"
    );
    let pulls: Vec<String> = mock
        .paths()
        .into_iter()
        .filter(|p| p.ends_with(".tgz"))
        .collect();
    assert_eq!(
        pulls,
        [
            "/providers/dist/googleapis.com/v0.1.2.tgz",
            "/providers/dist/googleapis.com/v0.2.1.tgz"
        ]
    );
    // Registry traffic is plain GETs without bodies.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.method == "GET" && r.body_text().is_empty())
    );
    // Installed under the package folder with its signatures and the install record;
    // nothing else left behind.
    assert_eq!(
        tree(root.path()),
        [
            "providers.lock",
            "src",
            "src/googleapis.com",
            "src/googleapis.com/v0.1.2",
            "src/googleapis.com/v0.1.2/.querygate-install.json",
            "src/googleapis.com/v0.1.2/provider.yaml",
            "src/googleapis.com/v0.1.2/provider.yaml.sig",
            "src/googleapis.com/v0.1.2/services",
            "src/googleapis.com/v0.1.2/services/storage-v1.yaml",
            "src/googleapis.com/v0.1.2/services/storage-v1.yaml.sig",
        ]
    );

    let providers = e.providers(&context()).await.unwrap();
    assert_eq!(providers[0].name, "google");
    assert_eq!(providers[0].version, "v0.1.2");
    let services = query(&e, "SHOW SERVICES IN google").await;
    assert!(
        services
            .rows
            .iter()
            .flatten()
            .any(|c| *c == text("storage"))
    );
    let resources = e.resources(&context(), "google", "storage").await.unwrap();
    assert!(resources.iter().any(|r| r.name == "buckets"));
    let rows = query(
        &e,
        "SELECT name, location FROM google.storage.buckets WHERE bucket = 'photos'",
    )
    .await;
    assert_eq!(rows.rows, vec![vec![text("photos"), text("EU")]]);

    // Pulling again replaces the same version in place.
    let again = e
        .registry_pull_for(&context(), "googleapis.com", None)
        .await
        .unwrap();
    assert_eq!(again.provider, "google");
    assert_eq!(again.version, "v0.1.2");
    assert_eq!(again.skipped.len(), 1);
    assert_eq!(again.skipped[0].version, "v0.2.1");
    assert_eq!(again.verified_documents, Some(2));
    assert_eq!(tree(root.path()).len(), 10);
}

#[tokio::test]
async fn pull_explicit_versions_refused_with_reasons() {
    let Some(dist) = dist() else { return };
    let mock = Mock::start().await;
    serve_dist(&mock, &dist);
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, |_| {});

    let err = query_err(&e, "REGISTRY PULL google v0.2.1").await;
    assert_eq!(err.kind(), ErrorKind::Registry);
    assert!(
        err.message().contains("minStackQLVersion") && err.message().contains("v999.999.999"),
        "{err}"
    );
    let err = query_err(&e, "REGISTRY PULL google v0.1.0").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(
        err.message().contains("'v0.1.0'") && err.message().contains("has no package"),
        "{err}"
    );
    let err = query_err(&e, "REGISTRY PULL google v7.7.7").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("no version 'v7.7.7'"), "{err}");
    let err = query_err(&e, "REGISTRY PULL nosuch").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(
        err.message()
            .contains("'nosuch' is not in the remote registry"),
        "{err}"
    );
    assert!(tree(root.path()).is_empty(), "{:?}", tree(root.path()));

    // Explicit and usable.
    let out = query(&e, "REGISTRY PULL google v0.1.2;").await;
    assert_eq!(
        out.messages,
        vec!["google provider, version 'v0.1.2' successfully installed".to_owned()]
    );
}

#[tokio::test]
async fn pull_argument_checks_and_registry_urls() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, |_| {});
    let err = query_err(&e, "REGISTRY PULL").await;
    assert_eq!(err.message(), "provider not specified");
    for bad in [
        "REGISTRY PULL \"go ogle\"",
        "REGISTRY PULL 'a;b'",
        "REGISTRY PULL ../etc",
        "REGISTRY PULL google 'v1 2'",
        "REGISTRY PULL google ../v1",
    ] {
        let err = query_err(&e, bad).await;
        assert_eq!(
            err.message(),
            "forbidden characters in provider or version",
            "{bad}"
        );
    }
    // Nothing was requested for refused names.
    assert!(mock.requests().is_empty());
    let err = query_err(&e, "REGISTRY LIST").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("no provider index"), "{err}");

    // An unreachable registry keeps the cause (connection refused), and says what to do.
    let offline = registry_engine(root.path(), &mock, |c| {
        c.remote.url = Some("http://127.0.0.1:1/providers".to_owned());
    });
    let err = query_err(&offline, "REGISTRY LIST").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(
        err.message().contains("error sending request")
            && err.message().contains("Connection refused")
            && err
                .message()
                .ends_with("serve a registry mirror and point registry.url at it"),
        "{err}"
    );

    let local = registry_engine(root.path(), &mock, |c| {
        c.remote.url = Some(format!("file://{}", root.path().display()));
    });
    let err = query_err(&local, "REGISTRY LIST").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("meaningless in local mode"), "{err}");
    let err = local
        .registry_pull_for(&context(), "google", None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("meaningless in local mode"), "{err}");
    // Redirects are not followed; errors other than 404 stop a pull.
    mock.route(
        "/moved/dist/providers.yaml",
        Reply::status(301, "").header("location", "http://elsewhere.invalid/"),
    );
    let moved = registry_engine(root.path(), &mock, |c| {
        c.remote.url = Some(format!("{}/moved/", mock.url()));
    });
    let err = query_err(&moved, "REGISTRY LIST").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(
        err.message().contains("returned 301") && err.message().contains("not followed"),
        "{err}"
    );
    mock.route("/broken/dist/providers.yaml", Reply::status(503, "busy"));
    let broken = registry_engine(root.path(), &mock, |c| {
        c.remote.url = Some(format!("{}/broken", mock.url()));
    });
    let err = query_err(&broken, "REGISTRY PULL google").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("returned 503"), "{err}");
    let none = registry_engine(root.path(), &mock, |c| c.remote.url = None);
    let err = query_err(&none, "REGISTRY LIST").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(err.message().contains("set registry.url"), "{err}");

    // A tenant may not pull a provider it may not use.
    let restricted = querygate::engine::ExecContext {
        allowed_providers: Some(["github".to_owned()].into()),
        ..context()
    };
    let err = e
        .execute(&restricted, "REGISTRY PULL google")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderNotAllowed);
    assert!(tree(root.path()).is_empty());
}

// ---- hostile and broken packages -------------------------------------------------------

use crate::support::packages::*;

fn serve_evil(mock: &Mock, package: Vec<u8>) {
    mock.route(
        "/providers/dist/providers.yaml",
        Reply::bytes(
            "application/yaml",
            b"providers:\n  evil:\n    versions:\n    - v1\n".to_vec(),
        ),
    );
    mock.route(
        "/providers/dist/evil/v1.tgz",
        Reply::bytes("application/gzip", package),
    );
}

fn small_caps(c: &mut EngineConfig) {
    c.remote.max_download_bytes = 256 * 1024;
    c.remote.max_unpacked_bytes = 4 * 1024 * 1024;
    c.remote.max_entry_bytes = 1024 * 1024;
    c.remote.max_entries = 50;
}

/// Bytes that do not compress (a simple LCG), to exceed the download cap.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

#[tokio::test]
async fn hostile_packages_are_refused_and_leave_the_root_unchanged() {
    let with_provider = |mut items: Vec<Item>| {
        let mut all = good_items("x");
        all.append(&mut items);
        tgz(all)
    };
    let many: Vec<Item> = (0..60)
        .map(|i| {
            Item::File(
                Box::leak(format!("v1/f{i}.yaml").into_boxed_str()),
                b"a: 1\n".to_vec(),
            )
        })
        .collect();
    let bomb: Vec<Item> = (0..8)
        .map(|i| {
            Item::File(
                Box::leak(format!("v1/zeros{i}.yaml").into_boxed_str()),
                vec![0u8; 900 * 1024],
            )
        })
        .collect();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dot-dot",
            with_provider(vec![Item::RawName("v1/../../escape.yaml", b"x".to_vec())]),
            "climbs out",
        ),
        (
            "absolute",
            with_provider(vec![Item::RawName("/tmp/escape.yaml", b"x".to_vec())]),
            "absolute path",
        ),
        (
            "symlink",
            with_provider(vec![Item::Symlink("v1/link", "/etc/passwd")]),
            "symbolic link",
        ),
        (
            "hardlink",
            with_provider(vec![Item::Hardlink("v1/hard", "v1/provider.yaml")]),
            "hard link",
        ),
        ("fifo", with_provider(vec![Item::Fifo("v1/pipe")]), "fifo"),
        (
            "outside folder",
            with_provider(vec![Item::File("v2/provider.yaml", b"x".to_vec())]),
            "outside the package folder 'v1/'",
        ),
        (
            "big entry",
            with_provider(vec![Item::File(
                "v1/services/big.yaml",
                vec![0u8; 2 * 1024 * 1024],
            )]),
            "larger than 1048576 bytes",
        ),
        (
            "bomb",
            with_provider(bomb),
            "unpacks to more than 4194304 bytes",
        ),
        ("many entries", with_provider(many), "more than 50 entries"),
        (
            "download too large",
            with_provider(vec![Item::File("v1/noise.bin", noise(300 * 1024))]),
            "larger than 262144 bytes",
        ),
        (
            "duplicate",
            with_provider(vec![Item::File(
                "v1/provider.yaml",
                b"name: evil\n".to_vec(),
            )]),
            "appears twice",
        ),
        (
            "no provider.yaml",
            signed_tgz(vec![Item::File(
                "v1/services/things.yaml",
                b"a: 1\n".to_vec(),
            )]),
            "no 'v1/provider.yaml'",
        ),
        (
            "wrong name",
            signed_tgz(vec![Item::File(
                "v1/provider.yaml",
                b"name: other\n".to_vec(),
            )]),
            "names provider 'other', not 'evil'",
        ),
        (
            "bad yaml",
            signed_tgz(vec![Item::File(
                "v1/provider.yaml",
                b"name: [unclosed\n".to_vec(),
            )]),
            "not valid YAML",
        ),
        (
            "not gzip",
            b"this is not a tarball".to_vec(),
            "not a readable .tgz",
        ),
        (
            "truncated",
            {
                let whole = tgz(good_items("x"));
                whole[..whole.len() / 2].to_vec()
            },
            "not a readable .tgz",
        ),
    ];
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, small_caps);
    for (name, package, expected) in cases {
        serve_evil(&mock, package);
        let err = query_err(&e, "REGISTRY PULL evil").await;
        assert_eq!(err.kind(), ErrorKind::Registry, "{name}");
        assert!(err.message().contains(expected), "{name}: {err}");
        assert!(
            tree(root.path()).is_empty(),
            "{name} left {:?}",
            tree(root.path())
        );
    }
    assert!(!Path::new("/tmp/escape.yaml").exists());
}

#[tokio::test]
async fn reinstall_replaces_atomically_and_a_bad_package_keeps_the_old_one() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, small_caps);
    serve_evil(&mock, signed_tgz(good_items("First")));
    let out = query(&e, "REGISTRY PULL evil v1").await;
    assert_eq!(
        out.messages,
        vec!["evil provider, version 'v1' successfully installed".to_owned()]
    );
    let first = query(&e, "SHOW SERVICES IN evil").await;
    assert!(first.rows.iter().flatten().any(|c| *c == text("First")));

    // A new build of the same version is picked up at once (cached documents dropped).
    serve_evil(&mock, signed_tgz(good_items("Second")));
    query(&e, "REGISTRY PULL evil").await;
    let second = query(&e, "SHOW SERVICES IN evil").await;
    assert!(second.rows.iter().flatten().any(|c| *c == text("Second")));

    // A broken build fails and leaves the installed one whole.
    let before = tree(root.path());
    serve_evil(
        &mock,
        tgz(vec![
            Item::File("v1/provider.yaml", b"name: evil\n".to_vec()),
            Item::Symlink("v1/services", "/etc"),
        ]),
    );
    let err = query_err(&e, "REGISTRY PULL evil").await;
    assert!(err.message().contains("symbolic link"), "{err}");
    assert_eq!(tree(root.path()), before);
    let still = query(&e, "SHOW SERVICES IN evil").await;
    assert!(still.rows.iter().flatten().any(|c| *c == text("Second")));
}

#[tokio::test]
async fn cli_registry_list_and_pull() {
    let mock = Mock::start().await;
    serve_evil(&mock, signed_tgz(good_items("Cli")));
    let root = tempfile::tempdir().unwrap();
    // The CLI's audit goes under XDG_STATE_HOME, never into the working directory.
    let state = tempfile::tempdir().unwrap();
    let (root_path, url) = (root.path().to_owned(), format!("{}/providers", mock.url()));
    let state_path = state.path().to_owned();
    let run = move |args: &'static [&'static str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("XDG_STATE_HOME", &state_path)
            .env("QUERYGATE_REGISTRY__ROOT", &root_path)
            .env("QUERYGATE_REGISTRY__URL", &url)
            .env(
                "QUERYGATE_REGISTRY__TRUSTED_CERTIFICATES",
                format!("[{}]", signer().cert_path().display()),
            )
            .args(args)
            .output()
            .unwrap()
    };
    let (list, pull, one) = tokio::task::spawn_blocking(move || {
        (
            run(&["registry", "list", "--output", "csv"]),
            run(&["registry", "pull", "evil", "--output", "csv"]),
            run(&["registry", "list", "evil", "-o", "json"]),
        )
    })
    .await
    .unwrap();
    for out in [&list, &pull, &one] {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        "provider,versions\r\nevil,v1\r\n"
    );
    assert_eq!(
        String::from_utf8_lossy(&pull.stdout),
        "message\r\n\"evil provider, version 'v1' successfully installed\"\r\n"
    );
    let one: serde_json::Value = serde_json::from_slice(&one.stdout).unwrap();
    assert_eq!(one, json!([{"provider": "evil", "version": "v1"}]));
    assert!(root.path().join("src/evil/v1/provider.yaml").is_file());
}

#[tokio::test]
async fn newest_usable_version_skips_missing_and_too_new_packages() {
    let mock = Mock::start().await;
    mock.route(
        "/providers/dist/providers.yaml",
        Reply::bytes(
            "application/yaml",
            b"providers:\n  evil:\n    versions: [v1, v2, v3]\n".to_vec(),
        ),
    );
    let too_new = PROVIDER_YAML.replace("TITLE", "New").replace(
        "name: evil\n",
        "name: evil\nconfig:\n  minStackQLVersion: v3.0.0\n",
    );
    mock.route(
        "/providers/dist/evil/v2.tgz",
        Reply::bytes(
            "application/gzip",
            signed_tgz(vec![Item::File("v2/provider.yaml", too_new.into_bytes())]),
        ),
    );
    mock.route(
        "/providers/dist/evil/v1.tgz",
        Reply::bytes("application/gzip", signed_tgz(good_items("Old"))),
    );
    let root = tempfile::tempdir().unwrap();
    let e = registry_engine(root.path(), &mock, small_caps);
    let outcome = e.registry_pull_for(&context(), "evil", None).await.unwrap();
    assert_eq!(outcome.version, "v1");
    assert_eq!(
        outcome.message,
        "evil provider, version 'v1' successfully installed; skipped newer version 'v3': the registry has no package for it; skipped newer version 'v2': it requires StackQL v3.0.0 or later (config.minStackQLVersion), and querygate reads the provider format of StackQL v0.9.0"
    );
    assert_eq!(
        tree(root.path()),
        [
            "providers.lock",
            "src",
            "src/evil",
            "src/evil/v1",
            "src/evil/v1/.querygate-install.json",
            "src/evil/v1/provider.yaml",
            "src/evil/v1/provider.yaml.sig",
            "src/evil/v1/services",
            "src/evil/v1/services/things.yaml",
            "src/evil/v1/services/things.yaml.sig",
        ]
    );
    let err = e
        .registry_pull_for(&context(), "evil", Some("v2"))
        .await
        .unwrap_err();
    assert!(err.message().contains("requires StackQL v3.0.0"), "{err}");
    let err = e
        .registry_pull_for(&context(), "evil", Some("v3"))
        .await
        .unwrap_err();
    assert!(err.message().contains("has no package"), "{err}");
    // A failure other than 404 stops the pull: no silent fall-back to an older version.
    mock.route("/providers/dist/evil/v3.tgz", Reply::status(503, "busy"));
    let err = e
        .registry_pull_for(&context(), "evil", None)
        .await
        .unwrap_err();
    assert!(err.message().contains("returned 503"), "{err}");
    // An empty quoted provider lists everything.
    let all = query(&e, "REGISTRY LIST ''").await;
    assert_eq!(all.columns, ["provider", "versions"]);
    assert_eq!(all.rows, vec![vec![text("evil"), text("v1, v2, v3")]]);
}

/// The services `SHOW SERVICES IN evil` lists, as one text (titles included).
async fn evil_services(e: &Engine) -> Result<String, querygate::engine::Error> {
    let out = e.execute(&context(), "SHOW SERVICES IN evil").await?;
    Ok(format!("{:?}", out.rows))
}

/// Files changed by hand under the registry folder: within `registry_recheck` nothing is read
/// from the folder (not even when the provider's folder is gone); with a zero interval every
/// change is seen at once; a pull is seen at once whatever the interval.
#[tokio::test]
async fn hand_changes_follow_the_recheck_interval_and_pulls_are_seen_at_once() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let write_version = |version: &str, title: &str| {
        let dir = root.path().join("src/evil").join(version);
        std::fs::create_dir_all(dir.join("services")).unwrap();
        let provider = PROVIDER_YAML
            .replace("TITLE", title)
            .replace("evil/v1/", &format!("evil/{version}/"));
        std::fs::write(dir.join("provider.yaml"), provider).unwrap();
        std::fs::write(
            dir.join("services/things.yaml"),
            "openapi: 3.0.0\ninfo: {title: t, version: v1}\npaths: {}\ncomponents:\n  x-stackQL-resources: {}\n",
        )
        .unwrap();
    };
    write_version("v1", "First");
    let cached = registry_engine(root.path(), &mock, |c| {
        c.registry_recheck = std::time::Duration::from_secs(3600)
    });
    let fresh = registry_engine(root.path(), &mock, |c| {
        c.registry_recheck = std::time::Duration::ZERO
    });
    for e in [&cached, &fresh] {
        assert!(evil_services(e).await.unwrap().contains("First"));
    }

    write_version("v1", "Second");
    assert!(evil_services(&fresh).await.unwrap().contains("Second"));
    assert!(evil_services(&cached).await.unwrap().contains("First"));

    write_version("v2", "Third");
    assert!(evil_services(&fresh).await.unwrap().contains("Third"));
    assert!(evil_services(&cached).await.unwrap().contains("First"));

    std::fs::rename(root.path().join("src/evil"), root.path().join("gone")).unwrap();
    let err = evil_services(&fresh).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::UnknownTable, "{err}");
    assert!(evil_services(&cached).await.unwrap().contains("First"));

    serve_evil(&mock, signed_tgz(good_items("Pulled")));
    query(&cached, "REGISTRY PULL evil v1").await;
    assert!(evil_services(&cached).await.unwrap().contains("Pulled"));
    assert!(evil_services(&fresh).await.unwrap().contains("Pulled"));
}

/// A service document whose rows' schema lives in another document, `schemas.yaml`.
const THINGS_WITH_ROWS: &str = r#"openapi: 3.0.0
info: {title: t, version: v1}
paths:
  /things:
    get:
      parameters:
        - {name: org, in: query, required: true, schema: {type: string}}
      responses:
        '200':
          content:
            application/json:
              schema: {$ref: 'evil/v1/services/schemas.yaml#/components/schemas/Things'}
components:
  x-stackQL-resources:
    things:
      methods:
        list:
          operation: {$ref: '#/paths/~1things/get'}
      sqlVerbs:
        select:
          - $ref: '#/components/x-stackQL-resources/things/methods/list'
"#;

/// `schemas.yaml` with rows of `id` and `column`.
fn row_schemas(column: &str) -> String {
    format!(
        "components:\n  schemas:\n    Things:\n      type: array\n      items:\n        type: object\n        properties:\n          id: {{type: integer}}\n          {column}: {{type: string}}\n"
    )
}

/// The column names `DESCRIBE evil.things.things` lists.
async fn evil_columns(e: &Engine) -> Vec<String> {
    query(e, "DESCRIBE evil.things.things")
        .await
        .rows
        .into_iter()
        .map(|row| match &row[0] {
            querygate::engine::Cell::Text(name) => name.clone(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The resource models reused across statements follow their documents as the documents
/// themselves do: a hand change to a document reached only through a `$ref` is seen at once
/// with a zero recheck interval and not within a long one; a pull is seen at once.
#[tokio::test]
async fn resource_models_follow_their_documents() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("src/evil/v1");
    std::fs::create_dir_all(dir.join("services")).unwrap();
    std::fs::write(
        dir.join("provider.yaml"),
        PROVIDER_YAML.replace("TITLE", "t"),
    )
    .unwrap();
    std::fs::write(dir.join("services/things.yaml"), THINGS_WITH_ROWS).unwrap();
    // Written with times in the past, so that a rewrite within one clock tick still differs.
    let write_schemas = |column: &str, age: u64| {
        let path = dir.join("services/schemas.yaml");
        std::fs::write(&path, row_schemas(column)).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(age))
            .unwrap();
    };
    write_schemas("name", 100);
    let evil_upstream = |c: &mut EngineConfig| {
        c.providers.insert(
            "evil".to_owned(),
            ProviderSettings {
                base_url: Some(mock.url()),
                auth: Some(json!({"type": "null_auth"})),
                ..Default::default()
            },
        );
    };
    let cached = registry_engine(root.path(), &mock, |c| {
        evil_upstream(c);
        c.registry_recheck = std::time::Duration::from_secs(3600)
    });
    let fresh = registry_engine(root.path(), &mock, |c| {
        evil_upstream(c);
        c.registry_recheck = std::time::Duration::ZERO
    });
    mock.route(
        "/things",
        Reply::json(json!([{"id": 1, "name": "n1", "title": "t1", "label": "l1"}])),
    );
    for e in [&cached, &fresh] {
        for _ in 0..2 {
            assert_eq!(evil_columns(e).await, ["id", "name"]);
            let out = query(e, "SELECT name FROM evil.things.things WHERE org = 'a'").await;
            assert_eq!(out.rows, vec![vec![text("n1")]]);
        }
    }

    write_schemas("title", 50);
    assert_eq!(evil_columns(&fresh).await, ["id", "title"]);
    let out = query(
        &fresh,
        "SELECT title FROM evil.things.things WHERE org = 'a'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("t1")]]);
    let err = query_err(
        &fresh,
        "SELECT name FROM evil.things.things WHERE org = 'a'",
    )
    .await;
    assert!(err.message().contains("name"), "{err}");
    assert_eq!(evil_columns(&cached).await, ["id", "name"]);
    let out = query(
        &cached,
        "SELECT name FROM evil.things.things WHERE org = 'a'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("n1")]]);

    let mut package = good_items("t");
    package.retain(|item| !matches!(item, Item::File("v1/services/things.yaml", _)));
    package.push(Item::File(
        "v1/services/things.yaml",
        THINGS_WITH_ROWS.as_bytes().to_vec(),
    ));
    package.push(Item::File(
        "v1/services/schemas.yaml",
        row_schemas("label").into_bytes(),
    ));
    serve_evil(&mock, signed_tgz(package));
    query(&cached, "REGISTRY PULL evil v1").await;
    assert_eq!(evil_columns(&cached).await, ["id", "label"]);
    let out = query(
        &cached,
        "SELECT label FROM evil.things.things WHERE org = 'a'",
    )
    .await;
    assert_eq!(out.rows, vec![vec![text("l1")]]);
    assert_eq!(evil_columns(&fresh).await, ["id", "label"]);
}

#[tokio::test]
async fn cli_registry_pull_is_audited_with_its_provider() {
    let mock = Mock::start().await;
    serve_evil(&mock, signed_tgz(good_items("Audited")));
    let root = tempfile::tempdir().unwrap();
    let audit = tempfile::tempdir().unwrap();
    let (root_path, audit_path) = (root.path().to_owned(), audit.path().to_owned());
    let url = format!("{}/providers", mock.url());
    let pull = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_querygate"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("USER", "ops-person")
            .env("QUERYGATE_REGISTRY__ROOT", &root_path)
            .env("QUERYGATE_REGISTRY__URL", &url)
            .env(
                "QUERYGATE_REGISTRY__TRUSTED_CERTIFICATES",
                format!("[{}]", signer().cert_path().display()),
            )
            .env("QUERYGATE_AUDIT__FILE__DIR", &audit_path)
            .args(["registry", "pull", "evil", "v1"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        pull.status.success(),
        "{}",
        String::from_utf8_lossy(&pull.stderr)
    );
    assert!(root.path().join("src/evil/v1/provider.yaml").is_file());
    use querygate::audit::{FileLocation, location};
    let files = location::files_of(&FileLocation::Dir(audit.path().to_owned())).unwrap();
    let records: Vec<querygate::audit::AuditRecord> = files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(|line| {
                    querygate::audit::format::parse_line(line)
                        .unwrap()
                        .stored
                        .record
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let seen: Vec<(&str, &str, &str, Option<&str>)> = records
        .iter()
        .map(|r| {
            (
                r.phase.as_str(),
                r.tool.as_str(),
                r.decision.as_str(),
                r.outcome.map(|o| o.as_str()),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            ("intent", "pull_provider", "allow", None),
            ("outcome", "pull_provider", "allow", Some("ok")),
        ]
    );
    for r in &records {
        assert_eq!(
            r.args
                .as_ref()
                .map(|a| serde_json::Value::Object(a.clone())),
            Some(json!({"provider": "evil", "version": "v1"}))
        );
        assert_eq!(
            (r.principal.as_str(), r.os_user.as_deref()),
            ("local", Some(crate::support::uid_user().as_str()))
        );
    }
}
