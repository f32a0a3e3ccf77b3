//! An operator starts whatever number of pods already exist: it waits for its pod watch's first
//! list before it plans anything, and that list must come in even when the cluster has more
//! labelled pods than any channel between the watch and the controller holds. WORKSHOP.md,
//! step 04 ("Watching the pods too").

use std::time::Duration;

use postgres_operator::controller::pods::{APP_LABEL, APP_LABEL_VALUE, CLUSTER_LABEL};
use postgres_operator::postgres::run_postgres_operator;
use sandbox::SandboxOptions;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// More than any channel between the pod watch and the tasks holds (the watch's 16 events; the
/// 16 wake-ups the controller once queued).
const PODS: usize = 40;

/// 40 labelled pods exist before the operator starts: it gets past its pod list, and stops.
#[tokio::test]
async fn an_operator_starts_beside_more_pods_than_its_channels_hold() {
    let (_sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let path = format!("/api/v1/namespaces/{}/pods", client.namespace());
    for i in 0..PODS {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("left-{i}"),
                "labels": {APP_LABEL: APP_LABEL_VALUE, CLUSTER_LABEL: format!("gone-{}", i % 8)},
            },
            "spec": {"containers": [{"name": "postgres", "image": "postgres:16"}]},
        });
        client
            .create::<_, Value>(&path, &pod)
            .await
            .expect("a labelled pod created");
    }
    let (reporter, story) = test_support::Story::record();
    let stop = CancellationToken::new();
    let operator = tokio::spawn(run_postgres_operator(
        client.clone(),
        test_support::quick_postgres_options(),
        (),
        reporter,
        stop.clone(),
    ));
    test_support::eventually(
        Duration::from_secs(30),
        "the operator past its pod list, finding clusters",
        || async { story.said("Finding existing clusters...").then_some(()) },
    )
    .await;
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(30), operator)
        .await
        .expect("the operator ended within 30 s of its stop")
        .expect("the operator task")
        .expect("the operator ended cleanly");
}
