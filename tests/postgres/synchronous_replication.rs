//! Synchronous replication on real PostgreSQL: `spec.replication.synchronous: {number: 1}`
//! (`dataDurability: required`), a writer committing numbered rows through the primary, and the
//! primary's node lost (its processes killed, no clean shutdown, no last WAL shipped). After the
//! failover every row whose commit was acknowledged is on the new primary.
//!
//! WORKSHOP.md, step 05 ("Synchronous replication"). Needs PostgreSQL and bubblewrap; the
//! outage is printed: `cargo test --test postgres synchronous_replication:: -- --nocapture`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres_operator::api::{collection_path, object_path, PostgresCluster};
use postgres_operator::client::Client;
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::psql_argv;
use serde_json::Value;

const CLUSTER: &str = "sync";
const DEADLINE: Duration = Duration::from_secs(240);

async fn psql(client: &Client, pod: &str, sql: &str) -> Result<String, String> {
    psql_in_pod(client, client.namespace(), pod, &psql_argv(sql))
        .await
        .map(|out| out.trim().to_string())
}

async fn cluster(client: &Client) -> Value {
    client
        .get(&object_path(client.namespace(), CLUSTER))
        .await
        .unwrap_or(Value::Null)
}

/// The primary, once every member is ready and the standbys are set on it.
async fn synchronous_and_ready(client: &Client) -> (String, Vec<String>) {
    test_support::eventually(
        DEADLINE,
        "3 ready members, 2 synchronous standbys",
        || async {
            let status = cluster(client).await["status"].clone();
            let primary = status["primary"].as_str()?.to_string();
            let sync = &status["synchronous"];
            let standbys: Vec<String> = sync["standbys"]
                .as_array()?
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect();
            let ready = status["readyInstances"] == 3
                && sync["primary"] == primary.as_str()
                && standbys.len() == 2
                && !standbys.contains(&primary);
            ready.then_some((primary, standbys))
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_commit_is_lost_when_the_primary_node_is_lost() {
    let operator =
        test_support::PostgresOperator::start(test_support::quick_postgres_options()).await;
    let (sandbox, client) = (&operator.sandbox, operator.client.clone());
    let story = &operator.story;
    let spec = test_support::synchronous_spec(3, 1);
    let object = PostgresCluster::new(client.namespace(), CLUSTER, spec);
    client
        .create::<_, PostgresCluster>(&collection_path(client.namespace()), &object)
        .await
        .expect("cluster created");

    let (primary, standbys) = synchronous_and_ready(&client).await;
    // Both standbys stream, and the primary counts either one's flush for a commit.
    let states = test_support::eventually(DEADLINE, "both standbys streaming", || async {
        let sql = "SELECT string_agg(application_name || '=' || sync_state, ',' ORDER BY application_name) FROM pg_stat_replication";
        let out = psql(&client, &primary, sql).await.ok()?;
        (out.matches("=quorum").count() == 2).then_some(out)
    })
    .await;
    assert_eq!(
        states,
        format!("{}=quorum,{}=quorum", standbys[0], standbys[1])
    );
    let names = psql(&client, &primary, "SHOW synchronous_standby_names")
        .await
        .expect("SHOW");
    assert_eq!(
        names,
        format!("ANY 1 (\"{}\", \"{}\")", standbys[0], standbys[1])
    );

    // A writer: one row per commit, counted once psql returned success.
    psql(
        &client,
        &primary,
        "CREATE TABLE ledger (n bigint PRIMARY KEY)",
    )
    .await
    .expect("table created");
    let acknowledged = Arc::new(AtomicI64::new(0));
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let (client, primary) = (client.clone(), primary.clone());
        let (acknowledged, writing) = (acknowledged.clone(), writing.clone());
        tokio::spawn(async move {
            let mut n = 1i64;
            while writing.load(Ordering::SeqCst) {
                let sql = format!("INSERT INTO ledger VALUES ({n})");
                if psql(&client, &primary, &sql).await.is_err() {
                    break; // the primary is gone
                }
                acknowledged.store(n, Ordering::SeqCst);
                n += 1;
            }
        })
    };
    test_support::eventually(DEADLINE, "20 commits acknowledged", || async {
        (acknowledged.load(Ordering::SeqCst) >= 20).then_some(())
    })
    .await;

    // The primary's node is lost mid-write: its processes die, the pod stays (unready).
    let lost_at = Instant::now();
    assert!(sandbox
        .faults()
        .lose_node_for_pod(client.namespace(), &primary));
    writing.store(false, Ordering::SeqCst);
    writer.await.expect("writer");
    let last = acknowledged.load(Ordering::SeqCst);

    let new_primary =
        test_support::eventually(DEADLINE, "a new primary that takes writes", || async {
            let status = cluster(&client).await["status"].clone();
            let new = status["primary"].as_str()?.to_string();
            if new == primary {
                return None;
            }
            psql(&client, &new, "SELECT 1").await.ok()?;
            Some(new)
        })
        .await;
    let outage = lost_at.elapsed();
    assert!(
        standbys.contains(&new_primary),
        "{new_primary} was a synchronous standby"
    );
    let kept = psql(
        &client,
        &new_primary,
        "SELECT count(*), coalesce(max(n), 0) FROM ledger",
    )
    .await
    .expect("count on the new primary");
    println!(
        "synchronous (ANY 1, required): {last} commits acknowledged, on the new primary {new_primary}: {kept} (count|max); lost node to a writable primary: {:.1} s",
        outage.as_secs_f64()
    );
    let max: i64 = kept
        .split('|')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .expect("count|max");
    assert!(
        max >= last,
        "acknowledged commits lost: {last} acknowledged, the new primary has up to {max}"
    );
    assert!(story.said("Synchronous standbys on"));
    // Set on the replica before its promotion: its first commit as primary already waits.
    assert!(
        story.said(&format!(
            "Synchronous standbys on {new_primary}, before it is promoted"
        )),
        "the promoted replica's standbys were not set before its promotion"
    );

    // The new primary's standbys are set anew: the old primary is not among them.
    let (after, standbys) = synchronous_and_ready(&client).await;
    assert_eq!(after, new_primary);

    // A planned switchover to one of them, under writes: the primary stops cleanly and the
    // named standby takes over with every acknowledged row.
    let target = standbys[0].clone();
    let (acknowledged, writing) = (
        Arc::new(AtomicI64::new(last)),
        Arc::new(AtomicBool::new(true)),
    );
    let writer = {
        let (client, primary) = (client.clone(), new_primary.clone());
        let (acknowledged, writing) = (acknowledged.clone(), writing.clone());
        tokio::spawn(async move {
            let mut n = last + 1;
            while writing.load(Ordering::SeqCst) {
                let sql = format!("INSERT INTO ledger VALUES ({n}) ON CONFLICT DO NOTHING");
                if psql(&client, &primary, &sql).await.is_err() {
                    break;
                }
                acknowledged.store(n, Ordering::SeqCst);
                n += 1;
            }
        })
    };
    test_support::eventually(DEADLINE, "10 more commits", || async {
        (acknowledged.load(Ordering::SeqCst) >= last + 10).then_some(())
    })
    .await;
    let annotate = serde_json::json!({"metadata": {"annotations": {"workshop.example.com/switchover-to": target}}});
    let asked = Instant::now();
    client
        .patch::<Value>(
            &object_path(client.namespace(), CLUSTER),
            &postgres_operator::client::Patch::Merge(annotate),
        )
        .await
        .expect("annotated");
    writer.await.expect("writer");
    let last = acknowledged.load(Ordering::SeqCst);
    test_support::eventually(DEADLINE, "the named standby takes writes", || async {
        let status = cluster(&client).await["status"].clone();
        (status["primary"] == target.as_str() && status["switchover"] == target.as_str())
            .then_some(())?;
        psql(&client, &target, "SELECT 1").await.ok()
    })
    .await;
    let switched = asked.elapsed();
    let kept = psql(&client, &target, "SELECT coalesce(max(n), 0) FROM ledger")
        .await
        .expect("max on the switched-over primary");
    println!(
        "switchover to {target}: {last} commits acknowledged, max on it {kept}; annotation to a writable primary: {:.1} s",
        switched.as_secs_f64()
    );
    assert!(
        kept.parse::<i64>().unwrap_or(0) >= last,
        "rows lost in the switchover"
    );
    assert!(story.said("Switching over to"));

    operator.stop().await;
}
