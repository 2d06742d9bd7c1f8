//! Template source → text pieces and actions, as Go's `text/template/parse` lexer cuts it:
//! `{{`/`}}` delimiters, `{{- ` and ` -}}` trimming the white space beside them, comments
//! `{{/* … */}}`, and the tokens inside an action.

use super::error::TemplateError;

/// A piece of the source: text to copy, or one action's tokens.
#[derive(Debug)]
pub(super) enum Item {
    Text(String),
    Action { line: usize, tokens: Vec<Tok> },
}

/// A token inside an action, with whether white space came before it (which separates
/// arguments: `$x.a` is one operand, `$x .a` two).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Tok {
    pub(super) kind: TokKind,
    pub(super) spaced: bool,
}

/// The kinds of tokens.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TokKind {
    /// A name: a keyword, `true`/`false`/`nil`, or a function.
    Ident(String),
    /// `.name`.
    Field(String),
    /// `.` alone.
    Dot,
    /// `$` or `$name` (with the `$`).
    Var(String),
    Str(String),
    Char(i64),
    Number(String),
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
}

const LEFT: &str = "{{";
const RIGHT: &str = "}}";

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Cuts `source` into text and actions.
pub(super) fn lex(source: &str) -> Result<Vec<Item>, TemplateError> {
    let mut items = Vec::new();
    let mut rest = source;
    let mut trim_next = false;
    let mut line = 1usize;
    while !rest.is_empty() {
        let Some(start) = rest.find(LEFT) else {
            push_text(&mut items, rest, trim_next, false);
            break;
        };
        let after = &rest[start + LEFT.len()..];
        let trim_left = after.starts_with('-') && after[1..].starts_with(is_space);
        push_text(&mut items, &rest[..start], trim_next, trim_left);
        line += rest[..start].matches('\n').count();
        let mut body = if trim_left { &after[2..] } else { after };
        let action_line = line;
        let trimmed = body.trim_start_matches(is_space);
        if trimmed.starts_with("/*") {
            let Some(end) = trimmed.find("*/") else {
                return Err(TemplateError::parse(action_line, "unclosed comment"));
            };
            let tail = &trimmed[end + 2..];
            let (trim_right, tail) = close_delim(tail).ok_or_else(|| {
                TemplateError::parse(action_line, "comment ends before closing delimiter")
            })?;
            line += rest[start..rest.len() - tail.len()].matches('\n').count();
            trim_next = trim_right;
            rest = tail;
            continue;
        }
        let mut tokens = Vec::new();
        let mut spaced = true;
        loop {
            let skipped = body.trim_start_matches(is_space);
            let had_space = skipped.len() != body.len();
            body = skipped;
            if let Some(tail) = body.strip_prefix(RIGHT) {
                trim_next = false;
                body = tail;
                break;
            }
            if had_space && let Some(tail) = body.strip_prefix("-}}") {
                trim_next = true;
                body = tail;
                break;
            }
            if body.is_empty() {
                return Err(TemplateError::parse(action_line, "unclosed action"));
            }
            let (kind, used) = token(body, action_line)?;
            tokens.push(Tok {
                kind,
                spaced: spaced || had_space,
            });
            spaced = false;
            body = &body[used..];
        }
        line += rest[start..rest.len() - body.len()].matches('\n').count();
        items.push(Item::Action {
            line: action_line,
            tokens,
        });
        rest = body;
    }
    Ok(items)
}

/// After a comment: optional ` -` then `}}`; whether it trims, and what follows.
fn close_delim(tail: &str) -> Option<(bool, &str)> {
    if let Some(rest) = tail.strip_prefix(RIGHT) {
        return Some((false, rest));
    }
    let spaced = tail.trim_start_matches(is_space);
    if spaced.len() != tail.len() {
        if let Some(rest) = spaced.strip_prefix("-}}") {
            return Some((true, rest));
        }
        if let Some(rest) = spaced.strip_prefix(RIGHT) {
            return Some((false, rest));
        }
    }
    None
}

fn push_text(items: &mut Vec<Item>, text: &str, trim_start: bool, trim_end: bool) {
    let mut text = text;
    if trim_start {
        text = text.trim_start_matches(is_space);
    }
    if trim_end {
        text = text.trim_end_matches(is_space);
    }
    if !text.is_empty() {
        items.push(Item::Text(text.to_owned()));
    }
}

fn is_name_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

fn name_len(s: &str) -> usize {
    s.find(|c: char| !is_name_char(c)).unwrap_or(s.len())
}

/// One token at the start of `s` and its length in bytes.
fn token(s: &str, line: usize) -> Result<(TokKind, usize), TemplateError> {
    let first = s.chars().next().unwrap_or(' ');
    let simple = |kind: TokKind, len: usize| Ok((kind, len));
    match first {
        '(' => simple(TokKind::LParen, 1),
        ')' => simple(TokKind::RParen, 1),
        '|' => simple(TokKind::Pipe, 1),
        ',' => simple(TokKind::Comma, 1),
        ':' if s[1..].starts_with('=') => simple(TokKind::Declare, 2),
        '=' => simple(TokKind::Assign, 1),
        '"' => {
            let (value, len) = quoted(s, line)?;
            Ok((TokKind::Str(value), len))
        }
        '`' => {
            let end = s[1..]
                .find('`')
                .ok_or_else(|| TemplateError::parse(line, "unterminated raw quoted string"))?;
            Ok((TokKind::Str(s[1..1 + end].to_owned()), end + 2))
        }
        '\'' => {
            let (value, len) = quoted(s, line)?;
            let mut chars = value.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Ok((TokKind::Char(c as i64), len)),
                _ => Err(TemplateError::parse(
                    line,
                    format!("malformed character constant: {}", &s[..len]),
                )),
            }
        }
        '$' => {
            let len = 1 + name_len(&s[1..]);
            Ok((TokKind::Var(s[..len].to_owned()), len))
        }
        '.' if s[1..].starts_with(|c: char| c.is_ascii_digit()) => number(s, line),
        '.' => {
            let len = name_len(&s[1..]);
            if len == 0 {
                Ok((TokKind::Dot, 1))
            } else {
                Ok((TokKind::Field(s[1..1 + len].to_owned()), 1 + len))
            }
        }
        '-' | '+' | '0'..='9' => number(s, line),
        c if is_name_char(c) => {
            let len = name_len(s);
            Ok((TokKind::Ident(s[..len].to_owned()), len))
        }
        c => Err(TemplateError::parse(
            line,
            format!("unrecognized character in action: {c:?}"),
        )),
    }
}

fn number(s: &str, line: usize) -> Result<(TokKind, usize), TemplateError> {
    let len = s
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_alphanumeric()
                || c == '.'
                || c == '_'
                || ((c == '-' || c == '+')
                    && (i == 0 || matches!(s.as_bytes()[i - 1], b'e' | b'E' | b'p' | b'P'))))
        })
        .map_or(s.len(), |(i, _)| i);
    if len == 0 || &s[..len] == "-" || &s[..len] == "+" {
        return Err(TemplateError::parse(
            line,
            format!("bad number syntax: {:?}", &s[..len.max(1)]),
        ));
    }
    Ok((TokKind::Number(s[..len].to_owned()), len))
}

/// A Go interpreted string (or character) literal at the start of `s`: its value and length.
fn quoted(s: &str, line: usize) -> Result<(String, usize), TemplateError> {
    let quote = s.chars().next().unwrap_or('"');
    let mut out = String::new();
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            c if c == quote => return Ok((out, i + 1)),
            '\n' => break,
            '\\' => {
                let Some((_, e)) = chars.next() else { break };
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    '\'' => out.push('\''),
                    'x' | 'u' | 'U' => {
                        let digits = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = (0..digits)
                            .filter_map(|_| chars.next().map(|(_, h)| h))
                            .collect();
                        let code = u32::from_str_radix(&hex, 16)
                            .ok()
                            .filter(|_| hex.len() == digits)
                            .and_then(char::from_u32)
                            .ok_or_else(|| {
                                TemplateError::parse(line, "invalid escape in quoted string")
                            })?;
                        out.push(code);
                    }
                    '0'..='7' => {
                        let mut code = e.to_digit(8).unwrap_or(0);
                        for _ in 0..2 {
                            let Some((_, d)) = chars.next() else { break };
                            code = code * 8 + d.to_digit(8).unwrap_or(0);
                        }
                        out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                    }
                    _ => {
                        return Err(TemplateError::parse(
                            line,
                            "invalid escape in quoted string",
                        ));
                    }
                }
            }
            c => out.push(c),
        }
    }
    Err(TemplateError::parse(line, "unterminated quoted string"))
}
