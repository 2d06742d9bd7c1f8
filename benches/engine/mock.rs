//! The in-process mock upstream on 127.0.0.1, on a thread of its own, serving the pages.

use super::*;

pub(crate) struct Mock {
    pub(crate) port: u16,
    pub(crate) tid: u32,
    pub(crate) shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    pub(crate) done: mpsc::Receiver<()>,
    pub(crate) thread: Option<JoinHandle<()>>,
}

#[derive(Clone)]
pub(crate) struct Pages {
    pub(crate) bodies: Arc<Vec<Bytes>>,
    pub(crate) links: Arc<Vec<Option<HeaderValue>>>,
}

#[derive(serde::Deserialize)]
pub(crate) struct PageQuery {
    pub(crate) page: Option<usize>,
}

pub(crate) async fn serve_page(
    State(pages): State<Pages>,
    Query(query): Query<PageQuery>,
) -> Response {
    let index = query.page.unwrap_or(1);
    let Some(body) = index.checked_sub(1).and_then(|i| pages.bodies.get(i)) else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    let mut response = (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.clone(),
    )
        .into_response();
    if let Some(Some(link)) = pages.links.get(index - 1) {
        response.headers_mut().insert(header::LINK, link.clone());
    }
    response
}

impl Mock {
    pub(crate) fn start(
        bodies: Vec<Bytes>,
        arm_bodies: Vec<Bytes>,
        s3_bodies: Vec<Bytes>,
    ) -> Result<Mock> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(u16, u32)>>();
        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("bench-mock".into())
            .spawn(move || {
                let served = mock_thread(bodies, arm_bodies, s3_bodies, &ready_tx, shutdown_rx);
                if let Err(err) = served {
                    // Start-up errors reach `start`; later ones are only printed.
                    if ready_tx.send(Err(anyhow!("{err:#}"))).is_err() {
                        eprintln!("mock upstream stopped: {err:#}");
                    }
                }
                let _ = done_tx.send(());
            })?;
        let (port, tid) = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .context("mock upstream did not start")??;
        Ok(Mock {
            port,
            tid,
            shutdown: Some(shutdown_tx),
            done: done_rx,
            thread: Some(thread),
        })
    }

    pub(crate) fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // Bounded: if a client still holds a keep-alive connection we do not wait for it.
        if self.done.recv_timeout(Duration::from_secs(3)).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// `bodies` as the pages of `path`, each linked to the next with `Link: <…>; rel="next"`.
pub(crate) fn linked_pages(port: u16, path: &str, bodies: Vec<Bytes>) -> Result<Pages> {
    let count = bodies.len();
    let links = (1..=count)
        .map(|n| {
            (n < count)
                .then(|| {
                    HeaderValue::from_str(&format!(
                        "<http://127.0.0.1:{port}{path}?page={}>; rel=\"next\"",
                        n + 1
                    ))
                })
                .transpose()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Pages {
        bodies: Arc::new(bodies),
        links: Arc::new(links),
    })
}

/// An S3 ListObjectsV2 page: the first, or the one `continuation-token=page-N` names.
pub(crate) async fn serve_s3_page(
    State(pages): State<Arc<Vec<Bytes>>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let index = match query.get("continuation-token") {
        None => Some(1),
        Some(token) => token
            .strip_prefix("page-")
            .and_then(|n| n.parse::<usize>().ok()),
    };
    let Some(body) = index
        .and_then(|n| n.checked_sub(1))
        .and_then(|i| pages.get(i))
    else {
        return (StatusCode::NOT_FOUND, "no such page").into_response();
    };
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        )],
        body.clone(),
    )
        .into_response()
}

pub(crate) fn mock_thread(
    bodies: Vec<Bytes>,
    arm_bodies: Vec<Bytes>,
    s3_bodies: Vec<Bytes>,
    ready: &mpsc::Sender<Result<(u16, u32)>>,
    shutdown: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let tid = current_tid()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let s3_pages = Arc::new(s3_bodies);
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let app = axum::Router::new()
            .route("/s3", axum::routing::get(serve_s3_page))
            .with_state(s3_pages)
            .route("/items", axum::routing::get(serve_page))
            .with_state(linked_pages(port, "/items", bodies)?)
            .merge(
                axum::Router::new()
                    .route("/arm", axum::routing::get(serve_page))
                    .with_state(linked_pages(port, "/arm", arm_bodies)?),
            );
        ready
            .send(Ok((port, tid)))
            .map_err(|_| anyhow!("benchmark went away"))?;
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown.await;
            })
            .await?;
        Ok(())
    })
}

// ---------------------------------------------------------------------------------------
// CPU accounting
// ---------------------------------------------------------------------------------------
