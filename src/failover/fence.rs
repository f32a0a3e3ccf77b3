//! Fencing a primary that is lost or did not stop: relabelled `fenced`, so that no Service sends
//! it clients, and its deletion asked; then the other replicas' WAL receivers restarted, so that
//! each finds the new primary. Support: a learner may skip it on first read — when a failover
//! fences first is the plan's rule (`plan.rs`); this is how the fence is put up.
//!
//! WORKSHOP.md, step 05 ("Fence first when it is safe", "Every replica back").

use crate::events::EventType;
use crate::postgres::cluster::psql_in_pod;
use crate::postgres::manifests::{self, Role};
use crate::postgres::plan::Phase;
use crate::postgres::PostgresTask;

use super::lines::lost_because;
use super::plan::{Failing, Seen};
use super::{WithFailover, FENCED};

impl<L: WithFailover> PostgresTask<L> {
    /// An old primary still terminating when the failover goes on has not stopped within
    /// `stop_timeout`: its node is lost, and the pod stays Terminating until the node is
    /// confirmed gone. Relabelled `fenced`, no Service selects it, whatever its readiness.
    /// False: the relabel failed, and the failover waits for the next round.
    pub(super) async fn fence_the_leaving(&mut self, failing: &Failing) -> bool {
        for member in leaving_unstopped(failing) {
            self.say(format!(
                "Fencing {}: deleted {}s ago and still not stopped (its node may be lost); relabelling it {} so that no Service sends it clients, then promoting a replica",
                member.name,
                member.more.terminating_for.as_secs(),
                FENCED
            ));
            match self.relabel(&member.name, FENCED).await {
                // Gone meanwhile: fenced by the best means there is.
                Ok(_) => {}
                Err(error) if error.status_code() == Some(404) => {}
                Err(error) => {
                    self.fail_round();
                    self.say(format!(
                        "fencing {} failed: {error}; not promoting until it is fenced",
                        member.name
                    ));
                    return false;
                }
            }
            self.event(
                EventType::Warning,
                "Fenced",
                &format!(
                    "{} did not stop when deleted; relabelled fenced",
                    member.name
                ),
            )
            .await;
        }
        true
    }

    /// Fence the lost primary `pod` before a promotion that does not wait for it to stop
    /// (synchronous `required`, see `plan::fencing_first_is_safe`): relabelled `fenced`, so
    /// that no Service selects it, then deleted with a short grace period, which the kubelet of
    /// a hung pod ends with SIGKILL (a lost node's never confirms it). False: the relabel
    /// failed, and nothing is promoted this round.
    pub(super) async fn fence_first(&mut self, pod: &str, failing: &Failing) -> bool {
        let why = failing
            .cluster
            .members
            .iter()
            .find(|m| m.name == pod)
            .map_or(String::from("lost"), lost_because);
        let line = format!(
            "Member lost: {pod} (the primary, {why}); fencing it (relabelled {}, so that no Service selects it; its deletion asked) and promoting a standby without waiting for it to stop: with synchronous replication required, no standby follows it, so it cannot acknowledge a commit",
            FENCED
        );
        self.say(line.clone());
        match self.relabel(pod, FENCED).await {
            Ok(()) => {}
            // Gone meanwhile: fenced by the best means there is.
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => {
                self.fail_round();
                self.say(format!(
                    "fencing {pod} failed: {error}; not promoting until it is fenced"
                ));
                return false;
            }
        }
        // A failed DELETE is said; rule 2 deletes a pod left fenced at a later round.
        if self.delete_pod_within(pod, Some(FENCE_GRACE_SECONDS)).await {
            self.event(EventType::Warning, "PrimaryLost", &line).await;
        }
        true
    }

    /// After a failover away from a primary that did not stop: restart the WAL receiver of every
    /// other running replica, so that each connects to `promoted` through the Service. One may
    /// hold a connection to the old primary (frozen, or cut off) that will never answer; left
    /// so, it streams nothing until the not-streaming delay replaces it with a fresh clone.
    /// A failure is said; that delay remains the remedy.
    pub(super) async fn restart_wal_receivers(&mut self, failing: &Failing, promoted: &str) {
        let others: Vec<&str> = failing
            .cluster
            .members
            .iter()
            .filter(|m| m.role == Some(Role::Replica) && m.phase == Phase::Running)
            .map(|m| m.name.as_str())
            .filter(|name| *name != promoted)
            .collect();
        if others.is_empty() {
            return;
        }
        self.say(format!(
            "Restarting the WAL receivers of [{}]: each may still wait on the old primary, which will not answer; a new one finds {promoted} through the Service",
            others.join(", ")
        ));
        let argv = manifests::restart_wal_receiver_argv();
        let (client, namespace) = (self.client(), self.namespace());
        let asked = others
            .iter()
            .map(|pod| psql_in_pod(client, namespace, pod, &argv));
        let answers = futures_util::future::join_all(asked).await;
        for (pod, answer) in others.iter().zip(answers) {
            if let Err(error) = answer {
                self.say(format!(
                    "could not restart the WAL receiver of {pod}: {error}"
                ));
            }
        }
    }
}

/// Members labelled primary, deleted, whose processes have not stopped.
pub(super) fn leaving_unstopped(failing: &Failing) -> impl Iterator<Item = &Seen> {
    failing
        .cluster
        .members
        .iter()
        .filter(|m| m.is(Role::Primary) && m.phase == Phase::Terminating && !m.more.stopped)
}

/// Whether a failover goes on from an old primary that has not stopped: the one it fences
/// (`fence`), one labelled primary still leaving, or one an earlier failover labelled fenced
/// (an operator killed after the fence, before its promotion and the restart of the WAL
/// receivers that follows it: the operator that finishes the failover must restart them).
/// An old primary that stops closes its replication connections, and the standbys reconnect by
/// themselves; one frozen keeps them open, and a WAL receiver that connected to it through the
/// Service before the fence waits for its answer for ever (see `restart_wal_receivers`).
pub(super) fn from_an_unstopped_primary(failing: &Failing, fence: Option<&str>) -> bool {
    let fenced_unstopped = failing
        .cluster
        .members
        .iter()
        .any(|m| m.more.fenced && !m.more.stopped && m.phase != Phase::Done);
    fence.is_some() || leaving_unstopped(failing).next().is_some() || fenced_unstopped
}

/// How long a fenced primary gets to stop before the kubelet kills it (see `act`).
pub(super) const FENCE_GRACE_SECONDS: u32 = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::plan::Observed;

    /// The WAL receivers are restarted after a failover from an old primary that has not
    /// stopped, whichever operator fenced it; not after one that stopped.
    #[test]
    fn an_old_primary_fenced_by_an_earlier_operator_still_counts_until_it_stops() {
        let replicas = || {
            vec![
                Seen::running("db-a", Role::Replica, true),
                Seen::running("db-b", Role::Replica, true),
            ]
        };
        let with = |old: Seen| Failing::of(Observed::of_running([replicas(), vec![old]].concat()));
        let mut old = Seen::running("db-0", Role::Primary, false);
        assert!(from_an_unstopped_primary(&with(old.clone()), Some("db-0")));
        assert!(!from_an_unstopped_primary(&with(old.clone()), None));
        old.phase = Phase::Terminating;
        assert!(from_an_unstopped_primary(&with(old.clone()), None));
        // Relabelled by an operator killed before it promoted: deleted, or not yet.
        old.role = None;
        old.more.fenced = true;
        assert!(from_an_unstopped_primary(&with(old.clone()), None));
        old.phase = Phase::Running;
        assert!(from_an_unstopped_primary(&with(old.clone()), None));
        old.phase = Phase::Terminating;
        old.more.stopped = true;
        assert!(!from_an_unstopped_primary(&with(old), None));
        assert!(!from_an_unstopped_primary(
            &Failing::of(Observed::of_running(replicas())),
            None
        ));
    }
}
