//! One `PostgresCluster`'s task in stage 04: observe, decide one action, act, write status —
//! on every tick, every spec change, and every change to one of the cluster's pods.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop"). Where stage 03's task said `PLACEHOLDER`, this
//! one acts: it creates the Secret, ConfigMap and Services the pods need, launches the seed,
//! grows and shrinks the cluster one replica at a time, replaces lost replicas, and tells the
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
use std::sync::Arc;

use tokio::time::Instant;

use crate::api::PostgresCluster;
use crate::controller::cluster::{
    introduction, run_task_loop, take_newer, ClusterReconciler, TaskEnd,
};
use crate::controller::pods::Pod;
use crate::controller::ClusterInbox;
use crate::events::{rfc3339, EventType};

use super::api::{validate_spec, SpecError};
use super::conditions::{next_status, PHASE_FAILED, PHASE_RUNNING};
use super::manifests::{self, Role};
use super::plan::{next_action, version_change, Action, Observed, Phase, VersionChange};

mod access;
mod act;
mod ask;
mod expectations;
mod layer;
mod lines;
mod observe;
mod options;
mod owned;
mod pod_calls;
mod status;
mod wakers;
mod worker;

pub use ask::psql_in_pod;
use expectations::Expect;
pub use layer::{ClusterLayer, NoFlags, Planned};
pub use observe::{since_recorded, unready_recorded};
pub use options::PostgresOptions;
pub use owned::OwnedError;
use wakers::Registered;
pub use wakers::Wakers;
pub use worker::PostgresWorker;

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
    /// refused), and a round at once, whatever changed: a later step's annotation may ask for
    /// a switchover or a backup. A new spec also has the owned objects checked again.
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
    /// the API server next to nothing (WORKSHOP.md, "Design notes: What an idle cluster asks").
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
}

/// The spec is valid for step 04 and for the layer.
fn valid<L: ClusterLayer>(spec: &crate::api::PostgresClusterSpec) -> Result<(), SpecError> {
    validate_spec(spec)?;
    L::validate(spec).map_err(SpecError::Layer)
}
