//! `oauth2` with the client-credentials grant (RFC 6749 §4.4), with StackQL's field names:
//! `token_url`, `grant_type` (only `client_credentials`), `client_id_env_var` /
//! `client_secret_env_var` (or inline `client_id` / `client_secret`), `scopes`, `values`
//! (extra form fields such as `audience`) and `auth_style` (client credentials in an HTTP
//! Basic header by default; `1`, `in_params` or `body` puts them in the form instead).
//! `token_url` may hold `{{ .__env__NAME }}` templates (see `template`).

use serde_json::Value;

use super::static_keys::read_var;
use super::template;
use super::token::{self, TokenRequest};
use super::{credential_error, field};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::{Error, Result};
use crate::upstream::Upstream;

/// The `Authorization` value for an `oauth2` auth object: cached, or fetched now.
pub(super) async fn authorization(
    upstream: &Upstream,
    provider: &str,
    auth: &Value,
    credentials: &CredentialStore,
) -> Result<String> {
    let template_url = field(auth, "token_url").ok_or_else(|| {
        Error::bad_document(format!(
            "provider '{provider}': oauth2 auth needs a 'token_url'"
        ))
    })?;
    let token_url = template::expand("token_url", template_url, credentials)
        .map_err(|cause| credential_error(provider, &cause))?;
    let shown_url = (token_url != template_url).then(|| template::shown(template_url));
    let token_url = token_url.as_ref();
    let grant_type = field(auth, "grant_type").unwrap_or("client_credentials");
    if grant_type != "client_credentials" {
        return Err(Error::bad_document(format!(
            "provider '{provider}': oauth2 grant_type '{grant_type}' is not supported (only client_credentials)"
        )));
    }
    let (client_id, client_secret) =
        client_pair(auth, credentials).map_err(|cause| credential_error(provider, &cause))?;
    let scope = scopes(auth).join(" ");
    let extra = extra_values(auth);
    let in_body = credentials_in_body(auth);
    let extra_text = serde_json::to_string(&extra).unwrap_or_default();
    let key = token::cache_key(
        provider,
        &[
            b"oauth2",
            token_url.as_bytes(),
            client_id.as_bytes(),
            client_secret.as_bytes(),
            scope.as_bytes(),
            extra_text.as_bytes(),
            &[u8::from(in_body)],
        ],
    );
    if let Some(value) = token::cached(credentials, &key) {
        return Ok(value);
    }
    let mut form: Vec<(&str, String)> = vec![("grant_type", grant_type.to_owned())];
    if !scope.is_empty() {
        form.push(("scope", scope));
    }
    for (name, value) in &extra {
        form.push((name.as_str(), value.clone()));
    }
    let basic = if in_body {
        form.push(("client_id", client_id));
        form.push(("client_secret", client_secret));
        None
    } else {
        Some((client_id, client_secret))
    };
    token::exchange(
        upstream,
        credentials,
        key,
        TokenRequest {
            provider,
            token_url,
            shown_url: shown_url.as_deref(),
            form,
            basic,
        },
    )
    .await
}

/// Checks that the client id, the client secret and the token URL are present.
pub(super) fn check(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<(), String> {
    let Some(token_url) = field(auth, "token_url") else {
        return Err("the oauth2 auth config has no token_url".to_owned());
    };
    template::expand("token_url", token_url, credentials)?;
    client_pair(auth, credentials).map(|_| ())
}

/// Client id and secret: from the named variables, else inline.
fn client_pair(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<(String, String), String> {
    let one =
        |var_key: &str, inline_key: &str| match (field(auth, var_key), field(auth, inline_key)) {
            (Some(var), _) => read_var(credentials, var),
            (None, Some(inline)) => Ok(inline.to_owned()),
            (None, None) => Err(format!(
                "the oauth2 auth config names neither {var_key} nor {inline_key}"
            )),
        };
    Ok((
        one("client_id_env_var", "client_id")?,
        one("client_secret_env_var", "client_secret")?,
    ))
}

/// `scopes` as a list of strings, or one space-separated string.
pub(super) fn scopes(auth: &Value) -> Vec<String> {
    match auth.get("scopes") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// `values`: extra form fields, each a string or a list of strings (repeated), sorted by
/// name so the cache key is stable.
fn extra_values(auth: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Value::Object(map)) = auth.get("values") {
        for (name, value) in map {
            match value {
                Value::String(s) => out.push((name.clone(), s.clone())),
                Value::Array(items) => out.extend(
                    items
                        .iter()
                        .filter_map(Value::as_str)
                        .map(|s| (name.clone(), s.to_owned())),
                ),
                Value::Number(n) => out.push((name.clone(), n.to_string())),
                Value::Bool(b) => out.push((name.clone(), b.to_string())),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// `auth_style`: `1` (Go's `AuthStyleInParams`), `in_params`, `params` or `body` send the
/// client credentials as form fields; anything else uses an HTTP Basic header.
fn credentials_in_body(auth: &Value) -> bool {
    match auth.get("auth_style") {
        Some(Value::Number(n)) => n.as_u64() == Some(1),
        Some(Value::String(s)) => matches!(s.as_str(), "1" | "in_params" | "params" | "body"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_read_as_stackql_names_them() {
        assert_eq!(
            scopes(&json!({"scopes": ["a", "b"]})),
            vec!["a".to_owned(), "b".to_owned()]
        );
        assert_eq!(scopes(&json!({"scopes": "a b"})).len(), 2);
        assert_eq!(
            extra_values(&json!({"values": {"resource": ["r1", "r2"], "audience": "x"}})),
            vec![
                ("audience".to_owned(), "x".to_owned()),
                ("resource".to_owned(), "r1".to_owned()),
                ("resource".to_owned(), "r2".to_owned()),
            ]
        );
        assert!(credentials_in_body(&json!({"auth_style": 1})));
        assert!(credentials_in_body(&json!({"auth_style": "body"})));
        assert!(!credentials_in_body(&json!({"auth_style": 2})));
        assert!(!credentials_in_body(&json!({})));
    }

    #[test]
    fn check_names_what_is_missing() {
        let creds = CredentialStore::fixed([("ID".to_owned(), "i".to_owned())]);
        let auth = json!({"type": "oauth2", "token_url": "https://t", "client_id_env_var": "ID",
                          "client_secret_env_var": "SECRET"});
        assert_eq!(
            check(&auth, &creds).unwrap_err(),
            "variable SECRET is not set"
        );
        let inline = json!({"type": "oauth2", "token_url": "https://t", "client_id_env_var": "ID",
                            "client_secret": "s"});
        assert!(check(&inline, &creds).is_ok());
        assert!(
            check(&json!({"client_id": "a", "client_secret": "b"}), &creds)
                .unwrap_err()
                .contains("token_url")
        );
    }
}
