//! Google's `service_account` auth beyond keys, end to end over the current registry's
//! `google` provider document (unchanged: `auth: {type: service_account,
//! credentialsenvvar: GOOGLE_CREDENTIALS}`): a SELECT of `google.storage.buckets` reaches a
//! mock Cloud Storage on 127.0.0.1 with the token that a mock STS and IAM credentials
//! (`external_account`, the URLs in the ADC file), a mock OAuth token endpoint
//! (`authorized_user`, the file's `token_uri`) or a mock metadata server
//! (`GCE_METADATA_HOST`) issued. Tokens are cached, refreshed after they expire, a rotated
//! subject-token file is used on the next refresh, two tenants never share a token, a
//! failure names the source and the variable with no secret in the error or the logs, and a
//! tenant env file swapped on disk (as Kubernetes swaps a Secret mount's `..data`) is used
//! without a `reload_credentials` call, through a served App whose `server_info` names the
//! resolved source and the token's expiry.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use querygate::engine::{CredentialStore, Engine, EngineConfig, ExecContext, ProviderSettings};
use serde_json::{Value, json};

use crate::logs;
use crate::mock::{Mock, Recorded, Reply};
use crate::support::corpus::row_lines;
use crate::support::current::current_registry;

const PROVIDER: &str = "src/googleapis.com/v00.00.00000/provider.yaml";
const STORAGE: &str = "src/googleapis.com/v00.00.00000/services/storage.yaml";
const SELECT: &str = "SELECT name FROM google.storage.buckets WHERE project = 'p1' ORDER BY name";
const BUCKETS: &str = "/storage/v1/b";
const CLOUD_PLATFORM: &str = "https://www.googleapis.com/auth/cloud-platform";
const AUDIENCE: &str =
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/pool/providers/k8s";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const IMPERSONATE: &str =
    "/v1/projects/-/serviceAccounts/reader@p1.iam.gserviceaccount.com:generateAccessToken";
const SUBJECT_1: &str = "eyJ.gke-projected-token-1.sig";
const SUBJECT_2: &str = "eyJ.gke-projected-token-2.sig";
const CLIENT_SECRET: &str = "gcs-planted-client-secret-3317";
const REFRESH_TOKEN: &str = "1//planted-refresh-token-9921";

/// Cloud Storage's Buckets: list answer.
async fn storage() -> Mock {
    let mock = Mock::start().await;
    mock.route(
        BUCKETS,
        Reply::json(json!({"kind": "storage#buckets", "items": [
            {"kind": "storage#bucket", "name": "logs-p1", "location": "EU"},
            {"kind": "storage#bucket", "name": "assets-p1", "location": "US"}
        ]})),
    );
    mock
}

fn rows() -> Vec<&'static str> {
    vec!["assets-p1", "logs-p1"]
}

/// The current registry's `google` documents with Cloud Storage at `storage` (the
/// document's auth kept).
fn engine(root: &Path, storage: &Mock) -> Engine {
    let mut config = EngineConfig::new(root.to_path_buf());
    config.providers.insert(
        "google".to_owned(),
        ProviderSettings {
            base_url: Some(format!("{}/storage/v1", storage.url())),
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

fn tenant(store: CredentialStore) -> ExecContext {
    ExecContext {
        credentials: Arc::new(store),
        ..ExecContext::anonymous_default()
    }
}

async fn select(e: &Engine, cx: &ExecContext) -> Vec<String> {
    let out = e
        .execute(cx, SELECT)
        .await
        .unwrap_or_else(|err| panic!("{err}"));
    row_lines(&out)
}

/// The `Authorization` values Cloud Storage received, in order.
fn bearers(storage: &Mock) -> Vec<String> {
    storage
        .requests()
        .iter()
        .filter(|r| r.path == BUCKETS)
        .map(|r| header(r, "authorization"))
        .collect()
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

fn to(mock: &Mock, method: &str, path: &str) -> Vec<Recorded> {
    mock.requests()
        .into_iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

/// Runs the SELECT until Cloud Storage sees `bearer`, within a bound.
async fn select_until_bearer(e: &Engine, cx: &ExecContext, storage: &Mock, bearer: &str) {
    crate::support::wait::eventually(
        &format!("Cloud Storage to see {bearer}"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async move {
            assert_eq!(select(e, cx).await, rows());
            match bearers(storage).last() {
                Some(last) if last == bearer => Ok(()),
                _ => Err(bearers(storage)),
            }
        },
    )
    .await;
}

/// An STS answer (RFC 8693).
fn sts_token(token: &str, expires_in: u64) -> Reply {
    Reply::json(json!({
        "access_token": token,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "token_type": "Bearer",
        "expires_in": expires_in,
    }))
}

/// An OAuth token endpoint's answer to a refresh-token grant.
fn oauth_token(token: &str, expires_in: u64) -> Reply {
    Reply::json(json!({
        "access_token": token,
        "expires_in": expires_in,
        "scope": CLOUD_PLATFORM,
        "token_type": "Bearer",
    }))
}

/// An `external_account` ADC file reading the subject token from `subject_file`, with
/// STS (and IAM credentials, when `impersonate`) at `google`.
fn external_file(google: &Mock, subject_file: &Path, impersonate: bool) -> Value {
    let mut file = json!({
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": JWT_TYPE,
        "token_url": format!("{}/v1/token", google.url()),
        "credential_source": {"file": subject_file.display().to_string(), "format": {"type": "text"}},
    });
    if impersonate {
        file["service_account_impersonation_url"] = json!(format!("{}{IMPERSONATE}", google.url()));
    }
    file
}

/// An `authorized_user` ADC file (gcloud's login) with its token endpoint at `google`.
fn user_file(google: &Mock, refresh_token: &str) -> String {
    json!({
        "type": "authorized_user",
        "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
        "client_secret": CLIENT_SECRET,
        "refresh_token": refresh_token,
        "token_uri": format!("{}/token", google.url()),
        "quota_project_id": "p1",
    })
    .to_string()
}

fn write(dir: &Path, name: &str, contents: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.display().to_string()
}

#[tokio::test]
async fn external_account_from_a_file_through_sts_and_impersonation() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    google.route("POST /v1/token", sts_token("federated-token-1", 3599));
    let expire = humantime::format_rfc3339_seconds(SystemTime::now() + Duration::from_secs(3600));
    google.route(
        &format!("POST {IMPERSONATE}"),
        Reply::json(
            json!({"accessToken": "ya29.impersonated-1", "expireTime": expire.to_string()}),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let subject = dir.path().join("token");
    std::fs::write(&subject, format!("{SUBJECT_1}\n")).unwrap();
    let adc = write(
        dir.path(),
        "adc.json",
        &external_file(&google, &subject, true).to_string(),
    );
    let e = engine(registry.path(), &storage);
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &adc)]));
    for _ in 0..3 {
        assert_eq!(select(&e, &cx).await, rows());
    }
    assert_eq!(bearers(&storage), vec!["Bearer ya29.impersonated-1"; 3]);
    let sts = to(&google, "POST", "/v1/token");
    assert_eq!(sts.len(), 1, "one exchange for three calls");
    let exchange = &sts[0];
    assert_eq!(
        header(exchange, "content-type"),
        "application/x-www-form-urlencoded"
    );
    for (name, value) in [
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange",
        ),
        ("audience", AUDIENCE),
        ("scope", CLOUD_PLATFORM),
        (
            "requested_token_type",
            "urn:ietf:params:oauth:token-type:access_token",
        ),
        ("subject_token", SUBJECT_1),
        ("subject_token_type", JWT_TYPE),
    ] {
        assert_eq!(field(exchange, name), value, "{name}");
    }
    assert_eq!(
        header(exchange, "authorization"),
        "",
        "no client auth configured"
    );
    let iam = to(&google, "POST", IMPERSONATE);
    assert_eq!(iam.len(), 1);
    assert_eq!(header(&iam[0], "authorization"), "Bearer federated-token-1");
    let body: Value = serde_json::from_slice(&iam[0].body).unwrap();
    assert_eq!(
        body,
        json!({"scope": [CLOUD_PLATFORM], "lifetime": "3600s"})
    );

    // server_info's source and expiry, names only.
    let sources = e.credential_sources(&cx).await.unwrap();
    let row = sources.iter().find(|r| r.provider == "google").unwrap();
    assert_eq!(
        row.resolved_source,
        "service_account:external_account:env:GOOGLE_APPLICATION_CREDENTIALS"
    );
    let expires = humantime::parse_rfc3339(row.token_expires_at.as_deref().unwrap()).unwrap();
    let left = expires.duration_since(SystemTime::now()).unwrap();
    assert!(left > Duration::from_secs(3500), "{left:?}");
    let report = e.reload_credentials(&cx, Some("google")).await.unwrap();
    assert_eq!(
        report.providers[0].status,
        querygate::engine::CredentialStatus::Ok,
        "{report:?}"
    );
}

#[tokio::test]
async fn a_rotated_subject_token_file_is_used_on_the_next_refresh() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    // Cached until 60 s before expiry: the first is kept for one second.
    google.route_sequence(
        "POST /v1/token",
        vec![sts_token("sts-token-1", 61), sts_token("sts-token-2", 3599)],
    );
    let dir = tempfile::tempdir().unwrap();
    let subject = dir.path().join("token");
    std::fs::write(&subject, SUBJECT_1).unwrap();
    let adc = write(
        dir.path(),
        "adc.json",
        &external_file(&google, &subject, false).to_string(),
    );
    let e = engine(registry.path(), &storage);
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &adc)]));
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(bearers(&storage), ["Bearer sts-token-1"]);
    // Kubernetes rotates the projected token in place.
    std::fs::write(&subject, SUBJECT_2).unwrap();
    select_until_bearer(&e, &cx, &storage, "Bearer sts-token-2").await;
    let sts = to(&google, "POST", "/v1/token");
    assert_eq!(sts.len(), 2);
    assert_eq!(field(&sts[0], "subject_token"), SUBJECT_1);
    assert_eq!(field(&sts[1], "subject_token"), SUBJECT_2);
    // Without impersonation STS is asked for the query's scope itself.
    assert_eq!(field(&sts[1], "scope"), CLOUD_PLATFORM);
    // The refreshed token is cached in turn.
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(to(&google, "POST", "/v1/token").len(), 2);
}

#[tokio::test]
async fn a_url_sourced_subject_token_is_read_from_its_json_answer() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    google.route("POST /v1/token", sts_token("sts-from-url", 3599));
    google.route(
        "/metadata/identity/oauth2/token",
        Reply::json(json!({"access_token": SUBJECT_1, "token_type": "Bearer"})),
    );
    let file = json!({
        "type": "external_account",
        "audience": AUDIENCE,
        "subject_token_type": JWT_TYPE,
        "token_url": format!("{}/v1/token", google.url()),
        "client_id": "sts-client",
        "client_secret": CLIENT_SECRET,
        "credential_source": {
            "url": format!("{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource=api://gcp", google.url()),
            "headers": {"Metadata": "True"},
            "format": {"type": "json", "subject_token_field_name": "access_token"}
        },
    });
    let e = engine(registry.path(), &storage);
    // The document's own variable holds the ADC JSON this time.
    let cx = tenant(store(&[("GOOGLE_CREDENTIALS", &file.to_string())]));
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(bearers(&storage), ["Bearer sts-from-url"]);
    let subject = to(&google, "GET", "/metadata/identity/oauth2/token");
    assert_eq!(subject.len(), 1);
    assert_eq!(header(&subject[0], "metadata"), "True");
    assert_eq!(
        subject[0].query.as_deref(),
        Some("api-version=2018-02-01&resource=api://gcp")
    );
    let sts = to(&google, "POST", "/v1/token");
    assert_eq!(field(&sts[0], "subject_token"), SUBJECT_1);
    let basic = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        format!("sts-client:{CLIENT_SECRET}"),
    );
    assert_eq!(header(&sts[0], "authorization"), format!("Basic {basic}"));
    let sources = e.credential_sources(&cx).await.unwrap();
    assert_eq!(
        sources[0].resolved_source,
        "service_account:external_account:env:GOOGLE_CREDENTIALS"
    );
}

#[tokio::test]
async fn authorized_user_refreshes_its_token_when_it_expires() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    google.route_sequence(
        "POST /token",
        vec![
            oauth_token("ya29.user-1", 61),
            oauth_token("ya29.user-2", 3599),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let adc = write(dir.path(), "adc.json", &user_file(&google, REFRESH_TOKEN));
    let e = engine(registry.path(), &storage);
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &adc)]));
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(bearers(&storage), ["Bearer ya29.user-1"]);
    select_until_bearer(&e, &cx, &storage, "Bearer ya29.user-2").await;
    let asked = to(&google, "POST", "/token");
    assert_eq!(asked.len(), 2);
    for request in &asked {
        assert_eq!(field(request, "grant_type"), "refresh_token");
        assert_eq!(field(request, "refresh_token"), REFRESH_TOKEN);
        assert_eq!(field(request, "client_secret"), CLIENT_SECRET);
        assert!(field(request, "client_id").ends_with(".apps.googleusercontent.com"));
    }
    assert_eq!(select(&e, &cx).await, rows());
    assert_eq!(
        to(&google, "POST", "/token").len(),
        2,
        "cached after the refresh"
    );
    let sources = e.credential_sources(&cx).await.unwrap();
    assert_eq!(
        sources[0].resolved_source,
        "service_account:authorized_user:env:GOOGLE_APPLICATION_CREDENTIALS"
    );
    assert!(sources[0].token_expires_at.is_some());
}

#[tokio::test]
async fn the_metadata_server_serves_only_the_host_tenant() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (metadata, storage) = (Mock::start().await, storage().await);
    let token = "/computeMetadata/v1/instance/service-accounts/default/token";
    metadata.route(
        token,
        Reply::json(
            json!({"access_token": "ya29.gce", "expires_in": 3599, "token_type": "Bearer"}),
        )
        .header("Metadata-Flavor", "Google"),
    );
    let e = engine(registry.path(), &storage);
    let host = metadata.url().trim_start_matches("http://").to_owned();
    let empty = tempfile::tempdir().unwrap();
    let gcloud = empty.path().display().to_string();
    let pairs = [
        ("GCE_METADATA_HOST", host.as_str()),
        ("CLOUDSDK_CONFIG", gcloud.as_str()),
    ];
    let cx = tenant(store(&pairs).with_host_identity(true));
    for _ in 0..2 {
        assert_eq!(select(&e, &cx).await, rows());
    }
    assert_eq!(bearers(&storage), vec!["Bearer ya29.gce"; 2]);
    let asked = metadata.requests();
    assert_eq!(asked.len(), 1, "cached: {asked:?}");
    assert_eq!(header(&asked[0], "metadata-flavor"), "Google");
    assert_eq!(
        asked[0].query.as_deref(),
        Some("scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform")
    );
    let sources = e.credential_sources(&cx).await.unwrap();
    assert_eq!(sources[0].resolved_source, "service_account:gce_metadata");
    assert!(sources[0].token_expires_at.is_some());

    // Another tenant with the same variables may not use the host's identity.
    let other = tenant(store(&pairs));
    let err = e.execute(&other, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("GOOGLE_CREDENTIALS is not set"), "{err}");
    assert!(
        err.contains("GOOGLE_APPLICATION_CREDENTIALS is not set"),
        "{err}"
    );
    assert!(err.contains("GCE metadata server: not configured"), "{err}");
    assert_eq!(metadata.requests().len(), 1);

    // Something at that address that is not a metadata server is refused.
    let impostor = Mock::start().await;
    impostor.route(
        token,
        Reply::json(json!({"access_token": "ya29.fake", "expires_in": 3599})),
    );
    let host = impostor.url().trim_start_matches("http://").to_owned();
    let cx = tenant(
        store(&[
            ("GCE_METADATA_HOST", host.as_str()),
            ("CLOUDSDK_CONFIG", gcloud.as_str()),
        ])
        .with_host_identity(true),
    );
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("without Metadata-Flavor: Google"), "{err}");
    assert!(
        err.contains("gce_metadata, variable GCE_METADATA_HOST"),
        "{err}"
    );
    assert_eq!(bearers(&storage).len(), 2);
}

#[tokio::test]
async fn two_tenants_never_see_each_others_tokens() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    google.route_sequence(
        "POST /token",
        vec![
            oauth_token("ya29.tenant-a", 3599),
            oauth_token("ya29.tenant-b", 3599),
        ],
    );
    let e = engine(registry.path(), &storage);
    let a = tenant(store(&[(
        "GOOGLE_CREDENTIALS",
        &user_file(&google, "1//refresh-a"),
    )]));
    let b = tenant(store(&[(
        "GOOGLE_CREDENTIALS",
        &user_file(&google, "1//refresh-b"),
    )]));
    assert_eq!(select(&e, &a).await, rows());
    assert_eq!(select(&e, &b).await, rows());
    assert_eq!(select(&e, &a).await, rows());
    assert_eq!(select(&e, &b).await, rows());
    assert_eq!(
        bearers(&storage),
        [
            "Bearer ya29.tenant-a",
            "Bearer ya29.tenant-b",
            "Bearer ya29.tenant-a",
            "Bearer ya29.tenant-b"
        ]
    );
    let asked = to(&google, "POST", "/token");
    assert_eq!(asked.len(), 2, "one token per tenant");
    assert_eq!(field(&asked[0], "refresh_token"), "1//refresh-a");
    assert_eq!(field(&asked[1], "refresh_token"), "1//refresh-b");
    // The same material in a third tenant's store still gets its own token.
    let c = tenant(store(&[(
        "GOOGLE_CREDENTIALS",
        &user_file(&google, "1//refresh-a"),
    )]));
    assert_eq!(select(&e, &c).await, rows());
    assert_eq!(to(&google, "POST", "/token").len(), 3);
}

#[tokio::test]
async fn failures_name_the_source_and_variable_and_never_the_secret() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    logs::capture();
    let (google, storage) = (Mock::start().await, storage().await);
    // STS's answer to a bad subject token (its description may quote the request).
    google.route(
        "POST /v1/token",
        Reply::status(
            400,
            &json!({"error": "invalid_grant",
                    "error_description": format!("The audience in ID Token does not match: {SUBJECT_1}")})
            .to_string(),
        ),
    );
    google.route(
        "POST /token",
        Reply::status(
            401,
            &json!({"error": "invalid_client",
                    "error_description": format!("bad secret {CLIENT_SECRET} for {REFRESH_TOKEN}")})
            .to_string(),
        ),
    );
    let dir = tempfile::tempdir().unwrap();
    let subject = dir.path().join("token");
    std::fs::write(&subject, SUBJECT_1).unwrap();
    let adc = write(
        dir.path(),
        "adc.json",
        &external_file(&google, &subject, false).to_string(),
    );
    let e = engine(registry.path(), &storage);
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &adc)]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("answered 400 (invalid_grant)"), "{err}");
    assert!(
        err.contains("service_account source external_account"),
        "{err}"
    );
    assert!(err.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{err}");
    assert!(!err.contains(SUBJECT_1), "{err}");

    // A subject-token file that is not there: the file field and the variable are named.
    let missing = write(
        dir.path(),
        "missing.json",
        &external_file(&google, Path::new("/nonexistent/gcp-token"), false).to_string(),
    );
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &missing)]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(
        err.contains("'/nonexistent/gcp-token' (credential_source.file)"),
        "{err}"
    );
    assert!(err.contains("GOOGLE_APPLICATION_CREDENTIALS"), "{err}");

    // gcloud's login refused: neither the client secret nor the refresh token is shown.
    let cx = tenant(store(&[(
        "GOOGLE_CREDENTIALS",
        &user_file(&google, REFRESH_TOKEN),
    )]));
    let err = e.execute(&cx, SELECT).await.unwrap_err().to_string();
    assert!(err.contains("answered 401 (invalid_client)"), "{err}");
    assert!(
        err.contains("authorized_user from variable GOOGLE_CREDENTIALS"),
        "{err}"
    );
    assert!(
        !err.contains(CLIENT_SECRET) && !err.contains(REFRESH_TOKEN),
        "{err}"
    );

    // Nothing configured: every source is named with why it was skipped.
    let err = e
        .execute(&tenant(store(&[])), SELECT)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("service_account found no credential: variable GOOGLE_CREDENTIALS is not set; variable GOOGLE_APPLICATION_CREDENTIALS is not set"),
        "{err}"
    );
    assert!(bearers(&storage).is_empty(), "no API call without a token");
    let logged = logs::recorded();
    for secret in [SUBJECT_1, CLIENT_SECRET, REFRESH_TOKEN] {
        assert!(!logged.contains(secret), "a secret reached the logs");
    }
}

/// Points `link` (`creds.env` in a Secret-like mount) at a new version holding `text`, the
/// way the kubelet does: a new `..<version>` folder, then an atomic swap of `..data`.
fn swap_mount(mount: &Path, version: &str, text: &str) {
    let folder = mount.join(format!("..{version}"));
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("creds.env"), text).unwrap();
    let tmp = mount.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).unwrap();
    std::fs::rename(&tmp, mount.join("..data")).unwrap();
}

/// Through the served MCP endpoint of a real App: the tenant's env file (a Secret-style
/// mount) names an `authorized_user` file; after the mount is swapped to name another
/// one, queries use the new login without any `reload_credentials` call, and `server_info`
/// names the resolved source and its token's expiry, never a secret.
#[tokio::test]
async fn a_swapped_env_file_is_used_without_reload_through_the_app() {
    use querygate::audit::FailureMode;
    use querygate::config::{Config, Sources};

    use crate::mcp_support::text_of;
    use crate::support::audited::file_auditor;
    use crate::support::gate::{Approver, approver_client, run};

    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    crate::mcp_support::install_crypto_provider();
    let (google, storage) = (Mock::start().await, storage().await);
    google.route_sequence(
        "POST /token",
        vec![
            oauth_token("ya29.before-swap", 3599),
            oauth_token("ya29.after-swap", 3599),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let first = write(
        dir.path(),
        "adc-1.json",
        &user_file(&google, "1//refresh-first"),
    );
    let second = write(
        dir.path(),
        "adc-2.json",
        &user_file(&google, "1//refresh-second"),
    );
    let mount = dir.path().join("mount");
    std::fs::create_dir(&mount).unwrap();
    swap_mount(
        &mount,
        "v1",
        &format!("GOOGLE_APPLICATION_CREDENTIALS={first}\n"),
    );
    std::os::unix::fs::symlink("..data/creds.env", mount.join("creds.env")).unwrap();
    let audit_dir = dir.path().join("audit");
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "registry:\n  root: {}\nproviders:\n  google:\n    base_url: {}/storage/v1\ncredentials:\n  env_file: {}\n  process_env: false\naudit:\n  file:\n    dir: {}\ntenants:\n  - id: default\n    mode: read_only\nserver:\n  listen: 127.0.0.1:0\n",
            registry.path().display(),
            storage.url(),
            mount.join("creds.env").display(),
            audit_dir.display(),
        ),
    )
    .unwrap();
    let config = Config::load(&Sources {
        file: Some(config),
        env: Default::default(),
    })
    .unwrap();
    let (auditor, _sink) = file_auditor(&audit_dir, FailureMode::Strict);
    let app = querygate::app::App::builder(config)
        .audit(Some(auditor))
        .build()
        .await
        .unwrap();
    let url = app.mcp_url();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(app.run_until(async move { stop.cancelled().await }));
    let client = approver_client(&url, Approver::new(None)).await;

    let done = run(&client, "run_select_query", SELECT).await;
    assert_ne!(done.is_error, Some(true), "{done:?}");
    assert_eq!(bearers(&storage), ["Bearer ya29.before-swap"]);

    swap_mount(
        &mount,
        "v2",
        &format!("GOOGLE_APPLICATION_CREDENTIALS={second}\n"),
    );
    let (client, storage) = (&client, &storage);
    crate::support::wait::eventually(
        "the swapped env file to be used",
        Duration::from_secs(10),
        Duration::from_millis(200),
        || async move {
            let done = run(client, "run_select_query", SELECT).await;
            assert_ne!(done.is_error, Some(true), "{done:?}");
            match bearers(storage).last() {
                Some(last) if last == "Bearer ya29.after-swap" => Ok(()),
                _ => Err(bearers(storage)),
            }
        },
    )
    .await;
    let asked = to(&google, "POST", "/token");
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(field(&asked[1], "refresh_token"), "1//refresh-second");

    let info = client
        .call_tool(rmcp::model::CallToolRequestParams::new("server_info"))
        .await
        .unwrap();
    let structured = info.structured_content.clone().unwrap_or(Value::Null);
    let rows = structured["credentials"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let row = rows
        .iter()
        .find(|r| r["provider"] == "google")
        .unwrap_or_else(|| panic!("{structured}"));
    assert_eq!(
        row["resolved_source"],
        "service_account:authorized_user:env:GOOGLE_APPLICATION_CREDENTIALS",
        "{row}"
    );
    assert!(row["token_expires_at"].is_string(), "{row}");
    let shown = format!("{} {structured}", text_of(&info));
    for secret in [CLIENT_SECRET, "1//refresh-second", "ya29.after-swap"] {
        assert!(!shown.contains(secret), "a secret in server_info: {shown}");
    }
    shutdown.cancel();
    let audit_text: String = std::fs::read_dir(&audit_dir)
        .unwrap()
        .map(|f| std::fs::read_to_string(f.unwrap().path()).unwrap_or_default())
        .collect();
    assert!(audit_text.contains("run_select_query"), "{audit_text}");
    for secret in [
        CLIENT_SECRET,
        "1//refresh-first",
        "1//refresh-second",
        "ya29.before-swap",
        "ya29.after-swap",
    ] {
        assert!(!audit_text.contains(secret), "a secret in the audit");
    }
}

/// Concurrent statements of one tenant that all need a token wait for one exchange: STS
/// is held until every statement has started, then answers once.
#[tokio::test]
async fn concurrent_statements_exchange_the_subject_token_once() {
    let Some(registry) = current_registry(&[PROVIDER, STORAGE]) else {
        return;
    };
    let (google, storage) = (Mock::start().await, storage().await);
    let (reply, release) = sts_token("sts-shared", 3599).held();
    google.route("POST /v1/token", reply);
    let dir = tempfile::tempdir().unwrap();
    let subject = dir.path().join("token");
    std::fs::write(&subject, SUBJECT_1).unwrap();
    let adc = write(
        dir.path(),
        "adc.json",
        &external_file(&google, &subject, false).to_string(),
    );
    let e = engine(registry.path(), &storage);
    let cx = tenant(store(&[("GOOGLE_APPLICATION_CREDENTIALS", &adc)]));
    let (e, cx, google) = (&e, &cx, &google);
    let statements = futures::future::join_all((0..4).map(|_| select(e, cx)));
    let releaser = async move {
        google
            .wait_for(
                "/v1/token",
                1,
                Duration::from_secs(10),
                "the first exchange",
            )
            .await;
        release.release();
    };
    let (results, ()) = tokio::join!(statements, releaser);
    assert!(results.iter().all(|rows_seen| *rows_seen == rows()));
    assert_eq!(to(google, "POST", "/v1/token").len(), 1, "one exchange");
    assert_eq!(bearers(&storage), vec!["Bearer sts-shared"; 4]);
}
