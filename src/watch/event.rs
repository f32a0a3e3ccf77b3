//! Lines → events: decode one watch line, `{"type":"ADDED","object":{...}}`, in one pass, into
//! the [`Event`] the consumer gets.
//!
//! WORKSHOP.md, step 02 ("Decoding an event"). The line is an *adjacently tagged* enum in serde's
//! terms: `type` names the variant, `object` holds its content, and serde's derive writes the
//! decoder. The API server writes `type` before `object`, so by the time `object` starts serde
//! already knows the variant and deserializes the object straight into `T` (a `PostgresCluster`,
//! say). Fields of the object that `T` does not name — `managedFields`, the
//! `last-applied-configuration` annotation, most of the metadata — are skipped without being
//! built, which is why this beats parsing into a `serde_json::Value` first (see
//! `benches/watch_decode.rs`). If some other writer puts `object` first, serde buffers it until
//! `type` arrives.
//!
//! An `ADDED`, `MODIFIED` or `DELETED` line comes out as [`Line::Event`]: the object in an `Arc`,
//! already the value the store keeps and the consumer receives. A `BOOKMARK` or an `ERROR` is for
//! the watch loop alone, which reads its resourceVersion or its `Status` and never passes it on.

use std::sync::Arc;

use super::undecodable::not_a_plain_event;
pub use super::undecodable::DecodeError;
use crate::api::ObjectMeta;
use crate::status::Status;
use crate::watch::notice::WatchNotice;
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// What `list_then_watch` hands its consumer, in order: a change to one object, or a notice of
/// what the watch is doing. The one event type of the watch: the decoder makes the object
/// variants, the watch stores their `Arc` and sends the same value on.
///
/// After a relist (a 410, or an oversize event) the consumer is told what changed while the watch
/// was away, in these same terms: `Added` for objects it has not seen, `Modified` for objects whose
/// resourceVersion moved, `Deleted` (with the last state it was given) for objects that vanished.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<T> {
    Added(Arc<T>),
    Modified(Arc<T>),
    Deleted(Arc<T>),
    /// Listed, watching, resumed, relisted, retrying: see [`WatchNotice`]. In the same channel as
    /// the changes, so a notice always comes before the events it explains.
    Notice(WatchNotice),
}

impl<T> Event<T> {
    /// The object a change is about; None for a notice.
    pub fn object(&self) -> Option<&T> {
        match self {
            Event::Added(object) | Event::Modified(object) | Event::Deleted(object) => Some(object),
            Event::Notice(_) => None,
        }
    }

    /// `ADDED`, `MODIFIED` or `DELETED`, as the API server spells it; `NOTICE` for a notice,
    /// which no API server sends.
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Added(_) => "ADDED",
            Event::Modified(_) => "MODIFIED",
            Event::Deleted(_) => "DELETED",
            Event::Notice(_) => "NOTICE",
        }
    }
}

/// One decoded watch line.
// A line lives for one loop iteration and is moved, not copied about: boxing the Status would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum Line<T> {
    /// ADDED, MODIFIED or DELETED: the event as the consumer will get it.
    Event(Event<T>),
    /// "You are up to date as of this resourceVersion." Only the RV is meaningful: the object is
    /// an empty shell of the kind, with `metadata.resourceVersion` set.
    Bookmark { resource_version: String },
    /// The server ended the watch with an error, e.g. 410 Expired: our RV is too old.
    Error(Status),
}

/// The line as serde's derive reads it; [`decode_line`] turns it into a [`Line`] at once.
#[allow(clippy::large_enum_variant)]
#[derive(Deserialize)]
#[serde(
    tag = "type",
    content = "object",
    rename_all = "UPPERCASE",
    bound(deserialize = "T: DeserializeOwned")
)]
enum Wire<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    /// Its object is `{"kind":..,"apiVersion":..,"metadata":{"resourceVersion":"12345"}}`:
    /// nothing but `metadata.resourceVersion` is promised, and the watch loop reads nothing else.
    Bookmark {
        metadata: ObjectMeta,
    },
    Error(Status),
}

/// Decode one line from a watch stream.
///
/// A line that is a bare `Status` (no `type`) also counts as an error: some proxies and old
/// servers end a watch that way.
pub fn decode_line<T: DeserializeOwned>(line: &[u8]) -> Result<Line<T>, DecodeError> {
    // One UTF-8 check of the whole line, then no check per string (`from_str` skips them); a
    // line that is not UTF-8 takes `from_slice`, whose error says where.
    let decoded = match std::str::from_utf8(line) {
        Ok(text) => serde_json::from_str::<Wire<T>>(text),
        Err(_) => serde_json::from_slice::<Wire<T>>(line),
    };
    let wire = match decoded {
        Ok(wire) => wire,
        Err(source) => return not_a_plain_event(line, source).map(Line::Error),
    };
    Ok(match wire {
        Wire::Added(object) => Line::Event(Event::Added(Arc::new(object))),
        Wire::Modified(object) => Line::Event(Event::Modified(Arc::new(object))),
        Wire::Deleted(object) => Line::Event(Event::Deleted(Arc::new(object))),
        Wire::Bookmark { metadata } => Line::Bookmark {
            resource_version: metadata.resource_version,
        },
        Wire::Error(status) => Line::Error(status),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PostgresCluster;

    const ADDED: &str = r#"{"type":"ADDED","object":{"apiVersion":"workshop.example.com/v1","kind":"PostgresCluster","metadata":{"name":"db","namespace":"default","uid":"u1","resourceVersion":"42","managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}],"annotations":{"note":"日本 é"}},"spec":{"size":3,"version":"9.6.3"}}}"#;

    #[test]
    fn added_decodes_straight_into_the_typed_object() {
        let line: Line<PostgresCluster> = decode_line(ADDED.as_bytes()).unwrap();
        let Line::Event(Event::Added(cluster)) = line else {
            panic!("expected ADDED, got {line:?}")
        };
        assert_eq!(cluster.key(), "default/db");
        assert_eq!(cluster.metadata.resource_version, "42");
        assert_eq!(cluster.spec.size, 3);
        assert!(!cluster.spec.paused);
    }

    #[test]
    fn modified_and_deleted_carry_the_object() {
        let modified = br#"{"type":"MODIFIED","object":{"metadata":{"name":"db","resourceVersion":"43"},"spec":{"size":5,"version":"9.6.3"}}}"#;
        let deleted = br#"{"type":"DELETED","object":{"metadata":{"name":"db","resourceVersion":"44"},"spec":{"size":5,"version":"9.6.3"}}}"#;
        assert!(matches!(
            decode_line::<PostgresCluster>(modified).unwrap(),
            Line::Event(Event::Modified(c)) if c.spec.size == 5
        ));
        assert!(matches!(
            decode_line::<PostgresCluster>(deleted).unwrap(),
            Line::Event(Event::Deleted(c)) if c.metadata.resource_version == "44"
        ));
    }

    #[test]
    fn a_bookmark_needs_only_the_resource_version() {
        let line = br#"{"type":"BOOKMARK","object":{"kind":"PostgresCluster","apiVersion":"workshop.example.com/v1","metadata":{"resourceVersion":"12345"}}}"#;
        assert_eq!(
            decode_line::<PostgresCluster>(line).unwrap(),
            Line::Bookmark {
                resource_version: "12345".into()
            }
        );
    }

    #[test]
    fn an_in_stream_error_carries_the_status() {
        let line = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 657887 (680402)","reason":"Expired","code":410}}"#;
        let Line::Error(status) = decode_line::<PostgresCluster>(line).unwrap() else {
            panic!("expected ERROR")
        };
        assert!(status.is_expired());
        assert_eq!(status.reason, "Expired");
    }

    #[test]
    fn a_bare_status_line_is_an_error_event() {
        let line = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Gone","code":410}"#;
        let Line::Error(status) = decode_line::<PostgresCluster>(line).unwrap() else {
            panic!("expected ERROR")
        };
        assert_eq!(status.reason, "Gone");
        assert!(status.is_expired());
    }

    #[test]
    fn object_before_type_still_decodes() {
        let line = br#"{"object":{"metadata":{"name":"db","resourceVersion":"7"},"spec":{"size":1,"version":"16"}},"type":"MODIFIED"}"#;
        assert!(matches!(
            decode_line::<PostgresCluster>(line).unwrap(),
            Line::Event(Event::Modified(c)) if c.metadata.resource_version == "7"
        ));
    }

    #[test]
    fn an_unknown_type_is_named_in_the_error() {
        let line = br#"{"type":"SHRUGGED","object":{"a":[1,2,{"b":null}]}}"#;
        let error = decode_line::<PostgresCluster>(line).unwrap_err();
        assert!(
            matches!(&error, DecodeError::UnknownType { event_type } if event_type == "SHRUGGED")
        );
        assert!(error.to_string().contains("SHRUGGED"));
    }

    #[test]
    fn malformed_json_gives_a_short_excerpt() {
        let mut line = br#"{"type":"ADDED","object":{"metadata":"#.to_vec();
        line.extend(std::iter::repeat_n(b'x', 1_000_000));
        let error = decode_line::<PostgresCluster>(&line).unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, DecodeError::Undecodable { .. }));
        assert!(
            text.len() < 400,
            "the message must not carry the whole line: {} bytes",
            text.len()
        );
        assert!(text.contains("bytes)"), "{text}");
    }

    #[test]
    fn an_object_missing_its_spec_is_undecodable_and_says_why() {
        let line = br#"{"type":"ADDED","object":{"metadata":{"name":"db"}}}"#;
        let error = decode_line::<PostgresCluster>(line).unwrap_err();
        assert!(
            error.to_string().contains("missing field `spec`"),
            "{error}"
        );
    }

    #[test]
    fn a_line_that_is_neither_event_nor_status_is_rejected() {
        let error = decode_line::<PostgresCluster>(br#"{"kind":"Pod"}"#).unwrap_err();
        assert!(matches!(error, DecodeError::NotAnEvent { .. }));
        let error = decode_line::<PostgresCluster>(br#"{"type":"ADDED"}"#).unwrap_err();
        assert!(
            error.to_string().contains("missing field `object`"),
            "{error}"
        );
    }
}
