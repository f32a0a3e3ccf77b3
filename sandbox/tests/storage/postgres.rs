//! A PostgreSQL database on a PersistentVolumeClaim outlives its pod: a table written through
//! `kubectl exec ... psql` in one pod is there in the next pod on the same claim, and the
//! database's files (owned by the pods' user, PGDATA 0700) are removed when the claim goes.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap: without them the test
//! fails and says how to install them (`.ci/install-test-deps`).
//! Run: `cargo test -p sandbox --test storage postgres::`.

use std::time::Duration;

use test_support::runtime::{create, start, wait_ready};
use test_support::{eventually, Kubectl};

/// A postgres:15 pod named `name` with PGDATA in a subdirectory of the claim `pgdata`, as the
/// official image's documentation advises for a mounted volume.
fn postgres_pod(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 10
  containers:
  - name: postgres
    image: postgres:15
    env:
    - {{name: POSTGRES_HOST_AUTH_METHOD, value: trust}}
    - {{name: PGDATA, value: /var/lib/postgresql/data/pgdata}}
    readinessProbe: {{tcpSocket: {{port: 5432}}, periodSeconds: 1}}
    volumeMounts: [{{name: data, mountPath: /var/lib/postgresql/data}}]
  volumes: [{{name: data, persistentVolumeClaim: {{claimName: pgdata}}}}]
"#
    )
}

async fn psql(kubectl: &Kubectl, pod: &str, sql: &str) -> String {
    kubectl
        .ok(&[
            "exec",
            pod,
            "--",
            "psql",
            "-U",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        ])
        .await
        .trim()
        .to_string()
}

/// Rows written by one postgres pod are read by the next pod on the same claim; deleting the
/// claim then removes the database's directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_on_a_claim_outlives_its_pod() {
    let (_sandbox, kubectl, runtime) = start().await;
    create(
        &kubectl,
        r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: pgdata}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#,
    )
    .await;
    create(&kubectl, &postgres_pod("pg-1")).await;
    wait_ready(&kubectl, "pg-1").await;
    psql(
        &kubectl,
        "pg-1",
        "CREATE TABLE kept (note text); INSERT INTO kept VALUES ('written by pg-1')",
    )
    .await;
    let claim = kubectl
        .ok(&["get", "pvc", "pgdata", "-o", "jsonpath={.spec.volumeName}"])
        .await;
    let dir = runtime
        .data_dir()
        .join("persistentvolumes")
        .join(claim.trim());
    assert!(
        dir.join("pgdata").join("PG_VERSION").is_file(),
        "PGDATA lives in the volume's directory {}",
        dir.display()
    );

    kubectl.ok(&["delete", "pod", "pg-1"]).await;
    create(&kubectl, &postgres_pod("pg-2")).await;
    wait_ready(&kubectl, "pg-2").await;
    assert_eq!(
        psql(&kubectl, "pg-2", "SELECT note FROM kept").await,
        "written by pg-1"
    );

    kubectl.ok(&["delete", "pod", "pg-2"]).await;
    kubectl.ok(&["delete", "pvc", "pgdata"]).await;
    eventually(
        Duration::from_secs(20),
        "the volume's directory removed",
        || async { (!dir.exists()).then_some(()) },
    )
    .await;
}
