//! How a pod event reaches the task of its cluster: each running task's `Notify`, by
//! `namespace/name`. Support: a learner may skip it on first read — the lesson is that a pod
//! event wakes its cluster's task (`operator.rs`); this is the map that does it, and the guard
//! that removes a task's entry however the task ends.
//!
//! WORKSHOP.md, step 04 ("Watching the pods too").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

/// Each running task's wake-up, by `namespace/name`: how a pod event reaches the task of its
/// cluster (`operator.rs`). `Notify` keeps at most one pending wake-up, so a burst of pod events
/// costs one round, not one each.
#[derive(Clone, Default)]
pub struct Wakers(Arc<Mutex<HashMap<String, Arc<Notify>>>>);

impl Wakers {
    /// Wake the task of cluster `key` for a round now. A key with no task (a pod of a cluster
    /// deleted a moment ago, or one whose task has not started yet) is ignored.
    pub fn wake(&self, key: &str) {
        if let Some(waker) = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(key)
        {
            waker.notify_one();
        }
    }

    /// A wake-up for the task of `key`, registered until the returned value is dropped.
    pub(super) fn register(&self, key: &str) -> Registered {
        let notify = Arc::new(Notify::new());
        let mut wakers = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        wakers.insert(key.to_string(), Arc::clone(&notify));
        Registered {
            wakers: self.clone(),
            key: key.to_string(),
            notify,
        }
    }
}

/// A task's entry in [`Wakers`], removed when the task ends, however it ends.
pub(super) struct Registered {
    wakers: Wakers,
    key: String,
    pub(super) notify: Arc<Notify>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut wakers = self.wakers.0.lock().unwrap_or_else(PoisonError::into_inner);
        // A task for the same cluster started since (it was re-created) has its own entry.
        if wakers
            .get(&self.key)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            wakers.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A registered task is woken by its key; an ended task's entry goes, but never the entry
    /// of a task started since for the same key.
    #[tokio::test]
    async fn wakers_wake_the_task_registered_under_a_key() {
        let wakers = Wakers::default();
        let first = wakers.register("ns/db");
        wakers.wake("ns/db");
        wakers.wake("ns/other");
        tokio::time::timeout(Duration::from_secs(5), first.notify.notified())
            .await
            .expect("the registered task is woken");
        let second = wakers.register("ns/db");
        drop(first);
        wakers.wake("ns/db");
        tokio::time::timeout(Duration::from_secs(5), second.notify.notified())
            .await
            .expect("the newer task keeps its entry");
        drop(second);
        assert!(wakers
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty());
    }
}
