//! The workshop's example object, `kube/example-postgres-cluster.yaml`, and the sizes the tour
//! gives it.

use postgres_operator::api::{PostgresCluster, PostgresClusterSpec};
use postgres_operator::backups::api::{BackupSpec, BackupsSpec};

/// The workshop's example object, as in `kube/example-postgres-cluster.yaml`.
pub const EXAMPLE_NAME: &str = "example-postgresql-cluster";
pub const EXAMPLE_SIZE: i64 = 3;
pub const RESIZED_SIZE: i64 = 5;
/// Step 04 grows the example by one: one more replica cloned from the primary.
pub const GROWN_SIZE: i64 = 4;
const EXAMPLE_VERSION: &str = "16";
/// Step 06's `spec.backup` for the example: a claim of this size (the sandbox records it, a real
/// provisioner would enforce it; two base backups of the tour's small database and its WAL take
/// well under 100 MB), the newest two base backups kept.
pub const BACKUP_STORAGE_SIZE: &str = "256Mi";
pub const BACKUP_KEEP: i64 = 2;

/// `kube/example-postgres-cluster.yaml`.
pub fn example_cluster(namespace: &str) -> PostgresCluster {
    let spec = PostgresClusterSpec::new(EXAMPLE_SIZE, EXAMPLE_VERSION);
    PostgresCluster::new(namespace, EXAMPLE_NAME, spec)
}

/// The example with step 06's `spec.backup` (every other field of it at its default).
pub fn example_cluster_with_backups(namespace: &str) -> PostgresCluster {
    let mut cluster = example_cluster(namespace);
    let backups = BackupsSpec {
        backup: Some(BackupSpec {
            storage_size: BACKUP_STORAGE_SIZE.to_string(),
            keep: BACKUP_KEEP,
            ..BackupSpec::default()
        }),
        bootstrap: None,
    };
    backups.write(&mut cluster.spec);
    cluster
}
