//! Credentials per tenant: the #761 reload scenarios with the real `stackql_auth_testing`
//! document (custom auth from `DD_API_KEY`, successor `DD_APPLICATION_KEY`), a mock that
//! accepts only the current key, two-tenant isolation, and secrets kept out of every
//! output, error, report and log line.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use querygate::config::{Config, Sources};
use querygate::engine::{
    CredentialReport, CredentialStatus, CredentialStore, Engine, EngineConfig, ErrorKind,
    ExecContext,
};
use querygate::tenant::{Principal, Tenants};
use serde_json::json;

use crate::logs;
use crate::mock::{Mock, Reply};
use crate::support::compat_registry;

const OLD_KEY: &str = "dd-old-key-7f3a91";
const NEW_KEY: &str = "dd-new-key-c40e22";
const APP_KEY: &str = "dd-app-key-9b1d05";
const SELECT: &str = "SELECT id, name FROM stackql_auth_testing.collectors.collectors";
const DELETE: &str =
    "DELETE FROM stackql_auth_testing.collectors.collectors WHERE id = '100000001'";

/// The mock answers only requests carrying `NEW_KEY` (and the application key).
async fn mock_accepting_new_key() -> Mock {
    let mock = Mock::start().await;
    mock.route(
        &format!("/v1/collectors|dd-api-key={NEW_KEY}"),
        Reply::json(json!({"collectors": [{"id": 100000001, "name": "okta_browser_plugin"}]})),
    );
    mock.route(
        "/v1/collectors",
        Reply::status(401, r#"{"errors":[{"code":"unauthorized"}]}"#),
    );
    mock
}

fn engine(root: PathBuf, mock: &Mock) -> Engine {
    let mut config = EngineConfig::new(root);
    crate::support::upstream_at(&mut config, "stackql_auth_testing", mock.url());
    Engine::new(config).unwrap()
}

/// A credentials file's text: `api_key` as `DD_API_KEY`, and the application key.
fn key_file(api_key: &str) -> String {
    format!("DD_API_KEY={api_key}\nDD_APPLICATION_KEY={APP_KEY}\n")
}

/// One tenant against the compat registry: the engine, the mock that accepts only
/// `NEW_KEY`, and the tenant's credentials file. Tests destructure it from a local
/// binding, so the fields they leave (the mock, the folder) live to the end of the test.
struct Scenario {
    e: Engine,
    mock: Mock,
    cx: ExecContext,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

/// Starts log capture and a [`Scenario`] whose credentials file holds `env`; `None` (the
/// test skips) without the compat registry.
async fn scenario(env: &str) -> Option<Scenario> {
    logs::capture();
    let root = compat_registry()?;
    let mock = mock_accepting_new_key().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("creds.env");
    std::fs::write(&file, env).unwrap();
    let e = engine(root, &mock);
    let cx = tenant_with_file(&file);
    Some(Scenario {
        e,
        mock,
        cx,
        file,
        _dir: dir,
    })
}

fn tenant_with_file(file: &Path) -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::open(file, false).unwrap()),
        ..ExecContext::anonymous_default()
    }
}

fn row<'a>(
    report: &'a CredentialReport,
    provider: &str,
) -> &'a querygate::engine::ProviderCredentials {
    report
        .providers
        .iter()
        .find(|r| r.provider == provider)
        .unwrap_or_else(|| panic!("no row for {provider}: {report:?}"))
}

/// No planted secret in `text`.
fn assert_clean(text: &str) {
    for secret in [OLD_KEY, NEW_KEY, APP_KEY] {
        assert!(!text.contains(secret), "a secret leaked: {text}");
    }
}

fn clean_report(report: &CredentialReport) {
    assert_clean(&serde_json::to_string(report).unwrap());
    assert_clean(&format!("{report:?}"));
}

#[tokio::test]
async fn fresh_session_reports_every_installed_provider() {
    let Some(s) = scenario(&key_file(NEW_KEY)).await else {
        return;
    };
    let Scenario { e, cx, file, .. } = s;

    let before = e.reload_credentials(&cx, None).await.unwrap();
    clean_report(&before);
    let installed: Vec<String> = e
        .providers(&cx)
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.name)
        .collect();
    let reported: Vec<String> = before
        .providers
        .iter()
        .map(|r| r.provider.clone())
        .collect();
    assert_eq!(reported, installed, "a row per installed provider, sorted");
    let auth = row(&before, "stackql_auth_testing");
    assert_eq!(
        (
            auth.auth_type.as_str(),
            auth.sourced_from.as_str(),
            auth.status,
            auth.detail.as_str(),
            auth.changed
        ),
        ("custom", "env:DD_API_KEY", CredentialStatus::Ok, "", false)
    );
    let github = row(&before, "github");
    assert_eq!(
        (github.auth_type.as_str(), github.status),
        ("basic", CredentialStatus::Unresolved)
    );
    assert_eq!(github.detail, "variable GITHUB_CREDS is not set");
    assert_eq!(before.env_file.as_deref(), Some(file.to_str().unwrap()));
    assert!(before.env_file_sourced);
    assert_eq!(
        before.sourced_vars,
        vec!["DD_API_KEY", "DD_APPLICATION_KEY"]
    );

    // The report does not depend on whether the provider was used yet.
    let out = e.execute(&cx, SELECT).await.unwrap();
    assert_eq!(out.rows.len(), 1);
    let after = e.reload_credentials(&cx, None).await.unwrap();
    assert_eq!(after.providers, before.providers);

    let scoped = e
        .reload_credentials(&cx, Some("stackql_auth_testing"))
        .await
        .unwrap();
    assert_eq!(scoped.providers.len(), 1);
    let unknown = e
        .reload_credentials(&cx, Some("nonexistent_provider"))
        .await
        .unwrap_err();
    assert_eq!(
        unknown.to_string(),
        "provider 'nonexistent_provider' is not installed"
    );
}

#[tokio::test]
async fn rotation_after_the_first_query_is_picked_up_by_one_reload() {
    let Some(s) = scenario(&key_file(OLD_KEY)).await else {
        return;
    };
    let Scenario {
        e, mock, cx, file, ..
    } = s;

    let stale = e.execute(&cx, SELECT).await.unwrap_err();
    assert_eq!(stale.upstream_failure().unwrap().status, 401);
    assert_clean(&stale.to_string());
    let sent = mock.requests();
    assert_eq!(sent[0].headers["dd-api-key"], OLD_KEY);
    assert_eq!(sent[0].headers["dd-application-key"], APP_KEY);

    std::fs::write(
        &file,
        format!("export DD_API_KEY=\"{NEW_KEY}\"\r\nDD_APPLICATION_KEY={APP_KEY}\r\n"),
    )
    .unwrap();
    let reload = e
        .reload_credentials(&cx, Some("stackql_auth_testing"))
        .await
        .unwrap();
    clean_report(&reload);
    let auth = row(&reload, "stackql_auth_testing");
    assert!(
        auth.changed && auth.status == CredentialStatus::Ok,
        "{auth:?}"
    );

    let out = e.execute(&cx, SELECT).await.unwrap();
    assert_eq!(out.rows[0][0], querygate::engine::Cell::Integer(100000001));

    let again = e.reload_credentials(&cx, None).await.unwrap();
    assert!(again.providers.iter().all(|r| !r.changed), "{again:?}");

    std::fs::remove_file(&file).unwrap();
    let gone = e.reload_credentials(&cx, None).await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::Credentials);
    assert!(
        gone.to_string()
            .contains(&format!("{}' not found", file.display())),
        "{gone}"
    );
    // The values sourced before stay in force.
    assert!(e.execute(&cx, SELECT).await.is_ok());
}

#[tokio::test]
async fn rotation_before_the_first_query() {
    let Some(s) = scenario(&key_file(OLD_KEY)).await else {
        return;
    };
    let Scenario {
        e, mock, cx, file, ..
    } = s;

    std::fs::write(&file, key_file(NEW_KEY)).unwrap();
    let reload = e.reload_credentials(&cx, None).await.unwrap();
    clean_report(&reload);
    assert!(row(&reload, "stackql_auth_testing").changed);
    assert!(!row(&reload, "github").changed);
    assert!(reload.providers.len() > 1);
    e.execute(&cx, SELECT).await.unwrap();
    assert_eq!(mock.requests()[0].headers["dd-api-key"], NEW_KEY);
}

#[tokio::test]
async fn recovery_from_a_failed_resolution() {
    let Some(s) = scenario(&format!("DD_APPLICATION_KEY={APP_KEY}\nDD_API_KEY=\n")).await else {
        return;
    };
    let Scenario {
        e, mock, cx, file, ..
    } = s;

    for sql in [SELECT, DELETE] {
        let err = e.execute(&cx, sql).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Credentials, "{sql}");
        let text = err.to_string();
        assert!(
            text.starts_with("credential resolution failed for provider 'stackql_auth_testing'"),
            "{text}"
        );
        assert!(
            text.ends_with("fix the configured env file, call reload_credentials, then retry"),
            "{text}"
        );
        assert_clean(&text);
    }
    assert!(
        mock.requests().is_empty(),
        "nothing is sent without credentials"
    );

    let unchanged = e.reload_credentials(&cx, None).await.unwrap();
    let auth = row(&unchanged, "stackql_auth_testing");
    assert_eq!(
        (auth.status, auth.detail.as_str(), auth.changed),
        (
            CredentialStatus::Unresolved,
            "variable DD_API_KEY is not set",
            false
        )
    );

    std::fs::write(
        &file,
        format!("DD_APPLICATION_KEY={APP_KEY}\nDD_API_KEY={NEW_KEY}\n"),
    )
    .unwrap();
    let fixed = e
        .reload_credentials(&cx, Some("stackql_auth_testing"))
        .await
        .unwrap();
    clean_report(&fixed);
    let auth = row(&fixed, "stackql_auth_testing");
    assert_eq!((auth.status, auth.changed), (CredentialStatus::Ok, true));
    assert_eq!(e.execute(&cx, SELECT).await.unwrap().rows.len(), 1);
}

#[tokio::test]
async fn tenants_never_see_each_others_credentials() {
    logs::capture();
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = mock_accepting_new_key().await;
    let dir = tempfile::tempdir().unwrap();
    let (acme_file, globex_file) = (dir.path().join("acme.env"), dir.path().join("globex.env"));
    std::fs::write(&acme_file, key_file(NEW_KEY)).unwrap();
    std::fs::write(&globex_file, format!("DD_API_KEY={OLD_KEY}\n")).unwrap();
    let yaml = format!(
        "tenants:\n  - id: acme\n    credentials: {{env_file: {}}}\n  - id: globex\n    credentials: {{env_file: {}}}\n  - id: initech\n",
        acme_file.display(),
        globex_file.display()
    );
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, yaml).unwrap();
    let config = Config::load(&Sources {
        file: Some(config_file),
        env: Default::default(),
    })
    .unwrap();
    let tenants = Tenants::open(&config).unwrap();
    let principal = |tenant: &str| Principal {
        subject: format!("{tenant}-user"),
        tenant: tenant.to_owned(),
        ..Principal::local()
    };
    let acme = tenants.context(&principal("acme")).unwrap();
    let globex = tenants.context(&principal("globex")).unwrap();
    let initech = tenants.context(&principal("initech")).unwrap();
    let e = engine(root, &mock);

    assert_eq!(e.execute(&acme, SELECT).await.unwrap().rows.len(), 1);
    let globex_err = e.execute(&globex, SELECT).await.unwrap_err();
    assert!(
        globex_err
            .to_string()
            .contains("variable DD_APPLICATION_KEY is not set"),
        "{globex_err}"
    );
    let initech_err = e.execute(&initech, SELECT).await.unwrap_err();
    assert!(
        initech_err
            .to_string()
            .contains("variable DD_API_KEY is not set"),
        "{initech_err}"
    );
    let keys: Vec<String> = mock
        .requests()
        .iter()
        .map(|r| r.headers["dd-api-key"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys,
        vec![NEW_KEY.to_owned()],
        "only acme's own key was ever sent"
    );

    // A reload for one tenant reads only its own file and changes nothing for the others.
    std::fs::write(&globex_file, key_file(NEW_KEY)).unwrap();
    let acme_report = e.reload_credentials(&acme, None).await.unwrap();
    assert!(acme_report.providers.iter().all(|r| !r.changed));
    assert!(
        e.execute(&globex, SELECT).await.is_err(),
        "globex has not reloaded yet"
    );
    let globex_report = e.reload_credentials(&globex, None).await.unwrap();
    assert!(row(&globex_report, "stackql_auth_testing").changed);
    assert_eq!(e.execute(&globex, SELECT).await.unwrap().rows.len(), 1);
    let initech_report = e.reload_credentials(&initech, None).await.unwrap();
    assert!(initech_report.env_file.is_none() && !initech_report.env_file_sourced);
    assert_eq!(
        row(&initech_report, "stackql_auth_testing").status,
        CredentialStatus::Unresolved
    );
}

#[tokio::test]
async fn an_absent_configured_file_is_created_private_and_empty() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("state/creds.env");
    let store = CredentialStore::open(&file, false).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.lines().all(|l| l.starts_with('#')), "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(file.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
    }
    assert!(store.source().unwrap().names.is_empty());
}

/// Runs last in spirit: whatever the other tests logged so far must hold no secret. The
/// capture is checked to work, so this cannot pass vacuously.
#[tokio::test]
async fn logs_hold_no_secrets() {
    let Some(s) = scenario(&key_file(NEW_KEY)).await else {
        return;
    };
    let Scenario { e, cx, .. } = s;
    e.execute(&cx, SELECT).await.unwrap();
    e.execute(&cx, DELETE).await.unwrap_err();
    e.reload_credentials(&cx, None).await.unwrap();
    let lines = logs::recorded();
    assert!(
        lines.contains("credentials reloaded"),
        "the log capture records nothing"
    );
    assert_clean(&lines);
    assert!(!lines.contains(crate::support::SECRET), "{lines}");
}
