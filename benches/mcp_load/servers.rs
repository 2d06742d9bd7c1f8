//! The servers, each on its own named thread with a single-threaded runtime: the whole
//! querygate app, the bare rmcp handler and the mock upstream.

use super::*;

pub(crate) struct Background {
    pub(crate) name: &'static str,
    pub(crate) addr: SocketAddr,
    /// `http` or `https`.
    pub(crate) scheme: &'static str,
    /// A bearer token sent with every request.
    pub(crate) token: Option<String>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) thread: Option<JoinHandle<()>>,
    pub(crate) done: mpsc::Receiver<()>,
}

impl Background {
    /// Binds 127.0.0.1:0 on a thread named `name` and serves what `make` builds there.
    pub(crate) fn start<F>(name: &'static str, make: F) -> Result<Background>
    where
        F: FnOnce(SocketAddr, CancellationToken) -> Result<axum::Router> + Send + 'static,
    {
        Self::spawn(name, move |stop, ready| async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let router = make(addr, stop.clone())?;
            ready
                .send(Ok(addr))
                .map_err(|_| anyhow!("benchmark went away"))?;
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await?;
            Ok(())
        })
    }

    /// Runs the [`App`] that `make` builds on a thread named `name`.
    pub(crate) fn start_app<F, Fut>(name: &'static str, make: F) -> Result<Background>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<App>>,
    {
        Self::spawn(name, move |stop, ready| async move {
            let app = make().await?;
            ready
                .send(Ok(app.local_addr()))
                .map_err(|_| anyhow!("benchmark went away"))?;
            app.run_until(async move { stop.cancelled().await }).await?;
            Ok(())
        })
    }

    /// Runs `serve` on a thread named `name` with a single-threaded runtime; `serve` reports
    /// its address through the sender once it accepts connections.
    pub(crate) fn spawn<F, Fut>(name: &'static str, serve: F) -> Result<Background>
    where
        F: FnOnce(CancellationToken, mpsc::Sender<Result<SocketAddr>>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>>,
    {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr>>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                let failed = ready_tx.clone();
                let served = (|| -> Result<()> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .thread_name(name)
                        .enable_all()
                        .build()?;
                    rt.block_on(serve(stop, ready_tx))
                })();
                if let Err(err) = served
                    && failed.send(Err(anyhow!("{err:#}"))).is_err()
                {
                    eprintln!("{name} stopped: {err:#}");
                }
                let _ = done_tx.send(());
            })?;
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(30))
            .with_context(|| format!("{name} did not start"))??;
        Ok(Background {
            name,
            addr,
            scheme: "http",
            token: None,
            shutdown,
            thread: Some(thread),
            done: done_rx,
        })
    }

    pub(crate) fn stop(mut self) {
        self.shutdown.cancel();
        if self.done.recv_timeout(Duration::from_secs(3)).is_ok()
            && let Some(thread) = self.thread.take()
        {
            let _ = thread.join();
        }
    }
}

/// The whole `querygate serve`, built by [`App`] as the CLI builds it.
pub(crate) async fn full_app(config_path: &Path) -> Result<App> {
    let config = Config::load(&Sources {
        file: Some(config_path.to_owned()),
        env: Default::default(),
    })?;
    // As `serve` does before it builds the app (`database.migrate_on_start`).
    querygate::db::migrate_on_start(&config.database).await?;
    Ok(App::build(config).await?)
}

/// rmcp alone: querygate's tool list, and for any call the `server_info` result querygate
/// gave, precomputed; served as `querygate::http::mcp::service` serves querygate. What it costs is rmcp's
/// own handling of the same call, answered with the same bytes.
#[derive(Clone, Debug)]
pub(crate) struct Bare {
    pub(crate) tools: Arc<Vec<Tool>>,
    pub(crate) reply: Arc<CallToolResult>,
}

impl ServerHandler for Bare {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(self.reply.as_ref().clone().into())
    }
}

pub(crate) fn bare_router(
    addr: SocketAddr,
    shutdown: CancellationToken,
    tools: Vec<Tool>,
    reply: CallToolResult,
) -> Result<axum::Router> {
    let bare = Bare {
        tools: Arc::new(tools),
        reply: Arc::new(reply),
    };
    // The same settings as querygate::http::mcp::service.
    let defaults = Config::load(&Sources::default())?;
    let config = querygate::http::mcp::transport_config(&defaults.server, addr, shutdown);
    let service = StreamableHttpService::new(
        move || Ok(bare.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    Ok(axum::Router::new().nest_service("/mcp", service))
}

/// The mock upstream: `GET /items` answers 100 rows of the fixture's item schema.
pub(crate) fn mock_router(_addr: SocketAddr, _shutdown: CancellationToken) -> Result<axum::Router> {
    let rows: Vec<Value> = (0..ROWS)
        .map(|i| {
            json!({
                "id": 9_007_199_254_740_993_u64 + i as u64,
                "seq": i,
                "name": format!("item-{i:04}"),
                "group": format!("group-{:02}", i % 20),
                "size": (i * 37) % 1000,
                "active": i % 3 == 0,
                "score": i as f64 / 7.0,
                "created_at": "2026-01-02T03:04:05Z",
                "owner": {"login": format!("user{}", i % 9), "id": i % 9},
                "tags": ["a", "b"]
            })
        })
        .collect();
    let body = Bytes::from(serde_json::to_vec(&rows)?);
    Ok(axum::Router::new().route(
        "/items",
        axum::routing::get(move || {
            let body = body.clone();
            async move { ([(header::CONTENT_TYPE, "application/json")], body) }
        }),
    ))
}
