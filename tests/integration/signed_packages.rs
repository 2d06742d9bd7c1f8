//! Signed provider documents (issue 47, item 2): `registry pull` verifies every document of
//! a package against its `.sig` with StackQL's scheme before anything is installed. The
//! registry is the mock on 127.0.0.1; packages are signed by roots made at test time
//! (`support::signing`); StackQL's own signatures come from `QUERYGATE_COMPAT_REGISTRY`'s
//! `dist/` (those tests say so and pass without it).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use querygate::engine::{Engine, EngineConfig, ErrorKind};
use serde_json::{Value, json};

use crate::mcp_support::{
    call, error_code, error_message, modern_client, start_with_registry_copy,
};
use crate::mock::{Mock, Reply};
use crate::support::packages::{Item, good_items, tgz};
use crate::support::signing::{Signer, signed_tgz, signer};
use crate::support::*;

/// StackQL's signing certificate of 2022-02-12 to 2024-02-12 (stackql-provider-registry at
/// 979971d6), whose key signed the compat `dist/` packages in January 2023.
const STACKQL_2022: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/crates/engine/data/signing/tests/stackql-2022-02-12.pem"
);

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

/// An engine pulling from the mock into `root`, trusting StackQL's certificate and
/// `trusted`.
fn engine(root: &Path, mock: &Mock, trusted: &[&Path]) -> Engine {
    engine_with(root, mock, |c| {
        c.remote.trusted_certificates = trusted.iter().map(|p| p.to_path_buf()).collect();
    })
}

fn engine_with(root: &Path, mock: &Mock, tweak: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = EngineConfig::new(root);
    config.remote.url = Some(format!("{}/providers", mock.url()));
    tweak(&mut config);
    Engine::new(config).unwrap()
}

/// Every file under `root`, relative, sorted.
fn files(root: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(base, &path, out);
            } else {
                out.push(path.strip_prefix(base).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn record(root: &Path, version_dir: &str) -> Value {
    let text =
        std::fs::read_to_string(root.join(version_dir).join(".querygate-install.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn system(unix: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(unix)
}

#[tokio::test]
async fn a_package_signed_by_a_trusted_root_installs_with_its_record() {
    let mock = Mock::start().await;
    serve_evil(&mock, signed_tgz(good_items("Signed")));
    let root = tempfile::tempdir().unwrap();
    let e = engine(root.path(), &mock, &[signer().cert_path()]);
    let outcome = e.registry_pull_for(&context(), "evil", None).await.unwrap();
    assert_eq!(
        outcome.message,
        "evil provider, version 'v1' successfully installed"
    );
    assert_eq!(outcome.verified_documents, Some(2));
    assert_eq!(
        files(root.path()),
        [
            "providers.lock",
            "src/evil/v1/.querygate-install.json",
            "src/evil/v1/provider.yaml",
            "src/evil/v1/provider.yaml.sig",
            "src/evil/v1/services/things.yaml",
            "src/evil/v1/services/things.yaml.sig",
        ]
    );
    let record = record(root.path(), "src/evil/v1");
    assert_eq!(record["provider"], "evil");
    assert_eq!(record["version"], "v1");
    assert_eq!(
        record["package"],
        format!("{}/providers/dist/evil/v1.tgz", mock.url())
    );
    let signatures = &record["signatures"];
    assert_eq!(signatures["verified"], true);
    assert_eq!(signatures["scheme"], "stackql-ed25519");
    assert_eq!(signatures["documents"], 2);
    let certificates = signatures["certificates"].as_array().unwrap();
    assert_eq!(certificates.len(), 1, "{signatures}");
    assert_eq!(
        certificates[0]["subject"],
        "CN=trusted-test-root, O=querygate tests"
    );
    assert_eq!(
        certificates[0]["source"],
        signer().cert_path().display().to_string()
    );
    assert_eq!(certificates[0]["documents"], 2);
    assert_eq!(certificates[0]["sha256"].as_str().unwrap().len(), 64);
    assert!(
        signatures["signed_from"]
            .as_str()
            .unwrap()
            .starts_with("20")
    );
    let services = query(&e, "SHOW SERVICES IN evil").await;
    assert!(services.rows.iter().flatten().any(|c| *c == text("Signed")));
}

/// `good_items` signed by the trusted root, then changed by `change`.
fn tampered(change: impl FnOnce(&mut Vec<Item>)) -> Vec<u8> {
    let mut items = signer().signed(good_items("x"));
    change(&mut items);
    tgz(items)
}

fn file_mut<'a>(items: &'a mut [Item], name: &str) -> &'a mut Vec<u8> {
    items
        .iter_mut()
        .find_map(|item| match item {
            Item::File(path, data) if *path == name => Some(data),
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn unsigned_tampered_and_untrusted_packages_install_nothing() {
    let stranger = Signer::current("stranger");
    let expired = Signer::new("expired", (2019, 1, 1), (2020, 1, 1));
    let mut signed_2019 = Vec::new();
    for item in good_items("x") {
        if let Item::File(path, data) = item {
            let sig: &'static str = Box::leak(format!("{path}.sig").into_boxed_str());
            signed_2019.push(Item::File(
                sig,
                expired.sign_at(&data, system(1_559_347_200)),
            ));
            signed_2019.push(Item::File(path, data));
        }
    }
    let mut signed_2010 = Vec::new();
    for item in good_items("x") {
        if let Item::File(path, data) = item {
            let sig: &'static str = Box::leak(format!("{path}.sig").into_boxed_str());
            signed_2010.push(Item::File(
                sig,
                signer().sign_at(&data, system(1_262_304_000)),
            ));
            signed_2010.push(Item::File(path, data));
        }
    }
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "tampered body",
            tampered(|items| file_mut(items, "v1/provider.yaml").extend_from_slice(b"# more\n")),
            "the signature of 'v1/provider.yaml' does not verify with any trusted certificate",
        ),
        (
            "missing .sig",
            tampered(|items| {
                items.retain(|i| !matches!(i, Item::File("v1/services/things.yaml.sig", _)))
            }),
            "'v1/services/things.yaml' is not signed: 'v1/services/things.yaml.sig' is missing",
        ),
        (
            "unsigned package",
            tgz(good_items("x")),
            "'v1/provider.yaml' is not signed",
        ),
        (
            ".sig of another file",
            tampered(|items| {
                let other = file_mut(items, "v1/provider.yaml.sig").clone();
                *file_mut(items, "v1/services/things.yaml.sig") = other;
            }),
            "the signature of 'v1/services/things.yaml' does not verify",
        ),
        (
            "wrong key",
            stranger.signed_tgz(good_items("x")),
            "the signature of 'v1/provider.yaml' does not verify with any trusted certificate",
        ),
        (
            "expired certificate",
            tgz(signed_2019),
            "'v1/provider.yaml' is signed by a certificate that is not valid now",
        ),
        (
            "signed before the certificate",
            tgz(signed_2010),
            "'v1/provider.yaml' was signed at 2010-01-01T00:00:00Z, outside the validity",
        ),
        (
            "not a signature",
            tampered(|items| *file_mut(items, "v1/provider.yaml.sig") = b"signature".to_vec()),
            "'v1/provider.yaml.sig' is not a StackQL signature",
        ),
        (
            "bare signature",
            tampered(|items| {
                let sig = file_mut(items, "v1/provider.yaml.sig");
                let raw = base64_decode(sig);
                *sig = base64_encode(&raw[raw.len() - 64..]);
            }),
            "without a signing time",
        ),
    ];
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = engine(
        root.path(),
        &mock,
        &[signer().cert_path(), expired.cert_path()],
    );
    for (name, package, expected) in cases {
        serve_evil(&mock, package);
        let err = query_err(&e, "REGISTRY PULL evil").await;
        assert_eq!(err.kind(), ErrorKind::RegistrySignature, "{name}: {err}");
        assert!(
            err.message()
                .starts_with("refusing package evil v1 from the registry: "),
            "{name}: {err}"
        );
        assert!(err.message().contains(expected), "{name}: {err}");
        assert!(
            files(root.path()).is_empty(),
            "{name} left {:?}",
            files(root.path())
        );
    }
    // The stranger's package installs once its certificate is trusted.
    serve_evil(&mock, stranger.signed_tgz(good_items("x")));
    let trusting = engine(root.path(), &mock, &[stranger.cert_path()]);
    query(&trusting, "REGISTRY PULL evil").await;
    assert!(root.path().join("src/evil/v1/provider.yaml").is_file());
}

fn base64_decode(text: &[u8]) -> Vec<u8> {
    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text).unwrap()
}

fn base64_encode(raw: &[u8]) -> Vec<u8> {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw).into_bytes()
}

#[tokio::test]
async fn a_refused_rebuild_leaves_the_installed_version_whole() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = engine(root.path(), &mock, &[signer().cert_path()]);
    serve_evil(&mock, signed_tgz(good_items("First")));
    query(&e, "REGISTRY PULL evil v1").await;
    let before: Vec<(String, Vec<u8>)> = files(root.path())
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(root.path().join(&f)).unwrap();
            (f, bytes)
        })
        .collect();

    // Same version, a changed title under the old signatures.
    let mut items = signer().signed(good_items("First"));
    *file_mut(&mut items, "v1/provider.yaml") = good_items("Evil")
        .into_iter()
        .find_map(|i| match i {
            Item::File("v1/provider.yaml", data) => Some(data),
            _ => None,
        })
        .unwrap();
    serve_evil(&mock, tgz(items));
    let err = query_err(&e, "REGISTRY PULL evil v1").await;
    assert_eq!(err.kind(), ErrorKind::RegistrySignature, "{err}");
    let after: Vec<(String, Vec<u8>)> = files(root.path())
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(root.path().join(&f)).unwrap();
            (f, bytes)
        })
        .collect();
    assert_eq!(after, before);
    let services = query(&e, "SHOW SERVICES IN evil").await;
    assert!(services.rows.iter().flatten().any(|c| *c == text("First")));
}

/// The compat `dist/`'s packages as published: signed by StackQL's key on 2023-01-11
/// (v0.1.2; v0.2.1's provider.yaml was edited for the tests and has no `.sig`).
fn serve_real_dist(mock: &Mock, dist: &Path) {
    crate::support::packages::serve_compat_dist(mock, "/providers", dist, <[u8]>::to_vec);
}

#[tokio::test]
async fn real_stackql_packages_are_held_to_their_certificates_dates() {
    let Some(dist) = compat_registry().map(|r| r.join("dist")) else {
        return;
    };
    let mock = Mock::start().await;
    serve_real_dist(&mock, &dist);
    let root = tempfile::tempdir().unwrap();

    // StackQL's certificate today (2025-02-27 to 2027-08-16) holds the key that signed
    // them, but was issued after they were signed: refused as StackQL refuses them.
    let e = engine(root.path(), &mock, &[]);
    let err = query_err(&e, "REGISTRY PULL google v0.1.2").await;
    assert_eq!(err.kind(), ErrorKind::RegistrySignature, "{err}");
    assert!(
        err.message().contains(
            "'v0.1.2/provider.yaml' was signed at 2023-01-11T02:39:54Z, outside the validity of the certificate whose key verifies it, 'O=StackQL Studios, CN=Jeffrey Aven' from StackQL (valid 2025-02-27T21:15:00Z to 2027-08-16T21:15:00Z)"
        ),
        "{err}"
    );
    // Without a version, the newest is tried first, and its unsigned provider.yaml stops the
    // pull: no fall-back to an older version.
    let err = query_err(&e, "REGISTRY PULL google").await;
    assert_eq!(err.kind(), ErrorKind::RegistrySignature, "{err}");
    assert!(
        err.message().contains(
            "'v0.2.1/provider.yaml' is not signed: 'v0.2.1/provider.yaml.sig' is missing"
        ),
        "{err}"
    );

    // The certificate of their time verifies them, and has expired since.
    let e = engine(root.path(), &mock, &[Path::new(STACKQL_2022)]);
    let err = query_err(&e, "REGISTRY PULL google v0.1.2").await;
    assert_eq!(err.kind(), ErrorKind::RegistrySignature, "{err}");
    assert!(
        err.message()
            .contains("'v0.1.2/provider.yaml' is signed by a certificate that is not valid now")
            && err
                .message()
                .contains("valid 2022-02-12T10:55:05Z to 2024-02-12T10:55:05Z"),
        "{err}"
    );
    assert!(files(root.path()).is_empty(), "{:?}", files(root.path()));

    // Re-signed by a trusted root, the same documents install.
    mock.route(
        "/providers/dist/googleapis.com/v0.1.2.tgz",
        Reply::bytes(
            "application/gzip",
            signer()
                .resign_package(&std::fs::read(dist.join("googleapis.com/v0.1.2.tgz")).unwrap()),
        ),
    );
    let e = engine(root.path(), &mock, &[signer().cert_path()]);
    let outcome = e
        .registry_pull_for(&context(), "google", Some("v0.1.2"))
        .await
        .unwrap();
    assert_eq!(outcome.verified_documents, Some(2));
}

#[tokio::test]
async fn verify_false_installs_unchecked_and_says_so() {
    let mock = Mock::start().await;
    let root = tempfile::tempdir().unwrap();
    let e = engine_with(root.path(), &mock, |c| c.remote.verify = false);
    serve_evil(&mock, tgz(good_items("Unsigned")));
    let outcome = e.registry_pull_for(&context(), "evil", None).await.unwrap();
    assert_eq!(
        outcome.message,
        "evil provider, version 'v1' successfully installed without verifying its signatures (registry.verify is false)"
    );
    assert_eq!(outcome.verified_documents, None);
    assert_eq!(
        record(root.path(), "src/evil/v1")["signatures"],
        json!({"verified": false, "reason": "registry.verify is false"})
    );
    // Tampered signatures do not matter either.
    serve_evil(
        &mock,
        tampered(|items| file_mut(items, "v1/provider.yaml").extend_from_slice(b"# more\n")),
    );
    query(&e, "REGISTRY PULL evil").await;
    // A package cannot bring its own install record claiming it was verified.
    let mut forged = good_items("Forged");
    forged.push(Item::File(
        "v1/.querygate-install.json",
        br#"{"signatures": {"verified": true}}"#.to_vec(),
    ));
    serve_evil(&mock, tgz(forged));
    let err = query_err(&e, "REGISTRY PULL evil").await;
    assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
    assert!(
        err.message().contains(
            "it holds 'v1/.querygate-install.json', a name querygate keeps for its install record"
        ),
        "{err}"
    );
    assert_eq!(
        record(root.path(), "src/evil/v1")["signatures"]["verified"],
        false
    );

    let mut config = EngineConfig::new(root.path());
    config.remote.verify = false;
    assert_eq!(
        config.remote.start_warnings(),
        [
            "registry.verify is false: registry pull installs packages without verifying their signatures; use it for local development only"
        ]
    );
    config.remote.verify = true;
    assert!(config.remote.start_warnings().is_empty());
    config.remote.trusted_certificates = vec![PathBuf::from(STACKQL_2022)];
    let warnings = config.remote.start_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("2024-02-12T10:55:05Z") && warnings[0].contains("is not valid now"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn unreadable_or_unusable_trusted_certificates_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello\n").unwrap();
    let missing = dir.path().join("missing.pem");
    for (path, expected) in [
        (&not_pem, "holds no CERTIFICATE block"),
        (&missing, "cannot read"),
    ] {
        let mut config = EngineConfig::new(dir.path());
        config.remote.trusted_certificates = vec![path.clone()];
        let err = Engine::new(config).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Registry, "{err}");
        assert!(
            err.message().starts_with("registry.trusted_certificates: ")
                && err.message().contains(&path.display().to_string())
                && err.message().contains(expected),
            "{err}"
        );
    }
    // With verification off, the certificates are not read.
    let mut config = EngineConfig::new(dir.path());
    config.remote.trusted_certificates = vec![missing];
    config.remote.verify = false;
    assert!(Engine::new(config).is_ok());

    // The command line says so and exits 2.
    let out = querygate_command()
        .env("XDG_STATE_HOME", dir.path())
        .env("QUERYGATE_REGISTRY__ROOT", dir.path())
        .env(
            "QUERYGATE_REGISTRY__TRUSTED_CERTIFICATES",
            format!("[{}]", not_pem.display()),
        )
        .args(["registry", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("registry.trusted_certificates")
            && stderr.contains("holds no CERTIFICATE block"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_command_line_refuses_tampered_packages_and_warns_when_not_verifying() {
    let mock = Mock::start().await;
    serve_evil(
        &mock,
        tampered(|items| file_mut(items, "v1/services/things.yaml").push(b'\n')),
    );
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (root_path, state_path) = (root.path().to_owned(), state.path().to_owned());
    let url = format!("{}/providers", mock.url());
    let pull = move |verify: &'static str| {
        querygate_command()
            .env("XDG_STATE_HOME", &state_path)
            .env("QUERYGATE_REGISTRY__ROOT", &root_path)
            .env("QUERYGATE_REGISTRY__URL", &url)
            .env(
                "QUERYGATE_REGISTRY__TRUSTED_CERTIFICATES",
                format!("[{}]", signer().cert_path().display()),
            )
            .env("QUERYGATE_REGISTRY__VERIFY", verify)
            .args(["registry", "pull", "evil", "--output", "csv"])
            .output()
            .unwrap()
    };
    let (refused, unchecked) = tokio::task::spawn_blocking(move || (pull("true"), pull("false")))
        .await
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("refusing package evil v1 from the registry: the signature of 'v1/services/things.yaml' does not verify"),
        "{stderr}"
    );
    assert!(refused.stdout.is_empty());

    assert!(
        unchecked.status.success(),
        "{}",
        String::from_utf8_lossy(&unchecked.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&unchecked.stdout),
        "message\r\n\"evil provider, version 'v1' successfully installed without verifying its signatures (registry.verify is false)\"\r\n"
    );
    let stderr = String::from_utf8_lossy(&unchecked.stderr);
    assert!(
        stderr.contains("registry.verify is false: registry pull installs packages without verifying their signatures"),
        "{stderr}"
    );

    // A server (here stdio, whose input is closed at once) warns at start.
    let state_path = state.path().to_owned();
    let stdio = tokio::task::spawn_blocking(move || {
        querygate_command()
            .env("XDG_STATE_HOME", &state_path)
            .env("QUERYGATE_REGISTRY__VERIFY", "false")
            .arg("stdio")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&stdio.stderr);
    assert!(
        stderr.contains("querygate: warning: registry.verify is false: registry pull installs packages without verifying their signatures; use it for local development only"),
        "{stderr}"
    );
}

#[tokio::test]
async fn pull_provider_refuses_a_tampered_package_with_its_code() {
    let server = start_with_registry_copy("full_access", "").await;
    server.mock.route(
        "/registry/dist/providers.yaml",
        Reply::bytes(
            "application/yaml",
            b"providers:\n  evil:\n    versions:\n    - v1\n".to_vec(),
        ),
    );
    server.mock.route(
        "/registry/dist/evil/v1.tgz",
        Reply::bytes(
            "application/gzip",
            tampered(|items| file_mut(items, "v1/provider.yaml").push(b'\n')),
        ),
    );
    let client = modern_client(&server.url).await;
    let refused = call(&client, "pull_provider", json!({"provider": "evil"})).await;
    assert_eq!(error_code(&refused), "registry.signature_invalid");
    assert!(
        error_message(&refused).contains("the signature of 'v1/provider.yaml' does not verify"),
        "{}",
        error_message(&refused)
    );
    assert!(!server._dir.path().join("registry/src/evil").exists());

    server.mock.route(
        "/registry/dist/evil/v1.tgz",
        Reply::bytes("application/gzip", signed_tgz(good_items("Fine"))),
    );
    let pulled = call(&client, "pull_provider", json!({"provider": "evil"})).await;
    assert_ne!(pulled.is_error, Some(true));
    assert!(
        server
            ._dir
            .path()
            .join("registry/src/evil/v1/.querygate-install.json")
            .is_file()
    );
}
