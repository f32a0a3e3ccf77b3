//! The operator's own image in the sandbox: a pod of `postgres-operator:<tag>` (the Dockerfile's
//! image) runs the stage binaries built from this checkout, in-cluster style: it finds the API
//! server through `KUBERNETES_SERVICE_HOST`/`PORT`, `$(VAR)`s in its args are expanded from the
//! downward API, `kill -9` of its process makes the kubelet restart it, and deleting the pod
//! stops it with SIGTERM.
//!
//! WORKSHOP.md, "Set-up: the sandbox"; issue 14. This file lives in the operator's tests (not the
//! sandbox's) because cargo builds the stage binaries for it: `CARGO_BIN_EXE_stage02`'s directory
//! is what `SandboxOptions::operator_binaries` points at. Needs PostgreSQL, bubblewrap and
//! kubectl (`.ci/install-test-deps`). Run: `cargo test --test kube operator_image::`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::{eventually, Kubectl, EXAMPLE_FIXTURE};
use tokio::io::{AsyncBufReadExt, BufReader};

const WITHIN: Duration = Duration::from_secs(90);

/// The directory cargo built this package's binaries into (stage01 ... stage06 are all there).
fn stage_binaries() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_stage02"))
        .parent()
        .expect("the binaries' directory")
        .to_path_buf()
}

async fn start(operator_binaries: Option<PathBuf>) -> (Sandbox, Kubectl) {
    let sandbox = test_support::start_process_sandbox(SandboxOptions {
        operator_binaries,
        ..SandboxOptions::default()
    })
    .await;
    let kubectl = Kubectl::new(&sandbox.url());
    (sandbox, kubectl)
}

async fn pod_json(kubectl: &Kubectl, namespace: &str, name: &str) -> Option<Value> {
    kubectl
        .get_json(&["-n", namespace, "get", "pod", name, "-o", "json"])
        .await
}

/// `kubectl logs` once it contains `needle` (extra flags such as `--previous` before the name).
async fn logs_containing(kubectl: &Kubectl, args: &[&str], needle: &str) -> String {
    eventually(
        WITHIN,
        &format!("kubectl logs {args:?} showing {needle:?}"),
        || async {
            let out = kubectl.run(&[&["logs"], args].concat()).await;
            (out.success && out.stdout.contains(needle)).then_some(out.stdout)
        },
    )
    .await
}

/// PIDs of processes whose argv[0] is `program` and whose command line contains `needle`,
/// from the process table (the jailed process as the host sees it; bwrap's own argv[0] differs).
fn processes(program: &str, needle: &str) -> Vec<u32> {
    test_support::processes()
        .into_iter()
        .filter(|process| {
            process.argv.first().map(String::as_str) == Some(program)
                && process.argv.iter().any(|a| a.contains(needle))
        })
        .map(|process| process.pid)
        .collect()
}

const STAGE02_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: operator, namespace: x}
spec:
  # A clean exit on SIGTERM ends it with code 0; SIGKILL at the end of the grace period, 137.
  terminationGracePeriodSeconds: 600
  securityContext: {runAsNonRoot: true, runAsUser: 65532}
  containers:
  - name: operator
    image: ghcr.io/example/postgres-operator:dev
    command: ["/stage02"]
    # Until the pod gets a service-account token, stage02 talks plain HTTP to the address every
    # pod is told; the namespace comes from the downward API.
    args: ["--server", "http://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)", "--namespace=$(NAMESPACE)"]
    env:
    - name: NAMESPACE
      valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
    - {name: RUST_LOG, value: warn}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL]}
"#;

/// A `postgres-operator` pod runs /stage02 from this checkout: `kubectl logs` shows its story
/// (it reached the API server through the in-cluster variables, in the namespace the downward
/// API gave it); `kill -9` of its process is a crash the kubelet restarts (exit code 137,
/// restartCount 1, the previous instance's logs kept); deleting the pod sends SIGTERM, and
/// stage02 exits cleanly (code 0) within the grace period, without the SIGKILL that ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_image_runs_a_stage_binary_restarts_after_kill_9_and_stops_on_sigterm() {
    let (sandbox, kubectl) = start(Some(stage_binaries())).await;
    kubectl.ok(&["create", "namespace", "x"]).await;
    kubectl.ok_manifest("create", STAGE02_POD).await;
    let logs = logs_containing(&kubectl, &["-n", "x", "operator"], "Controller initialised").await;
    assert!(
        logs.starts_with("CustomResourceDefinition postgresclusters.workshop.example.com created\nFinding existing clusters...\n"),
        "{logs}"
    );
    kubectl
        .ok(&["-n", "x", "apply", "-f", EXAMPLE_FIXTURE])
        .await;
    logs_containing(
        &kubectl,
        &["-n", "x", "operator"],
        "PostgresCluster event: ADDED x/example-postgresql-cluster {size: 3, version: 16, paused: false}",
    )
    .await;

    // The container's PID 1 as the host sees it: argv[0] /stage02, told this sandbox's address.
    let server = format!("http://{}", sandbox.addr());
    let pids = processes("/stage02", &server);
    assert_eq!(pids.len(), 1, "one stage02 process for {server}: {pids:?}");
    let killed = std::process::Command::new("kill")
        .args(["-9", &pids[0].to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let restarted = eventually(WITHIN, "the operator container restarted", || async {
        let pod = pod_json(&kubectl, "x", "operator").await?;
        let status = pod["status"]["containerStatuses"][0].clone();
        (status["restartCount"] == 1 && status["state"]["running"].is_object()).then_some(status)
    })
    .await;
    assert_eq!(
        restarted["lastState"]["terminated"]["exitCode"], 137,
        "{restarted}"
    );
    logs_containing(
        &kubectl,
        &["-n", "x", "operator"],
        "CustomResourceDefinition postgresclusters.workshop.example.com already up to date",
    )
    .await;
    let previous = kubectl
        .ok(&["-n", "x", "logs", "operator", "--previous"])
        .await;
    assert!(
        previous.contains("PostgresCluster event: ADDED x/example-postgresql-cluster"),
        "{previous}"
    );
    let new_pids = eventually(WITHIN, "the new stage02 process", || async {
        let pids = processes("/stage02", &server);
        (pids.len() == 1).then_some(pids)
    })
    .await;
    assert_ne!(new_pids, pids, "a new process, not the killed one");

    // Watch the container's exit code while the pod is deleted: SIGTERM, and stage02 exits 0.
    let mut watch = kubectl
        .command(&[
            "-n",
            "x",
            "get",
            "pod",
            "operator",
            "--watch",
            "-o",
            "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl get --watch");
    let mut lines = BufReader::new(watch.stdout.take().expect("piped stdout")).lines();
    // The pod stops within milliseconds of its deletion: a watch not open yet would find it gone.
    // (No client here watched pods before: any pod watch in the request log is this one.)
    test_support::until_watch_opened(&sandbox, "pods").await;
    kubectl
        .ok(&["-n", "x", "delete", "pod", "operator", "--wait=false"])
        .await;
    let exit_code = tokio::time::timeout(WITHIN, async {
        while let Ok(Some(line)) = lines.next_line().await {
            if !line.trim().is_empty() {
                return line;
            }
        }
        panic!("the watch ended before the container terminated");
    })
    .await
    .expect("the operator container terminated after SIGTERM, within its grace period");
    assert_eq!(exit_code.trim(), "0", "stage02 stops cleanly on SIGTERM");
    let _ = watch.kill().await;
    eventually(WITHIN, "the pod gone", || async {
        pod_json(&kubectl, "x", "operator")
            .await
            .is_none()
            .then_some(())
    })
    .await;
}

/// Every pod is told where the API server is (`KUBERNETES_SERVICE_HOST`/`PORT`: the sandbox's own
/// address) and gets its own name as `HOSTNAME`; the `kubernetes` Service in `default` has the
/// Service range's first address, port 443, and Endpoints at the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_pod_is_told_where_the_api_server_is() {
    let (sandbox, kubectl) = start(None).await;
    kubectl
        .ok_manifest(
            "create",
            r#"apiVersion: v1
kind: Pod
metadata: {name: whereami, namespace: default}
spec:
  restartPolicy: Never
  containers:
  - name: sh
    image: busybox:1.36
    command: [sh, -c, 'echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT $HOSTNAME']
"#,
        )
        .await;
    let addr = sandbox.addr();
    let expected = format!("{}:{} whereami\n", addr.ip(), addr.port());
    let logs = logs_containing(&kubectl, &["whereami"], "whereami").await;
    assert_eq!(logs, expected);

    let service: Value = serde_json::from_str(
        &kubectl
            .ok(&[
                "-n",
                "default",
                "get",
                "service",
                "kubernetes",
                "-o",
                "json",
            ])
            .await,
    )
    .expect("Service JSON");
    let cluster_ip = service["spec"]["clusterIP"].as_str().unwrap_or_default();
    assert!(
        cluster_ip.starts_with("127.") && cluster_ip.ends_with(".192.1"),
        "the first address of 127.B.192.0/18: {service}"
    );
    assert_eq!(service["spec"]["ports"][0]["port"], 443, "{service}");
    let endpoints: Value = serde_json::from_str(
        &kubectl
            .ok(&[
                "-n",
                "default",
                "get",
                "endpoints",
                "kubernetes",
                "-o",
                "json",
            ])
            .await,
    )
    .expect("Endpoints JSON");
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["ip"],
        addr.ip().to_string(),
        "{endpoints}"
    );
    assert_eq!(
        endpoints["subsets"][0]["ports"][0]["port"],
        addr.port(),
        "{endpoints}"
    );
}

/// Without the stage binaries the operator image cannot be "pulled": the pod waits in
/// ErrImagePull / ImagePullBackOff, and the Failed event says to build them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stage_binaries_the_operator_image_fails_to_pull_and_says_how_to_build_them() {
    let empty = tempfile::tempdir().expect("tempdir");
    let (_sandbox, kubectl) = start(Some(empty.path().to_path_buf())).await;
    kubectl
        .ok_manifest(
            "create",
            r#"apiVersion: v1
kind: Pod
metadata: {name: operator, namespace: default}
spec:
  containers:
  - {name: operator, image: "postgres-operator:latest"}
"#,
        )
        .await;
    eventually(WITHIN, "the pod in ImagePullBackOff", || async {
        let pod = pod_json(&kubectl, "default", "operator").await?;
        (pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff")
            .then_some(())
    })
    .await;
    let events = kubectl
        .ok(&["-n", "default", "get", "events", "-o", "json"])
        .await;
    let events: Value = serde_json::from_str(&events).expect("events JSON");
    let failed = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.starts_with("Failed to pull image \"postgres-operator:latest\""))
        .unwrap_or_else(|| panic!("a Failed event: {events}"))
        .to_string();
    assert!(failed.contains("cargo build --bins"), "{failed}");
    assert!(
        failed.contains(&empty.path().display().to_string()),
        "{failed}"
    );
}
