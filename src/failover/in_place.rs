//! Support: a learner may skip it on first read — a primary that came back in recovery, and
//! what `status` says meanwhile.
//!
//! WORKSHOP.md, step 05 ("The crash guard", "When the whole node loses power"). A primary whose
//! container started again (a crash restarted in place, or every container of a node that lost
//! its power) comes back in recovery (the start script, `manifests.rs`). The plan asks it once
//! per start ([`FailoverAction::PromoteInPlace`](super::plan::FailoverAction)) and a task once
//! when it first sees it; this file asks it, then (in recovery) every other member side by side,
//! and promotes the one with the most WAL, the primary itself unless a replica has more. A start is `restartCount` and `startedAt` together: a rebooted node starts
//! its containers anew and may count from 0 again, so neither count alone can be trusted.

use std::collections::HashMap;

use futures_util::future::join_all;

use crate::api::PostgresClusterStatus;
use crate::controller::pods::Pod;
use crate::events::EventType;
use crate::postgres::conditions::{condition, set_condition};
use crate::postgres::manifests::{Role, POSTGRES_CONTAINER};
use crate::postgres::plan::{alive, Phase};
use crate::postgres::PostgresTask;

use super::lines::lsn_text;
use super::plan::{choose, Failing};
use super::WithFailover;

/// One start of a member's postgres container: its restart count and `startedAt`.
pub type Start = (u32, Option<String>);

/// The phase of a cluster whose primary is in recovery and takes no writes: what step 06 also
/// says while a restored seed replays its WAL.
pub const PHASE_RECOVERING: &str = "Recovering";
/// The reason `Available` gives for it; read back, the cluster is one that ran (`has_run`).
pub const IN_RECOVERY_REASON: &str = "PrimaryInRecovery";

/// `pod`'s postgres container start.
pub fn start(pod: &Pod) -> Start {
    let started_at = pod.started_at(POSTGRES_CONTAINER).map(str::to_string);
    (pod.restarts(POSTGRES_CONTAINER), started_at)
}

/// Whether `pod`'s postgres container started since this task last asked about it, or was
/// never asked: a task asks each primary it first sees once.
pub fn restarted(asked: &HashMap<String, Start>, pod: &Pod) -> bool {
    asked.get(&pod.metadata.name) != Some(&start(pod))
}

/// `status` says its primary was found in recovery.
pub fn said_in_recovery(status: &PostgresClusterStatus) -> bool {
    status
        .condition("Available")
        .is_some_and(|c| c.reason == IN_RECOVERY_REASON)
}

/// Over what step 04 computed: a primary found in recovery is not Running, and not Available.
pub fn set_status<L: WithFailover>(
    task: &PostgresTask<L>,
    next: &mut PostgresClusterStatus,
    previous: &PostgresClusterStatus,
    now: &str,
) {
    let Some(pod) = &task.failover_state().in_recovery else {
        return;
    };
    if next.primary.as_ref() != Some(pod) {
        return;
    }
    next.phase = Some(PHASE_RECOVERING.into());
    let message = format!("{pod} came back in recovery and takes no writes; the member with the most WAL is promoted once every member that can answer has");
    let available = condition("Available", false, IN_RECOVERY_REASON, message);
    set_condition(next, previous, available, now);
}

impl<L: WithFailover> PostgresTask<L> {
    /// The primary `pod` started again and is Ready: ask it how far it got. Out of recovery:
    /// nothing to do (a clean stop and start). In recovery: ask every other running member; once
    /// every member that may still answer has (a Pending one, an unready one within the
    /// replacement delay), promote the one with the most WAL, `pod` when none has more, and
    /// label it primary (rule 1a then removes `pod`). Returns the primary it made.
    pub(super) async fn promote_in_place(
        &mut self,
        pod: &str,
        failing: &Failing,
    ) -> Option<String> {
        let primary = match self.position(pod).await {
            Ok(primary) => primary,
            Err(error) => {
                self.say(format!(
                    "cannot tell whether {pod} is in recovery: {error}; asking again next round"
                ));
                self.fail_round();
                return None;
            }
        };
        if !primary.in_recovery {
            self.asked(&[pod.to_string()]);
            return None;
        }
        let others: Vec<String> = alive(&failing.cluster)
            .filter(|m| m.phase == Phase::Running && m.name != pod)
            .map(|m| m.name.clone())
            .collect();
        let answers = join_all(others.iter().map(|name| self.position(name))).await;
        let mut positions = vec![primary];
        for (name, answer) in others.iter().zip(answers) {
            match answer {
                Ok(position) => positions.push(position),
                Err(error) => self.say(format!("cannot ask {name} for its WAL position: {error}")),
            }
        }
        // A member that may still answer could hold more WAL than any that did: wait for it.
        let lost_after = self.options().delays.member_lost_after;
        let waiting: Vec<&str> = alive(&failing.cluster)
            .filter(|m| !positions.iter().any(|p| p.pod == m.name))
            .filter(|m| {
                m.phase == Phase::Pending
                    || (m.phase == Phase::Running && (m.ready || m.unready_for < lost_after))
            })
            .map(|m| m.name.as_str())
            .collect();
        if !waiting.is_empty() {
            if !said_in_recovery(&self.status()) {
                self.say(format!("Primary {pod} came back in recovery; waiting for {} to answer before promoting the member with the most WAL", waiting.join(", ")));
            }
            self.failover_state_mut().in_recovery = Some(pod.to_string());
            return None;
        }
        let chosen = choose(&positions, Some(pod))?.clone();
        if chosen.pod == pod {
            self.say(format!("Primary {pod} was restarted in place and came back in recovery; no member has more WAL, so promoting it where it is"));
        } else {
            self.say(format!(
                "Primary {pod} came back in recovery; {} has more WAL (received up to {}, replayed up to {}), so promoting it in its place",
                chosen.pod,
                lsn_text(chosen.received),
                lsn_text(chosen.replayed)
            ));
        }
        if chosen.in_recovery {
            if let Err(why) = self.promote(&chosen.pod).await {
                let pod = &chosen.pod;
                self.say(format!(
                    "promoting {pod} in place failed: {why}; trying again next round"
                ));
                self.failover_state_mut().in_recovery = Some(pod.to_string());
                self.fail_round();
                return None;
            }
        }
        if chosen.pod != pod {
            self.label_primary(&chosen.pod).await?;
        }
        let line = format!(
            "promoted {} in place: {pod} had come back in recovery",
            chosen.pod
        );
        self.event(EventType::Normal, "PromotedInPlace", &line)
            .await;
        let answered: Vec<String> = positions.into_iter().map(|p| p.pod).collect();
        self.asked(&answered);
        Some(chosen.pod)
    }

    /// Remember the start of each of `pods` (they answered); no primary is in recovery now.
    fn asked(&mut self, pods: &[String]) {
        let snapshot = self.snapshot();
        let state = self.failover_state_mut();
        for name in pods {
            if let Some(pod) = snapshot.iter().find(|p| &p.metadata.name == name) {
                state.starts_asked.insert(name.clone(), start(pod));
            }
        }
        state.in_recovery = None;
    }

    /// A Ready primary this task has never asked about, never restarted: asked now, in the
    /// round's observation, whether it is in recovery (a node that rebooted before this task
    /// began). Out of recovery, or unable to answer (a pod that runs nothing, as the simulated
    /// sandbox's), it is taken as it is; in recovery, it stays `restarted` for the plan.
    pub(super) async fn ask_first_seen_primary(&mut self, failing: &mut Failing) {
        let asked = &self.failover_state().starts_asked;
        let snapshot = self.snapshot();
        let Some(member) = failing.cluster.members.iter_mut().find(|m| {
            m.is(Role::Primary)
                && m.ready
                && !asked.contains_key(&m.name)
                && snapshot
                    .iter()
                    .any(|p| p.metadata.name == m.name && start(p).0 == 0)
        }) else {
            return;
        };
        let in_recovery = self
            .position(&member.name)
            .await
            .is_ok_and(|p| p.in_recovery);
        if !in_recovery {
            member.more.restarted = false;
            let name = member.name.clone();
            self.asked(&[name]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::{ContainerRunning, ContainerStatus};
    use crate::failover::plan::Position;

    fn pod(restarts: u32, started_at: &str) -> Pod {
        let mut pod = Pod::default();
        pod.metadata.name = "db-0".into();
        let mut container = ContainerStatus {
            name: POSTGRES_CONTAINER.into(),
            restart_count: restarts,
            ..ContainerStatus::default()
        };
        container.state.running = Some(ContainerRunning {
            started_at: Some(started_at.into()),
        });
        pod.status.container_statuses.push(container);
        pod
    }

    /// A node back from a power cut starts the container anew with its restart count as it was
    /// (or at 0 again): the start moved all the same. A container never asked about is asked.
    #[test]
    fn a_start_is_seen_whatever_the_restart_count() {
        let mut asked = HashMap::new();
        assert!(restarted(&asked, &pod(0, "T1")));
        asked.insert("db-0".to_string(), start(&pod(0, "T1")));
        assert!(!restarted(&asked, &pod(0, "T1")));
        assert!(restarted(&asked, &pod(0, "T2")));
        assert!(restarted(&asked, &pod(1, "T1")));
    }

    /// The primary stays the choice unless a replica has more WAL; an equal one loses nothing.
    #[test]
    fn the_primary_is_promoted_unless_a_member_has_more_wal() {
        let at = |pod: &str, replayed| Position {
            pod: pod.into(),
            in_recovery: true,
            received: 0,
            replayed,
        };
        let even = [at("db-1", 50), at("db-0", 50)];
        assert_eq!(
            choose(&even, Some("db-0")).map(|p| p.pod.as_str()),
            Some("db-0")
        );
        let ahead = [at("db-1", 60), at("db-0", 50)];
        assert_eq!(
            choose(&ahead, Some("db-0")).map(|p| p.pod.as_str()),
            Some("db-1")
        );
    }
}
