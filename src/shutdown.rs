//! Process signals that stop the server: Ctrl-C (SIGINT) or SIGTERM. The first starts the
//! drain (`server.drain`); a second ends it at once.

use std::future::Future;

/// The first and the second Ctrl-C or SIGTERM from now on, as two futures.
pub fn first_and_second() -> (
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
) {
    let (count, seen) = tokio::sync::watch::channel(0u8);
    tokio::spawn(async move {
        for n in 1..=2 {
            signal().await;
            if count.send(n).is_err() {
                return;
            }
        }
    });
    let nth = move |n: u8| {
        let mut seen = seen.clone();
        async move {
            // An error means the counting task ended: no more signals are coming.
            if seen.wait_for(|count| *count >= n).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    };
    (nth(1), nth(2))
}

/// Resolves on the first Ctrl-C or SIGTERM.
pub async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
