//! A primary deleted while its standby is frozen (every process SIGSTOPped, its TCP connection
//! open: a hung pod, or a node cut off from the network) stops within seconds: its fast
//! shutdown waits for the standby's reply only as long as `wal_sender_timeout`.
//!
//! Needs PostgreSQL and bubblewrap:
//! `cargo test --test postgres frozen_standby:: -- --nocapture`.

use std::time::{Duration, Instant};

use postgres_operator::api::{collection_path, object_path, PostgresCluster};
use sandbox::LostNode;
use serde_json::Value;

use super::psql;

const CLUSTER: &str = "frozen";
const DEADLINE: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_whose_standby_is_frozen_stops_within_seconds() {
    let operator =
        test_support::PostgresOperator::start(test_support::quick_postgres_options()).await;
    let (sandbox, client) = (&operator.sandbox, operator.client.clone());
    let object = PostgresCluster::new(client.namespace(), CLUSTER, test_support::cluster_spec(2));
    client
        .create::<_, PostgresCluster>(&collection_path(client.namespace()), &object)
        .await
        .expect("cluster created");

    // The primary, and the standby streaming from it (application_name is the pod's name).
    let (primary, standby) = test_support::eventually(DEADLINE, "a streaming standby", || async {
        let cluster: Value = client
            .get(&object_path(client.namespace(), CLUSTER))
            .await
            .ok()?;
        // Both ready: the replica's clone (whose pg_basebackup streams WAL under the same
        // application_name) is over, and its server streams.
        if cluster["status"]["readyInstances"] != 2 {
            return None;
        }
        let primary = cluster["status"]["primary"].as_str()?.to_string();
        let sql = "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'";
        let standby = psql(&client, &primary, sql).await?;
        (!standby.is_empty()).then_some((primary, standby))
    })
    .await;

    // The standby's node is cut off: its processes frozen, its connections open.
    assert!(
        sandbox
            .faults()
            .lose_node(client.namespace(), &standby, LostNode::default()),
        "{primary} streams to {standby:?}"
    );
    let path = format!("/api/v1/namespaces/{}/pods/{primary}", client.namespace());
    let deleted = Instant::now();
    client
        .delete::<Value>(&path)
        .await
        .expect("the primary pod deleted");
    test_support::eventually(DEADLINE, "the deleted primary gone", || async {
        client.get::<Value>(&path).await.is_err().then_some(())
    })
    .await;
    let stopped = deleted.elapsed();
    println!(
        "primary with a frozen standby: deleted to gone in {:.1} s",
        stopped.as_secs_f64()
    );
    // With PostgreSQL's default wal_sender_timeout (60 s) its walsender waited for the frozen
    // standby's reply: 30 s here, past the operator's stop timeout (20 s), which then fences.
    assert!(
        stopped < Duration::from_secs(15),
        "the primary took {stopped:?} to stop"
    );

    operator.stop().await;
}
