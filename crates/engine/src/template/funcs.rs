//! The functions a template may call: Go's builtins (`index`, `slice`, `len`, `not`, `eq` …
//! `ge`, `print`, `printf`, `println`, `html`, `js`, `urlquery`; `and`/`or` are evaluated by
//! the executor, lazily) and those StackQL's any-sdk registers for response transforms
//! (`jsonMapFromString`, `safeIndex`, `toBool`, `toInt`, and from v0.2.0 `toJson`, `kindOf`,
//! `plus1`). any-sdk also registers `separator`, `getXPath`, `getXPathAllOuter`,
//! `getRegexpFirstMatch` and `getRegexpAllMatches`; no JSON or text transform of the
//! registry calls them and they are not defined here, so a template calling one does not
//! parse.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::doc::Doc;

use super::format;
use super::value::{Kind, Val, View};

/// Go's builtins.
const BUILTINS: [&str; 17] = [
    "and", "or", "not", "len", "index", "slice", "print", "printf", "println", "eq", "ne", "lt",
    "le", "gt", "ge", "html", "js",
];
const URLQUERY: &str = "urlquery";
/// any-sdk's functions for every template version.
const STACKQL_V1: [&str; 4] = ["jsonMapFromString", "safeIndex", "toBool", "toInt"];
/// any-sdk's functions from template version v0.2.0 on.
const STACKQL_V2: [&str; 3] = ["toJson", "kindOf", "plus1"];

/// Which functions a template version has: any-sdk adds `toJson`, `kindOf` and `plus1` from
/// `v0.2.0` on (so a `_v0.1.0` template calling `toJson` does not parse, as in StackQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dialect {
    /// Version v0.2.0 or later.
    pub(crate) v2: bool,
}

impl Dialect {
    /// Whether `name` is a function of this dialect.
    pub(super) fn defines(&self, name: &str) -> bool {
        BUILTINS.contains(&name)
            || name == URLQUERY
            || STACKQL_V1.contains(&name)
            || (self.v2 && STACKQL_V2.contains(&name))
    }
}

/// Calls the function `name` (not `and`/`or`) with evaluated arguments.
pub(super) fn call<'v>(name: &str, args: Vec<Val<'v>>) -> Result<Val<'v>, String> {
    let result = match name {
        "not" => {
            let [arg] = exactly::<1>(name, args)?;
            Val::Bool(!arg.view().truth())
        }
        "len" => {
            let [arg] = exactly::<1>(name, args)?;
            Val::Int(length(&arg)? as i64)
        }
        "index" => index(args)?,
        "slice" => slice(args)?,
        "print" => Val::Str(Cow::Owned(sprint(&args, false))),
        "println" => Val::Str(Cow::Owned(sprint(&args, true))),
        "printf" => printf(args)?,
        "eq" => Val::Bool(eq(&args)?),
        "ne" => {
            let [a, b] = exactly::<2>(name, args)?;
            Val::Bool(!eq(&[a, b])?)
        }
        "lt" | "le" | "gt" | "ge" => {
            let [a, b] = exactly::<2>(name, args)?;
            let order = compare(&a, &b)?;
            Val::Bool(match name {
                "lt" => order.is_lt(),
                "le" => order.is_le(),
                "gt" => order.is_gt(),
                _ => order.is_ge(),
            })
        }
        "html" => Val::Str(Cow::Owned(html(&eval_args(&args)))),
        "js" => Val::Str(Cow::Owned(js(&eval_args(&args)))),
        "urlquery" => Val::Str(Cow::Owned(urlquery(&eval_args(&args)))),
        "toJson" => to_json(args)?,
        "kindOf" => {
            let [arg] = exactly::<1>(name, args)?;
            Val::Str(Cow::Borrowed(arg.kind().name()))
        }
        "plus1" => {
            let [arg] = exactly::<1>(name, args)?;
            match arg.view() {
                View::Int(i) => Val::Int(i.wrapping_add(1)),
                _ => return Err(wrong_type("int", &arg)),
            }
        }
        "toBool" => {
            let [arg] = exactly::<1>(name, args)?;
            Val::Bool(match arg.view() {
                View::Str(s) => s == "true",
                View::Bool(b) => b,
                _ => false,
            })
        }
        "toInt" => {
            let [arg] = exactly::<1>(name, args)?;
            Val::Int(match arg.view() {
                View::Str(s) => scan_int(s),
                View::Float(f) => f as i64,
                _ => 0,
            })
        }
        "safeIndex" => {
            let [map, key] = exactly::<2>(name, args)?;
            if !matches!(map.kind(), Kind::Map | Kind::Invalid) {
                return Err(wrong_type("map[string]interface {}", &map));
            }
            let View::Str(key) = key.view() else {
                return Err(wrong_type("string", &key));
            };
            map.map_get(key)
        }
        "jsonMapFromString" => {
            let [arg] = exactly::<1>(name, args)?;
            let View::Str(text) = arg.view() else {
                return Err(wrong_type("string", &arg));
            };
            match serde_json::from_str::<Doc<'_>>(text) {
                Ok(map @ Doc::Object(_)) => Val::owned(map.into_owned()),
                Ok(Doc::Null) => Val::Nil,
                Ok(other) => {
                    return Err(format!(
                        "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                        json_kind(&other)
                    ));
                }
                Err(err) => return Err(err.to_string()),
            }
        }
        other => return Err(format!("function \"{other}\" not defined")),
    };
    Ok(result)
}

/// `printf format args…`: Go's `fmt.Sprintf`.
fn printf<'v>(args: Vec<Val<'v>>) -> Result<Val<'v>, String> {
    let mut args = args.into_iter();
    let format = args
        .next()
        .ok_or_else(|| "wrong number of args for printf: want at least 1 got 0".to_owned())?;
    let View::Str(format) = format.view() else {
        return Err(wrong_type("string", &format));
    };
    let rest: Vec<Val<'v>> = args.collect();
    let views: Vec<View<'_>> = rest.iter().map(Val::view).collect();
    Ok(Val::Str(Cow::Owned(format::sprintf(format, &views))))
}

/// `toJson value`: the value as JSON text.
fn to_json<'v>(args: Vec<Val<'v>>) -> Result<Val<'v>, String> {
    let [arg] = exactly::<1>("toJson", args)?;
    let mut out = String::new();
    let written = match &arg {
        Val::Json(j) => format::json_of(&mut out, j),
        Val::Owned(j) => format::json_of(&mut out, j.as_ref()),
        other => format::to_json(&mut out, other.view()),
    };
    written.map_err(|e| format!("json: {}", e.0))?;
    Ok(Val::Str(Cow::Owned(out)))
}

fn json_kind(value: &Doc<'_>) -> &'static str {
    match value {
        Doc::Array(_) => "array",
        Doc::Str(_) => "string",
        Doc::Number(_) => "number",
        Doc::Bool(_) => "bool",
        _ => "value",
    }
}

fn exactly<'v, const N: usize>(name: &str, args: Vec<Val<'v>>) -> Result<[Val<'v>; N], String> {
    let got = args.len();
    args.try_into()
        .map_err(|_| format!("wrong number of args for {name}: want {N} got {got}"))
}

fn wrong_type(want: &str, got: &Val<'_>) -> String {
    format!(
        "wrong type for value; expected {want}; got {}",
        got.kind().type_name()
    )
}

/// Go's `fmt.Sscanf(s, "%d", &i)`: leading spaces, a sign and digits; 0 when none.
fn scan_int(s: &str) -> i64 {
    let s = s.trim_start();
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    match digits[..end].parse::<i64>() {
        Ok(i) if negative => -i,
        Ok(i) => i,
        Err(_) => 0,
    }
}

fn length(arg: &Val<'_>) -> Result<usize, String> {
    match arg.view() {
        View::Str(s) => Ok(s.len()),
        View::Map(m) => Ok(m.len()),
        View::Slice(s) => Ok(s.len()),
        View::Nil => Err("error calling len: len of nil pointer".to_owned()),
        other => Err(format!(
            "error calling len: len of type {}",
            other.kind().type_name()
        )),
    }
}

/// An integer index argument, as Go's `indexArg` takes it.
fn index_arg(arg: &Val<'_>, cap: usize) -> Result<usize, String> {
    let View::Int(i) = arg.view() else {
        return Err(format!(
            "cannot index slice/array with type {}",
            arg.kind().type_name()
        ));
    };
    if i < 0 || i as u64 > cap as u64 {
        return Err(format!("index out of range: {i}"));
    }
    Ok(i as usize)
}

fn index<'v>(args: Vec<Val<'v>>) -> Result<Val<'v>, String> {
    let mut args = args.into_iter();
    let mut item = args
        .next()
        .ok_or_else(|| "wrong number of args for index: want at least 1 got 0".to_owned())?;
    for key in args {
        let next = match item.view() {
            View::Nil => return Err("error calling index: index of untyped nil".to_owned()),
            View::Map(_) => match key.view() {
                View::Str(k) => item.map_get(k),
                View::Nil => Val::Nil,
                _ => {
                    return Err(format!(
                        "error calling index: value has type {}; should be string",
                        key.kind().type_name()
                    ));
                }
            },
            View::Slice(items) => {
                let len = items.len();
                let i = index_arg(&key, len).map_err(|e| format!("error calling index: {e}"))?;
                if i == len {
                    return Err(format!("error calling index: index out of range: {i}"));
                }
                item.slice_get(i)
            }
            View::Str(s) => {
                let i =
                    index_arg(&key, s.len()).map_err(|e| format!("error calling index: {e}"))?;
                match s.as_bytes().get(i) {
                    Some(b) => Val::Int(i64::from(*b)),
                    None => return Err(format!("error calling index: index out of range: {i}")),
                }
            }
            other => {
                return Err(format!(
                    "error calling index: can't index item of type {}",
                    other.kind().type_name()
                ));
            }
        };
        item = next;
    }
    Ok(item)
}

fn slice<'v>(args: Vec<Val<'v>>) -> Result<Val<'v>, String> {
    let mut args = args.into_iter();
    let item = args
        .next()
        .ok_or_else(|| "wrong number of args for slice: want at least 1 got 0".to_owned())?;
    let bounds: Vec<Val<'v>> = args.collect();
    if bounds.len() > 2 {
        return Err("error calling slice: too many slice indexes".to_owned());
    }
    let len = match item.view() {
        View::Str(s) => s.len(),
        View::Slice(s) => s.len(),
        View::Nil => return Err("error calling slice: slice of untyped nil".to_owned()),
        other => {
            return Err(format!(
                "error calling slice: can't slice item of type {}",
                other.kind().type_name()
            ));
        }
    };
    let mut idx = [0usize, len];
    for (i, bound) in bounds.iter().enumerate() {
        idx[i] = index_arg(bound, len).map_err(|e| format!("error calling slice: {e}"))?;
    }
    if idx[0] > idx[1] {
        return Err(format!(
            "error calling slice: invalid slice index: {} > {}",
            idx[0], idx[1]
        ));
    }
    match item.view() {
        View::Str(s) => match s.get(idx[0]..idx[1]) {
            Some(part) => Ok(Val::Str(Cow::Owned(part.to_owned()))),
            None => Err("error calling slice: slice splits a UTF-8 character".to_owned()),
        },
        View::Slice(_) => Ok(item.sub_slice(idx[0], idx[1])),
        _ => Ok(Val::Nil),
    }
}

/// Go's basic kinds for comparison.
#[derive(PartialEq)]
enum Basic<'a> {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'a str),
}

fn basic<'a>(view: &View<'a>) -> Option<Basic<'a>> {
    match *view {
        View::Bool(b) => Some(Basic::Bool(b)),
        View::Int(i) => Some(Basic::Int(i)),
        View::Float(f) => Some(Basic::Float(f)),
        View::Str(s) => Some(Basic::Str(s)),
        _ => None,
    }
}

fn same_kind(a: &Basic<'_>, b: &Basic<'_>) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Go's `eq arg1 arg2…`: whether `arg1` equals any of the others.
fn eq(args: &[Val<'_>]) -> Result<bool, String> {
    let Some((first, rest)) = args.split_first() else {
        return Err("wrong number of args for eq: want at least 1 got 0".to_owned());
    };
    if rest.is_empty() {
        return Err("error calling eq: missing argument for comparison".to_owned());
    }
    let a = first.view();
    for other in rest {
        let b = other.view();
        let truth = match (basic(&a), basic(&b)) {
            (Some(x), Some(y)) if same_kind(&x, &y) => x == y,
            (Some(_), Some(_)) => {
                return Err("error calling eq: incompatible types for comparison".to_owned());
            }
            _ => match (a, b) {
                (View::Nil, View::Nil) => true,
                (View::Nil, _) | (_, View::Nil) => false,
                (x, y) if x.kind() != y.kind() => {
                    return Err("error calling eq: incompatible types for comparison".to_owned());
                }
                (x, _) => {
                    return Err(format!(
                        "error calling eq: non-comparable type {}",
                        x.kind().type_name()
                    ));
                }
            },
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn compare(a: &Val<'_>, b: &Val<'_>) -> Result<std::cmp::Ordering, String> {
    let (a, b) = (a.view(), b.view());
    let (Some(x), Some(y)) = (basic(&a), basic(&b)) else {
        return Err("error calling comparison: invalid type for comparison".to_owned());
    };
    match (x, y) {
        (Basic::Int(x), Basic::Int(y)) => Ok(x.cmp(&y)),
        (Basic::Float(x), Basic::Float(y)) => {
            Ok(x.partial_cmp(&y).unwrap_or(std::cmp::Ordering::Greater))
        }
        (Basic::Str(x), Basic::Str(y)) => Ok(x.cmp(y)),
        (Basic::Bool(_), Basic::Bool(_)) => {
            Err("error calling comparison: invalid type for comparison".to_owned())
        }
        _ => Err("error calling comparison: incompatible types for comparison".to_owned()),
    }
}

/// Go's `fmt.Sprint` (`line`: `fmt.Sprintln`): operands in their `%v` form, a space between
/// two operands when neither is a string (always, for `Sprintln`).
pub(super) fn sprint(args: &[Val<'_>], line: bool) -> String {
    let mut out = String::new();
    let mut previous_string = true;
    for (i, arg) in args.iter().enumerate() {
        let view = arg.view();
        let is_string = matches!(view, View::Str(_));
        if i > 0 && (line || (!is_string && !previous_string)) {
            out.push(' ');
        }
        format::value_text(&mut out, view);
        previous_string = is_string;
    }
    if line {
        out.push('\n');
    }
    out
}

/// The text `html`, `js` and `urlquery` escape: one string argument as is, else `Sprint`.
fn eval_args(args: &[Val<'_>]) -> String {
    if let [arg] = args
        && let View::Str(s) = arg.view()
    {
        return s.to_owned();
    }
    sprint(args, false)
}

fn html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
fn urlquery(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char);
            }
            b' ' => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}
