//! Config templates in auth fields: `{{ .__env__NAME }}` (StackQL's spelling, e.g. in the
//! `token_url` of the `entra_id` and `databricks_*` documents) is replaced by the value of
//! the credential variable `NAME` of the statement's tenant. Whitespace inside the braces
//! is ignored (YAML folding puts line breaks there). Errors name the variable and the
//! field, never a value; a value is only accepted where it stays one URL component (no
//! `/`, `?`, `#`, `@`, `\`, whitespace or control characters), so a credential file cannot
//! point a token request at another host or path.

use std::borrow::Cow;

use crate::credentials::CredentialSource;

/// The prefix of an environment reference inside `{{ }}`.
const ENV_PREFIX: &str = ".__env__";

/// `text` with every `{{ .__env__NAME }}` expanded from `credentials`; unchanged (borrowed)
/// when it holds no template. `field` names the auth field in errors.
pub(super) fn expand<'a>(
    field: &str,
    text: &'a str,
    credentials: &dyn CredentialSource,
) -> Result<Cow<'a, str>, String> {
    if !text.contains("{{") {
        return Ok(Cow::Borrowed(text));
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or_else(|| format!("{field} has a '{{{{' without a closing '}}}}'"))?;
        let inner = after[..close].trim();
        let name = inner
            .strip_prefix(ENV_PREFIX)
            .filter(|name| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
            .ok_or_else(|| {
                format!(
                    "{field} holds a template other than {{{{ .__env__NAME }}}} (only environment references are expanded in auth fields)"
                )
            })?;
        let value = credentials.get(name).ok_or_else(|| {
            format!("variable {name} (named by {field}'s {{{{ .__env__{name} }}}}) is not set")
        })?;
        if value.chars().any(|c| {
            matches!(c, '/' | '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control()
        }) {
            return Err(format!(
                "variable {name} (named by {field}'s {{{{ .__env__{name} }}}}) holds characters a URL component cannot have (/ ? # @ \\ or whitespace)"
            ));
        }
        out.push_str(&value);
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

/// `text` with each template replaced by `{NAME}`: how errors and logs show a templated
/// URL without the value.
pub(super) fn shown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            rest = after;
            break;
        };
        let inner = after[..close].trim();
        out.push('{');
        out.push_str(inner.strip_prefix(ENV_PREFIX).unwrap_or("template"));
        out.push('}');
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::CredentialStore;

    fn creds() -> CredentialStore {
        CredentialStore::fixed([
            ("AZURE_TENANT_ID".to_owned(), "72f988bf-86f1".to_owned()),
            ("BAD".to_owned(), "evil.example/x#".to_owned()),
        ])
    }

    #[test]
    fn env_references_expand_with_folded_whitespace() {
        let url =
            "https://login.microsoftonline.com/{{ .__env__AZURE_TENANT_ID\n }}/oauth2/v2.0/token";
        assert_eq!(
            expand("token_url", url, &creds()).unwrap(),
            "https://login.microsoftonline.com/72f988bf-86f1/oauth2/v2.0/token"
        );
        assert!(matches!(
            expand("token_url", "https://plain", &creds()).unwrap(),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            shown(url),
            "https://login.microsoftonline.com/{AZURE_TENANT_ID}/oauth2/v2.0/token"
        );
    }

    #[test]
    fn failures_name_the_variable_never_the_value() {
        let err = expand("token_url", "https://h/{{ .__env__NOPE }}/t", &creds()).unwrap_err();
        assert_eq!(
            err,
            "variable NOPE (named by token_url's {{ .__env__NOPE }}) is not set"
        );
        let err = expand("token_url", "https://h/{{ .__env__BAD }}/t", &creds()).unwrap_err();
        assert!(
            err.contains("variable BAD") && !err.contains("evil"),
            "{err}"
        );
        assert!(
            expand("token_url", "https://h/{{ .other }}", &creds())
                .unwrap_err()
                .contains("other than")
        );
        assert!(expand("token_url", "https://h/{{ .__env__X", &creds()).is_err());
    }
}
