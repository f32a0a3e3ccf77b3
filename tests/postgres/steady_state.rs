//! An idle cluster costs the API server next to nothing: once its members are ready, the
//! operator learns everything from its watches and sends no request per round. (The owned
//! Secret, ConfigMap and Services are checked again every `owned_recheck`, five minutes by
//! default: four GETs, under one request per idle cluster per minute.) WORKSHOP.md, "Design
//! notes: What an idle cluster asks".

use std::time::Duration;

use postgres_operator::api::{collection_path, object_path, PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::Patch;
use postgres_operator::postgres::run_postgres_operator;
use sandbox::{RequestRecord, SandboxOptions};
use tokio_util::sync::CancellationToken;

const CLUSTERS: usize = 4;
/// Rounds come every second (`quick_postgres_options`): about five per cluster.
const WINDOW: Duration = Duration::from_secs(5);

fn operators(requests: &[RequestRecord]) -> Vec<&RequestRecord> {
    requests
        .iter()
        .filter(|r| r.user_agent.starts_with("postgres-operator") && r.verb != "watch")
        .collect()
}

#[tokio::test]
async fn idle_clusters_cost_no_request_per_round() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let (reporter, _story) = test_support::Story::record();
    let stop = CancellationToken::new();
    let options = test_support::quick_postgres_options();
    let operator = tokio::spawn(run_postgres_operator(
        client.clone(),
        options,
        test_support::quick_failover(),
        reporter,
        stop.clone(),
    ));
    let path = collection_path(client.namespace());
    for i in 0..CLUSTERS {
        let spec = PostgresClusterSpec::new(2, "16");
        let cluster = PostgresCluster::new(client.namespace(), &format!("idle-{i}"), spec);
        client
            .create::<_, PostgresCluster>(&path, &cluster)
            .await
            .expect("cluster created");
    }
    test_support::eventually(
        Duration::from_secs(60),
        "every cluster Running with 2 members ready",
        || {
            let client = client.clone();
            let path = path.clone();
            async move {
                let list: serde_json::Value = client.get(&path).await.ok()?;
                let items = list["items"].as_array()?;
                let ready = items.iter().filter(|c| {
                    c["status"]["phase"] == "Running" && c["status"]["readyInstances"] == 2
                });
                (ready.count() == CLUSTERS).then_some(())
            }
        },
    )
    .await;
    // A status field the operator no longer sets (`switchover`, left from an annotation since
    // removed) goes with its next write; a merge patch that left it out would leave it on the
    // server, and every round would find the status changed and write it again.
    let status_path = format!("{}/status", object_path(client.namespace(), "idle-0"));
    let stale = serde_json::json!({"status": {"switchover": "idle-0-gone"}});
    client
        .patch::<serde_json::Value>(&status_path, &Patch::Merge(stale))
        .await
        .expect("a stale status.switchover written");
    let cluster_path = object_path(client.namespace(), "idle-0");
    test_support::eventually(
        Duration::from_secs(30),
        "the stale status.switchover removed",
        || async {
            let cluster: serde_json::Value = client.get(&cluster_path).await.ok()?;
            cluster["status"].get("switchover").is_none().then_some(())
        },
    )
    .await;
    // The last status writes of the climb (conditions settling) are not the idle cost: wait
    // for a second with no request, then measure.
    test_support::eventually(Duration::from_secs(30), "a quiet second", || {
        let sandbox = &sandbox;
        async move {
            let before = operators(&sandbox.requests()).len();
            tokio::time::sleep(Duration::from_secs(1)).await;
            (operators(&sandbox.requests()).len() == before).then_some(())
        }
    })
    .await;
    let before = sandbox.requests().len();
    // The measurement window itself, not a synchronisation: rounds run on their timer.
    tokio::time::sleep(WINDOW).await;
    let requests = sandbox.requests();
    let during = operators(&requests[before..]);
    println!(
        "{CLUSTERS} idle clusters, {} s of 1 s rounds: {} requests from the operator besides its watches",
        WINDOW.as_secs(),
        during.len()
    );
    assert!(
        during.is_empty(),
        "an idle round sent requests: {:?}",
        during
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect::<Vec<_>>()
    );
    stop.cancel();
    operator
        .await
        .expect("the operator's task")
        .expect("the operator stops cleanly");
}
