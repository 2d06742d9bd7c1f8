//! A mock upstream on 127.0.0.1: fixed routes per test, and a record of every request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::Response;

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The body as text (lossy).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// What a route answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub headers: Vec<(String, String)>,
    pub delay: std::time::Duration,
    /// Append the request's header values (raw and base64) and query to the body, as APIs
    /// that echo credentials back do.
    pub echo: bool,
    /// A failure while the body is sent.
    pub fault: Option<BodyFault>,
    /// Held back until this turns true (see [`Reply::held`]).
    pub hold: Option<tokio::sync::watch::Receiver<bool>>,
    /// Counts the body's bytes as the server takes them to send (see [`Reply::counted`]).
    pub taken: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

/// Lets the replies [`Reply::held`] made go out.
#[derive(Debug)]
pub struct Release(tokio::sync::watch::Sender<bool>);

impl Release {
    /// Sends every reply held by this, and any asked for later.
    pub fn release(&self) {
        self.0.send_replace(true);
    }
}

/// How a body fails part-way (the headers, with the full `content-length`, go out first).
#[derive(Clone, Copy, Debug)]
pub enum BodyFault {
    /// The connection is dropped after this many bytes of the body.
    ResetAfter(usize),
    /// This many bytes of the body are sent, then nothing more, ever.
    StallAfter(usize),
}

impl Reply {
    pub fn json(body: serde_json::Value) -> Self {
        Reply {
            status: 200,
            body: body.to_string().into_bytes(),
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            delay: Default::default(),
            echo: false,
            fault: None,
            hold: None,
            taken: None,
        }
    }
    pub fn status(status: u16, body: &str) -> Self {
        Reply {
            status,
            body: body.as_bytes().to_vec(),
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            delay: Default::default(),
            echo: false,
            fault: None,
            hold: None,
            taken: None,
        }
    }
    /// Raw bytes with a content type (registry packages, form bodies).
    pub fn bytes(content_type: &str, body: Vec<u8>) -> Self {
        Reply {
            status: 200,
            body,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            delay: Default::default(),
            echo: false,
            fault: None,
            hold: None,
            taken: None,
        }
    }
    pub fn status_code(mut self, status: u16) -> Self {
        self.status = status;
        self
    }
    /// This reply, held back (the request is recorded at once) until the returned
    /// [`Release`] is released.
    pub fn held(mut self) -> (Self, Release) {
        let (release, hold) = tokio::sync::watch::channel(false);
        self.hold = Some(hold);
        (self, Release(release))
    }
    /// This reply, its body sent in 64 KiB pieces (after a `content-length` header), and
    /// the count of its bytes the server has taken to send so far: the server takes the
    /// next piece only once the connection has room for it, so a client that does not read
    /// keeps the count at what the socket buffers hold.
    pub fn counted(mut self) -> (Self, Arc<std::sync::atomic::AtomicUsize>) {
        let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        self.taken = Some(taken.clone());
        (self, taken)
    }
    pub fn delayed(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }
    /// See [`Reply::echo`].
    pub fn echoing(mut self) -> Self {
        self.echo = true;
        self
    }
    /// See [`BodyFault`].
    pub fn failing(mut self, fault: BodyFault) -> Self {
        self.fault = Some(fault);
        self
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// Replies per route key; the first is used up while more than one remains, so a sequence
/// answers successive requests and its last reply repeats.
type Routes = Arc<Mutex<HashMap<String, std::collections::VecDeque<Reply>>>>;

/// The mock server. Routes are keyed by path plus a header value (`/a|x-page-token=t`), by
/// path plus query (`/a?b=c`; a form POST's form counts as its query), by HTTP method and
/// path (`POST /a`), or by path alone, tried in that order.
pub struct Mock {
    addr: SocketAddr,
    routes: Routes,
    log: Arc<Mutex<Vec<Recorded>>>,
    /// `path?query` of the requests whose client went away before their (delayed or held)
    /// answer was sent.
    abandoned: Arc<Mutex<Vec<String>>>,
}

/// Records its request as abandoned when dropped before [`Abandonment::answered`]: hyper
/// drops a handler whose connection the client closed.
struct Abandonment {
    request: Option<String>,
    abandoned: Arc<Mutex<Vec<String>>>,
}

impl Abandonment {
    fn answered(mut self) {
        self.request = None;
    }
}

impl Drop for Abandonment {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            self.abandoned.lock().unwrap().push(request);
        }
    }
}

impl Mock {
    pub async fn start() -> Self {
        let routes: Routes = Arc::default();
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let abandoned: Arc<Mutex<Vec<String>>> = Arc::default();
        let (r, l, a) = (routes.clone(), log.clone(), abandoned.clone());
        let app = Router::new().fallback(move |request: Request<Body>| {
            let (routes, log) = (r.clone(), l.clone());
            let pending = Abandonment {
                request: Some(match request.uri().query() {
                    Some(query) => format!("{}?{query}", request.uri().path()),
                    None => request.uri().path().to_owned(),
                }),
                abandoned: a.clone(),
            };
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, usize::MAX)
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                let (response, delay, hold) = answer(&routes, &log, parts, body);
                tokio::time::sleep(delay).await;
                if let Some(mut hold) = hold {
                    let _ = hold.wait_for(|released| *released).await;
                }
                pending.answered();
                response
            }
        });
        // A fixed send buffer (the accepted sockets inherit it), so what the kernel holds of
        // a response nobody reads is bounded: with autotuning it grows to several MiB under
        // load, and a test of what the replica left unread would measure the kernel instead.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_send_buffer_size(128 * 1024).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1024).unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mock {
            addr,
            routes,
            log,
            abandoned,
        }
    }

    /// `path?query` (or `path`) of each request whose client closed the connection before
    /// the answer went out, in the order the mock noticed.
    pub fn abandoned(&self) -> Vec<String> {
        self.abandoned.lock().unwrap().clone()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers `key` (a path, or path?query for an exact query match) with `reply`.
    pub fn route(&self, key: &str, reply: Reply) {
        self.route_sequence(key, vec![reply]);
    }

    /// Answers successive requests to `key` with `replies` in order; the last repeats.
    pub fn route_sequence(&self, key: &str, replies: Vec<Reply>) {
        self.routes
            .lock()
            .unwrap()
            .insert(key.to_owned(), replies.into());
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    /// How many requests reached `path` (query ignored).
    pub fn count(&self, path: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == path)
            .count()
    }

    /// Waits until at least `n` requests reached `path`; fails the test with `what` after
    /// `within`.
    pub async fn wait_for(&self, path: &str, n: usize, within: std::time::Duration, what: &str) {
        crate::support::wait::eventually(
            what,
            within,
            std::time::Duration::from_millis(20),
            || std::future::ready(self.count(path) >= n),
        )
        .await;
    }

    pub fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .requests()
            .into_iter()
            .map(|r| match r.query {
                Some(q) => format!("{}?{q}", r.path),
                None => r.path,
            })
            .collect();
        paths.sort();
        paths
    }
}

fn answer(
    routes: &Routes,
    log: &Arc<Mutex<Vec<Recorded>>>,
    request: axum::http::request::Parts,
    body: Vec<u8>,
) -> (
    Response,
    std::time::Duration,
    Option<tokio::sync::watch::Receiver<bool>>,
) {
    use base64::Engine as _;
    let path = request.uri.path().to_owned();
    let query = request.uri.query().map(str::to_owned);
    let mut echoed = format!(" query: {}", query.as_deref().unwrap_or(""));
    for (name, value) in &request.headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        let b64 = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
        echoed.push_str(&format!(" {name}: {value} ({b64})"));
    }
    let form_text = String::from_utf8_lossy(&body).into_owned();
    log.lock().unwrap().push(Recorded {
        method: request.method.to_string(),
        path: path.clone(),
        query: query.clone(),
        headers: request.headers.clone(),
        body,
    });
    let mut routes = routes.lock().unwrap();
    // A form POST (the AWS query protocol as StackQL sends it) routes by its form as if it
    // were the query: `/?Action=ListUsers&Version=2010-05-08`.
    let form = request
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
        .then(|| form_text.clone());
    let exact = query
        .as_ref()
        .or(form.as_ref())
        .map(|q| format!("{path}?{q}"));
    // `path|x-page-token=v` routes a request carrying that header (header-token paging).
    // `path|header=value` routes a request carrying that header value.
    let by_header = routes
        .keys()
        .filter_map(|key| {
            let (route_path, condition) = key.split_once('|')?;
            let (name, value) = condition.split_once('=')?;
            let matches = route_path == path
                && request.headers.get(name).and_then(|v| v.to_str().ok()) == Some(value);
            matches.then(|| key.clone())
        })
        .next();
    let by_method = format!("{} {path}", request.method);
    let key = [by_header, exact, Some(by_method), Some(path)]
        .into_iter()
        .flatten()
        .find(|k| routes.contains_key(k));
    let reply = key.and_then(|k| {
        let queue = routes.get_mut(&k)?;
        if queue.len() > 1 {
            queue.pop_front()
        } else {
            queue.front().cloned()
        }
    });
    let Some(reply) = reply else {
        let response = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("no route"))
            .unwrap();
        return (response, Default::default(), None);
    };
    let mut builder = Response::builder().status(reply.status);
    for (name, value) in &reply.headers {
        builder = builder.header(name, value);
    }
    let mut body = reply.body;
    if reply.echo {
        body.extend_from_slice(echoed.as_bytes());
    }
    let body = match (reply.fault, reply.taken) {
        (None, None) => Body::from(body),
        (None, Some(taken)) => {
            builder = builder.header("content-length", body.len());
            let pieces: Vec<Vec<u8>> = body.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
            Body::from_stream(futures::StreamExt::map(
                futures::stream::iter(pieces),
                move |piece| {
                    taken.fetch_add(piece.len(), std::sync::atomic::Ordering::SeqCst);
                    Ok::<_, std::io::Error>(piece)
                },
            ))
        }
        (Some(fault), _) => {
            builder = builder.header("content-length", body.len());
            let (cut, reset) = match fault {
                BodyFault::ResetAfter(n) => (n, true),
                BodyFault::StallAfter(n) => (n, false),
            };
            let head = body[..cut.min(body.len())].to_vec();
            let first = futures::stream::once(async move { Ok::<_, std::io::Error>(head) });
            let rest = futures::stream::once(async move {
                if reset {
                    // Let the first bytes go out before the connection is dropped.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "mock: connection reset mid-body",
                    ))
                } else {
                    futures::future::pending().await
                }
            });
            Body::from_stream(futures::StreamExt::chain(first, rest))
        }
    };
    (builder.body(body).unwrap(), reply.delay, reply.hold)
}
