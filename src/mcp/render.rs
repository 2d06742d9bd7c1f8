//! Text content of tool results: markdown (tables for uniform rows, key/value blocks for
//! records) or compact JSON of the structured result. Cells are escaped so a value can never
//! break a table: `|` becomes `\|`, line breaks become `<br>`. The finished text has its
//! control and bidirectional characters escaped ([`crate::safe_text`]): rows are upstream
//! data, shown to a model and a person, never acted on by their display.

use serde_json::Value;

use crate::config::Render;
use crate::safe_text;

/// How a result's markdown looks.
#[derive(Debug, Clone, PartialEq)]
pub enum View {
    /// A table: columns in order, then rows of values.
    Table {
        /// Column names.
        columns: Vec<String>,
        /// Rows of values, one per column.
        rows: Vec<Vec<Value>>,
    },
    /// `# title`, then one `## Record n` block of `key: value` lines per record.
    Records {
        /// The block title.
        title: String,
        /// Records as ordered key/value pairs.
        records: Vec<Vec<(String, Value)>>,
    },
    /// `# title`, then the structured result's fields as `key: value` lines (one record,
    /// read from the structured result rather than held twice).
    Record {
        /// The block title.
        title: String,
    },
    /// A table of the structured result's `rows` (objects), in these column orders; the
    /// rows are not held twice.
    Rows {
        /// Column names, the keys of each row object.
        columns: Vec<String>,
    },
    /// Markdown the tool composed itself (e.g. a table followed by notes).
    Markdown(String),
}

/// The text of a result in the chosen format, safe to display: JSON with the characters it
/// leaves raw written as `\uXXXX` (still the same JSON value), markdown with control and
/// bidirectional characters written as `\u{hex}`.
pub fn text(render: Render, view: &View, structured: &Value) -> String {
    match render {
        Render::Json => json_text(structured),
        Render::Markdown => safe_text::escape_display(markdown(view, structured)),
    }
}

/// The JSON text of a structured result (what [`text`] gives for `Render::Json`).
pub fn json_text(structured: &Value) -> String {
    safe_text::escape_json_text(
        serde_json::to_string(structured)
            .unwrap_or_else(|err| format!("{{\"error\":\"failed to render JSON: {err}\"}}")),
    )
}

/// The markdown of a view (`structured` is read by [`View::Rows`]). Tables end with what
/// the structured result says about completeness (`truncated`, `warnings`), so a client that
/// shows only the text still sees that rows are missing.
pub fn markdown(view: &View, structured: &Value) -> String {
    let mut text = match view {
        View::Table { columns, rows } => table(columns, rows, |row, cells| {
            cells.extend(row.iter().map(Some));
        }),
        View::Rows { columns } => {
            let objects = structured
                .get("rows")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            table(columns, objects, |row, cells| {
                object_cells(columns, row, cells)
            })
        }
        View::Records { title, records } => {
            let records: Vec<Vec<(&str, &Value)>> = records
                .iter()
                .map(|record| record.iter().map(|(k, v)| (k.as_str(), v)).collect())
                .collect();
            return key_values(title, &records);
        }
        View::Record { title } => {
            let record: Vec<(&str, &Value)> = structured
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v))
                .collect();
            return key_values(title, &[record]);
        }
        View::Markdown(text) => return text.clone(),
    };
    completeness_notes(structured, &mut text);
    text
}

/// Appends a line for a cut result and one per warning.
fn completeness_notes(structured: &Value, out: &mut String) {
    let mut notes = Vec::new();
    if structured.get("truncated") == Some(&Value::Bool(true)) {
        let shown = structured
            .get("rows")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let note = match structured.get("rows_seen").and_then(Value::as_u64) {
            Some(seen) => format!(
                "**truncated:** {shown} of {seen} rows shown (row_limit or server.max_rows); the result is incomplete"
            ),
            None => format!("**truncated:** only {shown} rows shown; the result is incomplete"),
        };
        notes.push(note);
    }
    for warning in structured
        .get("warnings")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        notes.push(format!(
            "**warning:** {}",
            cell(warning).replace(['\r', '\n'], " ")
        ));
    }
    if notes.is_empty() {
        return;
    }
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push('\n');
    for note in notes {
        out.push_str(&note);
        out.push('\n');
    }
}

/// A markdown table of `rows`, whose cells `value(row, column index)` gives (absent: empty).
/// A row object's values in `columns`' order: read in place when its keys are those
/// columns in that order (as tool results build them), looked up by name otherwise.
fn object_cells<'a>(columns: &[String], row: &'a Value, cells: &mut Vec<Option<&'a Value>>) {
    match row.as_object() {
        Some(object)
            if object.len() == columns.len()
                && object
                    .keys()
                    .zip(columns)
                    .all(|(key, column)| key == column) =>
        {
            cells.extend(object.values().map(Some));
        }
        _ => cells.extend(columns.iter().map(|column| row.get(column))),
    }
}

/// A markdown table of `rows`, whose values `cells` lists in `columns`' order (`None`: no
/// value, shown empty).
fn table<'a, R>(
    columns: &[String],
    rows: &'a [R],
    cells: impl Fn(&'a R, &mut Vec<Option<&'a Value>>),
) -> String {
    if rows.is_empty() || columns.is_empty() {
        return "**no results**".to_owned();
    }
    let mut out = String::with_capacity(16 * columns.len() * (rows.len() + 2));
    out.push('|');
    for column in columns {
        out.push(' ');
        push_escaped(&mut out, column);
        out.push_str(" |");
    }
    out.push('\n');
    out.push_str(&"|---".repeat(columns.len()));
    out.push_str("|\n");
    let mut values = Vec::with_capacity(columns.len());
    for row in rows {
        values.clear();
        cells(row, &mut values);
        out.push('|');
        for index in 0..columns.len() {
            out.push(' ');
            match values.get(index).copied().flatten() {
                None | Some(Value::Null) => {}
                Some(Value::String(text)) => push_escaped(&mut out, text),
                Some(scalar @ (Value::Bool(_) | Value::Number(_))) => {
                    push_display(&mut out, scalar)
                }
                Some(other) => push_escaped(&mut out, &other.to_string()),
            }
            out.push_str(" |");
        }
        out.push('\n');
    }
    out
}

fn key_values(title: &str, records: &[Vec<(&str, &Value)>]) -> String {
    let mut out = format!("# {title}\n\n");
    if records.is_empty() {
        out.push_str("**no results**");
        return out;
    }
    for (index, record) in records.iter().enumerate() {
        if records.len() > 1 {
            push_display(&mut out, format_args!("## Record {}\n\n", index + 1));
        }
        for (key, value) in record {
            out.push_str(key);
            out.push_str(": ");
            match value {
                Value::Null => {}
                Value::String(text) => push_one_line(&mut out, text),
                Value::Bool(_) | Value::Number(_) => push_display(&mut out, value),
                other => push_one_line(&mut out, &other.to_string()),
            }
            out.push('\n');
        }
        if index + 1 < records.len() {
            out.push('\n');
        }
    }
    out
}

/// A value as table text: strings as they are, null as empty, others as JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Appends `value`'s `Display` text.
fn push_display(out: &mut String, value: impl std::fmt::Display) {
    use std::fmt::Write as _;
    // Writing into a String cannot fail.
    let _ = write!(out, "{value}");
}

/// Appends `text` so it cannot break a table row: `|` as `\|`, each line break (`\r\n`,
/// `\n` or `\r`) as `<br>`.
fn push_escaped(out: &mut String, text: &str) {
    if !text.contains(['|', '\r', '\n']) {
        out.push_str(text);
        return;
    }
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '|' => out.push_str("\\|"),
            '\r' => {
                chars.next_if_eq(&'\n');
                out.push_str("<br>");
            }
            '\n' => out.push_str("<br>"),
            c => out.push(c),
        }
    }
}

/// Appends `text` on one line: each `\r` and `\n` becomes a space.
fn push_one_line(out: &mut String, text: &str) {
    if !text.contains(['\r', '\n']) {
        out.push_str(text);
        return;
    }
    out.extend(
        text.chars()
            .map(|c| if c == '\r' || c == '\n' { ' ' } else { c }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_escape_pipes_and_newlines() {
        let view = View::Table {
            columns: vec!["n".into(), "status".into()],
            rows: vec![
                vec![json!(1), json!("ok")],
                vec![json!(null), json!("a|b\nc")],
            ],
        };
        assert_eq!(
            markdown(&view, &Value::Null),
            "| n | status |\n|---|---|\n| 1 | ok |\n|  | a\\|b<br>c |\n"
        );
        let empty = View::Table {
            columns: vec!["n".into()],
            rows: vec![],
        };
        assert_eq!(markdown(&empty, &Value::Null), "**no results**");
        let odd = View::Table {
            columns: vec!["a|b".into(), "v".into()],
            rows: vec![
                vec![json!("x\r\ny\rz\n\n"), json!(["p|q", {"k": "l\nm"}])],
                vec![json!(true), json!(2.5)],
            ],
        };
        assert_eq!(
            markdown(&odd, &Value::Null),
            "| a\\|b | v |\n|---|---|\n| x<br>y<br>z<br><br> | [\"p\\|q\",{\"k\":\"l\\nm\"}] |\n| true | 2.5 |\n"
        );
    }

    #[test]
    fn records_keep_each_value_on_its_line() {
        let structured = json!({"name": "a\r\nb|c", "n": 3, "none": null, "list": ["x\ny"]});
        let record = View::Record { title: "T".into() };
        let text = "# T\n\nname: a  b|c\nn: 3\nnone: \nlist: [\"x\\ny\"]\n";
        assert_eq!(markdown(&record, &structured), text);
        let records = View::Records {
            title: "T".into(),
            records: vec![
                structured
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ],
        };
        assert_eq!(markdown(&records, &Value::Null), text);
    }

    #[test]
    fn cut_and_incomplete_tables_say_so() {
        let view = View::Rows {
            columns: vec!["n".into()],
        };
        let structured = json!({"rows": [{"n": 1}], "truncated": true, "rows_seen": 3,
            "warnings": ["'p.s.r': stopped after 2 pages (upstream.page_limit); the result may be incomplete"]});
        assert_eq!(
            markdown(&view, &structured),
            "| n |\n|---|\n| 1 |\n\n**truncated:** 1 of 3 rows shown (row_limit or server.max_rows); the result is incomplete\n**warning:** 'p.s.r': stopped after 2 pages (upstream.page_limit); the result may be incomplete\n"
        );
        let empty = json!({"rows": [], "warnings": ["w"]});
        assert_eq!(
            markdown(&view, &empty),
            "**no results**\n\n**warning:** w\n"
        );
    }

    #[test]
    fn rows_are_shown_in_column_order_whatever_their_objects_hold() {
        let view = View::Rows {
            columns: vec!["a".into(), "b".into()],
        };
        // In order (read in place), out of order, a column missing, a key too many.
        let structured = json!({"rows": [
            {"a": 1, "b": "x"},
            {"b": "y", "a": 2},
            {"b": "z"},
            {"a": 4, "b": "w", "c": 5},
        ]});
        assert_eq!(
            markdown(&view, &structured),
            "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |\n|  | z |\n| 4 | w |\n"
        );
    }

    #[test]
    fn records_and_json() {
        let view = View::Records {
            title: "Server Info".into(),
            records: vec![vec![
                ("mode".into(), json!("read_only")),
                ("n".into(), json!(2)),
            ]],
        };
        assert_eq!(
            markdown(&view, &Value::Null),
            "# Server Info\n\nmode: read_only\nn: 2\n"
        );
        let structured = json!({"rows": []});
        assert_eq!(text(Render::Json, &view, &structured), r#"{"rows":[]}"#);
    }
}
