//! The seam between the controller and what runs as each cluster's task: `ClusterWorker`.
//! Support: a learner may skip it on first read — stage 03's worker, `PlaceholderTask`, is in
//! `cluster.rs`; this is the hook step 04 plugs its Postgres task into, and the controller
//! around it stays the same.
//!
//! WORKSHOP.md, step 03 ("The cluster task").

use std::future::Future;

use super::{ClusterInbox, TaskEnd};
use crate::resource::Resource;

/// What runs as each cluster's task. Stage 03's is `cluster::PlaceholderTask` (it tells what it
/// would do); stage 04's acts on real pods (`crate::postgres`). The controller around it,
/// routing and all, is the same.
pub trait ClusterWorker: Clone + Send + Sync + 'static {
    /// The kind of object it runs a task for: `PostgresCluster`, or the Deployer's `Deployer`.
    type Object: Resource;
    /// The task body for one cluster: return when the cluster is deleted or `inbox.stop` is
    /// cancelled.
    fn run_cluster(
        &self,
        cluster: Self::Object,
        inbox: ClusterInbox<Self::Object>,
    ) -> impl Future<Output = TaskEnd> + Send + 'static;
}
