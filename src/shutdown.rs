//! Process signals that stop the server: Ctrl-C (SIGINT) or SIGTERM. The first starts the
//! drain (`server.drain`); a second ends it at once.

use std::future::Future;

/// The first and the second Ctrl-C or SIGTERM from now on, as two futures. The signal
/// handlers are installed before this returns, so a signal sent once the caller has
/// announced itself is never missed (nor does it kill the process).
pub fn first_and_second() -> (
    impl Future<Output = ()> + Send + 'static,
    impl Future<Output = ()> + Send + 'static,
) {
    let mut signals = Signals::install();
    let (count, seen) = tokio::sync::watch::channel(0u8);
    tokio::spawn(async move {
        for n in 1..=2 {
            signals.next().await;
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

/// Installed handlers for SIGINT and SIGTERM.
struct Signals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Signals {
                interrupt: signal(SignalKind::interrupt()).ok(),
                terminate: signal(SignalKind::terminate()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Signals {}
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn on(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            if self.interrupt.is_none() && self.terminate.is_none() {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
            tokio::select! {
                () = on(&mut self.interrupt) => {}
                () = on(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
