//! Support: skip it on first read — stage 04 plugs in `()`, which adds nothing; the hooks matter in
//! steps 05 and 06.
//!
//! The places where a later step adds to a cluster's round without changing it: its own flags,
//! more objects, more on each member pod, its own pods, its own observation and actions in place
//! of some of the plan's, its own part of `status`. Stage 04 plugs in `()`, which adds nothing;
//! step 05's failover (`src/failover/`) is one such layer, and step 06's backups
//! (`src/backups/`) one over it. As CloudNativePG keeps its backup controller apart from its
//! cluster controller, the round below never needs to know what a layer is for.
//!
//! ```text
//!   start:  L::Flags on the command line → L::from_flags; per cluster L::new_state
//!   round:  spec          ─ step 04's checks + L::validate
//!           owned objects ─ + L::ensure_owned          (a Secret's passwords: L::credentials)
//!           observe pods  ─ pods L::is_own_pod are not members; L::observe adjusts the view
//!           plan          ─ next_action → L::plan: the core's action, or the layer's own
//!           act           ─ Planned::Core → act.rs, Planned::Own → L::act; L::after_round
//!           status        ─ next_status → L::status
//!   every member pod ─ manifests::pod → L::dress_pod
//!   /metrics         ─ figures.rs: STATS_SQL + L::stats_sql() on each primary → L::figures
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use super::{OwnedError, PostgresTask};
use crate::api::{PostgresCluster, PostgresClusterSpec, PostgresClusterStatus};
use crate::controller::pods::Pod;
use crate::metrics::Family;
use crate::postgres::manifests::{Credentials, Role};
use crate::postgres::plan::{Action, Observed};

/// What a round does: the plan's action, or one the layer put in its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Planned<A> {
    Core(Action),
    Own(A),
}

/// A layer over the stage-04 round. Every hook has a default that does nothing, so a layer
/// names only the places it adds to. The hooks get the task (its cluster, its client, its
/// story, and the layer's own state, `task.layer`).
pub trait ClusterLayer: Send + Sync + Sized + 'static {
    /// What the layer keeps per cluster between rounds.
    type State: Send + Sync + 'static;
    /// The layer's own actions.
    type Action: Clone + Debug + PartialEq + Send + Sync + 'static;
    /// The layer's own command-line flags (`clap::Args`), added to the stage's.
    type Flags: clap::Args + Send + 'static;

    /// The layer the flags ask for.
    fn from_flags(flags: Self::Flags) -> Self;

    /// A new cluster task's state.
    fn new_state(&self) -> Self::State;

    /// Whether the layer can act on `spec` (step 04's own checks passed); why not.
    fn validate(_spec: &PostgresClusterSpec) -> Result<(), String> {
        Ok(())
    }

    /// A pod of the cluster that is the layer's, not a member.
    fn is_own_pod(_pod: &Pod) -> bool {
        false
    }

    /// The passwords for a new Secret; `None`: make new ones.
    fn credentials(
        _task: &PostgresTask<Self>,
    ) -> impl Future<Output = Result<Option<Credentials>, OwnedError>> + Send {
        async { Ok(None) }
    }

    /// Create the objects the layer adds, those that do not exist (after the Secret).
    fn ensure_owned(
        _task: &PostgresTask<Self>,
    ) -> impl Future<Output = Result<(), OwnedError>> + Send {
        async { Ok(()) }
    }

    /// Add to a member pod before it is created; `cluster` carries the version it runs.
    fn dress_pod(
        _task: &PostgresTask<Self>,
        _cluster: &PostgresCluster,
        _role: Role,
        _pod: &mut Value,
    ) {
    }

    /// Before planning: read what the layer needs and adjust the observation. `pods`: the member
    /// pods the observation was made from; `planning`: not paused, nor waiting for the watch
    /// (the layer's plan is asked this round).
    fn observe(
        _task: &mut PostgresTask<Self>,
        _pods: &[Arc<Pod>],
        _observed: &mut Observed,
        _planning: bool,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The plan's `action`, or one of the layer's own in its place.
    fn plan(
        _task: &PostgresTask<Self>,
        _observed: &Observed,
        action: Action,
    ) -> Planned<Self::Action> {
        Planned::Core(action)
    }

    /// Carry out one of the layer's actions; the pod that is primary after it, if it made one.
    fn act(
        _task: &mut PostgresTask<Self>,
        _action: &Self::Action,
        _image_version: Option<&str>,
    ) -> impl Future<Output = Option<String>> + Send {
        async { None }
    }

    /// After the round acted (not while the cluster is paused). `own_pods`: see `is_own_pod`;
    /// `primary`: the member primary after the action; `steady`: the plan had nothing to do.
    fn after_round(
        _task: &mut PostgresTask<Self>,
        _own_pods: &[Arc<Pod>],
        _observed: &Observed,
        _primary: Option<&str>,
        _steady: bool,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// The layer's part of the status written at the end of the round; `now` is RFC 3339.
    fn status(
        _task: &PostgresTask<Self>,
        _planned: &Planned<Self::Action>,
        _status: &mut PostgresClusterStatus,
        _now: &str,
    ) {
    }

    /// `/metrics`: rows the layer adds to the query each primary answers at a scrape (` UNION
    /// ALL SELECT kind, name, number ...`, see `figures.rs`), so that they cost no `pods/exec`
    /// of their own.
    fn stats_sql() -> String {
        String::new()
    }

    /// The layer's families: from each cluster and its primary's answer to that query (`psql
    /// -At` lines; `None` without a primary, `Some(None)` when it did not answer in time).
    fn figures(
        _clusters: &[Arc<PostgresCluster>],
        _answers: &[Option<Option<String>>],
        _now: SystemTime,
    ) -> Vec<Family> {
        Vec::new()
    }
}

/// No flags of a layer's own.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct NoFlags {}

/// Stage 04: no layer.
impl ClusterLayer for () {
    type State = ();
    type Action = std::convert::Infallible;
    type Flags = NoFlags;

    fn from_flags(_: NoFlags) -> Self {}

    fn new_state(&self) -> Self::State {}
}
