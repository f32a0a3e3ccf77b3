//! Lines → typed events: decode one watch line, `{"type":"ADDED","object":{...}}`, in one pass.
//!
//! WORKSHOP.md, step 02 ("Decoding an event"). The API server writes `type` before `object`, so
//! by the time `object` starts we already know what it is and deserialize it straight into `T`
//! (a `PostgresCluster`, say). Fields of the object that `T` does not name — `managedFields`, the
//! `last-applied-configuration` annotation, most of the metadata — are skipped without being
//! built, which is why this beats parsing into a `serde_json::Value` first (see
//! `benches/watch_decode.rs`). If some other writer puts `object` first, we fall back to holding it
//! as a `Value` until `type` arrives.

use crate::status::Status;
use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use std::fmt;
use std::marker::PhantomData;

/// One decoded watch line.
// An event lives for one loop iteration and is moved, not copied about: boxing the Status would
// only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum WatchEvent<T> {
    Added(T),
    Modified(T),
    Deleted(T),
    /// "You are up to date as of this resourceVersion." Only the RV is meaningful: the object is
    /// an empty shell of the kind, with `metadata.resourceVersion` set.
    Bookmark {
        resource_version: String,
    },
    /// The server ended the watch with an error, e.g. 410 Expired: our RV is too old.
    Error(Status),
}

#[derive(Debug)]
pub enum DecodeError {
    /// Not JSON, or JSON whose shape does not fit (a missing `spec`, a number where a string goes).
    Undecodable {
        excerpt: String,
        source: serde_json::Error,
    },
    /// A `type` this client does not know. Kubernetes has had only the five handled here.
    UnknownType { event_type: String },
    /// Valid JSON with neither `type`/`object` nor `kind: Status`.
    NotAnEvent { excerpt: String },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Undecodable { excerpt, source } => {
                write!(f, "cannot decode watch event ({source}): {excerpt}")
            }
            DecodeError::UnknownType { event_type } => {
                write!(f, "unknown watch event type {event_type:?}")
            }
            DecodeError::NotAnEvent { excerpt } => write!(
                f,
                "watch line has no \"type\"/\"object\" and is not a Status: {excerpt}"
            ),
        }
    }
}

impl std::error::Error for DecodeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DecodeError::Undecodable { source, .. } => Some(source),
            _ => None,
        }
    }
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

/// Decode one line from a watch stream.
///
/// A line that is a bare `Status` (no `type`) also counts as an error event: some proxies and old
/// servers end a watch that way.
pub fn decode_event<T: DeserializeOwned>(line: &[u8]) -> Result<WatchEvent<T>, DecodeError> {
    let decoded: Decoded<T> =
        serde_json::from_slice(line).map_err(|source| DecodeError::Undecodable {
            excerpt: excerpt(line),
            source,
        })?;
    match decoded {
        Decoded::Event(event) => Ok(event),
        Decoded::UnknownType(event_type) => Err(DecodeError::UnknownType { event_type }),
        Decoded::NotAnEvent => Err(DecodeError::NotAnEvent {
            excerpt: excerpt(line),
        }),
    }
}

/// What the visitor found; the two non-event cases become `DecodeError`s with the line at hand.
#[allow(clippy::large_enum_variant)]
enum Decoded<T> {
    Event(WatchEvent<T>),
    UnknownType(String),
    NotAnEvent,
}

#[derive(Clone, Debug, PartialEq)]
enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
    Unknown(String),
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EventTypeVisitor;
        impl Visitor<'_> for EventTypeVisitor {
            type Value = EventType;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a watch event type such as \"ADDED\"")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<EventType, E> {
                Ok(match value {
                    "ADDED" => EventType::Added,
                    "MODIFIED" => EventType::Modified,
                    "DELETED" => EventType::Deleted,
                    "BOOKMARK" => EventType::Bookmark,
                    "ERROR" => EventType::Error,
                    other => EventType::Unknown(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_str(EventTypeVisitor)
    }
}

/// The keys of a watch line we act on; anything else is kept only in case the line is a Status.
enum Key {
    Type,
    Object,
    Other(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Key, E> {
                Ok(match value {
                    "type" => Key::Type,
                    "object" => Key::Object,
                    other => Key::Other(other.to_owned()),
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// A BOOKMARK's object: `{"kind":..,"apiVersion":..,"metadata":{"resourceVersion":"12345"}}`.
/// Nothing else is promised, so nothing else is read.
#[derive(Deserialize)]
struct BookmarkObject {
    metadata: BookmarkMetadata,
}

#[derive(Deserialize)]
struct BookmarkMetadata {
    #[serde(rename = "resourceVersion")]
    resource_version: String,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Decoded<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(LineVisitor(PhantomData))
    }
}

struct LineVisitor<T>(PhantomData<T>);

/// Decode `object` now that we know the event type. Done once per line, whichever key came first.
fn object_for<'de, T, D>(event_type: EventType, object: D) -> Result<Decoded<T>, D::Error>
where
    T: DeserializeOwned,
    D: Deserializer<'de>,
{
    Ok(Decoded::Event(match event_type {
        EventType::Added => WatchEvent::Added(T::deserialize(object)?),
        EventType::Modified => WatchEvent::Modified(T::deserialize(object)?),
        EventType::Deleted => WatchEvent::Deleted(T::deserialize(object)?),
        EventType::Bookmark => WatchEvent::Bookmark {
            resource_version: BookmarkObject::deserialize(object)?
                .metadata
                .resource_version,
        },
        EventType::Error => WatchEvent::Error(Status::deserialize(object)?),
        EventType::Unknown(name) => {
            IgnoredAny::deserialize(object)?;
            return Ok(Decoded::UnknownType(name));
        }
    }))
}

impl<'de, T: DeserializeOwned> Visitor<'de> for LineVisitor<T> {
    type Value = Decoded<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a watch event object {\"type\":..,\"object\":..}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Decoded<T>, A::Error> {
        let mut event_type: Option<EventType> = None;
        let mut decoded: Option<Decoded<T>> = None;
        // Only filled when `object` precedes `type` (never, from a real API server).
        let mut early_object: Option<serde_json::Value> = None;
        // Other top-level fields, in case the whole line is a bare Status.
        let mut other_fields = serde_json::Map::new();

        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => {
                    let kind: EventType = map.next_value()?;
                    if let Some(object) = early_object.take() {
                        decoded = Some(
                            object_for::<T, _>(kind.clone(), object).map_err(de::Error::custom)?,
                        );
                    }
                    event_type = Some(kind);
                }
                Key::Object => match &event_type {
                    Some(kind) => {
                        decoded = Some(map.next_value_seed(ObjectSeed::<T> {
                            event_type: kind.clone(),
                            marker: PhantomData,
                        })?);
                    }
                    None => early_object = Some(map.next_value()?),
                },
                Key::Other(name) => {
                    if event_type.is_none() {
                        other_fields.insert(name, map.next_value()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
        }

        if let Some(decoded) = decoded {
            return Ok(decoded);
        }
        if event_type.is_some() || early_object.is_some() {
            return Err(de::Error::missing_field(if event_type.is_some() {
                "object"
            } else {
                "type"
            }));
        }
        // No `type` at all: a bare Status is the server telling us the watch failed.
        if other_fields.get("kind").and_then(|kind| kind.as_str()) == Some("Status") {
            let status: Status = serde_json::from_value(serde_json::Value::Object(other_fields))
                .map_err(de::Error::custom)?;
            return Ok(Decoded::Event(WatchEvent::Error(status)));
        }
        Ok(Decoded::NotAnEvent)
    }
}

/// Lets `next_value_seed` hand the object's deserializer to `object_for` without buffering.
struct ObjectSeed<T> {
    event_type: EventType,
    marker: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> de::DeserializeSeed<'de> for ObjectSeed<T> {
    type Value = Decoded<T>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Decoded<T>, D::Error> {
        object_for::<T, D>(self.event_type, deserializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PostgresCluster;

    const ADDED: &str = r#"{"type":"ADDED","object":{"apiVersion":"workshop.example.com/v1","kind":"PostgresCluster","metadata":{"name":"db","namespace":"default","uid":"u1","resourceVersion":"42","managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}],"annotations":{"note":"日本 é"}},"spec":{"size":3,"version":"9.6.3"}}}"#;

    #[test]
    fn added_decodes_straight_into_the_typed_object() {
        let event: WatchEvent<PostgresCluster> = decode_event(ADDED.as_bytes()).unwrap();
        let WatchEvent::Added(cluster) = event else {
            panic!("expected ADDED, got {event:?}")
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
            decode_event::<PostgresCluster>(modified).unwrap(),
            WatchEvent::Modified(c) if c.spec.size == 5
        ));
        assert!(matches!(
            decode_event::<PostgresCluster>(deleted).unwrap(),
            WatchEvent::Deleted(c) if c.metadata.resource_version == "44"
        ));
    }

    #[test]
    fn a_bookmark_needs_only_the_resource_version() {
        let line = br#"{"type":"BOOKMARK","object":{"kind":"PostgresCluster","apiVersion":"workshop.example.com/v1","metadata":{"resourceVersion":"12345"}}}"#;
        assert_eq!(
            decode_event::<PostgresCluster>(line).unwrap(),
            WatchEvent::Bookmark {
                resource_version: "12345".into()
            }
        );
    }

    #[test]
    fn an_in_stream_error_carries_the_status() {
        let line = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 657887 (680402)","reason":"Expired","code":410}}"#;
        let WatchEvent::Error(status) = decode_event::<PostgresCluster>(line).unwrap() else {
            panic!("expected ERROR")
        };
        assert!(status.is_expired());
        assert_eq!(status.reason, "Expired");
    }

    #[test]
    fn a_bare_status_line_is_an_error_event() {
        let line = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"gone","reason":"Gone","code":410}"#;
        let WatchEvent::Error(status) = decode_event::<PostgresCluster>(line).unwrap() else {
            panic!("expected ERROR")
        };
        assert_eq!(status.reason, "Gone");
        assert!(status.is_expired());
    }

    #[test]
    fn object_before_type_still_decodes() {
        let line = br#"{"object":{"metadata":{"name":"db","resourceVersion":"7"},"spec":{"size":1,"version":"16"}},"type":"MODIFIED"}"#;
        assert!(matches!(
            decode_event::<PostgresCluster>(line).unwrap(),
            WatchEvent::Modified(c) if c.metadata.resource_version == "7"
        ));
    }

    #[test]
    fn an_unknown_type_is_named_in_the_error() {
        let line = br#"{"type":"SHRUGGED","object":{"a":[1,2,{"b":null}]}}"#;
        let error = decode_event::<PostgresCluster>(line).unwrap_err();
        assert!(
            matches!(&error, DecodeError::UnknownType { event_type } if event_type == "SHRUGGED")
        );
        assert!(error.to_string().contains("SHRUGGED"));
    }

    #[test]
    fn malformed_json_gives_a_short_excerpt() {
        let mut line = br#"{"type":"ADDED","object":{"metadata":"#.to_vec();
        line.extend(std::iter::repeat_n(b'x', 1_000_000));
        let error = decode_event::<PostgresCluster>(&line).unwrap_err();
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
        let error = decode_event::<PostgresCluster>(line).unwrap_err();
        assert!(
            error.to_string().contains("missing field `spec`"),
            "{error}"
        );
    }

    #[test]
    fn a_line_that_is_neither_event_nor_status_is_rejected() {
        let error = decode_event::<PostgresCluster>(br#"{"kind":"Pod"}"#).unwrap_err();
        assert!(matches!(error, DecodeError::NotAnEvent { .. }));
        let error = decode_event::<PostgresCluster>(br#"{"type":"ADDED"}"#).unwrap_err();
        assert!(
            error.to_string().contains("missing field `object`"),
            "{error}"
        );
    }
}
