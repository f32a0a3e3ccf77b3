//! A primary whose postmaster is killed while no operator runs is restarted in place by the
//! kubelet, and comes back in recovery (the manifests' start script): never writable beside a
//! member the operator may have promoted meanwhile. The next operator asks it, finds that no one
//! took over, and promotes it where it is; its replica follows it onto the new timeline. A
//! crashed backend takes the same road (`restart_after_crash=off`).
//!
//! Needs PostgreSQL and bubblewrap:
//! `cargo test --test postgres crashed_primary:: -- --nocapture`.

use std::time::Duration;

use postgres_operator::api::{collection_path, object_path, PostgresCluster};
use postgres_operator::client::Client;
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::{psql_argv, POSTGRES_CONTAINER};
use serde_json::Value;

use super::psql;

const DEADLINE: Duration = Duration::from_secs(240);

/// The cluster's object once every member is ready: its primary and the other members.
async fn ready(client: &Client, name: &str, size: i64) -> (String, Vec<String>) {
    let what = format!("{name}: {size} members ready");
    test_support::eventually(DEADLINE, &what, || async {
        let cluster: Value = client
            .get(&object_path(client.namespace(), name))
            .await
            .ok()?;
        if cluster["status"]["readyInstances"] != size {
            return None;
        }
        let primary = cluster["status"]["primary"].as_str()?.to_string();
        let pods: Value = client
            .get(&format!(
                "/api/v1/namespaces/{}/pods?labelSelector=workshop.example.com/cluster={name}",
                client.namespace()
            ))
            .await
            .ok()?;
        let others = pods["items"]
            .as_array()?
            .iter()
            .filter_map(|pod| pod["metadata"]["name"].as_str())
            .filter(|pod| *pod != primary)
            .map(String::from)
            .collect();
        Some((primary, others))
    })
    .await
}

/// `sql`'s answer in `pod`, once it is `wanted`.
async fn until_answers(client: &Client, pod: &str, sql: &str, wanted: &str) {
    let what = format!("{pod} answering {wanted:?} to {sql}");
    test_support::eventually(DEADLINE, &what, || async {
        (psql(client, pod, sql).await.as_deref() == Some(wanted)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_primary_comes_back_in_recovery_and_only_the_operator_promotes_it() {
    let mut operator =
        test_support::PostgresOperator::start(test_support::quick_postgres_options()).await;
    let client = operator.client.clone();
    let namespace = client.namespace().to_string();
    for (name, size) in [("solo", 1), ("pair", 2)] {
        let object = PostgresCluster::new(&namespace, name, test_support::cluster_spec(size));
        client
            .create::<_, PostgresCluster>(&collection_path(&namespace), &object)
            .await
            .expect("cluster created");
    }
    let (solo, _) = ready(&client, "solo", 1).await;
    let (pair, replicas) = ready(&client, "pair", 2).await;
    let replica = replicas.first().expect("pair has a replica").clone();
    for primary in [&solo, &pair] {
        let written = psql(&client, primary, "CREATE TABLE t AS SELECT 42 AS answer").await;
        assert!(written.is_some(), "a row written in {primary}");
    }
    until_answers(&client, &replica, "SELECT answer FROM t", "42").await;

    // No operator: nothing can fail over, nothing can promote. Both postmasters killed.
    operator.pause().await;
    let faults = operator.sandbox.faults();
    for primary in [&solo, &pair] {
        assert!(faults.crash_container(&namespace, primary, POSTGRES_CONTAINER));
    }
    // Restarted in place by the kubelet, each is a standby now: read-only, its data there.
    for primary in [&solo, &pair] {
        until_answers(&client, primary, "SELECT pg_is_in_recovery()", "t").await;
        let refused = psql_in_pod(
            &client,
            &namespace,
            primary,
            &psql_argv("INSERT INTO t VALUES (1)"),
        )
        .await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("read-only transaction")),
            "{primary}: {refused:?}"
        );
        until_answers(&client, primary, "SELECT answer FROM t", "42").await;
        // Ready again (a hot standby accepts connections): what the next operator finds. One
        // that found it unready, its container exited, would fail the pair over instead.
        let path = format!("/api/v1/namespaces/{namespace}/pods/{primary}");
        test_support::eventually(DEADLINE, "the restarted primary Ready", || async {
            let pod: Value = client.get(&path).await.ok()?;
            test_support::pod_is_ready(&pod).then_some(())
        })
        .await;
    }

    // The next operator: each primary is still the one labelled primary, no replica was
    // promoted, so each is promoted where it is.
    operator.resume(test_support::quick_postgres_options());
    for primary in [&solo, &pair] {
        until_answers(&client, primary, "SELECT pg_is_in_recovery()", "f").await;
        assert!(
            psql(&client, primary, "INSERT INTO t VALUES (7)")
                .await
                .is_some(),
            "{primary} takes writes again"
        );
    }
    assert!(
        operator
            .story
            .said(&format!("Primary {solo} was restarted in place")),
        "{:?}",
        operator.story.lines()
    );
    // The replica follows its primary onto the timeline the promotion began.
    let followed = test_support::within(Duration::from_secs(60), || async {
        (psql(&client, &replica, "SELECT count(*) FROM t")
            .await
            .as_deref()
            == Some("2"))
        .then_some(())
    })
    .await;
    if followed.is_none() {
        let receiver = "SELECT status, received_tli, latest_end_lsn, pg_last_wal_replay_lsn(), \
            sender_host, (SELECT timeline_id FROM pg_control_checkpoint()) FROM pg_stat_wal_receiver";
        let upstream = "SELECT pg_current_wal_lsn(), timeline_id FROM pg_control_checkpoint()";
        panic!(
            "{replica} did not follow {pair}: its receiver {:?}, {pair} at {:?}",
            psql(&client, &replica, receiver).await,
            psql(&client, &pair, upstream).await,
        );
    }
    let (still, _) = ready(&client, "pair", 2).await;
    assert_eq!(still, pair, "the same primary, promoted in place");

    // One backend killed (`kill -KILL $PPID` from the shell a COPY TO PROGRAM starts is its
    // backend): with restart_after_crash=off the postmaster exits instead of recovering in
    // place as a writable primary, and the container comes back through the same script.
    let said = operator.story.count();
    let killed = psql(
        &client,
        &solo,
        "COPY (SELECT 1) TO PROGRAM 'kill -KILL $PPID'",
    )
    .await;
    assert!(killed.is_none(), "the backend answered: {killed:?}");
    test_support::eventually(DEADLINE, "solo promoted in place again", || async {
        operator.story.first_after(said, |line| {
            line.contains(&format!("Primary {solo} was restarted"))
        })
    })
    .await;
    until_answers(&client, &solo, "SELECT count(*) FROM t", "2").await;
    let path = format!("/api/v1/namespaces/{namespace}/pods/{solo}");
    let pod: Value = client.get(&path).await.expect("solo's pod");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 2);

    operator.stop().await;
}
