//! Which connections the server keeps open: a bounded number at once, and when every slot is
//! taken, room is made by closing the connection that has waited longest for a request head
//! (at least [`IDLE_GRACE`]), never one whose request is being answered (a watch, a slow list).
//!
//! WORKSHOP.md, "Set-up: the sandbox". Why: a client that opens connections and sends half a
//! request head holds each one until the 32 s header timeout (kube-apiserver's
//! `ReadHeaderTimeout`). With slots held until then, a few hundred such connections locked out
//! every real client; now they are what gets closed first, so a real request is answered while
//! thousands of them are open. In effect the 32 s header timeout shrinks to [`IDLE_GRACE`]
//! when the server is full; a real client sends its head within milliseconds of connecting. kube-apiserver bounds requests in flight
//! (`--max-requests-inflight`) rather than connections, for the same reason.
//!
//! Also here: the open-file limit, raised to what the system allows at start, since every
//! connection is a file descriptor.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a connection may wait for a request head, when every slot is taken, before it is
/// closed to make room: long enough for a client to send its head after connecting (and after
/// a TLS handshake), short enough that a flood of idle connections drains quickly.
pub(crate) const IDLE_GRACE: Duration = Duration::from_millis(250);

/// File descriptors kept for everything else (pods' logs and data files, the store's readers,
/// kubectl exec streams) when the open-file limit caps the connections.
const RESERVED_FILES: u64 = 256;

/// The open connections (ids grow with each one accepted).
pub(crate) struct Connections {
    slots: Arc<Semaphore>,
    open: Mutex<BTreeMap<u64, Open>>,
    next_id: AtomicU64,
    /// Where the milliseconds of [`Activity::idle_since`] count from.
    epoch: Instant,
}

/// What the server knows of one open connection.
struct Open {
    activity: Arc<Activity>,
    close: CancellationToken,
}

/// Whether a connection is answering requests, and since when it has not been.
pub(crate) struct Activity {
    /// Requests being answered on it; 0 while it waits for a request head.
    requests: AtomicUsize,
    /// Milliseconds after the epoch when `requests` last fell to 0 (or it was accepted).
    idle_since: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// One connection's slot: frees it when dropped (the connection has ended).
pub(crate) struct Slot {
    id: u64,
    connections: Arc<Connections>,
    _permit: OwnedSemaphorePermit,
    /// Count a request on this connection with [`InFlight::start`].
    pub(crate) activity: Arc<Activity>,
    /// Cancelled when the connection is closed to make room for a new one.
    pub(crate) close: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        crate::sync::lock(&self.connections.open).remove(&self.id);
    }
}

/// A request being answered: its connection is not idle until this is dropped, which is when
/// the whole response body (a watch's stream included) has been sent or abandoned.
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    pub(crate) fn start(activity: &Arc<Activity>) -> InFlight {
        activity.requests.fetch_add(1, Ordering::SeqCst);
        InFlight(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.now(), Ordering::SeqCst);
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What to do for a new connection when every slot is taken.
enum Room {
    /// Close this idle connection; its slot comes free.
    Close(CancellationToken),
    /// The oldest idle connection may be closed at this instant.
    WaitUntil(Instant),
    /// Every connection has a request in flight: wait for one to end.
    Wait,
}

impl Connections {
    /// At most `max` connections open at once (at least 1).
    pub(crate) fn new(max: usize) -> Arc<Connections> {
        Arc::new(Connections {
            slots: Arc::new(Semaphore::new(max.max(1))),
            open: Mutex::new(BTreeMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// A slot for a connection just accepted: a free one, or else that of the connection idle
    /// longest (at least [`IDLE_GRACE`]), which is closed. While no connection qualifies this
    /// waits, and new connections wait in the kernel's listen queue.
    pub(crate) async fn slot(self: &Arc<Connections>) -> Slot {
        let permit = loop {
            if let Ok(permit) = self.slots.clone().try_acquire_owned() {
                break permit;
            }
            let wait_until = match self.room() {
                Room::Close(idle) => {
                    tracing::debug!("all connection slots taken: closing an idle connection");
                    idle.cancel();
                    None
                }
                Room::WaitUntil(at) => Some(at),
                Room::Wait => None,
            };
            let free = self.slots.clone().acquire_owned();
            let Some(at) = wait_until else {
                match free.await {
                    Ok(permit) => break permit,
                    // The semaphore is never closed; should it be, no connection is served.
                    Err(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                Ok(permit) = free => break permit,
                _ = tokio::time::sleep_until(at) => {}
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let activity = Arc::new(Activity {
            requests: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            epoch: self.epoch,
        });
        activity.idle_since.store(activity.now(), Ordering::SeqCst);
        let close = CancellationToken::new();
        crate::sync::lock(&self.open).insert(
            id,
            Open {
                activity: activity.clone(),
                close: close.clone(),
            },
        );
        Slot {
            id,
            connections: self.clone(),
            _permit: permit,
            activity,
            close,
        }
    }

    /// Which connection to close for a new one, or how long to wait.
    fn room(&self) -> Room {
        let open = crate::sync::lock(&self.open);
        let longest_idle = open
            .values()
            .filter(|o| o.activity.requests.load(Ordering::SeqCst) == 0)
            .filter(|o| !o.close.is_cancelled())
            .min_by_key(|o| o.activity.idle_since.load(Ordering::SeqCst));
        let Some(idle) = longest_idle else {
            return Room::Wait;
        };
        let since =
            self.epoch + Duration::from_millis(idle.activity.idle_since.load(Ordering::SeqCst));
        if since + IDLE_GRACE <= Instant::now() {
            Room::Close(idle.close.clone())
        } else {
            Room::WaitUntil(since + IDLE_GRACE)
        }
    }
}

/// Raise this process's open-file soft limit to its hard limit (setrlimit(2)), as servers do:
/// the soft limit is often 1024, each connection takes a file descriptor, and the hard limit is
/// what the administrator allows. Returns the soft limit now in force (None if unknown).
pub(crate) fn raise_open_file_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit(2) reads one rlimit we own; raising the soft limit up to the hard
        // one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    // rlim_t is u64 here, 32 bits on some 32-bit targets.
    #[allow(clippy::unnecessary_cast)]
    Some(limit.rlim_cur as u64)
}

/// How many connections fit in `open_files` descriptors, with some kept for everything else;
/// `wanted` when the limit is unknown or larger.
pub(crate) fn connections_within(wanted: usize, open_files: Option<u64>) -> usize {
    match open_files {
        Some(files) => {
            let fit = files.saturating_sub(RESERVED_FILES).max(16);
            wanted.min(usize::try_from(fit).unwrap_or(usize::MAX))
        }
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every slot taken, a new connection waits out the grace, then closes the connection
    /// idle longest, never one with a request in flight (paused time: the grace passes at once).
    #[tokio::test(start_paused = true)]
    async fn a_full_house_closes_the_connection_idle_longest() {
        let connections = Connections::new(3);
        let busy = connections.slot().await;
        let request = InFlight::start(&busy.activity);
        let idle_old = connections.slot().await;
        tokio::time::advance(Duration::from_millis(10)).await;
        let idle_new = connections.slot().await;
        let opened = Instant::now();
        let waiting = tokio::spawn({
            let connections = connections.clone();
            async move { connections.slot().await }
        });
        idle_old.close.cancelled().await;
        assert!(opened.elapsed() >= IDLE_GRACE - Duration::from_millis(10));
        assert!(!busy.close.is_cancelled(), "a request in flight is kept");
        assert!(
            !idle_new.close.is_cancelled(),
            "the newer idle connection is kept"
        );
        drop(idle_old);
        let fourth = waiting.await.expect("a slot");
        assert!(!fourth.close.is_cancelled());
        // A request that ended makes its connection idle from then on: the youngest idle.
        drop(request);
        tokio::time::advance(IDLE_GRACE).await;
        let fifth = tokio::spawn({
            let connections = connections.clone();
            async move { connections.slot().await }
        });
        idle_new.close.cancelled().await;
        assert!(!busy.close.is_cancelled());
        drop(idle_new);
        fifth.await.expect("a slot");
    }

    /// The cap leaves room for other files, and never drops to nothing.
    #[test]
    fn connections_fit_in_the_open_file_limit() {
        assert_eq!(connections_within(512, None), 512);
        assert_eq!(connections_within(512, Some(1024)), 512);
        assert_eq!(connections_within(4096, Some(1024)), 768);
        assert_eq!(connections_within(4096, Some(10)), 16);
    }
}
