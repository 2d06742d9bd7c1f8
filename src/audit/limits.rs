//! The size of a record: every field has a limit, the SQL is stored once, and what is cut
//! is digested. A client sending a 4 MB literal makes a record of tens of KiB, not two
//! copies of the literal.
//!
//! Limits (UTF-8 bytes; a cut string ends at a character boundary): `sql` [`MAX_SQL_BYTES`];
//! each other text field [`MAX_TEXT_BYTES`]; each argument, as compact JSON,
//! [`MAX_TEXT_BYTES`] (a string argument is cut, any other value dropped); all arguments
//! together [`MAX_ARGS_BYTES`] (else dropped). Each cut field is named in `cut` with its
//! full length and SHA-256, so a value held elsewhere can still be matched to the record.

use std::collections::BTreeMap;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::record::{AuditRecord, Cut};
use crate::digest::hex;

/// The longest `sql` kept.
pub const MAX_SQL_BYTES: usize = 64 * 1024;
/// The longest other text field, or argument, kept.
pub const MAX_TEXT_BYTES: usize = 4 * 1024;
/// The most all arguments together may take.
pub const MAX_ARGS_BYTES: usize = 16 * 1024;

/// Stores the SQL once (an `args.sql` equal to `sql` is left out) and cuts every field to
/// its limit, naming what was cut in `record.cut`.
pub fn bound(record: &mut AuditRecord) {
    if let (Some(sql), Some(args)) = (&record.sql, record.args.as_mut())
        && args.get("sql").and_then(Value::as_str) == Some(sql.as_str())
    {
        args.remove("sql");
    }
    let mut cut = record.cut.take().unwrap_or_default();
    if let Some(sql) = record.sql.as_mut() {
        cut_text(sql, "sql", MAX_SQL_BYTES, &mut cut);
    }
    for (name, field) in [
        ("timestamp", &mut record.timestamp),
        ("call_id", &mut record.call_id),
        ("tenant", &mut record.tenant),
        ("principal", &mut record.principal),
        ("auth_method", &mut record.auth_method),
        ("tool", &mut record.tool),
        ("mode", &mut record.mode),
    ] {
        cut_text(field, name, MAX_TEXT_BYTES, &mut cut);
    }
    for (name, field) in [
        ("request_id", &mut record.request_id),
        ("trace_id", &mut record.trace_id),
        ("issuer", &mut record.issuer),
        ("cert_fingerprint", &mut record.cert_fingerprint),
        ("os_user", &mut record.os_user),
        ("client_name", &mut record.client_name),
        ("client_version", &mut record.client_version),
        ("protocol_version", &mut record.protocol_version),
        ("query_class", &mut record.query_class),
        ("approval_id", &mut record.approval_id),
        ("approver", &mut record.approver),
        ("approver_id", &mut record.approver_id),
        ("approval_method", &mut record.approval_method),
        ("approval_reason", &mut record.approval_reason),
        ("error_code", &mut record.error_code),
        ("error", &mut record.error),
        ("client_addr", &mut record.client_addr),
    ] {
        if let Some(text) = field.as_mut() {
            cut_text(text, name, MAX_TEXT_BYTES, &mut cut);
        }
    }
    if let Some(args) = record.args.as_mut() {
        let mut total = 2usize;
        let names: Vec<String> = args.keys().cloned().collect();
        for name in names {
            let Some(value) = args.get_mut(&name) else {
                continue;
            };
            let key = format!("args.{name}");
            match value {
                Value::String(text) => cut_text(text, &key, MAX_TEXT_BYTES, &mut cut),
                other => {
                    let json = other.to_string();
                    if json.len() > MAX_TEXT_BYTES {
                        cut.insert(key, digest(json.as_bytes()));
                        args.remove(&name);
                        continue;
                    }
                }
            }
            total += name.len() + 4 + args.get(&name).map_or(0, |v| v.to_string().len());
        }
        if total > MAX_ARGS_BYTES {
            let json = Value::Object(std::mem::take(args)).to_string();
            cut.insert("args".to_owned(), digest(json.as_bytes()));
            record.args = None;
        }
    }
    record.cut = (!cut.is_empty()).then_some(cut);
}

/// Cuts `text` to `max` bytes (at a character boundary), noting it in `cut` as `name`.
fn cut_text(text: &mut String, name: &str, max: usize, cut: &mut BTreeMap<String, Cut>) {
    if text.len() <= max {
        return;
    }
    cut.insert(name.to_owned(), digest(text.as_bytes()));
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

fn digest(bytes: &[u8]) -> Cut {
    Cut {
        bytes: bytes.len() as u64,
        sha256: hex(&Sha256::digest(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_fields_are_cut_and_digested_and_the_sql_is_stored_once() {
        let literal = "é".repeat(1_000_000);
        let sql = format!("SELECT '{literal}'");
        let mut record = AuditRecord {
            sql: Some(sql.clone()),
            error: Some("x".repeat(10_000)),
            args: serde_json::json!({"sql": sql, "row_limit": 5, "blob": [literal.clone()], "note": literal})
                .as_object()
                .cloned(),
            ..Default::default()
        };
        bound(&mut record);
        let kept = record.sql.as_deref().unwrap();
        assert!(kept.len() <= MAX_SQL_BYTES && sql.starts_with(kept));
        let cut = record.cut.as_ref().unwrap();
        assert_eq!(cut["sql"].bytes, sql.len() as u64);
        assert_eq!(cut["sql"].sha256, hex(&Sha256::digest(sql.as_bytes())));
        assert_eq!(cut["error"].bytes, 10_000);
        assert!(cut.contains_key("args.blob") && cut.contains_key("args.note"));
        let args = record.args.as_ref().unwrap();
        assert!(args.get("sql").is_none(), "the SQL once");
        assert!(args.get("blob").is_none());
        assert_eq!(args["row_limit"], 5);
        assert!(args["note"].as_str().unwrap().len() <= MAX_TEXT_BYTES);
        let json = serde_json::to_string(&record).unwrap();
        assert!(
            json.len() < MAX_SQL_BYTES + 4 * MAX_TEXT_BYTES,
            "{}",
            json.len()
        );
    }

    #[test]
    fn small_records_are_left_as_they_are() {
        let mut record = AuditRecord {
            sql: Some("SELECT 1".into()),
            args: serde_json::json!({"sql": "SELECT 2"}).as_object().cloned(),
            ..Default::default()
        };
        let before = record.clone();
        bound(&mut record);
        assert_eq!(record, before, "an args.sql that differs stays");
    }
}
