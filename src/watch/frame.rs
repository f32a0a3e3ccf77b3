//! Socket → bytes → lines: open a watch (`Client::stream`, the one verb step 02 adds to the
//! client), read its body as it arrives ([`ByteStream`]), and cut it into one JSON document per
//! line ([`LineFramer`]).
//!
//! WORKSHOP.md, step 02 ("Chunks are not events"). A watch body arrives as
//! `Transfer-Encoding: chunked`, and the API server writes one JSON object per event, each ending
//! in `\n`. HTTP chunk boundaries mean nothing: a chunk may end in the middle of an event (in the
//! middle of a multi-byte UTF-8 character, even) or carry many events. So this file only ever
//! looks for the byte `b'\n'` and never decodes text; `event.rs` turns the lines into events.
//!
//! Memory stays bounded: an event longer than `max_event_bytes` is dropped as it streams in (not
//! buffered to the end) and reported once as [`FrameError::EventTooLarge`]; the framer then
//! resynchronises on the next `\n`.

use bytes::{Bytes, BytesMut};
use http::Method;
use http_body_util::BodyExt;
use hyper::body::Incoming;
// Finds a byte many bytes per instruction (SIMD where the CPU has it): every byte of the stream
// passes through this search once.
use memchr::memchr;
use std::collections::vec_deque::Drain;
use std::collections::VecDeque;

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

/// 16 MiB. etcd refuses values above ~1.5 MiB by default, so a real event is far below this; the
/// cap is there so a misbehaving server or proxy cannot make us buffer without end.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// One line of the stream was longer than the configured maximum; it was discarded.
    #[error("a watch event was longer than the {limit}-byte limit and was dropped; the watch must relist to learn what it said")]
    EventTooLarge { limit: usize },
}

/// Turns pushed chunks into complete lines, in order.
///
/// ```
/// use bytes::Bytes;
/// use postgres_operator::watch::frame::LineFramer;
/// let mut framer = LineFramer::new(1024);
/// framer.push_bytes(Bytes::from_static(b"{\"a\":1}\n{\"b\"")).unwrap();
/// assert_eq!(framer.next_line().unwrap(), &b"{\"a\":1}"[..]);
/// assert_eq!(framer.next_line(), None); // the second line is not complete yet
/// framer.push_bytes(Bytes::from_static(b":2}")).unwrap();
/// // The stream ends without a final `\n`: the last line still counts.
/// assert_eq!(framer.finish().unwrap(), &b"{\"b\":2}"[..]);
/// ```
#[derive(Debug)]
pub struct LineFramer {
    /// Complete, non-empty lines without their line ending, oldest first.
    ready: VecDeque<Bytes>,
    ready_bytes: usize,
    /// The start of a line whose `\n` has not arrived yet. Only this part is ever copied: a line
    /// that lies wholly inside one chunk is handed out as a slice of that chunk.
    partial: BytesMut,
    /// We are inside an oversize line: drop bytes until its `\n`.
    discarding: bool,
    max_event_bytes: usize,
    peak_buffered_bytes: usize,
    peak_capacity: usize,
}

impl LineFramer {
    /// `max_event_bytes` bounds one line (without its `\n`), and with it the buffered tail.
    pub fn new(max_event_bytes: usize) -> LineFramer {
        LineFramer {
            ready: VecDeque::new(),
            ready_bytes: 0,
            partial: BytesMut::new(),
            discarding: false,
            max_event_bytes,
            peak_buffered_bytes: 0,
            peak_capacity: 0,
        }
    }

    /// Cut the next chunk of the body into lines: the lines it completes, oldest first (a line
    /// inside the chunk is a slice of it; only a line begun in an earlier chunk is copied).
    ///
    /// Returns [`FrameError::EventTooLarge`] when a line grew past the limit. That line is dropped
    /// (its bytes are not kept, and the rest of it is skipped as it arrives); lines before and after
    /// it are kept for [`next_line`](Self::next_line), so the framer itself stays usable. A watch
    /// should still relist: the dropped event changed something it now does not know about.
    pub fn cut(&mut self, chunk: Bytes) -> Result<Drain<'_, Bytes>, FrameError> {
        if self.append_if_unterminated(&chunk) {
            self.ready_bytes = 0;
            return Ok(self.ready.drain(..));
        }
        let mut dropped_a_line = false;
        let mut start = 0;
        if self.discarding {
            match memchr(b'\n', &chunk) {
                None => {
                    self.ready_bytes = 0;
                    return Ok(self.ready.drain(..));
                }
                Some(end) => {
                    self.discarding = false;
                    start = end + 1;
                }
            }
        }
        while start < chunk.len() {
            match memchr(b'\n', &chunk[start..]) {
                Some(offset) => {
                    let end = start + offset;
                    if self.partial.len() + offset > self.max_event_bytes {
                        self.partial.clear();
                        dropped_a_line = true;
                    } else if self.partial.is_empty() {
                        self.push_ready(chunk.slice(start..end));
                    } else {
                        self.partial.extend_from_slice(&chunk[start..end]);
                        let line = self.partial.split().freeze();
                        self.push_ready(line);
                    }
                    start = end + 1;
                }
                None => {
                    let rest = &chunk[start..];
                    if self.partial.len() + rest.len() > self.max_event_bytes {
                        self.partial.clear();
                        self.discarding = true;
                        dropped_a_line = true;
                    } else {
                        self.partial.extend_from_slice(rest);
                    }
                    break;
                }
            }
        }
        self.peak_buffered_bytes = self.peak_buffered_bytes.max(self.buffered_bytes());
        self.peak_capacity = self
            .peak_capacity
            .max(self.partial.capacity() + self.ready_bytes);
        if dropped_a_line {
            return Err(FrameError::EventTooLarge {
                limit: self.max_event_bytes,
            });
        }
        self.ready_bytes = 0;
        Ok(self.ready.drain(..))
    }

    /// [`cut`](Self::cut), keeping the lines for [`next_line`](Self::next_line): the framing
    /// tests' and the benchmark's way in.
    pub fn push_bytes(&mut self, chunk: Bytes) -> Result<(), FrameError> {
        let lines: Vec<Bytes> = self.cut(chunk)?.collect();
        self.ready_bytes = lines.iter().map(Bytes::len).sum();
        self.ready.extend(lines);
        Ok(())
    }

    /// The next complete line, without its `\n` (or `\r\n`). Empty lines are skipped.
    pub fn next_line(&mut self) -> Option<Bytes> {
        let line = self.ready.pop_front()?;
        self.ready_bytes -= line.len();
        Some(line)
    }

    /// The stream has ended. Returns the remaining lines one call at a time, including a last line
    /// that had no `\n` (a server may close right after the final event).
    pub fn finish(&mut self) -> Option<Bytes> {
        if !self.partial.is_empty() {
            let line = self.partial.split().freeze();
            self.push_ready(line);
        }
        // An oversize line cut off by the end of the stream was already reported by `push_bytes`.
        self.discarding = false;
        self.next_line()
    }

    /// Bytes currently held: complete lines not yet taken, plus the unfinished tail.
    pub fn buffered_bytes(&self) -> usize {
        self.ready_bytes + self.partial.len()
    }

    /// The most bytes ever held at once: the figure that shows memory stays bounded.
    pub fn peak_buffered_bytes(&self) -> usize {
        self.peak_buffered_bytes
    }

    /// The largest the buffers ever were, counting spare capacity of the tail buffer.
    pub fn peak_capacity(&self) -> usize {
        self.peak_capacity
    }

    /// The common case for small chunks and the middle of a big event: no `\n` in the chunk, so
    /// it only extends the unfinished line. False: take the general path.
    fn append_if_unterminated(&mut self, chunk: &[u8]) -> bool {
        if self.discarding
            || self.partial.len() + chunk.len() > self.max_event_bytes
            || memchr(b'\n', chunk).is_some()
        {
            return false;
        }
        self.partial.extend_from_slice(chunk);
        self.peak_buffered_bytes = self.peak_buffered_bytes.max(self.buffered_bytes());
        self.peak_capacity = self
            .peak_capacity
            .max(self.partial.capacity() + self.ready_bytes);
        true
    }

    fn push_ready(&mut self, mut line: Bytes) {
        while let Some(b'\r') = line.last() {
            line.truncate(line.len() - 1);
        }
        if !line.is_empty() {
            self.ready_bytes += line.len();
            self.ready.push_back(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl LineFramer {
        fn push(&mut self, chunk: &[u8]) -> Result<(), FrameError> {
            self.push_bytes(Bytes::copy_from_slice(chunk))
        }
    }

    fn drain(framer: &mut LineFramer) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        while let Some(line) = framer.next_line() {
            lines.push(line.to_vec());
        }
        lines
    }

    #[test]
    fn several_lines_in_one_chunk_come_out_in_order() {
        let mut framer = LineFramer::new(100);
        framer.push(b"one\ntwo\nthree\n").unwrap();
        assert_eq!(
            drain(&mut framer),
            vec![b"one".to_vec(), b"two".to_vec(), b"three".to_vec()]
        );
        assert_eq!(framer.buffered_bytes(), 0);
    }

    #[test]
    fn a_line_split_across_chunks_waits_for_its_newline() {
        let mut framer = LineFramer::new(100);
        framer.push(b"{\"ty").unwrap();
        assert_eq!(framer.next_line(), None);
        framer.push(b"pe\":1}").unwrap();
        assert_eq!(framer.next_line(), None);
        framer.push(b"\n").unwrap();
        assert_eq!(framer.next_line().unwrap(), &b"{\"type\":1}"[..]);
    }

    #[test]
    fn empty_lines_and_carriage_returns_are_skipped() {
        let mut framer = LineFramer::new(100);
        framer.push(b"\n\r\na\r\n\n\nb\n").unwrap();
        assert_eq!(drain(&mut framer), vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn the_last_line_without_newline_is_delivered_by_finish() {
        let mut framer = LineFramer::new(100);
        framer.push(b"a\nlast").unwrap();
        assert_eq!(drain(&mut framer), vec![b"a".to_vec()]);
        assert_eq!(framer.finish().unwrap(), &b"last"[..]);
        assert_eq!(framer.finish(), None);
    }

    #[test]
    fn an_oversize_line_is_reported_once_and_the_framer_recovers() {
        let mut framer = LineFramer::new(8);
        framer.push(b"ok\n0123").unwrap();
        // The tail passes the limit: dropped at once, not buffered.
        assert_eq!(
            framer.push(b"456789"),
            Err(FrameError::EventTooLarge { limit: 8 })
        );
        assert_eq!(
            framer.buffered_bytes(),
            2,
            "only the complete 'ok' line is kept"
        );
        // The rest of the oversize line is skipped silently, then framing resumes.
        framer.push(b"abcdef").unwrap();
        framer.push(b"gh\nnext\n").unwrap();
        assert_eq!(drain(&mut framer), vec![b"ok".to_vec(), b"next".to_vec()]);
    }

    #[test]
    fn an_oversize_line_inside_one_chunk_is_dropped_and_its_neighbours_kept() {
        let mut framer = LineFramer::new(4);
        assert_eq!(
            framer.push(b"abc\ntoo long\nxyz\n"),
            Err(FrameError::EventTooLarge { limit: 4 })
        );
        assert_eq!(drain(&mut framer), vec![b"abc".to_vec(), b"xyz".to_vec()]);
    }

    #[test]
    fn a_line_exactly_at_the_limit_is_accepted() {
        let mut framer = LineFramer::new(4);
        framer.push(b"abcd").unwrap();
        framer.push(b"\n").unwrap();
        assert_eq!(drain(&mut framer), vec![b"abcd".to_vec()]);
    }

    #[test]
    fn memory_stays_bounded_while_an_oversize_line_streams_in() {
        let mut framer = LineFramer::new(1000);
        let chunk = [b'x'; 100];
        let mut errors = 0;
        for _ in 0..1000 {
            if framer.push(&chunk).is_err() {
                errors += 1;
            }
        }
        assert_eq!(errors, 1, "reported once, not once per chunk");
        assert!(framer.peak_buffered_bytes() <= 1000);
        assert_eq!(framer.buffered_bytes(), 0);
    }
}
