//! Locking shared state, and waiting out a freeze: helpers every layer uses.
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

/// Wait while `frozen` says so (`Faults::freeze`): what a stopped API server or kubelet does
/// with the work in front of it.
pub(crate) async fn thawed(frozen: &tokio::sync::watch::Sender<bool>) {
    let mut receiver = frozen.subscribe();
    let _ = receiver.wait_for(|frozen| !*frozen).await;
}
