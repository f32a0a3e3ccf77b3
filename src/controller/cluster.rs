//! One `PostgresCluster`'s task: set up, then loop over "stop", "the spec changed" and "time to
//! reconcile" until the cluster is deleted or the operator stops.
//!
//! WORKSHOP.md, step 03 ("The cluster task"). The controller in `mod.rs` starts one of these per
//! cluster through stage 03's worker, [`PlaceholderTask`] (below); nothing in here knows about
//! the other clusters. The loop itself,
//! [`run_task_loop`], is every step's: stage 03's placeholder plugs in here, stage 04's task
//! (`crate::postgres`) its own [`ClusterReconciler`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use super::pods::{label_selector, Pod, PodApi, PodApiError};
use super::{ClusterInbox, ClusterWorker, Controller, ControllerOptions};
use crate::api::{describe_status, validate_spec, PostgresCluster, PostgresClusterSpec};
use crate::story::Reporter;

/// What the controller wants a cluster to be. Sent over a `tokio::sync::watch` channel, which
/// holds one value: a newer `Wanted` replaces an unread older one (see the module docs of
/// `controller` for why that is right here).
#[derive(Clone, Debug)]
pub enum Wanted<K = PostgresCluster> {
    /// The latest object from the API server (spec and metadata), as the watch handed it over.
    Object(Arc<K>),
    /// The user deleted the cluster. Nothing can follow this, so it may replace any pending object.
    Deleted,
}

/// Why a cluster task ended; the controller logs it when it collects the task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// The user deleted the cluster and we cleaned up.
    Deleted,
    /// The operator is shutting down.
    Stopped,
}

/// One cluster's state, as its task sees it.
struct ClusterTask<P> {
    /// The newest object we accepted. Its `spec` is what reconcile works towards.
    cluster: PostgresCluster,
    key: String,
    pods: P,
    reporter: Reporter,
    /// Setup succeeded: the spec validated once, and the cluster was created or adopted.
    set_up: bool,
}

/// What a cluster task does when it is woken. [`run_task_loop`] does the waking, the same for
/// every step (as kube-rs's `Controller::run` takes only the reconcile): stage 03's placeholder
/// below is one reconciler, stage 04's Postgres task another.
pub trait ClusterReconciler<K = PostgresCluster>: Send {
    /// A story line about this cluster.
    fn say(&self, line: &str);
    /// A newer object from the watch (a spec change, a label or status change; from step 04 on,
    /// the task's own status write coming back).
    /// `true`: reconcile now; `false`: wait for the timer.
    fn take(&mut self, newer: K) -> bool;
    /// One reconcile round.
    fn reconcile(&mut self) -> impl Future<Output = ()> + Send;
    /// The timer fired: by default a round like any other.
    fn tick(&mut self) -> impl Future<Output = ()> + Send {
        self.reconcile()
    }
    /// Ends when the task is woken for another reason than a new object or the timer, to
    /// reconcile now (step 04: a pod of the cluster changed). Never, by default.
    fn woken(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }
    /// The user deleted the cluster; the task ends after this.
    fn deleted(&mut self) -> impl Future<Output = ()> + Send;
}

/// The loop of every cluster task: until the operator stops or the cluster is deleted, wait for
/// a newer object, the task's own wake-up (`woken`), or the reconcile timer, and hand each to
/// `task`. The first tick comes one interval after the start, as the original's 8 s
/// timer did.
pub async fn run_task_loop<K: Clone, R: ClusterReconciler<K>>(
    task: &mut R,
    inbox: ClusterInbox<K>,
    interval: Duration,
) -> TaskEnd {
    // ANCHOR: task_loop
    let ClusterInbox { mut wanted, stop } = inbox;
    // tokio panics on a zero period; a caller's zero becomes the smallest sensible one.
    let interval = interval.max(Duration::from_millis(1));
    // Created once, outside the loop, so an event never resets it: a steady stream of events
    // cannot starve reconciliation (the original re-armed `time.After` inside select: bug 6).
    let mut timer = tokio::time::interval_at(Instant::now() + interval, interval);
    // After a slow round (a slow API server), wait a full interval again instead of firing
    // the missed ticks back to back.
    timer.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                task.say("cluster task stopped: the operator is shutting down");
                return TaskEnd::Stopped;
            }
            changed = wanted.changed() => {
                if changed.is_err() {
                    // The controller dropped our channel without a Deleted: it is going away.
                    task.say("cluster task stopped: the controller let go of it");
                    return TaskEnd::Stopped;
                }
                let latest = wanted.borrow_and_update().clone();
                match latest {
                    Wanted::Object(newer) => {
                        // Still shared with the channel and the controller: the task takes its own copy.
                        if task.take(Arc::unwrap_or_clone(newer)) {
                            task.reconcile().await;
                        }
                    }
                    Wanted::Deleted => {
                        task.deleted().await;
                        return TaskEnd::Deleted;
                    }
                }
            }
            () = task.woken() => task.reconcile().await,
            _ = timer.tick() => task.tick().await,
            // ANCHOR_END: task_loop
        }
    }
}

/// The workshop's first line about a cluster, and `true` when it is adopted rather than created:
/// `status` is written by an operator only, so a phase means an earlier run of this operator got
/// the cluster going. Take it over then; never seed it a second time.
pub fn introduction(cluster: &PostgresCluster) -> (String, bool) {
    let status = cluster.status.as_ref();
    let adopting = status.and_then(|s| s.phase.as_deref()).is_some();
    let verb = if adopting {
        "adopting running cluster"
    } else {
        "creating cluster"
    };
    let line = format!(
        "{verb} with Spec {}, Status {}",
        cluster.spec,
        describe_status(status)
    );
    (line, adopting)
}

/// Take `newer` in place of `current`, telling `say` of a changed spec. Only the spec matters
/// here: a status write or a label change bumps the resourceVersion too, and must not look like
/// a spec update. A new spec that fails `validate` is said and left out; the rest of `newer`
/// (metadata, status) is taken all the same. `true`: the spec changed.
pub fn take_newer<E: std::fmt::Display>(
    current: &mut PostgresCluster,
    newer: PostgresCluster,
    validate: impl Fn(&PostgresClusterSpec) -> Result<(), E>,
    say: impl Fn(String),
) -> bool {
    if newer.spec == current.spec {
        tracing::debug!(resource_version = %newer.metadata.resource_version, "spec unchanged; ignoring");
        *current = newer;
        return false;
    }
    let taken = match validate(&newer.spec) {
        Ok(()) => {
            say(format!(
                "spec update: from {} to {}",
                current.spec, newer.spec
            ));
            true
        }
        Err(error) => {
            let (new, old) = (&newer.spec, &current.spec);
            say(format!(
                "ignoring spec update to {new}: {error}; keeping {old}"
            ));
            false
        }
    };
    let old = std::mem::replace(current, newer);
    if !taken {
        current.spec = old.spec;
    }
    taken
}

/// Stage 03's worker: what the controller starts for each cluster (`Controller::start`), a
/// [`ClusterTask`] with its pod calls and reconcile interval.
#[derive(Clone)]
pub struct PlaceholderTask<P: PodApi> {
    pods: P,
    reporter: Reporter,
    reconcile_interval: Duration,
}

impl<P: PodApi> Controller<PlaceholderTask<P>> {
    /// Stage 03's controller: each cluster task tells what it would do with `pods`.
    pub fn new(pods: P, options: ControllerOptions, reporter: Reporter) -> Self {
        let worker = PlaceholderTask {
            pods,
            reporter: reporter.clone(),
            reconcile_interval: options.reconcile_interval,
        };
        Controller::with_worker(worker, options, reporter)
    }
}

impl<P: PodApi> ClusterWorker for PlaceholderTask<P> {
    type Object = PostgresCluster;
    /// The task body: set up, then [`run_task_loop`] until the cluster is deleted or
    /// `inbox.stop` is cancelled. A failed setup does not end it: it waits for a corrected spec.
    fn run_cluster(
        &self,
        cluster: PostgresCluster,
        inbox: ClusterInbox,
    ) -> impl Future<Output = TaskEnd> + Send + 'static {
        let mut task = ClusterTask {
            key: cluster.key(),
            cluster,
            pods: self.pods.clone(),
            reporter: self.reporter.clone(),
            set_up: false,
        };
        let interval = self.reconcile_interval;
        async move {
            task.setup();
            run_task_loop(&mut task, inbox, interval).await
        }
    }
}

/// Stage 03's reconciler: it tells what it would do.
impl<P: PodApi> ClusterReconciler for ClusterTask<P> {
    fn say(&self, line: &str) {
        ClusterTask::say(self, line);
    }

    /// A spec change waits for the next tick, as the original's did.
    fn take(&mut self, newer: PostgresCluster) -> bool {
        if self.set_up {
            let (reporter, key) = (&self.reporter, &self.key);
            take_newer(&mut self.cluster, newer, validate_spec, |line| {
                reporter.report(key, line)
            });
            return false;
        }
        // The original's goroutine ended on a failed setup and nobody read its channel again: it
        // filled up and the next send panicked (bug 5). Ending would still lose a fix the
        // controller sends while we fail, so the task stays and keeps reading. An object with the
        // same spec (a label or status change) is taken in silently: it would fail the same way.
        let spec_changed = newer.spec != self.cluster.spec;
        self.cluster = newer;
        if spec_changed {
            self.setup();
        }
        false
    }

    /// Nothing to reconcile until setup has succeeded.
    async fn reconcile(&mut self) {
        if self.set_up {
            ClusterTask::reconcile(self).await;
        }
    }

    async fn deleted(&mut self) {
        self.delete().await;
    }
}

impl<P: PodApi> ClusterTask<P> {
    fn say(&self, line: impl Into<String>) {
        self.reporter.report(&self.key, line);
    }

    /// Validate, then create a new cluster or adopt one a previous operator already started. A
    /// spec that does not validate leaves the task waiting for a corrected one.
    fn setup(&mut self) {
        if let Err(error) = validate_spec(&self.cluster.spec) {
            self.say(format!(
                "setup failed: {error}; waiting for a corrected spec"
            ));
            return;
        }
        self.set_up = true;
        let (line, adopting) = introduction(&self.cluster);
        self.say(line);
        if !adopting {
            // The workshop stops here; launching the seed pod is its homework. A pod created for
            // this cluster should carry `pods::pod_labels` and `pods::owner_reference`.
            self.say("PLACEHOLDER: Launch seed Postgres node!");
            self.say("PLACEHOLDER: Start cluster!");
        }
    }

    /// The user deleted the cluster: delete its pods and end. The pods carry ownerReferences, so
    /// the garbage collector would delete them anyway (even while the operator is down); deleting
    /// them here just makes it happen now.
    async fn delete(&self) {
        self.say("cluster is deleted by the user");
        match self.owned_pods().await {
            Ok(pods) => {
                for pod in pods {
                    if let Err(error) = self
                        .pods
                        .delete_pod(&self.cluster.metadata.namespace, &pod.metadata.name)
                        .await
                    {
                        tracing::warn!(%error, "could not delete pod; the garbage collector will");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "could not list pods to clean up; the garbage collector will")
            }
        }
        self.say("cluster task ended");
    }

    /// Pods carrying our labels in our namespace, keeping only those whose ownerReference is this
    /// cluster's uid.
    async fn owned_pods(&self) -> Result<Vec<Pod>, PodApiError> {
        let selector = label_selector(&self.cluster.metadata.name);
        let pods = self
            .pods
            .list_pods(&self.cluster.metadata.namespace, &selector)
            .await?;
        let uid = &self.cluster.metadata.uid;
        Ok(pods
            .into_iter()
            .filter(|pod| pod.is_owned_by(uid))
            .collect())
    }

    /// One reconcile round: compare the pods that exist with the spec.
    async fn reconcile(&self) {
        if self.cluster.spec.paused {
            tracing::debug!("cluster is paused; skipping reconcile");
            return;
        }
        let pods = match self.owned_pods().await {
            Ok(pods) => pods,
            Err(error) => {
                self.say(format!(
                    "reconcile skipped: {error}; {}",
                    error.after_failed_list()
                ));
                return;
            }
        };
        let (running, pending) = split_running_pending(&pods);
        self.say(format!(
            "Running: [{}], pending: [{}]",
            running.join(", "),
            pending.join(", ")
        ));
        if !pending.is_empty() {
            // A pod still starting may be the member we added last round: wait for it to settle.
            tracing::debug!(pending = pending.len(), "pods pending; skipping this round");
            return;
        }
        if running.is_empty() {
            self.say("All Postgres pods are dead. Trying to recover from a previous backup");
            self.say("PLACEHOLDER: disaster recovery!");
            return;
        }
        let size = usize::try_from(self.cluster.spec.size).unwrap_or(0);
        if running.len() != size {
            self.say(format!(
                "PLACEHOLDER: resize from {} to {} pods, one pod per tick!",
                running.len(),
                size
            ));
        }
    }
}

/// Names of the Running pods and of the Pending pods, sorted. Succeeded/Failed/Unknown pods are
/// neither: they will never serve again.
fn split_running_pending(pods: &[Pod]) -> (Vec<String>, Vec<String>) {
    let mut running = Vec::new();
    let mut pending = Vec::new();
    for pod in pods {
        match pod.phase() {
            "Running" => running.push(pod.metadata.name.clone()),
            "Pending" => pending.push(pod.metadata.name.clone()),
            _ => {}
        }
    }
    running.sort();
    pending.sort();
    (running, pending)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Running and Pending pods are listed apart, sorted; Failed ones are neither.
    #[test]
    fn pods_split_into_running_and_pending_by_phase() {
        let pod = |name: &str, phase: &str| Pod {
            metadata: crate::api::ObjectMeta {
                name: name.into(),
                ..Default::default()
            },
            status: super::super::pods::PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let pods = [
            pod("db-2", "Running"),
            pod("db-1", "Running"),
            pod("db-3", "Pending"),
            pod("db-4", "Failed"),
        ];
        let (running, pending) = split_running_pending(&pods);
        assert_eq!(running, ["db-1", "db-2"]);
        assert_eq!(pending, ["db-3"]);
    }

    /// A newer object is taken whole when its spec is the same (silently) or valid (said); an
    /// invalid spec is said and left out, the rest of the object taken.
    #[test]
    fn a_newer_object_is_taken_but_never_an_invalid_spec() {
        let said = std::sync::Mutex::new(Vec::new());
        let say = |line: String| said.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        let spec = |size| crate::api::PostgresClusterSpec::new(size, "16");
        let object = |size, version: &str| {
            let mut cluster = PostgresCluster::new("ns", "db", spec(size));
            cluster.metadata.resource_version = version.into();
            cluster
        };
        let mut current = object(3, "1");

        assert!(!take_newer(
            &mut current,
            object(3, "2"),
            validate_spec,
            say
        ));
        assert_eq!(current.metadata.resource_version, "2");
        assert!(take_newer(&mut current, object(5, "3"), validate_spec, say));
        assert_eq!(current.spec.size, 5);
        assert!(!take_newer(
            &mut current,
            object(0, "4"),
            validate_spec,
            say
        ));
        assert_eq!(
            (
                current.spec.size,
                current.metadata.resource_version.as_str()
            ),
            (5, "4")
        );

        let said = said.into_inner().unwrap_or_default();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].starts_with("spec update: from {size: 3"),
            "{said:?}"
        );
        assert!(
            said[1].starts_with("ignoring spec update to {size: 0"),
            "{said:?}"
        );
        assert!(
            said[1].ends_with("keeping {size: 5, version: 16, paused: false}"),
            "{said:?}"
        );
    }
}
