//! Opened resource models, remembered across statements.
//!
//! Building a resource (its service's documents, every method, parameters, and later each
//! method's row shape) is a function of the documents it reads. A remembered model is
//! handed out again only while its provider's `provider.yaml` is the one the registry
//! opened and every other document it was built from loads from the store as the very same
//! document (see [`DocumentStore::unchanged`]): a file changed on disk (seen after the
//! store's recheck interval), a pulled version ([`DocumentStore::forget`]) or a document
//! evicted from the store's cache means a new document, and so a model built afresh. A
//! model whose building could not read some file is not remembered.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, Weak};

use lru::LruCache;

use super::model::{Provider, Resource};
use super::store::{Doc, DocumentStore, Reads};
use crate::error::Result;

/// `(provider, service, resource)` as the statement names them.
type Key = (String, String, String);

struct Entry {
    /// The `provider.yaml` the model was built under.
    provider_doc: Weak<Doc>,
    /// Every other document building the model read.
    reads: Reads,
    resource: Arc<Resource>,
}

impl Entry {
    /// Whether the model still stands for `provider`: the same `provider.yaml`, and every
    /// document read for the model and for its methods' row shapes loads unchanged.
    fn stands(&self, store: &DocumentStore, provider: &Provider) -> bool {
        std::ptr::eq(self.provider_doc.as_ptr(), Arc::as_ptr(&provider.doc))
            && store.unchanged(&self.reads)
            && self
                .resource
                .methods
                .iter()
                .all(|method| method.shape_unchanged(store))
    }
}

/// Resource models by name, least recently used dropped first.
pub(crate) struct ModelCache {
    entries: Mutex<LruCache<Key, Arc<Entry>>>,
}

impl std::fmt::Debug for ModelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelCache").finish_non_exhaustive()
    }
}

impl ModelCache {
    /// A cache keeping at most `capacity` resource models.
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity.max(1)).unwrap_or(NonZeroUsize::MIN);
        ModelCache {
            entries: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// The resource `service.name` of `provider` (as the registry opened it just now): the
    /// remembered model when it still stands, else one built from the documents now.
    pub(crate) fn resource(
        &self,
        store: &DocumentStore,
        provider: &Arc<Provider>,
        service: &str,
        name: &str,
    ) -> Result<Arc<Resource>> {
        let key: Key = (provider.name.clone(), service.to_owned(), name.to_owned());
        let remembered = self
            .entries
            .lock()
            .ok()
            .and_then(|mut entries| entries.get(&key).cloned());
        // Checked without the lock: checking loads documents, which may read files.
        if let Some(entry) = &remembered
            && entry.stands(store, provider)
        {
            return Ok(entry.resource.clone());
        }
        // A stale entry is dropped and the model built again, neither on an async thread
        // (the entry may stand once its files have been looked at).
        crate::inline::check()?;
        if let Some(entry) = remembered
            && let Ok(mut entries) = self.entries.lock()
            && entries
                .peek(&key)
                .is_some_and(|now| Arc::ptr_eq(now, &entry))
        {
            entries.pop(&key);
        }
        let (built, reads) =
            store.recording(|| provider.service(store, service)?.resource(store, name));
        let resource = Arc::new(built?);
        if reads.complete()
            && let Ok(mut entries) = self.entries.lock()
        {
            entries.put(
                key,
                Arc::new(Entry {
                    provider_doc: Arc::downgrade(&provider.doc),
                    reads,
                    resource: resource.clone(),
                }),
            );
        }
        Ok(resource)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, SystemTime};

    use super::*;

    const PROVIDER: &str = "name: p\nproviderServices:\n  things:\n    name: things\n    preferred: true\n    service:\n      $ref: p/v1/services/things.yaml\n";
    const SERVICE: &str = r#"openapi: 3.0.0
info: {title: t, version: v1}
paths:
  /things:
    get:
      parameters:
        - {name: org, in: query, required: true, schema: {type: string}}
      responses:
        '200':
          content:
            application/json:
              schema: {$ref: 'p/v1/services/schemas.yaml#/components/schemas/Things'}
components:
  x-stackQL-resources:
    things:
      methods:
        list:
          operation: {$ref: '#/paths/~1things/get'}
        missing:
          operation: {$ref: 'p/v1/services/other.yaml#/paths/~1x/get'}
      sqlVerbs:
        select:
          - $ref: '#/components/x-stackQL-resources/things/methods/list'
"#;

    fn schemas(column: &str) -> String {
        format!(
            "components:\n  schemas:\n    Things:\n      type: array\n      items:\n        type: object\n        properties:\n          id: {{type: integer}}\n          {column}: {{type: string}}\n"
        )
    }

    /// Writes `rel` under `src/` with a modification time `age` in the past, so that two
    /// writes within one clock tick still differ in time.
    fn write(root: &Path, rel: &str, text: &str, age: u64) {
        let path = root.join("src").join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(SystemTime::now() - Duration::from_secs(age))
            .unwrap();
    }

    struct Fixture {
        root: tempfile::TempDir,
        store: DocumentStore,
        models: ModelCache,
    }

    impl Fixture {
        /// The provider, its service and the schemas document, in a store of 16 documents.
        fn new(recheck: Duration) -> Self {
            Self::with_store_capacity(16, recheck)
        }

        /// The provider, its service and the schemas document, in a store that holds
        /// `capacity` documents.
        fn with_store_capacity(capacity: usize, recheck: Duration) -> Self {
            let root = tempfile::tempdir().unwrap();
            let store = DocumentStore::new(root.path().join("src"), capacity, recheck);
            let f = Fixture {
                root,
                store,
                models: ModelCache::new(4),
            };
            f.write("p/v1/provider.yaml", PROVIDER, 100);
            f.write("p/v1/services/things.yaml", SERVICE, 100);
            f.write("p/v1/services/schemas.yaml", &schemas("name"), 100);
            f
        }

        /// [`write`] under this fixture's root.
        fn write(&self, rel: &str, text: &str, age: u64) {
            write(self.root.path(), rel, text, age);
        }

        /// Writes the document the `missing` method's operation points into (without that
        /// operation), so no document the model reads is missing.
        fn write_other(&self) {
            self.write("p/v1/services/other.yaml", "paths: {}\n", 100);
        }

        fn provider(&self) -> Arc<Provider> {
            Arc::new(Provider {
                name: "p".to_owned(),
                doc: self.store.load("p/v1/provider.yaml").unwrap(),
            })
        }

        fn open(&self) -> Arc<Resource> {
            self.models
                .resource(&self.store, &self.provider(), "things", "things")
                .unwrap()
        }

        fn columns(&self, resource: &Resource) -> Vec<String> {
            let method = resource.method("list").unwrap();
            let shape = method.row_shape(&self.store).unwrap();
            shape.columns.iter().map(|c| c.name.clone()).collect()
        }
    }

    #[test]
    fn unchanged_documents_give_the_same_model() {
        let f = Fixture::new(Duration::ZERO);
        // A method whose document is missing: the model is not remembered.
        let first = f.open();
        assert!(first.broken_method("missing").is_some());
        assert!(!Arc::ptr_eq(&first, &f.open()));
        f.write(
            "p/v1/services/other.yaml",
            "paths:\n  /x:\n    get: {}\n",
            100,
        );
        let whole = f.open();
        assert!(whole.broken_method("missing").is_none());
        assert_eq!(f.columns(&whole), ["id", "name"]);
        let again = f.open();
        assert!(Arc::ptr_eq(&whole, &again));
        // The row shape is worked out once per model.
        let method = again.method("list").unwrap();
        assert!(Arc::ptr_eq(
            &method.row_shape(&f.store).unwrap(),
            &method.row_shape(&f.store).unwrap()
        ));
        // Another resource name is another model (and an unknown one an error).
        let err = f
            .models
            .resource(&f.store, &f.provider(), "things", "nothing")
            .unwrap_err();
        assert!(err.message().contains("not found"), "{err}");
    }

    #[test]
    fn on_the_async_threads_a_model_is_only_taken_from_the_cache() {
        use crate::inline::cached_only;
        let open = |f: &Fixture, provider: &Arc<Provider>| {
            cached_only(|| f.models.resource(&f.store, provider, "things", "things"))
        };
        let f = Fixture::new(Duration::from_secs(3600));
        f.write_other();
        let provider = f.provider();
        // Not built yet: refused (to be built on a blocking thread), and nothing is kept.
        assert!(open(&f, &provider).is_none());
        let built = f.open();
        // Built, documents within their recheck interval: the same model, here.
        let here = open(&f, &provider).unwrap().unwrap();
        assert!(Arc::ptr_eq(&built, &here));

        // Documents past their recheck interval need a look at their files: refused, and
        // the remembered model stays for the look that follows off the async threads.
        let f = Fixture::new(Duration::ZERO);
        f.write_other();
        let provider = f.provider();
        let built = f.open();
        assert!(open(&f, &provider).is_none());
        assert!(Arc::ptr_eq(&built, &f.open()));
    }

    #[test]
    fn a_changed_document_gives_a_fresh_model() {
        let f = Fixture::new(Duration::ZERO);
        f.write_other();
        let first = f.open();
        assert_eq!(f.columns(&first), ["id", "name"]);

        // A document reached only through a `$ref` of the response schema.
        f.write("p/v1/services/schemas.yaml", &schemas("title"), 50);
        let second = f.open();
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(f.columns(&second), ["id", "title"]);
        assert!(Arc::ptr_eq(&second, &f.open()));

        // The service document.
        f.write(
            "p/v1/services/things.yaml",
            &SERVICE.replace("required: true", "required: false"),
            40,
        );
        let third = f.open();
        assert!(!Arc::ptr_eq(&second, &third));
        assert!(!third.method("list").unwrap().params[0].required);

        // provider.yaml.
        f.write(
            "p/v1/provider.yaml",
            &format!("{PROVIDER}config: {{}}\n"),
            30,
        );
        let fourth = f.open();
        assert!(!Arc::ptr_eq(&third, &fourth));
        assert!(Arc::ptr_eq(&fourth, &f.open()));
    }

    #[test]
    fn changes_wait_for_the_recheck_interval_and_forget_is_at_once() {
        let f = Fixture::new(Duration::from_secs(3600));
        f.write_other();
        let first = f.open();
        assert_eq!(f.columns(&first), ["id", "name"]);
        // Within the recheck interval the files are not looked at: the model stands.
        f.write("p/v1/services/schemas.yaml", &schemas("title"), 50);
        assert!(Arc::ptr_eq(&first, &f.open()));
        // A pull forgets the version's documents: the model is built from the files now.
        f.store.forget("p/v1/");
        let fresh = f.open();
        assert!(!Arc::ptr_eq(&first, &fresh));
        assert_eq!(f.columns(&fresh), ["id", "title"]);
        assert!(Arc::ptr_eq(&fresh, &f.open()));
        // Forgetting another version leaves it alone.
        f.store.forget("q/v1/");
        assert!(Arc::ptr_eq(&fresh, &f.open()));
    }

    #[test]
    fn a_document_evicted_from_the_store_gives_a_fresh_model() {
        let f = Fixture::with_store_capacity(4, Duration::from_secs(3600));
        f.write_other();
        f.write("p/v1/services/filler.yaml", "{}\n", 100);
        let first = f.open();
        assert_eq!(f.columns(&first), ["id", "name"]);
        assert!(Arc::ptr_eq(&first, &f.open()));
        // Four documents fit; a fifth evicts the least recently used one: things.yaml, once
        // provider.yaml has been used after the model's documents were checked.
        f.store.load("p/v1/provider.yaml").unwrap();
        f.store.load("p/v1/services/filler.yaml").unwrap();
        assert!(!Arc::ptr_eq(&first, &f.open()));
    }
}
