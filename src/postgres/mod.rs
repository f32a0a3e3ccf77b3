//! Step 04: the homework — a Postgres cluster for real.
//!
//! WORKSHOP.md, step 04. Stage 03's controller routes each cluster to a task; here that task
//! acts. The lesson, in WORKSHOP.md's order:
//!
//! | file | what it holds |
//! |---|---|
//! | `binary.rs` | `run_postgres_binary`: the flags, `/metrics`, `run_postgres_operator` under leader election |
//! | `operator.rs` | `run_postgres_operator`: stage 03's operator plus a pod watch that feeds the tasks |
//! | `cluster/worker.rs` | how the controller starts a cluster's task (`PostgresWorker`) |
//! | `cluster/mod.rs` | the cluster task: each round observes (the pod store), plans, acts and writes status and Events |
//! | `plan.rs` | the decisions, as one pure function: what the cluster looks like → the one next action |
//! | `cluster/act.rs` | carrying the action out: pods created and deleted, a failover through `pods/exec` |
//! | `manifests.rs` | the pods a cluster runs |
//!
//! Support, to skip on first read: `binary/flags.rs` (the flags), `api.rs` (step 04's own
//! fields), `conditions.rs` (the `status` and its conditions), `manifests/owned.rs` (the Secret,
//! ConfigMap and Services), `manifests/sql.rs` (the `psql` commands), the rest of `cluster/`
//! (`wakers.rs`, `expectations.rs`, `fence.rs`, `ask.rs`, `lines.rs`, `status.rs`, `owned.rs`,
//! `synchronous.rs`, `streaming.rs`, `layer.rs`), `figures.rs` (each cluster's figures for
//! `/metrics`) and `agent.rs` (`pg-ready`, the agent that answers every member pod's probes).
//! WORKSHOP.md's part two (failover under faults) is `fence.rs`, `synchronous.rs`,
//! `streaming.rs` and `agent.rs`, with rule 1 of `plan.rs`.

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
