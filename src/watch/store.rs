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
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::api::HasMetadata;

/// One object as the consumer last saw it.
pub(crate) struct Known {
    pub(crate) uid: String,
    pub(crate) resource_version: String,
    /// The object as last handed over, as JSON: the object of its watch line, copied as it came
    /// (or, for an object from a list, `T` encoded again). One buffer, about the size of the
    /// object on the wire: a typed copy would be an allocation per string and map, half as big
    /// again in all. Decoded again when a reader asks for it, or for a `Deleted` a relist finds.
    pub(crate) last_state: Vec<u8>,
    /// The number of the last list that contained it; after a list completes, an entry that does
    /// not carry its number has vanished.
    pub(crate) seen_by_list: u64,
}

impl Known {
    pub(crate) fn empty() -> Known {
        Known {
            uid: String::new(),
            resource_version: String::new(),
            last_state: Vec::new(),
            seen_by_list: 0,
        }
    }

    /// Overwrite this entry with `object`'s state, reusing its buffers: an update, the common
    /// case, allocates nothing. `object_json` is the object's JSON if the caller has it.
    pub(crate) fn update<T: HasMetadata + Serialize>(
        &mut self,
        object: &T,
        object_json: Option<&[u8]>,
    ) {
        let meta = object.metadata();
        self.uid.clone_from(&meta.uid);
        self.resource_version.clone_from(&meta.resource_version);
        self.last_state.clear();
        match object_json {
            Some(json) => {
                // Exactly: the default doubling would leave up to half of every entry unused.
                self.last_state.reserve_exact(json.len());
                self.last_state.extend_from_slice(json);
            }
            // A derived `Serialize` of a Kubernetes object cannot fail (every map key is a
            // string); if a hand-written one did, the only loss is the state in a relist's
            // `Deleted`.
            None => {
                if let Err(error) = serde_json::to_writer(&mut self.last_state, object) {
                    tracing::warn!(%error, "cannot encode an object for the store");
                }
            }
        }
    }
}

/// A read-only handle on a running watch's objects, by `namespace/name`. Cheap to clone; every
/// clone sees the same, current entries. Reads decode the stored JSON, so what you get is a copy
/// you own: the watch never waits on a reader, and a reader never sees an object half-written.
pub struct Store<T> {
    entries: Arc<Mutex<BTreeMap<String, Known>>>,
    _type: PhantomData<fn() -> T>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Self {
        Store {
            entries: Arc::clone(&self.entries),
            _type: PhantomData,
        }
    }
}

impl<T> Store<T> {
    pub(crate) fn new() -> Store<T> {
        Store {
            entries: Arc::new(Mutex::new(BTreeMap::new())),
            _type: PhantomData,
        }
    }

    /// The entries, for the watch loop. Held only between two awaits, never across one.
    pub(crate) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Known>> {
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
}

impl<T: DeserializeOwned> Store<T> {
    /// The object stored under `namespace/name`, if the watch knows it.
    pub fn get(&self, key: &str) -> Option<T> {
        let entries = self.lock();
        entries.get(key).and_then(|known| decode(key, known))
    }

    /// Every object the watch knows that `keep` accepts, in `namespace/name` order.
    pub fn list(&self, keep: impl Fn(&T) -> bool) -> Vec<T> {
        let entries = self.lock();
        entries
            .iter()
            .filter_map(|(key, known)| decode(key, known))
            .filter(|object| keep(object))
            .collect()
    }
}

fn decode<T: DeserializeOwned>(key: &str, known: &Known) -> Option<T> {
    match serde_json::from_slice(&known.last_state) {
        Ok(object) => Some(object),
        // Only a `T` whose Serialize and Deserialize disagree gets here.
        Err(error) => {
            tracing::error!(%key, %error, "a stored object does not decode");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{ObjectMeta, PostgresCluster, PostgresClusterSpec};

    /// What is written with `update` reads back typed, by key and by filter.
    #[test]
    fn entries_read_back_typed_by_key_and_filter() {
        let store = Store::<PostgresCluster>::new();
        for (name, size) in [("a", 1), ("b", 3)] {
            let mut cluster = PostgresCluster::new(
                "ns",
                name,
                PostgresClusterSpec {
                    size,
                    version: "16".into(),
                    paused: false,
                    backup: None,
                    bootstrap: None,
                    replication: None,
                },
            );
            cluster.metadata = ObjectMeta {
                name: name.into(),
                namespace: "ns".into(),
                uid: format!("uid-{name}"),
                ..Default::default()
            };
            let mut known = Known::empty();
            known.update(&cluster, None);
            store.lock().insert(format!("ns/{name}"), known);
        }
        assert_eq!(store.len(), 2);
        assert_eq!(store.get("ns/b").map(|c| c.spec.size), Some(3));
        assert!(store.get("ns/c").is_none());
        let big = store.list(|c| c.spec.size > 1);
        assert_eq!(big.len(), 1);
        assert_eq!(big[0].metadata.name, "b");
    }
}
