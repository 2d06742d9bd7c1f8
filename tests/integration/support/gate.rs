//! The statements of each class over the test registry's `testapi` provider, their mock
//! routes, and MCP clients that answer approvals (elicitation / MRTR rounds) as told.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, RoleClient};
use serde_json::{Map, Value, json};

use crate::mock::{Mock, Reply};

/// A statement of each class, the tool that runs it, and the upstream request it makes.
pub const SELECT: &str = "SELECT id FROM testapi.items.items WHERE org = 'acme'";
pub const INSERT: &str = "INSERT INTO testapi.widgets.widgets (org, name) VALUES ('acme', 'w1')";
pub const DELETE: &str = "DELETE FROM testapi.widgets.widgets WHERE org = 'acme' AND id = 'w-1'";
pub const EXEC: &str = "EXEC testapi.widgets.widgets.restart @org = 'acme', @id = 'w-1'";

/// (class, tool, sql)
pub const CASES: [(&str, &str, &str); 4] = [
    ("select", "run_select_query", SELECT),
    ("mutation_create", "run_mutation_query", INSERT),
    ("mutation_delete", "run_mutation_query", DELETE),
    ("lifecycle", "run_lifecycle_operation", EXEC),
];

/// Routes every case's upstream request on the mock.
pub fn route_all(mock: &Mock) {
    mock.route("/orgs/acme/items", Reply::json(json!([{"id": 1}])));
    mock.route(
        "POST /orgs/acme/widgets",
        Reply::json(json!({"id": "w-1"})).status_code(201),
    );
    mock.route("DELETE /orgs/acme/widgets/w-1", Reply::status(204, ""));
    mock.route(
        "POST /orgs/acme/widgets/w-1/restart",
        Reply::json(json!({"operation": "op-1"})).status_code(202),
    );
}

/// What StackQL's table says for a mode and class: "allow", "refuse" or "approval".
pub fn expected(mode: &str, class: &str) -> &'static str {
    match (mode, class) {
        (_, "select") | ("full_access", _) => "allow",
        ("read_only", _) => "refuse",
        ("delete_safe", "mutation_create") => "allow",
        _ => "approval",
    }
}

/// A client that declares elicitation (when `answer` is set) and answers every prompt with it.
#[derive(Clone)]
pub struct Approver {
    pub answer: Option<ElicitationAction>,
    pub prompts: Arc<Mutex<Vec<String>>>,
    pub version: ProtocolVersion,
}

impl Approver {
    pub fn new(answer: Option<ElicitationAction>) -> Self {
        Approver {
            answer,
            prompts: Arc::default(),
            version: ProtocolVersion::V_2026_07_28,
        }
    }

    pub fn prompts(&self) -> Vec<String> {
        self.prompts.lock().unwrap().clone()
    }
}

impl ClientHandler for Approver {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = if self.answer.is_some() {
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        let mut config = ClientConfig::default().with_protocol_version(self.version.clone());
        config.capabilities = capabilities;
        config
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.prompts.lock().unwrap().push(message);
        }
        Ok(ElicitResult::new(
            self.answer.clone().unwrap_or(ElicitationAction::Decline),
        ))
    }
}

pub type ApproverClient = RunningService<RoleClient, Approver>;

/// A client of `approver.version` with this approver.
pub async fn approver_client(url: &str, approver: Approver) -> ApproverClient {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()),
    );
    let lifecycle = if approver.version.has_initialize() {
        ClientLifecycleMode::Initialize
    } else {
        ClientLifecycleMode::Discover {
            preferred_versions: vec![approver.version.clone()],
        }
    };
    approver
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("client starts")
}

pub fn params(tool: &str, sql: &str) -> CallToolRequestParams {
    let mut arguments = Map::new();
    arguments.insert("sql".into(), Value::from(sql));
    CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments)
}

/// Calls a tool through every MRTR round the client's handler answers.
pub async fn run(client: &ApproverClient, tool: &str, sql: &str) -> CallToolResult {
    client
        .call_tool(params(tool, sql))
        .await
        .unwrap_or_else(|err| panic!("{tool}: {err}"))
}

/// The first round of an approval: the sealed state and the elicitation asked.
pub async fn first_round(client: &ApproverClient, tool: &str, sql: &str) -> String {
    match client.call_tool_once(params(tool, sql)).await.unwrap() {
        CallToolResponse::InputRequired(input) => {
            let requests = input.input_requests.expect("input requests");
            assert!(requests.contains_key("approval"), "{requests:?}");
            input.request_state.expect("request state")
        }
        other => panic!("expected input_required, got {other:?}"),
    }
}

/// A retry carrying `state` and an answer.
pub async fn retry(
    client: &ApproverClient,
    tool: &str,
    sql: &str,
    state: &str,
    answer: &str,
) -> CallToolResult {
    let mut request = params(tool, sql);
    request.request_state = Some(state.to_owned());
    request.input_responses = Some(
        [("approval".to_owned(), json!({"action": answer}))]
            .into_iter()
            .collect(),
    );
    match client.call_tool_once(request).await.unwrap() {
        CallToolResponse::Complete(result) => result,
        other => panic!("expected a result, got {other:?}"),
    }
}

/// The prompt and the sealed state of a first round that asked for an approval.
pub fn approval_prompt(response: CallToolResponse) -> (String, String) {
    match response {
        CallToolResponse::InputRequired(input) => {
            let requests = serde_json::to_value(input.input_requests.unwrap()).unwrap();
            let message = requests["approval"]["params"]["message"]
                .as_str()
                .or_else(|| requests["approval"]["message"].as_str())
                .unwrap_or_else(|| panic!("{requests}"))
                .to_owned();
            (message, input.request_state.unwrap())
        }
        other => panic!("expected input_required, got {other:?}"),
    }
}
