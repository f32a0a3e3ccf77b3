//! Support: skip it on first read — how the round's pods become the plan's members: the
//! cluster's pods read from the store, each reduced to its name, role label, phase, readiness,
//! how long it has been unready, image tag and age (`plan::Member`). What the plan decides from
//! them is `plan.rs`'s.
//!
//! WORKSHOP.md, step 04 ("One action per tick").

use std::time::Duration;

use super::*;
use crate::events::parse_utc;
use crate::postgres::manifests::{POSTGRES_CONTAINER, ROLE_LABEL};
use crate::postgres::plan::Member;

impl<L: ClusterLayer> PostgresTask<L> {
    /// The cluster's pods in the store now: in its namespace and owned by its uid, shared with
    /// the store (no copy per round).
    pub fn snapshot(&self) -> Vec<Arc<Pod>> {
        let namespace = &self.cluster.metadata.namespace;
        let uid = &self.cluster.metadata.uid;
        self.worker
            .pods
            .list(|pod: &Pod| &pod.metadata.namespace == namespace && pod.is_owned_by(uid))
    }

    /// The cluster's pods, reduced to what the plan reads.
    pub(super) fn observe(&mut self, pods: &[Arc<Pod>]) -> Vec<Member> {
        let now = Instant::now();
        let member_lost_after = self.worker.options.delays.member_lost_after;
        let exists = |name: &String| pods.iter().any(|p| &p.metadata.name == name);
        self.unready_since.retain(|name, _| exists(name));
        pods.iter()
            .map(|pod| {
                let phase = if pod.is_terminating() {
                    Phase::Terminating
                } else {
                    match pod.phase() {
                        "Running" => Phase::Running,
                        "Succeeded" | "Failed" => Phase::Done,
                        // Unknown: the node stopped reporting. It may still run; treat it as a
                        // running pod that is not ready, which the delays then judge.
                        "Unknown" => Phase::Running,
                        _ => Phase::Pending,
                    }
                };
                let ready = phase == Phase::Running && pod.is_ready();
                let unready_for = if phase == Phase::Running && !ready {
                    let since = *self
                        .unready_since
                        .entry(pod.metadata.name.clone())
                        .or_insert_with(|| {
                            since_recorded(unready_recorded(pod), now, member_lost_after / 2)
                        });
                    now - since
                } else {
                    self.unready_since.remove(&pod.metadata.name);
                    Duration::ZERO
                };
                Member {
                    name: pod.metadata.name.clone(),
                    role: match pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) {
                        Some("primary") => Some(Role::Primary),
                        Some("replica") => Some(Role::Replica),
                        _ => None,
                    },
                    phase,
                    ready,
                    unready_for,
                    version: image_tag(pod),
                    created: pod.metadata.creation_timestamp.clone().unwrap_or_default(),
                    more: (),
                }
            })
            .collect()
    }
}

/// When the kubelet recorded `pod` going unready: its Ready condition's `lastTransitionTime`.
pub fn unready_recorded(pod: &Pod) -> Option<&str> {
    pod.status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready" && c.status != "True")
        .and_then(|c| c.last_transition_time.as_deref())
}

/// A time `recorded` in the pod's object, as an instant on this task's clock, for a task that
/// first sees the pod `now`: a task that starts while a delay runs (a new operator, a new leader)
/// does not start it again. The record is in whole seconds, so
/// up to a second early: a second is taken off. It comes from another clock (the node's, the
/// API server's): at most `at_most` is credited, so a skewed clock cannot make a task act the
/// moment it first sees the pod.
pub fn since_recorded(recorded: Option<&str>, now: Instant, at_most: Duration) -> Instant {
    let elapsed = recorded
        .and_then(parse_utc)
        .and_then(|at| std::time::SystemTime::now().duration_since(at).ok())
        .unwrap_or_default();
    let credited = elapsed.saturating_sub(Duration::from_secs(1)).min(at_most);
    now.checked_sub(credited).unwrap_or(now)
}

/// The tag of the pod's postgres container image: `postgres:16.4` → `16.4`.
fn image_tag(pod: &Pod) -> String {
    let image = pod
        .spec
        .containers
        .iter()
        .find(|c| c.name == POSTGRES_CONTAINER)
        .or(pod.spec.containers.first())
        .map_or("", |c| c.image.as_str());
    // A registry with a port (`host:5000/postgres`) has a ':' before the last '/'.
    let name_and_tag = image.rsplit('/').next().unwrap_or(image);
    name_and_tag
        .split_once(':')
        .map_or(String::new(), |(_, tag)| tag.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::pods::PodCondition;
    use std::time::SystemTime;

    fn unready_since(seconds_ago: u64) -> Pod {
        let mut pod = Pod::default();
        pod.status.conditions.push(PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            last_transition_time: Some(rfc3339(
                SystemTime::now() - Duration::from_secs(seconds_ago),
            )),
        });
        pod
    }

    /// A task that first sees a pod unready credits what the kubelet recorded, less a second
    /// (whole-second timestamps), and never more than it is allowed (here half the delay).
    #[test]
    fn the_kubelets_record_of_unready_counts_toward_a_delay() {
        let now = Instant::now();
        let delay = Duration::from_secs(6);
        let credited = |pod: &Pod| now - since_recorded(unready_recorded(pod), now, delay / 2);
        assert_eq!(credited(&unready_since(0)), Duration::ZERO);
        let two = credited(&unready_since(2));
        assert!(
            two > Duration::ZERO && two <= Duration::from_secs(2),
            "{two:?}"
        );
        assert_eq!(credited(&unready_since(600)), Duration::from_secs(3));
        assert_eq!(credited(&Pod::default()), Duration::ZERO);
    }
}
