//! Stage 05 of the workshop: failover — stage 04's operator, and when the primary is lost it
//! fences it and promotes the most advanced replica; synchronous replication, the switchover on
//! request, minor upgrades — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 05". New since stage 04: `src/failover/`, a layer over stage 04's cluster
//! task (`ClusterLayer` in `src/postgres/cluster/layer.rs`): this step's fields of the cluster
//! (`spec.replication`, the switchover annotation, `status.synchronous`, `status.switchover`),
//! the plan that notices a lost primary, fences it and promotes a replica, and the switchover.
//! The same operator as stage 04 with that layer plugged in. Like stage 04 it acts only while it
//! holds the Lease `postgres-operator`, so a second copy waits instead of fighting it.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage05                          # terminal 3
//! kubectl create -f kube/example-postgres-cluster.yaml   # terminal 2
//! kubectl get pgc,pods -w
//! kubectl delete pod -l workshop.example.com/role=primary
//! kubectl annotate pgc example-postgresql-cluster workshop.example.com/switchover-to=<a replica>
//! cargo run --bin stage05                          # terminal 4: waits for the lease
//! kubectl get lease postgres-operator -o yaml
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr. `stage05 --help`
//! lists the flags.

use std::process::ExitCode;

use postgres_operator::failover::Failover;
use postgres_operator::postgres::run_postgres_binary;

/// What `stage05 --help` says first.
const ABOUT: &str =
    "stage05: workshop step 05. Stage 04's operator plus failover: when a cluster's primary is \
    lost it fences it and promotes the most advanced replica, keeps synchronous replication as \
    spec.replication asks, and switches the primary over on the \
    workshop.example.com/switchover-to annotation. Lines about one cluster start with \
    [namespace/name]. It acts only while it holds the Lease, so a second copy waits as a \
    standby.";

#[tokio::main]
async fn main() -> ExitCode {
    // The failover layer (src/failover/) over stage 04's operator.
    run_postgres_binary::<Failover>("stage05", ABOUT).await
}
