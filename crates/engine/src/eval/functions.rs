//! StackQL's SQL additions to the embedded SQLite engine.
//!
//! StackQL's default backend is SQLite built with a small set of extra scalar functions
//! (`stackql/sqlite-ext-functions`, compiled into `stackql/stackql-go-sqlite3`). Queries
//! written for StackQL use them freely, so [`register`] adds equivalents to every connection
//! the engine opens. Behaviour follows StackQL's implementation rather than the similarly named
//! PostgreSQL or sqlean functions where those differ:
//!
//! | function | result |
//! |---|---|
//! | `split_part(source, sep, n)` | `n`th part (1-based; negative counts from the end); `NULL` when `n` is out of range or 0, `sep` is empty, or any argument is `NULL` |
//! | `regexp_like(source, pattern)` | `1` if `pattern` matches anywhere in `source`, else `0` |
//! | `regexp_substr(source, pattern)` | first match, or `NULL` when there is none |
//! | `regexp_replace(source, pattern, replacement)` | `source` with every match replaced |
//! | `json_equal(a, b)` | `1` if the JSON texts are structurally equal, else `0` |
//!
//! The regexp functions return `NULL` when any argument is `NULL`; `json_equal` raises an error
//! for a `NULL` or non-JSON argument, as StackQL's does.
//!
//! Patterns use the `regex` crate's syntax, a superset of the tiny-regex-c dialect StackQL
//! ships. As in StackQL's build, `.` also matches a newline (write `(?-s)` to opt out). Patterns
//! come from clients, so compiled programs are capped at [`REGEX_SIZE_LIMIT`] bytes, and each
//! pattern is compiled once per statement: the compiled regex is kept as SQLite auxiliary data
//! on the pattern argument, which SQLite retains across rows while that argument is constant.
//!
//! Non-text arguments are read as SQLite would read them as text (`12` → `'12'`, `2.5` →
//! `'2.5'`), and `split_part`'s index is read the way `sqlite3_value_int64` reads it (`'2'` →
//! 2, `2.9` → 2, `'x'` → 0).
//!
//! SQLite's `changes()`, `total_changes()` and `last_insert_rowid()` count the connection's own
//! inserts, which here are the engine's loading of fetched rows, over every statement the
//! connection has served: they raise an error instead.

use std::borrow::Cow;
use std::os::raw::c_int;
use std::sync::Arc;

use regex::{Regex, RegexBuilder};
use rusqlite::functions::{Context, FunctionFlags};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, Error, Result};
use serde_json::{Number, Value};

/// Upper bound, in bytes, on a compiled client-supplied regex and on its lazy-DFA cache.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// Argument slot holding the pattern in every `regexp_*` function.
const PATTERN_ARG: c_int = 1;

/// Argument slot holding the replacement in `regexp_replace`.
const REPLACEMENT_ARG: c_int = 2;

#[cfg(test)]
thread_local! {
    /// Regex compilations performed on this thread; lets tests check the per-statement cache.
    static REGEX_COMPILES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Registers StackQL's SQL additions on a connection.
///
/// Adds `split_part`, `regexp_like`, `regexp_substr`, `regexp_replace` and `json_equal` as
/// deterministic UTF-8 scalar functions (see the module documentation for their semantics).
///
/// # Errors
///
/// Returns the SQLite error if a function cannot be created on `conn`.
pub(crate) fn register(conn: &Connection) -> Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("split_part", 3, flags, split_part)?;
    conn.create_scalar_function("regexp_like", 2, flags, regexp_like)?;
    conn.create_scalar_function("regexp_substr", 2, flags, regexp_substr)?;
    conn.create_scalar_function("regexp_replace", 3, flags, regexp_replace)?;
    conn.create_scalar_function("json_equal", 2, flags, json_equal)?;
    for counter in CONNECTION_COUNTERS {
        conn.create_scalar_function(counter, 0, FunctionFlags::SQLITE_UTF8, move |_| {
            Err::<i64, _>(user_error(format!(
                "{counter}() is not available: the rows a statement reads are loaded by querygate, not by the statement"
            )))
        })?;
    }
    Ok(())
}

/// SQLite's functions reporting the connection's own writes, which span statements on a
/// connection kept for reuse.
const CONNECTION_COUNTERS: [&str; 3] = ["changes", "total_changes", "last_insert_rowid"];

/// `split_part(source, sep, n)`: the `n`th `sep`-separated part of `source`.
fn split_part(ctx: &mut Context<'_>) -> Result<Option<String>> {
    let (Some(source), Some(sep), Some(index)) = (
        value_text(ctx.get_raw(0)),
        value_text(ctx.get_raw(1)),
        value_int(ctx.get_raw(2)),
    ) else {
        return Ok(None);
    };
    if sep.is_empty() {
        return Ok(None);
    }
    Ok(nth_part(&source, &sep, index).map(str::to_owned))
}

/// Part `index` (1-based; negative counts back from the last part) of `source` split on every
/// non-overlapping occurrence of `sep`, scanning left to right. `None` when out of range or 0.
fn nth_part<'a>(source: &'a str, sep: &str, index: i64) -> Option<&'a str> {
    let zero_based = if index > 0 {
        usize::try_from(index - 1).ok()?
    } else if index < 0 {
        // Count parts the same left-to-right way `split` produces them; `rsplit` can cut
        // overlapping separators ("aaa" on "aa") differently.
        let parts = source.matches(sep).count() + 1;
        parts.checked_sub(usize::try_from(index.unsigned_abs()).ok()?)?
    } else {
        return None;
    };
    source.split(sep).nth(zero_based)
}

/// `regexp_like(source, pattern)`: 1 if `pattern` matches anywhere in `source`, else 0.
fn regexp_like(ctx: &mut Context<'_>) -> Result<Option<i64>> {
    if any_null(ctx) {
        return Ok(None);
    }
    let regex = cached_regex(ctx, "regexp_like")?;
    let source = value_text(ctx.get_raw(0)).unwrap_or_default();
    Ok(Some(i64::from(regex.is_match(&source))))
}

/// `regexp_substr(source, pattern)`: the leftmost match of `pattern`, or NULL.
fn regexp_substr(ctx: &mut Context<'_>) -> Result<Option<String>> {
    if any_null(ctx) {
        return Ok(None);
    }
    let regex = cached_regex(ctx, "regexp_substr")?;
    let source = value_text(ctx.get_raw(0)).unwrap_or_default();
    Ok(regex.find(&source).map(|m| m.as_str().to_owned()))
}

/// `regexp_replace(source, pattern, replacement)`: every match replaced, with group references
/// in `replacement` expanded (see [`replacement_template`]).
fn regexp_replace(ctx: &mut Context<'_>) -> Result<Option<String>> {
    if any_null(ctx) {
        return Ok(None);
    }
    let regex = cached_regex(ctx, "regexp_replace")?;
    let template = ctx.get_or_create_aux(REPLACEMENT_ARG, |v| {
        value_text(v)
            .map(|r| replacement_template(&r))
            .ok_or("regexp_replace: replacement must not be NULL")
    })?;
    let source = value_text(ctx.get_raw(0)).unwrap_or_default();
    Ok(Some(
        regex.replace_all(&source, template.as_str()).into_owned(),
    ))
}

/// `json_equal(a, b)`: 1 if both JSON texts denote the same value, else 0.
fn json_equal(ctx: &mut Context<'_>) -> Result<i64> {
    let a = json_arg(ctx, 0)?;
    let b = json_arg(ctx, 1)?;
    Ok(i64::from(json_values_equal(&a, &b)))
}

/// Parses JSON argument `idx` (0-based), caching the parse while the argument is constant.
fn json_arg(ctx: &Context<'_>, idx: c_int) -> Result<Arc<Value>> {
    let position = idx + 1;
    if matches!(
        ctx.get_raw(usize::try_from(idx).unwrap_or(0)),
        ValueRef::Null
    ) {
        return Err(user_error(format!(
            "json_equal: argument {position} is NULL; expected JSON text"
        )));
    }
    ctx.get_or_create_aux(idx, |v| {
        let text = value_text(v).unwrap_or_default();
        serde_json::from_str::<Value>(&text)
            .map_err(|e| format!("json_equal: argument {position} is not valid JSON: {e}"))
    })
}

/// Structural JSON equality: object members compared by key regardless of order, arrays
/// element by element, numbers by value.
fn json_values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_values_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_values_equal(v, w)))
        }
        _ => false,
    }
}

/// Numeric equality: exact for two integers; otherwise as doubles, equal within one relative
/// machine epsilon (cJSON's rule, so `1`, `1.0` and `1e0` are all equal).
fn numbers_equal(a: &Number, b: &Number) -> bool {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return x == y;
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return x == y;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= x.abs().max(y.abs()) * f64::EPSILON,
        _ => false,
    }
}

/// Whether any argument is SQL NULL.
fn any_null(ctx: &Context<'_>) -> bool {
    (0..ctx.len()).any(|i| matches!(ctx.get_raw(i), ValueRef::Null))
}

/// The compiled pattern argument, compiled at most once while the pattern is constant.
fn cached_regex(ctx: &Context<'_>, func: &'static str) -> Result<Arc<Regex>> {
    ctx.get_or_create_aux(PATTERN_ARG, |v| match value_text(v) {
        Some(pattern) => compile_regex(func, &pattern),
        None => Err(format!("{func}: pattern must not be NULL")),
    })
}

/// Compiles a client-supplied pattern under the size caps, naming `func` in any error.
fn compile_regex(func: &str, pattern: &str) -> std::result::Result<Regex, String> {
    #[cfg(test)]
    REGEX_COMPILES.with(|n| n.set(n.get() + 1));
    RegexBuilder::new(pattern)
        .dot_matches_new_line(true)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(limit) => format!(
                "{func}: pattern too large: its compiled form exceeds the {limit}-byte limit"
            ),
            regex::Error::Syntax(msg) => format!("{func}: invalid pattern: {msg}"),
            other => format!("{func}: invalid pattern: {other}"),
        })
}

/// Converts a `regexp_replace` replacement into a `regex` replacement template.
///
/// `$N`, `${N}`, `${name}` and `$$` keep the `regex` crate's meaning. StackQL's documentation
/// writes group references as `\1`…`\9`, so `\N` (one digit; `\0` is the whole match) becomes
/// `${N}`, and `\\` stands for a literal backslash. Any other backslash is literal.
fn replacement_template(replacement: &str) -> String {
    let mut out = String::with_capacity(replacement.len() + 4);
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.peek().copied() {
            Some(d) if d.is_ascii_digit() => {
                out.push_str("${");
                out.push(d);
                out.push('}');
                chars.next();
            }
            Some('\\') => {
                out.push('\\');
                chars.next();
            }
            _ => out.push('\\'),
        }
    }
    out
}

/// A SQL value read as text the way `sqlite3_value_text` reads it; `None` for NULL.
/// Text that is not valid UTF-8 is decoded lossily.
fn value_text(value: ValueRef<'_>) -> Option<Cow<'_, str>> {
    match value {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(Cow::Owned(i.to_string())),
        ValueRef::Real(r) => Some(Cow::Owned(real_to_text(r))),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(String::from_utf8_lossy(bytes)),
    }
}

/// A SQL value read as an integer the way `sqlite3_value_int64` reads it; `None` for NULL.
///
/// Reals truncate toward zero (saturating); text uses its longest integer prefix after
/// leading whitespace (`' 12abc'` → 12, `'abc'` → 0), saturating on overflow.
fn value_int(value: ValueRef<'_>) -> Option<i64> {
    match value {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(i),
        // `as` saturates and maps NaN to 0, as SQLite's double-to-integer conversion does.
        ValueRef::Real(r) => Some(r as i64),
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => Some(integer_prefix(bytes)),
    }
}

/// The integer spelled by the longest prefix of `bytes`, as SQLite parses it.
fn integer_prefix(bytes: &[u8]) -> i64 {
    let mut rest = bytes;
    while let [b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = matches!(rest.first(), Some(b'-'));
    if let [b'-' | b'+', tail @ ..] = rest {
        rest = tail;
    }
    let mut magnitude: i128 = 0;
    for digit in rest.iter().take_while(|b| b.is_ascii_digit()) {
        magnitude = (magnitude * 10 + i128::from(digit - b'0')).min(i128::from(u64::MAX));
    }
    let signed = if negative { -magnitude } else { magnitude };
    i64::try_from(signed).unwrap_or(if negative { i64::MIN } else { i64::MAX })
}

/// Renders a double in the layout SQLite uses for REAL to TEXT (`%!.17g`): `1.0`, `0.1`,
/// `-2.5`, `1.0e+20`, `1.0e-05`, `Inf`.
///
/// Digits are the shortest that round-trip. SQLite usually prints those too, but for values
/// needing 16–17 significant digits its own decoder can differ in the last digit (`1.0/3`
/// renders as `0.33333333333333332` there, `0.3333333333333333` here); both read back as the
/// same double.
fn real_to_text(r: f64) -> String {
    if r.is_nan() {
        return "NaN".to_owned();
    }
    if r.is_infinite() {
        return if r > 0.0 { "Inf" } else { "-Inf" }.to_owned();
    }
    if r == 0.0 {
        // SQLite prints negative zero as "0.0" too.
        return "0.0".to_owned();
    }
    // `{:e}` gives the shortest digits that round-trip, e.g. "-4.947e1".
    let scientific = format!("{r:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let (first, tail) = digits.split_at(1.min(digits.len()));
    let mut out = String::from(sign);
    if !(-4..=16).contains(&exponent) {
        out.push_str(first);
        out.push('.');
        out.push_str(if tail.is_empty() { "0" } else { tail });
        out.push_str(if exponent < 0 { "e-" } else { "e+" });
        out.push_str(&format!("{:02}", exponent.unsigned_abs()));
    } else if exponent >= 0 {
        let int_len = exponent.unsigned_abs() as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            out.push_str(&"0".repeat(int_len - digits.len()));
            out.push_str(".0");
        } else {
            let (int_part, frac_part) = digits.split_at(int_len);
            out.push_str(int_part);
            out.push('.');
            out.push_str(frac_part);
        }
    } else {
        out.push_str("0.");
        out.push_str(&"0".repeat(exponent.unsigned_abs() as usize - 1));
        out.push_str(&digits);
    }
    out
}

/// Wraps a message as a SQL function error; SQLite reports it verbatim.
fn user_error(message: String) -> Error {
    Error::UserFunctionError(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::types::Value as SqlValue;

    fn conn() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        conn
    }

    fn text(conn: &Connection, sql: &str) -> Option<String> {
        conn.query_row(sql, [], |row| row.get(0)).unwrap()
    }

    fn int(conn: &Connection, sql: &str) -> Option<i64> {
        conn.query_row(sql, [], |row| row.get(0)).unwrap()
    }

    fn error(conn: &Connection, sql: &str) -> String {
        conn.query_row(sql, [], |row| row.get::<_, SqlValue>(0))
            .unwrap_err()
            .to_string()
    }

    fn compiles() -> usize {
        REGEX_COMPILES.with(std::cell::Cell::get)
    }

    #[test]
    fn split_part_positive_and_negative_indexes() {
        let c = conn();
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', 1)").as_deref(),
            Some("a")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', 2)").as_deref(),
            Some("b")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', 3)").as_deref(),
            Some("c")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', -1)").as_deref(),
            Some("c")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', -2)").as_deref(),
            Some("b")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', -3)").as_deref(),
            Some("a")
        );
        let url = "'https://www.googleapis.com/compute/v1/projects/p/global/networks/default'";
        assert_eq!(
            text(&c, &format!("SELECT split_part({url}, '/', 4)")).as_deref(),
            Some("compute")
        );
        assert_eq!(
            text(&c, &format!("SELECT split_part({url}, '/', -1)")).as_deref(),
            Some("default")
        );
        assert_eq!(
            text(&c, &format!("SELECT split_part({url}, '/', -3)")).as_deref(),
            Some("global")
        );
    }

    #[test]
    fn split_part_empty_parts_and_separators() {
        let c = conn();
        assert_eq!(
            text(&c, "SELECT split_part('/a/b/', '/', 1)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('/a/b/', '/', 4)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a//b', '/', 2)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a//b', '/', 3)").as_deref(),
            Some("b")
        );
        assert_eq!(
            text(&c, "SELECT split_part('', '/', 1)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('', '/', -1)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('abc', ',', 1)").as_deref(),
            Some("abc")
        );
        // The separator is a whole string, not a set of characters.
        assert_eq!(
            text(&c, "SELECT split_part('a::b:c', '::', 2)").as_deref(),
            Some("b:c")
        );
        // Overlapping separators are cut left to right for both signs of index.
        assert_eq!(
            text(&c, "SELECT split_part('aaa', 'aa', 1)").as_deref(),
            Some("")
        );
        assert_eq!(
            text(&c, "SELECT split_part('aaa', 'aa', -1)").as_deref(),
            Some("a")
        );
        assert_eq!(
            text(&c, "SELECT split_part('x→y→z', '→', -2)").as_deref(),
            Some("y")
        );
        assert_eq!(
            text(
                &c,
                "SELECT split_part('l1' || char(10) || 'l2', char(10), 2)"
            )
            .as_deref(),
            Some("l2")
        );
    }

    #[test]
    fn split_part_out_of_range_zero_and_nulls_are_null() {
        let c = conn();
        for sql in [
            "SELECT split_part('a/b/c', '/', 4)",
            "SELECT split_part('a/b/c', '/', -4)",
            "SELECT split_part('a', '/', 2)",
            "SELECT split_part('a/b/c', '/', 0)",
            "SELECT split_part('a/b/c', '/', 9223372036854775807)",
            "SELECT split_part('a/b/c', '/', -9223372036854775808)",
            "SELECT split_part('a/b/c', '', 1)",
            "SELECT split_part(NULL, '/', 1)",
            "SELECT split_part('a/b/c', NULL, 1)",
            "SELECT split_part('a/b/c', '/', NULL)",
        ] {
            assert_eq!(text(&c, sql), None, "{sql}");
        }
    }

    #[test]
    fn split_part_coerces_arguments_like_sqlite() {
        let c = conn();
        assert_eq!(
            text(&c, "SELECT split_part(12345, '3', 1)").as_deref(),
            Some("12")
        );
        assert_eq!(
            text(&c, "SELECT split_part(3.25, '.', 2)").as_deref(),
            Some("25")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', '2')").as_deref(),
            Some("b")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', ' -1x')").as_deref(),
            Some("c")
        );
        assert_eq!(
            text(&c, "SELECT split_part('a/b/c', '/', 2.9)").as_deref(),
            Some("b")
        );
        assert_eq!(text(&c, "SELECT split_part('a/b/c', '/', 'x')"), None);
    }

    #[test]
    fn reals_render_as_sqlite_casts_them() {
        let c = conn();
        let values = [
            0.0,
            -0.0,
            1.0,
            -2.5,
            0.1,
            0.5,
            49.47,
            100.0,
            123.456,
            1e15,
            1e16,
            1e17,
            1e20,
            -1e20,
            1.5e300,
            1e-4,
            1e-5,
            1.25e-7,
            0.1 + 0.2,
            2.0_f64.powi(60),
            123456.789e3,
        ];
        for v in values {
            let (ours, sqlite): (String, String) = c
                .query_row(
                    "SELECT split_part(?1, '|', 1), CAST(?1 AS TEXT)",
                    [v],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .unwrap();
            assert_eq!(ours, sqlite, "rendering {v:e}");
        }
    }

    #[test]
    fn integer_prefix_parses_like_sqlite() {
        assert_eq!(integer_prefix(b"42"), 42);
        assert_eq!(integer_prefix(b"  +7 days"), 7);
        assert_eq!(integer_prefix(b"\t-3.9"), -3);
        assert_eq!(integer_prefix(b""), 0);
        assert_eq!(integer_prefix(b"-"), 0);
        assert_eq!(integer_prefix(b"99999999999999999999999"), i64::MAX);
        assert_eq!(integer_prefix(b"-99999999999999999999999"), i64::MIN);
        assert_eq!(integer_prefix(b"-9223372036854775808"), i64::MIN);
    }

    #[test]
    fn regexp_like_matches_anywhere() {
        let c = conn();
        assert_eq!(
            int(&c, "SELECT regexp_like('hello world', 'hello')"),
            Some(1)
        );
        assert_eq!(int(&c, "SELECT regexp_like('hello world', 'o w')"), Some(1));
        assert_eq!(
            int(&c, "SELECT regexp_like('hello world', '^world')"),
            Some(0)
        );
        assert_eq!(
            int(&c, "SELECT regexp_like('hello world', 'world$')"),
            Some(1)
        );
        assert_eq!(int(&c, "SELECT regexp_like('abc123', '[0-9]+')"), Some(1));
        assert_eq!(int(&c, "SELECT regexp_like('abc', '\\d')"), Some(0));
        assert_eq!(int(&c, "SELECT regexp_like('hello', '')"), Some(1));
        assert_eq!(int(&c, "SELECT regexp_like('vm12', 'VM[0-9]+')"), Some(0));
        assert_eq!(
            int(&c, "SELECT regexp_like('vm12', '(?i)VM[0-9]+')"),
            Some(1)
        );
        assert_eq!(int(&c, "SELECT regexp_like(2024, '^20')"), Some(1));
        // `.` spans newlines, as in StackQL's regex engine.
        assert_eq!(
            int(&c, "SELECT regexp_like('a' || char(10) || 'b', '^a.b$')"),
            Some(1)
        );
        assert_eq!(int(&c, "SELECT regexp_like(NULL, 'a')"), None);
        assert_eq!(int(&c, "SELECT regexp_like('a', NULL)"), None);
    }

    #[test]
    fn regexp_substr_returns_first_match_or_null() {
        let c = conn();
        assert_eq!(
            text(&c, "SELECT regexp_substr('hello world', 'w.*d')").as_deref(),
            Some("world")
        );
        assert_eq!(
            text(&c, "SELECT regexp_substr('abc123xyz456', '[0-9]+')").as_deref(),
            Some("123")
        );
        assert_eq!(
            text(&c, "SELECT regexp_substr('file.txt', '\\.\\w+$')").as_deref(),
            Some(".txt")
        );
        assert_eq!(
            text(
                &c,
                "SELECT regexp_substr('UbuntuServer 16.04-LTS', '[0-9][0-9]\\.[0-9][0-9]')"
            )
            .as_deref(),
            Some("16.04")
        );
        assert_eq!(
            text(&c, "SELECT regexp_substr('hello', '')").as_deref(),
            Some("")
        );
        assert_eq!(text(&c, "SELECT regexp_substr('hello world', 'abc')"), None);
        assert_eq!(text(&c, "SELECT regexp_substr(NULL, 'a')"), None);
        assert_eq!(text(&c, "SELECT regexp_substr('a', NULL)"), None);
    }

    #[test]
    fn regexp_replace_replaces_every_match() {
        let c = conn();
        let cases = [
            (
                "SELECT regexp_replace('hello world', 'world', 'SQLite')",
                "hello SQLite",
            ),
            (
                "SELECT regexp_replace('123-456-7890', '[0-9]', 'X')",
                "XXX-XXX-XXXX",
            ),
            (
                "SELECT regexp_replace('hello world', 'abc', 'def')",
                "hello world",
            ),
            (
                "SELECT regexp_replace('2022-09-14T10:00:00Z', 'T.*', '')",
                "2022-09-14",
            ),
            ("SELECT regexp_replace('abc', 'x*', '-')", "-a-b-c-"),
            (
                "SELECT regexp_replace('year 2021', '([0-9]+)', '$1 or 2050')",
                "year 2021 or 2050",
            ),
            (
                "SELECT regexp_replace('year 2021', '(?P<y>[0-9]+)', '<${y}>')",
                "year <2021>",
            ),
            (
                "SELECT regexp_replace('a-b c-d', '(\\w)-(\\w)', '\\2-\\1')",
                "b-a d-c",
            ),
            ("SELECT regexp_replace('ab', 'a', '[\\0]')", "[a]b"),
            ("SELECT regexp_replace('ab', 'a', '\\\\1\\x')", "\\1\\xb"),
            ("SELECT regexp_replace('ab', 'a', '$$')", "$b"),
            ("SELECT regexp_replace('ab', 'a', '$')", "$b"),
        ];
        for (sql, expected) in cases {
            assert_eq!(text(&c, sql).as_deref(), Some(expected), "{sql}");
        }
        assert_eq!(text(&c, "SELECT regexp_replace(NULL, 'a', 'b')"), None);
        assert_eq!(text(&c, "SELECT regexp_replace('a', NULL, 'b')"), None);
        assert_eq!(text(&c, "SELECT regexp_replace('a', 'a', NULL)"), None);
    }

    #[test]
    fn regexp_errors_name_the_function() {
        let c = conn();
        let e = error(&c, "SELECT regexp_like('abc', '(')");
        assert!(e.contains("regexp_like: invalid pattern"), "{e}");
        let e = error(&c, "SELECT regexp_substr('abc', '[z-a]')");
        assert!(e.contains("regexp_substr: invalid pattern"), "{e}");
        let e = error(&c, "SELECT regexp_replace('abc', 'a{2,1}', '')");
        assert!(e.contains("regexp_replace: invalid pattern"), "{e}");
        let e = error(&c, "SELECT regexp_like('abc', '\\w{1000}{1000}')");
        assert!(e.contains("regexp_like: pattern too large"), "{e}");
        // Only the documented arities exist.
        let e = error(&c, "SELECT regexp_substr('abc', 'b', 1)");
        assert!(e.contains("wrong number of arguments"), "{e}");
        // A NULL source short-circuits before the pattern is compiled, as in StackQL.
        assert_eq!(int(&c, "SELECT regexp_like(NULL, '(')"), None);
    }

    #[test]
    fn regexes_compile_once_per_statement_over_many_rows() {
        let c = conn();
        let before = compiles();
        let (matched, replaced_len, extracted): (i64, i64, i64) = c
            .query_row(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10000)
                 SELECT sum(regexp_like('vm-' || i, '^vm-[0-9]*7$')),
                        sum(length(regexp_replace('vm-' || i, '[0-9]', '#'))),
                        count(regexp_substr('vm-' || i, '[0-9]{4,}'))
                 FROM n",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(matched, 1000);
        assert_eq!(
            replaced_len,
            3 * 10000 + 9 + 2 * 90 + 3 * 900 + 4 * 9000 + 5
        );
        assert_eq!(extracted, 9001);
        assert_eq!(compiles() - before, 3, "one compilation per call site");

        // A per-row pattern is still honoured (it is simply recompiled as it changes).
        let hits: i64 = c
            .query_row(
                "WITH p(pat) AS (VALUES ('^a'), ('b$'), ('z'))
                 SELECT sum(regexp_like('ab', pat)) FROM p",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(hits, 2);
    }

    #[test]
    fn functions_are_deterministic() {
        // SQLite only accepts deterministic functions in index expressions.
        let c = conn();
        c.execute_batch(
            "CREATE TABLE t(x TEXT);
             CREATE INDEX t_split ON t(split_part(x, '/', 1));
             CREATE INDEX t_like ON t(regexp_like(x, '^a'));
             CREATE INDEX t_substr ON t(regexp_substr(x, 'b'));
             CREATE INDEX t_replace ON t(regexp_replace(x, 'b', 'c'));
             CREATE INDEX t_json ON t(json_equal(x, '\"a/b\"'));
             INSERT INTO t VALUES ('\"a/b\"'), ('\"c/d\"');",
        )
        .unwrap();
        let hit = text(&c, "SELECT x FROM t WHERE split_part(x, '/', 1) = '\"c'");
        assert_eq!(hit.as_deref(), Some("\"c/d\""));
        let equal = int(
            &c,
            "SELECT count(*) FROM t WHERE json_equal(x, '\"a/b\"') = 1",
        );
        assert_eq!(equal, Some(1));
    }

    #[test]
    fn json_equal_compares_structurally() {
        let c = conn();
        let cases = [
            (r#"'{"key": "value"}', '{"key": "value"}'"#, 1),
            (r#"'{"a": 1, "b": 2}', '{"b": 2, "a": 1}'"#, 1),
            (r#"'{"a": 1}', '{"a": 1, "b": 2}'"#, 0),
            (r#"'{"key": "value"}', '{"key": "different"}'"#, 0),
            (r#"'{"Key": 1}', '{"key": 1}'"#, 0),
            ("'[1, 2, 3]', ' [ 1,2,3 ] '", 1),
            ("'[1, 2, 3]', '[3, 2, 1]'", 0),
            ("'[1, 2]', '[1, 2, 2]'", 0),
            (
                r#"'{"k": [1, 2, {"s": "v", "t": null}]}', '{"k": [1, 2, {"t": null, "s": "v"}]}'"#,
                1,
            ),
            (r#"'{"k": [1, {"s": "v1"}]}', '{"k": [1, {"s": "v2"}]}'"#, 0),
            ("'1', '1.0'", 1),
            ("'1', '1e0'", 1),
            ("'-0', '0.0'", 1),
            ("'0.1', '0.10000000000000001'", 1),
            ("'1', '2'", 0),
            ("'9007199254740993', '9007199254740992'", 0),
            ("'18446744073709551615', '18446744073709551615'", 1),
            (r#"'1', '"1"'"#, 0),
            (r#"'"A"', '"\u0041"'"#, 1),
            ("'true', 'true'", 1),
            ("'true', '1'", 0),
            ("'null', 'null'", 1),
            ("'[]', '{}'", 0),
            ("1, '1.0'", 1),
        ];
        for (args, expected) in cases {
            let sql = format!("SELECT json_equal({args})");
            assert_eq!(int(&c, &sql), Some(expected), "{sql}");
        }
    }

    #[test]
    fn json_equal_rejects_null_and_invalid_json() {
        let c = conn();
        let e = error(&c, "SELECT json_equal(NULL, '{}')");
        assert!(e.contains("json_equal: argument 1 is NULL"), "{e}");
        let e = error(&c, "SELECT json_equal('{}', NULL)");
        assert!(e.contains("json_equal: argument 2 is NULL"), "{e}");
        let e = error(&c, "SELECT json_equal('{}', '{\"a\":}')");
        assert!(
            e.contains("json_equal: argument 2 is not valid JSON"),
            "{e}"
        );
        let e = error(&c, "SELECT json_equal('', '{}')");
        assert!(
            e.contains("json_equal: argument 1 is not valid JSON"),
            "{e}"
        );
        let e = error(&c, "SELECT json_equal('{} x', '{}')");
        assert!(
            e.contains("json_equal: argument 1 is not valid JSON"),
            "{e}"
        );
    }

    #[test]
    fn json_equal_over_rows_with_a_constant_side() {
        let c = conn();
        let equal: i64 = c
            .query_row(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000)
                 SELECT sum(json_equal(json_object('b', i % 2, 'a', 1), '{\"a\": 1.0, \"b\": 1}'))
                 FROM n",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(equal, 1000);
    }

    #[test]
    fn replacement_template_translates_backslash_references() {
        assert_eq!(replacement_template(r"\1-\2"), "${1}-${2}");
        assert_eq!(replacement_template(r"\\1"), r"\1");
        assert_eq!(replacement_template(r"a\b\"), r"a\b\");
        assert_eq!(replacement_template("$1 ${name} $$"), "$1 ${name} $$");
    }
}
