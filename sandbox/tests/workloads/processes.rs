//! A Deployment under the process runtime: its pods run as real processes, and
//! `kubectl rollout restart` replaces them one by one, old processes stopping gracefully.
//!
//! Run: `cargo test -p sandbox --test workloads processes::` (needs bubblewrap and PostgreSQL
//! installed, as every process-runtime test: `.ci/install-test-deps`).

use std::time::Duration;

use serde_json::Value;
use test_support::eventually;
use test_support::http_client::Http;
use test_support::runtime;

const PODS: &str = "/api/v1/namespaces/default/pods";

const SLEEPERS: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: sleepers
spec:
  replicas: 2
  selector:
    matchLabels:
      app: sleepers
  template:
    metadata:
      labels:
        app: sleepers
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: sleep
        image: busybox:1.36
        command: [sleep, infinity]
";

/// (name, uid) of every pod, and which of them are terminating.
async fn pods(http: &Http) -> Vec<(String, bool)> {
    http.get(PODS).await.json()["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p: &Value| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                !p["metadata"]["deletionTimestamp"].is_null(),
            )
        })
        .collect()
}

/// Two `sleep infinity` pods run as processes; a rollout restart makes a second ReplicaSet
/// whose pods run while the first ones terminate, and rollout status returns once the new
/// ones are available, as on a cluster (terminating pods do not count).
#[tokio::test]
async fn rollout_restart_replaces_running_pods() {
    let (sandbox, kubectl, _runtime) = runtime::start().await;
    let http = Http::new(&sandbox.url());
    runtime::create(&kubectl, SLEEPERS).await;
    kubectl
        .ok(&["rollout", "status", "deploy/sleepers", "--timeout=60s"])
        .await;
    let first: Vec<String> = pods(&http).await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(first.len(), 2);
    let running = test_support::processes_matching("sleep infinity").len();
    assert!(running >= 2, "two sleep processes run, found {running}");

    kubectl.ok(&["rollout", "restart", "deploy/sleepers"]).await;
    kubectl
        .ok(&["rollout", "status", "deploy/sleepers", "--timeout=60s"])
        .await;
    let after = pods(&http).await;
    let live: Vec<&String> = after.iter().filter(|(_, t)| !t).map(|(n, _)| n).collect();
    assert_eq!(live.len(), 2, "{after:?}");
    assert!(
        live.iter().all(|n| !first.contains(n)),
        "new pods: {after:?}"
    );
    for name in &live {
        let pod = runtime::wait_ready(&kubectl, name).await;
        assert_eq!(pod["status"]["phase"], "Running");
    }
    let replica_sets = kubectl.ok(&["get", "rs", "-o", "name"]).await;
    assert_eq!(replica_sets.lines().count(), 2, "{replica_sets}");
    eventually(Duration::from_secs(30), "the old pods gone", || {
        let http = http.clone();
        let first = first.clone();
        async move {
            let now = pods(&http).await;
            (!now.iter().any(|(n, _)| first.contains(n))).then_some(())
        }
    })
    .await;
}
