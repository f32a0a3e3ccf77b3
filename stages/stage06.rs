//! Stage 06 of the workshop: stage 05 plus backups — continuous WAL archiving, base backups,
//! and disaster recovery from them — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 06". New since stage 05: `src/backups/`, a layer over stage 05's cluster
//! task (`ClusterLayer` in `src/postgres/cluster/layer.rs`): `api.rs` — this step's fields of
//! the cluster (`spec.backup`, `spec.bootstrap`, the backup-now annotation, `status.lastBackup`,
//! `backupRequested`, `restore`);
//! `manifests.rs` — the claim `<name>-backups`, the archive settings every member gets, the
//! backup pod and the restore init container; `plan.rs` — a seed that restores in place of the
//! disaster when a backup exists, members that do not archive replaced, and when to take a base
//! backup; `restore.rs` and `base_backups.rs` carry them out; `scripts.rs` — the shell:
//! `archive_command`, `restore_command`, the backup and restore scripts; `conditions.rs` — phase
//! Recovering or Failed and the conditions; `figures.rs` — the last backup's age
//! and the archiver's failures for `/metrics`; `termination.rs` — what a finished container
//! reports; `source_credentials.rs` — the passwords of a bootstrap's source cluster; `mod.rs` —
//! the layer itself, the hooks it fills. The same
//! operator as stage 05 with that layer plugged in: a cluster without `spec.backup` or
//! `spec.bootstrap` runs exactly as in stage 05. Like stage 05 it acts only while it holds the Lease `postgres-operator`.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage06                          # terminal 3
//! kubectl create -f kube/example-postgres-cluster.yaml   # terminal 2
//! kubectl patch pgc example-postgresql-cluster --type merge -p '{"spec":{"backup":{}}}'
//! kubectl annotate pgc example-postgresql-cluster workshop.example.com/backup-now=1
//! kubectl delete pod -l workshop.example.com/cluster=example-postgresql-cluster
//! kubectl get pgc,pods -w
//! cargo run --bin stage06                          # terminal 4: waits for the lease
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr. `stage06 --help`
//! lists the flags.

use std::process::ExitCode;

use postgres_operator::backups::Backups;
use postgres_operator::postgres::run_postgres_binary;

/// What `stage06 --help` says first.
const ABOUT: &str =
    "stage06: workshop step 06. Stage 05's operator plus backups: for a cluster with spec.backup \
    it archives every WAL segment to the claim <name>-backups, takes base backups every \
    intervalMinutes (and on the workshop.example.com/backup-now annotation), and when every \
    member is lost restores the newest backup and replays the archive. spec.bootstrap.fromBackup \
    starts a new cluster from another's backups. Lines about one cluster start with \
    [namespace/name]. It acts only while it holds the Lease, so a second copy waits as a \
    standby.";

#[tokio::main]
async fn main() -> ExitCode {
    // The one difference from stage 05: the backup layer acts on spec.backup and spec.bootstrap.
    run_postgres_binary::<Backups>("stage06", ABOUT).await
}
