//! The sandbox's etcd: every object, one global revision (the resourceVersion), a bounded
//! history of events for watches that resume, and the fan-out of each event to every watcher.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and step 02 (what a resourceVersion is). As in etcd, the
//! revision counts writes to *any* object, so RVs of one kind jump; clients must treat them as
//! opaque. The store lock is a plain `std::sync::Mutex` held only for in-memory work, never
//! across an `.await`: a watcher never blocks a write. Each watcher has a bounded queue; when it
//! is full the watcher is dropped and its stream ends, as kube-apiserver ends watchers that fall
//! behind (the client re-watches from its last RV).
//!
//! With a data directory each commit is first written to the store file (`store_file.rs`),
//! then applied in memory; a restarted store loads the file and goes on from its revision.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::resources::Registry;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store_file::{Loaded, StoreFile};
use crate::sync::lock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One committed change, as kept in the history window.
#[derive(Debug)]
pub(crate) struct StoredEvent {
    pub(crate) revision: u64,
    pub(crate) store_key: String,
    pub(crate) event_type: EventType,
    /// The new state; for DELETED the last state, carrying the deletion's own resourceVersion.
    pub(crate) object: Arc<Value>,
    /// The state before a MODIFIED or DELETED: selectors are checked against both.
    pub(crate) previous: Option<Arc<Value>>,
    /// `object` serialised once and shared by every watcher that gets it unchanged.
    json: OnceLock<Bytes>,
}

impl StoredEvent {
    pub(crate) fn object_json(&self) -> Bytes {
        self.json
            .get_or_init(|| Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()))
            .clone()
    }
}

/// What one watcher receives through its queue.
#[derive(Clone, Debug)]
pub(crate) enum WatchMessage {
    /// An event exactly as committed (the common case: the object JSON is shared).
    Event(Arc<StoredEvent>),
    /// An event adjusted for this watcher: an object that stopped matching its selector becomes
    /// DELETED, one that started matching becomes ADDED (kube-apiserver's watch cache does this).
    Adjusted {
        event_type: EventType,
        object: Arc<Value>,
    },
    /// The store has reached this revision; nothing this watcher wants happened up to it.
    Bookmark(u64),
    /// The end of the initial ADDED events of a `sendInitialEvents=true` watch, at this revision.
    InitialEventsEnd(u64),
}

/// Which objects a watch or list wants.
#[derive(Clone, Debug, Default)]
pub(crate) struct Filter {
    pub(crate) store_key: String,
    pub(crate) namespace: Option<String>,
    pub(crate) label_selector: Option<LabelSelector>,
    pub(crate) field_selector: Option<FieldSelector>,
}

impl Filter {
    pub(crate) fn matches(&self, object: &Value) -> bool {
        let metadata = &object["metadata"];
        if let Some(namespace) = &self.namespace {
            if metadata["namespace"].as_str().unwrap_or_default() != namespace {
                return false;
            }
        }
        if let Some(selector) = &self.label_selector {
            if !selector.matches_object(object) {
                return false;
            }
        }
        if let Some(selector) = &self.field_selector {
            if !selector.matches(object) {
                return false;
            }
        }
        true
    }

    /// What this filter's watcher should see of `event`, if anything.
    fn deliver(&self, event: &Arc<StoredEvent>) -> Option<WatchMessage> {
        if self.store_key != event.store_key {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.previous.as_deref().map(|p| self.matches(p));
        match (event.event_type, before, now) {
            (EventType::Added, _, true) => Some(WatchMessage::Event(event.clone())),
            (EventType::Deleted, _, true) => Some(WatchMessage::Event(event.clone())),
            (EventType::Modified, Some(true), true) => Some(WatchMessage::Event(event.clone())),
            (EventType::Modified, Some(false), true) => Some(WatchMessage::Adjusted {
                event_type: EventType::Added,
                object: event.object.clone(),
            }),
            (EventType::Modified, Some(true), false) => {
                // Left the selector: DELETED with the last matching state at this event's RV.
                let mut last = event.previous.as_deref().cloned().unwrap_or_default();
                last["metadata"]["resourceVersion"] = json!(event.revision.to_string());
                Some(WatchMessage::Adjusted {
                    event_type: EventType::Deleted,
                    object: Arc::new(last),
                })
            }
            _ => None,
        }
    }
}

struct Watcher {
    id: u64,
    filter: Filter,
    sender: mpsc::Sender<WatchMessage>,
}

/// Where a new watch starts.
pub(crate) enum WatchStart {
    /// RV unset or "0": a synthetic ADDED for every matching object, then live events.
    Current,
    /// Only events after this revision, replayed from the history window.
    After(u64),
}

/// The requested revision is older than the history window (or was compacted away).
#[derive(Debug)]
pub(crate) struct Expired {
    pub(crate) requested: u64,
    pub(crate) oldest: u64,
}

pub(crate) struct Registration {
    pub(crate) id: u64,
    /// The store's revision when the watch started (what the initial events are "as of").
    pub(crate) revision: u64,
    pub(crate) initial: Vec<WatchMessage>,
    pub(crate) receiver: mpsc::Receiver<WatchMessage>,
}

/// The state behind the store lock.
pub(crate) struct StoreState {
    revision: u64,
    collections: HashMap<String, BTreeMap<(String, String), Arc<Value>>>,
    /// Shared copy-on-write: every request clones the Arc, a CRD change clones the Registry.
    pub(crate) registry: Arc<Registry>,
    history: VecDeque<Arc<StoredEvent>>,
    history_window: usize,
    /// Every event up to and including this revision is gone from the history.
    compacted_through: u64,
    watchers: Vec<Watcher>,
    next_watcher_id: u64,
    queue_capacity: usize,
    /// uid → where the object lives, so owners can be found by uid as the garbage collector does.
    uids: HashMap<String, ObjectKey>,
    /// owner uid → the objects naming it in `metadata.ownerReferences`.
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    /// Some: every commit is on disk before it is applied here (`--data-dir`).
    file: Option<StoreFile>,
    /// The revision of every commit, for the runtime's loops that follow the store (the
    /// Services' endpoints) without polling it.
    changed: tokio::sync::watch::Sender<u64>,
}

/// Where CustomResourceDefinitions are kept: loading one teaches the registry its kind.
const CRD_STORE_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// (store key, namespace, name)
type ObjectKey = (String, String, String);

fn uid_of(object: &Value) -> Option<&str> {
    object["metadata"]["uid"].as_str().filter(|u| !u.is_empty())
}

fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|reference| reference["uid"].as_str())
}

pub(crate) struct Store {
    state: Mutex<StoreState>,
}

impl Store {
    pub(crate) fn new(history_window: usize, queue_capacity: usize) -> Store {
        Store {
            state: Mutex::new(StoreState {
                revision: 0,
                collections: HashMap::new(),
                registry: Arc::new(Registry::with_builtins()),
                history: VecDeque::new(),
                history_window: history_window.max(1),
                compacted_through: 0,
                watchers: Vec::new(),
                next_watcher_id: 1,
                queue_capacity: queue_capacity.max(1),
                uids: HashMap::new(),
                dependents: HashMap::new(),
                file: None,
                changed: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// A store kept in `file`, holding what the file held. Its revision goes on from the
    /// file's, and its history starts empty: a watch from any earlier resourceVersion gets
    /// 410 Expired, as from an etcd that compacted everything before its restart.
    pub(crate) fn open(
        history_window: usize,
        queue_capacity: usize,
        file: StoreFile,
        loaded: Loaded,
    ) -> Store {
        let store = Store::new(history_window, queue_capacity);
        {
            let mut state = store.lock();
            for (store_key, object) in loaded.objects {
                state.load(&store_key, object);
            }
            // The newest object's RV can be above the recorded revision only in a file edited
            // by hand; never go back below an RV a client may have seen.
            state.revision = state.revision.max(loaded.revision);
            state.compact();
            state.file = Some(file);
        }
        store
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, StoreState> {
        lock(&self.state)
    }

    pub(crate) fn revision(&self) -> u64 {
        self.lock().revision
    }

    /// A receiver that wakes after each commit (several commits may wake it once).
    pub(crate) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.lock().changed.subscribe()
    }
}

fn key_of(object: &Value) -> (String, String) {
    let metadata = &object["metadata"];
    (
        metadata["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        metadata["name"].as_str().unwrap_or_default().to_string(),
    )
}

impl StoreState {
    pub(crate) fn revision(&self) -> u64 {
        self.revision
    }

    pub(crate) fn get(&self, store_key: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.collections
            .get(store_key)?
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of one collection in (namespace, name) order, optionally one namespace only.
    pub(crate) fn list(&self, store_key: &str, namespace: Option<&str>) -> Vec<Arc<Value>> {
        let Some(collection) = self.collections.get(store_key) else {
            return Vec::new();
        };
        match namespace {
            Some(ns) => collection
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
            None => collection.values().cloned().collect(),
        }
    }

    /// Does an object with this uid exist (in any collection)?
    pub(crate) fn uid_exists(&self, uid: &str) -> bool {
        self.uids.contains_key(uid)
    }

    /// The object with this uid, and the collection it is in.
    pub(crate) fn object_by_uid(&self, uid: &str) -> Option<(String, Arc<Value>)> {
        let (key, ns, name) = self.uids.get(uid)?;
        Some((key.clone(), self.get(key, ns, name)?))
    }

    /// The objects that name `owner_uid` in their ownerReferences.
    pub(crate) fn dependents_of(&self, owner_uid: &str) -> Vec<(String, Arc<Value>)> {
        self.dependents
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|(key, ns, name)| Some((key.clone(), self.get(key, ns, name)?)))
            .collect()
    }

    fn index(&mut self, store_key: &str, object: &Value) {
        let (ns, name) = key_of(object);
        let key = (store_key.to_string(), ns, name);
        if let Some(uid) = uid_of(object) {
            self.uids.insert(uid.to_string(), key.clone());
        }
        for owner in owner_uids(object) {
            self.dependents
                .entry(owner.to_string())
                .or_default()
                .insert(key.clone());
        }
    }

    fn unindex(&mut self, store_key: &str, object: &Value) {
        let (ns, name) = key_of(object);
        let key = (store_key.to_string(), ns, name);
        if let Some(uid) = uid_of(object) {
            self.uids.remove(uid);
        }
        for owner in owner_uids(object) {
            if let Some(set) = self.dependents.get_mut(owner) {
                set.remove(&key);
                if set.is_empty() {
                    self.dependents.remove(owner);
                }
            }
        }
    }

    /// Put a loaded object back as it was, resourceVersion and all: no event, no file write.
    fn load(&mut self, store_key: &str, object: Value) {
        let revision = object["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<u64>().ok())
            .unwrap_or_default();
        self.revision = self.revision.max(revision);
        if store_key == CRD_STORE_KEY {
            Arc::make_mut(&mut self.registry).register_crd(&object);
        }
        self.index(store_key, &object);
        self.collections
            .entry(store_key.to_string())
            .or_default()
            .insert(key_of(&object), Arc::new(object));
    }

    /// Every object of every collection (a namespace's deletion takes its contents).
    pub(crate) fn all_objects(&self) -> Vec<(String, Arc<Value>)> {
        self.collections
            .iter()
            .flat_map(|(key, c)| c.values().map(move |v| (key.clone(), v.clone())))
            .collect()
    }

    /// Store a new object at the next revision and tell the watchers.
    pub(crate) fn commit_added(&mut self, store_key: &str, object: Value) -> Arc<Value> {
        self.commit(store_key, EventType::Added, object, None)
    }

    pub(crate) fn commit_modified(&mut self, store_key: &str, object: Value) -> Arc<Value> {
        let (ns, name) = key_of(&object);
        let previous = self.get(store_key, &ns, &name);
        self.commit(store_key, EventType::Modified, object, previous)
    }

    /// Remove an object; the DELETED event carries its last state with a new resourceVersion.
    pub(crate) fn commit_deleted(
        &mut self,
        store_key: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<Value>> {
        let previous = self.get(store_key, namespace, name)?;
        let last = (*previous).clone();
        Some(self.commit(store_key, EventType::Deleted, last, Some(previous)))
    }

    /// Remove an object whose final state is `last` (an update that emptied its finalizers):
    /// one DELETED event, no MODIFIED before it.
    pub(crate) fn commit_deleted_as(&mut self, store_key: &str, last: Value) -> Arc<Value> {
        let (ns, name) = key_of(&last);
        let previous = self.get(store_key, &ns, &name);
        self.commit(store_key, EventType::Deleted, last, previous)
    }

    fn commit(
        &mut self,
        store_key: &str,
        event_type: EventType,
        mut object: Value,
        previous: Option<Arc<Value>>,
    ) -> Arc<Value> {
        let revision = self.revision + 1;
        object["metadata"]["resourceVersion"] = json!(revision.to_string());
        let key = key_of(&object);
        let json = OnceLock::new();
        if let Some(file) = &mut self.file {
            let written = if event_type == EventType::Deleted {
                file.delete(revision, store_key, &key.0, &key.1)
            } else {
                let bytes = json
                    .get_or_init(|| Bytes::from(serde_json::to_vec(&object).unwrap_or_default()));
                file.put(revision, store_key, &key.0, &key.1, bytes)
            };
            if let Err(error) = written {
                // Nothing in memory has changed yet. A write that is not on disk must not be
                // acknowledged: the request's handler panics into a 500 (the server catches
                // it), and the client retries; the store itself stays as it was.
                tracing::error!(%error, "a write could not be stored");
                panic!("{error}");
            }
        }
        self.revision = revision;
        self.changed.send_replace(revision);
        let object = Arc::new(object);
        if let Some(previous) = &previous {
            self.unindex(store_key, previous);
        }
        if event_type != EventType::Deleted {
            self.index(store_key, &object);
        }
        let collection = self.collections.entry(store_key.to_string()).or_default();
        if event_type == EventType::Deleted {
            collection.remove(&key);
        } else {
            collection.insert(key, object.clone());
        }
        let event = Arc::new(StoredEvent {
            revision,
            store_key: store_key.to_string(),
            event_type,
            object: object.clone(),
            previous,
            json,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_window {
            if let Some(dropped) = self.history.pop_front() {
                self.compacted_through = dropped.revision;
            }
        }
        self.watchers.retain(|watcher| {
            let Some(message) = watcher.filter.deliver(&event) else {
                return true;
            };
            match watcher.sender.try_send(message) {
                Ok(()) => true,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    // kube-apiserver ends a watcher whose buffer is full rather than slow every
                    // writer down; the client re-watches from the last RV it saw.
                    tracing::warn!(watcher = watcher.id, "watcher too slow, ending its watch");
                    false
                }
                Err(mpsc::error::TrySendError::Closed(_)) => false,
            }
        });
        object
    }

    /// Register a watcher and compute what it must be sent before live events.
    pub(crate) fn register_watcher(
        &mut self,
        filter: Filter,
        start: WatchStart,
    ) -> Result<Registration, Expired> {
        let initial = match start {
            WatchStart::Current => self
                .list(&filter.store_key, filter.namespace.as_deref())
                .into_iter()
                .filter(|o| filter.matches(o))
                .map(|object| WatchMessage::Adjusted {
                    event_type: EventType::Added,
                    object,
                })
                .collect(),
            WatchStart::After(requested) => {
                if requested < self.compacted_through {
                    return Err(Expired {
                        requested,
                        oldest: self.compacted_through,
                    });
                }
                let first = self.history.partition_point(|e| e.revision <= requested);
                self.history
                    .range(first..)
                    .filter_map(|e| filter.deliver(e))
                    .collect()
            }
        };
        let (sender, receiver) = mpsc::channel(self.queue_capacity);
        let id = self.next_watcher_id;
        self.next_watcher_id += 1;
        self.watchers.push(Watcher { id, filter, sender });
        Ok(Registration {
            id,
            revision: self.revision,
            initial,
            receiver,
        })
    }

    pub(crate) fn remove_watcher(&mut self, id: u64) {
        self.watchers.retain(|w| w.id != id);
    }

    /// Queue a BOOKMARK at the current revision behind the events already queued, so its RV is
    /// never ahead of an event the watcher has not received yet.
    pub(crate) fn queue_bookmark(&mut self, id: u64) {
        let revision = self.revision;
        if let Some(watcher) = self.watchers.iter().find(|w| w.id == id) {
            let _ = watcher.sender.try_send(WatchMessage::Bookmark(revision));
        }
    }

    /// Forget all history: a watch from any RV older than now gets 410 Expired.
    pub(crate) fn compact(&mut self) {
        self.history.clear();
        self.compacted_through = self.revision;
    }

    /// Drop every watcher: each stream ends once its queue is drained.
    pub(crate) fn end_all_watchers(&mut self) {
        self.watchers.clear();
    }

    /// End the watchers of one collection (its CRD was deleted).
    pub(crate) fn end_watchers_of(&mut self, store_key: &str) {
        self.watchers.retain(|w| w.filter.store_key != store_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, labels: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                            "labels": labels}})
    }

    fn filter(label_selector: Option<&str>) -> Filter {
        Filter {
            store_key: "/secrets".into(),
            namespace: Some("default".into()),
            label_selector: label_selector.map(|s| LabelSelector::parse(s).expect("selector")),
            field_selector: None,
        }
    }

    fn kinds(messages: &[WatchMessage]) -> Vec<&'static str> {
        messages
            .iter()
            .map(|m| match m {
                WatchMessage::Event(e) => e.event_type.as_str(),
                WatchMessage::Adjusted { event_type, .. } => event_type.as_str(),
                WatchMessage::Bookmark(_) | WatchMessage::InitialEventsEnd(_) => "BOOKMARK",
            })
            .collect()
    }

    /// Like etcd's revision, one counter orders writes of every kind; a deletion gets its own RV.
    #[test]
    fn every_write_moves_the_one_global_revision() {
        let store = Store::new(10, 10);
        let mut state = store.lock();
        let a = state.commit_added("/secrets", secret("a", json!({})));
        let b = state.commit_added("/pods", secret("b", json!({})));
        assert_eq!(a["metadata"]["resourceVersion"], "1");
        assert_eq!(b["metadata"]["resourceVersion"], "2");
        let gone = state
            .commit_deleted("/secrets", "default", "a")
            .expect("deleted");
        assert_eq!(
            gone["metadata"]["resourceVersion"], "3",
            "DELETED carries a new RV"
        );
        assert!(state.get("/secrets", "default", "a").is_none());
    }

    /// Resuming inside the window replays later events; older RVs and compacted ones expire.
    #[test]
    fn history_replays_after_an_rv_and_expires_beyond_the_window() {
        let store = Store::new(3, 10);
        let mut state = store.lock();
        for name in ["a", "b", "c", "d", "e"] {
            state.commit_added("/secrets", secret(name, json!({})));
        }
        // Events 3, 4, 5 are kept; resuming from 2 needs 3.. : fine. From 1 needs 2: gone.
        let resumed = state
            .register_watcher(filter(None), WatchStart::After(3))
            .map_err(|e| e.requested)
            .expect("within the window");
        assert_eq!(kinds(&resumed.initial), ["ADDED", "ADDED"]);
        assert!(state
            .register_watcher(filter(None), WatchStart::After(2))
            .is_ok());
        let expired = state
            .register_watcher(filter(None), WatchStart::After(1))
            .err()
            .expect("expired");
        assert_eq!((expired.requested, expired.oldest), (1, 2));
        state.compact();
        assert!(state
            .register_watcher(filter(None), WatchStart::After(4))
            .is_err());
        assert!(state
            .register_watcher(filter(None), WatchStart::After(5))
            .is_ok());
    }

    /// A relabelled object leaves a selector as DELETED and comes back as ADDED.
    #[test]
    fn leaving_and_joining_a_selector_become_deleted_and_added() {
        let store = Store::new(10, 10);
        let mut state = store.lock();
        state.commit_added("/secrets", secret("a", json!({"app": "db"})));
        let mut watcher = state
            .register_watcher(filter(Some("app=db")), WatchStart::Current)
            .map_err(|e| e.requested)
            .expect("registered");
        assert_eq!(kinds(&watcher.initial), ["ADDED"]);
        state.commit_modified("/secrets", secret("a", json!({"app": "web"})));
        state.commit_modified("/secrets", secret("a", json!({"app": "db"})));
        state.commit_added("/secrets", secret("other", json!({"app": "web"})));
        let mut received = Vec::new();
        while let Ok(message) = watcher.receiver.try_recv() {
            received.push(message);
        }
        assert_eq!(kinds(&received), ["DELETED", "ADDED"]);
    }

    /// A watcher whose queue is full is dropped: its stream ends after what was queued.
    #[test]
    fn a_full_watcher_queue_ends_that_watcher_only() {
        let store = Store::new(100, 2);
        let mut state = store.lock();
        let slow = state
            .register_watcher(filter(None), WatchStart::Current)
            .map_err(|e| e.requested)
            .expect("registered");
        for name in ["a", "b", "c"] {
            state.commit_added("/secrets", secret(name, json!({})));
        }
        assert_eq!(state.watchers.len(), 0, "dropped on the third event");
        let mut receiver = slow.receiver;
        assert!(receiver.try_recv().is_ok() && receiver.try_recv().is_ok());
        assert!(matches!(
            receiver.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }

    /// A store reopened from its file has the objects, goes on from the file's revision (a
    /// deletion's included), and answers a watch from before the restart with Expired.
    #[test]
    fn a_reopened_store_goes_on_from_its_files_revision() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        {
            let (file, loaded) = StoreFile::open(dir.path()).expect("a new file");
            let store = Store::open(10, 10, file, loaded);
            let mut state = store.lock();
            state.commit_added("/secrets", secret("a", json!({})));
            state.commit_added("/secrets", secret("b", json!({})));
            state.commit_deleted("/secrets", "default", "b");
        }
        let (file, loaded) = StoreFile::open(dir.path()).expect("reopened");
        let store = Store::open(10, 10, file, loaded);
        let mut state = store.lock();
        assert_eq!(state.revision(), 3);
        let a = state.get("/secrets", "default", "a").expect("a is back");
        assert_eq!(
            (
                a["metadata"]["uid"].as_str(),
                a["metadata"]["resourceVersion"].as_str()
            ),
            (Some("uid-a"), Some("1"))
        );
        assert!(state.get("/secrets", "default", "b").is_none());
        assert!(state
            .register_watcher(filter(None), WatchStart::After(2))
            .is_err());
        assert!(state
            .register_watcher(filter(None), WatchStart::After(3))
            .is_ok());
        let c = state.commit_added("/secrets", secret("c", json!({})));
        assert_eq!(c["metadata"]["resourceVersion"], "4");
    }

    /// The garbage collector's index: dependents by owner uid, kept current on every write.
    #[test]
    fn dependents_are_found_by_owner_uid() {
        let store = Store::new(10, 10);
        let mut state = store.lock();
        let mut child = secret("child", json!({}));
        child["metadata"]["ownerReferences"] = json!([{"uid": "uid-owner"}]);
        state.commit_added("/secrets", child);
        state.commit_added("/secrets", secret("owner", json!({})));
        assert!(state.uid_exists("uid-owner"));
        let dependents = state.dependents_of("uid-owner");
        assert_eq!(dependents.len(), 1);
        assert_eq!(dependents[0].1["metadata"]["name"], "child");
        state.commit_deleted("/secrets", "default", "child");
        assert!(state.dependents_of("uid-owner").is_empty());
    }
}
