//! The remote registry: lists the providers a registry in StackQL's layout publishes
//! (`<url>/dist/providers.yaml`) and pulls one (`<url>/dist/<folder>/<version>.tgz`) into the
//! local registry root. Everything received is untrusted: downloads are size-capped and
//! time-limited, archives are checked entry by entry (see `archive`), every document's
//! signature is verified with StackQL's scheme (see `signature`, `trust`, `verify`), and a
//! package becomes visible only once it is unpacked, verified and validated (see `install`).

mod archive;
mod index;
mod install;
mod record;
mod signature;
mod signing_policy;
mod trust;
mod verify;

use std::path::PathBuf;
use std::sync::Arc;

use bytes::BytesMut;
use serde::Serialize;
use tokio::sync::Mutex;
use url::Url;

use self::index::Index;
use self::record::Checked;
use self::signing_policy::{SignaturePolicy, VERIFY_OFF_WARNING};
use self::trust::TrustedCertificates;
use super::error::{Error, ErrorKind, Result};
use super::registry::{LocalRegistry, is_safe_name};
use super::sql::RegistryCommand;
use super::types::{Cell, ExecContext, QueryOutput};

#[cfg(any(test, feature = "test-support"))]
pub use self::{signature::sign_document, verify::verify_folder};

/// StackQL's public registry (its default): `…/providers/dist/providers.yaml` is the index.
pub const DEFAULT_REGISTRY_URL: &str = "https://registry.stackql.app/providers";

/// Largest index (`providers.yaml`) accepted; the public one is a few kilobytes.
const MAX_INDEX_BYTES: u64 = 4 * 1024 * 1024;

/// Where providers are pulled from, and the bounds a download must stay within.
#[derive(Debug, Clone)]
pub struct RemoteRegistryConfig {
    /// The registry's base URL, under which `dist/providers.yaml` and
    /// `dist/<provider>/<version>.tgz` live; `None` disables listing and pulling.
    pub url: Option<String>,
    /// Largest package download (compressed) accepted.
    pub max_download_bytes: u64,
    /// Largest total size a package may decompress to.
    pub max_unpacked_bytes: u64,
    /// Largest single file in a package.
    pub max_entry_bytes: u64,
    /// Most entries (files and folders) in a package.
    pub max_entries: usize,
    /// The provider lock a pull checks a package against and records it in
    /// ([`crate::lock`]). Set, it is authoritative: a package that differs from a version it
    /// holds is refused. `None`: the registry keeps its own, `<root>/providers.lock`, in
    /// which a pull records what it installs (a re-pull of a version replaces its entry).
    pub lock_file: Option<PathBuf>,
    /// Whether every document of a pulled package is verified against its `.sig` file with
    /// StackQL's scheme before the package is installed (`registry.verify`). `false` installs
    /// packages unverified: for local development only.
    pub verify: bool,
    /// PEM files of signing certificates trusted besides StackQL's own
    /// (`registry.trusted_certificates`), for private registries.
    pub trusted_certificates: Vec<PathBuf>,
}

impl Default for RemoteRegistryConfig {
    fn default() -> Self {
        RemoteRegistryConfig {
            url: Some(DEFAULT_REGISTRY_URL.to_owned()),
            max_download_bytes: 64 * 1024 * 1024,
            max_unpacked_bytes: 1024 * 1024 * 1024,
            max_entry_bytes: 64 * 1024 * 1024,
            max_entries: 20_000,
            lock_file: None,
            verify: true,
            trusted_certificates: Vec::new(),
        }
    }
}

/// A provider the remote registry publishes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegistryProvider {
    /// The provider's name in the registry index (also its SQL name, e.g. `google`).
    pub name: String,
    /// Published versions, oldest first. Some may have no package to download.
    pub versions: Vec<String>,
}

/// A newer version a pull passed over, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SkippedVersion {
    /// The version.
    pub version: String,
    /// Why it was not installed.
    pub reason: String,
}

/// What a pull installed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PullOutcome {
    /// The provider's name (as in the registry index and SQL).
    pub provider: String,
    /// The version installed.
    pub version: String,
    /// `<provider> provider, version '<v>' successfully installed`, plus a note per newer
    /// version that was skipped.
    pub message: String,
    /// Newer versions passed over when no version was asked for.
    pub skipped: Vec<SkippedVersion>,
    /// How many documents of the package had their signatures verified; `None` when
    /// `registry.verify` is false.
    pub verified_documents: Option<usize>,
}

/// The remote registry client: the engine's HTTP client, the local root it installs into,
/// and a lock that makes pulls one at a time.
#[derive(Debug)]
pub(crate) struct Remote {
    config: RemoteRegistryConfig,
    /// The certificates documents are verified against; `None` when `registry.verify` is
    /// false.
    trust: Option<Arc<TrustedCertificates>>,
    client: reqwest::Client,
    root: PathBuf,
    pulls: Mutex<()>,
}

/// A download's result: the body, or the registry's 404.
enum Fetched {
    Body(Vec<u8>),
    NotFound,
}

fn registry_error(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Registry, message)
}

impl Remote {
    /// A client for `config.url` installing into `root` (the local registry root). Fails
    /// when a file of `config.trusted_certificates` cannot be read or holds a certificate
    /// that cannot verify documents.
    pub(crate) fn new(
        config: RemoteRegistryConfig,
        client: reqwest::Client,
        root: PathBuf,
    ) -> Result<Self> {
        let trust = signing_policy::trust_of(&config)?;
        Ok(Remote {
            config,
            trust,
            client,
            root,
            pulls: Mutex::new(()),
        })
    }

    /// Providers in the index, or one provider's entry.
    pub(crate) async fn list(&self, provider: Option<&str>) -> Result<Vec<RegistryProvider>> {
        let provider = provider.map(str::trim).filter(|p| !p.is_empty());
        if let Some(p) = provider
            && !is_safe_name(p)
        {
            return Err(registry_error("forbidden characters in provider"));
        }
        let index = self.index("registry list").await?;
        match provider {
            None => Ok(index
                .all()
                .map(|(name, versions)| RegistryProvider {
                    name: name.to_owned(),
                    versions: versions.to_vec(),
                })
                .collect()),
            Some(p) => {
                let (name, versions) = index.find(p).ok_or_else(|| not_published(p))?;
                Ok(vec![RegistryProvider {
                    name: name.to_owned(),
                    versions: versions.to_vec(),
                }])
            }
        }
    }

    /// Downloads and installs `provider` at `version`, or at the newest usable version.
    /// `registry` forgets what it resolved and cached of the installed folder afterwards.
    pub(crate) async fn pull(
        &self,
        provider: &str,
        version: Option<&str>,
        registry: &LocalRegistry,
    ) -> Result<PullOutcome> {
        let provider = provider.trim();
        if provider.is_empty() {
            return Err(registry_error("provider not specified"));
        }
        let version = version.map(str::trim).filter(|v| !v.is_empty());
        if !is_safe_name(provider) || version.is_some_and(|v| !is_safe_name(v)) {
            return Err(registry_error(
                "forbidden characters in provider or version",
            ));
        }
        let base = self.base_url("registry pull")?;
        let index = self.index("registry pull").await?;
        let (name, published) = index
            .find(provider)
            .ok_or_else(|| not_published(provider))?;
        let name = name.to_owned();
        let folder = index::package_folder(&name).to_owned();
        let candidates: Vec<String> = match version {
            Some(v) if published.iter().any(|p| p == v) => vec![v.to_owned()],
            Some(v) => {
                return Err(registry_error(format!(
                    "provider '{name}' has no version '{v}' in the registry (published: {})",
                    published.join(", ")
                )));
            }
            None => index::newest_first(published)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        };
        let _one_at_a_time = self.pulls.lock().await;
        let mut skipped = Vec::new();
        for candidate in candidates {
            let url = join(&base, &format!("dist/{folder}/{candidate}.tgz"))?;
            let tgz = match self.get(&url, self.config.max_download_bytes).await? {
                Fetched::Body(body) => body,
                Fetched::NotFound if version.is_some() => {
                    return Err(registry_error(format!(
                        "provider '{name}' version '{candidate}' is listed by the registry but has no package (GET {} returned 404)",
                        shown_url(&url)
                    )));
                }
                Fetched::NotFound => {
                    skipped.push(SkippedVersion {
                        version: candidate,
                        reason: "the registry has no package for it".to_owned(),
                    });
                    continue;
                }
            };
            let installed = self
                .install(&name, &folder, &candidate, tgz, version.is_some(), &url)
                .await?;
            match installed {
                Installed::Done(checked) => {
                    registry.forget(&format!("{folder}/{candidate}/"));
                    let verified_documents = match &checked {
                        Checked::Verified(found) => Some(found.documents),
                        Checked::Skipped => None,
                    };
                    let message = outcome_message(&name, &candidate, &skipped, verified_documents);
                    tracing::info!(provider = %name, version = %candidate, verified_documents, "provider installed");
                    return Ok(PullOutcome {
                        provider: name,
                        version: candidate,
                        message,
                        skipped,
                        verified_documents,
                    });
                }
                Installed::Unusable(reason) => skipped.push(SkippedVersion {
                    version: candidate,
                    reason,
                }),
            }
        }
        let reasons: Vec<String> = skipped
            .iter()
            .map(|s| format!("'{}': {}", s.version, s.reason))
            .collect();
        Err(registry_error(format!(
            "no usable version of provider '{name}' in the registry ({})",
            if reasons.is_empty() {
                "none published".to_owned()
            } else {
                reasons.join("; ")
            }
        )))
    }

    /// Unpacks, verifies, checks and moves one package (fetched from `url`) into place (on
    /// a blocking thread).
    async fn install(
        &self,
        name: &str,
        folder: &str,
        version: &str,
        tgz: Vec<u8>,
        asked: bool,
        url: &Url,
    ) -> Result<Installed> {
        let limits = archive::Limits {
            max_unpacked_bytes: self.config.max_unpacked_bytes,
            max_entry_bytes: self.config.max_entry_bytes,
            max_entries: self.config.max_entries,
        };
        let root = self.root.clone();
        let dest = root.join("src").join(folder).join(version);
        let enforce = self.config.lock_file.is_some();
        let lock_file = self
            .config
            .lock_file
            .clone()
            .unwrap_or_else(|| root.join(crate::lock::LOCK_FILE_NAME));
        let (name, folder, version) = (name.to_owned(), folder.to_owned(), version.to_owned());
        let trust = self.trust.clone();
        let package = shown_url(url);
        if trust.is_none() {
            tracing::warn!(provider = %name, version = %version, "{VERIFY_OFF_WARNING}");
        }
        tokio::task::spawn_blocking(move || {
            let signatures = SignaturePolicy::now(trust.as_deref());
            let staged = install::stage(&root, &name, &version, &tgz, limits, signatures)?;
            if let Some(reason) = staged.unusable_reason() {
                if asked {
                    return Err(registry_error(format!(
                        "refusing provider '{name}' version '{version}': {reason}"
                    )));
                }
                return Ok(Installed::Unusable(reason));
            }
            tracing::debug!(
                files = staged.unpacked.files,
                bytes = staged.unpacked.bytes,
                signatures = staged.unpacked.signatures,
                "package unpacked"
            );
            install::lock(&root, &lock_file, enforce, &folder, &version, &staged)?;
            let checked = staged.checked.clone();
            let record = record::record(&name, &version, &package, &checked, trust.as_deref());
            staged.commit(&dest, &record)?;
            Ok(Installed::Done(checked))
        })
        .await
        .map_err(|err| Error::internal(format!("registry install task failed: {err}")))?
    }

    /// Downloads and parses the index.
    async fn index(&self, operation: &str) -> Result<Index> {
        let base = self.base_url(operation)?;
        let url = join(&base, "dist/providers.yaml")?;
        match self.get(&url, MAX_INDEX_BYTES).await? {
            Fetched::Body(body) => Index::parse(&body),
            Fetched::NotFound => Err(registry_error(format!(
                "the remote registry has no provider index (GET {} returned 404); check registry.url",
                shown_url(&url)
            ))),
        }
    }

    /// The configured registry URL, which must be http(s).
    fn base_url(&self, operation: &str) -> Result<Url> {
        let Some(raw) = self.config.url.as_deref().filter(|u| !u.trim().is_empty()) else {
            return Err(registry_error(format!(
                "'{operation}' needs a remote registry, and none is configured: set registry.url (StackQL's is {DEFAULT_REGISTRY_URL})"
            )));
        };
        let mut url = Url::parse(raw.trim())
            .map_err(|err| registry_error(format!("registry.url '{raw}' is not a URL: {err}")))?;
        match url.scheme() {
            "http" | "https" => {}
            "file" => {
                return Err(registry_error(format!(
                    "'{operation}' is meaningless in local mode: registry.url '{raw}' is a local folder; point it at an http(s) registry such as {DEFAULT_REGISTRY_URL}"
                )));
            }
            other => {
                return Err(registry_error(format!(
                    "registry.url '{raw}' uses '{other}': only http and https registries are supported"
                )));
            }
        }
        if !url.path().ends_with('/') {
            let path = format!("{}/", url.path());
            url.set_path(&path);
        }
        url.set_query(None);
        url.set_fragment(None);
        Ok(url)
    }

    /// GETs `url`, reading at most `limit` bytes of body. 404 is `NotFound`; other
    /// non-success statuses (redirects included: they are not followed) are errors.
    async fn get(&self, url: &Url, limit: u64) -> Result<Fetched> {
        let shown = shown_url(url);
        let failed = |err: reqwest::Error| {
            let what = if err.is_timeout() {
                "timed out"
            } else {
                "failed"
            };
            // The whole cause chain: "error sending request" alone does not say that the
            // connection was refused or the name did not resolve.
            registry_error(format!(
                "registry request GET {shown} {what}: {}; without network access, serve a registry mirror and point registry.url at it",
                crate::upstream::error_chain(&err.without_url())
            ))
        };
        let mut response = self.client.get(url.clone()).send().await.map_err(failed)?;
        let status = response.status().as_u16();
        if status == 404 {
            return Ok(Fetched::NotFound);
        }
        if (300..400).contains(&status) {
            let location: String = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .chars()
                .take(200)
                .collect();
            return Err(registry_error(format!(
                "registry request GET {shown} returned {status} (redirect to '{location}'): redirects are not followed; set registry.url to the registry's final address"
            )));
        }
        if !(200..300).contains(&status) {
            return Err(registry_error(format!(
                "registry request GET {shown} returned {status}"
            )));
        }
        let too_large = || {
            registry_error(format!(
                "registry download GET {shown} is larger than {limit} bytes"
            ))
        };
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(too_large());
        }
        let mut body = BytesMut::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Fetched::Body(body.to_vec()))
    }
}

/// The rows of `REGISTRY LIST`: `provider, versions` (comma-separated), or for one
/// provider (`one`) a `provider, version` row per version.
pub(crate) fn list_output(listed: Vec<RegistryProvider>, one: bool) -> QueryOutput {
    let (columns, rows): ([&str; 2], Vec<Vec<Cell>>) = if one {
        (
            ["provider", "version"],
            listed
                .into_iter()
                .flat_map(|p| {
                    let name = p.name;
                    p.versions
                        .into_iter()
                        .map(move |v| vec![Cell::Text(name.clone()), Cell::Text(v)])
                })
                .collect(),
        )
    } else {
        (
            ["provider", "versions"],
            listed
                .into_iter()
                .map(|p| vec![Cell::Text(p.name), Cell::Text(p.versions.join(", "))])
                .collect(),
        )
    };
    QueryOutput {
        columns: columns.map(str::to_owned).to_vec(),
        rows,
        ..Default::default()
    }
}

/// Runs a `REGISTRY` statement for the tenant of `cx`: `LIST` gives `provider, versions` rows
/// (or `provider, version` rows for one provider); `PULL` gives one `message` row and is
/// refused for a provider the tenant may not use.
pub(crate) async fn statement(
    remote: &Remote,
    registry: &LocalRegistry,
    cx: &ExecContext,
    command: RegistryCommand,
) -> Result<QueryOutput> {
    match command {
        RegistryCommand::List { provider } => {
            let provider = provider.filter(|p| !p.trim().is_empty());
            let listed = remote.list(provider.as_deref()).await?;
            Ok(list_output(listed, provider.is_some()))
        }
        RegistryCommand::Pull { provider, version } => {
            check_pull_allowed(cx, &provider)?;
            let outcome = remote.pull(&provider, version.as_deref(), registry).await?;
            Ok(QueryOutput {
                messages: vec![outcome.message],
                timestamp: Some(
                    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
                ),
                ..Default::default()
            })
        }
    }
}

/// Refuses a pull of a provider the tenant may not use (checked by its index name, so
/// `googleapis.com` counts as `google`).
pub(crate) fn check_pull_allowed(cx: &ExecContext, provider: &str) -> Result<()> {
    let name = index::index_name(provider.trim());
    if !name.is_empty() && !cx.allows(name) {
        return Err(Error::new(
            ErrorKind::ProviderNotAllowed,
            format!(
                "provider '{name}' is not allowed for tenant '{}'",
                cx.tenant
            ),
        ));
    }
    Ok(())
}

/// Whether a staged package was installed (and how its signatures were checked) or passed
/// over.
enum Installed {
    Done(Checked),
    Unusable(String),
}

fn not_published(provider: &str) -> Error {
    registry_error(format!(
        "provider '{provider}' is not in the remote registry; REGISTRY LIST shows what is"
    ))
}

fn join(base: &Url, rel: &str) -> Result<Url> {
    base.join(rel)
        .map_err(|err| Error::internal(format!("cannot build registry URL for '{rel}': {err}")))
}

/// The URL without credentials or query, for messages.
fn shown_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.to_string()
}

fn outcome_message(
    name: &str,
    version: &str,
    skipped: &[SkippedVersion],
    verified_documents: Option<usize>,
) -> String {
    let mut message = format!("{name} provider, version '{version}' successfully installed");
    if verified_documents.is_none() {
        message.push_str(" without verifying its signatures (registry.verify is false)");
    }
    for skip in skipped {
        message.push_str(&format!(
            "; skipped newer version '{}': {}",
            skip.version, skip.reason
        ));
    }
    message
}
