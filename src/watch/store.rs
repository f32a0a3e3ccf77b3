//! Support: skip it on first read — `deliver` keeps each `Arc` here; step 04's tasks read it.
//!
//! The watch's memory, shared: what the consumer has been told about every object, readable by
//! anyone holding a [`Store`] — client-go's informer "indexer", in one small file.
//!
//! WORKSHOP.md, step 04 ("One cache, not two"). `list_then_watch` must remember the last state of
//! every object it handed over anyway (a relist is compared with it, and an object that vanished
//! is reported `Deleted` with it), so a controller that wants to *look* at the objects reads this
//! instead of keeping a second copy or listing the API server on every reconcile. The watch
//! writes an entry before it hands the event over, so whoever reacts to an event finds at least
//! that state here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::api::Text;

/// One object as the consumer last saw it.
pub(crate) struct Known<T> {
    /// The very `Arc` the consumer was handed: storing it copies no object, reading it decodes
    /// nothing, and a relist's `Deleted` hands it over again. Kept over the object's JSON: 8 %
    /// fewer instructions per event (the tuning notes in `watch/options.rs`), and decoded
    /// without what no step reads (`api/kept.rs`) it is the smaller of the two.
    pub(crate) object: Arc<T>,
    /// The number of the last list that contained it; after a list completes, an entry that does
    /// not carry its number has vanished.
    pub(crate) seen_by_list: u64,
}

/// A read-only handle on a running watch's objects, by `namespace/name`. Cheap to clone; every
/// clone sees the same, current entries. Reads hand out the stored `Arc`s, as kube-rs's reflector
/// store does: an object is never changed once stored (a newer state replaces the `Arc`), so a
/// reader keeps what it read for as long as it likes, the watch never waits on it, and it never
/// sees an object half-written.
pub struct Store<T> {
    entries: Arc<Mutex<BTreeMap<Text, Known<T>>>>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store {
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<T> Store<T> {
    pub(crate) fn new() -> Store<T> {
        Store {
            entries: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// The entries, for the watch loop. Held only between two awaits, never across one.
    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<Text, Known<T>>> {
        // A panic while holding the lock leaves whole entries (each write replaces one entry):
        // the map is still usable.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many objects the watch currently knows.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object stored under `namespace/name`, if the watch knows it.
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.lock().get(key).map(|known| Arc::clone(&known.object))
    }

    // ANCHOR: store_list
    /// Every object the watch knows that `keep` accepts, in `namespace/name` order.
    pub fn list(&self, keep: impl Fn(&T) -> bool) -> Vec<Arc<T>> {
        // ANCHOR_END: store_list
        self.lock()
            .values()
            .filter(|known| keep(&known.object))
            .map(|known| Arc::clone(&known.object))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ObjectMeta, PostgresCluster, PostgresClusterSpec};

    /// What the watch stores reads back as the same `Arc`, by key and by filter.
    #[test]
    fn entries_read_back_by_key_and_filter() {
        let store = Store::<PostgresCluster>::new();
        for (name, size) in [("a", 1), ("b", 3)] {
            let mut cluster =
                PostgresCluster::new("ns", name, PostgresClusterSpec::new(size, "16"));
            cluster.metadata = ObjectMeta {
                name: name.into(),
                namespace: "ns".into(),
                uid: format!("uid-{name}").into(),
                ..Default::default()
            };
            let known = Known {
                object: Arc::new(cluster),
                seen_by_list: 1,
            };
            store.lock().insert(format!("ns/{name}").into(), known);
        }
        assert_eq!(store.len(), 2);
        assert_eq!(store.get("ns/b").map(|c| c.spec.size), Some(3));
        assert!(store.get("ns/c").is_none());
        let big = store.list(|c| c.spec.size > 1);
        assert_eq!(big.len(), 1);
        assert_eq!(big[0].metadata.name, "b");
        assert!(Arc::ptr_eq(&big[0], &store.get("ns/b").unwrap()));
    }
}
