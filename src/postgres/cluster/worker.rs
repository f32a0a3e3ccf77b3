//! How the controller starts a cluster's task: step 03's `ClusterWorker`, filled in.
//! `PostgresWorker::new` holds what every task shares (the client, the pod store, the wake-ups,
//! the options), and `run_cluster` is one cluster's task, `mod.rs`'s `run`, which the controller
//! spawns.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop").

use std::future::Future;
use std::sync::Arc;

use super::{run, ClusterLayer, PostgresOptions, Wakers};
use crate::api::PostgresCluster;
use crate::client::Client;
use crate::controller::cluster::TaskEnd;
use crate::controller::pods::Pod;
use crate::controller::{ClusterInbox, ClusterWorker};
use crate::story::Reporter;
use crate::watch::Store;

/// Stage 04's [`ClusterWorker`]: what every cluster task shares. `L`: the layer over each
/// round (`()` in stage 04, see [`ClusterLayer`]).
pub struct PostgresWorker<L> {
    pub(super) client: Client,
    pub(super) pods: Store<Pod>,
    pub(super) wakers: Wakers,
    pub(super) reporter: Reporter,
    pub(super) options: PostgresOptions,
    pub(super) layer: Arc<L>,
}

// By hand: a derived Clone would ask `L: Clone`; the layer is shared.
impl<L> Clone for PostgresWorker<L> {
    fn clone(&self) -> Self {
        PostgresWorker {
            client: self.client.clone(),
            pods: self.pods.clone(),
            wakers: self.wakers.clone(),
            reporter: self.reporter.clone(),
            options: self.options.clone(),
            layer: Arc::clone(&self.layer),
        }
    }
}

impl<L: ClusterLayer> PostgresWorker<L> {
    /// `pods`: the pod watch's store, which every task reads; `wakers`: how its events wake them.
    pub fn new(
        client: Client,
        pods: Store<Pod>,
        wakers: Wakers,
        reporter: Reporter,
        options: PostgresOptions,
        layer: L,
    ) -> PostgresWorker<L> {
        PostgresWorker {
            client,
            pods,
            wakers,
            reporter,
            options,
            layer: Arc::new(layer),
        }
    }
}

impl<L: ClusterLayer> ClusterWorker for PostgresWorker<L> {
    type Object = PostgresCluster;
    fn run_cluster(
        &self,
        cluster: PostgresCluster,
        inbox: ClusterInbox,
    ) -> impl Future<Output = TaskEnd> + Send + 'static {
        run(self.clone(), cluster, inbox)
    }
}
