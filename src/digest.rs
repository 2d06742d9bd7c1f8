//! SHA-256 digests and random ids as lower-case hex, for approvals and audit.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

/// The SHA-256 of `bytes`, as hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `len` random bytes from the operating system's generator.
pub fn random_bytes(len: usize) -> Result<Vec<u8>, ring::error::Unspecified> {
    use ring::rand::SecureRandom as _;
    let mut bytes = vec![0; len];
    ring::rand::SystemRandom::new().fill(&mut bytes)?;
    Ok(bytes)
}

/// A random 128-bit id as hex.
pub fn random_id() -> Result<String, ring::error::Unspecified> {
    random_bytes(16).map(|b| hex(&b))
}

/// The canonical JSON text of `value`: object keys sorted at every depth, no whitespace. Two
/// values that differ only in key order or spacing give the same text.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// [`canonical_json`] of the object `map`, without copying it into a [`Value`].
pub fn canonical_json_object(map: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_object(map, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::String(key.clone()).to_string());
        out.push(':');
        write_canonical(value, out);
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_ignores_key_order_and_keeps_values() {
        let a = json!({"b": [1, {"y": 2, "x": "é"}], "a": null});
        let b: serde_json::Value =
            serde_json::from_str(r#"{ "a" : null, "b": [1, {"x": "é", "y": 2}] }"#).unwrap();
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#);
        assert_ne!(
            canonical_json(&json!({"a": 1})),
            canonical_json(&json!({"a": "1"}))
        );
    }

    #[test]
    fn hex_and_random_ids() {
        assert_eq!(hex(&[0, 15, 255]), "000fff");
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(hex(&[0x12, 0x9a, 0xf0]), "129af0");
        let (a, b) = (random_id().unwrap(), random_id().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
