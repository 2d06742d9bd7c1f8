//! Azure Resource Manager's `nextLink` pagination over the current registry's `azure`
//! documents (which declare no `pagination`): a SELECT of `azure.resource.resource_groups`
//! against a mock ARM on 127.0.0.1 GETs each page's `nextLink` as given (query and
//! `$skiptoken` included, with the same bearer) until a page has none, within
//! `upstream.page_limit`; a `nextLink` to another origin is refused and never requested,
//! and a repeated link stops the traversal.

use std::sync::Arc;

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::{Value, json};

use crate::mock::{Mock, Recorded, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;

const PROVIDER: &str = "src/azure/v00.00.00000/provider.yaml";
const RESOURCE: &str = "src/azure/v00.00.00000/services/resource.yaml";
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "04b07795-8ddb-461a-bbee-02f9e1bf7b46";
const CLIENT_SECRET: &str = "azs-paging-client-secret-7731";
const TOKEN: &str = "arm-paging-token";
const SELECT: &str = "SELECT name, location FROM azure.resource.resource_groups \
                      WHERE subscription_id = 'sub1' ORDER BY name";
const GROUPS: &str = "/subscriptions/sub1/resourcegroups";
const FIRST: &str = "api-version=2025-04-01";

/// The query of the page after `FIRST` that `token` names, as ARM writes it.
fn skip(token: &str) -> String {
    format!("{FIRST}&$skiptoken={token}")
}

/// A mock Entra ID issuing `TOKEN` for the client-credentials grant.
async fn entra() -> Mock {
    let entra = Mock::start().await;
    entra.route(
        &format!("POST /{TENANT}/oauth2/v2.0/token"),
        Reply::json(json!({
            "token_type": "Bearer",
            "expires_in": 3599,
            "ext_expires_in": 3599,
            "access_token": TOKEN,
        })),
    );
    entra
}

/// A Resource Groups - List page of `groups` (name, location), with `next` as `nextLink`.
fn page(groups: &[(&str, &str)], next: Option<String>) -> Reply {
    let value: Vec<Value> = groups
        .iter()
        .map(|(name, location)| {
            json!({
                "id": format!("/subscriptions/sub1/resourceGroups/{name}"),
                "name": name,
                "type": "Microsoft.Resources/resourceGroups",
                "location": location,
                "properties": {"provisioningState": "Succeeded"}
            })
        })
        .collect();
    let mut body = json!({ "value": value });
    if let Some(next) = next {
        body["nextLink"] = Value::String(next);
    }
    Reply::json(body)
}

/// The absolute `nextLink` ARM at `arm` gives for the page with `query`.
fn link(arm: &Mock, query: &str) -> String {
    format!("{}{GROUPS}?{query}", arm.url())
}

/// Answers the three pages of a listing: 2, 2 and 1 groups.
fn three_pages(arm: &Mock) {
    arm.route(
        &format!("{GROUPS}?{FIRST}"),
        page(
            &[("rg-a", "westeurope"), ("rg-b", "northeurope")],
            Some(link(arm, &skip("p2"))),
        ),
    );
    arm.route(
        &format!("{GROUPS}?{}", skip("p2")),
        page(
            &[("rg-c", "eastus"), ("rg-d", "westus")],
            Some(link(arm, &skip("p3"))),
        ),
    );
    arm.route(
        &format!("{GROUPS}?{}", skip("p3")),
        page(&[("rg-e", "uksouth")], None),
    );
}

fn engine(root: &std::path::Path, arm: &Mock, page_limit: Option<u32>) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    if let Some(limit) = page_limit {
        config.upstream.page_limit = limit;
    }
    config.providers.insert(
        "azure".to_owned(),
        ProviderSettings {
            base_url: Some(arm.url()),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

fn context(entra: &Mock) -> ExecContext {
    let authority = entra.url();
    let pairs = [
        ("AZURE_TENANT_ID", TENANT),
        ("AZURE_CLIENT_ID", CLIENT),
        ("AZURE_CLIENT_SECRET", CLIENT_SECRET),
        ("AZURE_AUTHORITY_HOST", authority.as_str()),
    ];
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )),
        ..ExecContext::anonymous_default()
    }
}

/// Each ARM request as `METHOD path?query`, in order.
fn sent(arm: &Mock) -> Vec<String> {
    arm.requests()
        .iter()
        .map(|r| {
            format!(
                "{} {}?{}",
                r.method,
                r.path,
                r.query.as_deref().unwrap_or("")
            )
        })
        .collect()
}

fn bearer(r: &Recorded) -> String {
    r.headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn next_links_are_followed_across_three_pages() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (entra().await, Mock::start().await);
    three_pages(&arm);
    let e = engine(registry.path(), &arm, None);
    let out = e
        .execute(&context(&entra), SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "rg-a|westeurope",
            "rg-b|northeurope",
            "rg-c|eastus",
            "rg-d|westus",
            "rg-e|uksouth"
        ]
    );
    assert!(out.warnings.is_empty(), "{:?}", out.warnings);
    assert_eq!(
        sent(&arm),
        [
            format!("GET {GROUPS}?{FIRST}"),
            format!("GET {GROUPS}?{}", skip("p2")),
            format!("GET {GROUPS}?{}", skip("p3")),
        ]
    );
    let expected = format!("Bearer {TOKEN}");
    assert!(
        arm.requests().iter().all(|r| bearer(r) == expected),
        "every page carries the bearer"
    );
    assert_eq!(entra.requests().len(), 1, "one token for the three pages");
}

#[tokio::test]
async fn the_page_limit_bounds_next_links_and_says_so() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (entra().await, Mock::start().await);
    three_pages(&arm);
    let e = engine(registry.path(), &arm, Some(2));
    let out = e
        .execute(&context(&entra), SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "rg-a|westeurope",
            "rg-b|northeurope",
            "rg-c|eastus",
            "rg-d|westus"
        ]
    );
    assert_eq!(sent(&arm).len(), 2, "{:?}", sent(&arm));
    assert!(
        out.warnings
            .iter()
            .any(|w| w.contains("stopped after 2 pages (upstream.page_limit)")),
        "{:?}",
        out.warnings
    );
}

#[tokio::test]
async fn a_next_link_to_another_origin_is_refused() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm, elsewhere) = (entra().await, Mock::start().await, Mock::start().await);
    arm.route(
        &format!("{GROUPS}?{FIRST}"),
        page(
            &[("rg-a", "westeurope")],
            Some(link(&elsewhere, &skip("p2"))),
        ),
    );
    elsewhere.route(GROUPS, page(&[("rg-stolen", "westeurope")], None));
    let e = engine(registry.path(), &arm, None);
    let err = e
        .execute(&context(&entra), SELECT)
        .await
        .expect_err("a nextLink to another origin must fail the statement");
    let text = err.to_string();
    assert!(
        text.contains("refusing to follow a next-page link to another origin")
            && text.contains(&elsewhere.url())
            && text.contains(&arm.url()),
        "{text}"
    );
    assert!(
        !text.contains(TOKEN) && !text.contains(CLIENT_SECRET),
        "{text}"
    );
    assert!(elsewhere.requests().is_empty(), "{:?}", sent(&elsewhere));
    assert_eq!(sent(&arm), [format!("GET {GROUPS}?{FIRST}")]);
}

#[tokio::test]
async fn a_repeated_next_link_stops_the_traversal() {
    let Some(registry) = current_registry(&[PROVIDER, RESOURCE]) else {
        return;
    };
    let (entra, arm) = (entra().await, Mock::start().await);
    arm.route(
        &format!("{GROUPS}?{FIRST}"),
        page(&[("rg-a", "westeurope")], Some(link(&arm, &skip("p2")))),
    );
    // The second page points at itself.
    arm.route(
        &format!("{GROUPS}?{}", skip("p2")),
        page(&[("rg-b", "northeurope")], Some(link(&arm, &skip("p2")))),
    );
    let e = engine(registry.path(), &arm, None);
    let out = e
        .execute(&context(&entra), SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["rg-a|westeurope", "rg-b|northeurope"]);
    assert_eq!(
        sent(&arm),
        [
            format!("GET {GROUPS}?{FIRST}"),
            format!("GET {GROUPS}?{}", skip("p2")),
        ]
    );
}
