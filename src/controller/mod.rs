//! Step 03: one task per cluster, each with its own channel and its own reconcile timer.
//!
//! WORKSHOP.md, step 03. The watch (step 02) turns the API server's stream into
//! [`Event`]s; the [`Controller`] routes each one to the task that owns that cluster:
//!
//! ```text
//!   list_then_watch ──mpsc──▶ Controller ── map "namespace/name" → ClusterHandle
//!                                 │
//!          Added ─ start a task   ├──watch channel──▶ task default/db-a ── select { stop, wanted, tick }
//!       Modified ─ send object    ├──watch channel──▶ task default/db-b ── select { stop, wanted, tick }
//!        Deleted ─ send Deleted,  └──watch channel──▶ task prod/db-c    ── select { stop, wanted, tick }
//!                  forget it               ▲
//!                                 stop (one CancellationToken shared by all tasks)
//! ```
//!
//! # Why a `watch` channel per cluster, not a queue
//!
//! The original gave each cluster a Go channel of 100 events; when a task was not reading (its
//! setup had failed) the 101st send blocked the controller, and sending on it after it was closed
//! panicked. A cluster task does not need every intermediate spec: it needs the *latest* one,
//! because reconciliation compares what exists with what is wanted now ("level-triggered").
//! A `tokio::sync::watch` channel holds exactly one value, so:
//! - it is bounded by construction (one slot) and `send_replace` never blocks and never fails;
//! - a newer object supersedes an unread older one: quick resizes 3→4→5→6→7 reach the task as one
//!   update to 7;
//! - a delete is the value `cluster::Wanted::Deleted`, which supersedes any pending update (nothing
//!   matters after a delete);
//! - a task whose setup failed does not end: it keeps reading, waiting for a corrected spec, so a
//!   fix sent while it was failing is never lost. Should a task end anyway (it panicked), its
//!   receiver is gone, the controller sees `is_closed()`, and a changed spec starts a fresh task.
//!
//! # Where the story lines go
//!
//! Each task tells what it does ("creating cluster with Spec …", "Running: [], pending: []") through
//! a [`Reporter`], tagged with the cluster's `namespace/name`. [`Reporter::tracing`] makes them
//! `tracing` events (field `cluster`); [`Reporter::channel`] hands them to a receiver instead (how
//! the tests read them); [`Reporter::to_stdout`] prints that receiver, which is how `stage03` shows
//! them. Diagnostics (a failed pod delete, a spec that did not change) always go to `tracing`,
//! inside a span carrying `cluster`.

pub mod cluster;
pub mod operator;
pub mod pods;
mod shutdown;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::api::{HasMetadata, PostgresCluster};
use crate::resource::Resource;
use crate::story::{event_lines, Reporter};
use crate::watch::Event;
pub use cluster::PlaceholderTask;
pub use cluster::{TaskEnd, Wanted};
pub use operator::run_operator;
pub use pods::PodApi;
pub use shutdown::{ControllerStopped, DEFAULT_SHUTDOWN_GRACE};
pub use worker::ClusterWorker;

/// How often each cluster task reconciles, unless told otherwise. The original used 8 s.
pub const DEFAULT_RECONCILE_INTERVAL: Duration = Duration::from_secs(8);
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Time between two reconcile rounds of one cluster. Events do not reset it.
    pub reconcile_interval: Duration,
    pub shutdown_grace: Duration,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            reconcile_interval: DEFAULT_RECONCILE_INTERVAL,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
        }
    }
}

/// What reaches one cluster task from the controller.
pub struct ClusterInbox<K = PostgresCluster> {
    /// The newest object (or Deleted): one slot, the newest wins.
    pub wanted: watch::Receiver<Wanted<K>>,
    /// Cancelled when the operator stops (a child of the controller's one token): end the task.
    pub stop: CancellationToken,
}

/// The controller's hold on one cluster task.
struct ClusterHandle<K> {
    /// A cluster deleted and re-created under the same name is a new cluster: new uid.
    uid: crate::api::Uid,
    /// The last object sent (or started with); used to skip restarting a task that panicked for
    /// an unchanged spec.
    last_sent: Arc<K>,
    wanted: watch::Sender<Wanted<K>>,
}

/// Routes watch events to per-cluster tasks. See the module docs for the picture.
pub struct Controller<W: ClusterWorker> {
    worker: W,
    options: ControllerOptions,
    reporter: Reporter,
    clusters: HashMap<String, ClusterHandle<W::Object>>,
    tasks: JoinSet<(String, TaskEnd)>,
    /// Cancelled by [`Controller::shutdown`]; every cluster task holds a child of it.
    stop: CancellationToken,
    /// Step 02's "Starting at watchVersion" line is said for the first watch only.
    first_watch: bool,
}

impl<W: ClusterWorker> Controller<W> {
    /// A controller whose cluster tasks are `worker`'s.
    pub fn with_worker(worker: W, options: ControllerOptions, reporter: Reporter) -> Controller<W> {
        Controller {
            worker,
            options,
            reporter,
            clusters: HashMap::new(),
            tasks: JoinSet::new(),
            stop: CancellationToken::new(),
            first_watch: true,
        }
    }

    /// Take the watch's events until `shutdown` is cancelled or the channel closes (the watch
    /// ended): tell each as step 02's lines, route each change to its cluster's task; then stop
    /// every cluster task and wait for them.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<Event<W::Object>>,
        shutdown: CancellationToken,
    ) -> ControllerStopped {
        tracing::debug!("controller running");
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                event = events.recv() => match event {
                    Some(event) => {
                        // Step 02's lines, said here where the event is routed: the events come
                        // straight from the watch, in order, with no task in between.
                        for line in event_lines(&event, &mut self.first_watch) {
                            self.reporter.report_operator(line);
                        }
                        self.handle_event(event);
                    }
                    None => {
                        tracing::info!("the event channel closed (the watch ended); stopping");
                        break;
                    }
                },
                // Collect ended tasks as they end, so the JoinSet does not grow without bound.
                Some(ended) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    self.task_ended(ended);
                }
            }
        }
        self.shutdown().await
    }

    /// Route one event: a change goes to its cluster's task, which is started for a cluster not
    /// yet known. Never blocks: every send is `watch::Sender::send_replace`.
    pub fn handle_event(&mut self, event: Event<W::Object>) {
        // The object is the watch's `Arc`, shared with its store; the task's channel carries it on.
        let cluster = match event {
            // Our watch's relist says Modified for a known cluster, but a source without memory (a
            // watch restarted from scratch) announces everything as Added: for a cluster we already
            // run, that is an update, not a second task.
            Event::Added(cluster) => cluster,
            Event::Modified(cluster) => {
                if !self.clusters.contains_key(&cluster.key()) {
                    // The original dereferenced nil here (bug 4). An unknown cluster that exists
                    // is one we should be running: adopt it.
                    self.reporter.report(
                        &cluster.key(),
                        "Modified event for a cluster this controller did not know; adopting it",
                    );
                }
                cluster
            }
            Event::Deleted(cluster) => {
                let key = cluster.key();
                match self.clusters.remove(&key) {
                    // If the task already ended (it panicked) nobody is listening; that is fine.
                    Some(handle) => {
                        handle.wanted.send_replace(Wanted::Deleted);
                    }
                    None => self.reporter.report(
                        &key,
                        "Deleted event for a cluster this controller did not know; nothing to do",
                    ),
                }
                return;
            }
            // About the watch, not a cluster: `run` has told it, there is nothing to route.
            Event::Notice(_) => return,
        };
        let key = cluster.key();
        let Some(handle) = self.clusters.get_mut(&key) else {
            return self.start(cluster);
        };
        if handle.uid != cluster.metadata().uid {
            // Same name, new uid: the old cluster was deleted and a new one created while we were
            // not watching. Our watch's relist sends Deleted for the old one first; a source that
            // only lists shows just the new one. End the old task, start the new one.
            self.reporter.report(
                &key,
                "the cluster was re-created under the same name (new uid); replacing its task",
            );
            if let Some(old) = self.clusters.remove(&key) {
                old.wanted.send_replace(Wanted::Deleted);
            }
            return self.start(cluster);
        }
        if handle.wanted.is_closed() {
            // The task is gone: it panicked (a failed setup waits instead of ending). Start a
            // fresh one only if the spec changed; the same spec would likely fail the same way.
            if handle.last_sent.spec() == cluster.spec() {
                tracing::debug!(cluster = %key, "spec unchanged since the task ended; not restarting");
                handle.last_sent = cluster;
                return;
            }
            self.clusters.remove(&key);
            return self.start(cluster);
        }
        handle.last_sent = Arc::clone(&cluster);
        // Replaces any update the task has not read yet: the newest object wins.
        handle.wanted.send_replace(Wanted::Object(cluster));
    }

    /// `namespace/name` of every cluster the controller currently tracks, sorted.
    pub fn cluster_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.clusters.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// A task for a cluster not yet known, on a channel of its own: `worker`'s `run_cluster` (stage
    /// 03's is `PlaceholderTask`, in `cluster.rs`).
    fn start(&mut self, cluster: Arc<W::Object>) {
        let key = cluster.key();
        let (wanted, wanted_receiver) = watch::channel(Wanted::Object(Arc::clone(&cluster)));
        let span = tracing::info_span!("cluster", cluster = %key);
        let inbox = ClusterInbox {
            wanted: wanted_receiver,
            stop: self.stop.child_token(),
        };
        let task = self.worker.run_cluster(W::Object::clone(&cluster), inbox);
        let task_key = key.clone();
        self.tasks
            .spawn(async move { (task_key, task.await) }.instrument(span));
        self.clusters.insert(
            key,
            ClusterHandle {
                uid: cluster.metadata().uid.clone(),
                last_sent: cluster,
                wanted,
            },
        );
    }
}
