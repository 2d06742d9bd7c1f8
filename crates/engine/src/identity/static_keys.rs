//! Auth types whose material goes on the request as it is: `basic`, `bearer`, `api_key`
//! and `custom`.

use base64::Engine as _;
use serde_json::Value;

use super::{AuthParts, credential_error, field};
use crate::credentials::CredentialSource;
use crate::error::{Error, Result};

/// Adds one static-key auth object's header or query parameter to `parts`.
pub(super) fn apply(
    provider: &str,
    kind: &str,
    auth: &Value,
    credentials: &dyn CredentialSource,
    parts: &mut AuthParts,
) -> Result<()> {
    let secret =
        secret_material(auth, credentials).map_err(|cause| credential_error(provider, &cause))?;
    match kind {
        "basic" => {
            let prefix = field(auth, "valuePrefix").unwrap_or("Basic ");
            parts
                .headers
                .push(("Authorization".to_owned(), format!("{prefix}{secret}")));
        }
        "bearer" => parts
            .headers
            .push(("Authorization".to_owned(), format!("Bearer {secret}"))),
        "api_key" => {
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
        }
        _ => {
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
        }
    }
    Ok(())
}

/// The credential material, as StackQL's `GetCredentialsBytes` finds it: `credentialsenvvar`
/// (used as is), else `username_var`+`password_var` or `api_key_var`+`api_secret_var`
/// (base64 of `a:b`). The error is the cause alone, naming variables, never values.
pub(super) fn secret_material(
    auth: &Value,
    credentials: &dyn CredentialSource,
) -> std::result::Result<String, String> {
    if let Some(var) = field(auth, "credentialsenvvar") {
        return read_var(credentials, var);
    }
    for (user_key, pass_key) in [
        ("username_var", "password_var"),
        ("api_key_var", "api_secret_var"),
    ] {
        if let (Some(user), Some(pass)) = (field(auth, user_key), field(auth, pass_key)) {
            let joined = format!(
                "{}:{}",
                read_var(credentials, user)?,
                read_var(credentials, pass)?
            );
            return Ok(base64::engine::general_purpose::STANDARD.encode(joined));
        }
    }
    Err("the provider's auth config names no credential variable".to_owned())
}

/// A variable's value, or a cause naming it.
pub(super) fn read_var(
    credentials: &dyn CredentialSource,
    var: &str,
) -> std::result::Result<String, String> {
    credentials
        .get(var)
        .ok_or_else(|| format!("variable {var} is not set"))
}
