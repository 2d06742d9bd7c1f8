//! `server:` — the MCP server of `querygate serve` and `querygate stdio`.

use std::time::Duration;

use serde::Deserialize;

use super::Render;
use super::problems::{GIB, HOUR, Problems};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawServer {
    pub(super) listen: String,
    pub(super) allowed_hosts: Option<Vec<String>>,
    pub(super) allowed_origins: Vec<String>,
    pub(super) max_request_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub(super) call_timeout: Duration,
    pub(super) render: Render,
    pub(super) max_rows: usize,
    pub(super) enabled_tools: Option<Vec<String>>,
    pub(super) enabled_prompts: Option<Vec<String>>,
    pub(super) enabled_resources: Option<Vec<String>>,
    pub(super) disable_instructions: bool,
    pub(super) query_library_url: Option<String>,
    pub(super) tls: Option<super::identity::RawTls>,
    pub(super) allow_unauthenticated: bool,
    pub(super) max_connections: usize,
    #[serde(with = "humantime_serde")]
    pub(super) header_read_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) body_read_timeout: Duration,
    pub(super) max_in_flight: usize,
    pub(super) admin_listen: Option<String>,
    pub(super) drain: RawDrain,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawDrain {
    #[serde(with = "humantime_serde")]
    pub(super) delay: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub(super) timeout: Duration,
}

impl Default for RawDrain {
    fn default() -> Self {
        RawDrain {
            delay: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            listen: DEFAULT_LISTEN.to_string(),
            allowed_hosts: None,
            allowed_origins: Vec::new(),
            max_request_bytes: 4 * 1024 * 1024,
            call_timeout: Duration::from_secs(120),
            render: Render::Markdown,
            max_rows: 1000,
            enabled_tools: None,
            enabled_prompts: None,
            enabled_resources: None,
            disable_instructions: false,
            query_library_url: None,
            tls: None,
            allow_unauthenticated: false,
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_in_flight: 1024,
            admin_listen: None,
            drain: RawDrain::default(),
        }
    }
}

/// MCP server settings. Name allowlists are checked against what the server offers when it
/// starts (an unknown name is an error there).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The address `querygate serve` binds, resolved when the configuration is loaded (a
    /// host name such as `localhost:8765` becomes its address; port 0 picks a free port).
    pub listen: std::net::SocketAddr,
    /// `Host` header values accepted; `None`: loopback names with the listen port.
    pub allowed_hosts: Option<Vec<String>>,
    /// `Origin` header values accepted (browsers); empty: requests with an `Origin` header
    /// are refused unless it is a loopback origin.
    pub allowed_origins: Vec<String>,
    /// Largest request body accepted.
    pub max_request_bytes: usize,
    /// Longest a tool call may run.
    pub call_timeout: Duration,
    /// Default text rendering of tool results.
    pub render: Render,
    /// Rows a tool result carries at most, whatever `row_limit` the model asks for.
    pub max_rows: usize,
    /// Tools offered (`None`: all).
    pub enabled_tools: Option<Vec<String>>,
    /// Prompts offered (`None`: all).
    pub enabled_prompts: Option<Vec<String>>,
    /// Resources offered, by name (`None`: all).
    pub enabled_resources: Option<Vec<String>>,
    /// Whether to leave the server instructions out.
    pub disable_instructions: bool,
    /// Base URL of a remote query library index (`<base>/manifest.json`, `index.json`,
    /// `queries/<id>.json`); `None`: the embedded snapshot only.
    pub query_library_url: Option<String>,
    /// HTTPS (and mTLS); `None`: plain HTTP.
    pub tls: Option<super::TlsConfig>,
    /// Whether a non-loopback `listen` may serve without authentication.
    pub allow_unauthenticated: bool,
    /// Connections served at once; one more is answered 503.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers (also the keep-alive idle bound).
    pub header_read_timeout: std::time::Duration,
    /// Longest a client may take to send a request's body (then 408).
    pub body_read_timeout: std::time::Duration,
    /// Requests handled at once over all connections; more wait.
    pub max_in_flight: usize,
    /// The address of the admin listener (plain HTTP, no authentication: `/healthz`,
    /// `/readyz`), resolved at load; `None`: no admin listener.
    pub admin_listen: Option<std::net::SocketAddr>,
    /// What SIGTERM does.
    pub drain: DrainConfig,
}

/// `server.drain`: the stop sequence after SIGTERM (or Ctrl-C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainConfig {
    /// How long new connections are still accepted after the signal, while `/readyz`
    /// answers 503, so that load balancers stop sending before the listener closes;
    /// `None` (not configured): [`DrainConfig::delay_for`] decides by the listen address.
    pub delay: Option<Duration>,
    /// How long requests in flight may take to finish once the listener is closed; what
    /// is still running then is cut.
    pub timeout: Duration,
}

/// The drain delay when `server.drain.delay` is not set and the server listens on an
/// address other than loopback.
pub const DEFAULT_DRAIN_DELAY: Duration = Duration::from_secs(5);

impl DrainConfig {
    /// The delay the server waits for when listening on `listen`: the configured one, else
    /// [`DEFAULT_DRAIN_DELAY`], or none on a loopback address (no load balancer reaches it
    /// there, so Ctrl-C on a local server stops at once).
    pub fn delay_for(&self, listen: std::net::SocketAddr) -> Duration {
        match self.delay {
            Some(delay) => delay,
            None if listen.ip().is_loopback() => Duration::ZERO,
            None => DEFAULT_DRAIN_DELAY,
        }
    }
}

impl Default for DrainConfig {
    fn default() -> Self {
        let raw = RawDrain::default();
        DrainConfig {
            delay: raw.delay,
            timeout: raw.timeout,
        }
    }
}

/// The largest `server.max_request_bytes`.
const MAX_REQUEST_BYTES: u64 = GIB;
/// The longest `server.call_timeout`.
const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * HOUR.as_secs());
/// The longest `server.drain.delay` and `server.drain.timeout`.
const MAX_DRAIN: Duration = Duration::from_secs(HOUR.as_secs());
/// The largest `server.max_rows`.
const MAX_ROWS: u64 = 1_000_000;

/// `server.listen` when none is given.
pub const DEFAULT_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8765);

/// A listen address: `ip:port` (`[::1]:8765` for IPv6), or `host:port` with the host name
/// resolved (`localhost:8765`), taking its first IPv4 address, else its first address. `None`
/// when it is neither.
fn resolve_listen(listen: &str) -> Option<std::net::SocketAddr> {
    if let Ok(addr) = listen.parse() {
        return Some(addr);
    }
    let resolved: Vec<std::net::SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(listen)
        .ok()?
        .collect();
    resolved
        .iter()
        .find(|addr| addr.is_ipv4())
        .or(resolved.first())
        .copied()
}

/// Whether two listen addresses would take the same port (port 0 picks a free one).
fn overlaps(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Checks `server:`.
pub(super) fn check_server(mut raw: RawServer, problems: &mut Problems) -> ServerConfig {
    let tls = super::identity::check_tls(raw.tls.take(), problems);
    problems.in_range(
        "server.max_connections",
        raw.max_connections as u64,
        1_000_000,
    );
    problems.in_range("server.max_in_flight", raw.max_in_flight as u64, 1_000_000);
    for (key, value) in [
        ("server.header_read_timeout", raw.header_read_timeout),
        ("server.body_read_timeout", raw.body_read_timeout),
    ] {
        problems.duration_in_range(key, value, MAX_CALL_TIMEOUT);
    }
    let listen = resolve_listen(&raw.listen);
    if listen.is_none() {
        problems.push(
            "server.listen",
            format!(
                "'{}' is not an address such as 127.0.0.1:8765 or localhost:8765",
                raw.listen.escape_debug()
            ),
        );
    }
    let admin_listen = raw.admin_listen.as_deref().and_then(|admin| {
        match resolve_listen(admin) {
            None => problems.push(
                "server.admin_listen",
                format!(
                    "'{}' is not an address such as 127.0.0.1:9090 or localhost:9090",
                    admin.escape_debug()
                ),
            ),
            Some(addr) if listen.is_some_and(|listen| overlaps(listen, addr)) => problems.push(
                "server.admin_listen",
                format!(
                    "'{admin}' is the address of server.listen; the admin listener needs a port of its own"
                ),
            ),
            Some(addr) => return Some(addr),
        }
        None
    });
    if let Some(delay) = raw.drain.delay
        && delay > MAX_DRAIN
    {
        problems.push(
            "server.drain.delay",
            format!(
                "{} is more than the longest allowed, {}",
                humantime::format_duration(delay),
                humantime::format_duration(MAX_DRAIN)
            ),
        );
    }
    problems.duration_in_range("server.drain.timeout", raw.drain.timeout, MAX_DRAIN);
    problems.in_range(
        "server.max_request_bytes",
        raw.max_request_bytes as u64,
        MAX_REQUEST_BYTES,
    );
    problems.duration_in_range("server.call_timeout", raw.call_timeout, MAX_CALL_TIMEOUT);
    problems.in_range("server.max_rows", raw.max_rows as u64, MAX_ROWS);
    if let Some(url) = &raw.query_library_url {
        problems.url("server.query_library_url", url, &["http", "https"]);
    }
    ServerConfig {
        // With a problem recorded the configuration is refused; the value is never used.
        listen: listen.unwrap_or(DEFAULT_LISTEN),
        allowed_hosts: raw.allowed_hosts,
        allowed_origins: raw.allowed_origins,
        max_request_bytes: raw.max_request_bytes,
        call_timeout: raw.call_timeout,
        render: raw.render,
        max_rows: raw.max_rows,
        enabled_tools: raw.enabled_tools,
        enabled_prompts: raw.enabled_prompts,
        enabled_resources: raw.enabled_resources,
        disable_instructions: raw.disable_instructions,
        query_library_url: raw.query_library_url,
        tls,
        allow_unauthenticated: raw.allow_unauthenticated,
        max_connections: raw.max_connections,
        header_read_timeout: raw.header_read_timeout,
        body_read_timeout: raw.body_read_timeout,
        max_in_flight: raw.max_in_flight,
        admin_listen,
        drain: DrainConfig {
            delay: raw.drain.delay,
            timeout: raw.drain.timeout,
        },
    }
}
