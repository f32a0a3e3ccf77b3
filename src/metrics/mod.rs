//! Support: skip it on first read — what a user watches of the operator; nothing the operator
//! decides depends on it.
//!
//! Watching the operator: `/metrics` for Prometheus, `/healthz` and `/readyz` for the kubelet's
//! probes, served by stages 04 to 06 on `--metrics-address`.
//!
//! WORKSHOP.md, "Inside step 04: watching the operator". Read in this order:
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the [`Metrics`] handle: every figure the operator keeps, and the few hooks that feed it |
//! | `registry.rs` | counter, labelled counter, histogram: each becomes a family of the text format |
//! | `text.rs` | the Prometheus text exposition format: HELP, TYPE, escaping, histogram buckets |
//! | `health.rs` | live (every watch and reconcile loop moved within its bound) and ready (listed, or a standby) |
//! | `server.rs` | the HTTP server: three paths, bounded connections, never a panic |
//!
//! The figures of each cluster are read when Prometheus scrapes, not kept: members wanted and
//! ready and the primary from the cluster watch's store, replication lag through one `pods/exec`
//! on each primary (`src/postgres/figures.rs`, a [`ScrapeTime`]; step 06 adds its own there).
//!
//! # One handle, not a process-wide registry
//!
//! Prometheus client libraries usually keep a global registry. This operator passes an
//! `Arc<Metrics>` instead, in `PostgresOptions` (which every cluster task already holds), because
//! one process may run several operators: the tests run two against one server to show leader
//! election, and each must count its own requests and say whether *it* holds the Lease. The
//! hooks into the rest of the operator are few: the client's request observer
//! ([`Metrics::request_observer`]), a tap on each watch's items ([`Metrics::observe_watch`]), a
//! guard and one call per reconcile round, and a guard while acting ([`Metrics::acting`]).

mod health;
pub mod registry;
pub mod server;
pub mod text;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::RequestObserver;
use crate::watch::{Event, RelistReason, ResumeReason, WatchNotice};

pub use health::HealthBounds;
use health::{Health, LoopProgress, Phase, WatchProgress};
use registry::{Counter, CounterVec, Histogram};
pub use server::{serve, MetricsServer};
pub use text::Family;
use text::Kind;

/// Upper bounds of the reconcile duration buckets, in seconds: most rounds read a store and
/// write nothing (milliseconds); a round that acts makes requests (tens of milliseconds); a
/// failover waits for `pg_promote` (seconds).
pub const RECONCILE_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Figures read at scrape time rather than kept: `src/postgres/figures.rs` is one.
pub trait ScrapeTime: Send + Sync {
    /// The families as they are now, read before `deadline`.
    fn families(&self, deadline: Instant)
        -> Pin<Box<dyn Future<Output = Vec<Family>> + Send + '_>>;
}

/// Every figure one operator keeps, and what its probes read. See the module docs.
pub struct Metrics {
    reconciles: Counter,
    reconcile_errors: Counter,
    reconcile_seconds: Histogram,
    watch_events: CounterVec,
    watch_restarts: CounterVec,
    watch_relists: CounterVec,
    api_requests: CounterVec,
    health: Mutex<Health>,
    /// Set while acting: the clusters' figures.
    scrape_time: Mutex<Option<Arc<dyn ScrapeTime>>>,
    /// Numbers the reconcile loops, so an ending task never unregisters its successor.
    loop_ids: AtomicU64,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("reconciles", &self.reconciles.get())
            .field("phase", &lock(&self.health).phase)
            .finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            reconciles: Counter::default(),
            reconcile_errors: Counter::default(),
            reconcile_seconds: Histogram::new(RECONCILE_BUCKETS),
            watch_events: CounterVec::new(&["resource", "type"]),
            watch_restarts: CounterVec::new(&["resource", "reason"]),
            watch_relists: CounterVec::new(&["resource", "reason"]),
            api_requests: CounterVec::new(&["method", "code"]),
            health: Mutex::default(),
            scrape_time: Mutex::new(None),
            loop_ids: AtomicU64::new(0),
        }
    }

    /// The hook for [`crate::client::Client::observed_by`]: one count per attempt, by HTTP
    /// method and status code; `<error>` when no answer came, as client-go's
    /// `rest_client_requests_total` says it.
    pub fn request_observer(self: &Arc<Self>) -> RequestObserver {
        let metrics = Arc::clone(self);
        Arc::new(move |method, status| {
            let code = status.map_or_else(|| "<error>".to_string(), |s| s.as_u16().to_string());
            metrics.api_requests.inc(&[method.as_str(), &code]);
        })
    }

    /// Waiting for the Lease: live and ready, nothing to check.
    pub fn standing_by(&self) {
        lock(&self.health).phase = Phase::Standby;
    }

    /// Acting (holding the Lease, or alone) until the guard is dropped: the leader gauge is 1,
    /// and the watches and loops registered meanwhile are checked.
    pub fn acting(self: &Arc<Self>) -> Acting {
        lock(&self.health).phase = Phase::Acting;
        Acting {
            metrics: Arc::clone(self),
        }
    }

    /// Read `figures` at each scrape too, until acting ends.
    pub fn scrape_also(&self, figures: Arc<dyn ScrapeTime>) {
        *lock(&self.scrape_time) = Some(figures);
    }

    /// The items of a watch of `resource`, passed on unchanged after counting them: events by
    /// type, restarts and relists by reason; a list done, a watch accepted or an event is
    /// progress (`/healthz`), the first watch accepted means listed (`/readyz`). Dropping the
    /// returned receiver drops `items`, which stops the watch, as dropping `items` would.
    pub fn observe_watch<T: Send + Sync + 'static>(
        self: &Arc<Self>,
        resource: &'static str,
        mut items: mpsc::Receiver<Event<T>>,
    ) -> mpsc::Receiver<Event<T>> {
        let progress = WatchProgress {
            listed: false,
            last: Instant::now(),
        };
        lock(&self.health).watches.insert(resource, progress);
        // One slot: the watch's own buffer is the buffer; this only keeps backpressure.
        let (sender, observed) = mpsc::channel(1);
        let metrics = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    item = items.recv() => item,
                    () = sender.closed() => return,
                };
                let Some(item) = item else { return };
                metrics.count_watch_item(resource, &item);
                if sender.send(item).await.is_err() {
                    return;
                }
            }
        });
        observed
    }

    fn count_watch_item<T>(&self, resource: &'static str, item: &Event<T>) {
        let (progress, listed) = match item {
            Event::Added(_) | Event::Modified(_) | Event::Deleted(_) => {
                self.watch_events.inc(&[resource, item.type_name()]);
                (true, false)
            }
            Event::Notice(WatchNotice::Listed { .. }) => (true, false),
            // The first list is complete once a watch starts from its resourceVersion.
            Event::Notice(WatchNotice::Watching { .. }) => (true, true),
            Event::Notice(WatchNotice::Resumed { why, .. }) => {
                let reason = match why {
                    ResumeReason::EndOfStream { .. } => "end_of_stream",
                    ResumeReason::Idle { .. } => "idle",
                };
                self.watch_restarts.inc(&[resource, reason]);
                (false, false)
            }
            Event::Notice(WatchNotice::Retrying { .. }) => {
                self.watch_restarts.inc(&[resource, "error"]);
                (false, false)
            }
            Event::Notice(WatchNotice::Relisted { why, .. }) => {
                self.watch_relists.inc(&[resource, relist_reason(why)]);
                (true, false)
            }
        };
        if progress {
            let mut health = lock(&self.health);
            if let Some(watch) = health.watches.get_mut(resource) {
                watch.last = Instant::now();
                watch.listed |= listed;
            }
        }
    }

    /// A cluster's reconcile loop, checked by `/healthz` until the guard is dropped.
    pub fn reconcile_loop(self: &Arc<Self>, cluster: &str) -> ReconcileLoop {
        let id = self.loop_ids.fetch_add(1, Ordering::Relaxed);
        let progress = LoopProgress {
            id,
            last: Instant::now(),
            dead: false,
        };
        lock(&self.health)
            .loops
            .insert(cluster.to_string(), progress);
        ReconcileLoop {
            metrics: Arc::clone(self),
            cluster: cluster.to_string(),
            id,
        }
    }

    /// One round of `cluster` ended after `took`; `failed`: something it set out to do failed.
    pub fn round_ended(&self, cluster: &str, took: Duration, failed: bool) {
        self.reconciles.inc();
        if failed {
            self.reconcile_errors.inc();
        }
        self.reconcile_seconds.observe(took.as_secs_f64());
        if let Some(task) = lock(&self.health).loops.get_mut(cluster) {
            task.last = Instant::now();
        }
    }

    /// `/healthz`: `Err(why)` when a watch or a reconcile loop has not moved within `bounds`.
    pub fn live(&self, bounds: &HealthBounds) -> Result<(), String> {
        lock(&self.health).live(bounds, Instant::now())
    }

    /// `/readyz`: `Err(why)` until every watch has listed (a standby is ready).
    pub fn ready(&self) -> Result<(), String> {
        lock(&self.health).ready()
    }

    /// `/metrics`: every family in the text format; what is read at scrape time, before
    /// `deadline`.
    pub async fn render(&self, deadline: Instant) -> String {
        let acting = lock(&self.health).phase == Phase::Acting;
        let mut families = vec![
            self.reconciles.family(
                "postgres_operator_reconciles_total",
                "Reconcile rounds the cluster tasks ended.",
            ),
            self.reconcile_errors.family(
                "postgres_operator_reconcile_errors_total",
                "Reconcile rounds in which an action or a write failed (said in the story; the next round tries again).",
            ),
            self.reconcile_seconds.family(
                "postgres_operator_reconcile_duration_seconds",
                "How long each reconcile round took.",
            ),
            self.watch_events.family(
                "postgres_operator_watch_events_total",
                "Watch events handed to the operator, by resource and type (ADDED, MODIFIED, DELETED).",
            ),
            self.watch_restarts.family(
                "postgres_operator_watch_restarts_total",
                "Watches reopened from the same resourceVersion: the server ended one (end_of_stream), it went silent (idle), or a request failed (error).",
            ),
            self.watch_relists.family(
                "postgres_operator_watch_relists_total",
                "Lists done again because the watch lost its place, by reason (expired: 410 Gone).",
            ),
            self.api_requests.family(
                "postgres_operator_api_requests_total",
                "Requests to the API server, each attempt counted, by HTTP method and status code (<error>: no answer).",
            ),
            // Acting is leading: the phase is the one record of it.
            Family::new(
                "postgres_operator_leader",
                "1 while this replica holds the Lease and acts (or acts alone, --leader-elect=false); 0 while it stands by.",
                Kind::Gauge,
            )
            .sample(Vec::new(), if acting { 1.0 } else { 0.0 }),
        ];
        let scrape_time = lock(&self.scrape_time).clone();
        if let Some(scrape_time) = scrape_time {
            families.extend(scrape_time.families(deadline).await);
        }
        text::render(&families)
    }
}

/// Held while the operator acts: see [`Metrics::acting`].
pub struct Acting {
    metrics: Arc<Metrics>,
}

impl Drop for Acting {
    fn drop(&mut self) {
        *lock(&self.metrics.scrape_time) = None;
        let mut health = lock(&self.metrics.health);
        health.phase = Phase::Idle;
        health.watches.clear();
        health.loops.clear();
    }
}

/// Held by a cluster's task: see [`Metrics::reconcile_loop`].
pub struct ReconcileLoop {
    metrics: Arc<Metrics>,
    cluster: String,
    id: u64,
}

impl Drop for ReconcileLoop {
    fn drop(&mut self) {
        let mut health = lock(&self.metrics.health);
        // A task for the same cluster started since (it was re-created) has its own entry.
        if health
            .loops
            .get(&self.cluster)
            .is_none_or(|task| task.id != self.id)
        {
            return;
        }
        if std::thread::panicking() {
            // Dropped while the task unwinds: the loop is dead, and `/healthz` must say so.
            if let Some(task) = health.loops.get_mut(&self.cluster) {
                task.dead = true;
            }
        } else {
            health.loops.remove(&self.cluster);
        }
    }
}

/// The `reason` label of a relist.
fn relist_reason(why: &RelistReason) -> &'static str {
    match why {
        RelistReason::Expired { .. } => "expired",
        RelistReason::AheadOfServer { .. } => "ahead_of_server",
        RelistReason::CollectionNotFound { .. } => "collection_not_found",
        RelistReason::EventTooLarge { .. } => "event_too_large",
        RelistReason::Undecodable { .. } => "undecodable",
        RelistReason::FirstListBrokeOff { .. } => "first_list_broke_off",
    }
}

/// A panic elsewhere while holding a lock leaves whole values: the figures stay readable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
