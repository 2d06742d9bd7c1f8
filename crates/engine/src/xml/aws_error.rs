//! The code and message of an AWS error body: `<ErrorResponse><Error><Code>…` (query
//! protocol), `<Error><Code>…` (REST-XML: S3, CloudFront, Route 53) and
//! `<Response><Errors><Error><Code>…` (EC2).

use super::decode;
use super::tree::Node;

/// An AWS error's code and message, as the body gave them (not yet escaped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AwsError {
    pub(crate) code: String,
    pub(crate) message: Option<String>,
}

/// The AWS error in `body`, when it is one of the AWS error shapes.
pub(crate) fn aws_error(body: &[u8]) -> Option<AwsError> {
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[start] != b'<' {
        return None;
    }
    let (name, root) = decode::parse(body).ok()?;
    let error = match name.as_ref() {
        "Error" => &root,
        "ErrorResponse" => first(root.get("Error")?)?,
        "Response" => first(root.get("Errors")?.get("Error")?)?,
        _ => return None,
    };
    let code = error.get("Code")?.text()?.to_owned();
    if code.is_empty() {
        return None;
    }
    let message = error
        .get("Message")
        .or_else(|| error.get("message"))
        .and_then(Node::text)
        .map(str::to_owned);
    Some(AwsError { code, message })
}

/// The first of a repeated element.
fn first<'n, 'a>(node: &'n Node<'a>) -> Option<&'n Node<'a>> {
    match node {
        Node::List(items) => items.first(),
        other => Some(other),
    }
}
