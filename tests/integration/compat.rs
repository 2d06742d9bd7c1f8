//! Real StackQL provider documents, unchanged, from `QUERYGATE_COMPAT_REGISTRY`
//! (`.ci/run` points it at `../shared/providers`). Without it these tests say so and pass.

use std::path::PathBuf;
use std::sync::Arc;

use querygate::engine::{Cell, CredentialStore, Engine, EngineConfig, ExecContext};
use serde_json::json;

use crate::mock::{Mock, Reply};
use crate::support::*;

fn compat_engine(root: PathBuf, overrides: &[(&str, String)]) -> Engine {
    let mut config = EngineConfig::new(root);
    for (provider, url) in overrides {
        crate::support::upstream_at(&mut config, provider, url.clone());
    }
    // google's document asks for service_account auth (the credentials issue brings it);
    // a per-provider auth override stands in, as an operator would configure it.
    config
        .providers
        .entry("google".to_owned())
        .or_default()
        .auth = Some(json!({"type": "bearer", "credentialsenvvar": "GOOGLE_TOKEN"}));
    Engine::new(config).unwrap()
}

fn cx(vars: &[(&str, &str)]) -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed(
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )),
        ..ExecContext::anonymous_default()
    }
}

#[tokio::test]
async fn like_on_a_required_parameter_is_refused_before_any_request() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    // The method without `org` would answer; it must not be asked.
    mock.route(
        "/user/repos",
        Reply::json(json!([{"id": 1, "name": "mine"}])),
    );
    let e = compat_engine(root, &[("github", mock.url())]);
    let err = e
        .execute(
            &cx(&[("GITHUB_CREDS", SECRET)]),
            "SELECT name FROM github.repos.repos WHERE org LIKE 'ac%'",
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with(
            "'org' is a required parameter of 'github.repos.repos' (method list_for_org"
        ),
        "{text}"
    );
    assert!(
        text.contains("give it with = or IN, as org = 'value' or org IN ('a', 'b'); `org LIKE` only filters rows already fetched"),
        "{text}"
    );
    assert!(!text.contains("__qg_t"), "{text}");
    assert!(mock.requests().is_empty(), "{:?}", mock.paths());
    // A LIKE on a column the rows have stays a local filter.
    let out = e
        .execute(
            &cx(&[("GITHUB_CREDS", SECRET)]),
            "SELECT name FROM github.repos.repos WHERE name LIKE 'mi%'",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text_cell("mine")]]);
}

fn text_cell(s: &str) -> Cell {
    Cell::Text(s.to_owned())
}

#[tokio::test]
async fn github_repos_by_org_with_basic_auth_and_link_pagination() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    let next = format!(
        "<{}/organizations/99/repos?page=2>; rel=\"next\"",
        mock.url()
    );
    mock.route(
        "/orgs/acme/repos",
        Reply::json(json!([{"id": 1, "name": "one", "private": false}])).header("link", &next),
    );
    mock.route(
        "/organizations/99/repos",
        Reply::json(json!([{"id": 2, "name": "two", "private": true}])),
    );
    let e = compat_engine(root, &[("github", mock.url())]);
    let out = e
        .execute(
            &cx(&[("GITHUB_CREDS", SECRET)]),
            "SELECT name, private, org FROM github.repos.repos WHERE org = 'acme' ORDER BY name",
        )
        .await
        .unwrap();
    assert_eq!(
        out.rows,
        vec![
            vec![text("one"), Cell::Boolean(false), text("acme")],
            vec![text("two"), Cell::Boolean(true), text("acme")]
        ]
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests
            .iter()
            .all(|r| r.headers["authorization"] == format!("Basic {SECRET}").as_str())
    );
}

#[tokio::test]
async fn github_user_repos_pick_the_method_by_param_and_404_is_empty() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    mock.route("/users/octo/repos", Reply::json(json!([{"name": "hello"}])));
    let e = compat_engine(root, &[("github", mock.url())]);
    let c = cx(&[("GITHUB_CREDS", SECRET)]);
    let out = e
        .execute(
            &c,
            "SELECT name FROM github.repos.repos WHERE username = 'octo'",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("hello")]]);
    let none = e
        .execute(
            &c,
            "SELECT name FROM github.repos.repos WHERE org = 'nonexistentorg'",
        )
        .await
        .unwrap();
    assert!(none.rows.is_empty());
}

#[tokio::test]
async fn github_absent_service_document_is_named() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    let e = compat_engine(root, &[]);
    let c = cx(&[]);
    let services = e.services(&c, "github").await.unwrap();
    assert!(
        services.len() > 30,
        "services listed from provider.yaml alone"
    );
    let err = e
        .execute(&c, "SELECT * FROM github.actions.runners WHERE org = 'a'")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("github/v0.3.1/services/actions.yaml"),
        "{err}"
    );
    // activity.yaml (1.6 MB) parses and describes.
    let resources = e.resources(&c, "github", "activity").await.unwrap();
    assert!(
        resources
            .iter()
            .any(|r| r.id == "github.activity.public_events")
    );
    let columns = e
        .columns(&c, "github", "activity", "public_events")
        .await
        .unwrap();
    assert!(columns.iter().any(|col| col.name == "actor"));
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn google_split_layout_items_and_page_tokens() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    let base = format!("{}/compute/v1", mock.url());
    mock.route(
        "/compute/v1/projects/p/zones/z/instances",
        Reply::json(json!({"kind": "compute#instanceList", "items": [{"id": "1", "name": "vm-1", "status": "RUNNING"}], "nextPageToken": "n2"})),
    );
    mock.route(
        "/compute/v1/projects/p/zones/z/instances?pageToken=n2",
        Reply::json(json!({"kind": "compute#instanceList", "items": [{"id": "2", "name": "vm-2", "status": "STOPPED"}]})),
    );
    mock.route(
        "/compute/v1/projects/p/aggregated/instances",
        Reply::json(json!({"items": {
            "zones/a": {"instances": [{"name": "agg-1", "zone": "a"}]},
            "zones/b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}}
        }})),
    );
    mock.route(
        "/compute/v1/projects/p/zones/z/acceleratorTypes",
        Reply::json(json!({"items": [{"name": "nvidia-tesla-t4"}]})),
    );
    let e = compat_engine(root, &[("google", base)]);
    let c = cx(&[("GOOGLE_TOKEN", SECRET)]);
    let out = e
        .execute(&c, "SELECT name, status FROM google.compute.instances WHERE project = 'p' AND zone = 'z' ORDER BY name")
        .await
        .unwrap();
    assert_eq!(
        out.rows,
        vec![
            vec![text("vm-1"), text("RUNNING")],
            vec![text("vm-2"), text("STOPPED")]
        ]
    );
    let agg = e
        .execute(
            &c,
            "SELECT name FROM google.compute.instances WHERE project = 'p'",
        )
        .await
        .unwrap();
    assert_eq!(agg.rows, vec![vec![text("agg-1")]]);
    // acceleratorTypes has no sqlVerbs: `list` is found by StackQL's fallback names.
    let legacy = e
        .execute(
            &c,
            "SELECT name FROM google.compute.acceleratorTypes WHERE project = 'p' AND zone = 'z'",
        )
        .await
        .unwrap();
    assert_eq!(legacy.rows, vec![vec![text("nvidia-tesla-t4")]]);
    // disks live in their own split document (serviceDoc).
    let disks = e.columns(&c, "google", "compute", "disks").await.unwrap();
    assert!(disks.iter().any(|col| col.name == "sizeGb"));
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.headers["authorization"] == format!("Bearer {SECRET}").as_str())
    );
}

#[tokio::test]
async fn native_test_pagination_and_server_variables() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    for page in 1..=3 {
        let body = json!({"items": [{"name": format!("i{page}"), "idx": page, "wire_page": page}], "result_info": {"page": page, "total_pages": 3}});
        let key = if page == 1 {
            "/paged/items".to_owned()
        } else {
            format!("/paged/items?page={page}")
        };
        mock.route(&key, Reply::json(body));
    }
    mock.route(
        "/paged/items_unterminated",
        Reply::json(
            json!({"items": [{"name": "only", "wire_page": 1}], "result_info": {"page": 1}}),
        ),
    );
    mock.route(
        "/paged/items_unterminated?page=2",
        Reply::json(
            json!({"items": [{"name": "never", "wire_page": 2}], "result_info": {"page": 2}}),
        ),
    );
    let next = format!("{}/odata/people?$skip=1", mock.url());
    mock.route(
        "/odata/people",
        Reply::json(json!({"value": [{"name": "ann", "age": 30}], "@odata.nextLink": next})),
    );
    mock.route(
        "/odata/people?$skip=1",
        Reply::json(json!({"value": [{"name": "bob", "age": 40}]})),
    );
    mock.route(
        "/srvvar/from-env/items",
        Reply::json(json!({"items": [{"name": "e", "deployment": "from-env"}]})),
    );
    mock.route(
        "/srvvar/from-where/items",
        Reply::json(json!({"items": [{"name": "w", "deployment": "from-where"}]})),
    );
    let e = compat_engine(root.clone(), &[("stackql_native_test", mock.url())]);
    let c = cx(&[]);
    let paged = e
        .execute(
            &c,
            "SELECT wire_page FROM stackql_native_test.paged.items ORDER BY wire_page",
        )
        .await
        .unwrap();
    assert_eq!(column(&paged, "wire_page"), vec![int(1), int(2), int(3)]);
    let single = e
        .execute(
            &c,
            "SELECT name FROM stackql_native_test.paged.items_unterminated",
        )
        .await
        .unwrap();
    assert_eq!(single.rows, vec![vec![text("only")]]);
    let people = e
        .execute(
            &c,
            "SELECT name FROM stackql_native_test.odata.people ORDER BY name",
        )
        .await
        .unwrap();
    assert_eq!(column(&people, "name"), vec![text("ann"), text("bob")]);

    let srv = compat_engine(
        root,
        &[(
            "stackql_native_test",
            format!("{}/srvvar/{{deployment}}", mock.url()),
        )],
    );
    let from_env = cx(&[("STACKQL_NATIVE_TEST_DEPLOYMENT", "from-env")]);
    let out = srv
        .execute(
            &from_env,
            "SELECT name FROM stackql_native_test.srvvar.items",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("e")]]);
    let out = srv
        .execute(&from_env, "SELECT name, deployment FROM stackql_native_test.srvvar.items WHERE deployment = 'from-where'")
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("w"), text("from-where")]]);
}

#[tokio::test]
async fn custom_auth_with_successor_sends_both_headers() {
    let Some(root) = compat_registry() else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "/api/v1/collectors",
        Reply::json(json!({"collectors": [{"id": 1, "name": "c1"}]})),
    );
    let e = compat_engine(
        root,
        &[("stackql_auth_testing", format!("{}/api", mock.url()))],
    );
    let c = cx(&[("DD_API_KEY", SECRET), ("DD_APPLICATION_KEY", "app-key-2")]);
    let out = e
        .execute(
            &c,
            "SELECT name FROM stackql_auth_testing.collectors.collectors WHERE region = 'us2'",
        )
        .await
        .unwrap();
    assert_eq!(out.rows, vec![vec![text("c1")]]);
    let request = &mock.requests()[0];
    assert_eq!(request.headers["dd-api-key"], SECRET);
    assert_eq!(request.headers["dd-application-key"], "app-key-2");
    let err = e
        .execute(
            &cx(&[]),
            "SELECT name FROM stackql_auth_testing.collectors.collectors WHERE region = 'us2'",
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("credential resolution failed for provider 'stackql_auth_testing' (variable DD_API_KEY is not set)"));
}
