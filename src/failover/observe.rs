//! What step 05 sees of each member besides step 04's view ([`Facts`]): the evidence that a
//! primary is down, how long a deleted one has been stopping, whether a replica streams, whether
//! a container restarted; and the round's wake-up when a delay runs out.
//!
//! WORKSHOP.md, step 05 ("Evidence, not a timer").

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::api::PostgresCluster;
use crate::controller::pods::Pod;
use crate::events::parse_utc;
use crate::postgres::cluster::{since_recorded, unready_recorded};
use crate::postgres::manifests::{Role, POSTGRES_CONTAINER, ROLE_LABEL};
use crate::postgres::plan::{Observed, Phase};
use crate::postgres::PostgresTask;

use super::api::{switchover, SWITCHOVER_ANNOTATION};
use super::plan::{next_deadline, Down, Facts, Failing};
use super::synchronous::quorum;
use super::{in_place, WithFailover, FENCED};

/// Make this round's view ([`Failing`]) from step 04's `observed` and the `pods` it came from:
/// each member's [`Facts`], the switchover asked for, the quorum. When the round plans, also
/// ask what only the API server or the primary can say: whether an unready primary's container
/// exited, and which replicas stream.
pub async fn observe<L: WithFailover>(
    task: &mut PostgresTask<L>,
    pods: &[Arc<Pod>],
    observed: &Observed,
    planning: bool,
) {
    let now = Instant::now();
    let said_in_recovery = in_place::said_in_recovery(&task.status());
    let state = task.failover_state_mut();
    state.synchronous = None;
    let delays = state.delays;
    let exists = |name: &String| pods.iter().any(|p| &p.metadata.name == name);
    state.unready_since.retain(|name, _| exists(name));
    state.terminating_since.retain(|name, _| exists(name));
    state.starts_asked.retain(|name, _| exists(name));
    let mut members = Vec::with_capacity(observed.members.len());
    for member in &observed.members {
        let Some(pod) = pods.iter().find(|p| p.metadata.name == member.name) else {
            continue;
        };
        let name = &member.name;
        let unready_for = if member.phase == Phase::Running && !member.ready {
            let since = *state.unready_since.entry(name.clone()).or_insert_with(|| {
                since_recorded(unready_recorded(pod), now, delays.failover_after / 2)
            });
            now - since
        } else {
            state.unready_since.remove(name);
            Duration::ZERO
        };
        let terminating_for = if member.phase == Phase::Terminating {
            // `deletionTimestamp` is when the grace period ends: the time past it is time the
            // pod has been stuck (a lost node), whoever watched it then.
            let since = *state
                .terminating_since
                .entry(name.clone())
                .or_insert_with(|| {
                    let deadline = pod.metadata.deletion_timestamp.as_deref();
                    since_recorded(deadline, now, delays.stop_timeout / 2)
                });
            now - since
        } else {
            Duration::ZERO
        };
        let restarted = in_place::restarted(&state.starts_asked, pod);
        let started_anew = restarted && state.starts_asked.contains_key(name);
        let facts = Facts {
            fenced: pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(FENCED),
            down: (!member.ready).then(|| node_lost(pod)).flatten(),
            unready_for,
            terminating_for,
            // A deleted pod's phase turns Succeeded or Failed once its containers have exited
            // (Kubernetes 1.27 on; before, it stays Running until the pod goes).
            stopped: member.phase == Phase::Terminating
                && matches!(pod.phase(), "Succeeded" | "Failed"),
            not_streaming_for: Duration::ZERO,
            restarted,
            started_anew,
        };
        members.push(member.clone().with(facts));
    }
    let cluster = task.cluster();
    let mut failing = Failing {
        cluster: Observed {
            members,
            recorded_primary: observed.recorded_primary.clone(),
            has_run: observed.has_run || said_in_recovery,
            size: observed.size,
            wanted_version: observed.wanted_version.clone(),
        },
        switchover_to: switchover_asked(cluster),
        quorum: quorum(cluster),
    };
    if planning {
        task.weigh_unready_primary(&mut failing).await;
        task.ask_first_seen_primary(&mut failing).await;
        task.observe_streaming(&mut failing).await;
    }
    wake_when_a_delay_ends(task, &failing);
    task.failover_state_mut().failing = Some(failing);
}

/// The pod the switchover annotation names, unless it was acted on (`status.switchover`).
fn switchover_asked(cluster: &PostgresCluster) -> Option<String> {
    let done = cluster.status.as_ref().and_then(switchover);
    cluster
        .metadata
        .annotations
        .get(SWITCHOVER_ANNOTATION)
        .filter(|pod| done.as_ref() != Some(*pod))
        .cloned()
}

/// Nudge the task when the first running delay ends (or never, if none runs or the tick comes
/// first), in place of the wake-up set by the round before.
fn wake_when_a_delay_ends<L: WithFailover>(task: &mut PostgresTask<L>, failing: &Failing) {
    let interval = task.options().reconcile_interval;
    let deadline = next_deadline(
        failing,
        &task.options().delays,
        &task.failover_state().delays,
    )
    .filter(|left| *left < interval);
    let nudge = task.nudge();
    let state = task.failover_state_mut();
    if let Some(earlier) = state.wake_up.take() {
        earlier.abort();
    }
    if let Some(left) = deadline {
        state.wake_up = Some(tokio::spawn(async move {
            tokio::time::sleep(left).await;
            nudge.notify_one();
        }));
    }
}

impl<L: WithFailover> PostgresTask<L> {
    /// Whether an unready primary's container has exited ([`Down::Exited`]): one GET of its pod,
    /// only while the primary is unready with nothing more certain known. The pod watch's
    /// `Pod` keeps the fields every step reads, not `containerStatuses`, and an idle cluster
    /// should cost nothing: this is asked in the seconds a primary is unready, not every round.
    async fn weigh_unready_primary(&self, failing: &mut Failing) {
        let client = self.client();
        for member in failing.cluster.members.iter_mut().filter(|m| {
            m.role == Some(Role::Primary)
                && m.phase == Phase::Running
                && !m.ready
                && m.more.down.is_none()
        }) {
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}",
                self.namespace(),
                member.name
            );
            match client.get::<Value>(&path).await {
                Ok(pod) if container_exited(&pod) => member.more.down = Some(Down::Exited),
                Ok(_) => {}
                // Not known: the failover delay decides, as for a failed probe.
                Err(error) => {
                    tracing::debug!(%error, pod = %member.name, "could not read the unready primary's container status")
                }
            }
        }
    }
}

/// [`Down::NodeLost`] when `pod`'s node stopped reporting, as its object shows it: phase
/// Unknown (the node controller of old Kubernetes releases set it), or Ready False while
/// ContainersReady stays True. The kubelet sets both conditions from the same probe results; the
/// node lifecycle controller, once the node's grace period is over, turns only Ready False
/// (`MarkPodsNotReady`). (A pod with readiness gates could show the same; ours have none.)
fn node_lost(pod: &Pod) -> Option<Down> {
    let status_of = |kind: &str| {
        pod.status
            .conditions
            .iter()
            .find(|c| c.type_ == kind)
            .map(|c| c.status.as_str())
    };
    let marked =
        status_of("Ready") == Some("False") && status_of("ContainersReady") == Some("True");
    (pod.phase() == "Unknown" || marked).then_some(Down::NodeLost)
}

/// Whether the postgres container of `pod` (the whole object, as a GET returns it) has exited
/// since the pod went unready: `state.terminated` (it ended, and is not restarted yet),
/// `state.waiting` after a `lastState.terminated` (CrashLoopBackOff: the kubelet waits its
/// back-off before the restart), or running again after a `lastState.terminated` that ended
/// when the pod went unready or after (the records are in whole seconds: a second's slack).
fn container_exited(pod: &Value) -> bool {
    let Some(container) = pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["name"] == POSTGRES_CONTAINER))
    else {
        return false;
    };
    let ended = &container["lastState"]["terminated"];
    if container["state"]["terminated"].is_object() {
        return true;
    }
    if container["state"]["waiting"].is_object() {
        return ended.is_object();
    }
    let unready_at = pod["status"]["conditions"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|c| c["type"] == "Ready" && c["status"] != "True")
        })
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(parse_utc);
    let ended_at = ended["finishedAt"].as_str().and_then(parse_utc);
    match (ended_at, unready_at) {
        (Some(ended), Some(unready)) => ended + Duration::from_secs(1) >= unready,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::PodCondition;

    /// Ready False with ContainersReady True is the node controller's mark, not the kubelet's:
    /// the node is lost. Both False is a failed probe (or an exited container), which this does
    /// not tell apart.
    #[test]
    fn a_pod_marked_unready_by_the_node_controller_is_on_a_lost_node() {
        let with = |ready: &str, containers_ready: &str| {
            let mut pod = Pod::default();
            pod.status.phase = Some("Running".into());
            for (kind, status) in [("Ready", ready), ("ContainersReady", containers_ready)] {
                pod.status.conditions.push(PodCondition {
                    type_: kind.into(),
                    status: status.into(),
                    last_transition_time: None,
                });
            }
            pod
        };
        assert_eq!(node_lost(&with("False", "True")), Some(Down::NodeLost));
        assert_eq!(node_lost(&with("False", "False")), None);
        let mut unknown = with("True", "True");
        unknown.status.phase = Some("Unknown".into());
        assert_eq!(node_lost(&unknown), Some(Down::NodeLost));
    }

    /// A container terminated, or waiting after it ended, or restarted since the pod went
    /// unready, has exited; one running since before (a probe that fails) has not.
    #[test]
    fn an_exited_container_is_told_from_a_failed_probe() {
        let pod = |state: Value, last: Value, unready_at: &str| {
            serde_json::json!({"status": {
                "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": unready_at}],
                "containerStatuses": [{"name": POSTGRES_CONTAINER, "state": state, "lastState": last}],
            }})
        };
        let ended = serde_json::json!({"terminated": {"exitCode": 137, "finishedAt": "2026-01-01T10:00:00Z"}});
        let running = serde_json::json!({"running": {"startedAt": "2026-01-01T10:00:01Z"}});
        let at = "2026-01-01T10:00:00Z";
        assert!(container_exited(&pod(
            ended.clone(),
            serde_json::json!({}),
            at
        )));
        let back_off = serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}});
        assert!(container_exited(&pod(back_off, ended.clone(), at)));
        // Restarted in place, the pod not ready again yet.
        assert!(container_exited(&pod(running.clone(), ended.clone(), at)));
        // The last exit long before this spell of unreadiness: a failed probe.
        assert!(!container_exited(&pod(
            running.clone(),
            ended,
            "2026-01-01T11:00:00Z"
        )));
        assert!(!container_exited(&pod(running, serde_json::json!({}), at)));
        assert!(!container_exited(&serde_json::json!({})));
    }
}
