//! A method's explicit pagination settings (`config.pagination`): the algorithm and where the
//! request, response and terminating tokens are.

use serde_json::Value;

use super::json::str_field;

/// Where a pagination token is read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenSpec {
    pub(crate) key: String,
    pub(crate) location: String,
}

/// A method's explicit pagination configuration (`config.pagination`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pagination {
    pub(crate) algorithm: Option<String>,
    pub(crate) request_token: Option<TokenSpec>,
    pub(crate) response_token: Option<TokenSpec>,
    pub(crate) terminator: Option<TokenSpec>,
}

pub(super) fn parse_pagination(value: &Value) -> Option<Pagination> {
    let token = |key: &str| -> Option<TokenSpec> {
        let t = value.get(key)?;
        Some(TokenSpec {
            key: str_field(t, "key")?,
            location: str_field(t, "location").unwrap_or_else(|| "body".to_owned()),
        })
    };
    let pagination = Pagination {
        algorithm: str_field(value, "algorithm"),
        request_token: token("requestToken"),
        response_token: token("responseToken"),
        terminator: token("responseTerminator"),
    };
    (pagination.request_token.is_some() || pagination.algorithm.is_some()).then_some(pagination)
}
