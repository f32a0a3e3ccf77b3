//! Step 05: failover, as a layer over step 04's cluster task. Stage 05 is stage 04 with this
//! layer plugged in ([`Failover`]); nothing of step 04 names it.
//!
//! WORKSHOP.md, step 05. The lesson, in WORKSHOP.md's order:
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the layer: which of step 04's hooks it fills, and what it keeps per cluster |
//! | `observe.rs` | what step 05 sees of each member besides step 04's view: the evidence that a primary is down |
//! | `plan.rs` | the decisions: step 05's rules, with step 04's by name, in one list |
//! | `act.rs` | carrying them out: fence, ask each candidate how far it got, promote, relabel |
//! | `manifests.rs` | what a member pod needs for failover: the crash guard, the timeouts, the readiness agent |
//!
//! Support, to skip on first read: `api.rs` (step 05's own fields: `spec.replication`, the
//! switchover annotation, `status.synchronous` and `status.switchover`), `lines.rs` (the story
//! lines of its deletions), `fence.rs` (how a fence is put up), `in_place.rs` (a primary back in
//! recovery: every member asked, the one with the most WAL promoted), `streaming.rs` (which replicas
//! the primary streams to), `synchronous.rs` (synchronous replication, opt-in), `status.rs`
//! (its part of `status`), `figures.rs` (the synchronous standbys, for `/metrics`) and `agent.rs`
//! (`pg-ready`, the agent that answers every member pod's probes).

pub mod act;
pub mod agent;
pub mod api;
mod fence;
pub mod figures;
pub mod in_place;
pub mod lines;
pub mod manifests;
pub mod observe;
pub mod plan;
pub mod status;
pub mod streaming;

pub use status::status;
pub mod synchronous;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::api::{PostgresCluster, PostgresClusterSpec, PostgresClusterStatus};
use crate::controller::pods::Pod;
use crate::postgres::manifests::Role;
use crate::postgres::plan::{Action, Observed};
use crate::postgres::{ClusterLayer, Planned, PostgresTask};
use crate::process::parse_seconds;

use api::SynchronousStatus;
use plan::{Failing, FailoverAction, FailoverDelays};
use streaming::StreamingWatch;
use synchronous::SynchronousRound;

/// The role label of a primary taken out of service: no Service selects it.
pub const FENCED: &str = "fenced";

/// The failover layer: stage 05's operator is `run_postgres_binary::<Failover>(..)`.
#[derive(Clone, Debug)]
pub struct Failover {
    pub delays: FailoverDelays,
    /// The operator's image, which member pods copy their readiness agent from (`agent.rs`).
    pub agent_image: String,
}

impl Default for Failover {
    fn default() -> Self {
        Failover {
            delays: FailoverDelays::default(),
            agent_image: manifests::DEFAULT_AGENT_IMAGE.to_string(),
        }
    }
}

/// The flags stage 05 adds to stage 04's.
#[derive(clap::Args, Clone, Debug)]
pub struct FailoverFlags {
    /// How long the primary may be unready, its readiness probe failing, before a replica is promoted, in seconds (a container that exited or a node lost does not wait this delay)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub failover_after: Duration,
    /// How long a deleted primary may take to stop before it is fenced and a replica promoted without it, in seconds
    #[arg(long, value_name = "SECS", default_value = "20", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub stop_timeout: Duration,
    /// How long a Ready replica may be missing from the primary's pg_stat_replication before it is replaced, in seconds
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub not_streaming_after: Duration,
    /// The operator's image, from which every member pod copies its readiness agent (pg-ready); on kind, load it first (`kind load docker-image postgres-operator:latest`)
    #[arg(long, value_name = "IMAGE", default_value = manifests::DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
}

impl From<FailoverFlags> for Failover {
    fn from(flags: FailoverFlags) -> Failover {
        Failover {
            delays: FailoverDelays {
                failover_after: flags.failover_after,
                stop_timeout: flags.stop_timeout,
                not_streaming_after: flags.not_streaming_after,
            },
            agent_image: flags.agent_image,
        }
    }
}

/// What the layer keeps per cluster.
#[derive(Debug)]
pub struct FailoverState {
    pub delays: FailoverDelays,
    pub agent_image: String,
    /// When this task first saw each pod Running but not Ready (its own count: see
    /// `plan::Facts::unready_for`).
    unready_since: HashMap<String, Instant>,
    /// When this task first saw each pod terminating.
    terminating_since: HashMap<String, Instant>,
    /// Each pod's postgres container start (restart count, `startedAt`) when this task last
    /// asked whether it is in recovery (`FailoverAction::PromoteInPlace`); a start other than
    /// it is a restart since. A new task asks each primary it sees once.
    starts_asked: HashMap<String, in_place::Start>,
    /// The primary found in recovery and not promoted yet: `status` says so (`in_place.rs`).
    in_recovery: Option<String>,
    /// The pod this task last set `synchronous_standby_names` on, and to what; `None` in the
    /// value: asynchronous (`synchronous.rs`).
    synchronous_set: Option<(String, Option<SynchronousStatus>)>,
    /// Which replicas the primary was last found streaming to (`streaming.rs`).
    streaming: StreamingWatch,
    /// The round's wake-up at the end of the first running delay (`plan::next_deadline`).
    wake_up: Option<tokio::task::JoinHandle<()>>,
    /// This round's view for the rules, made by `observe.rs`.
    failing: Option<Failing>,
    /// What this round left of synchronous replication, for `status`.
    synchronous: Option<SynchronousRound>,
}

impl Failover {
    /// A new cluster task's state: nothing seen yet.
    pub fn new_state(&self) -> FailoverState {
        FailoverState {
            delays: self.delays,
            agent_image: self.agent_image.clone(),
            unready_since: HashMap::new(),
            terminating_since: HashMap::new(),
            starts_asked: HashMap::new(),
            in_recovery: None,
            synchronous_set: None,
            streaming: StreamingWatch::default(),
            wake_up: None,
            failing: None,
            synchronous: None,
        }
    }
}

/// A layer that holds step 05's state: [`Failover`] itself, or a later step's layer over it
/// (step 06's `Backups`), which calls the functions of this module from its own hooks.
pub trait WithFailover: ClusterLayer {
    fn failover(state: &Self::State) -> &FailoverState;
    fn failover_mut(state: &mut Self::State) -> &mut FailoverState;
}

impl WithFailover for Failover {
    fn failover(state: &FailoverState) -> &FailoverState {
        state
    }

    fn failover_mut(state: &mut FailoverState) -> &mut FailoverState {
        state
    }
}

impl<L: WithFailover> PostgresTask<L> {
    /// This cluster's failover state.
    pub fn failover_state(&self) -> &FailoverState {
        L::failover(&self.layer)
    }

    pub fn failover_state_mut(&mut self) -> &mut FailoverState {
        L::failover_mut(&mut self.layer)
    }
}

// ANCHOR: layer
impl ClusterLayer for Failover {
    type State = FailoverState;
    type Action = FailoverAction;
    type Flags = FailoverFlags;

    fn from_flags(flags: FailoverFlags) -> Self {
        flags.into()
    }

    fn new_state(&self) -> FailoverState {
        Failover::new_state(self)
    }

    fn validate(spec: &PostgresClusterSpec) -> Result<(), String> {
        validate(spec)
    }

    fn dress_pod(
        task: &PostgresTask<Self>,
        cluster: &PostgresCluster,
        role: Role,
        pod: &mut Value,
    ) {
        dress_pod(task, cluster, role, pod);
    }

    async fn observe(
        task: &mut PostgresTask<Self>,
        pods: &[Arc<Pod>],
        observed: &mut Observed,
        planning: bool,
    ) {
        observe::observe(task, pods, observed, planning).await;
    }

    fn plan(task: &PostgresTask<Self>, _: &Observed, action: Action) -> Planned<FailoverAction> {
        plan(task, action)
    }

    async fn act(
        task: &mut PostgresTask<Self>,
        action: &FailoverAction,
        _: Option<&str>,
    ) -> Option<String> {
        task.act_failover(action).await
    }

    async fn after_round(
        task: &mut PostgresTask<Self>,
        _: &[Arc<Pod>],
        observed: &Observed,
        primary: Option<&str>,
        _: bool,
    ) {
        after_round(task, observed, primary).await;
    }

    fn status(
        task: &PostgresTask<Self>,
        planned: &Planned<FailoverAction>,
        status: &mut PostgresClusterStatus,
        now: &str,
    ) {
        let own = match planned {
            Planned::Own(action) => Some(action),
            Planned::Core(_) => None,
        };
        status::status(task, own, status, now);
    }

    fn stats_sql() -> String {
        figures::STATS_SQL.to_string()
    }

    fn figures(
        clusters: &[Arc<PostgresCluster>],
        answers: &[Option<Option<String>>],
        _: std::time::SystemTime,
    ) -> Vec<crate::metrics::Family> {
        figures::figures(clusters, answers)
    }
}
// ANCHOR_END: layer

/// `spec.replication` as step 05 reads it.
pub fn validate(spec: &PostgresClusterSpec) -> Result<(), String> {
    api::validate_spec(spec).map_err(|error| error.to_string())
}

/// Every member pod: the crash guard, the replication timeouts and the readiness agent.
pub fn dress_pod<L: WithFailover>(
    task: &PostgresTask<L>,
    cluster: &PostgresCluster,
    _: Role,
    pod: &mut Value,
) {
    manifests::dress(pod, cluster, &task.failover_state().agent_image);
}

/// Step 05's rules in place of step 04's (`plan.rs`), on the view `observe.rs` made this round;
/// without one (the round did not plan), step 04's `action`.
pub fn plan<L: WithFailover>(task: &PostgresTask<L>, action: Action) -> Planned<FailoverAction> {
    let state = task.failover_state();
    match &state.failing {
        Some(failing) => plan::next_step(failing, &task.options().delays, &state.delays),
        None => Planned::Core(action),
    }
}

/// Keep the primary's synchronous standbys as the spec and the members want them.
pub async fn after_round<L: WithFailover>(
    task: &mut PostgresTask<L>,
    observed: &Observed,
    primary: Option<&str>,
) {
    let round = task.keep_synchronous(observed, primary).await;
    task.failover_state_mut().synchronous = Some(round);
}
