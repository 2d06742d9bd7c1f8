//! Literal values written in a statement (`'text'`, `42`, `-1.5`, `TRUE`, `NULL`, in any
//! parentheses): the values of a write's SET, VALUES and WHERE, and of a read's WHERE.

use sqlparser::ast::{Expr, UnaryOperator, Value};

/// A value written in the statement.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scalar {
    /// A quoted string.
    Text(String),
    /// A number as written.
    Number(String),
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// `NULL`.
    Null,
}

impl Scalar {
    /// The value as a request parameter string.
    pub(crate) fn as_param(&self) -> Option<String> {
        match self {
            Scalar::Text(s) | Scalar::Number(s) => Some(s.clone()),
            Scalar::Bool(b) => Some(b.to_string()),
            Scalar::Null => None,
        }
    }
}

/// A literal value expression.
pub(crate) fn scalar(expr: &Expr) -> Option<Scalar> {
    match unnest(expr) {
        Expr::Value(v) => match &v.value {
            Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => {
                Some(Scalar::Text(s.clone()))
            }
            Value::Number(n, _) => Some(Scalar::Number(n.to_string())),
            Value::Boolean(b) => Some(Scalar::Bool(*b)),
            Value::Null => Some(Scalar::Null),
            _ => None,
        },
        Expr::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match unnest(expr) {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => Some(Scalar::Number(format!("-{n}"))),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}

/// The expression inside any parentheses around it.
pub(super) fn unnest(expr: &Expr) -> &Expr {
    match expr {
        Expr::Nested(inner) => unnest(inner),
        other => other,
    }
}
