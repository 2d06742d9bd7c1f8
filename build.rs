//! Build script: embeds `content/` (tool descriptions, instructions, prompts, resources, the
//! query library snapshot) and `migrations/` (the PostgreSQL schema), and stamps the commit
//! and build date for `server_info`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let content = manifest.join("content");
    println!("cargo:rerun-if-changed=content");
    let mut files = Vec::new();
    collect(&content, &content, &mut files);
    files.sort();
    let mut generated =
        String::from("/// Every file under `content/`: (path relative to it, text).\n");
    generated.push_str("pub(crate) static FILES: &[(&str, &str)] = &[\n");
    for (rel, abs) in &files {
        let _ = writeln!(generated, "    ({rel:?}, include_str!({abs:?})),");
    }
    generated.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    if let Err(err) = std::fs::write(out.join("content.rs"), generated) {
        panic!("cannot write the embedded content list: {err}");
    }

    embed_migrations(&manifest, &out);

    for watched in [".git/HEAD", ".git/refs/heads"] {
        if manifest.join(watched).exists() {
            println!("cargo:rerun-if-changed={watched}");
        }
    }
    let commit =
        git(&manifest, &["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=QUERYGATE_COMMIT={commit}");
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|secs| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .unwrap_or_else(std::time::SystemTime::now);
    println!(
        "cargo:rustc-env=QUERYGATE_BUILD_DATE={}",
        humantime::format_rfc3339_seconds(epoch)
    );
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let rel = rel.to_string_lossy().replace('\\', "/");
            if rel.ends_with(".md") || rel.ends_with(".json") {
                out.push((rel, path.to_string_lossy().into_owned()));
            }
        }
    }
}

/// Writes `migrations.rs`: every `migrations/<version>_<description>.sql` as (file name,
/// SQL), sorted by name. A file that does not follow the naming fails the build.
fn embed_migrations(manifest: &Path, out: &Path) {
    let dir = manifest.join("migrations");
    println!("cargo:rerun-if-changed=migrations");
    let mut names = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".sql") {
                continue;
            }
            let version = name.split('_').next().unwrap_or_default();
            if version.is_empty() || !version.chars().all(|c| c.is_ascii_digit()) {
                panic!("migrations/{name}: the name must be <digits>_<description>.sql");
            }
            names.push(name);
        }
    }
    names.sort();
    let mut generated =
        String::from("/// Every `migrations/*.sql` file: (file name, SQL), sorted by name.\n");
    generated.push_str("pub(crate) static FILES: &[(&str, &str)] = &[\n");
    for name in &names {
        let abs = dir.join(name).to_string_lossy().into_owned();
        let _ = writeln!(generated, "    ({name:?}, include_str!({abs:?})),");
    }
    generated.push_str("];\n");
    if let Err(err) = std::fs::write(out.join("migrations.rs"), generated) {
        panic!("cannot write the embedded migration list: {err}");
    }
}
