//! AWS Signature Version 4 recomputed from what the mock upstream received, by AWS's
//! published algorithm, to check the signature querygate sent.

use sha2::{Digest, Sha256};

use crate::mock::Recorded;

pub fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut block = if key.len() > 64 {
        Sha256::digest(key).to_vec()
    } else {
        key.to_vec()
    };
    block.resize(64, 0);
    let inner_pad: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    let outer_pad: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    let inner = Sha256::new()
        .chain_update(&inner_pad)
        .chain_update(data)
        .finalize();
    Sha256::new()
        .chain_update(&outer_pad)
        .chain_update(inner)
        .finalize()
        .to_vec()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Recomputes the request's SigV4 signature from what the mock received, following AWS's
/// published algorithm, and checks it against the one sent.
pub fn verify_sigv4(request: &Recorded, secret: &str, region: &str, service: &str) {
    verify_sigv4_with(request, "AKIDTEST", secret, region, service);
}

/// [`verify_sigv4`] for the access key id `key_id`.
pub fn verify_sigv4_with(
    request: &Recorded,
    key_id: &str,
    secret: &str,
    region: &str,
    service: &str,
) {
    let authorization = request.headers["authorization"].to_str().unwrap();
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .unwrap_or_else(|| panic!("not SigV4: {authorization}"));
    let mut fields = rest.split(", ");
    let credential = fields.next().unwrap();
    let signed_headers = fields
        .next()
        .unwrap()
        .strip_prefix("SignedHeaders=")
        .unwrap();
    let signature = fields.next().unwrap().strip_prefix("Signature=").unwrap();
    let amz_date = request.headers["x-amz-date"].to_str().unwrap();
    let date = &amz_date[..8];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    assert_eq!(credential, format!("{key_id}/{scope}"));

    // A parameter without a value (`&__Bucket&`) is `__Bucket=` in the canonical query.
    let mut query: Vec<String> = request
        .query
        .as_deref()
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            if p.contains('=') {
                p.to_owned()
            } else {
                format!("{p}=")
            }
        })
        .collect();
    query.sort();
    let mut canonical_headers = String::new();
    for name in signed_headers.split(';') {
        let value = request.headers[name].to_str().unwrap().trim();
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{signed_headers}\n{}",
        request.method,
        request.path,
        query.join("&"),
        hex(&Sha256::digest(&request.body)),
    );
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let mut key = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, service, "aws4_request"] {
        key = hmac(&key, part.as_bytes());
    }
    assert_eq!(
        signature,
        hex(&hmac(&key, string_to_sign.as_bytes())),
        "signature of {} {}",
        request.method,
        request.path
    );
}
