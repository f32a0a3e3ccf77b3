//! `/metrics` of a stage-06 operator running real PostgreSQL on the sandbox's process runtime,
//! read by a strict Prometheus text parser: members wanted and ready, the primary, a replica's
//! replication lag and the last base backup's age are there; after the primary's pod is
//! deleted, the primary changes and the reconcile count has moved.
//!
//! WORKSHOP.md, "Inside step 04: watching the operator". Needs PostgreSQL, bubblewrap and kubectl. The size and
//! time of a scrape, and the API requests one costs, are printed:
//! `cargo test --test metrics postgres:: -- --nocapture`.

use super::support as metrics_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_support::{get, Scrape};
use postgres_operator::metrics::{serve, HealthBounds};
use postgres_operator::postgres::run_postgres_operator;
use sandbox::SandboxOptions;
use serde_json::Value;
use test_support::Kubectl;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(300);
const CLUSTER: [(&str, &str); 2] = [("namespace", "default"), ("cluster", "db")];

async fn status(kubectl: &Kubectl) -> Value {
    let out = kubectl.ok(&["get", "pgc", "db", "-o", "json"]).await;
    serde_json::from_str::<Value>(&out).expect("kubectl prints JSON")["status"].clone()
}

/// The scrape once `check` accepts it.
async fn scrape_until(address: SocketAddr, what: &str, check: impl Fn(&Scrape) -> bool) -> Scrape {
    test_support::eventually(DEADLINE, what, || async {
        let (code, text) = get(address, "/metrics").await;
        assert_eq!(code, 200, "{text}");
        let scrape = Scrape::parse(&text);
        check(&scrape).then_some(scrape)
    })
    .await
}

/// The replicas whose lag the scrape shows.
fn lagging_pods(scrape: &Scrape) -> Vec<String> {
    scrape
        .samples("postgres_cluster_replication_lag_bytes")
        .into_iter()
        .filter_map(|s| s.labels.get("pod").cloned())
        .collect()
}

/// The pod the scrape calls primary.
fn primary(scrape: &Scrape) -> Option<String> {
    scrape
        .samples("postgres_cluster_primary")
        .into_iter()
        .find(|s| s.value == 1.0)
        .and_then(|s| s.labels.get("pod").cloned())
}

/// Two members with backups: the scrape shows them ready, the primary, the replica's lag and
/// the backup's age; after the primary's pod is deleted it shows the promoted replica as
/// primary, two ready members again, and more reconcile rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_backup_and_a_failover() {
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let kubectl = Kubectl::new(&sandbox.url());
    let options = test_support::quick_postgres_options();
    let bounds = HealthBounds::for_operator(options.reconcile_interval, &options.watch);
    let server = serve(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        Arc::clone(&options.metrics),
        bounds,
        CancellationToken::new(),
    )
    .await
    .expect("the metrics server listens");
    let address = server.address;
    let (reporter, _story) = test_support::Story::record();
    tokio::spawn(run_postgres_operator(
        test_support::plain_client(&sandbox.url()),
        options,
        test_support::quick_backups(),
        reporter,
        CancellationToken::new(),
    ));

    let manifest = tempfile::NamedTempFile::new().expect("temp file");
    let cluster = serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": "db"}, "spec": {"size": 2, "version": "16", "backup": {}},
    });
    std::fs::write(manifest.path(), cluster.to_string()).expect("manifest written");
    let path = manifest.path().to_string_lossy().to_string();
    test_support::eventually(DEADLINE, "kubectl to create the cluster", || async {
        kubectl
            .run(&["create", "-f", &path])
            .await
            .success
            .then_some(())
    })
    .await;

    let first = scrape_until(
        address,
        "2 ready members, the primary, a replica's lag and the backup's age",
        |scrape| {
            scrape.value("postgres_cluster_members_ready", &CLUSTER) == Some(2.0)
                && primary(scrape).is_some()
                && !lagging_pods(scrape).is_empty()
                && scrape
                    .value("postgres_cluster_seconds_since_last_backup", &CLUSTER)
                    .is_some()
        },
    )
    .await;
    let old_primary = primary(&first).unwrap_or_default();
    assert_eq!(
        status(&kubectl).await["primary"].as_str(),
        Some(old_primary.as_str()),
        "the scrape's primary is the status's"
    );
    assert_eq!(
        first.value("postgres_cluster_members_wanted", &CLUSTER),
        Some(2.0)
    );
    assert_eq!(
        first.value("postgres_cluster_stats_up", &CLUSTER),
        Some(1.0)
    );
    assert_eq!(
        first.value("postgres_cluster_wal_archive_failures_total", &CLUSTER),
        Some(0.0)
    );
    assert!(!lagging_pods(&first).contains(&old_primary));
    let rounds_before = first
        .value("postgres_operator_reconciles_total", &[])
        .unwrap_or(0.0);
    assert!(rounds_before > 0.0);
    assert!(
        first
            .value("postgres_operator_reconcile_duration_seconds", &[])
            .unwrap_or(0.0)
            >= rounds_before,
        "every round is in the histogram"
    );
    assert_eq!(first.value("postgres_operator_leader", &[]), Some(1.0));

    // What one scrape costs: its size, its time, and the operator's pods/exec requests.
    let requests_before = sandbox.requests().len();
    let started = Instant::now();
    let (_, text) = get(address, "/metrics").await;
    let took = started.elapsed();
    let execs = sandbox.requests()[requests_before..]
        .iter()
        .filter(|r| r.subresource == "exec" && r.user_agent.starts_with("postgres-operator"))
        .count();
    println!(
        "MEASURE one scrape: {} bytes, {} lines, {:.0} ms, {execs} pods/exec request(s) for 1 cluster",
        text.len(),
        text.lines().count(),
        took.as_secs_f64() * 1000.0
    );

    for line in text.lines().filter(|l| l.starts_with("postgres_cluster_")) {
        println!("  {line}");
    }

    kubectl
        .ok(&["delete", "pod", &old_primary, "--wait=false"])
        .await;
    let after = scrape_until(
        address,
        "a new primary, 2 ready members and a replica's lag",
        |scrape| {
            primary(scrape).is_some_and(|p| p != old_primary)
                && scrape.value("postgres_cluster_members_ready", &CLUSTER) == Some(2.0)
                && !lagging_pods(scrape).is_empty()
        },
    )
    .await;
    let new_primary = primary(&after).unwrap_or_default();
    assert!(!lagging_pods(&after).contains(&new_primary));
    assert!(
        after
            .value("postgres_operator_reconciles_total", &[])
            .unwrap_or(0.0)
            > rounds_before
    );
    assert!(
        after
            .value(
                "postgres_operator_watch_events_total",
                &[("resource", "pods"), ("type", "DELETED")]
            )
            .unwrap_or(0.0)
            >= 1.0
    );
    assert_eq!(get(address, "/healthz").await.0, 200);
    assert_eq!(get(address, "/readyz").await.0, 200);
    println!("after the failover: {old_primary} → {new_primary}");
}
