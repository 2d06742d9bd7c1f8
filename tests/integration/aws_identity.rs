//! The AWS credential chain end to end over the current registry's `aws` documents
//! (`aws.iam.users`, IAM's query API answering in XML): each source — the shared files'
//! profiles (static and `role_arn` + `source_profile`), web identity (STS
//! `AssumeRoleWithWebIdentity`), container credentials (EKS Pod Identity's full URI and
//! token file) and IMDSv2 — gives the credentials a mock IAM on 127.0.0.1 sees in the SigV4
//! `Credential=` and `X-Amz-Security-Token`; mocks of STS (reached through
//! `AWS_ENDPOINT_URL_STS`), the container endpoint and IMDS (through
//! `AWS_EC2_METADATA_SERVICE_ENDPOINT`) answer with the services' real shapes. Temporary
//! credentials are cached until shortly before they expire and refreshed (the token file
//! re-read); tenants with roles get their own sessions (`SourceIdentity`, tags); failures
//! name the source and its variables and never a secret; through a served App the
//! `server_info` report shows the resolved source and expiry.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use querygate::engine::{
    AwsRole, CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings,
};
use serde_json::{Value, json};

use crate::logs;
use crate::mock::{Mock, Recorded, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;
use crate::support::sigv4::verify_sigv4_with;

const PROVIDER: &str = "src/aws/v00.00.00000/provider.yaml";
const IAM: &str = "src/aws/v00.00.00000/services/iam.yaml";
const SELECT: &str = "SELECT UserName FROM aws.iam.users ORDER BY UserName";
const BASE_SECRET: &str = "base-planted-secret-7731";
const WEB_TOKEN: &str = "eyJ.planted-web-identity-token-1.sig";

/// The two `aws` documents, unpacked once for every test here.
fn registry() -> Option<&'static std::path::Path> {
    static DIR: std::sync::OnceLock<Option<tempfile::TempDir>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| current_registry(&[PROVIDER, IAM]))
        .as_ref()
        .map(tempfile::TempDir::path)
}

/// IAM ListUsers with two users (IAM API reference shape).
async fn iam() -> Mock {
    let mock = Mock::start().await;
    mock.route(
        "/",
        Reply::bytes(
            "text/xml",
            br#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users><member><UserId>AIDA1</UserId><Path>/</Path><UserName>alice</UserName><Arn>arn:aws:iam::123456789012:user/alice</Arn><CreateDate>2024-01-01T00:00:00Z</CreateDate></member><member><UserId>AIDA2</UserId><Path>/</Path><UserName>bob</UserName><Arn>arn:aws:iam::123456789012:user/bob</Arn><CreateDate>2024-01-02T00:00:00Z</CreateDate></member></Users><IsTruncated>false</IsTruncated></ListUsersResult><ResponseMetadata><RequestId>7a62c49f-347e-4fc4-9331-6e8eEXAMPLE</RequestId></ResponseMetadata></ListUsersResponse>"#.to_vec(),
        ),
    );
    mock
}

/// The document's auth with the region and service IAM signs for (the mock's host names
/// neither).
fn aws_auth() -> Value {
    json!({"type": "aws_signing_v4", "keyIDenvvar": "AWS_ACCESS_KEY_ID",
           "credentialsenvvar": "AWS_SECRET_ACCESS_KEY",
           "signing_region": "us-east-1", "signing_service": "iam"})
}

fn engine(root: &std::path::Path, iam: &Mock) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        "aws".to_owned(),
        ProviderSettings {
            base_url: Some(iam.url()),
            auth: Some(aws_auth()),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

fn store(pairs: &[(&str, &str)]) -> CredentialStore {
    CredentialStore::fixed(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    )
}

fn cx(tenant: &str, principal: &str, store: CredentialStore) -> ExecContext {
    ExecContext {
        tenant: tenant.to_owned(),
        principal: principal.to_owned(),
        credentials: Arc::new(store),
        ..ExecContext::anonymous_default()
    }
}

async fn select(e: &Engine, cx: &ExecContext) {
    let out = e
        .execute(cx, SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(row_lines(&out), ["alice", "bob"]);
}

fn header(r: &Recorded, name: &str) -> String {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
        .unwrap_or_default()
}

fn form(r: &Recorded) -> Vec<(String, String)> {
    url::form_urlencoded::parse(&r.body)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn field(r: &Recorded, name: &str) -> String {
    form(r)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

/// The access key ids of IAM's requests, in order.
fn key_ids(iam: &Mock) -> Vec<String> {
    iam.requests()
        .iter()
        .map(|r| {
            let auth = header(r, "authorization");
            auth.strip_prefix("AWS4-HMAC-SHA256 Credential=")
                .and_then(|rest| rest.split('/').next())
                .unwrap_or("<unsigned>")
                .to_owned()
        })
        .collect()
}

fn expiration(after: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() + after).to_string()
}

/// STS's answer to `action` (`AssumeRole`, `AssumeRoleWithWebIdentity`), as the STS API
/// reference shows it.
fn sts_answer(action: &str, key_id: &str, secret: &str, token: &str, lifetime: Duration) -> Reply {
    let extra = if action == "AssumeRoleWithWebIdentity" {
        "<SubjectFromWebIdentityToken>system:serviceaccount:ns:querygate</SubjectFromWebIdentityToken><Audience>sts.amazonaws.com</Audience><Provider>arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/EXAMPLE</Provider>"
    } else {
        "<PackedPolicySize>6</PackedPolicySize>"
    };
    Reply::bytes(
        "text/xml",
        format!(
            r#"<{action}Response xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <{action}Result>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/reader/session</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:session</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <AccessKeyId>{key_id}</AccessKeyId>
      <SecretAccessKey>{secret}</SecretAccessKey>
      <SessionToken>{token}</SessionToken>
      <Expiration>{}</Expiration>
    </Credentials>
    {extra}
  </{action}Result>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</{action}Response>"#,
            expiration(lifetime)
        )
        .into_bytes(),
    )
    .header("x-amzn-RequestId", "c6104cbe-af31-11e0-8154-cbc7ccf896c7")
}

/// Checks IAM's requests carry `key_id` (signed with `secret`) and `token`.
fn assert_signed(iam: &Mock, from: usize, key_id: &str, secret: &str, token: &str) {
    let requests = iam.requests();
    assert!(requests.len() > from, "no IAM request");
    for request in &requests[from..] {
        verify_sigv4_with(request, key_id, secret, "us-east-1", "iam");
        assert_eq!(header(request, "x-amz-security-token"), token);
    }
}

#[tokio::test]
async fn shared_files_give_static_profiles_and_roles_from_a_source_profile() {
    let Some(registry) = registry() else { return };
    let (sts, iam) = (Mock::start().await, iam().await);
    sts.route(
        "POST /",
        sts_answer(
            "AssumeRole",
            "ASIAPROFILEROLE",
            "profile-role-secret",
            "profile-role-token",
            Duration::from_secs(3600),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let (config, credentials) = (dir.path().join("config"), dir.path().join("credentials"));
    std::fs::write(
        &config,
        "[default]\nregion = us-east-1\n\n[profile ops]\nrole_arn = arn:aws:iam::123456789012:role/ops\nsource_profile = dev\nexternal_id = ops-external\nrole_session_name = ops-session\n",
    )
    .unwrap();
    std::fs::write(
        &credentials,
        format!("[dev]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = {BASE_SECRET}\n"),
    )
    .unwrap();
    let e = engine(registry, &iam);
    let (config, credentials, endpoint) = (
        config.display().to_string(),
        credentials.display().to_string(),
        sts.url(),
    );
    let vars = |profile: &'static str| {
        store(&[
            ("AWS_CONFIG_FILE", &config),
            ("AWS_SHARED_CREDENTIALS_FILE", &credentials),
            ("AWS_PROFILE", profile),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ])
    };
    let dev = cx("default", "anonymous", vars("dev"));
    select(&e, &dev).await;
    verify_sigv4_with(
        &iam.requests()[0],
        "AKIDPROFILE",
        BASE_SECRET,
        "us-east-1",
        "iam",
    );
    assert!(sts.requests().is_empty(), "static keys need no STS");

    let ops = cx("default", "anonymous", vars("ops"));
    for _ in 0..2 {
        select(&e, &ops).await;
    }
    assert_signed(
        &iam,
        1,
        "ASIAPROFILEROLE",
        "profile-role-secret",
        "profile-role-token",
    );
    let asked = sts.requests();
    assert_eq!(asked.len(), 1, "cached: {asked:?}");
    verify_sigv4_with(&asked[0], "AKIDPROFILE", BASE_SECRET, "us-east-1", "sts");
    assert_eq!(field(&asked[0], "Action"), "AssumeRole");
    assert_eq!(field(&asked[0], "Version"), "2011-06-15");
    assert_eq!(
        field(&asked[0], "RoleArn"),
        "arn:aws:iam::123456789012:role/ops"
    );
    assert_eq!(field(&asked[0], "ExternalId"), "ops-external");
    assert_eq!(field(&asked[0], "RoleSessionName"), "ops-session");
    assert_eq!(field(&asked[0], "DurationSeconds"), "3600");
}

#[tokio::test]
async fn web_identity_is_refreshed_before_expiry_and_rereads_the_rotated_token_file() {
    let Some(registry) = registry() else { return };
    let (sts, iam) = (Mock::start().await, iam().await);
    // Cached until 60 s before expiry: the first is kept for about a second.
    sts.route_sequence(
        "POST /",
        vec![
            sts_answer(
                "AssumeRoleWithWebIdentity",
                "ASIAWEBFIRST",
                "web-secret-1",
                "web-token-1",
                Duration::from_secs(62),
            ),
            sts_answer(
                "AssumeRoleWithWebIdentity",
                "ASIAWEBSECOND",
                "web-secret-2",
                "web-token-2",
                Duration::from_secs(3600),
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, format!("{WEB_TOKEN}\n")).unwrap();
    let e = engine(registry, &iam);
    let (path, endpoint) = (file.display().to_string(), sts.url());
    let cx = cx(
        "default",
        "anonymous",
        store(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &path),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa"),
            ("AWS_ROLE_SESSION_NAME", "querygate-pod"),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ]),
    );
    select(&e, &cx).await;
    assert_signed(&iam, 0, "ASIAWEBFIRST", "web-secret-1", "web-token-1");
    // Kubernetes rotates the projected token in place.
    std::fs::write(&file, "eyJ.planted-web-identity-token-2.sig\n").unwrap();
    let (e, cx, iam_ref) = (&e, &cx, &iam);
    crate::support::wait::eventually(
        "IAM to see the refreshed credentials",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async move {
            select(e, cx).await;
            match key_ids(iam_ref).last() {
                Some(last) if last == "ASIAWEBSECOND" => Ok(()),
                _ => Err(key_ids(iam_ref)),
            }
        },
    )
    .await;
    let seen = key_ids(&iam);
    let switch = seen.iter().position(|k| k == "ASIAWEBSECOND").unwrap();
    assert!(
        seen[..switch].iter().all(|k| k == "ASIAWEBFIRST"),
        "{seen:?}"
    );
    let last = iam.requests().len() - 1;
    assert_signed(&iam, last, "ASIAWEBSECOND", "web-secret-2", "web-token-2");
    let asked = sts.requests();
    assert_eq!(asked.len(), 2, "one refresh");
    for (request, token) in asked
        .iter()
        .zip([WEB_TOKEN, "eyJ.planted-web-identity-token-2.sig"])
    {
        assert_eq!(field(request, "Action"), "AssumeRoleWithWebIdentity");
        assert_eq!(
            field(request, "RoleArn"),
            "arn:aws:iam::123456789012:role/irsa"
        );
        assert_eq!(field(request, "RoleSessionName"), "querygate-pod");
        assert_eq!(field(request, "WebIdentityToken"), token);
        assert_eq!(
            header(request, "authorization"),
            "",
            "web identity is unsigned"
        );
    }
}

#[tokio::test]
async fn container_credentials_use_the_full_uri_and_the_token_file() {
    let Some(registry) = registry() else { return };
    let (agent, iam) = (Mock::start().await, iam().await);
    // EKS Pod Identity's agent answer.
    agent.route(
        "/v1/credentials",
        Reply::json(json!({
            "AccessKeyId": "ASIAPODIDENTITY",
            "SecretAccessKey": "pod-identity-secret",
            "Token": "pod-identity-token",
            "AccountId": "123456789012",
            "Expiration": expiration(Duration::from_secs(3600)),
        })),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("eks-pod-identity-token");
    std::fs::write(&file, "pod-identity-authorization-1\n").unwrap();
    let e = engine(registry, &iam);
    let (uri, path) = (
        format!("{}/v1/credentials", agent.url()),
        file.display().to_string(),
    );
    let vars = [
        ("AWS_CONTAINER_CREDENTIALS_FULL_URI", uri.as_str()),
        ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", path.as_str()),
    ];
    let host = cx(
        "default",
        "anonymous",
        store(&vars).with_host_identity(true),
    );
    for _ in 0..2 {
        select(&e, &host).await;
    }
    assert_signed(
        &iam,
        0,
        "ASIAPODIDENTITY",
        "pod-identity-secret",
        "pod-identity-token",
    );
    let asked = agent.requests();
    assert_eq!(asked.len(), 1, "cached: {asked:?}");
    assert_eq!(asked[0].method, "GET");
    assert_eq!(
        header(&asked[0], "authorization"),
        "pod-identity-authorization-1"
    );

    // The credential report names the source and the expiry the endpoint gave.
    let report = e
        .credential_sources(&host)
        .await
        .unwrap()
        .into_iter()
        .find(|row| row.provider == "aws")
        .unwrap();
    assert_eq!(report.resolved_source, "aws:ContainerCredentials");
    let expires = humantime::parse_rfc3339(report.token_expires_at.as_deref().unwrap()).unwrap();
    assert!(
        expires > SystemTime::now() + Duration::from_secs(3500),
        "{report:?}"
    );
}

#[tokio::test]
async fn imds_v2_gets_a_session_token_then_the_role_then_its_credentials() {
    let Some(registry) = registry() else { return };
    let (imds, iam) = (Mock::start().await, iam().await);
    imds.route(
        "PUT /latest/api/token",
        Reply::bytes("text/plain", b"AQAEAimds-session-token==".to_vec()),
    );
    imds.route(
        "/latest/meta-data/iam/security-credentials/",
        Reply::bytes("text/plain", b"querygate-instance-role".to_vec()),
    );
    imds.route(
        "/latest/meta-data/iam/security-credentials/querygate-instance-role",
        Reply::bytes(
            "text/plain",
            json!({
                "Code": "Success",
                "LastUpdated": expiration(Duration::ZERO),
                "Type": "AWS-HMAC",
                "AccessKeyId": "ASIAINSTANCE",
                "SecretAccessKey": "instance-secret",
                "Token": "instance-token",
                "Expiration": expiration(Duration::from_secs(21_600)),
            })
            .to_string()
            .into_bytes(),
        ),
    );
    let e = engine(registry, &iam);
    let endpoint = imds.url();
    let host = cx(
        "default",
        "anonymous",
        store(&[("AWS_EC2_METADATA_SERVICE_ENDPOINT", &endpoint)]).with_host_identity(true),
    );
    for _ in 0..2 {
        select(&e, &host).await;
    }
    assert_signed(&iam, 0, "ASIAINSTANCE", "instance-secret", "instance-token");
    let asked = imds.requests();
    let steps: Vec<String> = asked
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        steps,
        [
            "PUT /latest/api/token",
            "GET /latest/meta-data/iam/security-credentials/",
            "GET /latest/meta-data/iam/security-credentials/querygate-instance-role",
        ],
        "once, then cached"
    );
    assert_eq!(
        header(&asked[0], "x-aws-ec2-metadata-token-ttl-seconds"),
        "21600"
    );
    for r in &asked[1..] {
        assert_eq!(
            header(r, "x-aws-ec2-metadata-token"),
            "AQAEAimds-session-token=="
        );
    }

    // A tenant that may not use the host's identity never reaches IMDS.
    let other = cx("acme", "agent", store(&[]));
    let err = e.execute(&other, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("aws found no credential"), "{err}");
    assert!(
        err.contains("InstanceMetadata: not configured (the host's identity"),
        "{err}"
    );
    assert_eq!(imds.requests().len(), 3);
}

fn role(arn: &str, external_id: Option<&str>) -> AwsRole {
    AwsRole {
        role_arn: arn.to_owned(),
        external_id: external_id.map(str::to_owned),
        duration: Duration::from_secs(900),
    }
}

#[tokio::test]
async fn tenants_assume_their_own_roles_in_sessions_naming_tenant_and_principal() {
    let Some(registry) = registry() else { return };
    let (sts, iam) = (Mock::start().await, iam().await);
    sts.route_sequence(
        "POST /",
        vec![
            sts_answer(
                "AssumeRole",
                "ASIAACME",
                "acme-role-secret",
                "acme-role-token",
                Duration::from_secs(900),
            ),
            sts_answer(
                "AssumeRole",
                "ASIAGLOBEX",
                "globex-role-secret",
                "globex-role-token",
                Duration::from_secs(900),
            ),
            sts_answer(
                "AssumeRole",
                "ASIAACMEBOB",
                "acme-bob-secret",
                "acme-bob-token",
                Duration::from_secs(900),
            ),
        ],
    );
    let e = engine(registry, &iam);
    let endpoint = sts.url();
    let base = |id: &str| {
        store(&[
            ("AWS_ACCESS_KEY_ID", id),
            ("AWS_SECRET_ACCESS_KEY", BASE_SECRET),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ])
    };
    let acme_store = Arc::new(base("AKIDACMEBASE").with_aws_roles([(
        "aws".to_owned(),
        role(
            "arn:aws:iam::111111111111:role/acme-reader",
            Some("acme-ext-id"),
        ),
    )]));
    let globex_store = base("AKIDGLOBEXBASE").with_aws_roles([(
        "aws".to_owned(),
        role("arn:aws:iam::222222222222:role/globex-reader", None),
    )]);
    let acme = ExecContext {
        tenant: "acme".to_owned(),
        principal: "alice (https://idp.test)".to_owned(),
        credentials: acme_store.clone(),
        ..ExecContext::anonymous_default()
    };
    let globex = cx("globex", "spiffe://example.org/agent", globex_store);
    let acme_bob = ExecContext {
        principal: "bob".to_owned(),
        ..acme.clone()
    };

    select(&e, &acme).await;
    assert_signed(&iam, 0, "ASIAACME", "acme-role-secret", "acme-role-token");
    select(&e, &globex).await;
    assert_signed(
        &iam,
        1,
        "ASIAGLOBEX",
        "globex-role-secret",
        "globex-role-token",
    );
    // Cached per tenant and principal: acme's next call reuses its session, bob gets his.
    select(&e, &acme).await;
    assert_eq!(key_ids(&iam), ["ASIAACME", "ASIAGLOBEX", "ASIAACME"]);
    select(&e, &acme_bob).await;
    assert_eq!(key_ids(&iam).last().unwrap(), "ASIAACMEBOB");
    select(&e, &globex).await;
    assert_eq!(key_ids(&iam).last().unwrap(), "ASIAGLOBEX");

    let asked = sts.requests();
    assert_eq!(asked.len(), 3, "{asked:?}");
    verify_sigv4_with(&asked[0], "AKIDACMEBASE", BASE_SECRET, "us-east-1", "sts");
    verify_sigv4_with(&asked[1], "AKIDGLOBEXBASE", BASE_SECRET, "us-east-1", "sts");
    let acme_form = form(&asked[0]);
    let expected: Vec<(String, String)> = [
        ("Action", "AssumeRole"),
        ("Version", "2011-06-15"),
        ("RoleArn", "arn:aws:iam::111111111111:role/acme-reader"),
        ("RoleSessionName", "acme.alice__https___idp.test_"),
        ("DurationSeconds", "900"),
        ("ExternalId", "acme-ext-id"),
        ("SourceIdentity", "alice__https___idp.test_"),
        ("Tags.member.1.Key", "querygate-tenant"),
        ("Tags.member.1.Value", "acme"),
        ("Tags.member.2.Key", "querygate-principal"),
        ("Tags.member.2.Value", "alice _https://idp.test_"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(acme_form, expected);
    assert_eq!(
        field(&asked[1], "RoleArn"),
        "arn:aws:iam::222222222222:role/globex-reader"
    );
    assert_eq!(field(&asked[1], "ExternalId"), "");
    assert_eq!(
        field(&asked[1], "RoleSessionName"),
        "globex.spiffe___example.org_agent"
    );
    assert_eq!(
        field(&asked[1], "Tags.member.2.Value"),
        "spiffe://example.org/agent"
    );
    assert_eq!(field(&asked[2], "SourceIdentity"), "bob");

    let report = e
        .credential_sources(&acme)
        .await
        .unwrap()
        .into_iter()
        .find(|row| row.provider == "aws")
        .unwrap();
    assert_eq!(
        report.resolved_source,
        "aws:Environment+AssumeRole:arn:aws:iam::111111111111:role/acme-reader"
    );
    assert!(report.token_expires_at.is_some(), "{report:?}");
}

#[tokio::test]
async fn failures_name_the_source_and_variables_and_never_a_secret() {
    let Some(registry) = registry() else { return };
    logs::capture();
    let (sts, iam) = (Mock::start().await, iam().await);
    // STS refuses, quoting what it was sent.
    sts.route(
        "POST /",
        Reply::bytes(
            "text/xml",
            format!(r#"<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>Couldn't verify {WEB_TOKEN} with {BASE_SECRET}</Message></Error><RequestId>r-1</RequestId></ErrorResponse>"#).into_bytes(),
        )
        .status_code(400),
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, WEB_TOKEN).unwrap();
    let e = engine(registry, &iam);
    let (path, endpoint) = (file.display().to_string(), sts.url());
    let cx1 = cx(
        "default",
        "anonymous",
        store(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &path),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa"),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ]),
    );
    let err = e.execute(&cx1, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("STS AssumeRoleWithWebIdentity"), "{err}");
    assert!(err.contains("answered 400 (InvalidIdentityToken)"), "{err}");
    assert!(err.contains("aws source WebIdentity"), "{err}");
    assert!(err.contains("AWS_WEB_IDENTITY_TOKEN_FILE"), "{err}");
    assert!(
        !err.contains(WEB_TOKEN) && !err.contains(BASE_SECRET),
        "{err}"
    );

    // Half a source: the missing variable is named.
    let cx2 = cx(
        "default",
        "anonymous",
        store(&[("AWS_WEB_IDENTITY_TOKEN_FILE", &path)]),
    );
    let err = e.execute(&cx2, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("variable AWS_ROLE_ARN is not set"), "{err}");
    assert!(err.contains("aws source WebIdentity"), "{err}");

    // A token file that is not there.
    let cx3 = cx(
        "default",
        "anonymous",
        store(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/nonexistent/aws-token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa"),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ]),
    );
    let err = e.execute(&cx3, SELECT).await.unwrap_err().to_string();
    assert!(
        err.contains("the file named by AWS_WEB_IDENTITY_TOKEN_FILE cannot be read"),
        "{err}"
    );

    // A plain-http STS that is not loopback is refused before anything is sent.
    let cx4 = cx(
        "default",
        "anonymous",
        store(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", &path),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/irsa"),
            ("AWS_ENDPOINT_URL_STS", "http://sts.example.com"),
        ]),
    );
    let err = e.execute(&cx4, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("AWS_ENDPOINT_URL_STS"), "{err}");

    // A role whose AssumeRole is refused: the source of the base is named too.
    let cx5 = cx(
        "acme",
        "agent",
        store(&[
            ("AWS_ACCESS_KEY_ID", "AKIDBASE"),
            ("AWS_SECRET_ACCESS_KEY", BASE_SECRET),
            ("AWS_ENDPOINT_URL_STS", &endpoint),
        ])
        .with_aws_roles([(
            "aws".to_owned(),
            role("arn:aws:iam::111111111111:role/acme-reader", None),
        )]),
    );
    let err = e.execute(&cx5, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("STS AssumeRole at"), "{err}");
    assert!(err.contains("from aws source Environment"), "{err}");
    assert!(!err.contains(BASE_SECRET), "{err}");

    assert!(iam.requests().is_empty(), "no IAM call without credentials");
    let logged = logs::recorded();
    assert!(
        !logged.contains(BASE_SECRET) && !logged.contains(WEB_TOKEN),
        "a secret in the logs"
    );
}

/// Through the served MCP endpoint of a real App: two JWT tenants whose configuration names
/// a role each, with base keys in their own env files. Each query reaches IAM with its own
/// role's credentials; `server_info` names the source and the session's expiry for the
/// caller's tenant only; the tool results, the audit and the logs hold no secret, and the
/// audit outcome carries STS's and IAM's request ids.
#[tokio::test]
async fn through_the_app_each_tenant_gets_its_role_and_the_report_shows_it() {
    use crate::mcp_support::{call, install_crypto_provider, text_of};
    use crate::support::identity::{ISSUER, RESOURCE, SigningKey, claims, rmcp_client};

    let Some(registry) = registry() else { return };
    install_crypto_provider();
    logs::capture();
    let (sts, iam) = (Mock::start().await, iam().await);
    sts.route_sequence(
        "POST /",
        vec![
            sts_answer(
                "AssumeRole",
                "ASIAAPPACME",
                "app-acme-secret",
                "app-acme-token",
                Duration::from_secs(3600),
            ),
            sts_answer(
                "AssumeRole",
                "ASIAAPPGLOBEX",
                "app-globex-secret",
                "app-globex-token",
                Duration::from_secs(3600),
            ),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let (acme_env, globex_env) = (dir.path().join("acme.env"), dir.path().join("globex.env"));
    for (file, id) in [(&acme_env, "AKIDAPPACME"), (&globex_env, "AKIDAPPGLOBEX")] {
        std::fs::write(
            file,
            format!(
                "AWS_ACCESS_KEY_ID={id}\nAWS_SECRET_ACCESS_KEY={BASE_SECRET}\nAWS_ENDPOINT_URL_STS={}\n",
                sts.url()
            ),
        )
        .unwrap();
    }
    let key = SigningKey::new("k1");
    let pem = dir.path().join("signer.pem");
    std::fs::write(&pem, key.public_pem()).unwrap();
    let audit_dir = dir.path().join("audit");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {root}\nproviders:\n  aws:\n    base_url: {iam}\n    auth: {auth}\ncredentials:\n  process_env: false\naudit:\n  file:\n    dir: {audit}\ntenants:\n  - id: default\n  - id: acme\n    mode: read_only\n    credentials:\n      env_file: {acme}\n    providers:\n      aws:\n        role_arn: arn:aws:iam::111111111111:role/acme-reader\n        external_id: acme-ext-id\n        duration: 30m\n  - id: globex\n    mode: read_only\n    credentials:\n      env_file: {globex}\n    providers:\n      aws:\n        role_arn: arn:aws:iam::222222222222:role/globex-reader\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme, globex]\n",
            root = registry.display(),
            iam = iam.url(),
            auth = aws_auth(),
            audit = audit_dir.display(),
            acme = acme_env.display(),
            globex = globex_env.display(),
            pem = pem.display(),
        ),
    )
    .unwrap();
    let config = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(config),
        env: Default::default(),
    })
    .unwrap();
    let app = querygate::app::App::build(config).await.unwrap();
    let url = app.mcp_url();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    let http = reqwest::Client::new();
    let acme = rmcp_client(http.clone(), &url, Some(&key.sign(&claims("acme")))).await;
    let globex = rmcp_client(http, &url, Some(&key.sign(&claims("globex")))).await;
    let secrets = [
        BASE_SECRET,
        "app-acme-secret",
        "app-acme-token",
        "app-globex-secret",
        "app-globex-token",
    ];
    let clean = |result: &rmcp::model::CallToolResult| {
        let shown = format!("{} {:?}", text_of(result), result.structured_content);
        for secret in secrets {
            assert!(!shown.contains(secret), "a secret in the output: {shown}");
        }
    };
    let aws_row = |result: &rmcp::model::CallToolResult| {
        let structured = result.structured_content.clone().unwrap_or(Value::Null);
        structured["credentials"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["provider"] == "aws").cloned())
            .unwrap_or_else(|| panic!("no aws row: {structured}"))
    };

    // Before any query: the configured source and role, no session yet.
    let info = call(&acme, "server_info", json!({})).await;
    clean(&info);
    let row = aws_row(&info);
    assert_eq!(
        row["resolved_source"],
        "aws:Environment+AssumeRole:arn:aws:iam::111111111111:role/acme-reader",
        "{row}"
    );
    assert_eq!(row["token_expires_at"], Value::Null, "{row}");

    for client in [&acme, &globex] {
        let done = call(client, "run_select_query", json!({"sql": SELECT})).await;
        assert_ne!(done.is_error, Some(true), "{done:?}");
        assert!(text_of(&done).contains("alice"), "{}", text_of(&done));
        clean(&done);
    }
    let calls = iam.requests();
    assert_eq!(calls.len(), 2);
    for (call, (id, secret, token)) in calls.iter().zip([
        ("ASIAAPPACME", "app-acme-secret", "app-acme-token"),
        ("ASIAAPPGLOBEX", "app-globex-secret", "app-globex-token"),
    ]) {
        verify_sigv4_with(call, id, secret, "us-east-1", "iam");
        assert_eq!(header(call, "x-amz-security-token"), token);
    }
    let asked = sts.requests();
    assert_eq!(asked.len(), 2);
    assert_eq!(
        field(&asked[0], "RoleSessionName"),
        "acme.acme-agent__https___idp.test_"
    );
    assert_eq!(field(&asked[0], "DurationSeconds"), "1800");
    assert_eq!(field(&asked[0], "ExternalId"), "acme-ext-id");
    assert_eq!(
        field(&asked[1], "RoleArn"),
        "arn:aws:iam::222222222222:role/globex-reader"
    );
    assert_eq!(field(&asked[1], "Tags.member.1.Value"), "globex");

    let info = call(&globex, "server_info", json!({})).await;
    clean(&info);
    let row = aws_row(&info);
    assert_eq!(
        row["resolved_source"],
        "aws:Environment+AssumeRole:arn:aws:iam::222222222222:role/globex-reader",
        "{row}"
    );
    let expires = row["token_expires_at"]
        .as_str()
        .unwrap_or_else(|| panic!("no expiry: {row}"));
    let expires = humantime::parse_rfc3339(expires).unwrap();
    let left = expires
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(
        left > Duration::from_secs(3500) && left <= Duration::from_secs(3601),
        "{row}"
    );
    drop((acme, globex));
    shutdown.cancel();

    let audit_text: String = std::fs::read_dir(&audit_dir)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(audit_text.contains("run_select_query"), "{audit_text}");
    assert!(
        audit_text.contains("c6104cbe-af31-11e0-8154-cbc7ccf896c7"),
        "STS's request id in the audit: {audit_text}"
    );
    let logged = logs::recorded();
    for secret in secrets {
        assert!(!audit_text.contains(secret), "a secret in the audit");
        assert!(
            !logged.contains(secret),
            "a secret in the logs: {}",
            logged
                .lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[test]
fn misconfigured_roles_are_refused_at_load_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        "tenants:\n  - id: default\n    providers:\n      aws:\n        role_arn: arn:aws:s3:::bucket\n        external_id: \"x\"\n        duration: 13h\n      awscc:\n        role_arn: arn:aws:iam::1:role/ok\n        extra: 1\n",
    )
    .unwrap();
    let err = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file.clone()),
        env: Default::default(),
    })
    .unwrap_err()
    .to_string();
    // Unknown keys stop the load first.
    assert!(err.contains("extra"), "{err}");
    std::fs::write(
        &file,
        "tenants:\n  - id: default\n    providers:\n      aws:\n        role_arn: arn:aws:s3:::bucket\n        external_id: \"x\"\n        duration: 13h\n",
    )
    .unwrap();
    let err = querygate::config::Config::load(&querygate::config::Sources {
        file: Some(file),
        env: Default::default(),
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("tenants[0].providers.aws.role_arn"), "{err}");
    assert!(
        err.contains("tenants[0].providers.aws.external_id"),
        "{err}"
    );
    assert!(err.contains("tenants[0].providers.aws.duration"), "{err}");
}
