//! Chunk boundaries never change what a watch stream means.
//!
//! WORKSHOP.md, step 02 ("Chunks are not events"). A recorded stream (with `é` and `日本` in labels
//! and annotations, so some splits land inside a UTF-8 character) is cut into chunks every way we
//! can think of; framing + decoding must always yield the same events as decoding the lines whole.

use bytes::Bytes;
use postgres_operator::api::PostgresCluster;
use postgres_operator::watch::event::{decode_line, Line};
use postgres_operator::watch::frame::{FrameError, LineFramer};
use proptest::prelude::*;

fn event_line(event_type: &str, name: &str, rv: u64, size: u64) -> String {
    format!(
        concat!(
            r#"{{"type":"{}","object":{{"apiVersion":"workshop.example.com/v1","kind":"PostgresCluster","#,
            r#""metadata":{{"name":"{}","namespace":"default","uid":"uid-{}","resourceVersion":"{}","#,
            r#""labels":{{"team":"café","region":"日本"}},"annotations":{{"note":"naïve — 日本語 ✓"}},"#,
            r#""managedFields":[{{"manager":"kubectl","operation":"Update","fieldsV1":{{"f:spec":{{}}}}}}]}},"#,
            r#""spec":{{"size":{},"version":"9.6.3"}}}}}}"#
        ),
        event_type, name, name, rv, size
    )
}

/// A small recorded stream: adds, a bookmark, modifies, a delete, an empty line and a `\r\n`.
fn recorded_stream() -> Vec<u8> {
    let mut text = String::new();
    text.push_str(&event_line("ADDED", "alpha", 10, 3));
    text.push('\n');
    text.push_str(&event_line("ADDED", "beta-日本", 11, 1));
    text.push_str("\r\n\n");
    text.push_str(r#"{"type":"BOOKMARK","object":{"kind":"PostgresCluster","apiVersion":"workshop.example.com/v1","metadata":{"resourceVersion":"12"}}}"#);
    text.push('\n');
    text.push_str(&event_line("MODIFIED", "alpha", 13, 5));
    text.push('\n');
    text.push_str(&event_line("DELETED", "beta-日本", 14, 1));
    text.push('\n');
    text.into_bytes()
}

/// What each line means, in a comparable form.
fn summary(line: &Line<PostgresCluster>) -> String {
    match line {
        Line::Event(event) => match event.object() {
            Some(c) => format!(
                "{} {} {} {}",
                event.type_name(),
                c.key(),
                c.metadata.resource_version,
                c.spec
            ),
            None => format!("{event:?}"),
        },
        Line::Bookmark { resource_version } => format!("BOOKMARK {resource_version}"),
        Line::Error(status) => format!("ERROR {status}"),
    }
}

fn expected_events(stream: &[u8]) -> Vec<String> {
    stream
        .split(|&byte| byte == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.is_empty())
        .map(|line| summary(&decode_line(line).expect("the recorded stream decodes")))
        .collect()
}

/// Feed `stream` cut at `cuts` (sorted byte offsets) and decode every line that comes out.
fn frame_and_decode(stream: &[u8], cuts: &[usize], max_event_bytes: usize) -> Vec<String> {
    let mut framer = LineFramer::new(max_event_bytes);
    let mut events = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().chain(std::iter::once(&stream.len())) {
        let cut = cut.clamp(start, stream.len());
        framer
            .push_bytes(Bytes::copy_from_slice(&stream[start..cut]))
            .expect("no oversize line");
        start = cut;
        while let Some(line) = framer.next_line() {
            events.push(summary(
                &decode_line(&line).expect("a complete line decodes"),
            ));
        }
    }
    while let Some(line) = framer.finish() {
        events.push(summary(
            &decode_line(&line).expect("a complete line decodes"),
        ));
    }
    events
}

/// Splitting the stream in two at every byte, including inside `é` and `日本`, changes nothing.
#[test]
fn a_split_at_every_byte_yields_the_same_events() {
    let stream = recorded_stream();
    let expected = expected_events(&stream);
    assert_eq!(expected.len(), 5);
    let mut inside_a_character = 0;
    for cut in 0..=stream.len() {
        if cut < stream.len() && (stream[cut] & 0xC0) == 0x80 {
            inside_a_character += 1;
        }
        assert_eq!(
            frame_and_decode(&stream, &[cut], 1 << 20),
            expected,
            "cut at {cut}"
        );
    }
    assert!(
        inside_a_character > 10,
        "the stream must have splits inside multi-byte characters"
    );
}

/// One byte per chunk is the worst case a server or proxy can produce.
#[test]
fn one_byte_chunks_yield_the_same_events() {
    let stream = recorded_stream();
    let cuts: Vec<usize> = (1..stream.len()).collect();
    assert_eq!(
        frame_and_decode(&stream, &cuts, 1 << 20),
        expected_events(&stream)
    );
}

/// Many events in a single chunk all come out, in order.
#[test]
fn many_events_in_one_chunk_all_come_out() {
    let mut stream = Vec::new();
    for rv in 0..500 {
        stream.extend_from_slice(event_line("MODIFIED", "alpha", rv, rv % 7 + 1).as_bytes());
        stream.push(b'\n');
    }
    let events = frame_and_decode(&stream, &[], 1 << 20);
    assert_eq!(events.len(), 500);
    assert_eq!(events, expected_events(&stream));
}

/// A 5 MB event (a huge annotation) is framed and decoded whole, in 16 KB chunks.
#[test]
fn a_five_megabyte_event_is_delivered_whole() {
    let big_note = "日本é".repeat(5 * 1024 * 1024 / 8);
    let line = event_line("ADDED", "huge", 99, 3).replace("naïve — 日本語 ✓", &big_note);
    assert!(line.len() > 5_000_000);
    let mut stream = line.into_bytes();
    stream.push(b'\n');
    let cuts: Vec<usize> = (1..stream.len() / 16384 + 1).map(|i| i * 16384).collect();
    let events = frame_and_decode(&stream, &cuts, 16 << 20);
    assert_eq!(
        events,
        vec!["ADDED default/huge 99 {size: 3, version: 9.6.3, paused: false}"]
    );
}

/// A server that closes right after the last event, without a final `\n`, still delivers it.
#[test]
fn the_last_line_without_a_newline_is_delivered() {
    let mut stream = recorded_stream();
    assert_eq!(stream.pop(), Some(b'\n'));
    let cuts: Vec<usize> = (0..stream.len()).step_by(7).collect();
    assert_eq!(
        frame_and_decode(&stream, &cuts, 1 << 20),
        expected_events(&stream)
    );
}

/// An event over the limit is a clear error, memory stays at the limit, and the next event after it
/// is framed correctly.
#[test]
fn an_oversize_event_is_an_error_and_framing_recovers_after_it() {
    let limit = 4096;
    let oversize = event_line("ADDED", "big", 1, 3).replace("naïve", &"x".repeat(10_000));
    let after = event_line("ADDED", "after", 2, 3);
    let stream = format!("{oversize}\n{after}\n").into_bytes();

    let mut framer = LineFramer::new(limit);
    let mut errors = Vec::new();
    let mut lines = Vec::new();
    for chunk in stream.chunks(1000) {
        if let Err(error) = framer.push_bytes(Bytes::copy_from_slice(chunk)) {
            errors.push(error);
        }
        while let Some(line) = framer.next_line() {
            lines.push(line);
        }
    }
    assert_eq!(errors, vec![FrameError::EventTooLarge { limit }]);
    assert!(errors[0].to_string().contains("4096-byte limit"));
    assert!(framer.peak_buffered_bytes() <= limit);
    assert_eq!(lines.len(), 1);
    assert_eq!(
        summary(&decode_line(&lines[0]).unwrap()),
        "ADDED default/after 2 {size: 3, version: 9.6.3, paused: false}"
    );
}

/// Only blank lines (`\n`, `\r\n`) produce no events at all.
#[test]
fn blank_lines_produce_no_events() {
    let mut framer = LineFramer::new(64);
    framer
        .push_bytes(Bytes::from_static(b"\n\r\n\n\r\n"))
        .unwrap();
    assert_eq!(framer.next_line(), None);
    assert_eq!(framer.finish(), None);
}

proptest! {
    /// Any chunking of the recorded stream yields exactly the events of the unsplit lines.
    #[test]
    fn any_chunking_yields_the_same_events(mut cuts in proptest::collection::vec(0usize..2000, 0..40)) {
        let stream = recorded_stream();
        cuts.sort_unstable();
        prop_assert_eq!(frame_and_decode(&stream, &cuts, 1 << 20), expected_events(&stream));
    }
}
