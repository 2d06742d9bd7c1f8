//! Statement parsing: standard SQL through sqlparser (SQLite dialect), and StackQL's own
//! statements (`SHOW`, `DESCRIBE`, `EXEC`, `REGISTRY`) through a small parser of ours.

mod columns;
mod constant_rows;
mod exec_source;
mod mutation;
mod scalar;
mod tables;
mod view_params;
mod views;

pub(crate) use columns::{Referenced, referenced};
pub(crate) use exec_source::exec_table;
pub(crate) use mutation::{Exec, InsertRows, Mutation, Returning};
pub(crate) use scalar::Scalar;
pub(crate) use tables::{
    Analysis, Binding, Conjunct, Filter, Literal, Source, analyse, drop_conjuncts, expand_wildcards,
};
pub(crate) use views::{
    ViewSet, expand as expand_views, parse_ddl as parse_view_ddl, projected as view_projection,
};

/// Splits `a AND b AND …` into its conjuncts.
pub(crate) fn split_conjuncts(expr: &sqlparser::ast::Expr, out: &mut Vec<sqlparser::ast::Expr>) {
    tables::split_and(expr, out);
}

/// A literal (string, number, boolean as 1/0); `None` for anything else or NULL.
pub(crate) fn literal_of(expr: &sqlparser::ast::Expr) -> Option<Literal> {
    tables::literal(expr)
}

use sqlparser::ast::{Query, Statement as SqlStatement};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, TokenizerError};

use super::error::{Error, Result};
use crate::types::SqlVerb;

/// What a statement asks for.
#[derive(Debug, Clone)]
pub(crate) enum Statement {
    /// A query (SELECT, WITH, UNION, VALUES).
    Query(Box<Query>),
    /// A query reading `(EXEC …)` row sources: the EXECs run first, in order, and their rows
    /// fill the local tables `__qg_exec0`, `__qg_exec1`, … the query names.
    QueryOverExec { query: Box<Query>, execs: Vec<Exec> },
    /// `SHOW PROVIDERS|SERVICES IN p|RESOURCES IN p.s|METHODS IN p.s.r [LIKE 'pat']`.
    Show {
        what: ShowWhat,
        like: Option<String>,
    },
    /// `DESCRIBE [EXTENDED] p.s.r`.
    Describe { target: Vec<String> },
    /// INSERT, UPDATE, REPLACE or DELETE on an API table.
    Mutation(Mutation),
    /// `EXEC p.s.r.method @param = 'v', …`.
    Exec(Exec),
    /// `REGISTRY LIST [provider]` or `REGISTRY PULL provider [version]`.
    Registry(RegistryCommand),
}

/// A `REGISTRY` statement. Names are passed on as written (quotes removed); the remote
/// registry checks them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RegistryCommand {
    /// `REGISTRY LIST [provider]`.
    List { provider: Option<String> },
    /// `REGISTRY PULL provider [version]`; an empty provider when none was written.
    Pull {
        provider: String,
        version: Option<String>,
    },
}

/// The object list `SHOW` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShowWhat {
    Providers,
    Services {
        provider: String,
    },
    Resources {
        provider: String,
        service: String,
    },
    Methods {
        provider: String,
        service: String,
        resource: String,
    },
}

/// The tokens of a text with their positions, as the parser reads them. A text is
/// tokenized once: the tokens are split, inspected and parsed.
pub(crate) type Tokens = std::result::Result<Vec<TokenWithSpan>, TokenizerError>;

/// Tokenizes `sql` (SQLite dialect, as the parser does).
pub(crate) fn tokenize(sql: &str) -> Tokens {
    Tokenizer::new(&SQLiteDialect {}, sql).tokenize_with_location()
}

/// The statements of a text, split at top-level semicolons (never inside a string, a quoted
/// name or a comment); pieces holding only whitespace and comments are dropped. A text the
/// tokenizer cannot read is one piece (its parse reports the problem).
pub(crate) fn split<'a>(sql: &'a str, tokens: &Tokens) -> Vec<&'a str> {
    let Ok(tokens) = tokens else {
        return vec![sql];
    };
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut significant = false;
    for token in tokens {
        match &token.token {
            Token::SemiColon => {
                let Some(end) = byte_offset(sql, token.span.start.line, token.span.start.column)
                else {
                    return vec![sql];
                };
                if significant {
                    pieces.push(&sql[start..end]);
                }
                start = end + 1;
                significant = false;
            }
            Token::Whitespace(_) => {}
            _ => significant = true,
        }
    }
    if significant {
        pieces.push(&sql[start..]);
    }
    pieces
}

/// What is nested inside a statement from sqlparser: other statements (DML carried by a CTE,
/// a subquery or a set operation, the statement of an EXPLAIN, …) and which writes they are.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Nested {
    /// Whether any statement is nested inside.
    pub(crate) any: bool,
    /// The verbs of the writes among them (INSERT, UPDATE, DELETE), each once, in the
    /// order they are written: `[Delete]` for `WITH t AS (SELECT 1) DELETE FROM …`.
    pub(crate) writes: Vec<SqlVerb>,
}

/// The statements nested inside `statement` (the statement itself is visited first and is
/// not one of them).
fn nested_statements(statement: &SqlStatement) -> Nested {
    let mut nested = Nested::default();
    let mut outer = true;
    let _ = sqlparser::ast::visit_statements(statement, |inner| {
        if std::mem::take(&mut outer) {
            return std::ops::ControlFlow::<()>::Continue(());
        }
        nested.any = true;
        let verb = match inner {
            SqlStatement::Insert(_) => Some(SqlVerb::Insert),
            SqlStatement::Update(_) => Some(SqlVerb::Update),
            SqlStatement::Delete(_) => Some(SqlVerb::Delete),
            _ => None,
        };
        if let Some(verb) = verb
            && !nested.writes.contains(&verb)
        {
            nested.writes.push(verb);
        }
        std::ops::ControlFlow::Continue(())
    });
    nested
}

/// Parses one statement (`tokens` are [`tokenize`]'s of `sql`) and tells what is nested
/// inside it. Several statements in one call are refused.
pub(crate) fn parse_nested(sql: &str, tokens: Tokens) -> Result<(Statement, Nested)> {
    let mut nested = Nested::default();
    let statement = parse_with(sql, tokens, &mut |s| {
        let inside = nested_statements(s);
        nested.any |= inside.any;
        nested.writes.extend(inside.writes);
    })?;
    Ok((statement, nested))
}

/// Parses one statement. Several statements in one call are refused.
#[cfg(test)]
pub(crate) fn parse(sql: &str) -> Result<Statement> {
    parse_with(sql, tokenize(sql), &mut |_| {})
}

/// Whether the statement carries StackQL's `/*+ AWAIT */` hint (a `/*+ … */` comment
/// naming AWAIT).
fn has_await_hint(tokens: &[TokenWithSpan]) -> bool {
    tokens.iter().any(|token| match &token.token {
        Token::Whitespace(sqlparser::tokenizer::Whitespace::MultiLineComment(text)) => {
            text.trim_start().strip_prefix('+').is_some_and(|hint| {
                hint.split(|c: char| !c.is_ascii_alphanumeric())
                    .any(|word| word.eq_ignore_ascii_case("AWAIT"))
            })
        }
        _ => false,
    })
}

/// Parses one statement (`tokens` are [`tokenize`]'s of `sql`), showing `inspect` every
/// sqlparser statement it is built from; a write or EXEC records the `/*+ AWAIT */` hint.
/// A REGISTRY statement is read from the raw text.
fn parse_with(
    sql: &str,
    tokens: Tokens,
    inspect: &mut dyn FnMut(&SqlStatement),
) -> Result<Statement> {
    if let Some(rest) = strip_keyword(sql.trim_start(), "REGISTRY") {
        return parse_registry(rest).map(Statement::Registry);
    }
    let tokens = tokens.map_err(does_not_parse)?;
    let await_operation = has_await_hint(&tokens);
    let statement = parse_statement(sql, tokens, inspect)?;
    Ok(match statement {
        Statement::Mutation(mut mutation) => {
            mutation.await_operation = await_operation;
            Statement::Mutation(mutation)
        }
        Statement::Exec(mut exec) => {
            exec.await_operation = await_operation;
            Statement::Exec(exec)
        }
        other => other,
    })
}

fn does_not_parse(err: impl std::fmt::Display) -> Error {
    Error::invalid_sql(format!("SQL does not parse: {err}"))
}

fn parse_statement(
    sql: &str,
    tokens: Vec<TokenWithSpan>,
    inspect: &mut dyn FnMut(&SqlStatement),
) -> Result<Statement> {
    let Some(first) = tokens.iter().map(|t| &t.token).find(|t| is_significant(t)) else {
        return Err(Error::invalid_sql("empty statement: no SQL provided"));
    };
    match keyword(first).as_deref() {
        Some("SHOW") => return parse_show(&significant_tokens(&tokens)[1..]),
        Some("DESCRIBE" | "DESC") => return parse_describe(&significant_tokens(&tokens)[1..]),
        Some("EXEC") => {
            return mutation::exec(&significant_tokens(&tokens)[1..]).map(Statement::Exec);
        }
        Some("REPLACE") => return parse_replace(sql, &tokens, inspect),
        Some("REGISTRY") => {
            return Err(Error::invalid_sql(
                "a REGISTRY statement must start with the word REGISTRY (no comment before it)",
            ));
        }
        _ => {}
    }
    if let Some((rewritten, execs)) = exec_source::extract(sql, &tokens)? {
        let rewritten_tokens = tokenize(&rewritten).map_err(does_not_parse)?;
        return match parse_statement(&rewritten, rewritten_tokens, inspect)? {
            Statement::Query(query) => Ok(Statement::QueryOverExec { query, execs }),
            _ => Err(Error::invalid_sql(
                "(EXEC …) is a row source of a SELECT: SELECT … FROM (EXEC p.s.r.method @a = 'v') AS x",
            )),
        };
    }
    let dialect = SQLiteDialect {};
    let mut statements = Parser::new(&dialect)
        .with_tokens_with_locations(tokens)
        .parse_statements()
        .map_err(does_not_parse)?;
    if statements.len() != 1 {
        return Err(Error::invalid_sql(format!(
            "expected exactly one statement, found {}",
            statements.len()
        )));
    }
    statements.iter().for_each(&mut *inspect);
    match statements.pop() {
        Some(SqlStatement::Query(query)) => Ok(Statement::Query(query)),
        Some(SqlStatement::Insert(insert)) => mutation::insert(insert).map(Statement::Mutation),
        Some(SqlStatement::Update(update)) => {
            mutation::update(update, false).map(Statement::Mutation)
        }
        Some(SqlStatement::Delete(delete)) => mutation::delete(delete).map(Statement::Mutation),
        Some(other) => Err(Error::unsupported(format!(
            "unsupported statement '{}': only SELECT, SHOW and DESCRIBE run here",
            first_word(&other.to_string())
        ))),
        None => Err(Error::invalid_sql("empty statement: no SQL provided")),
    }
}

/// StackQL's `REPLACE p.s.r SET … WHERE …` (PUT) is an UPDATE with another verb: the
/// leading keyword is swapped and the rest parsed as UPDATE.
fn parse_replace(
    sql: &str,
    tokens: &[TokenWithSpan],
    inspect: &mut dyn FnMut(&SqlStatement),
) -> Result<Statement> {
    let first = tokens
        .iter()
        .find(|t| !matches!(t.token, Token::Whitespace(_)))
        .ok_or_else(|| Error::invalid_sql("empty statement: no SQL provided"))?;
    let start = byte_offset(sql, first.span.start.line, first.span.start.column)
        .ok_or_else(|| Error::internal("REPLACE keyword position is outside the statement"))?;
    let rest = sql
        .get(start + "REPLACE".len()..)
        .ok_or_else(|| Error::internal("REPLACE keyword position is outside the statement"))?;
    let mut statements =
        Parser::parse_sql(&SQLiteDialect {}, &format!("UPDATE{rest}")).map_err(|err| {
            Error::invalid_sql(format!(
                "REPLACE is `REPLACE p.s.r SET col = value, … WHERE …`: {err}"
            ))
        })?;
    statements.iter().for_each(&mut *inspect);
    match (statements.pop(), statements.is_empty()) {
        (Some(SqlStatement::Update(update)), true) => {
            mutation::update(update, true).map(Statement::Mutation)
        }
        _ => Err(Error::invalid_sql(
            "REPLACE is `REPLACE p.s.r SET col = value, … WHERE …` (one statement)",
        )),
    }
}

/// The byte offset of a 1-based line and column (in characters) of `text`.
pub(super) fn byte_offset(text: &str, line: u64, column: u64) -> Option<usize> {
    let mut offset = 0;
    for (index, content) in text.split_inclusive('\n').enumerate() {
        if index as u64 + 1 == line {
            let column = usize::try_from(column.checked_sub(1)?).ok()?;
            return content
                .char_indices()
                .nth(column)
                .map(|(byte, _)| offset + byte);
        }
        offset += content.len();
    }
    None
}

const REGISTRY_USAGE: &str = "REGISTRY LIST [<provider>] | REGISTRY PULL <provider> [<version>]";

/// `text` after a leading `keyword` (any case) followed by whitespace or the end.
fn strip_keyword<'a>(text: &'a str, keyword: &str) -> Option<&'a str> {
    let head = text.get(..keyword.len())?;
    let rest = &text[keyword.len()..];
    (head.eq_ignore_ascii_case(keyword) && rest.chars().next().is_none_or(char::is_whitespace))
        .then_some(rest)
}

/// Parses what follows `REGISTRY` from the raw text, so that names such as `v0.1.2` stay
/// whole. Words are separated by whitespace; a word may be quoted with `"`, `'` or `` ` ``
/// (and then hold anything but its quote). Trailing semicolons are ignored.
fn parse_registry(rest: &str) -> Result<RegistryCommand> {
    let words = registry_words(rest.trim().trim_end_matches([';', ' ', '\t', '\n', '\r']))?;
    let mut words = words.into_iter();
    let verb = words.next().map(|w| w.to_ascii_uppercase());
    let args: Vec<String> = words.collect();
    match (verb.as_deref(), args.as_slice()) {
        (Some("LIST"), []) => Ok(RegistryCommand::List { provider: None }),
        (Some("LIST"), [provider]) => Ok(RegistryCommand::List {
            provider: Some(provider.clone()),
        }),
        (Some("PULL"), []) => Ok(RegistryCommand::Pull {
            provider: String::new(),
            version: None,
        }),
        (Some("PULL"), [provider]) => Ok(RegistryCommand::Pull {
            provider: provider.clone(),
            version: None,
        }),
        (Some("PULL"), [provider, version]) => Ok(RegistryCommand::Pull {
            provider: provider.clone(),
            version: Some(version.clone()),
        }),
        (Some(verb @ ("LIST" | "PULL")), _) => Err(Error::invalid_sql(format!(
            "too many words after REGISTRY {verb}: use {REGISTRY_USAGE}"
        ))),
        (Some(other), _) => Err(Error::invalid_sql(format!(
            "unknown REGISTRY '{other}': use {REGISTRY_USAGE}"
        ))),
        (None, _) => Err(Error::invalid_sql(format!(
            "incomplete REGISTRY: use {REGISTRY_USAGE}"
        ))),
    }
}

fn registry_words(text: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if matches!(c, '"' | '\'' | '`') {
            chars.next();
            let mut closed = false;
            for next in chars.by_ref() {
                if next == c {
                    closed = true;
                    break;
                }
                word.push(next);
            }
            if !closed {
                return Err(Error::invalid_sql(format!(
                    "unterminated {c} in REGISTRY statement"
                )));
            }
        } else {
            while let Some(&next) = chars.peek() {
                if next.is_whitespace() {
                    break;
                }
                word.push(next);
                chars.next();
            }
        }
        words.push(word);
    }
    Ok(words)
}

fn first_word(s: &str) -> String {
    s.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

/// Tokens other than whitespace, comments and semicolons.
fn is_significant(token: &Token) -> bool {
    !matches!(token, Token::Whitespace(_) | Token::SemiColon)
}

fn significant_tokens(tokens: &[TokenWithSpan]) -> Vec<Token> {
    tokens
        .iter()
        .map(|t| &t.token)
        .filter(|t| is_significant(t))
        .cloned()
        .collect()
}

fn keyword(token: &Token) -> Option<String> {
    match token {
        Token::Word(w) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
        _ => None,
    }
}

/// Reads `a.b.c` (words, quoted or not) from the front of `tokens`.
fn dotted_name(tokens: &[Token]) -> (Vec<String>, &[Token]) {
    let mut parts = Vec::new();
    let mut rest = tokens;
    while let Some(Token::Word(w)) = rest.first() {
        parts.push(w.value.clone());
        rest = &rest[1..];
        match rest.first() {
            Some(Token::Period) => rest = &rest[1..],
            _ => break,
        }
    }
    (parts, rest)
}

fn parse_like(rest: &[Token]) -> Result<Option<String>> {
    match rest {
        [] => Ok(None),
        [like, Token::SingleQuotedString(pattern)] if keyword(like).as_deref() == Some("LIKE") => {
            Ok(Some(pattern.clone()))
        }
        _ => Err(Error::invalid_sql(format!(
            "unexpected '{}' in SHOW: expected nothing or LIKE '<pattern>'",
            rest.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ))),
    }
}

fn parse_show(tokens: &[Token]) -> Result<Statement> {
    let usage = "SHOW PROVIDERS | SHOW SERVICES IN <provider> | SHOW RESOURCES IN <provider>.<service> | SHOW METHODS IN <provider>.<service>.<resource>";
    let Some(kind) = tokens.first().and_then(keyword) else {
        return Err(Error::invalid_sql(format!("incomplete SHOW: use {usage}")));
    };
    if kind == "PROVIDERS" {
        return Ok(Statement::Show {
            what: ShowWhat::Providers,
            like: parse_like(&tokens[1..])?,
        });
    }
    let expected_parts = match kind.as_str() {
        "SERVICES" => 1,
        "RESOURCES" => 2,
        "METHODS" => 3,
        _ => {
            return Err(Error::invalid_sql(format!(
                "unknown SHOW '{kind}': use {usage}"
            )));
        }
    };
    let after_in = match tokens.get(1).and_then(keyword).as_deref() {
        Some("IN" | "FROM") => &tokens[2..],
        _ => {
            return Err(Error::invalid_sql(format!(
                "SHOW {kind} needs IN <name>: use {usage}"
            )));
        }
    };
    let (parts, rest) = dotted_name(after_in);
    if parts.len() != expected_parts {
        return Err(Error::invalid_sql(format!(
            "SHOW {kind} IN expects {usage}"
        )));
    }
    let like = parse_like(rest)?;
    let mut parts = parts.into_iter();
    let mut next = || parts.next().unwrap_or_default();
    let what = match expected_parts {
        1 => ShowWhat::Services { provider: next() },
        2 => ShowWhat::Resources {
            provider: next(),
            service: next(),
        },
        _ => ShowWhat::Methods {
            provider: next(),
            service: next(),
            resource: next(),
        },
    };
    Ok(Statement::Show { what, like })
}

fn parse_describe(tokens: &[Token]) -> Result<Statement> {
    let tokens = match tokens.first().and_then(keyword).as_deref() {
        Some("EXTENDED") => &tokens[1..],
        _ => tokens,
    };
    let (parts, rest) = dotted_name(tokens);
    if parts.len() != 3 || !rest.is_empty() {
        return Err(Error::invalid_sql(
            "DESCRIBE expects <provider>.<service>.<resource>",
        ));
    }
    Ok(Statement::Describe { target: parts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writes_nested_in_a_query_are_named() {
        let nested = |sql: &str| parse_nested(sql, tokenize(sql)).unwrap().1;
        for (sql, writes) in [
            (
                "WITH t AS (SELECT 1) DELETE FROM p.s.r WHERE id = 1",
                vec![SqlVerb::Delete],
            ),
            (
                "WITH d AS (DELETE FROM p.s.r WHERE id = 1 RETURNING *) SELECT * FROM d",
                vec![SqlVerb::Delete],
            ),
            (
                "WITH t AS (SELECT 1) INSERT INTO p.s.r (a) SELECT 1",
                vec![SqlVerb::Insert],
            ),
            (
                "select 1 union all (delete from t) union all (update t set a = 1) union all (delete from u)",
                vec![SqlVerb::Delete, SqlVerb::Update],
            ),
        ] {
            let found = nested(sql);
            assert!(found.any, "{sql}");
            assert_eq!(found.writes, writes, "{sql}");
        }
        for sql in [
            "SELECT 1",
            "WITH t AS (SELECT 1) SELECT * FROM t",
            "DELETE FROM p.s.r WHERE id = 1",
        ] {
            assert_eq!(nested(sql), Nested::default(), "{sql}");
        }
    }

    #[test]
    fn show_statements_parse() {
        assert!(matches!(
            parse("SHOW PROVIDERS").unwrap(),
            Statement::Show {
                what: ShowWhat::Providers,
                like: None
            }
        ));
        match parse("show resources in github.repos like '%re%';").unwrap() {
            Statement::Show { what, like } => {
                assert_eq!(
                    what,
                    ShowWhat::Resources {
                        provider: "github".into(),
                        service: "repos".into()
                    }
                );
                assert_eq!(like.as_deref(), Some("%re%"));
            }
            other => panic!("{other:?}"),
        }
        match parse("DESCRIBE google.container.\"projects.aggregated.usableSubnetworks\"").unwrap()
        {
            Statement::Describe { target } => {
                assert_eq!(target[2], "projects.aggregated.usableSubnetworks")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn registry_statements_parse_from_raw_text() {
        assert_eq!(
            match parse("registry list;").unwrap() {
                Statement::Registry(cmd) => cmd,
                other => panic!("{other:?}"),
            },
            RegistryCommand::List { provider: None }
        );
        match parse("REGISTRY PULL google v0.1.1-alpha01 ;").unwrap() {
            Statement::Registry(cmd) => assert_eq!(
                cmd,
                RegistryCommand::Pull {
                    provider: "google".into(),
                    version: Some("v0.1.1-alpha01".into())
                }
            ),
            other => panic!("{other:?}"),
        }
        match parse("REGISTRY LIST \"a b\\c\"").unwrap() {
            Statement::Registry(cmd) => assert_eq!(
                cmd,
                RegistryCommand::List {
                    provider: Some("a b\\c".into())
                }
            ),
            other => panic!("{other:?}"),
        }
        assert!(parse("REGISTRY PULL a b c").is_err());
        assert!(parse("REGISTRY FETCH a").is_err());
        assert!(parse("REGISTRY").is_err());
        // Only the whole word starts a REGISTRY statement.
        assert!(!matches!(
            parse("registryx list"),
            Ok(Statement::Registry(_))
        ));
    }

    #[test]
    fn one_tokenization_serves_split_hint_replace_and_exec_sources() {
        let text = "SELECT ';' AS a; /* ; */ SELECT 2;";
        let tokens = tokenize(text);
        assert_eq!(
            split(text, &tokens),
            ["SELECT ';' AS a", " /* ; */ SELECT 2"]
        );
        let unreadable = "SELECT 'open; SELECT 2";
        assert_eq!(split(unreadable, &tokenize(unreadable)), [unreadable]);
        assert!(
            parse(unreadable)
                .unwrap_err()
                .message()
                .starts_with("SQL does not parse: ")
        );
        match parse("INSERT /*+ AWAIT */ INTO p.s.r (a) VALUES (1)").unwrap() {
            Statement::Mutation(m) => assert!(m.await_operation),
            other => panic!("{other:?}"),
        }
        match parse("DELETE FROM p.s.r WHERE a = 1").unwrap() {
            Statement::Mutation(m) => assert!(!m.await_operation),
            other => panic!("{other:?}"),
        }
        match parse("  /* c */ REPLACE p.s.r SET a = 1 WHERE b = 2").unwrap() {
            Statement::Mutation(m) => assert_eq!(m.verb, crate::types::SqlVerb::Replace),
            other => panic!("{other:?}"),
        }
        match parse("EXEC /*+ AWAIT */ p.s.r.m @a = 1").unwrap() {
            Statement::Exec(exec) => assert!(exec.await_operation),
            other => panic!("{other:?}"),
        }
        match parse("SELECT x.a FROM (EXEC p.s.r.m @id = 'v') AS x").unwrap() {
            Statement::QueryOverExec { query, execs } => {
                assert_eq!(query.to_string(), "SELECT x.a FROM __qg_exec0 AS x");
                assert_eq!(execs.len(), 1);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(parse("SELECT 1;"), Ok(Statement::Query(_))));
    }

    #[test]
    fn bad_statements_are_refused_with_reasons() {
        assert!(parse("").unwrap_err().message().contains("no SQL"));
        assert!(
            parse("SELECT 1; SELECT 2")
                .unwrap_err()
                .message()
                .contains("exactly one")
        );
        assert!(
            parse("DROP TABLE x")
                .unwrap_err()
                .message()
                .contains("unsupported")
        );
        assert!(
            parse("SHOW THINGS")
                .unwrap_err()
                .message()
                .contains("unknown SHOW")
        );
        assert!(
            parse("SELEC 1")
                .unwrap_err()
                .message()
                .contains("does not parse")
        );
    }
}
