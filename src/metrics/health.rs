//! Support: skip it on first read — the probes' answers, for a Deployment; nothing the operator
//! decides depends on them.
//!
//! What `/healthz` and `/readyz` answer: is every loop of the operator still moving, and has it
//! the view it needs to act.
//!
//! - **Live** (`/healthz`; the kubelet restarts a container whose liveness probe fails): each
//!   watch has made progress — a list done, a watch request accepted, an event — within
//!   `bounds.watch`, and each cluster's reconcile loop has finished a round within
//!   `bounds.reconcile`. A loop whose task panicked fails at once.
//! - **Ready** (`/readyz`; a pod not ready gets no Service traffic and holds a rolling update
//!   back): acting, and every watch has its first list in; or a standby waiting for the Lease,
//!   which is all a standby should be doing.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::watch::WatchOptions;

/// How long a loop may go without progress before `/healthz` fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthBounds {
    pub reconcile: Duration,
    pub watch: Duration,
}

impl HealthBounds {
    /// The bounds for an operator with this reconcile interval and these watches.
    ///
    /// A watch: a quiet but healthy one shows progress at least every `watch_timeout_max` (the
    /// server ends each watch at its `timeoutSeconds`, and a new request is accepted at once);
    /// a connection that died silently is noticed by the watch itself after the timeout plus
    /// `idle_margin`, then reopened. Twice that is one silent death and a whole watch after it
    /// with nothing accepted: the watch is wedged, not unlucky (740 s with the defaults).
    ///
    /// A reconcile loop: its timer starts a round every `reconcile_interval`; a round is a
    /// handful of requests, each bounded by the client's 30 s timeout, and at worst a
    /// `pg_promote` that waits up to 25 s. Two intervals plus two minutes without a round
    /// ended is a loop that is stuck (136 s with the 8 s default).
    pub fn for_operator(reconcile_interval: Duration, watch: &WatchOptions) -> HealthBounds {
        HealthBounds {
            reconcile: reconcile_interval * 2 + Duration::from_secs(120),
            watch: (watch.watch_timeout_max + watch.idle_margin) * 2,
        }
    }
}

/// What this replica is doing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// Not yet standing by or acting: connecting, or stopped.
    #[default]
    Idle,
    /// Waiting for the Lease (leader election): live and ready, with nothing to watch.
    Standby,
    /// Holding the Lease (or elected alone): its watches and loops are checked.
    Acting,
}

/// The state the checks read; `Metrics` keeps one behind a lock.
#[derive(Debug, Default)]
pub(super) struct Health {
    pub(super) phase: Phase,
    /// By resource (`pods`, `postgresclusters`).
    pub(super) watches: BTreeMap<&'static str, WatchProgress>,
    /// By cluster, `namespace/name`.
    pub(super) loops: BTreeMap<String, LoopProgress>,
}

#[derive(Debug)]
pub(super) struct WatchProgress {
    /// The first list is in: a watch request was accepted after it.
    pub(super) listed: bool,
    pub(super) last: Instant,
}

#[derive(Debug)]
pub(super) struct LoopProgress {
    /// Which task registered it (see `ReconcileLoop`).
    pub(super) id: u64,
    /// When the last round ended (or the loop started).
    pub(super) last: Instant,
    /// Its task panicked: nothing will reconcile this cluster until the spec changes.
    pub(super) dead: bool,
}

impl Health {
    /// `Err(why)` when a loop or a watch has not moved within its bound.
    pub(super) fn live(&self, bounds: &HealthBounds, now: Instant) -> Result<(), String> {
        if self.phase != Phase::Acting {
            return Ok(());
        }
        for (resource, watch) in &self.watches {
            if let Some(quiet) = quiet_past(watch.last, now, bounds.watch) {
                return Err(format!("the {resource} watch made no progress {quiet}"));
            }
        }
        for (cluster, task) in &self.loops {
            if task.dead {
                return Err(format!(
                    "the reconcile loop of {cluster} died (its task panicked)"
                ));
            }
            if let Some(quiet) = quiet_past(task.last, now, bounds.reconcile) {
                return Err(format!(
                    "the reconcile loop of {cluster} ended no round {quiet}"
                ));
            }
        }
        Ok(())
    }

    /// `Err(why)` until acting with every watch listed; a standby is ready.
    pub(super) fn ready(&self) -> Result<(), String> {
        match self.phase {
            Phase::Idle => Err("not started yet".into()),
            Phase::Standby => Ok(()),
            Phase::Acting if self.watches.is_empty() => Err("no watch started yet".into()),
            Phase::Acting => match self.watches.iter().find(|(_, watch)| !watch.listed) {
                Some((resource, _)) => Err(format!("the {resource} watch has not listed yet")),
                None => Ok(()),
            },
        }
    }
}

/// `for 61s (bound 60s)`, when more than `bound` has passed between `last` and `now`.
fn quiet_past(last: Instant, now: Instant, bound: Duration) -> Option<String> {
    let quiet = now.saturating_duration_since(last);
    (quiet > bound).then(|| format!("for {}s (bound {}s)", quiet.as_secs(), bound.as_secs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds() -> HealthBounds {
        HealthBounds {
            reconcile: Duration::from_secs(10),
            watch: Duration::from_secs(60),
        }
    }

    /// A watch or loop past its bound fails liveness, naming itself; a standby is always live.
    #[test]
    fn a_loop_past_its_bound_is_not_live() {
        let start = Instant::now();
        let mut health = Health {
            phase: Phase::Acting,
            ..Health::default()
        };
        health.watches.insert(
            "pods",
            WatchProgress {
                listed: true,
                last: start,
            },
        );
        health.loops.insert(
            "ns/db".into(),
            LoopProgress {
                id: 0,
                last: start,
                dead: false,
            },
        );
        assert_eq!(
            health.live(&bounds(), start + Duration::from_secs(10)),
            Ok(())
        );
        let late = health.live(&bounds(), start + Duration::from_secs(11));
        assert!(late.is_err_and(|why| why.contains("ns/db")));
        let later = start + Duration::from_secs(61);
        health.loops.clear();
        assert!(health
            .live(&bounds(), later)
            .is_err_and(|why| why.contains("pods watch")));
        health.phase = Phase::Standby;
        assert_eq!(health.live(&bounds(), later), Ok(()));
    }

    /// Ready: a standby at once; an acting replica once every watch has listed.
    #[test]
    fn ready_means_listed_or_standing_by() {
        let mut health = Health::default();
        assert!(health.ready().is_err());
        health.phase = Phase::Standby;
        assert_eq!(health.ready(), Ok(()));
        health.phase = Phase::Acting;
        assert!(health.ready().is_err());
        health.watches.insert(
            "pods",
            WatchProgress {
                listed: false,
                last: Instant::now(),
            },
        );
        assert!(health.ready().is_err());
        if let Some(watch) = health.watches.get_mut("pods") {
            watch.listed = true;
        }
        assert_eq!(health.ready(), Ok(()));
    }

    /// The defaults give a quiet watch two full watches, and a loop two rounds and two minutes.
    #[test]
    fn default_bounds_follow_the_timers() {
        let bounds = HealthBounds::for_operator(Duration::from_secs(8), &WatchOptions::default());
        assert_eq!(bounds.watch, Duration::from_secs(740));
        assert_eq!(bounds.reconcile, Duration::from_secs(136));
    }
}
