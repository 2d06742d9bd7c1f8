//! Go's text forms of values: `fmt`'s `%v`, `%s`, `%q`, `%d`, `%t`, `%f`, `%e`, `%g`, `%x`
//! (as `printf`, `print` and printing an action use them) and `encoding/json`'s
//! `Marshal` (as `toJson` uses it: sorted keys, HTML-safe escapes, Go's float form).

use std::fmt::Write as _;

use super::doc::Doc;
use super::value::View;

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, which `%v` uses: the shortest digits that
/// read back as `f`, in exponent form when the decimal exponent is below -4 or at least 6
/// (`1e+06`, `1.234567e+06`, `123456`, `0.0001`, `1e-05`).
pub(super) fn float_g(f: f64) -> String {
    if let Some(special) = special_float(f) {
        return special.to_owned();
    }
    let (negative, digits, exp) = shortest(f);
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        exponent_form(&mut out, &digits, exp, false);
    } else {
        fixed_form(&mut out, &digits, exp);
    }
    out
}

/// `encoding/json`'s float form: `'f'` shortest, `'e'` below 1e-6 or from 1e21 on (with a
/// one-digit negative exponent written `e-7`).
pub(super) fn float_json(f: f64) -> Option<String> {
    if !f.is_finite() {
        return None;
    }
    let (negative, digits, exp) = shortest(f);
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        exponent_form(&mut out, &digits, exp, true);
    } else {
        fixed_form(&mut out, &digits, exp);
    }
    Some(out)
}

fn special_float(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f == f64::INFINITY {
        Some("+Inf")
    } else if f == f64::NEG_INFINITY {
        Some("-Inf")
    } else {
        None
    }
}

/// Sign, shortest round-trip decimal digits (no leading zeros; "0" for zero) and the decimal
/// exponent of the first digit.
fn shortest(f: f64) -> (bool, String, i32) {
    let text = format!("{:e}", f.abs());
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let exp = exp.parse::<i32>().unwrap_or(0);
    (f.is_sign_negative() && f != 0.0, digits, exp)
}

/// `d.ddde±XX`; `short_negative`: a one-digit negative exponent is written `e-7`, as
/// `encoding/json` writes it.
fn exponent_form(out: &mut String, digits: &str, exp: i32, short_negative: bool) {
    let (first, rest) = digits.split_at(1.min(digits.len()));
    out.push_str(first);
    if !rest.is_empty() {
        out.push('.');
        out.push_str(rest);
    }
    out.push('e');
    out.push(if exp < 0 { '-' } else { '+' });
    let width = if short_negative && exp < 0 { 1 } else { 2 };
    let _ = write!(out, "{:0width$}", exp.unsigned_abs());
}

fn fixed_form(out: &mut String, digits: &str, exp: i32) {
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(digits);
        return;
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        out.push_str(digits);
        for _ in digits.len()..int_len {
            out.push('0');
        }
    } else {
        out.push_str(&digits[..int_len]);
        out.push('.');
        out.push_str(&digits[int_len..]);
    }
}

/// Go's `strconv.Quote`: a double-quoted string with Go escapes; printable characters are
/// kept, others escaped as `\a \b \f \n \r \t \v`, `\xHH` (below 0x80), `\uHHHH` or
/// `\UHHHHHHHH`.
pub(super) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    quote_into(&mut out, s);
    out
}

/// [`quote`] appended to `out`. Runs of printable ASCII (the common case) are copied whole.
pub(super) fn quote_into(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            i += 1;
            continue;
        }
        out.push_str(&s[start..i]);
        // `i` is at a character boundary: every byte before it in the run was ASCII.
        let c = s[i..].chars().next().unwrap_or('\u{fffd}');
        quote_char(out, c);
        i += c.len_utf8();
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn quote_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        c if is_printable(c) => out.push(c),
        c if (c as u32) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c if (c as u32) < 0x10000 => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\U{:08x}", c as u32);
        }
    }
}

/// Go's `strconv.IsPrint`, closely: letters, marks, numbers, punctuation, symbols and the
/// ASCII space. Controls, format characters, separators other than the space and private
/// use characters are not printable.
fn is_printable(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F
        | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB
        | 0xE000..=0xF8FF | 0xF0000..=0x10FFFF | 0xD800..=0xDFFF)
}

/// `%v` of a value, as `fmt` prints it: maps as `map[k:v …]` (sorted keys), slices as
/// `[a b]`, nil as `<nil>`.
pub(super) fn value_text(out: &mut String, view: View<'_>) {
    match view {
        View::Nil => out.push_str("<nil>"),
        View::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        View::Int(i) => {
            let _ = write!(out, "{i}");
        }
        View::Float(f) => out.push_str(&float_g(f)),
        View::Str(s) => out.push_str(s),
        View::Map(map) => {
            out.push_str("map[");
            for (i, (key, value)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(key);
                out.push(':');
                json_text(out, value);
            }
            out.push(']');
        }
        View::Slice(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                json_text(out, item);
            }
            out.push(']');
        }
    }
}

fn json_text(out: &mut String, value: &Doc<'_>) {
    match value {
        Doc::Null => out.push_str("<nil>"),
        Doc::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Doc::Number(n) => out.push_str(&float_g(n.as_f64().unwrap_or(f64::NAN))),
        Doc::Str(s) => out.push_str(s),
        Doc::Array(items) => value_text(out, View::Slice(items)),
        Doc::Object(map) => value_text(out, View::Map(map)),
    }
}

/// Why a value has no JSON form (Go's `json: unsupported value: NaN`).
#[derive(Debug)]
pub(super) struct Unsupported(pub(super) String);

/// `encoding/json.Marshal` of a value: object keys sorted, `<`, `>`, `&`, U+2028 and U+2029
/// escaped as `\u003c`…, floats in Go's form. Integers of the input are written with all
/// their digits (Go, holding them as float64, rounds those beyond 2^53).
pub(super) fn to_json(out: &mut String, view: View<'_>) -> Result<(), Unsupported> {
    match view {
        View::Nil => out.push_str("null"),
        View::Bool(b) => out.push_str(if b { "true" } else { "false" }),
        View::Int(i) => {
            let _ = write!(out, "{i}");
        }
        // Between 1e-6 and 1e21 Go's form is the shortest digits without an exponent, which
        // is what Rust's `Display` of an `f64` writes (zero: Go's sign handling, below).
        View::Float(f) if f != 0.0 && (1e-6..1e21).contains(&f.abs()) => {
            let _ = write!(out, "{f}");
        }
        View::Float(f) => out.push_str(
            &float_json(f)
                .ok_or_else(|| Unsupported(format!("unsupported value: {}", float_g(f))))?,
        ),
        View::Str(s) => json_string(out, s),
        View::Map(map) => {
            out.push('{');
            for (i, (key, value)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(out, key);
                out.push(':');
                json_value(out, value)?;
            }
            out.push('}');
        }
        View::Slice(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_value(out, item)?;
            }
            out.push(']');
        }
    }
    Ok(())
}

fn json_value(out: &mut String, value: &Doc<'_>) -> Result<(), Unsupported> {
    match value {
        Doc::Number(n) if n.is_i64() || n.is_u64() => {
            let _ = write!(out, "{n}");
            Ok(())
        }
        Doc::Number(n) => to_json(out, View::Float(n.as_f64().unwrap_or(f64::NAN))),
        Doc::Null => to_json(out, View::Nil),
        Doc::Bool(b) => to_json(out, View::Bool(*b)),
        Doc::Str(s) => to_json(out, View::Str(s)),
        Doc::Array(items) => to_json(out, View::Slice(items)),
        Doc::Object(map) => to_json(out, View::Map(map)),
    }
}

/// `toJson` of a part of the input: as [`to_json`], keeping an integer's digits.
pub(super) fn json_of(out: &mut String, value: &Doc<'_>) -> Result<(), Unsupported> {
    json_value(out, value)
}

pub(super) fn json_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // Bytes that are never escaped (and 0xE2, which starts U+2028 and U+2029, is looked
        // at below) are copied as one run.
        if b >= 0x20 && !matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2) {
            i += 1;
            continue;
        }
        out.push_str(&s[start..i]);
        // `i` is at a character boundary: the bytes skipped were ASCII or whole characters
        // (continuation bytes are >= 0x80 and never match above).
        let c = s[i..].chars().next().unwrap_or('\u{fffd}');
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
        i += c.len_utf8();
        start = i;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Go's `fmt.Sprintf` for the verbs `%v %s %q %d %t %f %e %g %x %X %%`, with the flag `-`, a
/// width and a precision. A verb that does not fit its operand is written as Go writes it
/// (`%!d(string=x)`), as are missing (`%!s(MISSING)`) and extra operands.
pub(super) fn sprintf(format: &str, args: &[View<'_>]) -> String {
    let mut out = String::with_capacity(format.len() + 16);
    let mut next = 0usize;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut minus = false;
        let mut zero = false;
        let mut plus = false;
        while let Some(&flag) = chars.peek() {
            match flag {
                '-' => minus = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let width = number(&mut chars);
        let precision = if chars.peek() == Some(&'.') {
            chars.next();
            Some(number(&mut chars).unwrap_or(0))
        } else {
            None
        };
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        next += 1;
        let text = verb_text(verb, *arg, precision, plus);
        pad(
            &mut out,
            &text,
            width,
            minus,
            zero && !minus && verb != 's' && verb != 'q',
        );
    }
    if next < args.len() {
        out.push_str("%!(EXTRA ");
        for (i, arg) in args[next..].iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            let _ = write!(out, "{}=", type_of(*arg));
            value_text(&mut out, *arg);
        }
        out.push(')');
    }
    out
}

fn number(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<usize> {
    let mut n: Option<usize> = None;
    while let Some(&d) = chars.peek() {
        let Some(digit) = d.to_digit(10) else { break };
        n = Some(
            n.unwrap_or(0)
                .saturating_mul(10)
                .saturating_add(digit as usize)
                .min(1 << 16),
        );
        chars.next();
    }
    n
}

fn pad(out: &mut String, text: &str, width: Option<usize>, left: bool, zero: bool) {
    let len = text.chars().count();
    let fill = width.map_or(0, |w| w.saturating_sub(len));
    if left {
        out.push_str(text);
        out.extend(std::iter::repeat_n(' ', fill));
    } else if zero && (text.starts_with('-') || text.starts_with('+')) {
        let (sign, rest) = text.split_at(1);
        out.push_str(sign);
        out.extend(std::iter::repeat_n('0', fill));
        out.push_str(rest);
    } else {
        out.extend(std::iter::repeat_n(if zero { '0' } else { ' ' }, fill));
        out.push_str(text);
    }
}

fn type_of(view: View<'_>) -> &'static str {
    view.kind().type_name()
}

fn bad_verb(verb: char, view: View<'_>) -> String {
    let mut out = format!("%!{verb}(");
    match view {
        View::Nil => out.push_str("<nil>"),
        other => {
            out.push_str(type_of(other));
            out.push('=');
            value_text(&mut out, other);
        }
    }
    out.push(')');
    out
}

fn verb_text(verb: char, view: View<'_>, precision: Option<usize>, plus: bool) -> String {
    let signed = |s: String| {
        if plus && !s.starts_with('-') {
            format!("+{s}")
        } else {
            s
        }
    };
    match (verb, view) {
        ('v', View::Float(f)) if precision.is_none() => signed(float_g(f)),
        ('v', View::Int(i)) => signed(i.to_string()),
        ('v', other) => {
            let mut out = String::new();
            value_text(&mut out, other);
            out
        }
        ('s', View::Str(s)) => match precision {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_owned(),
        },
        ('s', v @ (View::Map(_) | View::Slice(_))) => {
            let mut out = String::new();
            value_text(&mut out, v);
            out
        }
        ('q', View::Str(s)) => quote(s),
        ('d', View::Int(i)) => signed(i.to_string()),
        ('t', View::Bool(b)) => b.to_string(),
        ('f' | 'F', View::Float(f)) => signed(format!("{:.*}", precision.unwrap_or(6), f)),
        ('e', View::Float(f)) => signed(go_exp(f, precision.unwrap_or(6))),
        ('g', View::Float(f)) if precision.is_none() => signed(float_g(f)),
        ('x', View::Int(i)) => format_hex(i, false),
        ('X', View::Int(i)) => format_hex(i, true),
        ('x', View::Str(s)) => s.bytes().fold(String::new(), |mut o, b| {
            let _ = write!(o, "{b:02x}");
            o
        }),
        (verb, other) => bad_verb(verb, other),
    }
}

fn format_hex(i: i64, upper: bool) -> String {
    let sign = if i < 0 { "-" } else { "" };
    match upper {
        true => format!("{sign}{:X}", i.unsigned_abs()),
        false => format!("{sign}{:x}", i.unsigned_abs()),
    }
}

fn go_exp(f: f64, precision: usize) -> String {
    let text = format!("{f:.precision$e}");
    let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp = exp.parse::<i32>().unwrap_or(0);
    format!(
        "{mantissa}e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
}
