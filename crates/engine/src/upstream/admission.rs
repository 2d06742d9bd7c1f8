//! What a page's body waits for before it is read. A statement whose pages are about to pass
//! the bytes that need a bulk permit (see `eval`) waits for the permit when a page's headers
//! have come and its body has not been read: the body stays in the connection (the upstream
//! is held back by TCP) instead of in this process, and the connection stays out of the idle
//! pool, where it would keep a read buffer of the body's size.
//!
//! A connection that has carried a large body keeps a read buffer of that size, and fills it
//! with the next answer's body while that answer's statement waits at the headers. So a
//! request whose last answer (for the same tenant) was large enough to need the permit on
//! its own waits for it before it is sent, holding no connection ([`LargeAnswers`]).

use std::future::Future;
use std::hash::{BuildHasher, Hash, Hasher};
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use lru::LruCache;
use url::Url;

/// A wait for a body's admission.
pub(crate) type AdmissionWait<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Decides whether a response body may be read now.
pub(crate) trait BodyAdmission: Sync + std::fmt::Debug {
    /// `None` when `bytes` more of response body may be read at once; otherwise the wait
    /// after which they may.
    fn admit(&self, bytes: u64) -> Option<AdmissionWait<'_>>;

    /// Whether a body of `bytes` would need admission on its own, whatever came before it.
    fn large(&self, bytes: u64) -> bool;
}

/// Most requests [`LargeAnswers`] remembers.
const REMEMBERED: NonZeroUsize = NonZeroUsize::new(1024).unwrap();

/// The announced body size of the requests whose last answer needed admission on its own,
/// the most recent [`REMEMBERED`], by tenant, HTTP method, URL and request body (hashed with
/// a key of this process: nothing of a request is kept).
#[derive(Debug)]
pub(super) struct LargeAnswers {
    sizes: Mutex<LruCache<u64, u64>>,
    keys: std::hash::RandomState,
}

impl LargeAnswers {
    pub(super) fn new() -> Self {
        LargeAnswers {
            sizes: Mutex::new(LruCache::new(REMEMBERED)),
            keys: std::hash::RandomState::new(),
        }
    }

    /// The key of one request of `tenant`.
    fn key(&self, tenant: &str, method: &reqwest::Method, url: &Url, body: Option<&Bytes>) -> u64 {
        let mut hasher = self.keys.build_hasher();
        tenant.hash(&mut hasher);
        method.as_str().hash(&mut hasher);
        url.as_str().hash(&mut hasher);
        body.map(Bytes::as_ref).hash(&mut hasher);
        hasher.finish()
    }

    fn size(&self, key: u64) -> Option<u64> {
        self.sizes.lock().ok()?.get(&key).copied()
    }

    /// Remembers that `key`'s answer announced `size`, large enough to need admission.
    fn remember(&self, key: u64, size: u64) {
        if let Ok(mut sizes) = self.sizes.lock() {
            sizes.put(key, size);
        }
    }

    /// Forgets `key`: its answer is no longer large.
    fn forget(&self, key: u64) {
        if let Ok(mut sizes) = self.sizes.lock() {
            sizes.pop(&key);
        }
    }
}

/// One request's admission: the decision its body asks (until it has waited once), what
/// its last answer announced, and the time it has waited.
#[derive(Debug)]
pub(super) struct Admitting<'a> {
    asks: Option<&'a dyn BodyAdmission>,
    waited_once: bool,
    /// Where the request's last large answer is remembered, under its key.
    remembered: Option<(&'a LargeAnswers, u64)>,
    /// Whether its last answer was remembered when it was sent.
    was_large: bool,
    /// Time spent waiting for the admission.
    pub(super) waited: Duration,
}

impl<'a> Admitting<'a> {
    /// A request whose body is read at once.
    pub(super) fn none() -> Self {
        Admitting {
            asks: None,
            waited_once: false,
            remembered: None,
            was_large: false,
            waited: Duration::ZERO,
        }
    }

    /// A request of `tenant` whose body asks `asks` (if any), its large answers remembered
    /// in `answers`.
    pub(super) fn new(
        asks: Option<&'a dyn BodyAdmission>,
        answers: &'a LargeAnswers,
        tenant: &str,
        (method, url, body): (&reqwest::Method, &Url, Option<&Bytes>),
    ) -> Self {
        let Some(asks) = asks else {
            return Admitting::none();
        };
        Admitting {
            asks: Some(asks),
            waited_once: false,
            remembered: Some((answers, answers.key(tenant, method, url, body))),
            was_large: false,
            waited: Duration::ZERO,
        }
    }

    /// Whether the body may have to wait.
    pub(super) fn asks(&self) -> bool {
        self.asks.is_some()
    }

    /// Before the request is sent: waits (at most `cap`) for the admission its last answer
    /// needed on its own, if it did. The time waited.
    pub(super) async fn before_sending(&mut self, cap: Duration) -> Duration {
        let Some(size) = self.remembered.and_then(|(answers, key)| answers.size(key)) else {
            return Duration::ZERO;
        };
        self.was_large = true;
        self.wait(size, cap).await
    }

    /// Once the answer's headers have come: a successful answer (`ok`) announcing `size`
    /// is remembered when it needs admission on its own, forgotten otherwise; an
    /// unsuccessful one's body is read at once (it is not loaded).
    pub(super) fn answered(&mut self, ok: bool, size: Option<u64>) {
        let Some(asks) = self.asks else {
            return;
        };
        if !ok {
            self.asks = None;
            return;
        }
        let Some((answers, key)) = self.remembered else {
            return;
        };
        match size.filter(|&size| asks.large(size)) {
            Some(size) => answers.remember(key, size),
            None if self.was_large => answers.forget(key),
            None => {}
        }
    }

    /// Before more of the body is read, `bytes` of it announced or read so far: waits (at
    /// most `cap`) until they may be. The time waited.
    pub(super) async fn before_reading(&mut self, bytes: u64, cap: Duration) -> Duration {
        self.wait(bytes, cap).await
    }

    /// Waits until `bytes` of body may be read, at most `cap`; once it has waited, it asks no
    /// more (a wait that ran out is not repeated for the rest of the request).
    async fn wait(&mut self, bytes: u64, cap: Duration) -> Duration {
        if self.waited_once {
            return Duration::ZERO;
        }
        let Some(wait) = self.asks.and_then(|asks| asks.admit(bytes)) else {
            return Duration::ZERO;
        };
        self.waited_once = true;
        let waiting = tokio::time::Instant::now();
        let _ = tokio::time::timeout(cap, wait).await;
        let waited = waiting.elapsed();
        self.waited += waited;
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get() -> reqwest::Method {
        reqwest::Method::GET
    }

    #[test]
    fn a_large_answer_is_remembered_for_its_tenant_and_request_only() {
        let answers = LargeAnswers::new();
        let url = Url::parse("https://api.example/items?page=1").unwrap();
        let other_url = Url::parse("https://api.example/items?page=2").unwrap();
        let body = Bytes::from_static(b"{\"a\":1}");
        let key = answers.key("acme", &get(), &url, None);
        answers.remember(key, 700_000);
        assert_eq!(answers.size(key), Some(700_000));
        for other in [
            answers.key("globex", &get(), &url, None),
            answers.key("acme", &reqwest::Method::POST, &url, None),
            answers.key("acme", &get(), &other_url, None),
            answers.key("acme", &get(), &url, Some(&body)),
        ] {
            assert_eq!(answers.size(other), None);
        }
        // A smaller answer since: forgotten.
        answers.forget(key);
        assert_eq!(answers.size(key), None);
    }

    #[test]
    fn only_the_most_recent_large_answers_are_kept() {
        let answers = LargeAnswers::new();
        let keys: Vec<u64> = (0..=REMEMBERED.get())
            .map(|page| {
                let url = Url::parse(&format!("https://api.example/items?page={page}")).unwrap();
                answers.key("acme", &get(), &url, None)
            })
            .collect();
        for key in &keys {
            answers.remember(*key, 1 << 20);
        }
        assert_eq!(answers.size(keys[0]), None);
        assert_eq!(answers.size(keys[REMEMBERED.get()]), Some(1 << 20));
    }
}
