//! `azure_default` end to end over the current registry's `azure` provider document
//! (unchanged: it declares `auth: {type: azure_default}`): a SELECT of
//! `azure.resource.resource_groups` reaches a mock ARM on 127.0.0.1 with the token a mock
//! Entra ID (reached through `AZURE_AUTHORITY_HOST`) or a mock managed-identity endpoint
//! (`IDENTITY_ENDPOINT`/`IDENTITY_HEADER`) issued. Tokens are cached, refreshed after
//! they expire, the workload-identity token file is re-read after it rotates, and a failure
//! names the source and its variables with no secret in the error or the logs. Every ARM
//! request carries `User-Agent: querygate/<version>`. Through a served App, the tool result
//! and the audit hold no secret and the audit outcomes carry Entra's and ARM's request ids.

use std::sync::Arc;
use std::time::Duration;

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::json;

use crate::logs;
use crate::mock::{Mock, Recorded, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;

const PROVIDER: &str = "src/azure/v00.00.00000/provider.yaml";
const RESOURCE: &str = "src/azure/v00.00.00000/services/resource.yaml";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "04b07795-8ddb-461a-bbee-02f9e1bf7b46";
const CLIENT_SECRET: &str = "azs-planted-client-secret-5521";
const SELECT: &str = "SELECT name, location FROM azure.resource.resource_groups \
                      WHERE subscription_id = 'sub1' ORDER BY name";
const GROUPS: &str = "/subscriptions/sub1/resourcegroups";
const ARM_SCOPE: &str = "https://management.azure.com/.default";

fn token_path() -> String {
    format!("/{TENANT}/oauth2/v2.0/token")
}

/// Entra's v2.0 token answer (client credentials grant).
fn entra_token(token: &str, expires_in: u64) -> Reply {
    Reply::json(json!({
        "token_type": "Bearer",
        "expires_in": expires_in,
        "ext_expires_in": expires_in,
        "access_token": token,
    }))
}

/// ARM's Resource Groups - List answer.
async fn arm() -> Mock {
    let mock = Mock::start().await;
    mock.route(
        GROUPS,
        Reply::json(json!({"value": [
            {
                "id": "/subscriptions/sub1/resourceGroups/rg-web",
                "name": "rg-web",
                "type": "Microsoft.Resources/resourceGroups",
                "location": "westeurope",
                "tags": {"env": "prod"},
                "properties": {"provisioningState": "Succeeded"}
            },
            {
                "id": "/subscriptions/sub1/resourceGroups/rg-data",
                "name": "rg-data",
                "type": "Microsoft.Resources/resourceGroups",
                "location": "northeurope",
                "properties": {"provisioningState": "Succeeded"}
            }
        ]})),
    );
    mock
}

/// The current registry's `azure` documents with ARM at `arm` (the document's auth kept).
fn engine(root: &std::path::Path, arm: &Mock) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        "azure".to_owned(),
        ProviderSettings {
            base_url: Some(arm.url()),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

fn tenant(store: CredentialStore) -> ExecContext {
    ExecContext {
        credentials: Arc::new(store),
        ..ExecContext::anonymous_default()
    }
}

fn store(pairs: &[(&str, &str)]) -> CredentialStore {
    CredentialStore::fixed(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    )
}

async fn select(e: &Engine, cx: &ExecContext) -> Vec<String> {
    let out = e
        .execute(cx, SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    row_lines(&out)
}

fn rows() -> Vec<&'static str> {
    vec!["rg-data|northeurope", "rg-web|westeurope"]
}

/// The `Authorization` values ARM received, in order.
fn bearers(arm: &Mock) -> Vec<String> {
    arm.requests()
        .iter()
        .filter(|r| r.path == GROUPS)
        .map(|r| header(r, "authorization"))
        .collect()
}

fn header(r: &Recorded, name: &str) -> String {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
        .unwrap_or_default()
}

fn form(r: &Recorded) -> Vec<(String, String)> {
    url::form_urlencoded::parse(&r.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn field(r: &Recorded, name: &str) -> String {
    form(r)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// Runs the SELECT until ARM sees `bearer`, within a bound.
async fn select_until_bearer(e: &Engine, cx: &ExecContext, arm: &Mock, bearer: &str) {
    crate::support::wait::eventually(
        &format!("ARM to see {bearer}"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async move {
            assert_eq!(select(e, cx).await, rows());
            match bearers(arm).last() {
                Some(last) if last == bearer => Ok(()),
                _ => Err(bearers(arm)),
            }
        },
    )
    .await;
}

#[tokio::test]
async fn client_secret_token_reaches_arm_cached_and_with_the_user_agent() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (Mock::start().await, arm().await);
    entra.route_sequence(
        &format!("POST {}", token_path()),
        vec![
            entra_token("arm-token-1", 3599),
            entra_token("arm-token-2", 3599),
        ],
    );
    let e = engine(registry.path(), &arm);
    let authority = entra.url();
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET),
        ("AZURE_AUTHORITY_HOST", &authority),
    ]));
    for _ in 0..3 {
        assert_eq!(select(&e, &cx).await, rows());
    }
    assert_eq!(bearers(&arm), vec!["Bearer arm-token-1"; 3]);
    let tokens = entra.requests();
    assert_eq!(tokens.len(), 1, "one token request for three calls");
    let request = &tokens[0];
    assert_eq!(request.method, "POST");
    assert_eq!(
        header(request, "content-type"),
        "application/x-www-form-urlencoded"
    );
    assert_eq!(field(request, "grant_type"), "client_credentials");
    assert_eq!(field(request, "client_id"), CLIENT);
    assert_eq!(field(request, "client_secret"), CLIENT_SECRET);
    assert_eq!(field(request, "scope"), ARM_SCOPE);
    let agent = concat!("querygate/", env!("CARGO_PKG_VERSION"));
    for r in arm.requests().iter().chain(tokens.iter()) {
        assert_eq!(header(r, "user-agent"), agent, "{}", r.path);
    }
    assert!(
        arm.requests()
            .iter()
            .all(|r| r.query.as_deref() == Some("api-version=2025-04-01")),
        "{:?}",
        arm.requests()
    );
}

#[tokio::test]
async fn an_expired_token_is_refreshed() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (Mock::start().await, arm().await);
    // Cached until 60 s before expiry: this one is kept for one second.
    entra.route_sequence(
        &format!("POST {}", token_path()),
        vec![
            entra_token("short-token", 61),
            entra_token("next-token", 3599),
        ],
    );
    let e = engine(registry.path(), &arm);
    let authority = entra.url();
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET),
        ("AZURE_AUTHORITY_HOST", &authority),
    ]));
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(bearers(&arm), ["Bearer short-token"]);
    select_until_bearer(&e, &cx, &arm, "Bearer next-token").await;
    assert_eq!(entra.requests().len(), 2);
    let seen = bearers(&arm);
    let switch = seen.iter().position(|b| b == "Bearer next-token").unwrap();
    assert!(seen[..switch].iter().all(|b| b == "Bearer short-token"));
    // The refreshed token is cached in turn.
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(entra.requests().len(), 2);
}

#[tokio::test]
async fn workload_identity_reads_the_rotated_token_file() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (Mock::start().await, arm().await);
    entra.route_sequence(
        &format!("POST {}", token_path()),
        vec![
            entra_token("wi-token-1", 61),
            entra_token("wi-token-2", 3599),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("azure-identity-token");
    std::fs::write(&file, "eyJ.projected-sa-token-1.sig\n").unwrap();
    let e = engine(registry.path(), &arm);
    let (authority, path) = (entra.url(), file.display().to_string());
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_FEDERATED_TOKEN_FILE", &path),
        ("AZURE_AUTHORITY_HOST", &authority),
    ]));
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(bearers(&arm), ["Bearer wi-token-1"]);
    // Kubernetes rotates the projected token in place.
    std::fs::write(&file, "eyJ.projected-sa-token-2.sig\n").unwrap();
    select_until_bearer(&e, &cx, &arm, "Bearer wi-token-2").await;
    let tokens = entra.requests();
    assert_eq!(tokens.len(), 2);
    for (request, assertion) in tokens.iter().zip([
        "eyJ.projected-sa-token-1.sig",
        "eyJ.projected-sa-token-2.sig",
    ]) {
        assert_eq!(field(request, "grant_type"), "client_credentials");
        assert_eq!(field(request, "client_id"), CLIENT);
        assert_eq!(field(request, "scope"), ARM_SCOPE);
        assert_eq!(
            field(request, "client_assertion_type"),
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        );
        assert_eq!(field(request, "client_assertion"), assertion);
        assert_eq!(field(request, "client_secret"), "");
    }
}

#[tokio::test]
async fn managed_identity_through_identity_endpoint() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (identity, arm) = (Mock::start().await, arm().await);
    let expires_on = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    // App Service / Container Apps (api-version 2019-08-01): `expires_on` in Unix seconds.
    identity.route(
        "/msi/token",
        Reply::json(json!({
            "access_token": "mi-token",
            "expires_on": expires_on.to_string(),
            "resource": "https://management.azure.com",
            "token_type": "Bearer",
            "client_id": CLIENT,
        })),
    );
    let e = engine(registry.path(), &arm);
    let endpoint = format!("{}/msi/token", identity.url());
    let host = store(&[
        ("IDENTITY_ENDPOINT", &endpoint),
        ("IDENTITY_HEADER", "idh-planted-header-8810"),
    ]);
    let cx = tenant(host.with_host_identity(true));
    for _ in 0..2 {
        assert_eq!(select(&e, &cx).await, rows());
    }
    assert_eq!(bearers(&arm), vec!["Bearer mi-token"; 2]);
    let asked = identity.requests();
    assert_eq!(asked.len(), 1, "cached: {asked:?}");
    assert_eq!(asked[0].method, "GET");
    assert_eq!(
        header(&asked[0], "x-identity-header"),
        "idh-planted-header-8810"
    );
    assert_eq!(
        asked[0].query.as_deref(),
        Some("api-version=2019-08-01&resource=https%3A%2F%2Fmanagement.azure.com")
    );

    // Another tenant with the same variables may not use the host's identity.
    let other = tenant(store(&[
        ("IDENTITY_ENDPOINT", &endpoint),
        ("IDENTITY_HEADER", "idh-planted-header-8810"),
    ]));
    let err = e.execute(&other, SELECT).await.unwrap_err().to_string();
    assert!(
        err.contains("ManagedIdentityCredential: not configured"),
        "{err}"
    );
    assert!(!err.contains("idh-planted-header-8810"), "{err}");
    assert_eq!(identity.requests().len(), 1);
}

#[tokio::test]
async fn failures_name_the_source_and_variable_and_never_the_secret() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    logs::capture();
    let (entra, arm) = (Mock::start().await, arm().await);
    // Entra's answer to a wrong secret (its description quotes request details).
    entra.route(
        &format!("POST {}", token_path()),
        Reply::status(
            401,
            &json!({
                "error": "invalid_client",
                "error_description": format!("AADSTS7000215: Invalid client secret provided: {CLIENT_SECRET}"),
                "error_codes": [7000215],
            })
            .to_string(),
        ),
    );
    let e = engine(registry.path(), &arm);
    let authority = entra.url();
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET),
        ("AZURE_AUTHORITY_HOST", &authority),
    ]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("answered 401 (invalid_client)"), "{err}");
    assert!(err.contains("EnvironmentCredential"), "{err}");
    assert!(err.contains("AZURE_CLIENT_SECRET"), "{err}");
    assert!(!err.contains(CLIENT_SECRET), "{err}");
    assert!(
        !err.contains(TENANT),
        "the tenant id is shown as its variable: {err}"
    );
    assert!(arm.requests().is_empty(), "no ARM call without a token");

    // A federated token file that is not there: the source and the variable are named.
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        (
            "AZURE_FEDERATED_TOKEN_FILE",
            "/nonexistent/azure-identity-token",
        ),
        ("AZURE_AUTHORITY_HOST", &authority),
    ]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("WorkloadIdentityCredential"), "{err}");
    assert!(err.contains("AZURE_FEDERATED_TOKEN_FILE"), "{err}");

    // A plain-http authority that is not loopback is refused before anything is sent.
    let cx = tenant(store(&[
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET),
        ("AZURE_AUTHORITY_HOST", "http://login.example.com"),
    ]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("AZURE_AUTHORITY_HOST"), "{err}");
    assert!(!err.contains(CLIENT_SECRET), "{err}");
    assert_eq!(entra.requests().len(), 1);
    assert!(
        !logs::recorded().contains(CLIENT_SECRET),
        "the client secret reached the logs"
    );
}

/// Through the served MCP endpoint of a real App (tenant credentials from its env file):
/// a wrong secret fails naming the source and variable, with the secret in neither the
/// tool result nor the audit; the next call gets a token, reaches ARM with it, and both
/// calls' audit outcomes carry the request ids Entra and ARM answered with.
#[tokio::test]
async fn through_the_app_failures_stay_secret_free_and_request_ids_are_audited() {
    use querygate::audit::{FailureMode, Phase};
    use querygate::config::{Config, Sources};

    use crate::mcp_support::text_of;
    use crate::support::audited::{file_auditor, records};
    use crate::support::gate::{Approver, approver_client, run};

    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    crate::mcp_support::install_crypto_provider();
    logs::capture();
    let (entra, arm) = (Mock::start().await, arm().await);
    arm.route(
        GROUPS,
        Reply::json(json!({"value": [{
            "id": "/subscriptions/sub1/resourceGroups/rg-web",
            "name": "rg-web",
            "type": "Microsoft.Resources/resourceGroups",
            "location": "westeurope",
            "properties": {"provisioningState": "Succeeded"}
        }]}))
        .header("x-ms-request-id", "arm-7d1c"),
    );
    entra.route_sequence(
        &format!("POST {}", token_path()),
        vec![
            Reply::status(
                401,
                &json!({"error": "invalid_client",
                        "error_description": format!("AADSTS7000215: Invalid client secret provided: {CLIENT_SECRET}")})
                .to_string(),
            )
            .header("x-ms-request-id", "entra-fail-01"),
            entra_token("app-token", 3599).header("x-ms-request-id", "entra-ok-02"),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("creds.env");
    std::fs::write(
        &env_file,
        format!(
            "AZURE_TENANT_ID={TENANT}\nAZURE_CLIENT_ID={CLIENT}\nAZURE_CLIENT_SECRET={CLIENT_SECRET}\nAZURE_AUTHORITY_HOST={}\n",
            entra.url()
        ),
    )
    .unwrap();
    let audit_dir = dir.path().join("audit");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {}\nproviders:\n  azure:\n    base_url: {}\ncredentials:\n  env_file: {}\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: read_only\nserver:\n  listen: 127.0.0.1:0\n",
            registry.path().display(),
            arm.url(),
            env_file.display(),
            audit_dir.display()
        ),
    )
    .unwrap();
    let config = Config::load(&Sources {
        file: Some(config),
        env: Default::default(),
    })
    .unwrap();
    let (auditor, _sink) = file_auditor(&audit_dir, FailureMode::Strict);
    let app = querygate::app::App::builder(config)
        .audit(Some(auditor))
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    let client = approver_client(&url, Approver::new(None)).await;

    let failed = run(&client, "run_select_query", SELECT).await;
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    let shown = format!("{} {:?}", text_of(&failed), failed.structured_content);
    assert!(shown.contains("EnvironmentCredential"), "{shown}");
    assert!(shown.contains("AZURE_CLIENT_SECRET"), "{shown}");
    assert!(shown.contains("invalid_client"), "{shown}");
    assert!(!shown.contains(CLIENT_SECRET), "{shown}");
    assert!(arm.requests().is_empty());

    let done = run(&client, "run_select_query", SELECT).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(text_of(&done).contains("rg-web"), "{}", text_of(&done));
    assert_eq!(bearers(&arm), ["Bearer app-token"]);
    shutdown.cancel();

    let outcomes: Vec<_> = records(&audit_dir)
        .into_iter()
        .filter(|r| r.record.phase == Phase::Outcome && r.record.tool == "run_select_query")
        .collect();
    let ids: Vec<_> = outcomes
        .iter()
        .map(|r| r.record.upstream_request_ids.clone())
        .collect();
    assert_eq!(
        ids,
        [
            Some(vec!["x-ms-request-id=entra-fail-01".to_owned()]),
            Some(vec![
                "x-ms-request-id=entra-ok-02".to_owned(),
                "x-ms-request-id=arm-7d1c".to_owned()
            ]),
        ]
    );
    let audit_text: String = std::fs::read_dir(&audit_dir)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(audit_text.contains("EnvironmentCredential"), "{audit_text}");
    assert!(!audit_text.contains(CLIENT_SECRET), "a secret in the audit");
    assert!(
        !logs::recorded().contains(CLIENT_SECRET),
        "a secret in the logs"
    );
}
