//! Keeps a tool result's counted bytes (`limits.max_response_bytes_in_flight`) until its
//! HTTP response has been sent: each `/mcp` request gets an empty [`ResponseSlot`] in its
//! extensions ([`give_slot`]), the MCP handler leaves the result's hold in it, and the hold then lives as
//! long as the unsent part of the response body. The body is handed to hyper in pieces of
//! [`PIECE`] bytes, so hyper asks for the next piece only once it has written out the ones
//! before: the hold is released when the last piece has been taken (at most one piece
//! before the client has it all), or when the connection is dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};

use crate::mcp::pipeline::response_bytes::{HeldBytes, ResponseSlot};

/// The largest piece of a held body handed to hyper at once.
const PIECE: usize = 64 * 1024;

/// Puts an empty slot into `request` for the MCP handler to leave a result's hold in.
pub(super) fn give_slot(request: &mut Request) -> ResponseSlot {
    let slot = ResponseSlot::default();
    request.extensions_mut().insert(slot.clone());
    slot
}

/// `response` with the hold left in `slot` (if any) tied to its body.
pub(super) fn hold_until_sent(slot: &ResponseSlot, response: Response) -> Response {
    match slot.take() {
        None => response,
        Some(held) => response.map(|inner| {
            Body::new(HeldBody {
                inner,
                pending: Bytes::new(),
                held: Some(held),
            })
        }),
    }
}

/// A response body that keeps its hold until its last piece has been taken.
struct HeldBody {
    inner: Body,
    /// What is left of the inner body's current frame.
    pending: Bytes,
    held: Option<HeldBytes>,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        loop {
            if !this.pending.is_empty() {
                let piece = this.pending.split_to(this.pending.len().min(PIECE));
                return Poll::Ready(Some(Ok(Frame::data(piece))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => this.pending = data,
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Poll::Ready(None) => {
                    this.held = None;
                    return Poll::Ready(None);
                }
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // The same bytes, in smaller pieces.
        let inner = self.inner.size_hint();
        let pending = self.pending.len() as u64;
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(pending));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(pending));
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::pipeline::response_bytes::ResponseBytes;
    use http_body::Body as _;
    use http_body_util::BodyExt as _;

    #[tokio::test]
    async fn the_hold_lasts_until_the_last_piece_is_taken() {
        let count = ResponseBytes::new(1 << 20, 1 << 20);
        let data = Bytes::from(vec![7_u8; PIECE * 2 + 5]);
        let mut body = HeldBody {
            inner: Body::from(data.clone()),
            pending: Bytes::new(),
            held: Some(count.hold("a", data.len())),
        };
        assert_eq!(body.size_hint().exact(), Some(data.len() as u64));
        let mut pieces = Vec::new();
        while let Some(frame) = body.frame().await {
            let piece = frame.unwrap().into_data().unwrap();
            assert!(piece.len() <= PIECE);
            pieces.push(piece);
            if pieces.len() < 3 {
                assert_eq!(count.in_flight("a").1, data.len(), "still held");
            }
        }
        assert_eq!(pieces.concat(), data.to_vec());
        assert_eq!(count.in_flight("a"), (0, 0));
    }
}
