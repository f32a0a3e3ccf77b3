//! A replica that is Ready but streams from nothing is replaced, on real PostgreSQL: its
//! `primary_conninfo` pointed at an address where no server listens (as a replica left pointing
//! at a primary that is gone), it stays in recovery and keeps answering `pg_isready`, so only the
//! primary's `pg_stat_replication` tells. The operator deletes it after the not-streaming delay
//! (10 s in the tests) with a `ReplicaNotStreaming` Event, and a fresh clone streams.
//!
//! WORKSHOP.md, step 05 ("Every replica back"). Needs PostgreSQL and bubblewrap:
//! `cargo test --test postgres not_streaming:: -- --nocapture`.

use std::time::{Duration, Instant};

use postgres_operator::api::{collection_path, object_path, PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::Client;
use postgres_operator::controller::pods::{pods_path, CLUSTER_LABEL};
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::psql_argv;
use postgres_operator::postgres::PostgresOptions;
use serde_json::Value;

const CLUSTER: &str = "astray";
const DEADLINE: Duration = Duration::from_secs(180);
/// The standbys streaming from the primary, by `application_name` (their pod names).
const STREAMING_SQL: &str = "SELECT coalesce(string_agg(application_name, ',' ORDER BY 1), '') \
     FROM pg_stat_replication WHERE state = 'streaming'";

async fn psql(client: &Client, pod: &str, sql: &str) -> Result<String, String> {
    psql_in_pod(client, client.namespace(), pod, &psql_argv(sql))
        .await
        .map(|out| out.trim().to_string())
}

/// The live (not terminating) pods of the cluster: (name, Ready).
async fn live_pods(client: &Client) -> Vec<(String, bool)> {
    let path = pods_path(client.namespace(), &format!("{CLUSTER_LABEL}={CLUSTER}"));
    let list: Value = client.get(&path).await.unwrap_or(Value::Null);
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
        .filter_map(|pod| {
            let name = pod["metadata"]["name"].as_str()?.to_string();
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            Some((name, ready))
        })
        .collect()
}

/// The primary and its one replica, once both are Ready and the replica streams.
async fn streaming_pair(client: &Client) -> (String, String) {
    test_support::eventually(DEADLINE, "a primary and a streaming replica", || async {
        let cluster: Value = client
            .get(&object_path(client.namespace(), CLUSTER))
            .await
            .ok()?;
        let primary = cluster["status"]["primary"].as_str()?.to_string();
        let pods = live_pods(client).await;
        let replica = match pods.as_slice() {
            [(a, true), (b, true)] if *a == primary => b.clone(),
            [(a, true), (b, true)] if *b == primary => a.clone(),
            _ => return None,
        };
        let streaming = psql(client, &primary, STREAMING_SQL).await.ok()?;
        (streaming == replica).then_some((primary, replica))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ready_replica_that_streams_from_nothing_is_replaced() {
    // The primary is asked who streams after each change of members, and at steady state once
    // per `owned_recheck` (5 minutes by default): here every 2 s, so the test need not wait.
    let options = PostgresOptions {
        owned_recheck: Duration::from_secs(2),
        ..test_support::quick_postgres_options()
    };
    let operator = test_support::PostgresOperator::start(options).await;
    let client = operator.client.clone();
    let object = PostgresCluster::new(
        client.namespace(),
        CLUSTER,
        PostgresClusterSpec::new(2, "16"),
    );
    client
        .create::<_, PostgresCluster>(&collection_path(client.namespace()), &object)
        .await
        .expect("cluster created");
    let (primary, astray) = streaming_pair(&client).await;

    // 192.0.2.1 is TEST-NET-1 (RFC 5737): nothing answers there. Since PostgreSQL 13 a reload
    // with a changed primary_conninfo restarts the WAL receiver with it; the server stays a hot
    // standby, and so Ready.
    psql(
        &client,
        &astray,
        "ALTER SYSTEM SET primary_conninfo = 'host=192.0.2.1 port=5432 user=replicator connect_timeout=1'",
    )
    .await
    .expect("primary_conninfo changed on the replica");
    psql(&client, &astray, "SELECT pg_reload_conf()")
        .await
        .expect("reloaded");
    let broken = Instant::now();
    test_support::eventually(DEADLINE, "the replica Ready and not streaming", || async {
        let streaming = psql(&client, &primary, STREAMING_SQL).await.ok()?;
        let ready = live_pods(&client).await.contains(&(astray.clone(), true));
        (streaming.is_empty() && ready).then_some(())
    })
    .await;

    test_support::eventually(
        DEADLINE,
        "the replica that streams from nothing deleted",
        || async {
            let pods = live_pods(&client).await;
            (!pods.iter().any(|(name, _)| *name == astray)).then_some(())
        },
    )
    .await;
    let replaced_after = broken.elapsed();
    let (primary_after, replica) = streaming_pair(&client).await;
    assert_eq!(primary_after, primary, "the primary stays");
    assert_ne!(replica, astray, "a fresh clone in its place");
    let events: Value = client
        .get(&format!("/api/v1/namespaces/{}/events", client.namespace()))
        .await
        .expect("events listed");
    let event = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["reason"] == "ReplicaNotStreaming")
        .expect("a ReplicaNotStreaming Event");
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["involvedObject"]["name"], CLUSTER);
    assert!(
        event["message"]
            .as_str()
            .is_some_and(|m| m.contains(&astray)),
        "the Event names the replica: {event}"
    );
    // Not before the delay: a replica reconnecting after a failover is given that long.
    assert!(
        replaced_after >= Duration::from_secs(10),
        "replaced {replaced_after:?} after it stopped streaming, before the 10 s delay"
    );
    println!(
        "not streaming: {astray} replaced {:.1} s after its WAL receiver was pointed away; {replica} streams in its place",
        replaced_after.as_secs_f64()
    );
    operator.stop().await;
}
