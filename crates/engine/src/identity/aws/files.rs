//! The shared credentials and config files (`~/.aws/credentials`, `~/.aws/config`) and
//! their profiles: static keys, `role_arn` with `source_profile`, `role_arn` with
//! `web_identity_token_file`.

use std::collections::HashMap;
use std::time::Duration;

use super::{Attempt, AwsCredentials, UNSET, sts};
use crate::credentials::{CredentialSource, CredentialStore};
use crate::error::Result;
use crate::identity::credential_error;
use crate::upstream::Upstream;

/// How many `source_profile` links are followed.
const MAX_CHAIN: usize = 4;

/// The largest file read.
const MAX_FILE: u64 = 1 << 20;

/// Profiles by name: their properties (keys lower-case).
type Profiles = HashMap<String, HashMap<String, String>>;

/// The profile asked for and the files, as the variables name them.
struct Selection {
    profile: String,
    /// Whether `AWS_PROFILE` named it (then a missing profile is an error).
    explicit: bool,
    profiles: Profiles,
}

/// Reads the files: the config file's `[profile x]` / `[default]` sections, then the
/// credentials file's `[x]` sections over them (its keys win, as in the SDKs). A file
/// that does not exist counts as empty; one that cannot be read is an error naming its
/// variable.
fn select(credentials: &dyn CredentialSource) -> std::result::Result<Selection, String> {
    let home = credentials.get("HOME");
    let path = |var: &'static str, default: &str| {
        credentials.get(var).map(|p| (p, var)).or_else(|| {
            home.as_ref()
                .map(|h| (format!("{h}/.aws/{default}"), "HOME"))
        })
    };
    let mut profiles = Profiles::new();
    if let Some((file, var)) = path("AWS_CONFIG_FILE", "config") {
        for (section, values) in parse(&read(&file, var)?) {
            let name = match section.strip_prefix("profile ") {
                Some(name) => name.trim().to_owned(),
                None if section == "default" => section,
                // `[sso-session x]`, `[services x]` and bare names are not profiles here.
                None => continue,
            };
            profiles.entry(name).or_default().extend(values);
        }
    }
    if let Some((file, var)) = path("AWS_SHARED_CREDENTIALS_FILE", "credentials") {
        for (section, values) in parse(&read(&file, var)?) {
            profiles.entry(section).or_default().extend(values);
        }
    }
    let (profile, explicit) = match credentials.get("AWS_PROFILE") {
        Some(name) => (name, true),
        None => ("default".to_owned(), false),
    };
    Ok(Selection {
        profile,
        explicit,
        profiles,
    })
}

fn read(path: &str, var: &str) -> std::result::Result<String, String> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
        Err(err) => {
            return Err(format!(
                "the file named by {var} cannot be read: {}",
                err.kind()
            ));
        }
    };
    let mut text = String::new();
    file.take(MAX_FILE)
        .read_to_string(&mut text)
        .map_err(|err| format!("the file named by {var} cannot be read: {}", err.kind()))?;
    Ok(text)
}

/// INI as the SDKs read it: `[section]`, `key = value`, `#`/`;` comment lines; indented
/// lines (sub-properties) are skipped.
fn parse(text: &str) -> Vec<(String, HashMap<String, String>)> {
    let mut sections: Vec<(String, HashMap<String, String>)> = Vec::new();
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.trim().to_owned(), HashMap::new()));
            continue;
        }
        if let (Some((key, value)), Some((_, values))) = (line.split_once('='), sections.last_mut())
        {
            let value = value.trim();
            if !value.is_empty() {
                values.insert(key.trim().to_ascii_lowercase(), value.to_owned());
            }
        }
    }
    sections
}

/// What a profile resolves to, before any network call.
enum Plan {
    Static(AwsCredentials),
    /// `role_arn` assumed from the plan of `source_profile`.
    Role {
        base: Box<Plan>,
        role_arn: String,
        external_id: Option<String>,
        duration: Duration,
        session_name: Option<String>,
    },
    /// `role_arn` with `web_identity_token_file`.
    WebIdentity {
        file: String,
        role_arn: String,
        session_name: Option<String>,
    },
}

/// The plan of `name`, or `None` when the profile has no credentials at all.
fn plan(
    profiles: &Profiles,
    name: &str,
    depth: usize,
) -> std::result::Result<Option<Plan>, String> {
    let Some(profile) = profiles.get(name) else {
        return Ok(None);
    };
    let get = |key: &str| profile.get(key).cloned();
    if let Some(role_arn) = get("role_arn") {
        let session_name = get("role_session_name");
        if let Some(file) = get("web_identity_token_file") {
            return Ok(Some(Plan::WebIdentity {
                file,
                role_arn,
                session_name,
            }));
        }
        if get("credential_source").is_some() {
            return Err(format!(
                "profile '{name}': credential_source is not supported (use source_profile, or the chain's own sources)"
            ));
        }
        let Some(source) = get("source_profile") else {
            return Err(format!(
                "profile '{name}' has role_arn without source_profile or web_identity_token_file"
            ));
        };
        if depth >= MAX_CHAIN {
            return Err(format!(
                "profile '{name}': source_profile chains longer than {MAX_CHAIN}"
            ));
        }
        // A profile that is its own source uses its static keys as the base.
        let base = if source == name {
            static_keys(name, profile)?
        } else {
            plan(profiles, &source, depth + 1)?
        };
        let Some(base) = base else {
            return Err(format!(
                "profile '{name}': source_profile '{source}' has no credentials"
            ));
        };
        let duration = match get("duration_seconds") {
            Some(text) => text
                .parse()
                .ok()
                .filter(|s| (900..=43_200).contains(s))
                .map(Duration::from_secs)
                .ok_or_else(|| format!("profile '{name}': duration_seconds is not 900 to 43200"))?,
            None => Duration::from_secs(3600),
        };
        return Ok(Some(Plan::Role {
            base: Box::new(base),
            role_arn,
            external_id: get("external_id"),
            duration,
            session_name,
        }));
    }
    if let Some(found) = static_keys(name, profile)? {
        return Ok(Some(found));
    }
    for unsupported in ["sso_start_url", "sso_session", "credential_process"] {
        if profile.contains_key(unsupported) {
            return Err(format!(
                "profile '{name}': {unsupported} is not supported (static keys, role_arn with source_profile or web_identity_token_file are)"
            ));
        }
    }
    Ok(None)
}

fn static_keys(
    name: &str,
    profile: &HashMap<String, String>,
) -> std::result::Result<Option<Plan>, String> {
    match (
        profile.get("aws_access_key_id"),
        profile.get("aws_secret_access_key"),
    ) {
        (Some(key_id), Some(secret)) => Ok(Some(Plan::Static(
            AwsCredentials {
                key_id: key_id.clone(),
                secret: secret.clone(),
                session_token: profile.get("aws_session_token").cloned(),
            }
            .checked(&format!("profile '{name}'"))?,
        ))),
        (Some(_), None) => Err(format!(
            "profile '{name}' has aws_access_key_id without aws_secret_access_key"
        )),
        (None, Some(_)) => Err(format!(
            "profile '{name}' has aws_secret_access_key without aws_access_key_id"
        )),
        (None, None) => Ok(None),
    }
}

/// The selected profile's plan; "not configured" when there is none to use.
fn selected_plan(credentials: &dyn CredentialSource) -> std::result::Result<Plan, String> {
    let selection = select(credentials)?;
    match plan(&selection.profiles, &selection.profile, 0)? {
        Some(plan) => Ok(plan),
        None if selection.explicit => Err(format!(
            "variable AWS_PROFILE names profile '{}', which the files do not have with credentials",
            selection.profile
        )),
        None => Err(format!(
            "{UNSET} (no profile '{}' with credentials in the shared files)",
            selection.profile
        )),
    }
}

/// The profile source.
pub(super) async fn profile(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
) -> Result<Attempt> {
    let plan = match selected_plan(store) {
        Ok(plan) => plan,
        Err(why) if why.starts_with(UNSET) => return Ok(Attempt::Unavailable(why)),
        Err(why) => return Err(credential_error(provider, &why)),
    };
    Ok(Attempt::Found(run(upstream, provider, store, plan).await?))
}

async fn run(
    upstream: &Upstream,
    provider: &str,
    store: &CredentialStore,
    plan: Plan,
) -> Result<AwsCredentials> {
    // Iterative over the chain: the innermost base first, each role assumed from it.
    let mut roles = Vec::new();
    let mut current = plan;
    let base = loop {
        match current {
            Plan::Static(found) => break found,
            Plan::WebIdentity {
                file,
                role_arn,
                session_name,
            } => {
                let endpoint =
                    sts::Endpoint::of(store).map_err(|c| credential_error(provider, &c))?;
                break sts::web_identity(
                    upstream,
                    provider,
                    store,
                    &endpoint,
                    &file,
                    "the profile's web_identity_token_file",
                    &role_arn,
                    session_name,
                )
                .await?;
            }
            Plan::Role {
                base,
                role_arn,
                external_id,
                duration,
                session_name,
            } => {
                roles.push((role_arn, external_id, duration, session_name));
                current = *base;
            }
        }
    };
    let mut found = base;
    while let Some((role_arn, external_id, duration, session_name)) = roles.pop() {
        found = sts::profile_role(
            upstream,
            provider,
            store,
            &found,
            role_arn,
            external_id,
            duration,
            session_name,
        )
        .await?;
    }
    Ok(found)
}

/// The profile source without a network call.
pub(super) fn check(credentials: &dyn CredentialSource) -> std::result::Result<bool, String> {
    selected_plan(credentials).map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(pairs: &[(&str, &str)]) -> CredentialStore {
        CredentialStore::fixed(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        )
    }

    #[test]
    fn files_give_profiles_the_credentials_file_winning() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        let creds = dir.path().join("credentials");
        std::fs::write(
            &config,
            "# comment\n[default]\nregion = eu-west-1\n[profile dev]\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = from-config\n[profile admin]\nrole_arn = arn:aws:iam::1:role/admin\nsource_profile = dev\nexternal_id = ext\n[sso-session x]\nsso_region = us-east-1\n[profile sso]\nsso_session = x\n",
        )
        .unwrap();
        std::fs::write(
            &creds,
            "[dev]\naws_access_key_id=AKIDCREDS\naws_secret_access_key=from-creds\n  nested = skipped\n",
        )
        .unwrap();
        let vars = |profile: &str| {
            store(&[
                ("AWS_CONFIG_FILE", config.to_str().unwrap()),
                ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
                ("AWS_PROFILE", profile),
            ])
        };
        match selected_plan(&vars("dev")) {
            Ok(Plan::Static(found)) => {
                assert_eq!(found.key_id, "AKIDCREDS");
                assert_eq!(found.secret, "from-creds");
            }
            _ => panic!("dev is static"),
        }
        match selected_plan(&vars("admin")) {
            Ok(Plan::Role {
                base, external_id, ..
            }) => {
                assert!(matches!(*base, Plan::Static(_)));
                assert_eq!(external_id.as_deref(), Some("ext"));
            }
            _ => panic!("admin is a role"),
        }
        let err = selected_plan(&vars("nope")).err().unwrap();
        assert!(err.contains("AWS_PROFILE names profile 'nope'"), "{err}");
        let err = selected_plan(&vars("sso")).err().unwrap();
        assert!(err.contains("sso_session is not supported"), "{err}");
        // `default` has no credentials: not configured, so the chain goes on.
        let default = store(&[("AWS_CONFIG_FILE", config.to_str().unwrap())]);
        assert!(selected_plan(&default).err().unwrap().starts_with(UNSET));
        // No files and no HOME: not configured.
        assert!(selected_plan(&store(&[])).err().unwrap().starts_with(UNSET));
    }
}
