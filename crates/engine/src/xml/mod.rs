//! XML response bodies: the tree any-sdk's transforms see ([`tree`], mxj's conventions),
//! `schema_driven_xml_v0.1.0` rows ([`rows`]), the map `golang_template_mxj_*` templates
//! run over ([`to_mxj_value`]), and the code and message of an AWS error body
//! ([`aws_error`]).

mod aws_error;
mod decode;
mod fast;
mod rows;
mod tree;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

pub(crate) use self::aws_error::{AwsError, aws_error};
pub(crate) use self::rows::{RowField, transform as schema_driven};
use self::tree::Node;
pub(crate) use self::tree::XmlError;

/// `body` decoded as mxj's `NewMapXml` decodes it: `{"<root>": value}` with maps, lists
/// (`[]interface{}`) and strings (no casting). An empty body is an empty map.
pub(crate) fn to_mxj_value(body: &[u8]) -> Result<Value, XmlError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Map::new()));
    }
    let (name, root) = decode::parse(body)?;
    let mut map = Map::new();
    map.insert(name.into_owned(), node_value(root));
    Ok(Value::Object(map))
}

fn node_value(node: Node<'_>) -> Value {
    match node {
        Node::Text(text) => Value::String(text.into_owned()),
        Node::List(items) => Value::Array(items.into_iter().map(node_value).collect()),
        Node::Map(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| (k.into_owned(), node_value(v)))
                .collect(),
        ),
    }
}
