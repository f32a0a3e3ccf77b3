//! One `PostgresCluster`'s task in stage 04: observe, decide one action, act, write status —
//! on every tick, every spec change, and every change to one of the cluster's pods.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop"). Where stage 03's task said `PLACEHOLDER`, this
//! one acts: it creates the Secret, ConfigMap and Services the pods need, launches the seed,
//! grows and shrinks the cluster one replica at a time, replaces lost members, and tells the
//! story in log lines, Events and `status`.
//!
//! ```text
//!   pod watch ──▶ Store<Pod> ◀─── observe ──▶ plan::next_action ──▶ act ──▶ status (if changed)
//!       │                            ▲                                 │
//!       └── nudge (pod changed) ─────┤                                 └─▶ Event, story line
//!   cluster watch ── spec change ────┤
//!   timer ───────────────────────────┘
//! ```
//!
//! The pods are read from the pod watch's [`Store`](crate::watch::Store), not listed on every
//! round: the watch keeps it current, and a pod event wakes this task (a "nudge"). One catch, the
//! one client-go's ReplicaSet controller calls *expectations* (`expectations.rs`): right after we
//! create or delete a pod, the store may not show it yet, and a round planned from that stale
//! view would create a second pod. So after each action the task waits until the store shows its
//! effect (or a timeout passes).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use std::sync::Arc;

use crate::api::{PostgresCluster, PostgresClusterStatus};
use crate::client::{Client, ClientError, Patch};
use crate::controller::cluster::{
    introduction, run_task_loop, take_newer, ClusterReconciler, TaskEnd,
};
use crate::controller::pods::Pod;
use crate::controller::ClusterInbox;
use crate::events::{self, parse_utc, rfc3339, EventType};
use crate::exec::{exec, ExecLimits};

use super::api::{validate_spec, SpecError};
use super::conditions::{next_status, PHASE_FAILED, PHASE_RUNNING};
use super::manifests::{self, Credentials, Role, POSTGRES_CONTAINER, ROLE_LABEL};
use super::plan::{next_action, version_change, Action, Member, Observed, Phase, VersionChange};

mod act;
mod ask;
mod expectations;
mod layer;
mod lines;
mod owned;
mod status;
mod wakers;
mod worker;

pub use ask::psql_in_pod;
use expectations::Expect;
pub use layer::{ClusterLayer, NoFlags, Planned};
pub use owned::OwnedError;
use wakers::Registered;
pub use wakers::Wakers;
pub use worker::{PostgresOptions, PostgresWorker};

/// One cluster's task: the cluster as last seen, and what the task remembers between rounds.
/// Its `pub` methods are what a [`ClusterLayer`] may use.
pub struct PostgresTask<L: ClusterLayer> {
    worker: PostgresWorker<L>,
    cluster: PostgresCluster,
    key: String,
    /// When this task first saw each pod Running but not Ready.
    unready_since: HashMap<String, Instant>,
    expecting: Option<(Expect, Instant)>,
    /// The last "Running: [...], pending: [...]" line, said again only when it changes.
    last_members_line: String,
    /// When the Secret, ConfigMap and Services were last checked.
    owned_checked: Option<Instant>,
    /// This task's entry in [`Wakers`]: its `notify` wakes the loop (`woken`). A pod event does
    /// (and a layer may, through [`PostgresTask::nudge`]).
    registered: Registered,
    /// Something this round set out to do failed (`/metrics` counts such rounds).
    round_failed: bool,
    /// The layer's own state for this cluster.
    pub layer: L::State,
}

/// The task body: set up, then loop until the cluster is deleted or the operator stops.
async fn run<L: ClusterLayer>(
    worker: PostgresWorker<L>,
    cluster: PostgresCluster,
    inbox: ClusterInbox,
) -> TaskEnd {
    let interval = worker.options.reconcile_interval;
    // `/healthz` watches this loop until the task ends (and fails if it panics).
    let _loop = worker.options.metrics.reconcile_loop(&cluster.key());
    let registered = worker.wakers.register(&cluster.key());
    let layer = worker.layer.new_state();
    let mut task = PostgresTask {
        key: cluster.key(),
        cluster,
        worker,
        unready_since: HashMap::new(),
        expecting: None,
        last_members_line: String::new(),
        owned_checked: None,
        registered,
        round_failed: false,
        layer,
    };
    task.say(introduction(&task.cluster).0);
    // Unlike stage 03, the first round is now: there is work to do.
    task.reconcile().await;
    run_task_loop(&mut task, inbox, interval).await
}

/// Stage 04's reconciler for the loop every step shares (`controller::cluster::run_task_loop`).
impl<L: ClusterLayer> ClusterReconciler for PostgresTask<L> {
    fn say(&self, line: &str) {
        PostgresTask::say(self, line);
    }

    /// A newer object from the watch (`take_newer`: a changed spec is said, an invalid one
    /// refused), and a round at once, whatever changed: an annotation may ask for a switchover
    /// or a backup. A new spec also has the owned objects checked again.
    fn take(&mut self, newer: PostgresCluster) -> bool {
        let (reporter, key) = (&self.worker.reporter, &self.key);
        let say = |line| reporter.report(key, line);
        if take_newer(&mut self.cluster, newer, valid::<L>, say) {
            // A new spec may need objects the old one did not.
            self.owned_checked = None;
        }
        true
    }

    /// One round, counted and timed for `/metrics` and `/healthz`.
    async fn reconcile(&mut self) {
        let started = Instant::now();
        self.round_failed = false;
        self.round().await;
        let metrics = &self.worker.options.metrics;
        metrics.round_ended(&self.key, started.elapsed(), self.round_failed);
    }

    /// Re-check the owned objects on the timer only, and only once `owned_recheck` has passed:
    /// a burst of pod events must not turn into a burst of GETs, and an idle cluster should cost
    /// the API server next to nothing (four GETs every round was ~30 requests a minute each).
    async fn tick(&mut self) {
        let recheck = self.worker.options.owned_recheck;
        if self.owned_checked.is_some_and(|at| at.elapsed() >= recheck) {
            self.owned_checked = None;
        }
        self.reconcile().await;
    }

    fn woken(&self) -> impl Future<Output = ()> + Send {
        self.registered.notify.notified()
    }

    async fn deleted(&mut self) {
        PostgresTask::say(self, "cluster is deleted by the user; the garbage collector deletes its pods, Services, Secret and ConfigMap (they carry its ownerReference)");
    }
}

impl<L: ClusterLayer> PostgresTask<L> {
    /// A story line about this cluster.
    pub fn say(&self, line: impl Into<String>) {
        self.worker.reporter.report(&self.key, line);
    }

    /// The cluster as last seen (its spec, metadata, and the status last written).
    pub fn cluster(&self) -> &PostgresCluster {
        &self.cluster
    }

    pub fn client(&self) -> &Client {
        &self.worker.client
    }

    pub fn namespace(&self) -> &str {
        &self.cluster.metadata.namespace
    }

    /// The status as the cluster object holds it: last written by this task, or by an earlier
    /// run (empty for a new cluster).
    pub fn status(&self) -> PostgresClusterStatus {
        self.cluster.status.clone().unwrap_or_default()
    }

    /// Count this round as failed in `/metrics`; the story has said why.
    pub fn fail_round(&mut self) {
        self.round_failed = true;
    }

    /// The options every task shares.
    pub fn options(&self) -> &PostgresOptions {
        &self.worker.options
    }

    /// What wakes this task for a round: a layer that needs one before the tick notifies it.
    pub fn nudge(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.registered.notify)
    }

    /// One round. Never fails: what goes wrong is said, and the next round tries again.
    async fn round(&mut self) {
        if let Err(error) = valid::<L>(&self.cluster.spec) {
            tracing::debug!(%error, "spec invalid; not acting");
            return;
        }
        if self.owned_checked.is_none() {
            match self.ensure_owned().await {
                Ok(()) => self.owned_checked = Some(Instant::now()),
                Err(error) => {
                    self.say(format!(
                        "could not create the cluster's objects: {error}; trying again next round"
                    ));
                    self.fail_round();
                    return;
                }
            }
        }
        // One snapshot of the store for the whole round: the watch keeps writing to it, and an
        // expectation checked against a later read than the plan's could pass while the plan
        // still misses the pod (and creates a second one).
        // ANCHOR: round
        // ANCHOR: plan_one_action
        let all_pods = self.snapshot();
        let waiting_for_watch = self.still_expecting(&all_pods);
        let (own_pods, pods): (Vec<Arc<Pod>>, Vec<Arc<Pod>>) =
            all_pods.into_iter().partition(|pod| L::is_own_pod(pod));
        let status = self.status();
        let mut observed = Observed {
            members: self.observe(&pods),
            recorded_primary: status.primary.clone(),
            has_run: matches!(
                status.phase.as_deref(),
                Some(PHASE_RUNNING) | Some(PHASE_FAILED)
            ),
            size: usize::try_from(self.cluster.spec.size).unwrap_or(0),
            wanted_version: self.cluster.spec.version.clone(),
        };
        let planning = !self.cluster.spec.paused && waiting_for_watch.is_none();
        L::observe(self, &pods, &mut observed, planning).await;
        self.say_members(&observed);

        let primary = observed
            .members
            .iter()
            .find(|m| m.role == Some(Role::Primary) && m.phase != Phase::Terminating);
        let primary_now = primary.map(|m| m.name.clone());
        let running_version = primary
            .map(|m| m.version.clone())
            .or(status.current_version.clone());
        let version = version_change(
            running_version.as_deref(),
            &self.cluster.spec.version,
            observed.size,
        );

        let action = if self.cluster.spec.paused {
            Action::Wait("the cluster is paused (spec.paused)".into())
        } else if let Some(waiting) = waiting_for_watch {
            Action::Wait(waiting)
        } else {
            next_action(&observed, &self.worker.options.delays)
        };
        // ANCHOR_END: plan_one_action
        // The layer's word on a planned action: the same, or one of its own in its place.
        let planned = if planning {
            L::plan(self, &observed, action.clone())
        } else {
            Planned::Core(action.clone())
        };
        // New pods run the spec's version, unless a change to it is refused: then the version the
        // cluster runs, or a replica of another major would be cloned from this primary's data.
        let image_version = match version {
            VersionChange::None | VersionChange::Minor => None,
            _ => running_version.clone(),
        };
        let acted = match &planned {
            Planned::Core(action) => self.act(action, &observed, image_version.as_deref()).await,
            Planned::Own(action) => L::act(self, action, image_version.as_deref()).await,
        };
        let primary_after = acted.or(primary_now);
        if !self.cluster.spec.paused {
            let steady = planned == Planned::Core(Action::Steady);
            L::after_round(self, &own_pods, &observed, primary_after.as_deref(), steady).await;
        }

        let now = rfc3339(std::time::SystemTime::now());
        // Step 04's words for the action it planned, or for the one a layer kept of its own.
        let core_action = match &planned {
            Planned::Core(kept) => kept,
            Planned::Own(_) => &action,
        };
        let mut next = next_status(
            &self.cluster,
            &observed,
            primary_after.as_deref(),
            core_action,
            &version,
            &now,
        );
        L::status(self, &planned, &mut next, &now);
        self.write_status(next).await;
        // ANCHOR_END: round
    }

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
    fn observe(&mut self, pods: &[Arc<Pod>]) -> Vec<Member> {
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

    /// An Event about the cluster, what `kubectl describe pgc` shows.
    pub async fn event(&self, kind: EventType, reason: &str, message: &str) {
        let client = &self.worker.client;
        events::record(client, &self.cluster, kind, reason, message).await;
    }
}

/// The spec is valid for step 04 and for the layer.
fn valid<L: ClusterLayer>(spec: &crate::api::PostgresClusterSpec) -> Result<(), SpecError> {
    validate_spec(spec)?;
    L::validate(spec).map_err(SpecError::Layer)
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
/// first sees the pod `now`: a task that starts mid-failover (a new operator, a new leader) does
/// not start the failover delay or the stop timeout again. The record is in whole seconds, so
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
    fn the_kubelets_record_of_unready_counts_toward_the_failover_delay() {
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
