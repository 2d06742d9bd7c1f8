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
}

/// What a route answers.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub headers: Vec<(String, String)>,
    pub delay: std::time::Duration,
}

impl Reply {
    pub fn json(body: serde_json::Value) -> Self {
        Reply {
            status: 200,
            body: body.to_string(),
            headers: Vec::new(),
            delay: Default::default(),
        }
    }
    pub fn status(status: u16, body: &str) -> Self {
        Reply {
            status,
            body: body.to_owned(),
            headers: Vec::new(),
            delay: Default::default(),
        }
    }
    pub fn delayed(mut self, delay: std::time::Duration) -> Self {
        self.delay = delay;
        self
    }
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

type Routes = Arc<Mutex<HashMap<String, Reply>>>;

/// The mock server. Routes are keyed by path plus query (`/a?b=c`), by path plus the
/// `x-page-token` header (`/a|x-page-token=t`), or by path alone.
pub struct Mock {
    addr: SocketAddr,
    routes: Routes,
    log: Arc<Mutex<Vec<Recorded>>>,
}

impl Mock {
    pub async fn start() -> Self {
        let routes: Routes = Arc::default();
        let log: Arc<Mutex<Vec<Recorded>>> = Arc::default();
        let (r, l) = (routes.clone(), log.clone());
        let app = Router::new().fallback(move |request: Request<Body>| {
            let (routes, log) = (r.clone(), l.clone());
            async move {
                let (response, delay) = answer(&routes, &log, request);
                tokio::time::sleep(delay).await;
                response
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mock { addr, routes, log }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers `key` (a path, or path?query for an exact query match) with `reply`.
    pub fn route(&self, key: &str, reply: Reply) {
        self.routes.lock().unwrap().insert(key.to_owned(), reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
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
    request: Request<Body>,
) -> (Response, std::time::Duration) {
    let path = request.uri().path().to_owned();
    let query = request.uri().query().map(str::to_owned);
    log.lock().unwrap().push(Recorded {
        method: request.method().to_string(),
        path: path.clone(),
        query: query.clone(),
        headers: request.headers().clone(),
    });
    let routes = routes.lock().unwrap();
    let exact = query.as_ref().map(|q| format!("{path}?{q}"));
    // `path|x-page-token=v` routes a request carrying that header (header-token paging).
    let by_header = request
        .headers()
        .get("x-page-token")
        .and_then(|v| v.to_str().ok())
        .map(|v| format!("{path}|x-page-token={v}"));
    let reply = by_header
        .and_then(|k| routes.get(&k))
        .or_else(|| exact.and_then(|k| routes.get(&k)))
        .or_else(|| routes.get(&path));
    let Some(reply) = reply else {
        let response = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("no route"))
            .unwrap();
        return (response, Default::default());
    };
    let mut builder = Response::builder()
        .status(reply.status)
        .header("content-type", "application/json");
    for (name, value) in &reply.headers {
        builder = builder.header(name, value);
    }
    (
        builder.body(Body::from(reply.body.clone())).unwrap(),
        reply.delay,
    )
}
