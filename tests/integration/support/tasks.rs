//! What the tests of MCP tasks share: a provider whose EXEC starts a long-running operation
//! (a `JobOperation`, polled at its `selfLink`), the mock upstream's routes for it, and raw
//! MCP 2026-07-28 JSON-RPC requests that declare (or not) the tasks extension, as the
//! extension's spec gives them (the Python SDK the tests install has no client side for it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::mock::{Mock, Reply};
use crate::support::wait::eventually;

/// The extension's id.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The EXEC that starts job `job` and waits for its operation.
pub fn exec_sql(job: &str) -> String {
    format!("EXEC /*+ AWAIT */ opsapi.jobs.jobs.run @project = 'p1', @job = '{job}'")
}

/// The path the EXEC of `job` is sent to.
pub fn run_path(job: &str) -> String {
    format!("/projects/p1/jobs/{job}/run")
}

/// The path the operation of `job` is polled at.
pub fn operation_path(job: &str) -> String {
    format!("/projects/p1/operations/op-{job}")
}

/// Writes the `opsapi` provider under `dir` and returns the registry root.
pub fn write_registry(dir: &Path) -> PathBuf {
    let root = dir.join("registry");
    let services = root.join("src/opsapi/v1/services");
    std::fs::create_dir_all(&services).unwrap();
    std::fs::write(
        root.join("src/opsapi/v1/provider.yaml"),
        "id: opsapi\nname: opsapi\nversion: v1\nproviderServices:\n  jobs:\n    id: jobs:v1\n    name: jobs\n    preferred: true\n    service:\n      $ref: opsapi/v1/services/jobs.yaml\n    title: Jobs\n    version: v1\nconfig:\n  auth:\n    type: custom\n    location: header\n    name: X-Api-Key\n    credentialsenvvar: TESTAPI_KEY\n",
    )
    .unwrap();
    std::fs::write(
        services.join("jobs.yaml"),
        r"openapi: 3.0.3
info:
  title: Jobs
  version: v1
servers:
  - url: https://api.opsapi.example
paths:
  /projects/{project}/jobs/{job}/run:
    post:
      operationId: jobs/run
      parameters:
        - {name: project, in: path, required: true, schema: {type: string}}
        - {name: job, in: path, required: true, schema: {type: string}}
      responses:
        '200':
          description: The operation
          content:
            application/json:
              schema:
                $ref: '#/components/schemas/JobOperation'
components:
  schemas:
    JobOperation:
      type: object
      properties:
        name: {type: string}
        status: {type: string}
        selfLink: {type: string}
        endTime: {type: string}
  x-stackQL-resources:
    jobs:
      id: opsapi.jobs.jobs
      name: jobs
      title: Jobs
      methods:
        run:
          operation: {$ref: '#/paths/~1projects~1{project}~1jobs~1{job}~1run/post'}
          response: {mediaType: application/json, openAPIDocKey: '200'}
      sqlVerbs:
        select: []
        insert: []
        update: []
        delete: []
",
    )
    .unwrap();
    root
}

/// The operation of `job` as the upstream tells it: running, or done.
pub fn operation(mock: &Mock, job: &str, done: bool) -> Reply {
    let mut op = json!({
        "name": format!("op-{job}"),
        "status": if done { "DONE" } else { "RUNNING" },
        "selfLink": format!("{}{}", mock.url(), operation_path(job)),
    });
    if done {
        op["endTime"] = json!("2026-12-06T00:00:00Z");
    }
    Reply::json(op)
}

/// Routes job `job`: the EXEC answers with the running operation; the operation is polled
/// `running` times running, then done.
pub fn route_job(mock: &Mock, job: &str, running: usize) {
    mock.route(
        &format!("POST {}", run_path(job)),
        operation(mock, job, false),
    );
    let mut polls: Vec<Reply> = (0..running).map(|_| operation(mock, job, false)).collect();
    polls.push(operation(mock, job, true));
    mock.route_sequence(&operation_path(job), polls);
}

/// One MCP 2026-07-28 request over HTTP.
pub struct Rpc<'a> {
    pub http: &'a reqwest::Client,
    pub token: Option<&'a str>,
    /// Declares the tasks extension in the request's client capabilities.
    pub tasks: bool,
}

impl Rpc<'_> {
    /// Sends `method` with `params` (the request's `_meta` added) to `url`; the JSON-RPC
    /// reply.
    pub async fn send(&self, url: &str, method: &str, mut params: Value) -> Value {
        let capabilities = if self.tasks {
            json!({"extensions": {TASKS: {}}})
        } else {
            json!({})
        };
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "tasks-test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        });
        let name = params
            .get("name")
            .or_else(|| params.get("taskId"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut request = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(body.to_string());
        if let Some(name) = name {
            request = request.header("mcp-name", name);
        }
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the request is sent");
        let text = response.text().await.unwrap();
        // A JSON body, or one SSE `data:` event.
        let json = text
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or(&text)
            .trim()
            .to_owned();
        serde_json::from_str(&json).unwrap_or_else(|_| panic!("a JSON-RPC reply: {text}"))
    }

    /// `tools/call` of the EXEC of `job`.
    pub async fn exec(&self, url: &str, job: &str) -> Value {
        self.send(
            url,
            "tools/call",
            json!({"name": "run_lifecycle_operation", "arguments": {"sql": exec_sql(job), "format": "json"}}),
        )
        .await
    }

    /// `tasks/get` of `id`.
    pub async fn get(&self, url: &str, id: &str) -> Value {
        self.send(url, "tasks/get", json!({"taskId": id})).await
    }

    /// Polls `tasks/get` of `id` at `url` until the task has finished; its last state.
    pub async fn finished(&self, url: &str, id: &str, within: Duration) -> Value {
        eventually(
            "the task to finish",
            within,
            Duration::from_millis(50),
            || async {
                let got = self.get(url, id).await;
                match got["result"]["status"].as_str() {
                    Some("completed" | "failed" | "cancelled") => Ok(got),
                    _ => Err(got),
                }
            },
        )
        .await
    }
}

/// The task id of a `tools/call` reply that is a task handle (asserting it is one).
pub fn task_id(reply: &Value) -> String {
    assert_eq!(reply["result"]["resultType"], "task", "{reply}");
    assert_eq!(reply["result"]["status"], "working", "{reply}");
    reply["result"]["taskId"].as_str().unwrap().to_owned()
}
