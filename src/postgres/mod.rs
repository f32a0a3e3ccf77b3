//! Step 04: the homework — a Postgres cluster for real.
//!
//! WORKSHOP.md, step 04. Stage 03's controller routes each cluster to a task; here that task
//! acts: the seed, replicas cloned until `spec.size` run, a lost replica replaced, the newest
//! replica removed when fewer are asked for, `status` and Events. A lost primary is waited for
//! (step 05's `src/failover/` promotes a replica). The lesson, in WORKSHOP.md's order:
//!
//! | file | what it holds |
//! |---|---|
//! | `binary.rs` | `run_postgres_binary`: the flags, `/metrics`, `run_postgres_operator` under leader election |
//! | `operator.rs` | `run_postgres_operator`: stage 03's operator plus a pod watch that feeds the tasks |
//! | `cluster/worker.rs` | how the controller starts a cluster's task (`PostgresWorker`) |
//! | `cluster/mod.rs` | the cluster task: each round observes (the pod store), plans, acts and writes status |
//! | `plan.rs` | the decisions, as one pure function: what the cluster looks like → the one next action |
//! | `cluster/act.rs` | carrying the action out: pods created and deleted, each said and recorded as an Event |
//! | `manifests.rs` | the pods a cluster runs |
//!
//! Support, to skip on first read: `binary/flags.rs` (the flags), `api.rs` (how a spec is
//! checked, and a later step's fields typed), `conditions.rs` (the `status` and its conditions),
//! `plan/version.rs` (what a change of `spec.version` means), `plan/with_more.rs` (a member
//! carrying a later step's observation), `manifests/names.rs`, `manifests/pieces.rs`,
//! `manifests/owned.rs` (the Secret, ConfigMap and Services), `manifests/sql.rs` (the `psql`
//! commands), the rest of `cluster/` (`options.rs`, `observe.rs`, `access.rs`, `pod_calls.rs`,
//! `wakers.rs`, `expectations.rs`, `ask.rs`, `lines.rs`, `status.rs`, `owned.rs`, `layer.rs`)
//! and `figures.rs` (each cluster's figures for `/metrics`).

pub mod api;
pub mod binary;
pub mod cluster;
pub mod conditions;
pub mod figures;
pub mod manifests;
pub mod operator;
pub mod plan;

pub use binary::{
    run_postgres_binary, run_postgres_operator_when_leading, PostgresFlags, PostgresStageFlags,
};
pub use cluster::{
    ClusterLayer, NoFlags, OwnedError, Planned, PostgresOptions, PostgresTask, PostgresWorker,
    Wakers,
};
pub use operator::run_postgres_operator;
