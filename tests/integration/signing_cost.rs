//! What verifying signatures costs: every document of the current StackQL registry
//! (`QUERYGATE_COMPAT_REGISTRY`'s `current/`, whose copy has no `.sig` files, so a root made
//! here signs them) verified once, one provider version at a time as `registry pull`
//! verifies a package, trusting StackQL's certificate and the test root (StackQL's is tried
//! first, as in a deployment with one private root). Ignored: a measurement. Run it with
//! `QUERYGATE_COMPAT_REGISTRY=/work/shared/providers cargo test --test integration -- --ignored --nocapture signing_cost`.

use std::path::Path;
use std::time::Instant;

use crate::support::current::current_registry;
use crate::support::signing::Signer;

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            files(&entry.path(), out);
        } else {
            out.push(entry.path());
        }
    }
}

#[test]
#[ignore = "a measurement: prints the time to verify the whole current registry"]
fn verify_the_whole_current_registry_once() {
    let Some(root) = current_registry(&["src/"]) else {
        return;
    };
    let src = root.path().join("src");
    let signer = Signer::current("measurement");
    let mut documents = Vec::new();
    files(&src, &mut documents);
    let mut bytes = 0u64;
    for doc in &documents {
        let body = std::fs::read(doc).unwrap();
        bytes += body.len() as u64;
        let mut sig = doc.clone().into_os_string();
        sig.push(".sig");
        std::fs::write(sig, signer.sign(&body)).unwrap();
    }
    let trusted = [signer.cert_path().to_owned()];
    let mut versions = Vec::new();
    for provider in std::fs::read_dir(&src).unwrap().flatten() {
        for version in std::fs::read_dir(provider.path()).unwrap().flatten() {
            versions.push(version.path());
        }
    }
    versions.sort();
    let started = Instant::now();
    let mut verified = 0;
    for version in &versions {
        let name = version.file_name().unwrap().to_string_lossy().into_owned();
        verified += querygate::engine::verify_folder(version, &name, &trusted).unwrap();
    }
    let elapsed = started.elapsed();
    assert_eq!(verified, documents.len());
    println!(
        "signing_cost: verified {verified} documents ({:.1} MB) of {} provider versions in {:.2?} ({:.0} MB/s, {:.0} µs per document)",
        bytes as f64 / 1e6,
        versions.len(),
        elapsed,
        bytes as f64 / 1e6 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / verified as f64
    );
}
