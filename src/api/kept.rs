//! What the watch keeps of each object, and in what form. Support: a learner may skip it on first
//! read — `api.rs` says which fields the operator reads; this file makes keeping them cheap.
//!
//! WORKSHOP.md, step 02 ("Decoding an event"). The store holds every object for as long as it exists,
//! so a field kept that nobody reads costs memory per object, and a map kept as a `BTreeMap`
//! costs a node of eleven slots however few entries it has. So a `PostgresCluster` is decoded
//! without:
//!
//! - the `kubectl.kubernetes.io/last-applied-configuration` annotation (kubectl's copy of the
//!   whole object, as escaped JSON), skipped unread: only `kubectl apply` reads it;
//! - `metadata.managedFields`, `finalizers` and `labels`, which no step reads of a cluster (the
//!   API server selects by labels; a cluster's pods carry labels of their own);
//! - spec and status fields the CRD does not declare (another controller's): the API server
//!   prunes them under our CRD's schema anyway; the declared ones later steps read are named
//!   here, so no field is buffered before it is decoded (serde's `flatten` buffers them all).
//!
//! Annotations live in a [`StringMap`], one sorted slice sized to its entries; a condition's
//! type, status and reason, the apiVersion, kind, namespace and phase, and annotation keys are
//! [`Word`]s, one copy shared by every object. A uid, and the watch store's `namespace/name` key,
//! are [`InlineStr`]s: short enough to live inside the value, with no allocation of their own.
//!
//! It is safe because the operator never writes a `PostgresCluster` back whole: its writes are
//! merge patches (`{"status": ...}`, an annotation), which leave every field they do not name as
//! it is. A type that *is* written back whole (the leader's `Lease`, a `PUT` with its
//! resourceVersion) decodes [`ObjectMeta`] in full, annotations and finalizers included.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::{Mutex, PoisonError};

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Condition, ObjectMeta, OwnerReference, PostgresClusterSpec, PostgresClusterStatus};

/// kubectl's record of the object it last applied: read by `kubectl apply` alone.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A watched object's `metadata`: [`ObjectMeta`] without what only kubectl and the API server
/// read (the last-applied annotation, labels, finalizers, managedFields).
pub fn watched_metadata<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let fields = MetaFields::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: fields.name,
        namespace: fields.namespace,
        uid: fields.uid,
        resource_version: fields.resource_version,
        generation: fields.generation,
        creation_timestamp: fields.creation_timestamp,
        deletion_timestamp: fields.deletion_timestamp,
        labels: Default::default(),
        annotations: fields.annotations,
        finalizers: Vec::new(),
        owner_references: fields.owner_references,
    })
}

/// [`ObjectMeta`]'s fields as a watched object's are decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaFields {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Word,
    #[serde(default)]
    uid: Uid,
    #[serde(default)]
    resource_version: String,
    generation: Option<i64>,
    creation_timestamp: Option<String>,
    deletion_timestamp: Option<String>,
    #[serde(default, deserialize_with = "annotations_but_last_applied")]
    annotations: StringMap,
    #[serde(default)]
    owner_references: Vec<OwnerReference>,
}

/// The annotations, [`LAST_APPLIED_ANNOTATION`]'s value skipped without being built.
fn annotations_but_last_applied<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<StringMap, D::Error> {
    deserializer.deserialize_map(Entries {
        skip: Some(LAST_APPLIED_ANNOTATION),
    })
}

/// The spec fields later steps read, by the names the CRD declares (a test holds them to it).
pub const LATER_SPEC_FIELDS: [&str; 3] = ["backup", "bootstrap", "replication"];
/// The status fields later steps read and write, likewise.
pub const LATER_STATUS_FIELDS: [&str; 5] = [
    "backupRequested",
    "lastBackup",
    "restore",
    "switchover",
    "synchronous",
];

/// [`PostgresClusterSpec`] as decoded: the typed fields, then [`LATER_SPEC_FIELDS`] by name.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SpecFields {
    size: i64,
    version: String,
    #[serde(default)]
    paused: bool,
    backup: Option<Value>,
    bootstrap: Option<Value>,
    replication: Option<Value>,
}

impl From<SpecFields> for PostgresClusterSpec {
    fn from(fields: SpecFields) -> PostgresClusterSpec {
        let later = [fields.backup, fields.bootstrap, fields.replication];
        PostgresClusterSpec {
            size: fields.size,
            version: fields.version,
            paused: fields.paused,
            more: named(LATER_SPEC_FIELDS, later),
        }
    }
}

/// [`PostgresClusterStatus`] as decoded: the typed fields, then [`LATER_STATUS_FIELDS`].
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct StatusFields {
    phase: Option<Word>,
    primary: Option<String>,
    size: Option<i64>,
    ready_instances: Option<i64>,
    current_version: Option<String>,
    selector: Option<String>,
    observed_generation: Option<i64>,
    #[serde(default, deserialize_with = "exact_conditions")]
    conditions: Vec<Condition>,
    backup_requested: Option<Value>,
    last_backup: Option<Value>,
    restore: Option<Value>,
    switchover: Option<Value>,
    synchronous: Option<Value>,
}

impl From<StatusFields> for PostgresClusterStatus {
    fn from(fields: StatusFields) -> PostgresClusterStatus {
        let later = [
            fields.backup_requested,
            fields.last_backup,
            fields.restore,
            fields.switchover,
            fields.synchronous,
        ];
        PostgresClusterStatus {
            phase: fields.phase,
            primary: fields.primary,
            size: fields.size,
            ready_instances: fields.ready_instances,
            current_version: fields.current_version,
            selector: fields.selector,
            observed_generation: fields.observed_generation,
            conditions: fields.conditions,
            more: named(LATER_STATUS_FIELDS, later),
        }
    }
}

thread_local! {
    /// One event's conditions as they are decoded, reused from event to event.
    static CONDITIONS: std::cell::Cell<Vec<Condition>> = const { std::cell::Cell::new(Vec::new()) };
    /// One object's annotations as they are decoded, likewise.
    static ENTRIES: std::cell::Cell<Vec<(Word, String)>> = const { std::cell::Cell::new(Vec::new()) };
}

/// `buffer` copied into a vector of its exact length, the buffer left empty to be reused. A list
/// decoded straight into the kept vector grows by doubling and then shrinks, leaving the
/// allocator a hole per object (the store keeps the list as long as the object).
fn exact<T>(buffer: &mut Vec<T>) -> Vec<T> {
    let mut kept = Vec::with_capacity(buffer.len());
    kept.append(buffer);
    kept
}

/// The conditions, decoded through [`CONDITIONS`] into a vector of their exact length.
fn exact_conditions<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<Condition>, D::Error> {
    struct Conditions;
    impl<'de> Visitor<'de> for Conditions {
        type Value = Vec<Condition>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of conditions")
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut access: A) -> Result<Vec<Condition>, A::Error> {
            let mut buffer = CONDITIONS.take();
            buffer.clear();
            while let Some(condition) = access.next_element()? {
                buffer.push(condition);
            }
            let kept = exact(&mut buffer);
            CONDITIONS.set(buffer);
            Ok(kept)
        }
    }
    deserializer.deserialize_seq(Conditions)
}

/// The later steps' fields that were present (a `null` is as good as absent in a merge patch).
fn named<const N: usize>(names: [&str; N], values: [Option<Value>; N]) -> Map<String, Value> {
    names
        .into_iter()
        .zip(values)
        .filter_map(|(name, value)| Some((name.to_string(), value?)))
        .collect()
}

/// String keys to string values (annotations), sorted by key: a `BTreeMap`'s reads (`get`,
/// `iter` in key order) in one allocation the size of its entries. The keys are [`Word`]s: a
/// cluster's annotations use a few keys over and over.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StringMap {
    /// A boxed slice, not a `Vec`: 16 bytes in the object, not 24 (a change rebuilds it).
    entries: Box<[(Word, String)]>,
}

impl StringMap {
    pub fn new() -> StringMap {
        StringMap::default()
    }

    /// The entries changed by `change`, boxed again at their exact length.
    fn rebuild(&mut self, change: impl FnOnce(&mut Vec<(Word, String)>)) {
        let mut entries = std::mem::take(&mut self.entries).into_vec();
        change(&mut entries);
        self.entries = entries.into_boxed_slice();
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(entry, _)| entry.as_str().cmp(key))
    }

    pub fn get(&self, key: &str) -> Option<&String> {
        self.find(key).ok().map(|at| &self.entries[at].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Set `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: impl Into<Word>, value: String) -> Option<String> {
        let key = key.into();
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.entries[at].1, value)),
            Err(at) => {
                self.rebuild(|entries| entries.insert(at, (key, value)));
                None
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<String> {
        let at = self.find(key).ok()?;
        let mut removed = None;
        self.rebuild(|entries| removed = Some(entries.remove(at).1));
        removed
    }

    pub fn clear(&mut self) {
        self.entries = Box::default();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &String)> {
        self.entries
            .iter()
            .map(|(key, value)| (key.as_str(), value))
    }
}

impl fmt::Debug for StringMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<Word>, V: Into<String>> FromIterator<(K, V)> for StringMap {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> StringMap {
        let mut map = StringMap::new();
        for (key, value) in entries {
            map.insert(key, value.into());
        }
        map
    }
}

impl<K: Into<Word>, V: Into<String>, const N: usize> From<[(K, V); N]> for StringMap {
    fn from(entries: [(K, V); N]) -> StringMap {
        entries.into_iter().collect()
    }
}

impl Serialize for StringMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, value) in self.iter() {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for StringMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<StringMap, D::Error> {
        deserializer.deserialize_map(Entries { skip: None })
    }
}

/// Reads a JSON object of strings into a [`StringMap`], leaving out the key `skip`.
struct Entries {
    skip: Option<&'static str>,
}

impl<'de> Visitor<'de> for Entries {
    type Value = StringMap;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings to strings")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<StringMap, A::Error> {
        let mut entries = ENTRIES.take();
        entries.clear();
        while let Some(key) = access.next_key::<Word>()? {
            if Some(key.as_str()) == self.skip {
                access.next_value::<IgnoredAny>()?;
                continue;
            }
            entries.push((key, access.next_value()?));
        }
        // The API server sends keys sorted (Go's encoding/json sorts map keys); sort anyway, and
        // a repeated key keeps its last value, as a map would.
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries.reverse();
        entries.dedup_by(|later, earlier| later.0 == earlier.0);
        entries.reverse();
        let kept = exact(&mut entries);
        ENTRIES.set(entries);
        Ok(StringMap {
            entries: kept.into_boxed_slice(),
        })
    }
}

/// A short string from a small vocabulary: a condition's type (`Available`), status (`True`) and
/// reason (one CamelCase word); an object's apiVersion, kind, namespace and phase. The first object to carry a word
/// keeps it for the life of the process and every later one shares it, so a kept object holds no
/// copy of its own: three allocations fewer per condition (a heap chunk is 32 B for "True").
#[derive(Clone)]
pub struct Word(Spelling);

/// 16 bytes where a `Cow<'static, str>` takes 24, and an `Option<Word>` 16 too: each variant is
/// one thin pointer, to the shared copy or to a word of its own (rare: past the vocabulary's
/// bounds). A kept condition holds three words, a kept object four more.
#[derive(Clone)]
enum Spelling {
    Shared(&'static &'static str),
    Own(Box<Box<str>>),
}

/// Longer strings are not words: each object keeps its own.
const WORD_MAX_BYTES: usize = 64;
/// The vocabulary's bound (64 KiB at most): a word past it is kept per object, as a `String` is.
const WORDS_MAX: usize = 1024;
static WORDS: Mutex<BTreeMap<&'static str, &'static &'static str>> = Mutex::new(BTreeMap::new());

impl Word {
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Spelling::Shared(word) => word,
            Spelling::Own(word) => word,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.as_str().is_empty()
    }

    /// The shared copy of `word`, made on first sight while the vocabulary has room.
    fn shared(word: &str) -> Option<&'static &'static str> {
        if word.len() > WORD_MAX_BYTES {
            return None;
        }
        // A panic while holding the lock leaves a whole set (each insert is one word).
        let mut words = WORDS.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = words.get(word) {
            return Some(*known);
        }
        if words.len() >= WORDS_MAX {
            return None;
        }
        let spelled: &'static str = Box::leak(Box::<str>::from(word));
        let kept: &'static &'static str = Box::leak(Box::new(spelled));
        words.insert(kept, kept);
        Some(kept)
    }
}

impl Default for Word {
    fn default() -> Word {
        Word(Spelling::Shared(&""))
    }
}

impl From<&str> for Word {
    fn from(word: &str) -> Word {
        match Word::shared(word) {
            Some(shared) => Word(Spelling::Shared(shared)),
            None => Word(Spelling::Own(Box::new(Box::from(word)))),
        }
    }
}

impl From<String> for Word {
    fn from(word: String) -> Word {
        match Word::shared(&word) {
            Some(shared) => Word(Spelling::Shared(shared)),
            None => Word(Spelling::Own(Box::new(word.into_boxed_str()))),
        }
    }
}

impl PartialEq for Word {
    fn eq(&self, other: &Word) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Word {}

impl PartialOrd for Word {
    fn partial_cmp(&self, other: &Word) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Word {
    fn cmp(&self, other: &Word) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for Word {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl Deref for Word {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Word {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Debug for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Word {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

impl PartialEq<str> for Word {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Word {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Word {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<Word> for &str {
    fn eq(&self, other: &Word) -> bool {
        *self == other.as_str()
    }
}

impl PartialEq<Word> for str {
    fn eq(&self, other: &Word) -> bool {
        self == other.as_str()
    }
}

impl Serialize for Word {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de> Deserialize<'de> for Word {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Word, D::Error> {
        struct Words;
        impl Visitor<'_> for Words {
            type Value = Word;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, word: &str) -> Result<Word, E> {
                Ok(Word::from(word))
            }
            fn visit_string<E: serde::de::Error>(self, word: String) -> Result<Word, E> {
                Ok(Word::from(word))
            }
        }
        deserializer.deserialize_str(Words)
    }
}

/// A string an object carries one of, kept at its exact size: up to `N` bytes live inside the
/// value (no allocation), a longer one in a box of its exact length. Read as a `&str`
/// (`Deref`, `as_str`), compared with one (`==`), and written back as it came: nothing is
/// parsed, so an opaque value (a uid, a key) comes back byte for byte.
#[derive(Clone)]
pub struct InlineStr<const N: usize>(Stored<N>);

#[derive(Clone)]
enum Stored<const N: usize> {
    Inline { len: u8, bytes: [u8; N] },
    Boxed(Box<str>),
}

/// 22 bytes inside, 24 in all (a `String`'s size, without its allocation): a store's
/// `namespace/name` key.
pub type Text = InlineStr<22>;
/// 38 bytes inside, 40 in all: a uid's 36 characters (a UUID as the API server writes it).
pub type Uid = InlineStr<38>;

impl<const N: usize> InlineStr<N> {
    /// The length byte counts at most 255.
    const FITS: () = assert!(N <= u8::MAX as usize);

    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Cut from a `&str` at its own length, so always whole characters.
            Stored::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)])
                .expect("an inline string is copied from a str"),
            Stored::Boxed(text) => text,
        }
    }

    /// The bytes, unchecked: what comparisons and ordering read.
    fn as_bytes(&self) -> &[u8] {
        match &self.0 {
            Stored::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Stored::Boxed(text) => text.as_bytes(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }

    /// `text` inside the value, if it fits.
    fn inline(text: &str) -> Option<InlineStr<N>> {
        let () = Self::FITS;
        let len = u8::try_from(text.len()).ok().filter(|_| text.len() <= N)?;
        let mut bytes = [0; N];
        bytes[..text.len()].copy_from_slice(text.as_bytes());
        Some(InlineStr(Stored::Inline { len, bytes }))
    }
}

impl<const N: usize> Default for InlineStr<N> {
    fn default() -> InlineStr<N> {
        InlineStr::from("")
    }
}

impl<const N: usize> From<&str> for InlineStr<N> {
    fn from(text: &str) -> InlineStr<N> {
        InlineStr::inline(text).unwrap_or_else(|| InlineStr(Stored::Boxed(Box::from(text))))
    }
}

impl<const N: usize> From<&String> for InlineStr<N> {
    fn from(text: &String) -> InlineStr<N> {
        InlineStr::from(text.as_str())
    }
}

impl<const N: usize> From<String> for InlineStr<N> {
    fn from(text: String) -> InlineStr<N> {
        match InlineStr::inline(&text) {
            Some(inline) => inline,
            None => InlineStr(Stored::Boxed(text.into_boxed_str())),
        }
    }
}

impl<const N: usize> From<InlineStr<N>> for String {
    fn from(text: InlineStr<N>) -> String {
        match text.0 {
            Stored::Boxed(text) => text.into(),
            Stored::Inline { .. } => text.as_str().to_string(),
        }
    }
}

impl<const N: usize> Deref for InlineStr<N> {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> AsRef<str> for InlineStr<N> {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> std::borrow::Borrow<str> for InlineStr<N> {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl<const N: usize> fmt::Debug for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl<const N: usize> fmt::Display for InlineStr<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

// Equal, ordered and hashed as the `str` it holds (byte order is `str`'s order), so a map keyed
// by it is read with a `&str` (`Borrow`).
impl<const N: usize> PartialEq for InlineStr<N> {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> Eq for InlineStr<N> {}

impl<const N: usize> PartialOrd for InlineStr<N> {
    fn partial_cmp(&self, other: &InlineStr<N>) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<const N: usize> Ord for InlineStr<N> {
    fn cmp(&self, other: &InlineStr<N>) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl<const N: usize> std::hash::Hash for InlineStr<N> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state);
    }
}

impl<const N: usize> PartialEq<str> for InlineStr<N> {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> PartialEq<&str> for InlineStr<N> {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> PartialEq<String> for InlineStr<N> {
    fn eq(&self, other: &String) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl<const N: usize> PartialEq<InlineStr<N>> for str {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        other == self
    }
}

impl<const N: usize> PartialEq<InlineStr<N>> for &str {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        other == self
    }
}

impl<const N: usize> PartialEq<InlineStr<N>> for String {
    fn eq(&self, other: &InlineStr<N>) -> bool {
        other == self
    }
}

impl<const N: usize> Serialize for InlineStr<N> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self)
    }
}

impl<'de, const N: usize> Deserialize<'de> for InlineStr<N> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<InlineStr<N>, D::Error> {
        struct Strings<const N: usize>;
        impl<const N: usize> Visitor<'_> for Strings<N> {
            type Value = InlineStr<N>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<InlineStr<N>, E> {
                Ok(InlineStr::from(text))
            }
            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<InlineStr<N>, E> {
                Ok(InlineStr::from(text))
            }
        }
        deserializer.deserialize_str(Strings::<N>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PostgresCluster;

    /// The later steps' fields named here are the ones the CRD declares beyond the typed ones:
    /// a field added to `kube/crd.yaml` and not here would be dropped at decode.
    #[test]
    fn the_later_fields_are_what_the_crd_declares_beyond_the_typed_ones() {
        let crd = crate::crd::postgres_cluster_crd();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let declared = |part: &str| -> Vec<String> {
            let properties = schema[part]["properties"].as_object().expect("properties");
            properties.keys().cloned().collect()
        };
        let typed_spec = serde_json::to_value(PostgresClusterSpec::new(1, "16")).unwrap();
        let typed_status = [
            "phase",
            "primary",
            "size",
            "readyInstances",
            "currentVersion",
        ]
        .into_iter()
        .chain(["selector", "observedGeneration", "conditions"]);
        let later_spec: Vec<String> = declared("spec")
            .into_iter()
            .filter(|field| typed_spec.get(field).is_none())
            .collect();
        assert_eq!(later_spec, LATER_SPEC_FIELDS);
        let typed_status: Vec<&str> = typed_status.collect();
        let later_status: Vec<String> = declared("status")
            .into_iter()
            .filter(|field| !typed_status.contains(&field.as_str()))
            .collect();
        assert_eq!(later_status, LATER_STATUS_FIELDS);
    }

    /// A watched cluster keeps what the steps read and drops the rest; plain `ObjectMeta` (what a
    /// PUT sends back) keeps the annotation, the labels and the finalizers.
    #[test]
    fn a_watched_cluster_drops_what_no_step_reads() {
        let json = serde_json::json!({
            "metadata": {
                "name": "db", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                "labels": {"team": "a"}, "finalizers": ["example.com/cleanup"],
                "managedFields": [{"manager": "kubectl"}],
                "annotations": {LAST_APPLIED_ANNOTATION: "{\"spec\":{}}", "workshop.example.com/switchover": "db-1"},
            },
            "spec": {"size": 3, "version": "16", "backup": {"keep": 2}, "theirs": 1},
            "status": {"phase": "Running", "switchover": "db-1", "readyReplicas": 3,
                       "conditions": [{"type": "Available", "status": "True", "reason": "Up",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        });
        let cluster: PostgresCluster = serde_json::from_value(json.clone()).unwrap();
        let kept = serde_json::to_value(&cluster.metadata).unwrap();
        assert_eq!(
            kept,
            serde_json::json!({"name": "db", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                               "annotations": {"workshop.example.com/switchover": "db-1"}})
        );
        assert_eq!(
            serde_json::to_value(&cluster.spec.more).unwrap(),
            serde_json::json!({"backup": {"keep": 2}})
        );
        let status = cluster.status.expect("status");
        assert_eq!(
            serde_json::to_value(&status.more).unwrap(),
            serde_json::json!({"switchover": "db-1"})
        );
        assert_eq!(status.conditions.len(), 1);

        let whole: ObjectMeta = serde_json::from_value(json["metadata"].clone()).unwrap();
        assert!(whole.annotations.contains_key(LAST_APPLIED_ANNOTATION));
        assert_eq!(whole.finalizers, ["example.com/cleanup"]);
        assert_eq!(whole.labels.get("team").map(String::as_str), Some("a"));
    }

    /// Every object's conditions share one copy of each word; a string past the word limit stays
    /// each object's own; a decoded list is exactly as long as it has entries (not doubled).
    #[test]
    fn words_are_shared_and_lists_kept_at_their_length() {
        let json = serde_json::json!({"conditions": [
            {"type": "Available", "status": "True", "reason": "Up", "message": "", "lastTransitionTime": "t"},
            {"type": "Progressing", "status": "True", "reason": "Up", "message": "", "lastTransitionTime": "t"},
            {"type": "Degraded", "status": "False", "reason": "Up", "message": "", "lastTransitionTime": "t"},
        ]});
        let first: PostgresClusterStatus = serde_json::from_value(json.clone()).unwrap();
        let second: PostgresClusterStatus = serde_json::from_value(json.clone()).unwrap();
        let (a, b) = (&first.conditions[0], &second.conditions[1]);
        assert!(std::ptr::eq(a.status.as_str(), b.status.as_str()));
        assert!(std::ptr::eq(a.reason.as_str(), b.reason.as_str()));
        assert_eq!(first.conditions.capacity(), 3);
        assert_eq!(serde_json::to_value(&first).unwrap(), json);

        let long = "x".repeat(WORD_MAX_BYTES + 1);
        let (c, d) = (Word::from(long.as_str()), Word::from(long.clone()));
        assert_eq!(c, d);
        assert!(!std::ptr::eq(c.as_str(), d.as_str()));
    }

    /// Reads like a `BTreeMap`: lookups by key, iteration in key order, one value per key.
    #[test]
    fn a_string_map_reads_like_a_sorted_map() {
        let mut map: StringMap = serde_json::from_str(r#"{"b":"2","a":"1","c":"3"}"#).unwrap();
        assert_eq!(map.get("a").map(String::as_str), Some("1"));
        assert_eq!(map.get("z"), None);
        assert_eq!(map.insert("b", "two".into()), Some("2".into()));
        assert_eq!(map.insert("0", "zero".into()), None);
        assert_eq!(map.remove("c"), Some("3".into()));
        let keys: Vec<&str> = map.iter().map(|(key, _)| key).collect();
        assert_eq!(keys, ["0", "a", "b"]);
        assert_eq!(
            serde_json::to_string(&map).unwrap(),
            r#"{"0":"zero","a":"1","b":"two"}"#
        );
        let repeated: StringMap = serde_json::from_str(r#"{"k":"first","k":"last"}"#).unwrap();
        assert_eq!(repeated.len(), 1);
        assert_eq!(repeated.get("k").map(String::as_str), Some("last"));
    }

    /// Up to its bound a string lives inside the value, past it in a box of its own length;
    /// either way it reads, compares, orders, hashes and serializes as the `str` it came from
    /// (a resourceVersion-like decimal and a non-decimal alike: nothing is parsed).
    #[test]
    fn inline_strings_read_back_as_they_came() {
        let cases = [
            "",
            "7",
            "18446744073709551616",
            "not-a-number/π",
            "e220a839-7b1d-4daf-9adf-b90f68c9eb9b",
            "namespace-of-thirty-chars-long/and-a-name",
        ];
        for text in cases {
            let short = Text::from(text);
            let uid = Uid::from(text.to_string());
            assert_eq!(short.as_str(), text);
            assert_eq!(uid, text);
            assert_eq!(short.is_empty(), text.is_empty());
            let owned = text.to_string();
            assert_eq!(short, owned);
            assert_eq!(owned, short);
            assert_eq!(text, short);
            assert_eq!(*text, *short);
            assert_eq!(String::from(uid.clone()), text);
            assert_eq!(format!("{short}|{short:?}"), format!("{text}|{text:?}"));
            let json = serde_json::to_string(&short).unwrap();
            assert_eq!(json, serde_json::to_string(text).unwrap());
            assert_eq!(serde_json::from_str::<Uid>(&json).unwrap(), uid);
            assert_eq!(
                matches!(short.0, Stored::Inline { .. }),
                text.len() <= 22,
                "{text:?}"
            );
            assert_eq!(
                matches!(uid.0, Stored::Inline { .. }),
                text.len() <= 38,
                "{text:?}"
            );
        }
        // 22 bytes fit, 23 do not; a multi-byte character is never cut.
        assert!(matches!(
            Text::from("x".repeat(22)).0,
            Stored::Inline { .. }
        ));
        assert!(matches!(Text::from("x".repeat(23)).0, Stored::Boxed(_)));
        assert_eq!(
            Text::from(format!("{}é", "x".repeat(21))),
            format!("{}é", "x".repeat(21))
        );

        // Ordered as `str` is, so a map keyed by them is read with a `&str`.
        let mut sorted: Vec<Text> = cases.iter().map(|&text| text.into()).collect();
        sorted.sort();
        let mut expected = cases.to_vec();
        expected.sort();
        assert_eq!(sorted, expected);
        let map: std::collections::BTreeMap<Text, usize> = sorted.into_iter().zip(0..).collect();
        assert_eq!(
            map.get("7"),
            Some(&expected.iter().position(|t| *t == "7").unwrap())
        );
    }

    /// What the kept forms cost inside an object: a word, an absent one and the annotations 16
    /// bytes each (a `String` is 24), a `Text` a `String`'s 24 and a `Uid` 40, neither with an
    /// allocation while the string fits.
    #[test]
    fn the_kept_forms_are_their_documented_sizes() {
        use std::mem::size_of;
        assert_eq!(size_of::<Word>(), 16);
        assert_eq!(size_of::<Option<Word>>(), 16);
        assert_eq!(size_of::<StringMap>(), 16);
        assert_eq!(size_of::<Text>(), size_of::<String>());
        assert_eq!(size_of::<Option<Text>>(), size_of::<String>());
        assert_eq!(size_of::<Uid>(), 40);
    }
}
