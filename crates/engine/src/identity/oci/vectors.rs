//! Oracle's published request-signing example ("Request Signatures", docs.oracle.com,
//! reproduced in oracle/oci-go-sdk `common/http_signer_test.go`): its test key, GET and
//! POST requests, signing strings and signatures.
//!
//! The published key is 1024 bits, which ring refuses to sign with (it signs with 2048 to
//! 8192 bits; OCI itself asks for 2048). RSASSA-PKCS1-v1_5 is deterministic: a signature
//! `s` verifies over a message `m` exactly when `s` is the signature of `m` under the key.
//! So these tests check that our signing string is byte-for-byte Oracle's, that Oracle's
//! published signature verifies over *our* string (which makes our signature of it that
//! same signature), and that our `Authorization` header with it is Oracle's header. The
//! RSA step itself is checked with a 2048-bit key in [`signed_requests_verify`].

use ring::signature::{self, RsaPublicKeyComponents};

use super::signer::{Signer, authorization, plan};

const TENANCY: &str =
    "ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq";
const USER: &str = "ocid1.user.oc1..aaaaaaaat5nvwcna5j6aqzjcaty5eqbb6qt2jvpkanghtgdaqedqw3rynjq";
const FINGERPRINT: &str = "20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34";
const DATE: &str = "Thu, 05 Jan 2014 21:31:40 GMT";

const GET_URL: &str = "https://iaas.us-phoenix-1.oraclecloud.com/20160918/instances?availabilityDomain=Pjwf%3A%20PHX-AD-1&compartmentId=ocid1.compartment.oc1..aaaaaaaam3we6vgnherjq5q2idnccdflvjsnog7mlr6rtdb25gilchfeyjxa&displayName=TeamXInstances&volumeId=ocid1.volume.oc1.phx.abyhqljrgvttnlx73nmrwfaux7kcvzfs3s66izvxf2h4lgvyndsdsnoiwr5q";
const POST_URL: &str = "https://iaas.us-phoenix-1.oraclecloud.com/20160918/volumeAttachments";
const POST_BODY: &str = "{\n    \"compartmentId\": \"ocid1.compartment.oc1..aaaaaaaam3we6vgnherjq5q2idnccdflvjsnog7mlr6rtdb25gilchfeyjxa\",\n    \"instanceId\": \"ocid1.instance.oc1.phx.abuw4ljrlsfiqw6vzzxb43vyypt4pkodawglp3wqxjqofakrwvou52gb6s5a\",\n    \"volumeId\": \"ocid1.volume.oc1.phx.abyhqljrgvttnlx73nmrwfaux7kcvzfs3s66izvxf2h4lgvyndsdsnoiwr5q\"\n}";

const GET_SIGNING_STRING: &str = "date: Thu, 05 Jan 2014 21:31:40 GMT\n(request-target): get /20160918/instances?availabilityDomain=Pjwf%3A%20PHX-AD-1&compartmentId=ocid1.compartment.oc1..aaaaaaaam3we6vgnherjq5q2idnccdflvjsnog7mlr6rtdb25gilchfeyjxa&displayName=TeamXInstances&volumeId=ocid1.volume.oc1.phx.abyhqljrgvttnlx73nmrwfaux7kcvzfs3s66izvxf2h4lgvyndsdsnoiwr5q\nhost: iaas.us-phoenix-1.oraclecloud.com";
const POST_SIGNING_STRING: &str = "date: Thu, 05 Jan 2014 21:31:40 GMT\n(request-target): post /20160918/volumeAttachments\nhost: iaas.us-phoenix-1.oraclecloud.com\ncontent-length: 316\ncontent-type: application/json\nx-content-sha256: V9Z20UJTvkvpJ50flBzKE32+6m2zJjweHpDMX/U4Uy0=";

const GET_SIGNATURE: &str = "GBas7grhyrhSKHP6AVIj/h5/Vp8bd/peM79H9Wv8kjoaCivujVXlpbKLjMPeDUhxkFIWtTtLBj3sUzaFj34XE6YZAHc9r2DmE4pMwOAy/kiITcZxa1oHPOeRheC0jP2dqbTll8fmTZVwKZOKHYPtrLJIJQHJjNvxFWeHQjMaR7M=";
const POST_SIGNATURE: &str = "Mje8vIDPlwIHmD/cTDwRxE7HaAvBg16JnVcsuqaNRim23fFPgQfLoOOxae6WqKb1uPjYEl0qIdazWaBy/Ml8DRhqlocMwoSXv0fbukP8J5N80LCmzT/FFBvIvTB91XuXI3hYfP9Zt1l7S6ieVadHUfqBedWH0itrtPJBgKmrWso=";

const GET_AUTHORIZATION: &str = "Signature version=\"1\",headers=\"date (request-target) host\",keyId=\"ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq/ocid1.user.oc1..aaaaaaaat5nvwcna5j6aqzjcaty5eqbb6qt2jvpkanghtgdaqedqw3rynjq/20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34\",algorithm=\"rsa-sha256\",signature=\"GBas7grhyrhSKHP6AVIj/h5/Vp8bd/peM79H9Wv8kjoaCivujVXlpbKLjMPeDUhxkFIWtTtLBj3sUzaFj34XE6YZAHc9r2DmE4pMwOAy/kiITcZxa1oHPOeRheC0jP2dqbTll8fmTZVwKZOKHYPtrLJIJQHJjNvxFWeHQjMaR7M=\"";
const POST_AUTHORIZATION: &str = "Signature version=\"1\",headers=\"date (request-target) host content-length content-type x-content-sha256\",keyId=\"ocid1.tenancy.oc1..aaaaaaaaba3pv6wkcr4jqae5f15p2b2m2yt2j6rx32uzr4h25vqstifsfdsq/ocid1.user.oc1..aaaaaaaat5nvwcna5j6aqzjcaty5eqbb6qt2jvpkanghtgdaqedqw3rynjq/20:3b:97:13:55:1c:5b:0d:d3:37:d8:50:4e:c5:3a:34\",algorithm=\"rsa-sha256\",signature=\"Mje8vIDPlwIHmD/cTDwRxE7HaAvBg16JnVcsuqaNRim23fFPgQfLoOOxae6WqKb1uPjYEl0qIdazWaBy/Ml8DRhqlocMwoSXv0fbukP8J5N80LCmzT/FFBvIvTB91XuXI3hYfP9Zt1l7S6ieVadHUfqBedWH0itrtPJBgKmrWso=\"";

/// Oracle's published test key (PKCS#1).
const ORACLE_TEST_KEY: &str = "-----BEGIN RSA PRIVATE KEY-----
MIICXgIBAAKBgQDCFENGw33yGihy92pDjZQhl0C36rPJj+CvfSC8+q28hxA161QF
NUd13wuCTUcq0Qd2qsBe/2hFyc2DCJJg0h1L78+6Z4UMR7EOcpfdUE9Hf3m/hs+F
UR45uBJeDK1HSFHD8bHKD6kv8FPGfJTotc+2xjJwoYi+1hqp1fIekaxsyQIDAQAB
AoGBAJR8ZkCUvx5kzv+utdl7T5MnordT1TvoXXJGXK7ZZ+UuvMNUCdN2QPc4sBiA
QWvLw1cSKt5DsKZ8UETpYPy8pPYnnDEz2dDYiaew9+xEpubyeW2oH4Zx71wqBtOK
kqwrXa/pzdpiucRRjk6vE6YY7EBBs/g7uanVpGibOVAEsqH1AkEA7DkjVH28WDUg
f1nqvfn2Kj6CT7nIcE3jGJsZZ7zlZmBmHFDONMLUrXR/Zm3pR5m0tCmBqa5RK95u
412jt1dPIwJBANJT3v8pnkth48bQo/fKel6uEYyboRtA5/uHuHkZ6FQF7OUkGogc
mSJluOdc5t6hI1VsLn0QZEjQZMEOWr+wKSMCQQCC4kXJEsHAve77oP6HtG/IiEn7
kpyUXRNvFsDE0czpJJBvL/aRFUJxuRK91jhjC68sA7NsKMGg5OXb5I5Jj36xAkEA
gIT7aFOYBFwGgQAQkWNKLvySgKbAZRTeLBacpHMuQdl1DfdntvAyqpAZ0lY0RKmW
G6aFKaqQfOXKCyWoUiVknQJAXrlgySFci/2ueKlIE1QqIiLSZ8V8OlpFLRnb1pzI
7U1yQXnTAEFYM560yJlzUpOb1V4cScGd365tiSMvxLOvTA==
-----END RSA PRIVATE KEY-----
";

fn key_id() -> String {
    format!("{TENANCY}/{USER}/{FINGERPRINT}")
}

fn b64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64")
}

/// One DER element at the front of `der`: (tag, contents, rest).
fn element(der: &[u8]) -> (u8, &[u8], &[u8]) {
    let (tag, first) = (der[0], der[1]);
    let (len, start) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        let len = der[2..2 + n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + n)
    };
    (tag, &der[start..start + len], &der[start + len..])
}

/// The modulus and public exponent of a PKCS#1 `RSAPrivateKey` PEM.
fn public_components(pem: &str) -> (Vec<u8>, Vec<u8>) {
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = b64(&body);
    let (tag, seq, _) = element(&der);
    assert_eq!(tag, 0x30);
    let (_, _version, rest) = element(seq);
    let (_, n, rest) = element(rest);
    let (_, e, _) = element(rest);
    // DER integers carry a leading zero when the high bit is set; ring wants none.
    let unsigned = |b: &[u8]| b.iter().skip_while(|x| **x == 0).copied().collect();
    (unsigned(n), unsigned(e))
}

fn oracle_signature_verifies(message: &str, signature: &str) -> bool {
    let (n, e) = public_components(ORACLE_TEST_KEY);
    RsaPublicKeyComponents { n: &n, e: &e }
        .verify(
            &signature::RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
            message.as_bytes(),
            &b64(signature),
        )
        .is_ok()
}

#[test]
fn get_signing_string_signature_and_header_are_oracles() {
    let url = url::Url::parse(GET_URL).expect("url");
    let plan = plan("GET", &url, DATE, None, None);
    assert_eq!(plan.signing_string, GET_SIGNING_STRING);
    assert_eq!(plan.names, ["date", "(request-target)", "host"]);
    assert_eq!(plan.set, [("date", DATE.to_owned())]);
    assert!(oracle_signature_verifies(
        &plan.signing_string,
        GET_SIGNATURE
    ));
    assert_eq!(
        authorization(&key_id(), &plan.names, GET_SIGNATURE),
        GET_AUTHORIZATION
    );
}

#[test]
fn post_signing_string_signature_and_header_are_oracles() {
    let url = url::Url::parse(POST_URL).expect("url");
    let plan = plan(
        "POST",
        &url,
        DATE,
        Some(POST_BODY.as_bytes()),
        Some("application/json"),
    );
    assert_eq!(plan.signing_string, POST_SIGNING_STRING);
    assert!(plan.set.contains(&(
        "x-content-sha256",
        "V9Z20UJTvkvpJ50flBzKE32+6m2zJjweHpDMX/U4Uy0=".to_owned()
    )));
    assert!(plan.set.contains(&("content-length", "316".to_owned())));
    assert!(oracle_signature_verifies(
        &plan.signing_string,
        POST_SIGNATURE
    ));
    assert_eq!(
        authorization(&key_id(), &plan.names, POST_SIGNATURE),
        POST_AUTHORIZATION
    );
}

#[test]
fn a_changed_request_no_longer_matches_oracles_signature() {
    // The check above can fail: one byte of the target, or the header order, breaks it.
    let url = url::Url::parse(&GET_URL.replace("TeamX", "TeamY")).expect("url");
    let plan = plan("GET", &url, DATE, None, None);
    assert!(!oracle_signature_verifies(
        &plan.signing_string,
        GET_SIGNATURE
    ));
    let reordered = GET_SIGNING_STRING.replacen("date: ", "x-date: ", 1);
    assert!(!oracle_signature_verifies(&reordered, GET_SIGNATURE));
}

#[test]
fn delete_signs_no_body_headers_and_empty_put_signs_the_empty_hash() {
    let url = url::Url::parse("http://127.0.0.1:8443/20160918/vcns/ocid1.vcn?x=1").expect("url");
    let delete = plan("DELETE", &url, DATE, None, None);
    assert_eq!(delete.names, ["date", "(request-target)", "host"]);
    assert!(
        delete.signing_string.contains(
            "(request-target): delete /20160918/vcns/ocid1.vcn?x=1\nhost: 127.0.0.1:8443"
        )
    );
    let put = plan("PUT", &url, DATE, None, None);
    assert!(put.signing_string.ends_with(
        "content-length: 0\ncontent-type: application/json\nx-content-sha256: 47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
    ));
}

#[test]
fn ring_refuses_the_published_1024_bit_key() {
    assert!(matches!(
        super::key::load(ORACLE_TEST_KEY),
        Err(super::key::KeyError::Rejected(_))
    ));
}

/// The RSA step: a request signed by [`Signer`] with a 2048-bit key verifies with its
/// public key over the signing string recomputed from the request as sent.
#[test]
fn signed_requests_verify() {
    let pem = include_str!("../../../../../tests/fixtures/oci/tenant_a_key.pem");
    let key = super::key::load(pem).expect("key");
    let public = key.public().as_ref().to_vec();
    let signer = Signer::new("oci", key_id(), std::sync::Arc::new(key));
    let url = url::Url::parse(
        "http://127.0.0.1:9/20190901/configuration?compartmentId=ocid1.tenancy.oc1..x",
    )
    .expect("url");
    let mut request = reqwest::Request::new(reqwest::Method::PUT, url);
    request.headers_mut().insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    *request.body_mut() = Some(reqwest::Body::from("{\"retentionPeriodDays\":120}"));
    signer.sign_at(&mut request, DATE).expect("signed");
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("date"), DATE);
    assert_eq!(header("content-length"), "27");
    let authorization = header("authorization");
    let expected = plan(
        "PUT",
        request.url(),
        DATE,
        Some(b"{\"retentionPeriodDays\":120}"),
        Some("application/json"),
    );
    assert!(authorization.starts_with(&format!(
        "Signature version=\"1\",headers=\"date (request-target) host content-length content-type x-content-sha256\",keyId=\"{}\",algorithm=\"rsa-sha256\",signature=\"",
        key_id()
    )));
    let signature = authorization
        .rsplit("signature=\"")
        .next()
        .and_then(|s| s.strip_suffix('"'))
        .expect("signature");
    let verify = |message: &str| {
        signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, &public)
            .verify(message.as_bytes(), &b64(signature))
            .is_ok()
    };
    assert!(verify(&expected.signing_string));
    assert!(!verify(
        &expected
            .signing_string
            .replace("127.0.0.1:9", "127.0.0.1:10")
    ));
}
