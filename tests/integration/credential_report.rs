//! Credential sources reported through a served App and real MCP clients (JWT-identified
//! tenants): `server_info` and `reload_credentials` name, per provider the caller's tenant
//! may use, the source that resolves (`azure_default:EnvironmentCredential` for one tenant,
//! `azure_default:WorkloadIdentityCredential` for the other) and, once a query fetched an
//! Entra token, when that token expires. Never a secret, never the other tenant's state.

use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::mcp_support::{call, install_crypto_provider, text_of};
use crate::mock::{Mock, Reply};
use crate::support::current::current_registry;
use crate::support::identity::{ISSUER, RESOURCE, SigningKey, claims, rmcp_client};

const PROVIDER: &str = "src/azure/v00.00.00000/provider.yaml";
const RESOURCE_DOC: &str = "src/azure/v00.00.00000/services/resource.yaml";
const AZ_TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "04b07795-8ddb-461a-bbee-02f9e1bf7b46";
const CLIENT_SECRET: &str = "azs-report-client-secret-8812";
const FEDERATED: &str = "eyJ.report-projected-sa-token.sig";
const ACCESS_TOKEN: &str = "report-access-token-4471";
const LIFETIME: u64 = 3599;
const SELECT: &str = "SELECT name FROM azure.resource.resource_groups \
                      WHERE subscription_id = 'sub1' ORDER BY name";

/// The `azure` row of a tool result's structured `credentials` / `providers` list.
fn azure_row(result: &rmcp::model::CallToolResult, list: &str) -> Value {
    let structured = result.structured_content.clone().unwrap_or(Value::Null);
    let rows = structured[list].as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1, "one provider installed: {structured}");
    rows[0].clone()
}

/// Neither tenant's secrets nor the token appear in `result`.
fn assert_clean(result: &rmcp::model::CallToolResult) {
    let shown = format!("{} {:?}", text_of(result), result.structured_content);
    for secret in [CLIENT_SECRET, FEDERATED, ACCESS_TOKEN] {
        assert!(!shown.contains(secret), "a secret in the output: {shown}");
    }
}

#[tokio::test]
async fn each_tenant_sees_its_own_sources_and_the_token_expiry() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE_DOC]) else {
        return;
    };
    install_crypto_provider();
    let (entra, arm) = (Mock::start().await, Mock::start().await);
    arm.route(
        "/subscriptions/sub1/resourcegroups",
        Reply::json(json!({"value": [{
            "id": "/subscriptions/sub1/resourceGroups/rg-web",
            "name": "rg-web",
            "type": "Microsoft.Resources/resourceGroups",
            "location": "westeurope"
        }]})),
    );
    entra.route(
        &format!("POST /{AZ_TENANT}/oauth2/v2.0/token"),
        Reply::json(json!({"token_type": "Bearer", "expires_in": LIFETIME,
                           "access_token": ACCESS_TOKEN})),
    );
    let dir = tempfile::tempdir().unwrap();
    let (acme_env, globex_env) = (dir.path().join("acme.env"), dir.path().join("globex.env"));
    let token_file = dir.path().join("federated-token");
    std::fs::write(&token_file, FEDERATED).unwrap();
    std::fs::write(
        &acme_env,
        format!(
            "AZURE_TENANT_ID={AZ_TENANT}\nAZURE_CLIENT_ID={CLIENT}\nAZURE_CLIENT_SECRET={CLIENT_SECRET}\nAZURE_AUTHORITY_HOST={}\n",
            entra.url()
        ),
    )
    .unwrap();
    std::fs::write(
        &globex_env,
        format!(
            "AZURE_TENANT_ID={AZ_TENANT}\nAZURE_CLIENT_ID={CLIENT}\nAZURE_FEDERATED_TOKEN_FILE={}\nAZURE_AUTHORITY_HOST={}\n",
            token_file.display(),
            entra.url()
        ),
    )
    .unwrap();
    let key = SigningKey::new("k1");
    let pem = dir.path().join("signer.pem");
    std::fs::write(&pem, key.public_pem()).unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {root}\nproviders:\n  azure:\n    base_url: {arm}\ncredentials:\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n  - id: acme\n    mode: read_only\n    credentials:\n      env_file: {acme}\n  - id: globex\n    mode: read_only\n    credentials:\n      env_file: {globex}\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme, globex]\n",
            root = registry.path().display(),
            arm = arm.url(),
            audit = dir.path().join("audit").display(),
            acme = acme_env.display(),
            globex = globex_env.display(),
            pem = pem.display(),
        ),
    )
    .unwrap();
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(config),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::build(config).await.unwrap();
    let url = app.mcp_url();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    let http = reqwest::Client::new();
    let acme = rmcp_client(http.clone(), &url, Some(&key.sign(&claims("acme")))).await;
    let globex = rmcp_client(http, &url, Some(&key.sign(&claims("globex")))).await;

    // Before any query: each tenant's own source, no token.
    let info = call(&acme, "server_info", json!({})).await;
    assert_clean(&info);
    let row = azure_row(&info, "credentials");
    assert_eq!(row["auth_type"], "azure_default", "{row}");
    assert_eq!(
        row["resolved_source"], "azure_default:EnvironmentCredential",
        "{row}"
    );
    assert_eq!(row["token_expires_at"], Value::Null, "{row}");
    let other = call(&globex, "server_info", json!({})).await;
    assert_clean(&other);
    let row = azure_row(&other, "credentials");
    assert_eq!(
        row["resolved_source"], "azure_default:WorkloadIdentityCredential",
        "{row}"
    );
    assert_eq!(row["token_expires_at"], Value::Null, "{row}");

    // A query of acme's fetches a token: its expiry shows for acme only.
    let before = SystemTime::now();
    let done = call(&acme, "run_select_query", json!({"sql": SELECT})).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert!(text_of(&done).contains("rg-web"), "{}", text_of(&done));
    let after = SystemTime::now();
    let info = call(&acme, "server_info", json!({})).await;
    assert_clean(&info);
    let row = azure_row(&info, "credentials");
    assert_eq!(
        row["resolved_source"], "azure_default:EnvironmentCredential",
        "{row}"
    );
    let expires = row["token_expires_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no expiry: {row}"));
    let expires = humantime::parse_rfc3339(expires).unwrap();
    let lifetime = Duration::from_secs(LIFETIME);
    let slack = Duration::from_secs(2);
    assert!(
        expires + slack >= before + lifetime && expires <= after + lifetime + slack,
        "{row}"
    );
    assert!(
        text_of(&info).contains("azure_default:EnvironmentCredential"),
        "{}",
        text_of(&info)
    );
    let other = call(&globex, "server_info", json!({})).await;
    assert_eq!(
        azure_row(&other, "credentials")["token_expires_at"],
        Value::Null,
        "globex sees acme's token"
    );

    // The reload reports the same sources; it drops the token, so no expiry remains.
    for (client, source) in [
        (&acme, "azure_default:EnvironmentCredential"),
        (&globex, "azure_default:WorkloadIdentityCredential"),
    ] {
        let reload = call(client, "reload_credentials", json!({})).await;
        assert_ne!(reload.is_error, Some(true), "{reload:?}");
        assert_clean(&reload);
        let row = azure_row(&reload, "providers");
        assert_eq!(row["resolved_source"], source, "{row}");
        assert_eq!(row["token_expires_at"], Value::Null, "{row}");
        assert!(text_of(&reload).contains(source), "{}", text_of(&reload));
    }
    let info = call(&acme, "server_info", json!({})).await;
    assert_eq!(
        azure_row(&info, "credentials")["token_expires_at"],
        Value::Null
    );
    drop((acme, globex));
    shutdown.cancel();
}
