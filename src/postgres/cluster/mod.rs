//! One `PostgresCluster`'s task in stage 04: observe, decide one action, act, write status —
//! on every tick, every spec change, and every change to one of the cluster's pods.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop"). Where stage 03's task said `PLACEHOLDER`, this
//! one acts: it creates the Secret, ConfigMap and Services the pods need, launches the seed,
//! grows and shrinks the cluster one replica at a time, replaces lost members, fails over, and
//! tells the story in log lines, Events and `status`.
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

use serde_json::Value;
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

use super::api::{switchover, validate_spec, SynchronousStatus, SWITCHOVER_ANNOTATION};
use super::conditions::{next_status, PHASE_FAILED, PHASE_RUNNING};
use super::manifests::{self, Credentials, Role, POSTGRES_CONTAINER, ROLE_LABEL};
use super::plan::{
    choose, next_action, next_deadline, version_change, Action, Delays, DeleteReason, Down, Member,
    Observed, Phase, Position, VersionChange,
};

mod act;
mod ask;
mod expectations;
mod fence;
mod layer;
mod lines;
mod owned;
mod status;
mod streaming;
mod synchronous;
mod wakers;
mod worker;

pub use ask::psql_in_pod;
use expectations::Expect;
pub use layer::{ClusterLayer, Planned};
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
    /// When this task first saw each pod terminating.
    terminating_since: HashMap<String, Instant>,
    /// Each pod's postgres container restart count when this task last asked its server
    /// whether it is in recovery (`Action::PromoteInPlace`); a count above it is a restart
    /// since. A new task asks a primary that was ever restarted once.
    restarts_asked: HashMap<String, u32>,
    expecting: Option<(Expect, Instant)>,
    /// The last "Running: [...], pending: [...]" line, said again only when it changes.
    last_members_line: String,
    /// When the Secret, ConfigMap and Services were last checked.
    owned_checked: Option<Instant>,
    /// The pod this task last set `synchronous_standby_names` on, and to what; `None` in the
    /// value: asynchronous (`synchronous.rs`).
    synchronous_set: Option<(String, Option<SynchronousStatus>)>,
    /// This task's entry in [`Wakers`]: its `notify` wakes the loop (`woken`). A pod event does,
    /// and so does the timer set for the end of the first running delay
    /// (`plan::next_deadline`), which the next round acts on.
    registered: Registered,
    wake_up: Option<tokio::task::JoinHandle<()>>,
    /// Which replicas the primary was last found streaming to (`streaming.rs`).
    streaming: streaming::StreamingWatch,
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
    let mut task = PostgresTask {
        key: cluster.key(),
        cluster,
        worker,
        unready_since: HashMap::new(),
        terminating_since: HashMap::new(),
        restarts_asked: HashMap::new(),
        expecting: None,
        last_members_line: String::new(),
        owned_checked: None,
        synchronous_set: None,
        registered,
        wake_up: None,
        streaming: streaming::StreamingWatch::default(),
        round_failed: false,
        layer: L::State::default(),
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
        if take_newer(&mut self.cluster, newer, validate_spec, say) {
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

    /// One round. Never fails: what goes wrong is said, and the next round tries again.
    async fn round(&mut self) {
        if let Err(error) = validate_spec(&self.cluster.spec) {
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
            switchover_to: self
                .cluster
                .metadata
                .annotations
                .get(SWITCHOVER_ANNOTATION)
                .filter(|pod| switchover(&status).as_ref() != Some(*pod))
                .cloned(),
            quorum: synchronous::quorum(&self.cluster),
        };
        let planning = !self.cluster.spec.paused && waiting_for_watch.is_none();
        if planning {
            self.weigh_unready_primary(&mut observed).await;
            self.observe_streaming(&mut observed).await;
        }
        L::observe(self, &pods, &mut observed).await;
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
        self.wake_when_a_delay_ends(&observed);
        let acted = match &planned {
            Planned::Core(action) => self.act(action, &observed, image_version.as_deref()).await,
            Planned::Own(action) => L::act(self, action, image_version.as_deref()).await,
        };
        let primary_after = acted.or(primary_now);
        if !self.cluster.spec.paused {
            let steady = planned == Planned::Core(Action::Steady);
            L::after_round(self, &own_pods, &observed, steady).await;
        }
        let synchronous = self
            .keep_synchronous(&observed, primary_after.as_deref())
            .await;

        let now = rfc3339(std::time::SystemTime::now());
        let mut next = next_status(
            &self.cluster,
            &observed,
            primary_after.as_deref(),
            &action,
            &version,
            &now,
        );
        synchronous::set_status(&mut next, &self.status(), synchronous, &now);
        L::status(self, &planned, &mut next, &now);
        self.write_status(next).await;
        // ANCHOR_END: round
    }

    /// Nudge this task when the first running delay ends (or never, if none runs or the tick
    /// comes first), in place of the wake-up set by the round before.
    fn wake_when_a_delay_ends(&mut self, observed: &Observed) {
        if let Some(earlier) = self.wake_up.take() {
            earlier.abort();
        }
        let deadline = next_deadline(observed, &self.worker.options.delays)
            .filter(|left| *left < self.worker.options.reconcile_interval);
        if let Some(left) = deadline {
            let nudge = Arc::clone(&self.registered.notify);
            self.wake_up = Some(tokio::spawn(async move {
                tokio::time::sleep(left).await;
                nudge.notify_one();
            }));
        }
    }

    /// The cluster's pods in the store now: in its namespace and owned by its uid, shared with
    /// the store (no copy per round).
    fn snapshot(&self) -> Vec<Arc<Pod>> {
        let namespace = &self.cluster.metadata.namespace;
        let uid = &self.cluster.metadata.uid;
        self.worker
            .pods
            .list(|pod: &Pod| &pod.metadata.namespace == namespace && pod.is_owned_by(uid))
    }

    /// The cluster's pods, reduced to what the plan reads.
    fn observe(&mut self, pods: &[Arc<Pod>]) -> Vec<Member> {
        let now = Instant::now();
        let Delays {
            failover_after,
            stop_timeout,
            ..
        } = self.worker.options.delays;
        let exists = |name: &String| pods.iter().any(|p| &p.metadata.name == name);
        self.unready_since.retain(|name, _| exists(name));
        self.terminating_since.retain(|name, _| exists(name));
        self.restarts_asked.retain(|name, _| exists(name));
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
                            since_recorded(unready_recorded(pod), now, failover_after / 2)
                        });
                    now - since
                } else {
                    self.unready_since.remove(&pod.metadata.name);
                    Duration::ZERO
                };
                let terminating_for = if phase == Phase::Terminating {
                    // `deletionTimestamp` is when the grace period ends: the time past it is
                    // time the pod has been stuck (a lost node), whoever watched it then.
                    let since = *self
                        .terminating_since
                        .entry(pod.metadata.name.clone())
                        .or_insert_with(|| {
                            let deadline = pod.metadata.deletion_timestamp.as_deref();
                            since_recorded(deadline, now, stop_timeout / 2)
                        });
                    now - since
                } else {
                    Duration::ZERO
                };
                Member {
                    name: pod.metadata.name.clone(),
                    role: match pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) {
                        Some("primary") => Some(Role::Primary),
                        Some("replica") => Some(Role::Replica),
                        Some("fenced") => Some(Role::Fenced),
                        _ => None,
                    },
                    phase,
                    ready,
                    down: (!ready).then(|| node_lost(pod)).flatten(),
                    unready_for,
                    terminating_for,
                    // A deleted pod's phase turns Succeeded or Failed once its containers have
                    // exited (Kubernetes 1.27 on; before, it stays Running until the pod goes).
                    stopped: phase == Phase::Terminating
                        && matches!(pod.phase(), "Succeeded" | "Failed"),
                    not_streaming_for: Duration::ZERO,
                    version: image_tag(pod),
                    created: pod.metadata.creation_timestamp.clone().unwrap_or_default(),
                    restarted: pod.restarts(POSTGRES_CONTAINER)
                        > self
                            .restarts_asked
                            .get(&pod.metadata.name)
                            .copied()
                            .unwrap_or(0),
                }
            })
            .collect()
    }

    /// Whether an unready primary's container has exited ([`Down::Exited`]): one GET of its pod,
    /// only while the primary is unready with nothing more certain known. The pod watch's
    /// [`Pod`] keeps the fields every step reads, not `containerStatuses`, and an idle cluster
    /// should cost nothing: this is asked in the seconds a primary is unready, not every round.
    async fn weigh_unready_primary(&self, observed: &mut Observed) {
        let client = &self.worker.client;
        for member in observed.members.iter_mut().filter(|m| {
            m.role == Some(Role::Primary)
                && m.phase == Phase::Running
                && !m.ready
                && m.down.is_none()
        }) {
            let path = format!(
                "/api/v1/namespaces/{}/pods/{}",
                self.namespace(),
                member.name
            );
            match client.get::<Value>(&path).await {
                Ok(pod) if container_exited(&pod) => member.down = Some(Down::Exited),
                Ok(_) => {}
                // Not known: the failover delay decides, as for a failed probe.
                Err(error) => {
                    tracing::debug!(%error, pod = %member.name, "could not read the unready primary's container status")
                }
            }
        }
    }

    /// An Event about the cluster, what `kubectl describe pgc` shows.
    pub async fn event(&self, kind: EventType, reason: &str, message: &str) {
        let client = &self.worker.client;
        events::record(client, &self.cluster, kind, reason, message).await;
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

/// When the kubelet recorded `pod` going unready: its Ready condition's `lastTransitionTime`.
fn unready_recorded(pod: &Pod) -> Option<&str> {
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
fn since_recorded(recorded: Option<&str>, now: Instant, at_most: Duration) -> Instant {
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
