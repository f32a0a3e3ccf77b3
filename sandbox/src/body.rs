//! The one response body type: either a whole JSON document, or a stream of chunks fed from a
//! channel (a watch). hyper sends the stream with `Transfer-Encoding: chunked`, one HTTP chunk
//! per piece, flushed as it arrives.
//!
//! WORKSHOP.md, "Set-up: the sandbox". No `futures` or `tokio-util`: `Body` is implemented by hand
//! over a tokio `mpsc::Receiver`, which is all a channel-backed body needs.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

pub(crate) enum ResponseBody {
    /// A complete body; hyper sends it with Content-Length.
    Full(Option<Bytes>),
    /// A streamed body; ends when every sender is dropped.
    Stream(mpsc::Receiver<Bytes>),
}

impl ResponseBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> ResponseBody {
        ResponseBody::Full(Some(bytes.into()))
    }

    pub(crate) fn empty() -> ResponseBody {
        ResponseBody::Full(None)
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ResponseBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Stream(receiver) => receiver
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ResponseBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            ResponseBody::Full(None) => SizeHint::with_exact(0),
            ResponseBody::Stream(_) => SizeHint::default(),
        }
    }
}
