//! The bytes of a watch, as they arrive: `Client::stream`, the one verb step 02 adds to the
//! client (`src/client/`), and the [`ByteStream`] it returns. WORKSHOP.md, step 02. What the
//! bytes mean is the framer's (`frame.rs`) and the decoder's (`event.rs`).

use bytes::Bytes;
use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;

use crate::client::{Client, ClientError, Outgoing, RequestError};

impl Client {
    /// GET with no overall timeout; returns once the response headers are in and 2xx. Only
    /// getting the headers is bounded by the request timeout: a watch then stays open for minutes.
    pub async fn stream(&self, path_and_query: &str) -> Result<ByteStream, ClientError> {
        let response = self
            .send_with_retries(&Outgoing::get(path_and_query))
            .await?;
        Ok(ByteStream {
            body: response.into_body(),
            path: path_and_query.to_string(),
        })
    }
}

/// The body of a streaming response (a watch), read chunk by chunk as it arrives.
#[derive(Debug)]
pub struct ByteStream {
    body: Incoming,
    path: String,
}

impl ByteStream {
    /// The next chunk of bytes as the server sent them; `None` at a clean end of stream. Chunk
    /// boundaries mean nothing: an event can be split anywhere, several can share a chunk.
    pub async fn next_chunk(&mut self) -> Option<Result<Bytes, ClientError>> {
        loop {
            match self.body.frame().await? {
                Ok(frame) => {
                    // Trailers and empty data frames carry no event bytes.
                    if let Ok(data) = frame.into_data() {
                        if !data.is_empty() {
                            return Some(Ok(data));
                        }
                    }
                }
                Err(source) => {
                    let kind = RequestError::ReadBody(source);
                    return Some(Err(ClientError::request(&Method::GET, &self.path, kind)));
                }
            }
        }
    }
}
