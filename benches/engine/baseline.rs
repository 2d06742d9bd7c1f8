//! The hand-written baseline (serde_json + SQLite) and the checks that the engine's output matches it.

use super::*;

pub(crate) fn check_engine_output(
    columns: &[String],
    rows: &[Vec<Cell>],
    expected: &Groups,
) -> Result<()> {
    ensure!(columns.len() == 3, "engine returned columns {columns:?}");
    let mut got = BTreeMap::new();
    for row in rows {
        match row.as_slice() {
            [Cell::Text(group), Cell::Integer(count), Cell::Integer(sum)] => {
                got.insert(group.clone(), (*count, *sum));
            }
            other => bail!("unexpected engine row {other:?}"),
        }
    }
    if &got != expected {
        let rows_seen: i64 = got.values().map(|(c, _)| c).sum();
        bail!(
            "engine result differs from the generated data: {} groups, {rows_seen} rows (expected 20 groups, 10000 rows)",
            got.len()
        );
    }
    Ok(())
}

/// Differences between the engine's row `seq = 0` and the generated one (empty = none).
pub(crate) async fn check_fidelity(
    engine: &Engine,
    cx: &ExecContext,
    row: &Value,
) -> Result<Vec<String>> {
    let sql = format!(
        "SELECT {} FROM bench.items.items WHERE seq = 0",
        quoted_columns().join(", ")
    );
    let out = engine
        .execute(cx, &sql)
        .await
        .map_err(|err| anyhow!("{err}"))?;
    let [cells] = out.rows.as_slice() else {
        bail!("expected one row for seq = 0, got {}", out.rows.len());
    };
    let mut notes = Vec::new();
    for (column, cell) in COLUMNS.iter().zip(cells) {
        let expected = match to_sql(row.get(*column)) {
            // The schema types `active` boolean: selected as it is, it comes back as a
            // boolean (StackQL gives true/false), though SQLite stores 1/0.
            SqlValue::Integer(i) if row.get(*column).is_some_and(Value::is_boolean) => {
                Cell::Boolean(i == 1)
            }
            SqlValue::Null => Cell::Null,
            SqlValue::Integer(i) => Cell::Integer(i),
            SqlValue::Real(f) => Cell::Real(f),
            SqlValue::Text(t) => Cell::Text(t),
            SqlValue::Blob(b) => Cell::Blob(b),
        };
        let same = match (&expected, cell) {
            // Nested JSON: compare as JSON, not text.
            (Cell::Text(a), Cell::Text(b)) if a.starts_with(['{', '[']) => {
                serde_json::from_str::<Value>(a).ok() == serde_json::from_str::<Value>(b).ok()
            }
            (a, b) => a == b,
        };
        if !same {
            notes.push(format!("{column}: engine {cell:?}, generated {expected:?}"));
        }
    }
    Ok(notes)
}

pub(crate) fn quoted_columns() -> Vec<String> {
    COLUMNS.iter().map(|c| format!("\"{c}\"")).collect()
}

// ---------------------------------------------------------------------------------------
// b. baseline
// ---------------------------------------------------------------------------------------

/// The GROUP BY result and the wall time spent in `serde_json::from_slice`.
pub(crate) fn baseline(pages: &[Bytes]) -> Result<(Groups, Duration)> {
    let mut parse = Duration::ZERO;
    let mut conn = rusqlite::Connection::open_in_memory()?;
    conn.execute_batch(&format!(
        "CREATE TABLE items ({})",
        quoted_columns().join(", ")
    ))?;
    let placeholders: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare(&format!(
            "INSERT INTO items VALUES ({})",
            placeholders.join(", ")
        ))?;
        for page in pages {
            let started = Instant::now();
            let value: Value = serde_json::from_slice(page)?;
            parse += started.elapsed();
            let Value::Array(rows) = value else {
                bail!("page is not an array")
            };
            for row in &rows {
                for (i, column) in COLUMNS.iter().enumerate() {
                    bind(&mut insert, i + 1, row.get(*column))?;
                }
                insert.raw_execute()?;
            }
        }
    }
    tx.commit()?;
    let mut statement =
        conn.prepare(r#"SELECT "group", count(*), sum(size) FROM items GROUP BY "group""#)?;
    let groups = statement
        .query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                (row.get::<_, i64>(1)?, row.get::<_, i64>(2)?),
            ))
        })?
        .collect::<rusqlite::Result<BTreeMap<_, _>>>()?;
    Ok((groups, parse))
}

/// Binds without copying strings; nested JSON is bound as its text (as the engine does).
pub(crate) fn bind(
    insert: &mut rusqlite::Statement<'_>,
    index: usize,
    value: Option<&Value>,
) -> rusqlite::Result<()> {
    match value {
        Some(Value::String(s)) => insert.raw_bind_parameter(index, s.as_str()),
        Some(Value::Bool(b)) => insert.raw_bind_parameter(index, i64::from(*b)),
        Some(Value::Number(n)) if n.is_i64() || n.is_f64() => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => insert.raw_bind_parameter(index, i),
            (None, Some(f)) => insert.raw_bind_parameter(index, f),
            _ => insert.raw_bind_parameter(index, SqlValue::Null),
        },
        other => insert.raw_bind_parameter(index, to_sql(other)),
    }
}

pub(crate) fn to_sql(value: Option<&Value>) -> SqlValue {
    match value {
        None | Some(Value::Null) => SqlValue::Null,
        Some(Value::Bool(b)) => SqlValue::Integer(i64::from(*b)),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => SqlValue::Integer(i),
            (None, Some(f)) if !n.is_u64() => SqlValue::Real(f),
            _ => SqlValue::Text(n.to_string()),
        },
        Some(Value::String(s)) => SqlValue::Text(s.clone()),
        Some(nested) => SqlValue::Text(nested.to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// Mock upstream
// ---------------------------------------------------------------------------------------
