//! Stage 04 of the workshop: the homework, for real — launch the seed, grow to size, replace lost
//! replicas — until SIGTERM or Ctrl-C. Failing over is stage 05's (`stages/stage05.rs`).
//!
//! WORKSHOP.md, "Step 04". New since stage 03: `src/postgres/` — the cluster task now acts.
//! `manifests.rs` builds the pods (with `manifests/owned.rs` the Secret, ConfigMap and Services,
//! and `manifests/sql.rs` the psql commands); `plan.rs`
//! decides the one next action from what the pods look like; `cluster/` carries it out (pods
//! through the API), writes `status` and Events (`src/events.rs`) and `conditions.rs` computes
//! that status; `operator.rs` adds a watch of the pods whose store (`src/watch/store.rs`) the
//! tasks read and whose events wake them. Stage 03's lines stay; the placeholders are gone.
//! `binary.rs` is this file's one call, `run_postgres_binary`: the flags, `/metrics`, the
//! operator under leader election. And `src/leader/`: it acts only while it holds the Lease
//! `postgres-operator`, so a second copy (a standby replica, the new pod of a rolling update)
//! waits instead of fighting it; `src/metrics/` (with `figures.rs`, each cluster's figures, asked
//! of each primary through `pods/exec`, `src/exec.rs`) serves `/metrics`, `/healthz` and
//! `/readyz`.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage04                          # terminal 3
//! kubectl create -f kube/example-postgres-cluster.yaml   # terminal 2
//! kubectl get pgc,pods -w
//! kubectl scale pgc example-postgresql-cluster --replicas 5
//! cargo run --bin stage04                          # terminal 4: waits for the lease
//! kubectl get lease postgres-operator -o yaml
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr. `stage04 --help`
//! lists the flags.

use std::process::ExitCode;

use postgres_operator::postgres::run_postgres_binary;

/// What `stage04 --help` says first.
const ABOUT: &str =
    "stage04: workshop step 04. The operator that runs Postgres clusters: each cluster's Secret, \
    Services and pods (the official postgres image), the seed, then replicas until spec.size run; \
    lost replicas replaced, a lost primary waited for (stage 05 fails over); status and Events. \
    Lines about one cluster start with [namespace/name]. It acts only while it holds the Lease, \
    so a second copy waits as a standby.";

#[tokio::main]
async fn main() -> ExitCode {
    // `()`: no layer over the cluster task's round (`ClusterLayer`, src/postgres/cluster/layer.rs).
    run_postgres_binary::<()>("stage04", ABOUT).await
}
