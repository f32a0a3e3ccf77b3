//! Support: skip it on first read — part of leader election, which one replica never needs.
//!
//! The gate every request of a leader that may change something passes, just before it is sent
//! (`Client::gated_by`): open while the last successful write of the Lease was *sent* less than
//! the renew deadline ago, by the monotonic clock. A process stopped for a while (SIGSTOP, a
//! long pause of its VM) finds on waking that this clock went on without it: the gate is closed,
//! and it writes nothing until it has read the Lease again and renewed it (`elect.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::RequestGate;

/// When our last successful write of the Lease was sent, shared by the election loop (which
/// moves it) and every clone of the work's client (which asks it).
#[derive(Clone, Debug)]
pub struct LeaseGate {
    renewed_at: Arc<Mutex<Option<Instant>>>,
    renew_deadline: Duration,
    lease: String,
}

impl LeaseGate {
    /// A closed gate for the Lease `lease` (`namespace/name`, for the refusal's words).
    pub fn new(lease: &str, renew_deadline: Duration) -> LeaseGate {
        LeaseGate {
            renewed_at: Arc::new(Mutex::new(None)),
            renew_deadline,
            lease: lease.into(),
        }
    }

    /// A write of the Lease naming us, sent at `sent_at`, succeeded.
    pub fn renewed(&self, sent_at: Instant) {
        let mut renewed_at = self.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        *renewed_at = Some(renewed_at.map_or(sent_at, |at| at.max(sent_at)));
    }

    /// When the gate closes (closed already if that is past); `None` before the first write.
    pub fn closes_at(&self) -> Option<Instant> {
        let renewed_at = *self.renewed_at.lock().unwrap_or_else(|p| p.into_inner());
        renewed_at.map(|at| at + self.renew_deadline)
    }

    /// `Ok` while the Lease is ours by the clock, else why not.
    pub fn check(&self) -> Result<(), String> {
        match self.closes_at() {
            Some(closes_at) if Instant::now() < closes_at => Ok(()),
            Some(_) => Err(format!(
                "lease {} not renewed within {:?}: no write until it is read and renewed again",
                self.lease, self.renew_deadline
            )),
            None => Err(format!("lease {} not held yet", self.lease)),
        }
    }

    /// The gate as a client asks it.
    pub fn request_gate(&self) -> RequestGate {
        let gate = self.clone();
        Arc::new(move || gate.check())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Closed before the first renewal and from the renew deadline after the last one on, by
    /// the clock alone: nothing needs to run for it to close (a stopped process included).
    #[tokio::test(start_paused = true)]
    async fn the_gate_closes_at_the_renew_deadline_by_the_clock() {
        let gate = LeaseGate::new("ops/postgres-operator", Duration::from_secs(10));
        assert!(gate.check().is_err());
        gate.renewed(Instant::now());
        assert_eq!(gate.check(), Ok(()));
        tokio::time::advance(Duration::from_millis(9_999)).await;
        assert_eq!((gate.request_gate())(), Ok(()));
        tokio::time::advance(Duration::from_millis(1)).await;
        let why = gate.check().unwrap_err();
        assert!(why.contains("not renewed within 10s"), "{why}");
        // A renewal sent before an earlier one that succeeded does not move it back.
        let late = Instant::now();
        gate.renewed(late);
        gate.renewed(late - Duration::from_secs(5));
        assert_eq!(gate.closes_at(), Some(late + Duration::from_secs(10)));
    }
}
