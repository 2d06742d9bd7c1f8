//! How requests go on the wire, with documents of the current StackQL registry unchanged:
//! `config.requestTranslate` `get_query_to_post_form_utf_8` (AWS query-protocol reads sent
//! as a SigV4-signed form POST), `config.queryParamTranspose` `AWSCanonical` (a JSON list
//! or object parameter sent as flattened members), `drop_double_underscore_params`
//! (DigitalOcean's `…/actions?__type=reboot`) and `request.transform` (Cloudflare's body
//! templates), each against a mock upstream on 127.0.0.1.

use std::sync::Arc;

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::{Value, json};

use crate::mock::{Mock, Recorded, Reply};
use crate::support::SECRET;
use crate::support::corpus::row_lines;
use crate::support::current::{context, current_registry, engine};

const AWS: &str = "src/aws/v00.00.00000/provider.yaml";
const FORM: &str = "application/x-www-form-urlencoded; charset=utf-8";

fn xml(body: &str) -> Reply {
    Reply::bytes("text/xml", body.as_bytes().to_vec())
}

/// An engine whose `aws` provider calls `mock`, signing with SigV4 (the document's
/// `aws_signing_v4` keys; region and service named, as the mock's host names neither).
fn aws_engine(root: &std::path::Path, mock: &Mock) -> Engine {
    Engine::new(aws_config(root, mock)).expect("engine")
}

fn aws_config(root: &std::path::Path, mock: &Mock) -> EngineConfig {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        "aws".to_owned(),
        ProviderSettings {
            base_url: Some(mock.url()),
            auth: Some(json!({
                "type": "aws_signing_v4",
                "keyIDenvvar": "AWS_ACCESS_KEY_ID",
                "credentialsenvvar": "AWS_SECRET_ACCESS_KEY",
                "signing_region": "us-east-1",
                "signing_service": "iam",
            })),
            ..Default::default()
        },
    );
    config
}

fn aws_cx() -> ExecContext {
    ExecContext {
        credentials: Arc::new(CredentialStore::fixed([
            ("AWS_ACCESS_KEY_ID".to_owned(), "AKIDTEST".to_owned()),
            ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET.to_owned()),
        ])),
        ..ExecContext::anonymous_default()
    }
}

fn header(request: &Recorded, name: &str) -> String {
    request
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The request is a form POST to `/` with no query, `form` its body, signed over it.
fn assert_signed_form_post(request: &Recorded, form: &str) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/");
    assert_eq!(request.query, None);
    assert_eq!(header(request, "content-type"), FORM);
    assert_eq!(request.body_text(), form);
    assert!(
        header(request, "authorization").starts_with("AWS4-HMAC-SHA256 Credential=AKIDTEST/"),
        "{:?}",
        request.headers
    );
    // Signed as sent: the form's content type is a signed header (the body is part of
    // every SigV4 signature; the signer's unit tests check it).
    assert!(
        header(request, "authorization").contains(";content-type;host;"),
        "{:?}",
        request.headers
    );
    assert!(!request.body_text().contains(SECRET));
}

fn users_page(names: &[(&str, &str)], marker: Option<&str>) -> Reply {
    let mut body = String::from(
        r#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users>"#,
    );
    for (name, id) in names {
        body.push_str(&format!(
            "<member><UserId>{id}</UserId><Path>/eng/</Path><UserName>{name}</UserName>\
             <Arn>arn:aws:iam::123456789012:user/eng/{name}</Arn><CreateDate>2014-04-09T15:43:45Z</CreateDate></member>"
        ));
    }
    body.push_str("</Users>");
    match marker {
        Some(m) => body.push_str(&format!(
            "<IsTruncated>true</IsTruncated><Marker>{m}</Marker>"
        )),
        None => body.push_str("<IsTruncated>false</IsTruncated>"),
    }
    body.push_str("</ListUsersResult><ResponseMetadata><RequestId>r1</RequestId></ResponseMetadata></ListUsersResponse>");
    xml(&body)
}

#[tokio::test]
async fn iam_list_users_is_a_signed_form_post_and_its_marker_goes_in_the_form() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/iam.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    let first = "Action=ListUsers&Version=2010-05-08&PathPrefix=%2Feng%2F";
    mock.route(
        &format!("/?{first}"),
        users_page(&[("Jackie", "AIDJACKIE")], Some("m/2 +")),
    );
    let second = format!("{first}&Marker=m%2F2+%2B");
    mock.route(
        &format!("/?{second}"),
        users_page(&[("Zoe", "AIDZOE")], None),
    );
    let e = aws_engine(registry.path(), &mock);
    let out = e
        .execute(
            &aws_cx(),
            "SELECT UserName, UserId, Arn FROM aws.iam.users WHERE PathPrefix = '/eng/' ORDER BY UserName",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        [
            "Jackie|AIDJACKIE|arn:aws:iam::123456789012:user/eng/Jackie",
            "Zoe|AIDZOE|arn:aws:iam::123456789012:user/eng/Zoe",
        ]
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_signed_form_post(&requests[0], first);
    assert_signed_form_post(&requests[1], &second);
}

#[tokio::test]
async fn a_translated_read_is_retried_as_a_read() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/iam.yaml"]) else {
        return;
    };
    let mock = Mock::start().await;
    // The document's verb is GET: a 503 to the form POST is retried, as reads are.
    mock.route_sequence(
        "/?Action=ListUsers&Version=2010-05-08",
        vec![
            Reply::status(503, "slow down"),
            users_page(&[("Ann", "AIDANN")], None),
        ],
    );
    let mut config = aws_config(registry.path(), &mock);
    config.upstream.retry.initial_backoff = std::time::Duration::from_millis(1);
    let e = Engine::new(config).unwrap();
    let out = e
        .execute(&aws_cx(), "SELECT UserName FROM aws.iam.users")
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["Ann"]);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_signed_form_post(request, "Action=ListUsers&Version=2010-05-08");
    }
}

#[tokio::test]
async fn aws_canonical_sends_a_json_list_parameter_as_numbered_members() {
    let Some(registry) = current_registry(&[AWS, "src/aws/v00.00.00000/services/elbv2.yaml"])
    else {
        return;
    };
    let mock = Mock::start().await;
    let form = "Action=DescribeLoadBalancers&Version=2015-12-01&Names.1=web&Names.2=api+east";
    mock.route(
        &format!("/?{form}"),
        xml(
            r#"<DescribeLoadBalancersResponse xmlns="http://elasticloadbalancing.amazonaws.com/doc/2015-12-01/"><DescribeLoadBalancersResult><LoadBalancers><member><LoadBalancerArn>arn:aws:elasticloadbalancing:us-west-2:123456789012:loadbalancer/app/web/50dc6c495c0c9188</LoadBalancerArn><Scheme>internet-facing</Scheme><LoadBalancerName>web</LoadBalancerName><VpcId>vpc-3ac0fb5f</VpcId><Type>application</Type></member></LoadBalancers></DescribeLoadBalancersResult><ResponseMetadata><RequestId>r2</RequestId></ResponseMetadata></DescribeLoadBalancersResponse>"#,
        ),
    );
    let e = aws_engine(registry.path(), &mock);
    let out = e
        .execute(
            &aws_cx(),
            "SELECT LoadBalancerName, Scheme, VpcId, Type FROM aws.elbv2.load_balancers \
             WHERE Names = '[\"web\", \"api east\"]' AND region = 'us-west-2'",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(
        row_lines(&out),
        ["web|internet-facing|vpc-3ac0fb5f|application"]
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_signed_form_post(&requests[0], form);
}

#[tokio::test]
async fn double_underscore_query_parameters_are_dropped() {
    let Some(registry) = current_registry(&[
        "src/digitalocean/v00.00.00000/provider.yaml",
        "src/digitalocean/v00.00.00000/services/compute.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    mock.route(
        "POST /v2/droplets/3164444/actions",
        Reply::json(
            json!({"action": {"id": 36804751, "status": "in-progress", "type": "reboot",
            "resource_id": 3164444, "resource_type": "droplet"}}),
        )
        .status_code(201),
    );
    let e = engine(registry.path(), "digitalocean", &mock);
    let out = e
        .execute(
            &context(),
            "EXEC digitalocean.compute.droplets.reboot @droplet_id = 3164444",
        )
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{:?}", row_lines(&out));
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v2/droplets/3164444/actions");
    // `?__type=reboot` names the document's path; it is not sent.
    assert_eq!(requests[0].query, None);
    assert_eq!(out.upstream_status, Some(201));
}

#[tokio::test]
async fn request_transform_writes_the_body_sent() {
    let Some(registry) = current_registry(&[
        "src/cloudflare/v00.00.00000/provider.yaml",
        "src/cloudflare/v00.00.00000/services/realtime_kit.yaml",
    ]) else {
        return;
    };
    let mock = Mock::start().await;
    let path = "/accounts/a1/realtime/kit/app1/meetings/m1/livestreams";
    mock.route(
        &format!("POST {path}"),
        Reply::json(json!({"success": true, "data": {"id": "ls1", "name": "launch"}}))
            .status_code(201),
    );
    let e = engine(registry.path(), "cloudflare", &mock);
    e.execute(
        &context(),
        "INSERT INTO cloudflare.realtime_kit.livestreams (account_id, app_id, meeting_id, name, video_config) \
         VALUES ('a1', 'app1', 'm1', 'launch', '{\"width\": 1280, \"height\": 720}')",
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, path);
    let text = requests[0].body_text();
    // The template's own text: `name` through toJson, the object `video_config` through
    // toJson (keys sorted, as Go's encoding/json writes them).
    assert!(
        text.starts_with(r#"{"name": "launch","video_config": {"height":720,"width":1280}"#),
        "{text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        body,
        json!({"name": "launch", "video_config": {"height": 720, "width": 1280}})
    );
}
