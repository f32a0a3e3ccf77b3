//! What the watch keeps of a cluster drops fields no step reads (`src/api/kept.rs`); the writes
//! that follow must not lose them on the server. A merge patch names only its own fields; a PUT
//! sends a whole object back, so its type must carry what it does not act on.
//!
//! WORKSHOP.md, step 02 ("Decoding an event"). Runs against the sandbox.

use postgres_operator::api::{object_path, PostgresCluster, LAST_APPLIED_ANNOTATION};
use postgres_operator::client::Patch;
use postgres_operator::leader::{lease_path, leases_path, Lease};
use sandbox::SandboxOptions;
use serde_json::{json, Value};

/// A Lease read as the leader reads it and PUT back (a renewal) keeps its finalizer, its
/// labels and kubectl's last-applied annotation (`ObjectMeta` carries them), and a spec field
/// the election does not model (`LeaseSpec::more`).
#[tokio::test]
async fn a_put_of_a_lease_keeps_its_finalizers_labels_and_annotations() {
    let (_sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": "op", "namespace": "default",
            "labels": {"team": "db"},
            "finalizers": ["example.com/keep"],
            "annotations": {LAST_APPLIED_ANNOTATION: "{\"kind\":\"Lease\"}"},
        },
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "preferredHolder": "c"},
    });
    let _: Value = client
        .create(&leases_path("default"), &lease)
        .await
        .expect("lease created");
    let path = lease_path("default", "op");
    let mut read: Lease = client.get(&path).await.expect("lease read");
    read.spec.holder_identity = Some("b".into());
    let _: Lease = client.replace(&path, &read).await.expect("lease PUT");

    let stored: Value = client.get(&path).await.expect("lease read back");
    assert_eq!(stored["spec"]["holderIdentity"], "b", "the PUT took effect");
    assert_eq!(
        stored["spec"]["preferredHolder"], "c",
        "a spec field LeaseSpec does not name"
    );
    let metadata = &stored["metadata"];
    assert_eq!(metadata["finalizers"], json!(["example.com/keep"]));
    assert_eq!(metadata["labels"], json!({"team": "db"}));
    assert_eq!(
        metadata["annotations"][LAST_APPLIED_ANNOTATION],
        "{\"kind\":\"Lease\"}"
    );
}

/// A cluster as the watch keeps it has no labels and no last-applied annotation; a status merge
/// patch built from it leaves both on the server.
#[tokio::test]
async fn a_status_patch_from_the_kept_cluster_leaves_the_dropped_fields_alone() {
    let (_sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let created = test_support::create_cluster(&client, "default", "db", 1).await;
    let path = object_path("default", "db");
    let dress = json!({"metadata": {
        "labels": {"team": "db"},
        "annotations": {LAST_APPLIED_ANNOTATION: "{\"kind\":\"PostgresCluster\"}"},
    }});
    let _: Value = client
        .patch(&path, &Patch::Merge(dress))
        .await
        .expect("labels and annotation set");

    let kept: PostgresCluster = client.get(&path).await.expect("cluster read");
    assert_eq!(kept.metadata.uid, created.metadata.uid);
    assert!(kept.metadata.labels.is_empty(), "labels are not kept");
    assert!(!kept
        .metadata
        .annotations
        .contains_key(LAST_APPLIED_ANNOTATION));
    let mut status = kept.status.clone().unwrap_or_default();
    status.phase = Some("Running".into());
    let body = json!({"status": status});
    let _: Value = client
        .patch(&format!("{path}/status"), &Patch::Merge(body))
        .await
        .expect("status patched");

    let stored: Value = client.get(&path).await.expect("cluster read back");
    assert_eq!(
        stored["status"]["phase"], "Running",
        "the patch took effect"
    );
    assert_eq!(stored["metadata"]["labels"], json!({"team": "db"}));
    assert_eq!(
        stored["metadata"]["annotations"][LAST_APPLIED_ANNOTATION],
        "{\"kind\":\"PostgresCluster\"}"
    );
}
