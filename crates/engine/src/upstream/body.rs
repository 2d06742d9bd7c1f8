//! A response body gathered from the chunks the HTTP client yields.

use bytes::{Bytes, BytesMut};

/// The chunks of one response body so far. A body that arrives as a single chunk is kept
/// as it came, without a copy; a longer one is copied once into a buffer sized up front by
/// the response's `Content-Length` (no larger than the response limit), so it is not copied
/// again as it grows.
#[derive(Debug)]
pub(super) struct Gathered {
    first: Option<Bytes>,
    rest: BytesMut,
    /// The bytes to reserve once a second chunk comes.
    expected: usize,
}

impl Gathered {
    /// An empty body whose response announced `content_length` bytes; at most `limit` are
    /// reserved.
    pub(super) fn new(content_length: Option<u64>, limit: usize) -> Self {
        let expected = content_length
            .map_or(0, |length| usize::try_from(length).unwrap_or(usize::MAX))
            .min(limit);
        Gathered {
            first: None,
            rest: BytesMut::new(),
            expected,
        }
    }

    /// The bytes gathered so far.
    pub(super) fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.rest.len()
    }

    /// Adds the next chunk.
    pub(super) fn push(&mut self, chunk: Bytes) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(chunk);
            return;
        }
        if let Some(first) = self.first.take() {
            let needed = first.len() + chunk.len();
            self.rest.reserve(self.expected.max(needed));
            self.rest.extend_from_slice(&first);
        }
        self.rest.extend_from_slice(&chunk);
    }

    /// The whole body.
    pub(super) fn finish(self) -> Bytes {
        match self.first {
            Some(first) => first,
            None => self.rest.freeze(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_chunk_is_kept_as_it_came() {
        let chunk = Bytes::from_static(b"[1,2,3]");
        let mut body = Gathered::new(Some(7), 1024);
        body.push(chunk.clone());
        assert_eq!(body.len(), 7);
        let whole = body.finish();
        assert_eq!(whole, chunk);
        assert_eq!(whole.as_ptr(), chunk.as_ptr(), "not copied");
    }

    #[test]
    fn chunks_are_joined_in_order_whatever_the_announced_length() {
        for announced in [None, Some(0), Some(3), Some(9), Some(1 << 40)] {
            let mut body = Gathered::new(announced, 64);
            for part in ["[1,", "2,", "", "3]"] {
                body.push(Bytes::from(part));
            }
            assert_eq!(body.len(), 7, "{announced:?}");
            assert_eq!(&body.finish()[..], b"[1,2,3]", "{announced:?}");
        }
        assert!(Gathered::new(None, 64).finish().is_empty());
    }
}
