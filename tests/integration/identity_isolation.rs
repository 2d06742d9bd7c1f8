//! Identities never cross tenants or principals: a JWT issuer names only the tenants it is
//! listed for, a principal is its issuer and subject together (an approval given to `alice`
//! of one issuer is not `alice` of another's), and client certificates are matched by typed
//! identities (`uri:`, `dns:`, `cn:`), the CN only without SANs.

use std::path::Path;

use rmcp::model::ElicitationAction;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt};
use serde_json::{Value, json};

use crate::mcp_support::call;
use crate::mcp_support::{TestServer, error_code, start_yaml};
use crate::support::gate::{Approver, ApproverClient, DELETE, first_round, retry, route_all};
use crate::support::identity::{
    ISSUER, JwksServer, Pki, RESOURCE, SigningKey, base_yaml, https_client, now, raw_call,
    tenant_of, write,
};
use rcgen::SanType;

const ISSUER_B: &str = "https://idp-b.test";

/// Claims of `sub` from `iss` naming `tenant`.
fn claims_of(iss: &str, sub: &str, tenant: &str) -> Value {
    json!({"iss": iss, "aud": RESOURCE, "sub": sub, "tenant": tenant,
           "exp": now() + 600, "iat": now()})
}

/// An approving MCP client (2026-07-28, elicitation) sending `token`.
async fn approver_with_token(url: &str, token: &str) -> ApproverClient {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    let approver = Approver::new(Some(ElicitationAction::Accept));
    let lifecycle = ClientLifecycleMode::Discover {
        preferred_versions: vec![approver.version.clone()],
    };
    approver
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .expect("client starts")
}

/// The audit records (JSON) in the files of `dir`.
fn audit_records(dir: &Path) -> Vec<Value> {
    let mut records = Vec::new();
    // The audit files (not `.querygate_heads`, the streams' heads).
    for file in
        querygate::audit::location::files_of(&querygate::audit::FileLocation::Dir(dir.to_owned()))
            .unwrap()
    {
        let text = std::fs::read_to_string(file).unwrap();
        records.extend(
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()),
        );
    }
    records
}

/// Issuer A (JWKS) may name acme and globex; issuer B (a PEM key) only acme.
async fn two_issuers(jwks: &JwksServer, b: &SigningKey) -> TestServer {
    let url = jwks.url.clone();
    let b_pem = b.public_pem();
    start_yaml(|mock, dir| {
        format!(
            "{}audit:\n  file:\n    dir: {audit}\nserver:\n  listen: 127.0.0.1:0\nauth:\n  resource: {RESOURCE}\n  jwt:\n    issuers:\n      - issuer: {ISSUER}\n        jwks_url: {url}\n        algorithms: [ES256]\n        tenants: [acme, globex]\n      - issuer: {ISSUER_B}\n        public_keys: [{pem}]\n        algorithms: [ES256]\n        tenants: [acme]\n",
            base_yaml(mock, dir, ""),
            audit = dir.join("audit").display(),
            pem = write(dir, "b.pem", &b_pem),
        )
    })
    .await
}

#[tokio::test]
async fn an_issuer_names_only_its_tenants_and_principals_are_per_issuer() {
    let a = SigningKey::new("a1");
    let b = SigningKey::new("b1");
    let jwks = JwksServer::start(json!({"keys": [a.jwk()]})).await;
    let server = two_issuers(&jwks, &b).await;
    route_all(&server.mock);
    let http = reqwest::Client::new();

    // Each issuer names its own tenants; another one (even `default`) is refused, with the
    // code in the body.
    for (token, status, code) in [
        (a.sign(&claims_of(ISSUER, "alice", "globex")), 200, None),
        (b.sign(&claims_of(ISSUER_B, "alice", "acme")), 200, None),
        (
            b.sign(&claims_of(ISSUER_B, "alice", "globex")),
            403,
            Some("auth.tenant_not_allowed"),
        ),
        (
            b.sign(&claims_of(ISSUER_B, "alice", "default")),
            403,
            Some("auth.tenant_not_allowed"),
        ),
        (
            a.sign(&claims_of(ISSUER, "alice", "default")),
            403,
            Some("auth.tenant_not_allowed"),
        ),
        (
            a.sign(&claims_of(ISSUER, "alice", "initech")),
            403,
            Some("auth.unknown_tenant"),
        ),
    ] {
        let response = raw_call(&http, &server.url, Some(&token)).await.unwrap();
        assert_eq!(response.status(), status, "{code:?}");
        if let Some(code) = code {
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["code"], code, "{body}");
            assert!(
                body["message"].as_str().unwrap().contains("tenant"),
                "{body}"
            );
        }
    }

    // alice of issuer A is asked to approve a DELETE; alice of issuer B (same sub, same
    // tenant) presents that approval: refused, nothing sent.
    let alice_a =
        approver_with_token(&server.url, &a.sign(&claims_of(ISSUER, "alice", "acme"))).await;
    let alice_b =
        approver_with_token(&server.url, &b.sign(&claims_of(ISSUER_B, "alice", "acme"))).await;
    let state = first_round(&alice_a, "run_mutation_query", DELETE).await;
    let stolen = retry(&alice_b, "run_mutation_query", DELETE, &state, "accept").await;
    assert_eq!(error_code(&stolen), "policy.approval_invalid");
    assert!(
        server.mock.requests().is_empty(),
        "alice of another issuer redeemed the approval"
    );
    // The principal it was issued to redeems it.
    let ok = retry(&alice_a, "run_mutation_query", DELETE, &state, "accept").await;
    assert_ne!(ok.is_error, Some(true), "{ok:?}");
    assert_eq!(server.mock.requests().len(), 1);

    // The audit names the issuer of each principal.
    let records = audit_records(&server._dir.path().join("audit"));
    let of = |issuer: &str, code: Option<&str>| {
        records.iter().any(|r| {
            r["tool"] == "run_mutation_query"
                && r["principal"] == "alice"
                && r["issuer"] == issuer
                && r["error_code"].as_str() == code
                && r["phase"] == "outcome"
        })
    };
    assert!(
        of(ISSUER_B, Some("policy.approval_invalid")),
        "{records:#?}"
    );
    assert!(of(ISSUER, None), "{records:#?}");
}

/// A server whose client certificates map by typed identity; `extra` goes into `auth.mtls`.
async fn mtls_server(pki: &Pki, extra: &str) -> TestServer {
    let server_pair = pki.server_pair();
    let ca = pki.ca_pem();
    let extra = extra.to_owned();
    start_yaml(|mock, dir| {
        format!(
            "{}audit:\n  file:\n    dir: {}\nserver:\n  listen: 127.0.0.1:0\n  tls:\n    cert_file: {}\n    key_file: {}\n    client_ca_file: {}\nauth:\n  mtls:\n{extra}    identities:\n      \"uri:spiffe://example.org/agent-a\": acme\n      \"uri:spiffe://example.org/agent-g\": globex\n      \"dns:agent.globex.test\": globex\n      \"cn:legacy-agent\": acme\n",
            base_yaml(mock, dir, ""),
            dir.join("audit").display(),
            write(dir, "server.crt", &server_pair.0),
            write(dir, "server.key", &server_pair.1),
            write(dir, "ca.crt", &ca),
        )
    })
    .await
}

/// What a `server_info` call with `identity` gets: the tenant, or the refusal's code.
async fn outcome(pki: &Pki, server: &TestServer, identity: &(String, String)) -> String {
    let http = https_client(&pki.ca_pem(), Some(identity));
    let response = raw_call(&http, &server.url, None).await.unwrap();
    if response.status() == 200 {
        let client = crate::support::identity::rmcp_client(http, &server.url, None).await;
        return tenant_of(&call(&client, "server_info", json!({})).await);
    }
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    body["code"].as_str().unwrap().to_owned()
}

fn uri(id: &str) -> SanType {
    SanType::URI(id.try_into().unwrap())
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().unwrap())
}

#[tokio::test]
async fn client_certificates_match_only_identities_of_their_own_type() {
    let pki = Pki::new("test CA");
    let server = mtls_server(&pki, "").await;
    let cases = [
        // Each typed identity finds its tenant (DNS names without regard to case).
        (
            "a SPIFFE id",
            "agent",
            vec![uri("spiffe://example.org/agent-a")],
            "acme",
        ),
        (
            "a DNS SAN",
            "agent",
            vec![dns("Agent.Globex.TEST")],
            "globex",
        ),
        ("a CN without SANs", "legacy-agent", vec![], "acme"),
        // globex's SPIFFE id as the CN is a CN, not a URI SAN: with or without other SANs.
        (
            "another tenant's SPIFFE id as CN, own URI SAN",
            "spiffe://example.org/agent-g",
            vec![uri("spiffe://example.org/stranger")],
            "auth.certificate_unmapped",
        ),
        (
            "another tenant's SPIFFE id as CN, no SANs",
            "spiffe://example.org/agent-g",
            vec![],
            "auth.certificate_unmapped",
        ),
        // A mapped CN does not count when the certificate has SANs.
        (
            "a mapped CN beside an unmapped SAN",
            "legacy-agent",
            vec![dns("somewhere.test")],
            "auth.certificate_unmapped",
        ),
        (
            "a mapped CN beside an IP SAN",
            "legacy-agent",
            vec![SanType::IpAddress("10.0.0.7".parse().unwrap())],
            "auth.certificate_unmapped",
        ),
        // Names of two tenants: refused, not the first one found.
        (
            "SANs of two tenants",
            "agent",
            vec![
                uri("spiffe://example.org/agent-a"),
                dns("agent.globex.test"),
            ],
            "auth.certificate_ambiguous",
        ),
    ];
    for (what, cn, sans, expected) in cases {
        let identity = pki.issue(cn, sans, false, false);
        assert_eq!(outcome(&pki, &server, &identity).await, expected, "{what}");
    }

    // The audit's principal is the typed identity.
    let records = audit_records(&server._dir.path().join("audit"));
    assert!(
        records
            .iter()
            .any(|r| r["principal"] == "uri:spiffe://example.org/agent-a"
                && r["auth_method"] == "mtls"
                && r["tenant"] == "acme"),
        "{records:#?}"
    );

    // With `cn_with_sans: true` a mapped CN counts beside SANs (and is still only a CN).
    let lenient = mtls_server(&pki, "    cn_with_sans: true\n").await;
    let beside = pki.issue("legacy-agent", vec![dns("somewhere.test")], false, false);
    assert_eq!(outcome(&pki, &lenient, &beside).await, "acme");
    let spoof = pki.issue(
        "spiffe://example.org/agent-g",
        vec![dns("somewhere.test")],
        false,
        false,
    );
    assert_eq!(
        outcome(&pki, &lenient, &spoof).await,
        "auth.certificate_unmapped"
    );
}
