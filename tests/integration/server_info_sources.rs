//! `server_info`'s credential sources come from a summary kept per tenant (issue 32): through
//! a served App and a real MCP client, the summary follows, once `registry.recheck_interval`
//! has passed, a provider folder added to the registry by hand, and `reload_credentials`
//! (its variable added to the tenant's env file).

use std::time::Duration;

use serde_json::{Value, json};

use crate::mcp_support::{Client, call, copy_tree, modern_client, start_with_registry_copy};
use crate::support::{SECRET, wait};

/// The `credentials` rows of a `server_info` answer, by provider: `(provider, resolved_source)`.
async fn sources(client: &Client) -> Vec<(String, String)> {
    let info = call(client, "server_info", json!({})).await;
    assert_ne!(info.is_error, Some(true), "{info:?}");
    let structured = info.structured_content.clone().unwrap_or(Value::Null);
    let shown = structured.to_string();
    assert!(!shown.contains(SECRET), "a secret in server_info: {shown}");
    structured["credentials"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|row| {
            (
                row["provider"].as_str().unwrap_or_default().to_owned(),
                row["resolved_source"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

fn source_of(rows: &[(String, String)], provider: &str) -> Option<String> {
    rows.iter()
        .find(|(name, _)| name == provider)
        .map(|(_, source)| source.clone())
}

#[tokio::test]
async fn the_summary_follows_the_registry_folder_and_reloads() {
    let server = start_with_registry_copy("read_only", "").await;
    let client = modern_client(&server.url).await;
    let env_file = server._dir.path().join("creds.env");

    let first = sources(&client).await;
    let resolved = source_of(&first, "testapi").expect("testapi is installed");
    assert_eq!(resolved, "env:TESTAPI_KEY", "{first:?}");
    // Answered again from the kept summary: the same.
    assert_eq!(sources(&client).await, first);

    // A provider folder added by hand (its key in HANDMADE_KEY, which no file sets) shows
    // once the recheck interval (2 s) has passed, its source unresolved.
    let src = server._dir.path().join("registry/src");
    copy_tree(&src.join("testapi"), &src.join("handmade"));
    let provider = src.join("handmade/v1/provider.yaml");
    let text = std::fs::read_to_string(&provider).unwrap();
    let text = text
        .replacen(
            "id: testapi\nname: testapi\n",
            "id: handmade\nname: handmade\n",
            1,
        )
        .replace(
            "credentialsenvvar: TESTAPI_KEY",
            "credentialsenvvar: HANDMADE_KEY",
        );
    std::fs::write(&provider, text).unwrap();
    let rows = wait::eventually(
        "server_info to list the provider added by hand",
        Duration::from_secs(20),
        Duration::from_millis(200),
        || async {
            let rows = sources(&client).await;
            source_of(&rows, "handmade")
                .map(|_| rows.clone())
                .ok_or(rows)
        },
    )
    .await;
    assert_eq!(
        source_of(&rows, "handmade").as_deref(),
        Some("none"),
        "{rows:?}"
    );
    assert_eq!(source_of(&rows, "testapi"), Some(resolved.clone()));

    // The key goes into the file: nothing changes until the credentials are reloaded, then
    // the source resolves.
    std::fs::write(
        &env_file,
        format!("TESTAPI_KEY={SECRET}\nHANDMADE_KEY={SECRET}\n"),
    )
    .unwrap();
    assert_eq!(sources(&client).await, rows);
    let reload = call(&client, "reload_credentials", json!({})).await;
    assert_ne!(reload.is_error, Some(true), "{reload:?}");
    let after = sources(&client).await;
    assert_eq!(
        source_of(&after, "handmade").as_deref(),
        Some("env:HANDMADE_KEY"),
        "{after:?}"
    );
    assert_eq!(source_of(&after, "testapi"), Some(resolved));
    drop(client);
}
