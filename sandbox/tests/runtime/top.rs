//! `kubectl top pod` and `kubectl top node` against real PostgreSQL pods: the metrics.k8s.io API
//! reports what the pod's processes use, and the figures follow the work they do.
//!
//! WORKSHOP.md, "Set-up". Run: `cargo test -p sandbox --test runtime top::`.

use std::process::Stdio;
use std::time::Duration;

use test_support::runtime::{create, psql_in, start, wait_ready, TRUSTING_POSTGRES};
use test_support::{eventually, Kubectl};

/// `kubectl top pod -A`'s row for `default/pg`: (millicores, MiB), or None if not listed.
async fn pod_figures(kubectl: &Kubectl) -> Option<(u64, u64)> {
    let out = kubectl.run(&["top", "pod", "-A"]).await;
    let row = out
        .stdout
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|row| row.first() == Some(&"default") && row.get(1) == Some(&"pg"))?;
    Some((
        row.get(2)?.strip_suffix('m')?.parse().ok()?,
        row.get(3)?.strip_suffix("Mi")?.parse().ok()?,
    ))
}

/// `kubectl top node`'s millicores for the sandbox's node.
async fn node_millicores(kubectl: &Kubectl) -> Option<u64> {
    let out = kubectl.run(&["top", "node"]).await;
    let row: Vec<&str> = out.stdout.lines().nth(1)?.split_whitespace().collect();
    row.get(1)?.strip_suffix('m')?.parse().ok()
}

/// A query that keeps one backend of the pod busy: its CPU shows in `top pod` and `top node`
/// (about a core), and falls back once the query is cancelled. Memory is the postmaster's and
/// its backends', counted once. A pod that is not there is metrics-server's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_follows_the_work_a_pod_does() {
    let (_sandbox, kubectl, _) = start().await;
    create(&kubectl, TRUSTING_POSTGRES).await;
    wait_ready(&kubectl, "pg").await;

    let header = kubectl.ok(&["top", "pod", "-A"]).await;
    assert_eq!(
        test_support::table_row(&header, 0),
        ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{header}"
    );
    let (_, memory) = eventually(Duration::from_secs(30), "pg in kubectl top", || {
        pod_figures(&kubectl)
    })
    .await;
    assert!(memory >= 1, "postgres uses at least a MiB: {memory}");
    let node = kubectl.ok(&["top", "node"]).await;
    assert_eq!(
        test_support::table_row(&node, 0),
        ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        "{node}"
    );
    assert_eq!(
        test_support::table_row(&node, 1)[0],
        "sandbox-node",
        "{node}"
    );

    let mut busy = kubectl
        .command(&psql_in(
            "pg",
            "select count(*) from generate_series(1, 2000000000)",
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl exec psql");
    let (working, _) = eventually(
        Duration::from_secs(30),
        "a busy pod in kubectl top",
        || async { pod_figures(&kubectl).await.filter(|(cpu, _)| *cpu >= 300) },
    )
    .await;
    let node_working = eventually(
        Duration::from_secs(30),
        "a busy node in kubectl top",
        || async { node_millicores(&kubectl).await.filter(|cpu| *cpu >= 300) },
    )
    .await;

    kubectl
        .ok(&psql_in(
            "pg",
            "select pg_cancel_backend(pid) from pg_stat_activity where query like 'select count(*) from generate_series%'",
        ))
        .await;
    let _ = busy.wait().await;
    let (idle, _) = eventually(
        Duration::from_secs(30),
        "an idle pod in kubectl top",
        || async { pod_figures(&kubectl).await.filter(|(cpu, _)| *cpu < 100) },
    )
    .await;
    assert!(
        working > idle,
        "{working}m busy, {idle}m idle, node {node_working}m"
    );

    let gone = kubectl.run(&["top", "pod", "gone"]).await;
    assert!(!gone.success, "{gone:?}");
    assert_eq!(
        gone.stderr.trim(),
        "Error from server (NotFound): podmetrics.metrics.k8s.io \"default/gone\" not found"
    );
    let raw = kubectl
        .run(&[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/gone",
        ])
        .await;
    assert!(raw.stderr.contains("NotFound"), "{raw:?}");
}

/// On the process runtime too, a container it only simulates (an image with no command: no
/// process runs) reports zero, as a simulated kubelet's pods do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_container_reports_zero() {
    let (_sandbox, kubectl, _) = start().await;
    kubectl.ok(&["run", "web", "--image=nginx:1.27"]).await;
    let row = eventually(Duration::from_secs(30), "web in kubectl top", || async {
        let top = kubectl.run(&["top", "pod", "web", "--no-headers"]).await;
        let row: Vec<String> = top.stdout.split_whitespace().map(String::from).collect();
        (row.first().map(String::as_str) == Some("web")).then_some(row)
    })
    .await;
    assert_eq!(row, ["web", "0m", "0Mi"]);
}
