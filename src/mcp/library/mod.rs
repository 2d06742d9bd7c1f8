//! The query library: curated, parameterised SQL for common questions, searched by intent
//! (`query_library_search`) and rendered with validated values (`query_library_get`).
//!
//! Two tiers: the remote index at `server.query_library_url` (`<base>/manifest.json`,
//! `<base>/index.json`, `<base>/queries/<id>.json`), cached for [`TTL`] and revalidated by
//! the manifest's `build_id`; and the snapshot embedded from `content/library/`, used when no
//! URL is configured and, marked `stale`, whenever the remote cannot be read.

pub(crate) mod model;
mod remote;
pub(crate) mod render;
pub(crate) mod search;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::model::{Index, IndexEntry, Manifest, QueryDoc};
use self::remote::Fetcher;
use super::content::ContentError;

/// How long a fetched index is used before the manifest is checked again.
pub(crate) const TTL: Duration = Duration::from_secs(300);
/// How long after a failed fetch the snapshot is served before the remote is tried again.
const RETRY_AFTER: Duration = Duration::from_secs(30);
/// Where the snapshot lives in the embedded content.
const SNAPSHOT_DIR: &str = "library";

/// Which tier answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    /// `server.query_library_url`.
    Primary,
    /// The embedded snapshot.
    Snapshot,
}

impl Tier {
    /// `primary` or `snapshot`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Tier::Primary => "primary",
            Tier::Snapshot => "snapshot",
        }
    }
}

/// Where an answer came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) tier: Tier,
    /// The URL of the index or document read (`embedded://…` for the snapshot).
    pub(crate) url: String,
    /// Whether a configured remote could not be read, so an older copy answered.
    pub(crate) stale: bool,
}

/// Why a document cannot be served.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LibraryError {
    /// The id is not in the index.
    Unknown(String),
    /// The remote failed and the snapshot does not have the document.
    Unavailable(String),
}

/// Why the library cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LibrarySetupError {
    /// The embedded snapshot is malformed or incomplete.
    #[error(transparent)]
    Snapshot(#[from] ContentError),
    /// TLS for the remote tier's client cannot be set up.
    #[error("{0}")]
    Tls(String),
    /// The remote tier's HTTP client cannot be built.
    #[error("cannot build the query library client: {0}")]
    Client(#[source] reqwest::Error),
}

/// The embedded snapshot.
#[derive(Debug)]
struct Snapshot {
    index: Arc<Index>,
    docs: BTreeMap<String, Arc<QueryDoc>>,
}

/// The remote tier's cache.
#[derive(Debug, Default)]
struct RemoteState {
    index: Option<Arc<Index>>,
    build_id: Option<String>,
    fetched: Option<Instant>,
    failed: Option<Instant>,
    docs: HashMap<String, Arc<QueryDoc>>,
}

#[derive(Debug)]
struct Remote {
    fetcher: Fetcher,
    /// One lock for the cache and the fetches that refresh it: concurrent calls during a
    /// refresh wait for it instead of fetching the same documents again.
    state: tokio::sync::Mutex<RemoteState>,
}

/// The library: the snapshot and, when configured, the remote tier.
#[derive(Debug)]
pub(crate) struct Library {
    snapshot: Snapshot,
    remote: Option<Remote>,
}

fn snapshot_url(path: &str) -> String {
    format!("embedded://content/{SNAPSHOT_DIR}/{path}")
}

impl Library {
    /// The library over the embedded `files` (paths relative to `content/`) and an optional
    /// remote base URL.
    pub(crate) fn new(
        files: &BTreeMap<String, String>,
        remote_url: Option<&str>,
    ) -> Result<Self, LibrarySetupError> {
        let snapshot = load_snapshot(files)?;
        let remote = match remote_url {
            Some(url) => Some(Remote {
                fetcher: Fetcher::new(url)?,
                state: tokio::sync::Mutex::new(RemoteState::default()),
            }),
            None => None,
        };
        Ok(Library { snapshot, remote })
    }

    fn snapshot_index(&self, stale: bool) -> (Arc<Index>, Source) {
        (
            self.snapshot.index.clone(),
            Source {
                tier: Tier::Snapshot,
                url: snapshot_url("index.json"),
                stale,
            },
        )
    }

    /// The index to search, and where it came from.
    pub(crate) async fn index(&self) -> (Arc<Index>, Source) {
        let Some(remote) = &self.remote else {
            return self.snapshot_index(false);
        };
        let mut state = remote.state.lock().await;
        let url = remote.fetcher.url("index.json");
        let now = Instant::now();
        if let (Some(index), Some(fetched)) = (&state.index, state.fetched)
            && now.duration_since(fetched) < TTL
        {
            let stale = state.failed.is_some();
            return (
                index.clone(),
                Source {
                    tier: Tier::Primary,
                    url,
                    stale,
                },
            );
        }
        if state
            .failed
            .is_some_and(|failed| now.duration_since(failed) < RETRY_AFTER)
        {
            return self.fallback_index(&state, url);
        }
        match refresh(&remote.fetcher, &mut state).await {
            Ok(()) => {
                state.failed = None;
                state.fetched = Some(now);
                match &state.index {
                    Some(index) => (
                        index.clone(),
                        Source {
                            tier: Tier::Primary,
                            url,
                            stale: false,
                        },
                    ),
                    None => self.snapshot_index(true),
                }
            }
            Err(err) => {
                tracing::warn!(error = %crate::engine::escape_controls(&err.to_string()), "query library: the remote index cannot be read; serving an older copy");
                state.failed = Some(now);
                self.fallback_index(&state, url)
            }
        }
    }

    /// After a failure: the cached remote index if there is one, else the snapshot; stale.
    fn fallback_index(&self, state: &RemoteState, url: String) -> (Arc<Index>, Source) {
        match &state.index {
            Some(index) => (
                index.clone(),
                Source {
                    tier: Tier::Primary,
                    url,
                    stale: true,
                },
            ),
            None => self.snapshot_index(true),
        }
    }

    /// The document `id` (already checked to be well formed), from the tier that served the
    /// index.
    pub(crate) async fn document(&self, id: &str) -> Result<(Arc<QueryDoc>, Source), LibraryError> {
        let (index, source) = self.index().await;
        if !index.entries.iter().any(|e| e.id == id) {
            return Err(LibraryError::Unknown(id.to_owned()));
        }
        let from_snapshot = |stale: bool, why: Option<String>| {
            self.snapshot
                .docs
                .get(id)
                .map(|doc| {
                    (
                        doc.clone(),
                        Source {
                            tier: Tier::Snapshot,
                            url: snapshot_url(&format!("queries/{id}.json")),
                            stale,
                        },
                    )
                })
                .ok_or_else(|| match why {
                    Some(why) => LibraryError::Unavailable(format!(
                        "query library unavailable: {why}; the embedded snapshot has no \"{id}\""
                    )),
                    None => LibraryError::Unknown(id.to_owned()),
                })
        };
        let (Tier::Primary, Some(remote)) = (source.tier, &self.remote) else {
            return from_snapshot(source.stale, None);
        };
        let path = format!("queries/{id}.json");
        let url = remote.fetcher.url(&path);
        let mut state = remote.state.lock().await;
        if let Some(doc) = state.docs.get(id) {
            return Ok((
                doc.clone(),
                Source {
                    tier: Tier::Primary,
                    url,
                    stale: source.stale,
                },
            ));
        }
        match remote.fetcher.get::<QueryDoc>(&path).await {
            Ok(doc) if doc.id == id => {
                let doc = Arc::new(doc);
                state.docs.insert(id.to_owned(), doc.clone());
                Ok((
                    doc,
                    Source {
                        tier: Tier::Primary,
                        url,
                        stale: source.stale,
                    },
                ))
            }
            Ok(doc) => from_snapshot(
                true,
                Some(format!("GET {url}: the document's id is \"{}\"", doc.id)),
            ),
            Err(err) => {
                tracing::warn!(error = %crate::engine::escape_controls(&err.to_string()), "query library: a document cannot be read; trying the snapshot");
                from_snapshot(true, Some(err))
            }
        }
    }
}

/// Fetches the manifest and, when its build changed, the index (dropping cached documents).
async fn refresh(fetcher: &Fetcher, state: &mut RemoteState) -> Result<(), String> {
    let manifest: Manifest = fetcher.get("manifest.json").await?;
    if state.index.is_some() && state.build_id.as_deref() == Some(manifest.build_id.as_str()) {
        return Ok(());
    }
    let index: Index = fetcher.get("index.json").await?;
    if let Some(entry) = index.entries.iter().find(|e| !model::valid_id(&e.id)) {
        return Err(format!(
            "GET {}: invalid query id \"{}\"",
            fetcher.url("index.json"),
            entry.id
        ));
    }
    state.index = Some(Arc::new(index));
    state.build_id = Some(manifest.build_id);
    state.docs.clear();
    Ok(())
}

fn load_snapshot(files: &BTreeMap<String, String>) -> Result<Snapshot, ContentError> {
    let parse = |path: &str| -> Result<serde_json::Value, ContentError> {
        let text = files.get(path).ok_or_else(|| ContentError::Malformed {
            file: path.to_owned(),
            message: "the query library snapshot is missing this file".to_owned(),
        })?;
        serde_json::from_str(text).map_err(|err| ContentError::Malformed {
            file: path.to_owned(),
            message: err.to_string(),
        })
    };
    let typed = |path: &str| {
        let value = parse(path)?;
        Ok::<_, ContentError>((path.to_owned(), value))
    };
    let (manifest_path, manifest) = typed(&format!("{SNAPSHOT_DIR}/manifest.json"))?;
    let manifest: Manifest =
        serde_json::from_value(manifest).map_err(|err| malformed(&manifest_path, err))?;
    let (index_path, index) = typed(&format!("{SNAPSHOT_DIR}/index.json"))?;
    let index: Index = serde_json::from_value(index).map_err(|err| malformed(&index_path, err))?;
    if index
        .build_id
        .as_deref()
        .is_some_and(|b| b != manifest.build_id)
    {
        return Err(ContentError::Malformed {
            file: index_path,
            message: "build_id differs from manifest.json".to_owned(),
        });
    }
    let mut docs = BTreeMap::new();
    for entry in &index.entries {
        check_entry(&index_path, entry)?;
        let path = format!("{SNAPSHOT_DIR}/queries/{}.json", entry.id);
        let (path, value) = typed(&path)?;
        let doc: QueryDoc = serde_json::from_value(value).map_err(|err| malformed(&path, err))?;
        if doc.id != entry.id || doc.mutation != entry.mutation {
            return Err(ContentError::Malformed {
                file: path,
                message: format!(
                    "id or mutation differs from the index entry \"{}\"",
                    entry.id
                ),
            });
        }
        let declared: Vec<&str> = doc.params.iter().map(|p| p.name.as_str()).collect();
        if let Some(undeclared) = render::placeholders(&doc.template)
            .into_iter()
            .find(|p| !declared.contains(&p.as_str()))
        {
            return Err(ContentError::Malformed {
                file: path,
                message: format!(
                    "the template uses {{{{{undeclared}}}}}, which is not a declared param"
                ),
            });
        }
        docs.insert(entry.id.clone(), Arc::new(doc));
    }
    Ok(Snapshot {
        index: Arc::new(index),
        docs,
    })
}

fn check_entry(file: &str, entry: &IndexEntry) -> Result<(), ContentError> {
    if model::valid_id(&entry.id) {
        Ok(())
    } else {
        Err(ContentError::Malformed {
            file: file.to_owned(),
            message: format!("invalid query id \"{}\"", entry.id),
        })
    }
}

fn malformed(file: &str, err: serde_json::Error) -> ContentError {
    ContentError::Malformed {
        file: file.to_owned(),
        message: err.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::content::Content;

    #[test]
    fn a_missing_snapshot_is_a_typed_setup_error() {
        let err = match Library::new(&BTreeMap::new(), None) {
            Err(err) => err,
            Ok(_) => panic!("a library without its snapshot was built"),
        };
        assert!(matches!(err, LibrarySetupError::Snapshot(_)), "{err:?}");
        let start = crate::mcp::StartError::Library(err);
        assert_eq!(start.code(), "start.library");
        assert!(start.to_string().starts_with("query library: "), "{start}");
    }

    #[tokio::test]
    async fn the_embedded_snapshot_is_consistent() {
        let content = Content::embedded().unwrap();
        let library = Library::new(&content.files, None).unwrap();
        let (index, source) = library.index().await;
        assert_eq!(source.tier, Tier::Snapshot);
        assert!(!source.stale);
        assert!(index.entries.len() >= 7);
        for entry in &index.entries {
            let (doc, _) = library.document(&entry.id).await.unwrap();
            // The index's required params are the document's required params without defaults.
            let required: Vec<&str> = doc
                .params
                .iter()
                .filter(|p| p.required && p.default.is_none())
                .map(|p| p.name.as_str())
                .collect();
            assert_eq!(entry.required_params, required, "{}", entry.id);
            // Every example renders.
            let examples: serde_json::Map<String, serde_json::Value> = doc
                .params
                .iter()
                .filter_map(|p| p.example.clone().map(|e| (p.name.clone(), e)))
                .collect();
            let out = render::render(&doc.template, &doc.params, &examples);
            assert!(out.sql.is_some(), "{}: {:?}", entry.id, out.errors);
        }
        assert_eq!(
            library.document("nope/nothing").await.unwrap_err(),
            LibraryError::Unknown("nope/nothing".into())
        );
    }
}
