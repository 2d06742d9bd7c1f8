//! Ranking index entries against a natural-language intent.
//!
//! Hard filters first (deprecated entries, mutations unless asked for and allowed, provider,
//! service, tags), then a score per intent token: intent keywords weigh most, then the title,
//! keywords, tags, services, providers and the description; an intent keyword found whole in
//! the intent (or the intent in it) adds a bonus once. A result whose best score is under
//! [`MISS_BELOW`] is a miss.

use super::model::IndexEntry;

/// Top scores under this are a miss.
pub(crate) const MISS_BELOW: f64 = 2.5;
/// Hits returned when the caller asks for none or a negative number.
pub(crate) const DEFAULT_LIMIT: usize = 5;
/// Most hits returned.
pub(crate) const MAX_LIMIT: usize = 20;

const STOP_WORDS: &[&str] = &[
    "the", "a", "an", "of", "in", "on", "for", "to", "and", "or", "all", "my", "with", "show",
    "me", "get", "every", "list", "which", "what", "are", "is",
];

/// What to search for.
#[derive(Debug, Default)]
pub(crate) struct Query<'a> {
    pub(crate) intent: &'a str,
    pub(crate) provider: Option<&'a str>,
    pub(crate) service: Option<&'a str>,
    pub(crate) tags: &'a [String],
    /// Mutations are offered only when asked for and the tenant may write.
    pub(crate) mutations: bool,
    pub(crate) limit: Option<i64>,
}

/// A ranked entry.
#[derive(Debug)]
pub(crate) struct Ranked<'a> {
    pub(crate) entry: &'a IndexEntry,
    pub(crate) score: f64,
}

/// Lowercase tokens of `text`: split on anything but `[a-z0-9]`, without one-letter tokens
/// and stop words.
pub(crate) fn tokens(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_ascii_lowercase() && !c.is_ascii_digit())
        .filter(|t| t.len() > 1 && !STOP_WORDS.contains(t))
        .map(str::to_owned)
        .collect()
}

fn eq_any(list: &[String], wanted: &str) -> bool {
    list.iter().any(|v| v.eq_ignore_ascii_case(wanted))
}

fn contains_any(list: &[String], token: &str) -> bool {
    list.iter().any(|v| v.to_lowercase().contains(token))
}

/// Whether the hard filters keep `entry`.
fn admitted(entry: &IndexEntry, query: &Query<'_>) -> bool {
    if entry
        .status
        .as_deref()
        .is_some_and(|s| s.eq_ignore_ascii_case("deprecated"))
    {
        return false;
    }
    if entry.mutation && !query.mutations {
        return false;
    }
    if let Some(provider) = query.provider.filter(|p| !p.is_empty())
        && !eq_any(&entry.providers, provider)
    {
        return false;
    }
    if let Some(service) = query.service.filter(|s| !s.is_empty())
        && !eq_any(&entry.services, service)
    {
        return false;
    }
    query.tags.iter().all(|tag| eq_any(&entry.tags, tag))
}

/// The score of `entry` for the intent.
pub(crate) fn score(entry: &IndexEntry, intent: &str) -> f64 {
    let title = entry.title.to_lowercase();
    let description = entry
        .description
        .as_deref()
        .unwrap_or_default()
        .to_lowercase();
    let mut total = 0.0;
    for token in tokens(intent) {
        let token = token.as_str();
        if contains_any(&entry.intent_keywords, token) {
            total += 4.0;
        }
        if title.contains(token) {
            total += 3.0;
        }
        if contains_any(&entry.keywords, token) {
            total += 2.5;
        }
        if contains_any(&entry.tags, token) {
            total += 2.0;
        }
        if contains_any(&entry.services, token) {
            total += 2.0;
        }
        if contains_any(&entry.providers, token) {
            total += 1.5;
        }
        if description.contains(token) {
            total += 1.0;
        }
    }
    let whole = intent.trim().to_lowercase();
    if !whole.is_empty()
        && entry.intent_keywords.iter().any(|k| {
            let k = k.to_lowercase();
            !k.is_empty() && (whole.contains(&k) || k.contains(&whole))
        })
    {
        total += 6.0;
    }
    total
}

/// Admitted entries ranked by score (ties keep index order), cut at the limit; and whether
/// the result is a miss.
pub(crate) fn search<'a>(entries: &'a [IndexEntry], query: &Query<'_>) -> (Vec<Ranked<'a>>, bool) {
    let limit = match query.limit {
        Some(n) if n > 0 => usize::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
        _ => DEFAULT_LIMIT,
    };
    let mut ranked: Vec<Ranked<'a>> = entries
        .iter()
        .filter(|e| admitted(e, query))
        .map(|entry| Ranked {
            entry,
            score: score(entry, query.intent),
        })
        .filter(|r| r.score > 0.0)
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score));
    ranked.truncate(limit);
    let miss = ranked.first().is_none_or(|top| top.score < MISS_BELOW);
    (ranked, miss)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str, title: &str) -> IndexEntry {
        IndexEntry {
            id: id.to_owned(),
            title: title.to_owned(),
            description: None,
            providers: vec![],
            services: vec![],
            tags: vec![],
            keywords: vec![],
            intent_keywords: vec![],
            mutation: false,
            status: None,
            required_params: vec![],
        }
    }

    #[test]
    fn tokens_drop_stop_words_short_tokens_and_punctuation() {
        assert_eq!(
            tokens("Show me ALL the repos in my GitHub org, e.g. acme-corp!"),
            ["repos", "github", "org", "acme", "corp"]
        );
        assert!(tokens("a the of").is_empty());
    }

    #[test]
    fn weights_add_up_per_token() {
        let mut e = entry(
            "github/repos/repos-by-org",
            "Repositories of an organization",
        );
        e.intent_keywords = vec!["org repos".into()];
        e.keywords = vec!["codebases".into()];
        e.tags = vec!["inventory".into()];
        e.services = vec!["repos".into()];
        e.providers = vec!["github".into()];
        e.description = Some("Lists each project".into());
        assert_eq!(score(&e, "codebases"), 2.5);
        assert_eq!(score(&e, "inventory"), 2.0);
        assert_eq!(score(&e, "github"), 1.5);
        assert_eq!(score(&e, "project"), 1.0);
        assert_eq!(score(&e, "organization"), 3.0);
        // intent keyword 4 + title ("repositories") 3 + service 2, and the intent is part of
        // the intent keyword "org repos": +6.
        assert_eq!(score(&e, "repos"), 9.0 + 6.0);
        // org: intent keyword 4 + title 3; repos: 9; the intent holds "org repos" whole: +6.
        assert_eq!(score(&e, "org repos please"), 7.0 + 9.0 + 6.0);
        assert_eq!(score(&e, "kubernetes"), 0.0);
    }

    #[test]
    fn filters_order_limits_and_misses() {
        let mut repos = entry("github/repos/repos-by-org", "GitHub repositories");
        repos.providers = vec!["github".into()];
        repos.tags = vec!["inventory".into()];
        let mut members = entry("github/orgs/members", "GitHub organization members");
        members.providers = vec!["github".into()];
        let mut create = entry("github/repos/create", "Create GitHub repositories");
        create.mutation = true;
        create.providers = vec!["github".into()];
        let mut old = entry("github/repos/old", "GitHub repositories (old)");
        old.status = Some("Deprecated".into());
        let entries = vec![members, repos, create, old];

        let query = Query {
            intent: "github repositories",
            ..Query::default()
        };
        let (hits, miss) = search(&entries, &query);
        let ids: Vec<&str> = hits.iter().map(|h| h.entry.id.as_str()).collect();
        assert_eq!(ids, ["github/repos/repos-by-org", "github/orgs/members"]);
        assert!(!miss);

        let with_mutations = Query {
            mutations: true,
            ..query
        };
        let (hits, _) = search(&entries, &with_mutations);
        assert_eq!(hits.len(), 3);

        let tagged = Query {
            intent: "github repositories",
            tags: &["INVENTORY".to_owned()],
            provider: Some("GitHub"),
            limit: Some(1),
            ..Query::default()
        };
        let (hits, _) = search(&entries, &tagged);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].entry.id, "github/repos/repos-by-org");

        let other = Query {
            intent: "github repositories",
            provider: Some("google"),
            ..Query::default()
        };
        let (hits, miss) = search(&entries, &other);
        assert!(hits.is_empty() && miss);

        // Only a description match: a hit, but a weak one.
        let mut weak = entry("x/y/z", "Something");
        weak.description = Some("mentions buckets".into());
        let (hits, miss) = search(
            std::slice::from_ref(&weak),
            &Query {
                intent: "buckets",
                ..Query::default()
            },
        );
        assert_eq!(hits.len(), 1);
        assert!(miss);
    }
}
