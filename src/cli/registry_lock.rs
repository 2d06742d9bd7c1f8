//! `querygate registry lock`: the provider lock of what the local registry holds, written to
//! `registry.lock_file`, or (`--check`) the registry compared with it.

use std::time::Instant;

use crate::config::Config;
use crate::engine::lock::ProviderLock;

/// Writes the lock (exit 0), or with `check` compares the registry with it: 0 when they
/// agree, 1 naming the first difference (or when there is no lock), 2 when it cannot be
/// read or written.
pub(super) fn run(config: &Config, check: bool) -> i32 {
    let started = Instant::now();
    let checker = crate::http::ready::lock_checker(config);
    let lock_file = checker.lock_file().to_owned();
    if check {
        return match checker.check() {
            Ok(true) => {
                eprintln!(
                    "the registry holds what {} says (checked in {:.2} s)",
                    lock_file.display(),
                    started.elapsed().as_secs_f64()
                );
                0
            }
            Ok(false) => {
                eprintln!(
                    "error: there is no provider lock at {}",
                    lock_file.display()
                );
                1
            }
            Err(err) => {
                eprintln!(
                    "error: the registry differs from its provider lock: {}",
                    super::said(&err.0)
                );
                1
            }
        };
    }
    let src = config.engine.registry_root.join("src");
    let lock = match ProviderLock::of_installed(&src) {
        Ok(lock) => lock,
        Err(err) => {
            eprintln!("error: {}", super::said(&err.0));
            return 2;
        }
    };
    if let Err(err) = lock.write(&lock_file) {
        eprintln!("error: {}", super::said(&err.0));
        return 2;
    }
    let documents: usize = lock.providers.values().map(|p| p.documents.len()).sum();
    eprintln!(
        "wrote {}: {} provider versions, {documents} documents ({:.2} s)",
        lock_file.display(),
        lock.providers.len(),
        started.elapsed().as_secs_f64()
    );
    0
}
