//! RFC 9728 protected resource metadata: the document at
//! `/.well-known/oauth-protected-resource` (and its path-inserted form for `/mcp`) that tells
//! MCP clients which authorization servers issue tokens for this server.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::config::AuthConfig;

/// The metadata URL for `auth.resource` (`https://h/mcp` →
/// `https://h/.well-known/oauth-protected-resource/mcp`).
pub fn metadata_url(auth: &AuthConfig) -> Option<String> {
    let resource = url::Url::parse(auth.resource.as_deref()?).ok()?;
    let path = resource.path().trim_end_matches('/');
    let mut url = resource.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.set_path(&format!("/.well-known/oauth-protected-resource{path}"));
    Some(url.to_string())
}

/// The metadata document: `scopes_supported` lists the scopes of `auth.jwt.scopes` and,
/// when an issuer's tokens need them, the query-class scopes (`querygate:read`, …).
pub fn document(auth: &AuthConfig) -> Value {
    let mut scopes: BTreeSet<&str> = auth
        .jwt
        .as_ref()
        .and_then(|jwt| jwt.scopes.as_ref())
        .map(|scopes| scopes.keys().map(String::as_str).collect())
        .unwrap_or_default();
    if auth
        .jwt
        .as_ref()
        .is_some_and(|jwt| jwt.enforces_query_scopes())
    {
        scopes.extend(crate::policy::ALL_QUERY_SCOPES);
    }
    let mut doc = json!({
        "resource": auth.resource,
        "authorization_servers": auth.authorization_servers,
        "bearer_methods_supported": ["header"],
    });
    if !scopes.is_empty() {
        doc["scopes_supported"] = json!(scopes);
    }
    doc
}
