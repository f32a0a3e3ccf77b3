//! Locking shared state: one helper every layer uses.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Every lock in the sandbox is held for one short,
//! non-async step, so a plain `std::sync::Mutex` is enough (tokio's async mutex is for locks held
//! across `.await`).

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex even if a panicking thread poisoned it: the sandbox's state stays usable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
