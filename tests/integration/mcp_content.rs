//! Instructions, prompts and resources through rmcp clients, and the allowlists.

use querygate::config::{Config, Sources};
use querygate::mcp::Transport;
use rmcp::model::{GetPromptRequestParams, ProtocolVersion, ReadResourceRequestParams};
use serde_json::{Map, Value, json};

use crate::mcp_support::*;
use crate::mock::Mock;

const PROMPTS: [&str; 7] = [
    "cloud_audit",
    "cost_cleanup",
    "create_deploy_stack",
    "drift_report",
    "getting_started",
    "iam_access_review",
    "public_exposure_scan",
];

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

#[tokio::test]
async fn instructions_are_served_to_both_generations_and_can_be_disabled() {
    let server = start("read_only", "").await;
    let modern = modern_client(&server.url).await;
    let instructions = modern
        .peer_info()
        .and_then(|info| info.instructions.clone())
        .expect("instructions in server/discover");
    assert!(
        instructions.starts_with("# Discovery workflow"),
        "{instructions}"
    );
    for section in ["# SQL shape", "# Writes and EXEC", "# Errors", "# Modes"] {
        assert!(instructions.contains(section), "{section}");
    }
    assert!(instructions.contains("query_library_search"));
    assert!(instructions.contains("reload_credentials"));
    // Every way a call needing approval can end is explained, the pending approval of
    // `approval.out_of_band` too: its id and link for the user, then the same call again.
    for code in [
        "policy.approval_required",
        "policy.approval_declined",
        "policy.approval_cancelled",
        "policy.approval_pending",
        "policy.approval_expired",
    ] {
        assert!(instructions.contains(&format!("[{code}]")), "{code}");
    }
    for what in ["approval_id", "link", "repeat the very same call"] {
        assert!(instructions.contains(what), "{what}");
    }
    let legacy = legacy_client(&server.url, ProtocolVersion::V_2025_06_18).await;
    assert_eq!(
        legacy.peer_info().and_then(|i| i.instructions.clone()),
        Some(instructions.clone())
    );
    // The same text is a resource.
    let read = modern
        .read_resource(ReadResourceRequestParams::new(
            "querygate://docs/instructions",
        ))
        .await
        .unwrap();
    let text = serde_json::to_value(&read.contents[0]).unwrap()["text"].clone();
    assert_eq!(text, instructions);

    let quiet = start("read_only", "  disable_instructions: true\n").await;
    let client = modern_client(&quiet.url).await;
    assert_eq!(
        client.peer_info().and_then(|i| i.instructions.clone()),
        None
    );
    let resources = client.list_all_resources().await.unwrap();
    assert!(
        resources
            .iter()
            .all(|r| r.uri != "querygate://docs/instructions"),
        "{resources:?}"
    );
    let legacy = legacy_client(&quiet.url, ProtocolVersion::V_2025_11_25).await;
    assert_eq!(
        legacy.peer_info().and_then(|i| i.instructions.clone()),
        None
    );
}

#[tokio::test]
async fn prompts_are_listed_with_arguments_and_rendered() {
    let server = start("read_only", "").await;
    let client = modern_client(&server.url).await;
    let prompts = client.list_all_prompts().await.unwrap();
    let mut names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    names.sort();
    assert_eq!(names, PROMPTS);
    let drift = prompts.iter().find(|p| p.name == "drift_report").unwrap();
    let arguments = drift.arguments.as_ref().unwrap();
    let intent = arguments.iter().find(|a| a.name == "intent").unwrap();
    assert_eq!(intent.required, Some(true));
    assert!(intent.description.as_ref().is_some_and(|d| !d.is_empty()));
    let clouds = arguments.iter().find(|a| a.name == "clouds").unwrap();
    assert_eq!(clouds.required, Some(false));
    assert!(prompts.iter().all(|p| p.description.is_some()));

    let rendered = client
        .get_prompt(GetPromptRequestParams::new("drift_report").with_arguments(args(
            json!({"intent": "bucket acme-logs in project p-1, location EU", "clouds": "google"}),
        )))
        .await
        .unwrap();
    assert_eq!(rendered.messages.len(), 1);
    let message = serde_json::to_value(&rendered.messages[0]).unwrap();
    assert_eq!(message["role"], "user");
    let text = message["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("<intent>\nbucket acme-logs in project p-1, location EU\n</intent>"),
        "{text}"
    );
    assert!(text.contains("Providers: google."), "{text}");
    assert!(!text.contains("{{"), "{text}");
    assert!(rendered.description.is_some());

    // Optional arguments may be left out.
    let tour = client
        .get_prompt(GetPromptRequestParams::new("getting_started"))
        .await
        .unwrap();
    let text = serde_json::to_value(&tour.messages[0]).unwrap()["content"]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("Provider to tour: (not given)."), "{text}");

    // A missing required argument and an unknown prompt are -32602, naming them.
    let missing = client
        .get_prompt(GetPromptRequestParams::new("drift_report"))
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("intent"), "{missing}");
    assert!(
        missing.contains("-32602") || missing.to_lowercase().contains("invalid"),
        "{missing}"
    );
    let unknown = client
        .get_prompt(GetPromptRequestParams::new("write_safe_select"))
        .await
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("write_safe_select"), "{unknown}");
}

#[tokio::test]
async fn resources_are_listed_and_read() {
    let server = start("read_only", "").await;
    let client = legacy_client(&server.url, ProtocolVersion::V_2025_11_25).await;
    let resources = client.list_all_resources().await.unwrap();
    let mut uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    uris.sort();
    assert_eq!(
        uris,
        [
            "querygate://docs/audit_rubric",
            "querygate://docs/deploy_stack_authoring",
            "querygate://docs/instructions",
            "querygate://docs/scope_discovery",
        ]
    );
    for resource in &resources {
        assert_eq!(resource.mime_type.as_deref(), Some("text/markdown"));
        assert!(resource.description.is_some(), "{}", resource.name);
        let read = client
            .read_resource(ReadResourceRequestParams::new(resource.uri.clone()))
            .await
            .unwrap();
        let content = serde_json::to_value(&read.contents[0]).unwrap();
        assert_eq!(content["uri"], resource.uri.as_str());
        assert_eq!(content["mimeType"], "text/markdown");
        assert!(
            content["text"].as_str().unwrap().starts_with("# "),
            "{content}"
        );
    }
    let unknown = client
        .read_resource(ReadResourceRequestParams::new("querygate://docs/nothing"))
        .await
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("querygate://docs/nothing"), "{unknown}");
}

/// SEP-2164 (the conformance suite's `sep-2164-resource-not-found`): an unknown resource is
/// `-32602` with the requested URI in the error's `data`, for both protocol generations.
#[tokio::test]
async fn an_unknown_resource_is_invalid_params_naming_its_uri_in_data() {
    let server = start("read_only", "").await;
    let modern = modern_client(&server.url).await;
    let legacy = legacy_client(&server.url, ProtocolVersion::V_2025_11_25).await;
    for client in [&modern, &legacy] {
        let uri = "querygate://docs/nothing-here";
        let err = client
            .read_resource(ReadResourceRequestParams::new(uri))
            .await
            .unwrap_err();
        let rmcp::service::ServiceError::McpError(err) = err else {
            panic!("not a JSON-RPC error: {err}");
        };
        assert_eq!(err.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{err:?}");
        assert_eq!(err.data, Some(json!({ "uri": uri })), "{err:?}");
    }
}

#[tokio::test]
async fn allowlists_limit_what_is_offered() {
    let server = start(
        "read_only",
        "  enabled_prompts: [getting_started]\n  enabled_resources: [stackql_audit_rubric]\n  enabled_tools: [query_library_search, run_select_query]\n",
    )
    .await;
    let client = modern_client(&server.url).await;
    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(
        prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["getting_started"]
    );
    let hidden = client
        .get_prompt(GetPromptRequestParams::new("cloud_audit"))
        .await
        .unwrap_err()
        .to_string();
    assert!(hidden.contains("cloud_audit"), "{hidden}");
    let resources = client.list_all_resources().await.unwrap();
    assert_eq!(
        resources.iter().map(|r| r.uri.as_str()).collect::<Vec<_>>(),
        ["querygate://docs/audit_rubric"]
    );
    assert!(
        client
            .read_resource(ReadResourceRequestParams::new(
                "querygate://docs/scope_discovery"
            ))
            .await
            .is_err()
    );
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["query_library_search", "run_select_query"]);
}

#[tokio::test]
async fn unknown_allowlist_names_stop_the_build() {
    let mock = Mock::start().await;
    for (key, name) in [
        ("enabled_tools", "drop_everything"),
        ("enabled_prompts", "write_safe_select"),
        ("enabled_resources", "stackql_nothing"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = test_config(
            &mock,
            dir.path(),
            "read_only",
            &format!("  {key}: [{name}]\n"),
        );
        let config = Config::load(&Sources {
            file: Some(file),
            env: Default::default(),
        })
        .unwrap();
        let err = querygate::app::App::builder(config)
            .handler(Transport::Http)
            .expect_err("an unknown name is refused")
            .to_string();
        assert!(err.contains(key), "{err}");
        assert!(err.contains(name), "{err}");
    }
}
