//! The reviewed table of the registry's methods bound to POST, PUT or PATCH under SELECT
//! that neither the HTTP method, GraphQL nor AWS's reference decides
//! (`data/method-effects.tsv`, checked against a registry by
//! `scripts/post-reads-census.py --check`): each entry read or not, with its reason. An
//! entry is keyed by provider, service, resource, method, HTTP method and path, so a
//! document that moves the method elsewhere is no longer covered by it.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::{Effect, EffectSource, MethodEffect, MethodFacts};

const TABLE: &str = include_str!("../../data/method-effects.tsv");

/// An entry: the effect and the reviewer's reason.
struct Entry {
    effect: Effect,
    reason: &'static str,
}

/// `provider`, `service`, `resource`, `method`, HTTP method (upper case) and path.
type Key = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

fn table() -> &'static HashMap<Key, Entry> {
    static TABLE_MAP: OnceLock<HashMap<Key, Entry>> = OnceLock::new();
    TABLE_MAP.get_or_init(|| {
        let mut map = HashMap::new();
        for line in TABLE.lines() {
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&'static str> = line.split('\t').collect();
            let Ok(
                [
                    provider,
                    service,
                    resource,
                    method,
                    http,
                    path,
                    effect,
                    reason,
                ],
            ) = <[&'static str; 8]>::try_from(fields)
            else {
                continue;
            };
            let Some(effect) = Effect::parse(effect) else {
                continue;
            };
            map.insert(
                (provider, service, resource, method, http, path),
                Entry { effect, reason },
            );
        }
        map
    })
}

/// How many entries the table has.
pub(super) fn entry_count() -> usize {
    table().len()
}

/// The table's entry for the method, when it has one.
pub(super) fn lookup(facts: &MethodFacts<'_>, http: &str) -> Option<MethodEffect> {
    let entry = table().get(&(
        facts.provider,
        facts.service,
        facts.resource,
        facts.method,
        http,
        facts.path,
    ))?;
    Some(MethodEffect::new(
        entry.effect,
        EffectSource::ReviewedTable,
        format!("reviewed table: {}", entry.reason),
    ))
}

/// Every line of the shipped table that does not parse (for the tests).
#[cfg(test)]
pub(super) fn malformed_lines() -> Vec<&'static str> {
    TABLE
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .filter(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            fields.len() != 8 || Effect::parse(fields[6]).is_none() || fields[7].trim().is_empty()
        })
        .collect()
}
