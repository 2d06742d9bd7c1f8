//! The document-level federation types (`aws_web_identity`, `gcp_workload_identity`,
//! `azure_federated`), set as a provider's auth the way StackQL's `--auth` sets them
//! (`providers.<name>.auth`), over the current registry's `aws`, `google` and `azure`
//! documents. Mock token endpoints on 127.0.0.1 (STS, Google STS, Entra) record the
//! subject token they receive: each tenant's own token file (named by its own variable),
//! the file's current contents at each refresh, and a token file written in the document
//! refused for a tenant that may not use the host's identity.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::{Value, json};

use crate::mock::{Mock, Recorded, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;

fn store(pairs: &[(&str, &str)]) -> CredentialStore {
    CredentialStore::fixed(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
    )
}

fn tenant(store: CredentialStore) -> ExecContext {
    ExecContext {
        credentials: Arc::new(store),
        ..ExecContext::anonymous_default()
    }
}

fn header(r: &Recorded, name: &str) -> String {
    r.headers
        .get(name)
        .map(|v| v.to_str().unwrap_or("<not text>").to_owned())
        .unwrap_or_default()
}

fn field(r: &Recorded, name: &str) -> String {
    url::form_urlencoded::parse(&r.body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn engine(root: &std::path::Path, provider: &str, base_url: String, auth: Value) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        provider.to_owned(),
        ProviderSettings {
            base_url: Some(base_url),
            auth: Some(auth),
            ..Default::default()
        },
    );
    Engine::new(config).expect("engine")
}

/// A token file per tenant, rewritten in place to rotate.
struct TokenFiles {
    _dir: tempfile::TempDir,
    a: String,
    b: String,
}

fn token_files() -> TokenFiles {
    let dir = tempfile::tempdir().expect("dir");
    let a = dir.path().join("a-token").display().to_string();
    let b = dir.path().join("b-token").display().to_string();
    std::fs::write(&a, "eyJ.tenant-a-subject-1.sig\n").expect("a");
    std::fs::write(&b, "eyJ.tenant-b-subject-1.sig\n").expect("b");
    TokenFiles { _dir: dir, a, b }
}

/// Runs `query` as `cx` until `api`'s last request satisfies `seen`, within a bound.
async fn until_seen(
    e: &Engine,
    cx: &ExecContext,
    query: &str,
    api: &Mock,
    seen: impl Fn(&Recorded) -> bool + Copy,
) {
    crate::support::wait::eventually(
        "the API to see the refreshed credential",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async move {
            e.execute(cx, query).await.map_err(|err| err.to_string())?;
            match api.requests().last() {
                Some(last) if seen(last) => Ok(()),
                _ => Err("not yet".to_owned()),
            }
        },
    )
    .await;
}

// ---- azure_federated ------------------------------------------------------------------

const AZ_TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const AZ_SELECT: &str =
    "SELECT name FROM azure.resource.resource_groups WHERE subscription_id = 'sub1' ORDER BY name";

fn entra_token(token: &str, expires_in: u64) -> Reply {
    Reply::json(json!({"token_type": "Bearer", "expires_in": expires_in,
        "ext_expires_in": expires_in, "access_token": token}))
}

#[tokio::test]
async fn azure_federated_posts_each_tenants_current_token_as_the_client_assertion() {
    let Some(registry) = current_registry(&[
        "src/azure/v00.00.00000/provider.yaml",
        "src/azure/v00.00.00000/services/resource.yaml",
    ]) else {
        return;
    };
    let (entra, arm) = (Mock::start().await, Mock::start().await);
    arm.route(
        "/subscriptions/sub1/resourcegroups",
        Reply::json(
            json!({"value": [{"id": "/subscriptions/sub1/resourceGroups/rg-web",
            "name": "rg-web", "location": "westeurope", "properties": {}}]}),
        ),
    );
    let path = format!("POST /{AZ_TENANT}/oauth2/v2.0/token");
    entra.route_sequence(
        &path,
        vec![
            entra_token("arm-a-1", 61),
            entra_token("arm-b-1", 3600),
            entra_token("arm-a-2", 3600),
        ],
    );
    let auth = json!({"type": "azure_federated", "azure_tenant_id": AZ_TENANT,
        "client_id_env_var": "APP_ID", "scopes": ["https://management.azure.com/.default"],
        "oidc_subject_token_file_env_var": "OIDC_SUBJECT_TOKEN_FILE",
        "azure_federated_endpoint": format!("{}/{AZ_TENANT}/oauth2/v2.0/token", entra.url())});
    let e = engine(registry.path(), "azure", arm.url(), auth.clone());
    let files = token_files();
    let a = tenant(store(&[
        ("OIDC_SUBJECT_TOKEN_FILE", &files.a),
        ("APP_ID", "app-a"),
    ]));
    let b = tenant(store(&[
        ("OIDC_SUBJECT_TOKEN_FILE", &files.b),
        ("APP_ID", "app-b"),
    ]));
    let rows = e.execute(&a, AZ_SELECT).await.expect("tenant a");
    assert_eq!(row_lines(&rows), ["rg-web"]);
    e.execute(&b, AZ_SELECT).await.expect("tenant b");
    std::fs::write(&files.a, "eyJ.tenant-a-subject-2.sig\n").expect("rotate");
    until_seen(&e, &a, AZ_SELECT, &arm, |r| {
        header(r, "authorization") == "Bearer arm-a-2"
    })
    .await;
    let asked = entra.requests();
    let seen: Vec<(String, String)> = asked
        .iter()
        .map(|r| (field(r, "client_id"), field(r, "client_assertion")))
        .collect();
    assert_eq!(
        seen,
        [
            ("app-a".to_owned(), "eyJ.tenant-a-subject-1.sig".to_owned()),
            ("app-b".to_owned(), "eyJ.tenant-b-subject-1.sig".to_owned()),
            ("app-a".to_owned(), "eyJ.tenant-a-subject-2.sig".to_owned()),
        ]
    );
    for r in &asked {
        assert_eq!(
            field(r, "client_assertion_type"),
            "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
        );
        assert_eq!(field(r, "scope"), "https://management.azure.com/.default");
    }
    let bearers: Vec<String> = arm
        .requests()
        .iter()
        .map(|r| header(r, "authorization"))
        .collect();
    assert_eq!(bearers[..2], ["Bearer arm-a-1", "Bearer arm-b-1"]);

    // A token file that cannot be read is named by the variable that named it.
    let missing = tenant(store(&[
        ("OIDC_SUBJECT_TOKEN_FILE", "/nonexistent/oidc-token"),
        ("APP_ID", "app-c"),
    ]));
    let err = e
        .execute(&missing, AZ_SELECT)
        .await
        .expect_err("no token file")
        .to_string();
    assert!(
        err.contains("the subject token file (named by variable OIDC_SUBJECT_TOKEN_FILE) '/nonexistent/oidc-token' cannot be read"),
        "{err}"
    );

    // A token file written in the shared document is the host's: refused for tenant b.
    let mut host_file = auth;
    host_file
        .as_object_mut()
        .expect("object")
        .remove("oidc_subject_token_file_env_var");
    host_file["oidc_subject_token_file"] = json!(files.a);
    let e = engine(registry.path(), "azure", arm.url(), host_file);
    let before = entra.requests().len();
    let err = e
        .execute(&b, AZ_SELECT)
        .await
        .expect_err("host file")
        .to_string();
    assert!(
        err.contains("serves only the tenant that reads the process environment"),
        "{err}"
    );
    assert_eq!(entra.requests().len(), before, "no token request");
}

// ---- gcp_workload_identity ------------------------------------------------------------

const GCP_SELECT: &str =
    "SELECT name FROM google.storage.buckets WHERE project = 'p1' ORDER BY name";
const AUDIENCE: &str =
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/gha";

fn sts_token(token: &str, expires_in: u64) -> Reply {
    Reply::json(json!({"access_token": token,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer", "expires_in": expires_in}))
}

#[tokio::test]
async fn gcp_workload_identity_exchanges_each_tenants_current_token_at_sts() {
    let Some(registry) = current_registry(&[
        "src/googleapis.com/v00.00.00000/provider.yaml",
        "src/googleapis.com/v00.00.00000/services/storage.yaml",
    ]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, Mock::start().await);
    storage.route(
        "/storage/v1/b",
        Reply::json(json!({"kind": "storage#buckets", "items": [
            {"kind": "storage#bucket", "name": "logs-p1", "location": "EU"}]})),
    );
    google.route_sequence(
        "POST /v1/token",
        vec![
            sts_token("gcs-a-1", 61),
            sts_token("gcs-b-1", 3600),
            sts_token("gcs-a-2", 3600),
        ],
    );
    let auth = json!({"type": "gcp_workload_identity",
        "gcp_workload_identity_audience": AUDIENCE,
        "gcp_workload_identity_token_url": format!("{}/v1/token", google.url()),
        "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
        "oidc_subject_token_file_env_var": "OIDC_SUBJECT_TOKEN_FILE"});
    let e = engine(
        registry.path(),
        "google",
        format!("{}/storage/v1", storage.url()),
        auth,
    );
    let files = token_files();
    let a = tenant(store(&[("OIDC_SUBJECT_TOKEN_FILE", &files.a)]));
    let b = tenant(store(&[("OIDC_SUBJECT_TOKEN_FILE", &files.b)]));
    let rows = e.execute(&a, GCP_SELECT).await.expect("tenant a");
    assert_eq!(row_lines(&rows), ["logs-p1"]);
    e.execute(&b, GCP_SELECT).await.expect("tenant b");
    std::fs::write(&files.a, "eyJ.tenant-a-subject-2.sig\n").expect("rotate");
    until_seen(&e, &a, GCP_SELECT, &storage, |r| {
        header(r, "authorization") == "Bearer gcs-a-2"
    })
    .await;
    let asked = google.requests();
    let subjects: Vec<String> = asked.iter().map(|r| field(r, "subject_token")).collect();
    assert_eq!(
        subjects,
        [
            "eyJ.tenant-a-subject-1.sig",
            "eyJ.tenant-b-subject-1.sig",
            "eyJ.tenant-a-subject-2.sig"
        ]
    );
    for r in &asked {
        assert_eq!(
            field(r, "grant_type"),
            "urn:ietf:params:oauth:grant-type:token-exchange"
        );
        assert_eq!(field(r, "audience"), AUDIENCE);
        assert_eq!(
            field(r, "subject_token_type"),
            "urn:ietf:params:oauth:token-type:jwt"
        );
    }
}

// ---- aws_web_identity -----------------------------------------------------------------

const AWS_SELECT: &str = "SELECT UserName FROM aws.iam.users ORDER BY UserName";
const ROLE: &str = "arn:aws:iam::123456789012:role/MyGhaRole";

fn expiration(after: Duration) -> String {
    humantime::format_rfc3339_seconds(SystemTime::now() + after).to_string()
}

fn web_identity_answer(key_id: &str, lifetime: Duration) -> Reply {
    Reply::bytes(
        "text/xml",
        format!(
            r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <Credentials>
      <AccessKeyId>{key_id}</AccessKeyId>
      <SecretAccessKey>secret-of-{key_id}</SecretAccessKey>
      <SessionToken>session-of-{key_id}</SessionToken>
      <Expiration>{}</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#,
            expiration(lifetime)
        )
        .into_bytes(),
    )
}

fn key_id(r: &Recorded) -> String {
    header(r, "authorization")
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or("<unsigned>")
        .to_owned()
}

#[tokio::test]
async fn aws_web_identity_assumes_the_role_with_each_tenants_current_token() {
    let Some(registry) = current_registry(&[
        "src/aws/v00.00.00000/provider.yaml",
        "src/aws/v00.00.00000/services/iam.yaml",
    ]) else {
        return;
    };
    let (sts, iam) = (Mock::start().await, Mock::start().await);
    iam.route(
        "/",
        Reply::bytes(
            "text/xml",
            br#"<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><Users><member><UserId>AIDA1</UserId><Path>/</Path><UserName>alice</UserName><Arn>arn:aws:iam::123456789012:user/alice</Arn><CreateDate>2024-01-01T00:00:00Z</CreateDate></member></Users><IsTruncated>false</IsTruncated></ListUsersResult></ListUsersResponse>"#.to_vec(),
        ),
    );
    sts.route_sequence(
        "POST /",
        vec![
            web_identity_answer("ASIATENANTA1", Duration::from_secs(62)),
            web_identity_answer("ASIATENANTB1", Duration::from_secs(3600)),
            web_identity_answer("ASIATENANTA2", Duration::from_secs(3600)),
        ],
    );
    let auth = json!({"type": "aws_web_identity", "aws_role_arn": ROLE,
        "aws_role_session_name": "querygate-gha", "aws_sts_endpoint": sts.url(),
        "aws_sts_region": "us-east-1",
        "oidc_subject_token_file_env_var": "OIDC_SUBJECT_TOKEN_FILE",
        "signing_region": "us-east-1", "signing_service": "iam"});
    let e = engine(registry.path(), "aws", iam.url(), auth);
    let files = token_files();
    let a = tenant(store(&[("OIDC_SUBJECT_TOKEN_FILE", &files.a)]));
    let b = tenant(store(&[("OIDC_SUBJECT_TOKEN_FILE", &files.b)]));
    let rows = e.execute(&a, AWS_SELECT).await.expect("tenant a");
    assert_eq!(row_lines(&rows), ["alice"]);
    e.execute(&b, AWS_SELECT).await.expect("tenant b");
    std::fs::write(&files.a, "eyJ.tenant-a-subject-2.sig\n").expect("rotate");
    until_seen(&e, &a, AWS_SELECT, &iam, |r| key_id(r) == "ASIATENANTA2").await;
    let asked = sts.requests();
    let tokens: Vec<String> = asked.iter().map(|r| field(r, "WebIdentityToken")).collect();
    assert_eq!(
        tokens,
        [
            "eyJ.tenant-a-subject-1.sig",
            "eyJ.tenant-b-subject-1.sig",
            "eyJ.tenant-a-subject-2.sig"
        ]
    );
    for r in &asked {
        assert_eq!(field(r, "Action"), "AssumeRoleWithWebIdentity");
        assert_eq!(field(r, "RoleArn"), ROLE);
        assert_eq!(field(r, "RoleSessionName"), "querygate-gha");
    }
    let sources = e.credential_sources(&b).await.expect("sources");
    let row = sources
        .iter()
        .find(|r| r.provider == "aws")
        .expect("aws row");
    assert_eq!(
        row.resolved_source,
        "aws_web_identity:env:OIDC_SUBJECT_TOKEN_FILE"
    );
    let signed: Vec<String> = iam.requests().iter().map(key_id).collect();
    assert_eq!(signed[..2], ["ASIATENANTA1", "ASIATENANTB1"]);
    assert_eq!(
        header(&iam.requests()[1], "x-amz-security-token"),
        "session-of-ASIATENANTB1"
    );
}
