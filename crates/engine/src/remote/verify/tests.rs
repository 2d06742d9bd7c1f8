use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;
use crate::remote::signature::sign_document;

/// okta's `ThreatInsight.yaml` and its `.sig` from StackQL's test registry (any-sdk,
/// `test/registry/deprecated-src/okta/v1/services/`), signed 2022-03-29 with StackQL's key,
/// and StackQL's certificate of that time (stackql-provider-registry at 979971d6, valid
/// 2022-02-12 to 2024-02-12). StackQL's current certificate holds the same key.
const REAL_DOC: &[u8] = include_bytes!("../../../data/signing/tests/ThreatInsight.yaml");
const REAL_SIG: &[u8] = include_bytes!("../../../data/signing/tests/ThreatInsight.yaml.sig");
const STACKQL_2022: &str = include_str!("../../../data/signing/tests/stackql-2022-02-12.pem");

/// 2023-06-01T00:00:00Z, inside the 2022 certificate's validity.
const JUNE_2023: i64 = 1_685_577_600;

fn at(unix: i64) -> UnixTime {
    UnixTime::at_second(unix)
}

fn system(unix: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(u64::try_from(unix).unwrap())
}

fn now() -> UnixTime {
    UnixTime::from_system(SystemTime::now())
}

/// A self-signed Ed25519 signing certificate made now, valid between the two dates.
struct Root {
    pkcs8: Vec<u8>,
    pem: String,
}

fn root(from: (i32, u8, u8), to: (i32, u8, u8)) -> Root {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "querygate test signer");
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).unwrap();
    Root {
        pkcs8: key.serialize_der(),
        pem: cert.pem(),
    }
}

fn current_root() -> Root {
    root((2020, 1, 1), (2100, 1, 1))
}

/// StackQL's certificate plus each of `pems`.
fn trusting(pems: &[&str]) -> TrustedCertificates {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = pems
        .iter()
        .enumerate()
        .map(|(i, pem)| {
            let path = dir.path().join(format!("{i}.pem"));
            std::fs::write(&path, pem).unwrap();
            path
        })
        .collect();
    TrustedCertificates::load(&paths).unwrap()
}

#[test]
fn stackql_signatures_verify_with_the_certificate_of_their_time() {
    let trust = trusting(&[STACKQL_2022]);
    let ok = document(
        "ThreatInsight.yaml",
        REAL_DOC,
        REAL_SIG,
        &trust,
        at(JUNE_2023),
        None,
    )
    .unwrap();
    assert_eq!(ok.certificate, 1);
    assert_eq!(ok.signed_at.to_string(), "2022-03-29T00:34:47Z");

    // Today that certificate has expired: refused, saying so.
    let err = document(
        "ThreatInsight.yaml",
        REAL_DOC,
        REAL_SIG,
        &trust,
        now(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::CertificateNotValid { .. }), "{err}");
    assert!(err.to_string().contains("2024-02-12T10:55:05Z"), "{err}");

    // StackQL's current certificate holds the same key, but was issued for 2025-2027: the
    // arithmetic verifies, the signing time is outside its validity, and the document is
    // refused as StackQL's verifier refuses it.
    let err = document(
        "ThreatInsight.yaml",
        REAL_DOC,
        REAL_SIG,
        &trusting(&[]),
        at(1_767_225_600),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(err, Refusal::SignedOutsideValidity { .. }),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("signed at 2022-03-29T00:34:47Z")
            && text.contains("2025-02-27T21:15:00Z to 2027-08-16T21:15:00Z")
            && text.contains("'ThreatInsight.yaml'"),
        "{text}"
    );
}

#[test]
fn a_test_root_made_now_signs_and_verifies() {
    let signer = current_root();
    let trust = trusting(&[&signer.pem]);
    let doc = b"id: evil\nname: evil\n";
    let sig = sign_document(&signer.pkcs8, doc, SystemTime::now()).unwrap();
    let ok = document("v1/provider.yaml", doc, &sig, &trust, now(), None).unwrap();
    assert_eq!(ok.certificate, 1);
    // The certificate that verified the last document is tried first; a stale preference
    // (out of range) is ignored.
    assert!(document("v1/provider.yaml", doc, &sig, &trust, now(), Some(0)).is_ok());
    assert!(document("v1/provider.yaml", doc, &sig, &trust, now(), Some(9)).is_ok());
}

#[test]
fn tampered_wrong_key_and_misplaced_signatures_are_refused() {
    let signer = current_root();
    let trust = trusting(&[&signer.pem]);
    let doc = b"id: evil\nname: evil\n";
    let sig = sign_document(&signer.pkcs8, doc, SystemTime::now()).unwrap();

    // One byte of the body changed.
    let err = document(
        "v1/provider.yaml",
        b"id: evil\nname: evim\n",
        &sig,
        &trust,
        now(),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(&err, Refusal::Untrusted(name) if name == "v1/provider.yaml"),
        "{err}"
    );
    assert!(
        err.to_string().contains("changed after it was signed"),
        "{err}"
    );

    // The signing time changed (it is signed too).
    let mut raw = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, &sig).unwrap();
    raw[8] ^= 1;
    let moved = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw);
    assert!(matches!(
        document(
            "v1/provider.yaml",
            doc,
            moved.as_bytes(),
            &trust,
            now(),
            None
        ),
        Err(Refusal::Untrusted(_))
    ));

    // Signed by a key whose certificate is not trusted.
    let stranger = current_root();
    let foreign = sign_document(&stranger.pkcs8, doc, SystemTime::now()).unwrap();
    assert!(matches!(
        document("v1/provider.yaml", doc, &foreign, &trust, now(), None),
        Err(Refusal::Untrusted(_))
    ));
    // ... which verifies once that certificate is trusted.
    assert!(
        document(
            "v1/provider.yaml",
            doc,
            &foreign,
            &trusting(&[&stranger.pem]),
            now(),
            None
        )
        .is_ok()
    );

    // A genuine signature of another document.
    let other = sign_document(&signer.pkcs8, b"something else", SystemTime::now()).unwrap();
    assert!(matches!(
        document("v1/provider.yaml", doc, &other, &trust, now(), None),
        Err(Refusal::Untrusted(_))
    ));

    // Not a signature at all.
    let err = document("v1/provider.yaml", doc, b"signature", &trust, now(), None).unwrap_err();
    assert!(matches!(err, Refusal::Malformed { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("'v1/provider.yaml.sig' is not a StackQL signature"),
        "{err}"
    );
}

#[test]
fn expired_and_not_yet_valid_certificates_are_refused() {
    // Valid 2019 only; signed mid-2019 (inside), checked today.
    let expired = root((2019, 1, 1), (2020, 1, 1));
    let doc = b"doc";
    let sig = sign_document(&expired.pkcs8, doc, system(1_559_347_200)).unwrap();
    let trust = trusting(&[&expired.pem]);
    let err = document("v1/doc.yaml", doc, &sig, &trust, now(), None).unwrap_err();
    assert!(matches!(err, Refusal::CertificateNotValid { .. }), "{err}");
    assert!(err.to_string().contains("2020-01-01T00:00:00Z"), "{err}");
    // The same signature at a time the certificate was valid.
    assert!(document("v1/doc.yaml", doc, &sig, &trust, at(1_561_939_200), None).is_ok());

    // A certificate valid from 2090, signing time 2095: not valid yet.
    let future = root((2090, 1, 1), (2100, 1, 1));
    let sig = sign_document(&future.pkcs8, doc, system(3_944_678_400)).unwrap();
    let err = document(
        "v1/doc.yaml",
        doc,
        &sig,
        &trusting(&[&future.pem]),
        now(),
        None,
    )
    .unwrap_err();
    assert!(matches!(err, Refusal::CertificateNotValid { .. }), "{err}");

    // A current certificate and a signing time before it was issued.
    let signer = current_root();
    let sig = sign_document(&signer.pkcs8, doc, system(1_262_304_000)).unwrap(); // 2010
    let err = document(
        "v1/doc.yaml",
        doc,
        &sig,
        &trusting(&[&signer.pem]),
        now(),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(err, Refusal::SignedOutsideValidity { .. }),
        "{err}"
    );
}

fn write(dir: &Path, path: &str, bytes: &[u8]) {
    let path = dir.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn packages_are_verified_file_by_file() {
    let signer = current_root();
    let trust = trusting(&[&signer.pem]);
    let sign = |doc: &[u8]| sign_document(&signer.pkcs8, doc, SystemTime::now()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let files: [(&str, &[u8]); 2] = [
        ("provider.yaml", b"id: evil\n"),
        ("services/things.yaml", b"openapi: 3.0.0\n"),
    ];
    for (path, body) in files {
        write(dir.path(), path, body);
        write(dir.path(), &format!("{path}.sig"), &sign(body));
    }
    // A .sig without its document is harmless.
    write(dir.path(), "services/gone.yaml.sig", &sign(b"gone"));
    let found = package(dir.path(), "v1", &trust, now()).unwrap();
    assert_eq!(found.documents, 2);
    assert_eq!(found.by_certificate, [0, 2]);
    assert!(found.signed.is_some());

    // A file without a .sig refuses the package, naming it.
    write(dir.path(), "services/extra.yaml", b"x: 1\n");
    let err = package(dir.path(), "v1", &trust, now()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "'v1/services/extra.yaml' is not signed: 'v1/services/extra.yaml.sig' is missing"
    );
    std::fs::remove_file(dir.path().join("services/extra.yaml")).unwrap();

    // Signatures swapped between two documents.
    let provider_sig = std::fs::read(dir.path().join("provider.yaml.sig")).unwrap();
    write(
        dir.path(),
        "provider.yaml.sig",
        &std::fs::read(dir.path().join("services/things.yaml.sig")).unwrap(),
    );
    let err = package(dir.path(), "v1", &trust, now()).unwrap_err();
    assert!(
        matches!(&err, Refusal::Untrusted(name) if name == "v1/provider.yaml"),
        "{err}"
    );
    write(dir.path(), "provider.yaml.sig", &provider_sig);

    // Without the test root, StackQL's certificate alone trusts none of it.
    let err = package(dir.path(), "v1", &trusting(&[]), now()).unwrap_err();
    assert!(matches!(err, Refusal::Untrusted(_)), "{err}");
    assert!(package(dir.path(), "v1", &trust, now()).is_ok());
}
