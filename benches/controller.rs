//! Step 03's numbers: how much memory the controller needs per live cluster, and how long a
//! change takes to go from the API server to the cluster task. WORKSHOP.md, step 03 ("What it costs").
//!
//! ```text
//! cargo bench --bench controller
//! ```
//!
//! Memory: this process runs only the controller (pods from an in-memory fake, no HTTP), reads
//! its own VmRSS/VmHWM from /proc/self/status with 0 clusters, then with 1,000 live cluster tasks
//! (each one through setup and at least one reconcile tick). Targets: ≤ 10 MB and ≤ 30 MB.
//!
//! Latency: a sandbox API server in this process on 127.0.0.1, the real operator
//! ([`run_operator`]: client, list-then-watch over HTTP, controller, cluster task) against it. Each
//! round resizes one cluster with a PATCH and waits for its task's "spec update" line. Two figures:
//! from the moment the PATCH returns (the change is committed) to the line, and from the moment
//! the PATCH is sent (an upper bound that includes the write's own round trip). Target p99 ≤ 5 ms.

use std::time::Duration;

use postgres_operator::api::{PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::{Client, Patch};
use postgres_operator::config::Config;
use postgres_operator::controller::pods::{Pod, PodApi, PodApiError};
use postgres_operator::controller::{run_operator, Controller, ControllerOptions};
use postgres_operator::story::{LogLine, Reporter};
use postgres_operator::watch::Event;
use sandbox::{Sandbox, SandboxOptions};
use tokio::sync::mpsc;

const CLUSTERS: usize = 1_000;

/// Every pod list answers "no pods", at once.
#[derive(Clone)]
struct NoPods;

impl PodApi for NoPods {
    async fn list_pods(&self, _: &str, _: &str) -> Result<Vec<Pod>, PodApiError> {
        Ok(Vec::new())
    }
    async fn create_pod(&self, _: &str, _: &Pod) -> Result<(), PodApiError> {
        Ok(())
    }
    async fn delete_pod(&self, _: &str, _: &str) -> Result<(), PodApiError> {
        Ok(())
    }
}

fn memory_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|line| line.starts_with(field))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|kib| kib.parse().ok())
        .unwrap_or(0)
}

fn print_memory(label: &str) {
    println!(
        "{label:<34} VmRSS {:>6.1} MB   VmHWM {:>6.1} MB",
        memory_kib("VmRSS:") as f64 / 1024.0,
        memory_kib("VmHWM:") as f64 / 1024.0
    );
}

fn cluster(index: usize) -> PostgresCluster {
    let spec = PostgresClusterSpec::new(3, "16");
    let mut cluster = PostgresCluster::new("default", &format!("db-{index:04}"), spec);
    cluster.metadata.uid = format!("uid-{index}").into();
    cluster
}

async fn wait_for_lines(lines: &mut mpsc::UnboundedReceiver<LogLine>, needle: &str, count: usize) {
    let mut found = 0;
    while found < count {
        match tokio::time::timeout(Duration::from_secs(30), lines.recv()).await {
            Ok(Some(line)) if line.line.contains(needle) => found += 1,
            Ok(Some(_)) => {}
            _ => panic!("only {found} of {count} lines containing {needle:?}"),
        }
    }
}

async fn memory_with_live_clusters() {
    print_memory("runtime started, no controller");
    let (reporter, mut lines) = Reporter::channel();
    let options = ControllerOptions {
        reconcile_interval: Duration::from_millis(500),
        ..Default::default()
    };
    let (events, event_receiver) = mpsc::channel(64);
    let stop = tokio_util::sync::CancellationToken::new();
    let controller = Controller::new(NoPods, options, reporter);
    let running = tokio::spawn(controller.run(event_receiver, stop.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    print_memory("controller running, 0 clusters");

    for index in 0..CLUSTERS {
        let _ = events.send(Event::Added(cluster(index).into())).await;
    }
    wait_for_lines(&mut lines, "PLACEHOLDER: Start cluster!", CLUSTERS).await;
    // Every task through one reconcile round too (a pod list and its lines).
    wait_for_lines(&mut lines, "PLACEHOLDER: disaster recovery!", CLUSTERS).await;
    print_memory(&format!("controller running, {CLUSTERS} clusters"));

    stop.cancel();
    let summary = running.await;
    println!("stopped: {summary:?}");
}

const LATENCY_ROUNDS: usize = 1_000;

async fn latency_from_commit_to_task() {
    let sandbox = Sandbox::start(
        SandboxOptions::default(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("sandbox starts");
    let client = Client::new(Config::from_url(&sandbox.url()).expect("url")).expect("client");
    let (reporter, mut lines) = Reporter::channel();
    let options = ControllerOptions {
        // No ticks during the measurement: only the event path is timed.
        reconcile_interval: Duration::from_secs(3600),
        ..Default::default()
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let operator = tokio::spawn(run_operator(
        client.clone(),
        options,
        reporter,
        stop.clone(),
    ));
    wait_for_lines(&mut lines, "Starting at watchVersion", 1).await;

    let collection = postgres_operator::api::collection_path("default");
    let path = postgres_operator::api::object_path("default", "db-0000");
    let _: serde_json::Value = client
        .create(&collection, &cluster(0))
        .await
        .expect("cluster created");
    wait_for_lines(&mut lines, "PLACEHOLDER: Start cluster!", 1).await;

    let mut from_commit = Vec::with_capacity(LATENCY_ROUNDS);
    let mut from_send = Vec::with_capacity(LATENCY_ROUNDS);
    for round in 0..LATENCY_ROUNDS {
        let size = 4 + (round % 2) as i64;
        let resize = Patch::Merge(serde_json::json!({"spec": {"size": size}}));
        let sent = std::time::Instant::now();
        let _: serde_json::Value = client.patch(&path, &resize).await.expect("patch");
        let committed = std::time::Instant::now();
        let wanted = format!("to {{size: {size},");
        loop {
            let line = lines.recv().await.expect("operator running");
            if line.line.starts_with("spec update") && line.line.contains(&wanted) {
                break;
            }
        }
        let received = std::time::Instant::now();
        from_commit.push(received.saturating_duration_since(committed));
        from_send.push(received - sent);
    }
    report_latency("PATCH returned -> task logged it", &mut from_commit);
    report_latency("PATCH sent     -> task logged it", &mut from_send);

    stop.cancel();
    let _ = operator.await;
    sandbox.shutdown().await;
}

fn report_latency(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |fraction: f64| samples[((samples.len() - 1) as f64 * fraction).round() as usize];
    println!(
        "{label}: p50 {:>7.3} ms   p99 {:>7.3} ms   max {:>7.3} ms   ({} rounds)",
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
        samples.len()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(memory_with_live_clusters());
    runtime.block_on(latency_from_commit_to_task());
}
