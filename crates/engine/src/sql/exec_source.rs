//! `SELECT … FROM (EXEC p.s.r.method @a = 'v', …) [AS x]`: an EXEC as a row source, as
//! StackQL allows. Each parenthesised EXEC is cut out of the text and replaced by a local
//! table name (`__qg_exec0`, …); the EXECs run first and their rows fill those tables.

use sqlparser::tokenizer::{Token, TokenWithSpan};

use super::mutation::{Exec, exec};
use crate::error::{Error, Result};

/// The local table name of the `index`th EXEC source.
pub(crate) fn exec_table(index: usize) -> String {
    format!("__qg_exec{index}")
}

/// The text with every `(EXEC …)` replaced by its table name, and the EXECs in order;
/// `None` when the text has no EXEC source. `tokens` are the text's.
pub(crate) fn extract(sql: &str, tokens: &[TokenWithSpan]) -> Result<Option<(String, Vec<Exec>)>> {
    let significant: Vec<&TokenWithSpan> = tokens
        .iter()
        .filter(|t| !matches!(t.token, Token::Whitespace(_)))
        .collect();
    let mut out = String::with_capacity(sql.len());
    let mut execs = Vec::new();
    let mut copied = 0usize;
    let mut i = 0;
    while i < significant.len() {
        let is_exec_start = matches!(significant[i].token, Token::LParen)
            && matches!(
                significant.get(i + 1).map(|t| &t.token),
                Some(Token::Word(w)) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("EXEC")
            );
        if !is_exec_start {
            i += 1;
            continue;
        }
        let mut depth = 0usize;
        let mut close = None;
        for (j, token) in significant.iter().enumerate().skip(i) {
            match token.token {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(j);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            return Err(Error::invalid_sql("(EXEC … is not closed with ')'"));
        };
        let inner: Vec<Token> = significant[i + 2..close]
            .iter()
            .map(|t| t.token.clone())
            .collect();
        execs.push(exec(&inner)?);
        let start = offset(sql, significant[i])?;
        let end = offset(sql, significant[close])? + 1;
        out.push_str(&sql[copied..start]);
        out.push_str(&exec_table(execs.len() - 1));
        copied = end;
        i = close + 1;
    }
    if execs.is_empty() {
        return Ok(None);
    }
    out.push_str(&sql[copied..]);
    Ok(Some((out, execs)))
}

fn offset(sql: &str, token: &TokenWithSpan) -> Result<usize> {
    super::byte_offset(sql, token.span.start.line, token.span.start.column)
        .ok_or_else(|| Error::internal("token position is outside the statement"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_sources_are_cut_out() {
        let text = "SELECT x.a FROM (EXEC p.s.r.m @id = 'a(b)', @n = 2) AS x WHERE x.a > (1)";
        let (sql, execs) = extract(text, &super::super::tokenize(text).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(sql, "SELECT x.a FROM __qg_exec0 AS x WHERE x.a > (1)");
        assert_eq!(execs[0].target, ["p", "s", "r", "m"].map(String::from));
        assert_eq!(execs[0].args.len(), 2);
        let text = "SELECT 1";
        assert!(
            extract(text, &super::super::tokenize(text).unwrap())
                .unwrap()
                .is_none()
        );
    }
}
