//! Step 04: the homework — a Postgres cluster for real.
//!
//! WORKSHOP.md, step 04. Stage 03's controller routes each cluster to a task; here that task
//! acts. Read in this order:
//!
//! | file | what it holds |
//! |---|---|
//! | `api.rs` | step 04's own fields of the cluster: `spec.replication`, the switchover annotation, `status.synchronous` and `status.switchover` |
//! | `manifests.rs` | the objects a `PostgresCluster` owns (Secret, ConfigMap, Services, pods) and the `psql` commands run in them |
//! | `plan.rs` | the decisions, as one pure function: what the cluster looks like → the one next action |
//! | `conditions.rs` | the `status` and its conditions, computed from the same observation |
//! | `cluster/` | the cluster task: observe (the pod store), plan and write status and Events (`mod.rs`), act (`act.rs`: pods, `pods/exec`), the owned objects (`owned.rs`), synchronous replication (`synchronous.rs`), which replicas stream from the primary (`streaming.rs`), and the places a later step adds to a round (`layer.rs`) |
//! | `figures.rs` | each cluster's figures for `/metrics` (`src/metrics/`): from the cluster store, and from its primary at scrape time |
//! | `operator.rs` | `run_postgres_operator`: stage 03's operator plus a pod watch that feeds the tasks; `run_postgres_operator_when_leading`: the same under leader election (`src/leader/`) |

pub mod api;
pub mod cluster;
pub mod conditions;
pub mod figures;
pub mod manifests;
pub mod operator;
pub mod plan;

pub use cluster::{
    ClusterLayer, OwnedError, Planned, PostgresOptions, PostgresTask, PostgresWorker, Wakers,
};
pub use operator::{
    run_postgres_binary, run_postgres_operator, run_postgres_operator_when_leading, PostgresFlags,
    PostgresStageFlags,
};
