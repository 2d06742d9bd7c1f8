//! `awscc` (AWS Cloud Control) end to end, with the current registry's documents unchanged:
//! the resource views (`config.views.select`) over `awscc.cloud_control.resource(s)`, the
//! request-body fields they give (`TypeName`, `Identifier`), the declared headers
//! (`X-Amz-Target`, `Content-Type`), next pages by `NextToken` in the body, and SigV4
//! signing, against a mock Cloud Control API on 127.0.0.1 that answers as the API
//! reference shows (JSON 1.0, `ResourceDescriptions[].Properties` as JSON text).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use querygate::engine::{
    CredentialStore, Engine, EngineConfig, ErrorKind, ExecContext, ProviderSettings,
};
use serde_json::{Value, json};

use crate::mock::Recorded;
use crate::support::SECRET;
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;

const PREFIXES: [&str; 4] = [
    "src/awscc/v00.00.00000/provider.yaml",
    "src/awscc/v00.00.00000/services/arczonalshift.yaml",
    "src/awscc/v00.00.00000/services/s3.yaml",
    "src/awscc/v00.00.00000/services/cloud_control.yaml",
];

/// The three awscc documents, unpacked once for every test here.
fn registry() -> Option<&'static std::path::Path> {
    static DIR: OnceLock<Option<tempfile::TempDir>> = OnceLock::new();
    DIR.get_or_init(|| current_registry(&PREFIXES))
        .as_ref()
        .map(tempfile::TempDir::path)
}

/// Page size of the mock's ListResources.
const PAGE: usize = 2;

/// Resources by region and type name: each an identifier and its properties.
type Store = BTreeMap<(String, String), Vec<(String, Value)>>;

/// A Cloud Control API over a [`Store`]; every request recorded.
#[derive(Clone, Default)]
struct CloudControl {
    resources: Arc<Store>,
    log: Arc<Mutex<Vec<Recorded>>>,
}

impl CloudControl {
    async fn start(resources: &[(&str, &str, &str, Value)]) -> (Self, String) {
        let mut by_type = Store::new();
        for (region, type_name, id, properties) in resources {
            by_type
                .entry(((*region).to_owned(), (*type_name).to_owned()))
                .or_default()
                .push(((*id).to_owned(), properties.clone()));
        }
        let api = CloudControl {
            resources: Arc::new(by_type),
            log: Arc::default(),
        };
        let serving = api.clone();
        let app = Router::new().fallback(move |request: Request<Body>| {
            let api = serving.clone();
            async move { api.answer(request).await }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (api, url)
    }

    fn requests(&self) -> Vec<Recorded> {
        self.log.lock().unwrap().clone()
    }

    async fn answer(&self, request: Request<Body>) -> Response {
        let (parts, body) = request.into_parts();
        let body = axum::body::to_bytes(body, usize::MAX)
            .await
            .unwrap()
            .to_vec();
        let recorded = Recorded {
            method: parts.method.to_string(),
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            headers: parts.headers.clone(),
            body,
        };
        self.log.lock().unwrap().push(recorded.clone());
        // The base URL is `http://127.0.0.1:port/{region}`: the region is the first segment.
        let region = recorded.path.trim_matches('/').to_owned();
        let header = |name: &str| {
            recorded
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let action = recorded
            .query
            .as_deref()
            .and_then(|q| q.split('&').find_map(|p| p.strip_prefix("Action=")))
            .unwrap_or_default()
            .to_owned();
        if recorded.method != "POST"
            || header("x-amz-target") != format!("CloudApiService.{action}")
            || header("content-type") != "application/x-amz-json-1.0"
            || !header("authorization").starts_with("AWS4-HMAC-SHA256 ")
        {
            return error(
                "InvalidRequestException",
                "not a signed JSON 1.0 request for the action",
            );
        }
        let Ok(input) = serde_json::from_slice::<Value>(&recorded.body) else {
            return error("SerializationException", "the body is not JSON");
        };
        let Some(type_name) = input.get("TypeName").and_then(Value::as_str) else {
            return error("InvalidRequestException", "TypeName is required");
        };
        let found = self
            .resources
            .get(&(region, type_name.to_owned()))
            .cloned()
            .unwrap_or_default();
        let description = |(id, properties): &(String, Value)| json!({"Identifier": id, "Properties": properties.to_string()});
        match action.as_str() {
            "ListResources" => {
                let start: usize = input
                    .get("NextToken")
                    .and_then(Value::as_str)
                    .and_then(|t| t.strip_prefix("page-"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                let page: Vec<Value> = found
                    .iter()
                    .skip(start)
                    .take(PAGE)
                    .map(description)
                    .collect();
                let mut output = json!({"TypeName": type_name, "ResourceDescriptions": page});
                if start + PAGE < found.len() {
                    output["NextToken"] = json!(format!("page-{}", start + PAGE));
                }
                reply(&output)
            }
            "GetResource" => {
                let id = input.get("Identifier").and_then(Value::as_str);
                match found.iter().find(|(i, _)| Some(i.as_str()) == id) {
                    Some(resource) => reply(&json!({
                        "TypeName": type_name,
                        "ResourceDescription": description(resource),
                    })),
                    None => error(
                        "ResourceNotFoundException",
                        &format!("{type_name} {} not found", id.unwrap_or("")),
                    ),
                }
            }
            "CreateResource" | "DeleteResource" => {
                let desired = input.get("DesiredState").and_then(Value::as_str);
                let id = match (action.as_str(), desired) {
                    ("CreateResource", Some(text)) => serde_json::from_str::<Value>(text)
                        .ok()
                        .and_then(|d| d.get("BucketName").cloned()),
                    ("DeleteResource", _) => input.get("Identifier").cloned(),
                    // Cloud Control takes DesiredState as JSON text only.
                    _ => return error("ValidationException", "DesiredState must be a string"),
                };
                reply(&json!({"ProgressEvent": {
                    "TypeName": type_name,
                    "Identifier": id,
                    "RequestToken": "8a2e4d60-0000-4b5e-9d5b-8c3f2ad3e6b1",
                    "Operation": if action == "CreateResource" { "CREATE" } else { "DELETE" },
                    "OperationStatus": "IN_PROGRESS",
                    "EventTime": 1.7e9
                }}))
            }
            _ => error("UnsupportedActionException", "not mocked"),
        }
    }
}

fn reply(body: &Value) -> Response {
    Response::builder()
        .header("content-type", "application/x-amz-json-1.0")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// An AWS JSON 1.0 error answer.
fn error(code: &str, message: &str) -> Response {
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header("content-type", "application/x-amz-json-1.0")
        .body(Body::from(
            json!({"__type": format!("com.amazon.cloudapiservice#{code}"), "Message": message})
                .to_string(),
        ))
        .unwrap()
}

/// An engine whose `awscc` calls `url` (with the region as its first path segment), signing
/// with SigV4 for the region and service of the real endpoint.
fn engine(root: &std::path::Path, url: &str) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        "awscc".to_owned(),
        ProviderSettings {
            base_url: Some(format!("{url}/{{region}}")),
            auth: Some(json!({
                "type": "aws_signing_v4",
                "keyIDenvvar": "AWS_ACCESS_KEY_ID",
                "credentialsenvvar": "AWS_SECRET_ACCESS_KEY",
                "signing_region": "us-east-1",
                "signing_service": "cloudcontrolapi",
            })),
            ..Default::default()
        },
    );
    Engine::new(config).unwrap()
}

fn cx() -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed([
            ("AWS_ACCESS_KEY_ID".to_owned(), "AKIDTEST".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET.to_owned()),
        ])),
        ..ExecContext::anonymous_default()
    }
}

fn body_of(request: &Recorded) -> Value {
    serde_json::from_slice(&request.body).unwrap()
}

fn buckets() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let bucket = |name: &str, extra: Value| {
        let mut properties = json!({"BucketName": name});
        if let (Value::Object(p), Value::Object(e)) = (&mut properties, extra) {
            p.extend(e);
        }
        properties
    };
    vec![
        (
            "us-east-1",
            "AWS::S3::Bucket",
            "alpha-logs",
            bucket("alpha-logs", json!({})),
        ),
        (
            "us-east-1",
            "AWS::S3::Bucket",
            "beta-site",
            bucket("beta-site", json!({})),
        ),
        (
            "us-east-1",
            "AWS::S3::Bucket",
            "gamma-data",
            bucket("gamma-data", json!({})),
        ),
        (
            "eu-west-1",
            "AWS::S3::Bucket",
            "delta-eu",
            bucket(
                "delta-eu",
                json!({
                    "Arn": "arn:aws:s3:::delta-eu",
                    "DomainName": "delta-eu.s3.amazonaws.com",
                    "VersioningConfiguration": {"Status": "Enabled"},
                    "Tags": [{"Key": "team", "Value": "data"}]
                }),
            ),
        ),
        (
            "us-east-1",
            "AWS::S3::BucketPolicy",
            "alpha-logs",
            json!({"Bucket": "alpha-logs"}),
        ),
    ]
}

#[tokio::test]
async fn list_view_reads_every_page_of_list_resources_with_the_body_token() {
    let Some(root) = registry() else { return };
    let (api, url) = CloudControl::start(&buckets()).await;
    let e = engine(root, &url);
    let out = e
        .execute(
            &cx(),
            "SELECT region, bucket_name FROM awscc.s3.buckets_list_only \
             WHERE region = 'us-east-1' ORDER BY bucket_name",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(out.columns, ["region", "bucket_name"]);
    assert_eq!(
        row_lines(&out),
        [
            "us-east-1|alpha-logs",
            "us-east-1|beta-site",
            "us-east-1|gamma-data"
        ]
    );
    let requests = api.requests();
    let bodies: Vec<Value> = requests.iter().map(body_of).collect();
    assert_eq!(
        bodies,
        [
            json!({"TypeName": "AWS::S3::Bucket"}),
            json!({"TypeName": "AWS::S3::Bucket", "NextToken": "page-2"}),
        ]
    );
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/us-east-1/");
        assert_eq!(
            request.query.as_deref(),
            Some("Action=ListResources&Version=2021-09-30")
        );
        assert_eq!(
            request.headers["x-amz-target"],
            "CloudApiService.ListResources"
        );
        assert_eq!(
            request.headers["content-type"],
            "application/x-amz-json-1.0"
        );
        assert_eq!(request.headers["accept"], "application/x-amz-json-1.0");
        crate::support::sigv4::verify_sigv4(request, SECRET, "us-east-1", "cloudcontrolapi");
    }
}

#[tokio::test]
async fn list_view_takes_the_ddl_region_when_the_statement_gives_none_and_fans_out_over_in() {
    let Some(root) = registry() else { return };
    let (api, url) = CloudControl::start(&buckets()).await;
    let e = engine(root, &url);
    // The view's DDL says `region = 'us-east-1'`.
    let out = e
        .execute(
            &cx(),
            "SELECT count(*) AS n FROM awscc.s3.buckets_list_only",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["3"]);
    assert!(
        api.requests().iter().all(|r| r.path == "/us-east-1/"),
        "{:?}",
        api.requests().iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    let before = api.requests().len();
    let out = e
        .execute(
            &cx(),
            "SELECT region, bucket_name FROM awscc.s3.buckets_list_only \
             WHERE region IN ('eu-west-1', 'us-east-1') AND bucket_name LIKE '%a' \
             ORDER BY region, bucket_name",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        ["us-east-1|gamma-data"],
        "LIKE still filters the rows"
    );
    let mut paths: Vec<String> = api.requests()[before..]
        .iter()
        .map(|r| format!("{} {}", r.path, body_of(r)))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        [
            r#"/eu-west-1/ {"TypeName":"AWS::S3::Bucket"}"#,
            r#"/us-east-1/ {"TypeName":"AWS::S3::Bucket","NextToken":"page-2"}"#,
            r#"/us-east-1/ {"TypeName":"AWS::S3::Bucket"}"#,
        ]
    );
}

#[tokio::test]
async fn detail_view_gets_one_resource_by_identifier() {
    let Some(root) = registry() else { return };
    let (api, url) = CloudControl::start(&buckets()).await;
    let e = engine(root, &url);
    let out = e
        .execute(
            &cx(),
            "SELECT region, Identifier, bucket_name, arn, domain_name, \
             JSON_EXTRACT(versioning_configuration, '$.Status') AS versioning, \
             JSON_EXTRACT(tags, '$[0].Value') AS team, website_url \
             FROM awscc.s3.buckets WHERE Identifier = 'delta-eu' AND region = 'eu-west-1'",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "eu-west-1|delta-eu|delta-eu|arn:aws:s3:::delta-eu|delta-eu.s3.amazonaws.com|Enabled|data|NULL"
        ]
    );
    let requests = api.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/eu-west-1/");
    assert_eq!(
        request.query.as_deref(),
        Some("Action=GetResource&Version=2021-09-30")
    );
    assert_eq!(
        request.headers["x-amz-target"],
        "CloudApiService.GetResource"
    );
    assert_eq!(
        body_of(request),
        json!({"TypeName": "AWS::S3::Bucket", "Identifier": "delta-eu"})
    );
    crate::support::sigv4::verify_sigv4(request, SECRET, "us-east-1", "cloudcontrolapi");

    // Another type over the same Cloud Control resource: its own TypeName.
    let out = e
        .execute(
            &cx(),
            "SELECT bucket FROM awscc.s3.bucket_policies WHERE Identifier = 'alpha-logs' AND region = 'us-east-1'",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["alpha-logs"]);
    assert_eq!(
        body_of(&api.requests()[1]),
        json!({"TypeName": "AWS::S3::BucketPolicy", "Identifier": "alpha-logs"})
    );
}

#[tokio::test]
async fn detail_view_errors_are_named() {
    let Some(root) = registry() else { return };
    let (api, url) = CloudControl::start(&buckets()).await;
    let e = engine(root, &url);
    // Without the Identifier the view requires, nothing is sent.
    let err = e
        .execute(
            &cx(),
            "SELECT bucket_name FROM awscc.s3.buckets WHERE region = 'us-east-1'",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MissingParameters);
    assert!(
        err.to_string()
            .contains("'awscc.s3.buckets' is a view that needs WHERE Identifier = '…'"),
        "{err}"
    );
    assert!(api.requests().is_empty());
    // An identifier Cloud Control does not know: its error, quoted.
    let err = e
        .execute(
            &cx(),
            "SELECT bucket_name FROM awscc.s3.buckets WHERE Identifier = 'nope' AND region = 'us-east-1'",
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Upstream);
    assert!(
        err.to_string().contains("ResourceNotFoundException"),
        "{err}"
    );
}

#[tokio::test]
async fn insert_and_delete_send_the_base_type_name_and_desired_state_as_text() {
    let Some(root) = registry() else { return };
    let (api, url) = CloudControl::start(&buckets()).await;
    let e = engine(root, &url);
    let out = e
        .execute(
            &cx(),
            r#"INSERT INTO awscc.s3.buckets (BucketName, VersioningConfiguration, Tags, region)
               SELECT 'new-bucket', '{"Status": "Enabled"}', '[{"Key": "team", "Value": "web"}]', 'eu-west-1'
               RETURNING Identifier, Operation, OperationStatus"#,
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["new-bucket|CREATE|IN_PROGRESS"]);
    let created = &api.requests()[0];
    assert_eq!(created.path, "/eu-west-1/");
    // `drop_double_underscore_params` (the document's `x-stackQL-config`): the path's
    // `&__Bucket&__detailTransformed=true` is not sent.
    assert_eq!(
        created.query.as_deref(),
        Some("Action=CreateResource&Version=2021-09-30")
    );
    assert_eq!(
        created.headers["x-amz-target"],
        "CloudApiService.CreateResource"
    );
    let body = body_of(created);
    assert_eq!(body["TypeName"], "AWS::S3::Bucket");
    let desired: Value = serde_json::from_str(body["DesiredState"].as_str().unwrap()).unwrap();
    assert_eq!(
        desired,
        json!({"BucketName": "new-bucket", "VersioningConfiguration": {"Status": "Enabled"},
               "Tags": [{"Key": "team", "Value": "web"}]})
    );
    assert_eq!(body.as_object().unwrap().len(), 2, "{body}");
    crate::support::sigv4::verify_sigv4(created, SECRET, "us-east-1", "cloudcontrolapi");

    e.execute(
        &cx(),
        "DELETE FROM awscc.s3.buckets WHERE Identifier = 'alpha-logs' AND region = 'us-east-1'",
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let deleted = &api.requests()[1];
    assert_eq!(deleted.path, "/us-east-1/");
    assert_eq!(
        deleted.headers["x-amz-target"],
        "CloudApiService.DeleteResource"
    );
    assert_eq!(
        body_of(deleted),
        json!({"TypeName": "AWS::S3::Bucket", "Identifier": "alpha-logs"})
    );
    // A WHERE name the delete's body does not declare is still refused, before sending.
    let err = e
        .execute(
            &cx(),
            "DELETE FROM awscc.s3.buckets WHERE Identifer = 'alpha-logs' AND region = 'us-east-1'",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("'Identifer' in WHERE is not a parameter"),
        "{err}"
    );
    assert_eq!(api.requests().len(), 2);
}

#[tokio::test]
async fn a_view_projecting_region_twice_still_routes_by_the_region_parameter() {
    let Some(root) = registry() else { return };
    // The view's DDL: `SELECT region, JSON_EXTRACT(Properties, '$.Region') as region … WHERE
    // … AND region = 'us-east-1'`: the WHERE `region` is the server variable (SQLite reads
    // the column before the alias), not a filter on the JSON field.
    let type_name = "AWS::ARCZonalShift::AutoshiftObserverNotificationStatus";
    let (api, url) = CloudControl::start(&[(
        "eu-west-1",
        type_name,
        "111122223333|us-west-2",
        json!({"AccountId": "111122223333", "Region": "us-west-2"}),
    )])
    .await;
    let e = engine(root, &url);
    let out = e
        .execute(
            &cx(),
            "SELECT * FROM awscc.arczonalshift.autoshift_observer_notification_statuses_list_only \
             WHERE region = 'eu-west-1'",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["eu-west-1|111122223333|us-west-2"]);
    let requests = api.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/eu-west-1/");
    assert_eq!(body_of(&requests[0]), json!({"TypeName": type_name}));
}

/// A server over the awscc documents whose Cloud Control calls go to `url`, its default
/// tenant in `mode`, auditing to its folder.
async fn server(root: &std::path::Path, url: &str, mode: &str) -> crate::mcp_support::TestServer {
    let (root, url, mode) = (root.to_owned(), url.to_owned(), mode.to_owned());
    crate::mcp_support::start_yaml(move |mock, dir| {
        let env_file = dir.join("creds.env");
        std::fs::write(
            &env_file,
            format!("AWS_ACCESS_KEY_ID=AKIDTEST\nAWS_SECRET_ACCESS_KEY={SECRET}\n"),
        )
        .unwrap();
        format!(
            "registry:\n  root: {root}\n  url: {mock}/registry\nproviders:\n  awscc:\n    base_url: \"{url}/{{region}}\"\n    auth:\n      type: aws_signing_v4\n      keyIDenvvar: AWS_ACCESS_KEY_ID\n      credentialsenvvar: AWS_SECRET_ACCESS_KEY\n      signing_region: us-east-1\n      signing_service: cloudcontrolapi\ncredentials:\n  env_file: {env}\n  process_env: false\ntenants:\n  - id: default\n    mode: {mode}\nserver:\n  listen: 127.0.0.1:0\n",
            root = root.display(),
            env = env_file.display(),
        )
    })
    .await
}

#[tokio::test]
async fn cloud_control_views_read_in_read_only_and_safe_and_its_writes_do_not() {
    use crate::mcp_support::{call, error_code, modern_client, text_of};
    let Some(root) = registry() else { return };
    for mode in ["read_only", "safe"] {
        let (api, url) = CloudControl::start(&buckets()).await;
        let server = server(root, &url, mode).await;
        let client = modern_client(&server.url).await;
        // ListResources (every page) and GetResource: POSTs that only read.
        let list = call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT bucket_name FROM awscc.s3.buckets_list_only WHERE region = 'us-east-1' ORDER BY bucket_name"}),
        )
        .await;
        assert_ne!(list.is_error, Some(true), "{mode}: {}", text_of(&list));
        assert_eq!(
            list.structured_content.as_ref().unwrap()["rows"],
            json!([{"bucket_name": "alpha-logs"}, {"bucket_name": "beta-site"}, {"bucket_name": "gamma-data"}]),
            "{mode}"
        );
        let get = call(
            &client,
            "run_select_query",
            json!({"sql": "SELECT bucket_name, arn FROM awscc.s3.buckets WHERE Identifier = 'delta-eu' AND region = 'eu-west-1'"}),
        )
        .await;
        assert_ne!(get.is_error, Some(true), "{mode}: {}", text_of(&get));
        assert_eq!(
            get.structured_content.as_ref().unwrap()["rows"],
            json!([{"bucket_name": "delta-eu", "arn": "arn:aws:s3:::delta-eu"}]),
            "{mode}"
        );
        let sent = api.requests().len();
        assert_eq!(
            sent, 3,
            "{mode}: two pages of ListResources and one GetResource"
        );
        // DeleteResource is not a read: refused in read_only, held in safe; nothing sent.
        let delete = call(
            &client,
            "run_mutation_query",
            json!({"sql": "DELETE FROM awscc.s3.buckets WHERE Identifier = 'alpha-logs' AND region = 'us-east-1'"}),
        )
        .await;
        let want = if mode == "read_only" {
            "policy.refused"
        } else {
            "policy.approval_required"
        };
        assert_eq!(error_code(&delete), want, "{mode}: {}", text_of(&delete));
        assert_eq!(api.requests().len(), sent, "{mode}: nothing more sent");
    }
}
