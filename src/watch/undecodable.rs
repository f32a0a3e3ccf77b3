//! A watch line that is not a plain event, and what it is instead: a bare `Status`, an unknown
//! type, or bytes that do not decode (with an excerpt for the log). Support: a learner may skip
//! it on first read — `event.rs` is the line every healthy watch sends; this is the slow path
//! for the others, taken only when serde's one pass fails.
//!
//! WORKSHOP.md, step 02 ("Decoding an event").

use serde::Deserialize;

use crate::status::Status;

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or JSON whose shape does not fit (a missing `spec`, a number where a string goes).
    #[error("cannot decode watch event ({source}): {excerpt}")]
    Undecodable {
        excerpt: String,
        source: serde_json::Error,
    },
    /// A `type` this client does not know. Kubernetes has had only the five handled here.
    #[error("unknown watch event type {event_type:?}")]
    UnknownType { event_type: String },
    /// Valid JSON with neither `type`/`object` nor `kind: Status`.
    #[error("watch line has no \"type\"/\"object\" and is not a Status: {excerpt}")]
    NotAnEvent { excerpt: String },
}

/// How much of a bad line goes into an error message: enough to recognise it, never megabytes.
const EXCERPT_BYTES: usize = 120;

fn excerpt(line: &[u8]) -> String {
    let cut = line.len().min(EXCERPT_BYTES);
    let mut text = String::from_utf8_lossy(&line[..cut]).into_owned();
    if line.len() > cut {
        text.push_str(&format!("… ({} bytes)", line.len()));
    }
    text
}

/// The slow path, taken only when a line is not a well-formed event: find out what it is instead.
/// `Ok`: the line is a bare `Status`, the server ending the watch.
pub(super) fn not_a_plain_event(
    line: &[u8],
    source: serde_json::Error,
) -> Result<Status, DecodeError> {
    /// The two top-level fields that tell the cases apart; everything else is skipped unread.
    #[derive(Deserialize)]
    struct Outline {
        #[serde(rename = "type")]
        event_type: Option<String>,
        kind: Option<String>,
    }
    let undecodable = |source| DecodeError::Undecodable {
        excerpt: excerpt(line),
        source,
    };
    let Ok(outline) = serde_json::from_slice::<Outline>(line) else {
        return Err(undecodable(source)); // not JSON at all: report the first error
    };
    match outline.event_type {
        Some(event_type) if !KNOWN_TYPES.contains(&event_type.as_str()) => {
            Err(DecodeError::UnknownType { event_type })
        }
        // A known type whose object does not fit `T` (or no object at all).
        Some(_) => Err(undecodable(source)),
        // No `type` at all: a bare Status is the server telling us the watch failed.
        None if outline.kind.as_deref() == Some("Status") => {
            serde_json::from_slice(line).map_err(undecodable)
        }
        None => Err(DecodeError::NotAnEvent {
            excerpt: excerpt(line),
        }),
    }
}

/// Every event type Kubernetes has had: the five `Wire` reads.
const KNOWN_TYPES: [&str; 5] = ["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"];
