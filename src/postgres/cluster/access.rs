//! Support: skip it on first read — small accessors of the cluster task: its story line, its
//! cluster, client and options, an Event, a round counted as failed. The round uses them, and so
//! may a later step's layer (`layer.rs`); none decides anything.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop").

use super::*;
use crate::api::PostgresClusterStatus;
use crate::client::Client;
use crate::events;

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

    /// An Event about the cluster, what `kubectl describe pgc` shows.
    pub async fn event(&self, kind: EventType, reason: &str, message: &str) {
        let client = &self.worker.client;
        events::record(client, &self.cluster, kind, reason, message).await;
    }
}
