//! `oci_signing_v1` through a served App, as a client drives it: two tenants, each with its
//! own OCI key in its own env file, call `run_select_query` over MCP (JWT-authenticated);
//! the mock OCI API verifies each signature against the tenant's registered public key;
//! `server_info` reports the source; no key material reaches a tool result, the audit or
//! the logs.

use serde_json::{Value, json};

use crate::logs;
use crate::oci_signing::{
    PRINT_A, PRINT_B, SELECT, TENANT_A, TENANT_B, USER_A, USER_B, fixtures, key_path, mock,
};

#[tokio::test]
async fn each_tenant_of_a_served_app_signs_with_its_own_key() {
    use crate::mcp_support::{call, install_crypto_provider, text_of};
    use crate::support::identity::{ISSUER, RESOURCE, SigningKey, claims, rmcp_client};

    install_crypto_provider();
    logs::capture();
    let api = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let (acme_env, globex_env) = (dir.path().join("acme.env"), dir.path().join("globex.env"));
    std::fs::write(
        &acme_env,
        format!(
            "OCI_CLI_TENANCY={TENANT_A}\nOCI_CLI_USER={USER_A}\nOCI_CLI_FINGERPRINT={PRINT_A}\nOCI_CLI_KEY_FILE={}\n",
            key_path("tenant_a_key.pem")
        ),
    )
    .unwrap();
    std::fs::write(
        &globex_env,
        format!(
            "OCI_TENANCY={TENANT_B}\nOCI_USER={USER_B}\nOCI_FINGERPRINT={PRINT_B}\nOCI_KEY_FILE={}\n",
            key_path("tenant_b_key.pem")
        ),
    )
    .unwrap();
    let key = SigningKey::new("k1");
    let pem = dir.path().join("signer.pem");
    std::fs::write(&pem, key.public_pem()).unwrap();
    let audit_dir = dir.path().join("audit");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {root}\nproviders:\n  oci:\n    base_url: http://{addr}/20190901\ncredentials:\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n  - id: acme\n    mode: read_only\n    credentials:\n      env_file: {acme}\n  - id: globex\n    mode: read_only\n    credentials:\n      env_file: {globex}\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme, globex]\n",
            root = fixtures().join("registry").display(),
            addr = api.addr,
            audit = audit_dir.display(),
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
    let key_text: Vec<String> = ["tenant_a_key.pem", "tenant_b_key.pem"]
        .iter()
        .map(|f| {
            let pem = std::fs::read_to_string(fixtures().join(f)).unwrap();
            // A line of the key's base64, which no output may hold.
            pem.lines().nth(3).unwrap().to_owned()
        })
        .collect();
    let clean = |shown: &str| {
        for secret in &key_text {
            assert!(!shown.contains(secret.as_str()), "key material: {shown}");
        }
        assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    };

    for (client, expected) in [(&acme, "90"), (&globex, "365")] {
        let done = call(client, "run_select_query", json!({"sql": SELECT})).await;
        assert_ne!(done.is_error, Some(true), "{done:?}");
        let shown = format!("{} {:?}", text_of(&done), done.structured_content);
        assert!(shown.contains(expected), "{shown}");
        clean(&shown);
    }
    let judged = api.judged();
    assert_eq!(judged.len(), 2, "{judged:?}");
    assert!(judged.iter().all(|j| j.refused.is_none()), "{judged:?}");
    assert_eq!(judged[0].key_id, format!("{TENANT_A}/{USER_A}/{PRINT_A}"));
    assert_eq!(judged[1].key_id, format!("{TENANT_B}/{USER_B}/{PRINT_B}"));

    let info = call(&acme, "server_info", json!({})).await;
    let structured = info.structured_content.clone().unwrap_or(Value::Null);
    let row = structured["credentials"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["provider"] == "oci").cloned())
        .unwrap_or_else(|| panic!("no oci row: {structured}"));
    assert_eq!(row["resolved_source"], "oci_signing_v1:variables", "{row}");
    clean(&structured.to_string());
    drop((acme, globex));
    shutdown.cancel();

    let audit_text: String = std::fs::read_dir(&audit_dir)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(audit_text.contains("run_select_query"), "{audit_text}");
    clean(&audit_text);
    clean(&logs::recorded());
}
