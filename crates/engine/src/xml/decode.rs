//! Decoding an XML body: bodies of the common shape go to the fast scanner ([`fast`]),
//! anything else, and every error, to quick-xml ([`tree`]); both build the same tree.

use std::borrow::Cow;

use super::fast;
use super::tree::{self, Node, XmlError};

/// Decodes `body`: the root element's name and value. What follows the root element is
/// not read (as mxj reads one value).
pub(crate) fn parse(body: &[u8]) -> Result<(Cow<'_, str>, Node<'_>), XmlError> {
    let text = std::str::from_utf8(body).map_err(|err| XmlError::NotUtf8(err.valid_up_to()))?;
    // A byte-order mark is not markup.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    // Bodies of the common shape are read by the fast scanner; anything else, and every
    // error, is left to quick-xml.
    match fast::parse(text) {
        Some(done) => Ok(done),
        None => tree::read(text),
    }
}
