//! Applies a provider's `config.auth` to a request, reading secrets through the tenant's
//! credential source. Secret values never appear in errors or logs: only variable names.

use base64::Engine as _;
use serde_json::Value;

use crate::engine::credentials::CredentialSource;
use crate::engine::error::{Error, ErrorKind, Result};

/// What auth adds to a request.
#[derive(Default)]
pub(crate) struct AuthParts {
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) query: Vec<(String, String)>,
}

impl std::fmt::Debug for AuthParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only.
        f.debug_struct("AuthParts")
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field(
                "query",
                &self.query.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl AuthParts {
    /// Adds the auth to a built request: query parameters, then headers (marked
    /// sensitive so they never show in debug output).
    pub(crate) fn apply(&self, request: &mut reqwest::Request) -> Result<()> {
        if !self.query.is_empty() {
            let mut pairs = request.url_mut().query_pairs_mut();
            for (name, value) in &self.query {
                pairs.append_pair(name, value);
            }
        }
        for (name, value) in &self.headers {
            let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| Error::internal("auth header was validated when resolved"))?;
            let mut value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| Error::internal("auth header was validated when resolved"))?;
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        Ok(())
    }
}

/// The credential error text the MCP tools show (inventory §8.5).
pub(crate) fn credential_error(provider: &str, cause: &str) -> Error {
    Error::new(
        ErrorKind::Credentials,
        format!(
            "credential resolution failed for provider '{provider}' ({cause}) - fix the configured env file, call reload_credentials, then retry"
        ),
    )
}

/// Resolves `auth` (a provider's `config.auth`, or `null`) into headers and query params.
pub(crate) fn resolve(
    provider: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Result<AuthParts> {
    let mut parts = AuthParts::default();
    let mut current = Some(auth);
    let mut depth = 0;
    while let Some(auth) = current.filter(|a| a.is_object()) {
        depth += 1;
        if depth > 8 {
            return Err(Error::bad_document(format!(
                "provider '{provider}': auth successor chain is longer than 8"
            )));
        }
        apply_one(provider, auth, credentials, &mut parts)?;
        current = auth.get("successor");
    }
    // Checked here, once per statement, so a bad credential is reported for its provider.
    for (name, value) in &parts.headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
            || reqwest::header::HeaderValue::from_str(value).is_err()
        {
            return Err(credential_error(
                provider,
                &format!("the value for header {name} is not a valid HTTP header value"),
            ));
        }
    }
    Ok(parts)
}

fn field<'a>(auth: &'a Value, key: &str) -> Option<&'a str> {
    auth.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn apply_one(
    provider: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
    parts: &mut AuthParts,
) -> Result<()> {
    let kind = field(auth, "type").unwrap_or("null_auth");
    match kind {
        "null_auth" | "none" | "null" => Ok(()),
        "basic" => {
            let secret = secret_bytes(provider, auth, credentials)?;
            let prefix = field(auth, "valuePrefix").unwrap_or("Basic ");
            parts
                .headers
                .push(("Authorization".to_owned(), format!("{prefix}{secret}")));
            Ok(())
        }
        "bearer" => {
            let secret = secret_bytes(provider, auth, credentials)?;
            parts
                .headers
                .push(("Authorization".to_owned(), format!("Bearer {secret}")));
            Ok(())
        }
        "api_key" => {
            let secret = secret_bytes(provider, auth, credentials)?;
            let prefix = field(auth, "valuePrefix").unwrap_or("");
            match (field(auth, "location"), field(auth, "name")) {
                (Some("query"), Some(name)) => parts
                    .query
                    .push((name.to_owned(), format!("{prefix}{secret}"))),
                (Some("header"), Some(name)) => parts
                    .headers
                    .push((name.to_owned(), format!("{prefix}{secret}"))),
                _ => {
                    let prefix = field(auth, "valuePrefix").unwrap_or("api_key ");
                    parts
                        .headers
                        .push(("Authorization".to_owned(), format!("{prefix}{secret}")));
                }
            }
            Ok(())
        }
        "custom" => {
            let secret = secret_bytes(provider, auth, credentials)?;
            let name = field(auth, "name").ok_or_else(|| {
                Error::bad_document(format!("provider '{provider}': custom auth needs a 'name'"))
            })?;
            let prefix = field(auth, "valuePrefix").unwrap_or("");
            match field(auth, "location").unwrap_or("header") {
                "header" => parts
                    .headers
                    .push((name.to_owned(), format!("{prefix}{secret}"))),
                "query" => parts
                    .query
                    .push((name.to_owned(), format!("{prefix}{secret}"))),
                other => {
                    return Err(Error::bad_document(format!(
                        "provider '{provider}': custom auth location '{other}' is not header or query"
                    )));
                }
            }
            Ok(())
        }
        other => Err(Error::new(
            ErrorKind::Credentials,
            format!("auth type '{other}' of provider '{provider}' is not supported yet"),
        )),
    }
}

/// The credential material, as StackQL's `GetCredentialsBytes` finds it: `credentialsenvvar`
/// (used as is), else `username_var`+`password_var` or `api_key_var`+`api_secret_var`
/// (base64 of `a:b`).
fn secret_bytes(
    provider: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> Result<String> {
    secret_material(auth, credentials).map_err(|cause| credential_error(provider, &cause))
}

/// [`secret_bytes`] with the cause alone as the error (for the credential report).
fn secret_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<String, String> {
    let read = |var: &str| -> std::result::Result<String, String> {
        credentials
            .get(var)
            .ok_or_else(|| format!("variable {var} is not set"))
    };
    if let Some(var) = field(auth, "credentialsenvvar") {
        return read(var);
    }
    for (user_key, pass_key) in [
        ("username_var", "password_var"),
        ("api_key_var", "api_secret_var"),
    ] {
        if let (Some(user), Some(pass)) = (field(auth, user_key), field(auth, pass_key)) {
            let joined = format!("{}:{}", read(user)?, read(pass)?);
            return Ok(base64::engine::general_purpose::STANDARD.encode(joined));
        }
    }
    Err("the provider's auth config names no credential variable".to_owned())
}

/// Checks, without any network call, that the material every auth of the chain needs is
/// present. `Ok(true)`: checked and present; `Ok(false)`: nothing to check (e.g.
/// `null_auth`); `Err(cause)`: missing or unusable, with a cause that names variables,
/// never values.
pub(crate) fn check_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<bool, String> {
    let mut checked = false;
    let mut current = Some(auth);
    let mut depth = 0;
    while let Some(auth) = current.filter(|a| a.is_object() && depth < 8) {
        depth += 1;
        match field(auth, "type").unwrap_or("null_auth") {
            "basic" | "bearer" | "api_key" | "custom" => {
                secret_material(auth, credentials)?;
                checked = true;
            }
            _ => {}
        }
        current = auth.get("successor");
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::credentials::CredentialStore;
    use serde_json::json;

    fn creds() -> CredentialStore {
        CredentialStore::fixed([
            ("TOKEN".to_owned(), "s3cr3t".to_owned()),
            ("U".to_owned(), "user".to_owned()),
            ("P".to_owned(), "pass".to_owned()),
        ])
    }

    #[test]
    fn each_type_puts_the_secret_where_it_belongs() {
        let basic = resolve(
            "p",
            &json!({"type": "basic", "credentialsenvvar": "TOKEN"}),
            &creds(),
        )
        .unwrap();
        assert_eq!(
            basic.headers,
            vec![("Authorization".to_owned(), "Basic s3cr3t".to_owned())]
        );
        let pair = resolve(
            "p",
            &json!({"type": "basic", "username_var": "U", "password_var": "P"}),
            &creds(),
        )
        .unwrap();
        assert_eq!(pair.headers[0].1, "Basic dXNlcjpwYXNz");
        let bearer = resolve(
            "p",
            &json!({"type": "bearer", "credentialsenvvar": "TOKEN"}),
            &creds(),
        )
        .unwrap();
        assert_eq!(bearer.headers[0].1, "Bearer s3cr3t");
        let custom = resolve(
            "p",
            &json!({"type": "custom", "location": "query", "name": "key", "credentialsenvvar": "TOKEN",
                    "successor": {"type": "custom", "location": "header", "name": "X-U", "credentialsenvvar": "U"}}),
            &creds(),
        )
        .unwrap();
        assert_eq!(custom.query, vec![("key".to_owned(), "s3cr3t".to_owned())]);
        assert_eq!(custom.headers, vec![("X-U".to_owned(), "user".to_owned())]);
        let none = resolve("p", &json!({"type": "null_auth"}), &creds()).unwrap();
        assert!(none.headers.is_empty() && none.query.is_empty());
    }

    #[test]
    fn missing_variable_names_the_variable_not_a_value() {
        let err = resolve(
            "gh",
            &json!({"type": "basic", "credentialsenvvar": "NOPE"}),
            &creds(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Credentials);
        assert!(err.message().starts_with(
            "credential resolution failed for provider 'gh' (variable NOPE is not set)"
        ));
    }
}
