//! The controller over real HTTP: cluster tasks list and delete pods through the client against
//! the sandbox API server on 127.0.0.1:0, and (end to end) take their events from list-then-watch.
//! WORKSHOP.md step 03.

use std::time::Duration;

use postgres_operator::controller::pods::{label_selector, PodApi};
use postgres_operator::controller::ControllerOptions;
use postgres_operator::watch::Event;
use test_support::create_cluster;

use crate::support::{create_owned_pod, every, sandbox_with_crd, start, Transcript};

/// A tick lists pods by label selector over HTTP and keeps only those the cluster owns: the
/// sandbox's kubelet moves them from pending to running between two ticks.
#[tokio::test]
async fn reconcile_sees_owned_pods_go_from_pending_to_running() {
    // The kubelet holds the pods Pending until the first tick has seen them so; a delay of its
    // own would be a race with how soon that tick comes on a busy machine.
    let held = Duration::from_secs(3600);
    let (sandbox, client) = sandbox_with_crd(held).await;
    let db = create_cluster(&client, "default", "db", 3).await;
    let impostor = create_cluster(&client, "default", "impostor", 1).await;
    create_owned_pod(&client, &db, "db-0000").await;
    create_owned_pod(&client, &db, "db-0001").await;
    // Carries db's labels but another owner: the uid check must leave it out.
    let mut labelled_alike = impostor.clone();
    labelled_alike.metadata.name = "db".into();
    create_owned_pod(&client, &labelled_alike, "not-db-0000").await;

    let (mut controller, mut story) = start(client.clone(), every(Duration::from_millis(300)));
    controller.handle_event(Event::Added(db.into()));
    let first = story
        .wait_for("default/db", "Running:", Duration::from_secs(5))
        .await;
    assert_eq!(first.line, "Running: [], pending: [db-0000, db-0001]");
    sandbox.faults().set_kubelet_delay(Duration::ZERO);
    story
        .wait_for(
            "default/db",
            "Running: [db-0000, db-0001], pending: []",
            Duration::from_secs(10),
        )
        .await;
    story
        .wait_for(
            "default/db",
            "PLACEHOLDER: resize from 2 to 3 pods",
            Duration::from_secs(5),
        )
        .await;
    controller.shutdown().await;
}

/// Deleting a cluster makes its task delete the pods it owns, through the API, before it ends.
#[tokio::test]
async fn delete_removes_the_clusters_pods_through_the_api() {
    let (_sandbox, client) = sandbox_with_crd(Duration::ZERO).await;
    let db = create_cluster(&client, "default", "db", 1).await;
    create_owned_pod(&client, &db, "db-0000").await;
    let selector = label_selector("db");
    assert_eq!(
        client.list_pods("default", &selector).await.unwrap().len(),
        1
    );

    let (mut controller, mut story) = start(client.clone(), ControllerOptions::default());
    controller.handle_event(Event::Added(db.clone().into()));
    // Only the operator hears of this delete: the object is still in the sandbox, so the garbage
    // collector has no reason to touch the pod. Any deletion is the task's doing.
    controller.handle_event(Event::Deleted(db.into()));
    story
        .wait_for_each(
            "default/db",
            &["cluster is deleted by the user", "cluster task ended"],
            Duration::from_secs(5),
        )
        .await;
    assert!(client
        .list_pods("default", &selector)
        .await
        .unwrap()
        .is_empty());
    controller.shutdown().await;
}

/// Lets the pod list fail `times` times with `code`, starts a task for one cluster, and returns its
/// "reconcile skipped" line, after checking that the task carries on at the next tick.
async fn refused_pod_list_line(code: u16, reason: &str, times: usize) -> String {
    let (sandbox, client) = sandbox_with_crd(Duration::ZERO).await;
    let db = create_cluster(&client, "default", "db", 1).await;
    sandbox.faults().fail_next(
        times,
        "/pods",
        sandbox::InjectedFault::Status {
            code,
            reason: reason.into(),
            // Sent as `Retry-After: 0`: the client's retries of a 503 take no time.
            retry_after_seconds: Some(0),
        },
    );
    let (mut controller, mut story) = start(client.clone(), every(Duration::from_millis(200)));
    controller.handle_event(Event::Added(db.into()));
    let five_seconds = Duration::from_secs(5);
    let refused = story
        .wait_for("default/db", "reconcile skipped", five_seconds)
        .await;
    // The task carries on: the next tick lists again.
    story
        .wait_for("default/db", "Running: [], pending: []", five_seconds)
        .await;
    controller.shutdown().await;
    refused.line
}

/// A 403 on the pod list does not kill the task: it names the RBAC rule to grant and tries next tick.
#[tokio::test]
async fn forbidden_pod_list_names_the_missing_rule_and_is_retried_next_tick() {
    let line = refused_pod_list_line(403, "Forbidden", 1).await;
    assert!(line.contains("Forbidden (403)"), "{line}");
    assert!(
        line.contains("may not list pods: grant `list` on pods in its Role (kube/rbac.yaml)"),
        "{line}"
    );
}

/// A 503 (after the client's own three retries) is told apart from a 403: no RBAC advice, just
/// the next tick.
#[tokio::test]
async fn unavailable_pod_list_is_retried_next_tick_without_rbac_advice() {
    let line = refused_pod_list_line(503, "ServiceUnavailable", 4).await;
    assert!(line.contains("ServiceUnavailable (503)"), "{line}");
    assert!(line.ends_with("; trying again next tick"), "{line}");
    assert!(!line.contains("grant"), "{line}");
}

/// End to end through `run_operator` (what stage03 and the tour run): register, list, watch, and
/// one task per cluster — create, resize, delete of one cluster while a second one lives on.
#[tokio::test]
async fn operator_follows_create_resize_delete_end_to_end() {
    let (_sandbox, client) = sandbox_with_crd(Duration::ZERO).await;
    // Exists before the operator starts: it arrives through the list, not the watch.
    let early = create_cluster(&client, "default", "early", 1).await;
    let (reporter, mut story) = Transcript::record();
    let stop = tokio_util::sync::CancellationToken::new();
    let operator = tokio::spawn(postgres_operator::controller::run_operator(
        client.clone(),
        every(Duration::from_millis(500)),
        reporter,
        stop.clone(),
    ));
    let deadline = Duration::from_secs(10);
    story
        .wait_for("default/early", "creating cluster", deadline)
        .await;
    assert!(story
        .seen
        .iter()
        .any(|l| l.cluster.is_none() && l.line.starts_with("Watch version: ")));

    let db = create_cluster(&client, "default", "db", 3).await;
    story
        .wait_for(
            "default/db",
            "creating cluster with Spec {size: 3",
            deadline,
        )
        .await;
    let resize = postgres_operator::client::Patch::Merge(serde_json::json!({"spec": {"size": 5}}));
    let _: serde_json::Value = client
        .patch(
            &postgres_operator::api::object_path("default", "db"),
            &resize,
        )
        .await
        .unwrap();
    story
        .wait_for(
            "default/db",
            "spec update: from {size: 3, version: 16, paused: false} to {size: 5",
            deadline,
        )
        .await;
    let _: serde_json::Value = client
        .delete(&postgres_operator::api::object_path("default", "db"))
        .await
        .unwrap();
    story
        .wait_for("default/db", "cluster task ended", deadline)
        .await;

    // The other cluster still ticks after its neighbour is gone.
    let index = story.seen.len();
    story
        .wait_for("default/early", "Running: [], pending: []", deadline)
        .await;
    assert!(story.seen[index..]
        .iter()
        .all(|l| !l.is_about("default/db")));

    stop.cancel();
    let summary = tokio::time::timeout(deadline, operator)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.tasks_stopped, 1, "only `early` was still running");
    drop((db, early));
}
