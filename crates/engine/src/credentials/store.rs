//! A tenant's credential store: variables from its dotenv file (re-read on reload), then,
//! for the tenant that opts in, the process environment (read only, never written). Also
//! holds auth state derived from those values (cached tokens), dropped on reload.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest as _, Sha256};

use super::dotenv;
use crate::error::{Error, ErrorKind, Result};

/// Reads one credential variable. Implemented by [`CredentialStore`]; the auth code
/// reads through this trait.
pub trait CredentialSource: Send + Sync + std::fmt::Debug {
    /// The value of a credential variable, if set and non-empty.
    fn get(&self, name: &str) -> Option<String>;

    /// Every secret value the source holds or has handed out (to scrub them from upstream
    /// error bodies); none by default.
    fn secret_values(&self) -> Vec<String> {
        Vec::new()
    }

    /// Whether the identity of the host may serve this tenant: Azure managed identity
    /// (IMDS, App Service) and the Azure CLI's login. Only a store that reads the process
    /// environment (the `default` tenant's) says yes; the default is no.
    fn allows_host_identity(&self) -> bool {
        false
    }

    /// Whether the tenant's configuration names an AWS role to assume for some provider
    /// (its base credentials may then be the host's identity).
    fn assumes_aws_roles(&self) -> bool {
        false
    }

    /// Re-reads the source's files if they changed on disk since they were last read,
    /// looking at most once per [`FILE_CHECK_INTERVAL`]; nothing by default.
    fn reread_if_changed(&self) {}
}

/// How often, at most, a tenant's env file is compared (device, inode, size, modification
/// and change times) with the file last read; a changed file is read again on the next use.
pub(crate) const FILE_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// What identifies one version of a file: a file replaced (Kubernetes swaps the `..data`
/// symlink of a Secret mount) has a new inode; one rewritten in place has new times.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of the file `path` leads to (symlinks followed).
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The env file as last read.
#[derive(Debug, Default)]
struct Watch {
    /// No look before this.
    next_check: Option<Instant>,
    /// The file's stamp when last read (`None`: it could not be read).
    stamp: Option<FileStamp>,
    /// SHA-256 of its text when last read.
    digest: [u8; 32],
}

/// What re-sourcing the env file did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SourceOutcome {
    /// The configured file, if any.
    pub env_file: Option<PathBuf>,
    /// Whether the file was read on this call.
    pub sourced: bool,
    /// Names (never values) of the variables the file set, sorted.
    pub names: Vec<String>,
}

/// A token obtained from a token endpoint, kept until shortly before it expires.
/// Holds a secret: no `Debug`.
#[derive(Clone)]
pub(crate) struct CachedToken {
    /// What the auth sends: the `Authorization` header value (`Bearer <token>`).
    pub(crate) value: String,
    /// When it is dropped (shortly before it expires).
    pub(crate) expires_at: Instant,
    /// When the token endpoint said it expires (wall clock, for reports).
    pub(crate) expires: SystemTime,
}

/// Tokens by a key that includes a digest of the material they were obtained with, and
/// one lock per key so that concurrent requests for a missing token fetch it once.
#[derive(Default)]
pub(crate) struct TokenCache {
    tokens: Mutex<HashMap<String, CachedToken>>,
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Per provider, the credential source that last issued a token (e.g.
    /// `azure_default:WorkloadIdentityCredential`): a name, never material.
    sources: Mutex<HashMap<String, String>>,
}

impl TokenCache {
    /// A token still valid at `now`.
    pub(crate) fn get(&self, key: &str, now: Instant) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens
            .get(key)
            .filter(|t| t.expires_at > now)
            .map(|t| t.value.clone())
    }

    /// Keeps a token.
    pub(crate) fn put(&self, key: String, token: CachedToken) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens.retain(|_, t| t.expires_at > Instant::now());
        tokens.insert(key, token);
    }

    /// The lock to hold while fetching the token for `key`: whoever gets it second finds
    /// the token the first one cached. Locks nobody holds are dropped on the way.
    pub(crate) fn flight(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut flights = self.flights.lock().unwrap_or_else(PoisonError::into_inner);
        flights.retain(|_, lock| Arc::strong_count(lock) > 1);
        flights.entry(key.to_owned()).or_default().clone()
    }

    /// Drops every token whose key starts with `prefix` (all with `""`), and the sources
    /// noted for the providers it covers.
    pub(crate) fn clear(&self, prefix: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens.retain(|key, _| !key.starts_with(prefix));
        drop(tokens);
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources.retain(|provider, _| !format!("{provider}/").starts_with(prefix));
    }

    /// Notes which source issued `provider`'s latest token.
    pub(crate) fn note_source(&self, provider: &str, source: &str) {
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources.insert(provider.to_owned(), source.to_owned());
    }

    /// The source noted for `provider` while one of its tokens is still cached at `now`.
    pub(crate) fn source(&self, provider: &str, now: Instant) -> Option<String> {
        self.expiry(provider, now)?;
        let sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        sources.get(provider).cloned()
    }

    /// When the latest-expiring token of `provider` still cached at `now` expires.
    pub(crate) fn expiry(&self, provider: &str, now: Instant) -> Option<SystemTime> {
        let prefix = format!("{provider}/");
        let tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        tokens
            .iter()
            .filter(|(key, t)| key.starts_with(&prefix) && t.expires_at > now)
            .map(|(_, t)| t.expires)
            .max()
    }
}

/// An AWS role a tenant's calls to one provider assume from the base credentials
/// (`tenants[].providers.<name>`: `role_arn`, `external_id`, `duration`).
#[derive(Clone, PartialEq, Eq)]
pub struct AwsRole {
    /// The role's ARN (`arn:aws:iam::123456789012:role/name`).
    pub role_arn: String,
    /// The external id the role's trust policy asks for.
    pub external_id: Option<String>,
    /// How long each session lasts (`DurationSeconds`, 15 min to 12 h).
    pub duration: Duration,
}

impl std::fmt::Debug for AwsRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The external id is a shared secret of sorts: whether it is set, not its value.
        f.debug_struct("AwsRole")
            .field("role_arn", &self.role_arn)
            .field("external_id", &self.external_id.as_ref().map(|_| "set"))
            .field("duration", &self.duration)
            .finish()
    }
}

/// One tenant's credentials. Cheap to share behind an `Arc`.
pub struct CredentialStore {
    env_file: Option<PathBuf>,
    process_env: bool,
    /// Whether the host's identity may serve this tenant (see
    /// [`CredentialSource::allows_host_identity`]).
    host_identity: bool,
    values: RwLock<Arc<HashMap<String, String>>>,
    /// Names whose values came from the process environment (their values are secrets too).
    read_from_process: Mutex<BTreeSet<String>>,
    tokens: TokenCache,
    watch: Mutex<Watch>,
    /// AWS roles the tenant assumes, by provider.
    aws_roles: HashMap<String, AwsRole>,
    /// Token exchanges the tenant's calls use, by provider.
    token_exchanges: HashMap<String, super::TokenExchange>,
}

impl std::fmt::Debug for CredentialStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: values are secrets.
        let values = self.snapshot();
        f.debug_struct("CredentialStore")
            .field("env_file", &self.env_file)
            .field("process_env", &self.process_env)
            .field("names", &values.keys().collect::<BTreeSet<_>>())
            .finish()
    }
}

impl CredentialStore {
    /// A store reading only the process environment.
    pub fn process_env() -> Self {
        Self::build(None, true, HashMap::new())
    }

    /// A store holding exactly these variables (tests, embedding).
    pub fn fixed(values: impl IntoIterator<Item = (String, String)>) -> Self {
        Self::build(None, false, values.into_iter().collect())
    }

    /// An empty store: every credential is unset.
    pub fn empty() -> Self {
        Self::fixed([])
    }

    /// A store over a dotenv file, optionally falling back to the process environment.
    /// An absent file is created empty (commented, mode 0600) and its folders with mode
    /// 0700; then it is read.
    pub fn open(env_file: &Path, process_env: bool) -> Result<Self> {
        dotenv::ensure_exists(env_file).map_err(|err| {
            Error::new(
                ErrorKind::Credentials,
                format!("cannot create env file '{}': {err}", env_file.display()),
            )
        })?;
        let store = Self::build(Some(env_file.to_owned()), process_env, HashMap::new());
        store.source()?;
        Ok(store)
    }

    fn build(
        env_file: Option<PathBuf>,
        process_env: bool,
        values: HashMap<String, String>,
    ) -> Self {
        CredentialStore {
            env_file,
            process_env,
            host_identity: process_env,
            values: RwLock::new(Arc::new(values)),
            read_from_process: Mutex::default(),
            tokens: TokenCache::default(),
            watch: Mutex::default(),
            aws_roles: HashMap::new(),
            token_exchanges: HashMap::new(),
        }
    }

    /// This store with the AWS roles its tenant assumes, by provider name.
    pub fn with_aws_roles(mut self, roles: impl IntoIterator<Item = (String, AwsRole)>) -> Self {
        self.aws_roles = roles.into_iter().collect();
        self
    }

    /// This store with the token exchanges its tenant's calls use, by provider name.
    pub fn with_token_exchanges(
        mut self,
        exchanges: impl IntoIterator<Item = (String, super::TokenExchange)>,
    ) -> Self {
        self.token_exchanges = exchanges.into_iter().collect();
        self
    }

    /// The token exchange the tenant's calls to `provider` use, if one is configured.
    pub(crate) fn token_exchange(&self, provider: &str) -> Option<&super::TokenExchange> {
        self.token_exchanges.get(provider)
    }

    /// The AWS role the tenant assumes for `provider`, if one is configured.
    pub(crate) fn aws_role(&self, provider: &str) -> Option<&AwsRole> {
        self.aws_roles.get(provider)
    }

    /// This store with the host's identity (managed identity, the Azure CLI's login)
    /// allowed or refused for its tenant. By default only a store that reads the process
    /// environment allows it (for tests: the `test-support` feature).
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_host_identity(mut self, allowed: bool) -> Self {
        self.host_identity = allowed;
        self
    }

    /// The configured env file.
    pub fn env_file(&self) -> Option<&Path> {
        self.env_file.as_deref()
    }

    /// Re-reads the env file: its pairs replace same-named values; names absent from the
    /// file keep their values (as StackQL's re-sourcing leaves the environment). A file
    /// that has gone missing is an error naming it. Cached tokens are not touched here.
    pub fn source(&self) -> Result<SourceOutcome> {
        let Some(path) = &self.env_file else {
            return Ok(SourceOutcome::default());
        };
        let stamp = FileStamp::of(path);
        let text = match dotenv::read(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::new(
                    ErrorKind::Credentials,
                    format!(
                        "env file '{}' not found: it is configured but has gone missing; restore it, then call reload_credentials again",
                        path.display()
                    ),
                ));
            }
            Err(err) => {
                return Err(Error::new(
                    ErrorKind::Credentials,
                    format!("failed to source env file '{}': {err}", path.display()),
                ));
            }
        };
        let names = self.apply(&text, stamp);
        Ok(SourceOutcome {
            env_file: Some(path.clone()),
            sourced: true,
            names,
        })
    }

    /// Puts the pairs of `text` in force and notes the file as read; the names it set.
    fn apply(&self, text: &str, stamp: Option<FileStamp>) -> Vec<String> {
        let pairs = dotenv::parse(text);
        let names: BTreeSet<String> = pairs.iter().map(|(k, _)| k.clone()).collect();
        let mut values = self.values.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = HashMap::clone(&values);
        next.extend(pairs);
        *values = Arc::new(next);
        drop(values);
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        watch.stamp = stamp;
        watch.digest = Sha256::digest(text.as_bytes()).into();
        names.into_iter().collect()
    }

    /// When at least [`FILE_CHECK_INTERVAL`] has passed since the last look, and the env
    /// file is not the file last read (its stamp differs), reads it again: when its text
    /// changed, its pairs are put in force as by [`CredentialStore::source`] and the cached
    /// tokens are dropped (they were obtained with the previous values). A file that cannot
    /// be read keeps the values in force and is logged (path and reason, never a value).
    /// Returns whether values changed.
    pub(crate) fn reread_env_file_if_changed(&self) -> bool {
        let Some(path) = &self.env_file else {
            return false;
        };
        let now = Instant::now();
        let stamp = {
            let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
            if watch.next_check.is_some_and(|at| now < at) {
                return false;
            }
            watch.next_check = Some(now + FILE_CHECK_INTERVAL);
            let stamp = FileStamp::of(path);
            if stamp == watch.stamp {
                return false;
            }
            // Noted now, so a file that cannot be read is reported once per change.
            watch.stamp = stamp;
            stamp
        };
        let text = match dotenv::read(path) {
            Ok(text) => text,
            Err(err) => {
                tracing::warn!(env_file = %path.display(), error = %err, "the env file changed on disk but cannot be read; the values read before stay in force");
                return false;
            }
        };
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if digest
            == self
                .watch
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .digest
        {
            return false;
        }
        let names = self.apply(&text, stamp);
        self.tokens.clear("");
        tracing::info!(env_file = %path.display(), names = names.len(), "the env file changed on disk: re-read, cached tokens dropped");
        true
    }

    /// A fingerprint of the values in force (SHA-256 over the names and values, sorted;
    /// never a value itself), and whether the store also reads the process environment:
    /// it changes when a reload changes a value. Results computed with these credentials
    /// are cached under it.
    pub fn fingerprint(&self) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let values = self.snapshot();
        let mut pairs: Vec<(&String, &String)> = values.iter().collect();
        pairs.sort();
        let mut digest = Sha256::new();
        digest.update([u8::from(self.process_env)]);
        for (name, value) in pairs {
            for part in [name.as_bytes(), value.as_bytes()] {
                digest.update((part.len() as u64).to_be_bytes());
                digest.update(part);
            }
        }
        digest.finalize().into()
    }

    /// Auth state derived from the values (cached tokens).
    pub(crate) fn tokens(&self) -> &TokenCache {
        &self.tokens
    }

    fn snapshot(&self) -> Arc<HashMap<String, String>> {
        self.values
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl CredentialSource for CredentialStore {
    fn get(&self, name: &str) -> Option<String> {
        if let Some(value) = self.snapshot().get(name).filter(|v| !v.is_empty()) {
            return Some(value.clone());
        }
        if self.process_env {
            let value = std::env::var(name).ok().filter(|v| !v.is_empty());
            if value.is_some() {
                self.read_from_process
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.to_owned());
            }
            return value;
        }
        None
    }

    fn allows_host_identity(&self) -> bool {
        self.host_identity
    }

    fn reread_if_changed(&self) {
        self.reread_env_file_if_changed();
    }

    fn assumes_aws_roles(&self) -> bool {
        !self.aws_roles.is_empty()
    }

    /// The env file's values and those read from the process environment.
    fn secret_values(&self) -> Vec<String> {
        let mut values: Vec<String> = self.snapshot().values().cloned().collect();
        let names = self
            .read_from_process
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        values.extend(names.iter().filter_map(|name| std::env::var(name).ok()));
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_values_reload_and_keep_absent_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.env");
        std::fs::write(&path, "A=1\nB=2\n").unwrap();
        let store = CredentialStore::open(&path, false).unwrap();
        assert_eq!(store.get("A").as_deref(), Some("1"));
        std::fs::write(&path, "A=zq3v\nC=\n").unwrap();
        let outcome = store.source().unwrap();
        assert_eq!(outcome.names, vec!["A".to_owned()]);
        assert_eq!(store.get("A").as_deref(), Some("zq3v"));
        assert_eq!(store.get("B").as_deref(), Some("2"));
        assert_eq!(store.get("C"), None);
        std::fs::remove_file(&path).unwrap();
        let err = store.source().unwrap_err();
        assert!(err.message().contains("t.env' not found"), "{err}");
        // The Debug form shows no value (a temporary path may hold any digit, so look for
        // the value itself).
        assert!(!format!("{store:?}").contains("zq3v"));
    }

    fn token() -> CachedToken {
        CachedToken {
            value: "t".into(),
            expires_at: Instant::now() + std::time::Duration::from_secs(60),
            expires: SystemTime::UNIX_EPOCH,
        }
    }

    /// Lets the next call look at the file at once (instead of waiting out the interval).
    fn look_now(store: &CredentialStore) {
        store.watch.lock().unwrap().next_check = None;
    }

    #[test]
    fn a_changed_env_file_is_reread_at_most_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path();
        // A Secret mount: creds.env -> ..data/creds.env, ..data -> ..v1.
        std::fs::create_dir(mount.join("..v1")).unwrap();
        std::fs::write(mount.join("..v1/creds.env"), "A=1\n").unwrap();
        std::os::unix::fs::symlink("..v1", mount.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/creds.env", mount.join("creds.env")).unwrap();
        let store = CredentialStore::open(&mount.join("creds.env"), false).unwrap();
        assert!(!store.reread_env_file_if_changed(), "unchanged since open");
        store.tokens().put("p/x".into(), token());

        // The kubelet's swap: a new version, then ..data replaced atomically.
        std::fs::create_dir(mount.join("..v2")).unwrap();
        std::fs::write(mount.join("..v2/creds.env"), "A=2\n").unwrap();
        std::os::unix::fs::symlink("..v2", mount.join("..tmp")).unwrap();
        std::fs::rename(mount.join("..tmp"), mount.join("..data")).unwrap();
        assert!(
            !store.reread_env_file_if_changed(),
            "looked at less than an interval ago"
        );
        assert_eq!(store.get("A").as_deref(), Some("1"));
        look_now(&store);
        assert!(store.reread_env_file_if_changed());
        assert_eq!(store.get("A").as_deref(), Some("2"));
        assert!(
            store.tokens().get("p/x", Instant::now()).is_none(),
            "tokens dropped"
        );

        // Rewritten in place with the same text: read, but nothing changes.
        store.tokens().put("p/x".into(), token());
        std::fs::write(mount.join("..v2/creds.env"), "A=2\n").unwrap();
        look_now(&store);
        assert!(!store.reread_env_file_if_changed());
        assert!(store.tokens().get("p/x", Instant::now()).is_some());
        // In place with new text.
        std::fs::write(mount.join("..v2/creds.env"), "A=3\nB=4\n").unwrap();
        look_now(&store);
        assert!(store.reread_env_file_if_changed());
        assert_eq!(store.get("B").as_deref(), Some("4"));

        // Gone: the values stay in force.
        std::fs::remove_file(mount.join("..v2/creds.env")).unwrap();
        look_now(&store);
        assert!(!store.reread_env_file_if_changed());
        assert_eq!(store.get("A").as_deref(), Some("3"));
        // A store without a file never looks.
        assert!(!CredentialStore::fixed([]).reread_env_file_if_changed());
    }

    #[test]
    fn tokens_expire_and_clear_by_prefix() {
        let cache = TokenCache::default();
        let later = Instant::now() + std::time::Duration::from_secs(60);
        cache.put(
            "p1/x".into(),
            CachedToken {
                value: "t".into(),
                expires_at: later,
                expires: SystemTime::UNIX_EPOCH,
            },
        );
        cache.put(
            "p2/x".into(),
            CachedToken {
                value: "u".into(),
                expires_at: later,
                expires: SystemTime::UNIX_EPOCH,
            },
        );
        assert_eq!(cache.get("p1/x", Instant::now()).as_deref(), Some("t"));
        assert_eq!(cache.get("p1/x", later), None);
        cache.note_source("p1", "azure_default:EnvironmentCredential");
        assert_eq!(
            cache.expiry("p1", Instant::now()),
            Some(SystemTime::UNIX_EPOCH)
        );
        assert_eq!(
            cache.source("p1", Instant::now()).as_deref(),
            Some("azure_default:EnvironmentCredential")
        );
        assert_eq!(cache.expiry("p1", later), None);
        assert_eq!(cache.source("p1", later), None);
        assert_eq!(cache.expiry("p", Instant::now()), None);
        cache.clear("p1/");
        assert_eq!(cache.get("p1/x", Instant::now()), None);
        assert_eq!(cache.source("p1", Instant::now()), None);
        assert!(cache.get("p2/x", Instant::now()).is_some());
    }
}
