//! The accept loop: one task per connection, so a slow client (or, with TLS, a slow
//! handshake) never stalls accepting the next one. HTTP/1.1 with keep-alive over hyper.
//!
//! Bounds: at most `max_connections` connections are served at once (one more gets a `503`
//! and is closed); a client must finish the TLS handshake and send a request's headers within
//! `header_read_timeout` (else the connection is closed), which also bounds idle keep-alive
//! connections. With mTLS the verified client chain goes into every request's extensions as
//! [`PeerCertificates`].
//!
//! Stopping follows a [`Drain`]: from its start every response carries `Connection: close`;
//! once it closes, the listener is dropped and the loop waits for the open connections to
//! end by themselves (never closing one a client may be sending on), until the deadline.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tower::ServiceExt;

use super::drain::Drain;
use super::tls::Tls;
use crate::auth::PeerCertificates;

/// Connection-level bounds.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionLimits {
    /// Connections served at once; one more is answered `503` and closed.
    pub max_connections: usize,
    /// Longest a client may take to send a request's headers (and longest a keep-alive
    /// connection may sit idle).
    pub header_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 1024,
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

/// The answer to a connection over the cap.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\ncontent-type: text/plain\r\ncontent-length: 32\r\n\r\ntoo many connections; try again\n";

/// How long writing the over-capacity answer may take.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long connections still open at the drain deadline get to end after being told to.
const CUT_GRACE: Duration = Duration::from_secs(1);

/// Serves `router` on `listener` (over TLS when `tls` is set) following `drain`: until it
/// closes, then until every connection has ended or its deadline has come.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    limits: ConnectionLimits,
    drain: Drain,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let capacity = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(capacity));
    let accept = |stream: TcpStream, peer: SocketAddr| {
        let _ = stream.set_nodelay(true);
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "connection refused: {} connections open", limits.max_connections);
            tokio::spawn(refuse(stream, tls.clone()));
            return;
        };
        let router = router.clone();
        let watcher = graceful.watcher();
        let tls = tls.clone();
        let drain = drain.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let Some(tls) = tls else {
                serve_connection(stream, peer, None, router, limits, watcher, drain).await;
                return;
            };
            let handshake = tls.acceptor.accept(stream);
            match tokio::time::timeout(limits.header_read_timeout, handshake).await {
                Ok(Ok(stream)) => {
                    let certs = stream.get_ref().1.peer_certificates().map(|certs| {
                        PeerCertificates(Arc::new(
                            certs.iter().map(|c| c.clone().into_owned()).collect(),
                        ))
                    });
                    serve_connection(stream, peer, certs, router, limits, watcher, drain).await;
                }
                Ok(Err(err)) => match (&tls.refusals, refused_certificate(&err)) {
                    (Some(refusals), Some(why)) => {
                        refusals.report_handshake(peer.ip(), why).await;
                    }
                    _ => tracing::debug!(%peer, "TLS handshake failed: {err}"),
                },
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
    };
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => accept(stream, peer),
                Err(err) => {
                    // Per-connection failures (reset before accept) and resource limits
                    // (EMFILE): log, pause briefly, go on.
                    tracing::warn!("accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = drain.closed() => break,
        }
    }
    // The connections the kernel has queued already: their clients have connected and may
    // have sent a request, which closing the listener would reset. Served like the others.
    for (stream, peer) in queued(listener) {
        accept(stream, peer);
    }
    // Every slot back means every connection has ended.
    let all = u32::try_from(capacity).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => {}
        () = drain.cut_off() => {
            let open = capacity.saturating_sub(slots.available_permits());
            tracing::warn!("drain deadline: ending {open} connections still open");
            // Idle connections close now, busy ones after their response.
            let _ = tokio::time::timeout(CUT_GRACE, graceful.shutdown()).await;
        }
    }
    Ok(())
}

/// Why the handshake refused the client's certificate (none presented where one is
/// required, or one that does not verify), when that is why it failed.
fn refused_certificate(err: &std::io::Error) -> Option<String> {
    match err.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::NoCertificatesPresented => {
            Some("no client certificate was presented".to_owned())
        }
        rustls::Error::InvalidCertificate(why) => {
            Some(format!("the client certificate was refused: {why:?}"))
        }
        _ => None,
    }
}

/// Takes every connection waiting in `listener`'s queue, and closes it.
fn queued(listener: TcpListener) -> Vec<(TcpStream, SocketAddr)> {
    let Ok(listener) = listener.into_std() else {
        return Vec::new();
    };
    let mut queued = Vec::new();
    // The socket is non-blocking: `accept` answers `WouldBlock` once the queue is empty.
    while let Ok((stream, peer)) = listener.accept() {
        // An accepted socket does not inherit the listener's non-blocking mode; tokio needs it.
        match stream
            .set_nonblocking(true)
            .and_then(|()| TcpStream::from_std(stream))
        {
            Ok(stream) => queued.push((stream, peer)),
            Err(err) => tracing::warn!(%peer, "a queued connection was lost: {err}"),
        }
    }
    queued
}

async fn serve_connection<I>(
    io: I,
    peer: SocketAddr,
    certs: Option<PeerCertificates>,
    router: Router,
    limits: ConnectionLimits,
    watcher: hyper_util::server::graceful::Watcher,
    drain: Drain,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = router
        .map_request(move |mut request: http::Request<Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            if let Some(certs) = &certs {
                request.extensions_mut().insert(certs.clone());
            }
            request
        })
        .map_response(move |mut response: axum::response::Response| {
            // Draining: the client learns with this response that the connection ends
            // after it (hyper closes it once the response is written).
            if drain.is_draining() {
                response.headers_mut().insert(
                    http::header::CONNECTION,
                    http::HeaderValue::from_static("close"),
                );
            }
            response
        });
    let service = TowerToHyperService::new(service);
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), service);
    if let Err(err) = watcher.watch(connection).await {
        tracing::debug!(%peer, "connection ended: {err}");
    }
}

/// Answers `503` on a connection over the cap (after the handshake, with TLS) and closes it.
async fn refuse(stream: TcpStream, tls: Option<Tls>) {
    let _ = tokio::time::timeout(REFUSE_TIMEOUT, async {
        match tls {
            None => write_refusal(stream).await,
            Some(tls) => write_refusal(tls.acceptor.accept(stream).await?).await,
        }
    })
    .await;
}

async fn write_refusal<S: AsyncWrite + Unpin>(mut stream: S) -> std::io::Result<()> {
    stream.write_all(OVER_CAPACITY).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn queued_connections_are_taken_as_non_blocking_sockets() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let clients: Vec<_> = (0..3)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        // An accepted socket left blocking is refused by tokio's registration check (debug
        // builds panic; release builds would run a blocking socket on the runtime).
        let queued = queued(listener);
        assert_eq!(queued.len(), clients.len());
    }
}
