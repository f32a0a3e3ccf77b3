//! Support: skip it on first read — the tuning every cluster task shares (`PostgresOptions`)
//! and its defaults; the flags (`binary/flags.rs`) set most of it. What the task does with it is
//! the lesson's.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop").

use std::sync::Arc;
use std::time::Duration;

use crate::metrics::Metrics;
use crate::postgres::plan::Delays;
use crate::watch::WatchOptions;

/// Tuning for the stage-04 tasks. `Default` is what a real operator should use.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Time between two rounds when nothing happens (pod events wake the task sooner).
    pub reconcile_interval: Duration,
    pub delays: Delays,
    /// How long to wait for the pod watch to show an action's effect before planning anyway.
    pub expectation_timeout: Duration,
    /// How often the Secret, ConfigMap and Services are checked again (with a GET each) after
    /// the task's first round and each spec change. One that was deleted is re-created then.
    pub owned_recheck: Duration,
    /// The pod and cluster watches' tuning (and so the bound `/healthz` gives them).
    pub watch: WatchOptions,
    /// Where the rounds are counted and timed (`src/metrics/`): by default a `Metrics` nobody
    /// serves; `run_postgres_binary` serves it.
    pub metrics: Arc<Metrics>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            reconcile_interval: Duration::from_secs(8),
            delays: Delays::default(),
            expectation_timeout: Duration::from_secs(30),
            owned_recheck: Duration::from_secs(300),
            watch: WatchOptions::default(),
            metrics: Arc::new(Metrics::new()),
        }
    }
}
