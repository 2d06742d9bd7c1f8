//! The census of the current StackQL registry: every SELECT method bound to an HTTP method
//! other than GET or HEAD has an effect with evidence, from the engine's own discovery API
//! (`Engine::methods`), and the methods decided by nothing but the fail-closed rule are
//! counted and printed. The registry's known cases keep their answers: cloudflare D1
//! `query` and anthropic `messages.create` are not reads, `count_tokens`, Cloud Control's
//! `ListResources`/`GetResource` and AWS's JSON-protocol `Describe*` are.

use std::collections::BTreeMap;
use std::sync::Arc;

use querygate::engine::{
    CredentialStore, Effect, EffectSource, Engine, EngineConfig, ExecContext, SqlVerb,
};

/// Per provider: SELECT methods not bound to GET/HEAD, by source and effect.
type Census = BTreeMap<String, BTreeMap<(EffectSource, Effect), usize>>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_select_method_not_bound_to_get_has_an_effect_with_evidence() {
    let Some(root) = crate::provider_rules::current_registry() else {
        return;
    };
    let engine = Engine::new(EngineConfig::new(root)).unwrap();
    let cx = ExecContext {
        credentials: Arc::new(CredentialStore::fixed([])),
        ..ExecContext::anonymous_default()
    };
    let mut census = Census::new();
    let mut effects: BTreeMap<String, (Effect, String)> = BTreeMap::new();
    let mut unopened = 0usize;
    for provider in engine.providers(&cx).await.unwrap() {
        let services = match engine.services(&cx, &provider.name).await {
            Ok(services) => services,
            Err(_) => {
                unopened += 1;
                continue;
            }
        };
        for service in services {
            // Documents absent from the registry copy (MISSING.txt) do not open.
            let Ok(resources) = engine.resources(&cx, &provider.name, &service.name).await else {
                unopened += 1;
                continue;
            };
            for resource in resources {
                let Ok(methods) = engine
                    .methods(&cx, &provider.name, &service.name, &resource.name)
                    .await
                else {
                    unopened += 1;
                    continue;
                };
                for method in methods {
                    let (Some(http), Some(effect)) = (&method.http_method, &method.effect) else {
                        continue;
                    };
                    if method.sql_verb != Some(SqlVerb::Select)
                        || matches!(http.as_str(), "GET" | "HEAD")
                    {
                        continue;
                    }
                    assert!(
                        !effect.evidence.trim().is_empty(),
                        "{}.{}: no evidence",
                        resource.id,
                        method.name
                    );
                    *census
                        .entry(provider.name.clone())
                        .or_default()
                        .entry((effect.source, effect.effect))
                        .or_default() += 1;
                    effects.insert(
                        format!("{}.{}", resource.id, method.name),
                        (effect.effect, effect.evidence.to_string()),
                    );
                }
            }
        }
    }
    let mut table = String::from(
        "| provider | SELECT methods not bound to GET/HEAD | read | not read | decided by nothing but the fail-closed rule |\n|---|---:|---:|---:|---:|\n",
    );
    let (mut all, mut all_read, mut all_unknown) = (0, 0, 0);
    for (provider, counts) in &census {
        let total: usize = counts.values().sum();
        let read: usize = counts
            .iter()
            .filter(|((_, effect), _)| *effect == Effect::Read)
            .map(|(_, n)| n)
            .sum();
        let unknown: usize = counts
            .iter()
            .filter(|((source, _), _)| *source == EffectSource::Unknown)
            .map(|(_, n)| n)
            .sum();
        all += total;
        all_read += read;
        all_unknown += unknown;
        table.push_str(&format!(
            "| {provider} | {total} | {read} | {} | {unknown} |\n",
            total - read
        ));
    }
    table.push_str(&format!(
        "| all | {all} | {all_read} | {} | {all_unknown} |\n",
        all - all_read
    ));
    println!("{table}\n(services, resources or methods that did not open: {unopened})");
    // The non-AWS methods that are not reads, and why (AWS's are many: see the README of
    // crates/engine/data for the actions the access-level data does not list).
    for (method, (effect, evidence)) in &effects {
        if *effect != Effect::Read && !method.starts_with("aws") {
            println!("not read: {method}: {effect}, {evidence}");
        }
    }

    let effect_of = |method: &str| {
        effects
            .get(method)
            .cloned()
            .unwrap_or_else(|| panic!("{method} is not in the census"))
    };
    for (method, want) in [
        ("cloudflare.d1.database_query.query", false),
        ("anthropic.messages.messages.create", false),
        ("anthropic.messages.token_counts.count_tokens", true),
        ("awscc.cloud_control.resources.list_resources", true),
        ("awscc.cloud_control.resource.get_resource", true),
        ("aws.ecs.clusters.describe_clusters", true),
    ] {
        let (effect, evidence) = effect_of(method);
        assert_eq!(
            effect == Effect::Read,
            want,
            "{method}: {effect} ({evidence})"
        );
    }
    // Every non-AWS method of this registry is in the reviewed table or parsed as GraphQL:
    // only AWS methods the access-level data does not know fall to the fail-closed rule.
    for (provider, counts) in &census {
        if provider == "aws" || provider == "awscc" {
            continue;
        }
        let unknown: usize = counts
            .iter()
            .filter(|((source, _), _)| *source == EffectSource::Unknown)
            .map(|(_, n)| n)
            .sum();
        assert_eq!(unknown, 0, "{provider}: {counts:?}");
    }
    assert!(all > 4_000, "{table}");
}
