//! Statement parsing: standard SQL through sqlparser (SQLite dialect), and StackQL's own
//! statements (`SHOW`, `DESCRIBE`, `EXEC`, `REGISTRY`) through a small parser of ours.

mod mutation;
mod tables;

pub(crate) use mutation::{Exec, InsertRows, Mutation, Returning, Scalar};
pub(crate) use tables::{Analysis, Source, analyse, expand_wildcards};

use sqlparser::ast::{Query, Statement as SqlStatement};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;
use sqlparser::tokenizer::{Token, Tokenizer};

use super::error::{Error, Result};

/// What a statement asks for.
#[derive(Debug)]
pub(crate) enum Statement {
    /// A query (SELECT, WITH, UNION, VALUES).
    Query(Box<Query>),
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
}

/// The object list `SHOW` asks for.
#[derive(Debug, PartialEq, Eq)]
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

/// Parses one statement. Several statements in one call are refused.
pub(crate) fn parse(sql: &str) -> Result<Statement> {
    let tokens = significant_tokens(sql)?;
    let Some(first) = tokens.first() else {
        return Err(Error::invalid_sql("empty statement: no SQL provided"));
    };
    match keyword(first).as_deref() {
        Some("SHOW") => return parse_show(&tokens[1..]),
        Some("DESCRIBE" | "DESC") => return parse_describe(&tokens[1..]),
        Some("EXEC") => return mutation::exec(&tokens[1..]).map(Statement::Exec),
        Some("REPLACE") => return parse_replace(sql),
        Some("REGISTRY") => {
            return Err(Error::unsupported(
                "REGISTRY statements are not supported yet: listing and pulling providers arrive with the registry work",
            ));
        }
        _ => {}
    }
    let mut statements = Parser::parse_sql(&SQLiteDialect {}, sql)
        .map_err(|err| Error::invalid_sql(format!("SQL does not parse: {err}")))?;
    if statements.len() != 1 {
        return Err(Error::invalid_sql(format!(
            "expected exactly one statement, found {}",
            statements.len()
        )));
    }
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
fn parse_replace(sql: &str) -> Result<Statement> {
    let tokens = Tokenizer::new(&SQLiteDialect {}, sql)
        .tokenize_with_location()
        .map_err(|err| Error::invalid_sql(format!("SQL does not parse: {err}")))?;
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
fn byte_offset(text: &str, line: u64, column: u64) -> Option<usize> {
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

fn first_word(s: &str) -> String {
    s.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase()
}

fn significant_tokens(sql: &str) -> Result<Vec<Token>> {
    let tokens = Tokenizer::new(&SQLiteDialect {}, sql)
        .tokenize()
        .map_err(|err| Error::invalid_sql(format!("SQL does not parse: {err}")))?;
    Ok(tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .filter(|t| !matches!(t, Token::SemiColon))
        .collect())
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
