//! What the CRD's schema and subresources give a user of real kubectl, against the sandbox:
//! `kubectl get pgc` prints SIZE, READY, PRIMARY, PHASE, VERSION and AGE; `kubectl scale` sets
//! `spec.size` through the scale subresource, which reads `status.size` and `status.selector`;
//! and bad specs (size 0 or 8, version "abc" or "9.6") are refused with the field named, and
//! nothing is created.

use postgres_operator::api::{object_path, PostgresCluster};
use postgres_operator::client::{Client, Patch};
use sandbox::{Sandbox, SandboxOptions};
use serde_json::json;
use test_support::{start_sandbox_with, Kubectl, EXAMPLE_FIXTURE};

const NAME: &str = "example-postgresql-cluster";

/// A sandbox with our CRD ensured and Established, a client and kubectl for it.
async fn ready_sandbox() -> (Sandbox, Client, Kubectl) {
    let sandbox = start_sandbox_with(SandboxOptions::default()).await;
    let client = test_support::plain_client(&sandbox.url());
    test_support::register_crd(&client).await;
    let kubectl = Kubectl::new(&sandbox.url());
    (sandbox, client, kubectl)
}

/// The operator's status write, through `/status` as stage 04 makes it.
async fn write_status(client: &Client) {
    let status = json!({"status": {
        "phase": "Running", "primary": "example-postgresql-cluster-x7k2p", "size": 3,
        "readyInstances": 3, "currentVersion": "16", "observedGeneration": 1,
        "selector": "workshop.example.com/cluster=example-postgresql-cluster",
        "conditions": [{"type": "Available", "status": "True", "reason": "PrimaryReady",
                        "message": "the primary accepts connections",
                        "lastTransitionTime": "2025-01-02T03:04:05Z", "observedGeneration": 1}],
    }});
    let _: serde_json::Value = client
        .patch(
            &format!("{}/status", object_path("default", NAME)),
            &Patch::Merge(status),
        )
        .await
        .expect("status written");
}

/// `kubectl get pgc` shows the seven columns in order, empty where the status has not been written
/// yet, and the operator's status once it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_prints_size_ready_primary_phase_version_last_backup_age() {
    let (_sandbox, client, kubectl) = ready_sandbox().await;
    kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;

    let table = kubectl.ok(&["get", "pgc"]).await;
    let header = test_support::table_row(&table, 0);
    assert_eq!(
        header,
        // LAST BACKUP: stage 06's column, empty until a base backup completes.
        test_support::PGC_TABLE_HEADER,
        "{table}"
    );
    let row = test_support::table_row(&table, 1);
    assert_eq!(row[..3], [NAME, "3", "16"], "no status yet: {table}");

    write_status(&client).await;
    let table = kubectl.ok(&["get", "pgc"]).await;
    let row = test_support::table_row(&table, 1);
    assert_eq!(
        row[..6],
        [
            NAME,
            "3",
            "3",
            "example-postgresql-cluster-x7k2p",
            "Running",
            "16"
        ],
        "{table}"
    );
    let stored: PostgresCluster = client.get(&object_path("default", NAME)).await.unwrap();
    let status = stored.status.expect("status kept");
    assert_eq!(status.ready_instances, Some(3));
    assert_eq!(status.conditions[0].reason, "PrimaryReady");
}

/// `kubectl scale pgc/NAME --replicas=5` sets spec.size through the scale subresource; the Scale
/// reports status.size as its replicas and status.selector as its selector; a scale past 7 is
/// refused by the schema like any other write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_sets_spec_size() {
    let (_sandbox, client, kubectl) = ready_sandbox().await;
    kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;
    write_status(&client).await;

    let out = kubectl
        .ok(&["scale", &format!("pgc/{NAME}"), "--replicas=5"])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let stored: PostgresCluster = client.get(&object_path("default", NAME)).await.unwrap();
    assert_eq!(stored.spec.size, 5);
    assert_eq!(stored.metadata.generation, Some(2));

    let scale: serde_json::Value = serde_json::from_str(
        &kubectl
            .ok(&[
                "get",
                "--raw",
                &format!("{}/scale", object_path("default", NAME)),
            ])
            .await,
    )
    .expect("a Scale");
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["replicas"], 3, "from status.size");
    assert_eq!(
        scale["status"]["selector"],
        "workshop.example.com/cluster=example-postgresql-cluster"
    );

    let refused = kubectl
        .run(&["scale", &format!("pgc/{NAME}"), "--replicas=8"])
        .await;
    assert!(!refused.success, "{refused:?}");
    assert!(refused.stderr.contains("spec.size"), "{}", refused.stderr);
    let stored: PostgresCluster = client.get(&object_path("default", NAME)).await.unwrap();
    assert_eq!(stored.spec.size, 5);
}

/// Size 0 and 8, version "abc" and "9.6": each `kubectl create` is refused by the server's schema
/// with the field named in the message (and the rule, for the version), and no object exists after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_are_refused_with_the_field_named() {
    let (_sandbox, _client, kubectl) = ready_sandbox().await;
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "size-0",
            json!(0),
            json!("16"),
            "spec.size",
            "greater than or equal to 1",
        ),
        (
            "size-8",
            json!(8),
            json!("16"),
            "spec.size",
            "less than or equal to 7",
        ),
        (
            "version-abc",
            json!(3),
            json!("abc"),
            "spec.version",
            "should match",
        ),
        (
            "version-9-6",
            json!(3),
            json!("9.6"),
            "spec.version",
            "should match",
        ),
    ];
    for (name, size, version, field, rule) in cases {
        let file = dir.path().join(format!("{name}.json"));
        let object = json!({
            "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
            "metadata": {"name": name}, "spec": {"size": size, "version": version},
        });
        std::fs::write(&file, object.to_string()).unwrap();
        let out = kubectl.run(&["create", "-f", file.to_str().unwrap()]).await;
        assert!(!out.success, "{name} was accepted: {out:?}");
        let expected = format!("The PostgresCluster \"{name}\" is invalid: {field}: ");
        assert!(out.stderr.contains(&expected), "{name}: {}", out.stderr);
        assert!(out.stderr.contains(rule), "{name}: {}", out.stderr);
    }
    let all = kubectl.run(&["get", "pgc"]).await;
    assert!(all.success, "{all:?}");
    assert_eq!(all.stdout, "", "nothing was created");
    assert!(all.stderr.contains("No resources found"), "{}", all.stderr);
}
