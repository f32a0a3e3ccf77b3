//! The seam between the controller and what runs as each cluster's task: `ClusterWorker`, and
//! stage 03's own, `PlaceholderTask`. Support: a learner may skip it on first read — it is the
//! hook step 04 plugs its Postgres task into; the controller around it is the same.
//!
//! WORKSHOP.md, step 03 ("The cluster task").

use std::future::Future;
use std::time::Duration;

use super::cluster::run_cluster;
use super::{ClusterInbox, Controller, ControllerOptions, PodApi, TaskEnd};
use crate::api::PostgresCluster;
use crate::story::Reporter;

/// What runs as each cluster's task. Stage 03's is [`PlaceholderTask`] (below; its task body,
/// `cluster::run_cluster`, tells what it would do); stage 04's acts on real pods
/// (`crate::postgres`). The controller around it, routing and all, is the same.
pub trait ClusterWorker: Clone + Send + Sync + 'static {
    /// The task body for one cluster: return when the cluster is deleted or `inbox.stop` is
    /// cancelled.
    fn run_cluster(
        &self,
        cluster: PostgresCluster,
        inbox: ClusterInbox,
    ) -> impl Future<Output = TaskEnd> + Send + 'static;
}

/// Stage 03's worker: `cluster::run_cluster` with its pod calls and reconcile interval.
#[derive(Clone)]
pub struct PlaceholderTask<P: PodApi> {
    pods: P,
    reporter: Reporter,
    reconcile_interval: Duration,
}

impl<P: PodApi> ClusterWorker for PlaceholderTask<P> {
    fn run_cluster(
        &self,
        cluster: PostgresCluster,
        inbox: ClusterInbox,
    ) -> impl Future<Output = TaskEnd> + Send + 'static {
        run_cluster(
            cluster,
            inbox,
            self.pods.clone(),
            self.reporter.clone(),
            self.reconcile_interval,
        )
    }
}

impl<P: PodApi> Controller<PlaceholderTask<P>> {
    /// Stage 03's controller: each cluster task tells what it would do with `pods`.
    pub fn new(
        pods: P,
        options: ControllerOptions,
        reporter: Reporter,
    ) -> Controller<PlaceholderTask<P>> {
        let worker = PlaceholderTask {
            pods,
            reporter: reporter.clone(),
            reconcile_interval: options.reconcile_interval,
        };
        Controller::with_worker(worker, options, reporter)
    }
}
