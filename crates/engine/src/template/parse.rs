//! Items → the tree a template runs, as Go's `text/template/parse` builds it: `if`/`else
//! if`/`else`, `range` (with `else`, `break`, `continue`), `with` (with `else with`),
//! pipelines with declarations (`$x :=`, `$i, $v :=`) and assignments (`$x =`), commands,
//! parenthesised pipelines and field chains. Functions and variables are checked here, as Go
//! checks them: an unknown function or an undeclared variable does not parse.

use super::error::TemplateError;
use super::funcs::Dialect;
use super::lex::{Item, Tok, TokKind};

/// A node of the tree.
#[derive(Debug)]
pub(super) enum Node {
    Text(String),
    /// `{{ pipeline }}`: printed unless it declares or assigns.
    Action(Pipe),
    If(Branch),
    With(Branch),
    Range(Branch),
    Break,
    Continue,
}

/// `if`, `with` or `range`: its pipeline, the list it runs, and the `else` list.
#[derive(Debug)]
pub(super) struct Branch {
    pub(super) pipe: Pipe,
    pub(super) list: Vec<Node>,
    pub(super) else_list: Option<Vec<Node>>,
}

/// A pipeline: optional variables it declares or assigns, and its commands.
#[derive(Debug)]
pub(super) struct Pipe {
    pub(super) line: usize,
    pub(super) vars: Vec<String>,
    /// `=` rather than `:=`.
    pub(super) assign: bool,
    pub(super) cmds: Vec<Cmd>,
}

/// One command of a pipeline: a function with its arguments, or one operand.
#[derive(Debug)]
pub(super) struct Cmd {
    pub(super) args: Vec<Term>,
}

/// An operand and the fields chained after it (`$x.a.b`, `(index . 0).name`).
#[derive(Debug)]
pub(super) struct Term {
    pub(super) operand: Operand,
    pub(super) fields: Vec<String>,
}

/// What an operand is.
#[derive(Debug)]
pub(super) enum Operand {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Var(String),
    Func(String),
    Pipe(Box<Pipe>),
}

/// How a list ended.
enum Stop {
    Eof,
    End,
    /// `{{else …}}` with the tokens after `else`.
    Else(usize, Vec<Tok>),
}

struct Parser<'d> {
    items: std::vec::IntoIter<Item>,
    dialect: &'d Dialect,
    /// Variables in scope, innermost last.
    vars: Vec<String>,
    range_depth: usize,
}

/// Parses lexed items into the template's top-level list.
pub(super) fn parse(items: Vec<Item>, dialect: &Dialect) -> Result<Vec<Node>, TemplateError> {
    let mut parser = Parser {
        items: items.into_iter(),
        dialect,
        vars: vec!["$".to_owned()],
        range_depth: 0,
    };
    let (list, stop) = parser.list()?;
    match stop {
        Stop::Eof => Ok(list),
        Stop::End => Err(TemplateError::parse(0, "unexpected {{end}}")),
        Stop::Else(line, _) => Err(TemplateError::parse(line, "unexpected {{else}}")),
    }
}

const KEYWORDS: [&str; 9] = [
    "if", "else", "end", "range", "with", "define", "template", "block", "break",
];

impl Parser<'_> {
    fn list(&mut self) -> Result<(Vec<Node>, Stop), TemplateError> {
        let mut nodes = Vec::new();
        while let Some(item) = self.items.next() {
            let (line, tokens) = match item {
                Item::Text(text) => {
                    nodes.push(Node::Text(text));
                    continue;
                }
                Item::Action { line, tokens } => (line, tokens),
            };
            let keyword = match tokens.first().map(|t| &t.kind) {
                Some(TokKind::Ident(word))
                    if KEYWORDS.contains(&word.as_str()) || word == "continue" =>
                {
                    word.clone()
                }
                _ => {
                    nodes.push(Node::Action(self.pipeline(line, &tokens, "command")?));
                    continue;
                }
            };
            let rest = &tokens[1..];
            match keyword.as_str() {
                "end" => {
                    no_more(line, rest, "end")?;
                    return Ok((nodes, Stop::End));
                }
                "else" => return Ok((nodes, Stop::Else(line, rest.to_vec()))),
                "if" => nodes.push(Node::If(self.branch(line, rest, "if")?)),
                "with" => nodes.push(Node::With(self.branch(line, rest, "with")?)),
                "range" => nodes.push(Node::Range(self.branch(line, rest, "range")?)),
                "break" | "continue" => {
                    no_more(line, rest, &keyword)?;
                    if self.range_depth == 0 {
                        return Err(TemplateError::parse(
                            line,
                            format!("{{{{{keyword}}}}} outside {{{{range}}}}"),
                        ));
                    }
                    nodes.push(match keyword.as_str() {
                        "break" => Node::Break,
                        _ => Node::Continue,
                    });
                }
                other => {
                    return Err(TemplateError::parse(
                        line,
                        format!("{{{{{other}}}}} is not supported in response transforms"),
                    ));
                }
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// `if`/`with`/`range` after its keyword, through its `end` (an `else if` or `else
    /// with` chain shares that `end`).
    fn branch(
        &mut self,
        line: usize,
        tokens: &[Tok],
        keyword: &str,
    ) -> Result<Branch, TemplateError> {
        let mark = self.vars.len();
        let pipe = self.pipeline(line, tokens, keyword)?;
        if keyword == "range" {
            self.range_depth += 1;
        }
        let listed = self.list();
        if keyword == "range" {
            self.range_depth -= 1;
        }
        let (list, stop) = listed?;
        // Variables declared in the branch's list or pipeline end with it; the `else` list
        // sees those of the pipeline only.
        let branch = match stop {
            Stop::Eof => Err(TemplateError::parse(
                line,
                format!("unexpected EOF in {{{{{keyword}}}}}"),
            )),
            Stop::End => Ok(Branch {
                pipe,
                list,
                else_list: None,
            }),
            Stop::Else(else_line, rest) => {
                let chained = match rest.first().map(|t| &t.kind) {
                    Some(TokKind::Ident(word))
                        if (word == "if" || word == "with") && keyword != "range" =>
                    {
                        Some(word.clone())
                    }
                    _ => None,
                };
                let else_list = match chained {
                    Some(word) => {
                        let inner = self.branch(else_line, &rest[1..], &word)?;
                        vec![match word.as_str() {
                            "if" => Node::If(inner),
                            _ => Node::With(inner),
                        }]
                    }
                    None => {
                        no_more(else_line, &rest, "else")?;
                        let (else_list, stop) = self.list()?;
                        match stop {
                            Stop::End => {}
                            Stop::Eof => {
                                return Err(TemplateError::parse(
                                    line,
                                    format!("unexpected EOF in {{{{{keyword}}}}}"),
                                ));
                            }
                            Stop::Else(l, _) => {
                                return Err(TemplateError::parse(
                                    l,
                                    "expected end; found {{else}}",
                                ));
                            }
                        }
                        else_list
                    }
                };
                Ok(Branch {
                    pipe,
                    list,
                    else_list: Some(else_list),
                })
            }
        };
        self.vars.truncate(mark);
        branch
    }

    fn pipeline(
        &mut self,
        line: usize,
        tokens: &[Tok],
        context: &str,
    ) -> Result<Pipe, TemplateError> {
        let mut at = 0usize;
        let mut vars = Vec::new();
        let mut assign = false;
        // `$x :=`, `$x =`, `$i, $v :=` (range only).
        let declared = match tokens {
            [
                Tok {
                    kind: TokKind::Var(a),
                    ..
                },
                Tok {
                    kind: TokKind::Declare,
                    ..
                },
                ..,
            ] => {
                vars.push(a.clone());
                at = 2;
                true
            }
            [
                Tok {
                    kind: TokKind::Var(a),
                    ..
                },
                Tok {
                    kind: TokKind::Assign,
                    ..
                },
                ..,
            ] => {
                vars.push(a.clone());
                assign = true;
                at = 2;
                true
            }
            [
                Tok {
                    kind: TokKind::Var(a),
                    ..
                },
                Tok {
                    kind: TokKind::Comma,
                    ..
                },
                Tok {
                    kind: TokKind::Var(b),
                    ..
                },
                Tok {
                    kind: kind @ (TokKind::Declare | TokKind::Assign),
                    ..
                },
                ..,
            ] => {
                if context != "range" {
                    return Err(TemplateError::parse(
                        line,
                        format!("too many declarations in {context}"),
                    ));
                }
                vars.push(a.clone());
                vars.push(b.clone());
                assign = *kind == TokKind::Assign;
                at = 4;
                true
            }
            _ => false,
        };
        let mut cmds = Vec::new();
        let mut cursor = Cursor { tokens, at, line };
        loop {
            cmds.push(self.command(&mut cursor)?);
            match cursor.peek() {
                None => break,
                Some(TokKind::Pipe) => {
                    cursor.at += 1;
                }
                Some(other) => {
                    return Err(TemplateError::parse(
                        line,
                        format!("unexpected {other:?} in {context}"),
                    ));
                }
            }
        }
        if declared {
            for var in &vars {
                if assign {
                    self.known(line, var)?;
                } else {
                    self.vars.push(var.clone());
                }
            }
        }
        Ok(Pipe {
            line,
            vars,
            assign,
            cmds,
        })
    }

    fn known(&self, line: usize, var: &str) -> Result<(), TemplateError> {
        match self.vars.iter().any(|v| v == var) {
            true => Ok(()),
            false => Err(TemplateError::parse(
                line,
                format!("undefined variable \"{var}\""),
            )),
        }
    }

    fn command(&mut self, cursor: &mut Cursor<'_>) -> Result<Cmd, TemplateError> {
        let mut args = Vec::new();
        while let Some(kind) = cursor.peek() {
            if matches!(kind, TokKind::Pipe | TokKind::RParen) {
                break;
            }
            args.push(self.term(cursor)?);
        }
        if args.is_empty() {
            return Err(TemplateError::parse(cursor.line, "missing command"));
        }
        if let Operand::Nil = args[0].operand {
            return Err(TemplateError::parse(cursor.line, "nil is not a command"));
        }
        Ok(Cmd { args })
    }

    fn term(&mut self, cursor: &mut Cursor<'_>) -> Result<Term, TemplateError> {
        let line = cursor.line;
        let Some(tok) = cursor.next() else {
            return Err(TemplateError::parse(line, "missing operand"));
        };
        let mut fields = Vec::new();
        let operand = match &tok.kind {
            TokKind::Dot => Operand::Dot,
            TokKind::Field(name) => {
                fields.push(name.clone());
                Operand::Dot
            }
            TokKind::Var(name) => {
                self.known(line, name)?;
                Operand::Var(name.clone())
            }
            TokKind::Str(s) => Operand::Str(s.clone()),
            TokKind::Char(c) => Operand::Int(*c),
            TokKind::Number(text) => number(line, text)?,
            TokKind::Ident(word) => match word.as_str() {
                "true" => Operand::Bool(true),
                "false" => Operand::Bool(false),
                "nil" => Operand::Nil,
                name if self.dialect.defines(name) => Operand::Func(name.to_owned()),
                name => {
                    return Err(TemplateError::parse(
                        line,
                        format!("function \"{name}\" not defined"),
                    ));
                }
            },
            TokKind::LParen => {
                let inner = self.paren(cursor)?;
                Operand::Pipe(Box::new(inner))
            }
            other => {
                return Err(TemplateError::parse(
                    line,
                    format!("unexpected {other:?} in operand"),
                ));
            }
        };
        while let Some(Tok {
            kind: TokKind::Field(name),
            spaced: false,
        }) = cursor.tokens.get(cursor.at)
        {
            fields.push(name.clone());
            cursor.at += 1;
        }
        if !fields.is_empty()
            && matches!(
                operand,
                Operand::Bool(_)
                    | Operand::Int(_)
                    | Operand::Float(_)
                    | Operand::Str(_)
                    | Operand::Nil
                    | Operand::Func(_)
            )
        {
            return Err(TemplateError::parse(line, "unexpected . after term"));
        }
        Ok(Term { operand, fields })
    }

    /// `( pipeline )` after its `(`.
    fn paren(&mut self, cursor: &mut Cursor<'_>) -> Result<Pipe, TemplateError> {
        let mut cmds = Vec::new();
        loop {
            cmds.push(self.command(cursor)?);
            match cursor.next().map(|t| &t.kind) {
                Some(TokKind::Pipe) => continue,
                Some(TokKind::RParen) => break,
                _ => return Err(TemplateError::parse(cursor.line, "unclosed left paren")),
            }
        }
        Ok(Pipe {
            line: cursor.line,
            vars: Vec::new(),
            assign: false,
            cmds,
        })
    }
}

struct Cursor<'t> {
    tokens: &'t [Tok],
    at: usize,
    line: usize,
}

impl<'t> Cursor<'t> {
    fn peek(&self) -> Option<&'t TokKind> {
        self.tokens.get(self.at).map(|t| &t.kind)
    }

    fn next(&mut self) -> Option<&'t Tok> {
        let tok = self.tokens.get(self.at)?;
        self.at += 1;
        Some(tok)
    }
}

fn no_more(line: usize, rest: &[Tok], keyword: &str) -> Result<(), TemplateError> {
    match rest.is_empty() {
        true => Ok(()),
        false => Err(TemplateError::parse(
            line,
            format!("unexpected tokens in {{{{{keyword}}}}}"),
        )),
    }
}

/// A Go number constant: an integer (decimal, `0x`, `0o`, `0b`, with `_`) or a float.
fn number(line: usize, text: &str) -> Result<Operand, TemplateError> {
    let clean: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match clean.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, clean.strip_prefix('+').unwrap_or(&clean)),
    };
    let radix = |prefix: [&str; 2], radix: u32| {
        prefix
            .iter()
            .find_map(|p| digits.strip_prefix(p))
            .and_then(|d| i64::from_str_radix(d, radix).ok())
    };
    let integer = radix(["0x", "0X"], 16)
        .or_else(|| radix(["0o", "0O"], 8))
        .or_else(|| radix(["0b", "0B"], 2))
        .or_else(|| digits.parse::<i64>().ok());
    if let Some(i) = integer {
        return Ok(Operand::Int(if negative { -i } else { i }));
    }
    match digits.parse::<f64>() {
        Ok(f) if f.is_finite() => {
            let f = if negative { -f } else { f };
            // Go keeps an integral float constant such as `1e3` an integer too.
            if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 && !digits.contains('.') {
                return Ok(Operand::Int(f as i64));
            }
            Ok(Operand::Float(f))
        }
        _ => Err(TemplateError::parse(
            line,
            format!("bad number syntax: \"{text}\""),
        )),
    }
}
