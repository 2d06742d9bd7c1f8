//! What the test modules share. Here: engines over the test registry, wired to a mock
//! upstream; the querygate binary with a clean environment; the one rule for "under CI"
//! ([`required`]). Modules: `audited`: an in-process server audited by the test's sink;
//! `corpus`: engines over the real provider documents; `current`: engines over the current
//! registry; `fleet`: replicas behind nginx; `gate`: statements of each class and approving
//! clients; `identity`: PKI, JWT signing keys, a JWKS server and identity clients; `oob`:
//! out-of-band approvals driven through the API and a webhook receiver; `packages`: registry
//! packages; `pg`: PostgreSQL for tests; `pipeline`: tool calls handed to the pipeline
//! directly; `ports`: ports for servers that restart on the same port; `quota_calls`: raw
//! SQL calls and their error codes; `raw`: raw `tools/call` requests over HTTP; `served`: the
//! binary as a served process; `signing`: signing roots made at test time, which sign
//! registry packages; `sigv4`: SigV4 checked; `stdio`: the server as a raw stdio process;
//! `wait`: bounded waits for events.

pub mod audited;
pub mod corpus;
pub mod current;
pub mod fleet;
pub mod gate;
pub mod identity;
pub mod oob;
pub mod packages;
pub mod pg;
pub mod pipeline;
pub mod ports;
pub mod quota_calls;
pub mod raw;
pub mod served;
pub mod signing;
pub mod sigv4;
pub mod stdio;
pub mod tasks;
pub mod wait;

use std::path::PathBuf;
use std::sync::Arc;

use querygate::engine::{
    Cell, CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings, QueryOutput,
};

use crate::mock::Mock;

/// The planted secret: it must never appear in any output or error.
pub const SECRET: &str = "tk-planted-secret-0451";

/// The querygate binary with an empty environment but `PATH`, so that no `QUERYGATE_*`
/// variable of the machine running the tests reaches it.
pub fn querygate_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_querygate"));
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    cmd
}

/// The name of this process's uid in the user database (`id -un`): who a local session
/// or the CLI's approver is, whatever `$USER` says.
pub fn uid_user() -> String {
    let out = std::process::Command::new("id")
        .arg("-un")
        .output()
        .unwrap();
    assert!(out.status.success(), "id -un failed");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

pub fn fixture_registry() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/registry")
}

pub fn context() -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed([(
            "TESTAPI_KEY".to_owned(),
            SECRET.to_owned(),
        )])),
        ..ExecContext::anonymous_default()
    }
}

/// An engine over the fixture registry whose `testapi` provider calls `mock`.
pub fn engine(mock: &Mock) -> Engine {
    engine_with(mock, |_| {})
}

pub fn engine_with(mock: &Mock, tweak: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = EngineConfig::new(fixture_registry());
    // Retries as in production, with short waits.
    config.upstream.retry.initial_backoff = std::time::Duration::from_millis(10);
    upstream_at(&mut config, "testapi", mock.url());
    tweak(&mut config);
    Engine::new(config).expect("engine")
}

/// Points `provider` of `config` at `base_url` (a mock upstream), with default settings
/// otherwise.
pub fn upstream_at(config: &mut EngineConfig, provider: &str, base_url: String) {
    config.providers.insert(
        provider.to_owned(),
        ProviderSettings {
            base_url: Some(base_url),
            ..Default::default()
        },
    );
}

pub async fn query(engine: &Engine, sql: &str) -> QueryOutput {
    match engine.execute(&context(), sql).await {
        Ok(out) => out,
        Err(err) => panic!("query failed: {sql}\n{err}"),
    }
}

pub async fn query_err(engine: &Engine, sql: &str) -> querygate::engine::Error {
    match engine.execute(&context(), sql).await {
        Ok(out) => panic!("expected an error for {sql}, got {out:?}"),
        Err(err) => {
            assert!(
                !err.to_string().contains(SECRET),
                "secret leaked in error: {err}"
            );
            err
        }
    }
}

pub fn text(s: &str) -> Cell {
    Cell::Text(s.to_owned())
}

pub fn int(i: i64) -> Cell {
    Cell::Integer(i)
}

/// The values of one column.
pub fn column(out: &QueryOutput, name: &str) -> Vec<Cell> {
    let index = out
        .columns
        .iter()
        .position(|c| c == name)
        .unwrap_or_else(|| panic!("no column {name} in {:?}", out.columns));
    out.rows.iter().map(|r| r[index].clone()).collect()
}

/// Whether a missing prerequisite must fail the test (CI) rather than skip it.
pub fn required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The registry of real StackQL provider documents (`QUERYGATE_COMPAT_REGISTRY`), or `None`
/// (with a note) when it is not set and we are not under CI: under CI the tests that need it
/// fail instead of skipping (`scripts/test.sh` sets it to `../shared/providers`).
pub fn compat_registry() -> Option<std::path::PathBuf> {
    match std::env::var("QUERYGATE_COMPAT_REGISTRY") {
        Ok(root) if !root.is_empty() => Some(std::path::PathBuf::from(root)),
        _ if required() => panic!(
            "QUERYGATE_COMPAT_REGISTRY is not set: under CI the tests over real provider documents must run"
        ),
        _ => {
            eprintln!(
                "QUERYGATE_COMPAT_REGISTRY is not set: skipping a test over real provider documents"
            );
            None
        }
    }
}

/// A registry of one provider `id` (v1) whose one service, `things`, has `GET /things` (an
/// array of objects with an `id`) and the resource `<id>.things.things`; `resource` is the
/// rest of that resource's YAML (its `config`, `methods` and `sqlVerbs`, indented six spaces).
pub fn things_registry(id: &str, resource: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(format!("src/{id}/v1"));
    std::fs::create_dir_all(root.join("services")).unwrap();
    std::fs::write(
        root.join("provider.yaml"),
        format!("id: {id}\nname: {id}\nversion: v1\nproviderServices:\n  things:\n    id: things:v1\n    name: things\n    service:\n      $ref: {id}/v1/services/things.yaml\n"),
    )
    .unwrap();
    std::fs::write(
        root.join("services/things.yaml"),
        format!(
            r#"openapi: 3.0.3
info: {{title: things, version: v1}}
servers: [{{url: 'https://things.example'}}]
paths:
  /things:
    get:
      responses:
        '200':
          description: OK
          content:
            application/json:
              schema: {{type: array, items: {{type: object, properties: {{id: {{type: string}}}}}}}}
components:
  x-stackQL-resources:
    things:
      id: {id}.things.things
      name: things
      title: things
{resource}"#
        ),
    )
    .unwrap();
    dir
}
