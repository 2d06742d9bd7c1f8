//! The generated rows and the page bodies the mock serves: plain JSON, Azure-shaped and S3 XML.

use super::*;

pub(crate) struct Dataset {
    pub(crate) pages: Vec<Bytes>,
    /// The same rows, Azure-shaped: `{"value": [{"id", "name", "type", "location",
    /// "properties": {the rest}}], "nextLink": null}`.
    pub(crate) arm_pages: Vec<Bytes>,
    /// The same rows as S3 ListObjectsV2 XML pages (`StorageClass` holds the group).
    pub(crate) s3_pages: Vec<Bytes>,
    /// group → (count, sum(size)).
    pub(crate) expected: Groups,
    /// The row with `seq = 0`, to check what the engine makes of each type.
    pub(crate) first_row: Value,
}

impl Dataset {
    pub(crate) fn generate() -> Dataset {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            state >> 33
        };
        let mut expected: Groups = BTreeMap::new();
        let mut pages = Vec::with_capacity(PAGES);
        let mut arm_pages = Vec::with_capacity(PAGES);
        let mut s3_pages = Vec::with_capacity(PAGES);
        for page in 0..PAGES {
            let mut rows = Vec::with_capacity(ROWS_PER_PAGE);
            for r in 0..ROWS_PER_PAGE {
                let seq = (page * ROWS_PER_PAGE + r) as i64;
                let group = format!("group-{:02}", next() % GROUPS);
                let size = (next() % 100_000) as i64;
                let user = next() % 5_000;
                let entry = expected.entry(group.clone()).or_default();
                entry.0 += 1;
                entry.1 += size;
                rows.push(json!({
                    // Above 2^53: must survive as an exact integer.
                    "id": 7_000_000_000_000_000_000_i64 + seq * 1_000_003,
                    "seq": seq,
                    "name": format!("item-{seq:05}"),
                    "group": group,
                    "size": size,
                    "active": next() % 3 != 0,
                    "score": (next() % 1_000_000) as f64 / 1_000.0 + 0.5,
                    "created_at": format!("2024-{:02}-{:02}T{:02}:{:02}:00Z", 1 + next() % 12, 1 + next() % 28, next() % 24, next() % 60),
                    "owner": {"login": format!("user{user}"), "id": user, "site_admin": user % 97 == 0},
                    "tags": (0..next() % 4).map(|t| format!("tag{}", (t + user) % 10)).collect::<Vec<_>>(),
                }));
            }
            let arm_rows: Vec<Value> = rows.iter().map(arm_row).collect();
            let arm_page = json!({"value": arm_rows, "nextLink": null});
            arm_pages.push(Bytes::from(arm_page.to_string()));
            s3_pages.push(Bytes::from(s3_page(&rows, page)));
            // `Value::to_string` cannot fail.
            pages.push(Bytes::from(Value::Array(rows).to_string()));
        }
        let first_row = pages
            .first()
            .and_then(|p| serde_json::from_slice::<Value>(p).ok())
            .and_then(|v| v.get(0).cloned())
            .unwrap_or(Value::Null);
        Dataset {
            pages,
            arm_pages,
            s3_pages,
            expected,
            first_row,
        }
    }

    pub(crate) fn total_bytes(&self) -> usize {
        self.pages.iter().map(Bytes::len).sum()
    }
}

/// Rows as one page (`page`, from 0) of an S3 ListObjectsV2 answer, with the token of the
/// next page while one follows.
pub(crate) fn s3_page(rows: &[Value], page: usize) -> String {
    let text = |row: &Value, key: &str| {
        row.get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut body = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>bench-bucket</Name><Prefix></Prefix>"#,
    );
    let more = page + 1 < PAGES;
    body.push_str(&format!(
        "<KeyCount>{}</KeyCount><MaxKeys>{ROWS_PER_PAGE}</MaxKeys><IsTruncated>{more}</IsTruncated>",
        rows.len()
    ));
    if page > 0 {
        body.push_str(&format!(
            "<ContinuationToken>page-{}</ContinuationToken>",
            page + 1
        ));
    }
    if more {
        body.push_str(&format!(
            "<NextContinuationToken>page-{}</NextContinuationToken>",
            page + 2
        ));
    }
    for row in rows {
        let owner = row.get("owner").cloned().unwrap_or(Value::Null);
        body.push_str(&format!(
            "<Contents><Key>photos/2024/{}.jpg</Key><LastModified>{}</LastModified>\
             <ETag>&quot;{:032x}&quot;</ETag><ChecksumAlgorithm>CRC32</ChecksumAlgorithm>\
             <Size>{}</Size><StorageClass>{}</StorageClass>\
             <Owner><DisplayName>{}</DisplayName><ID>{:064x}</ID></Owner></Contents>",
            text(row, "name"),
            text(row, "created_at"),
            row.get("id").and_then(Value::as_i64).unwrap_or(0),
            row.get("size").and_then(Value::as_i64).unwrap_or(0),
            text(row, "group"),
            owner.get("login").and_then(Value::as_str).unwrap_or(""),
            owner.get("id").and_then(Value::as_u64).unwrap_or(0),
        ));
    }
    body.push_str("</ListBucketResult>");
    body
}

/// A row as an ARM list item: `name` at the top, the other fields under `properties`.
pub(crate) fn arm_row(row: &Value) -> Value {
    let mut properties = row.as_object().cloned().unwrap_or_default();
    let name = properties.remove("name").unwrap_or(Value::Null);
    json!({
        "id": format!("/subscriptions/s1/resourceGroups/rg1/providers/Bench/items/{}", name.as_str().unwrap_or("")),
        "name": name,
        "type": "Bench/items",
        "location": "westeurope",
        "properties": properties,
    })
}
