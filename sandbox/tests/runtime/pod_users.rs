//! Pods never act as a host user they were not given. When the sandbox runs as root, pods run
//! as host user 999 and see the host's files (mirrored read-only): a pod asking for
//! `runAsUser: 4321` used to become host uid 4321 and could read its 0600 files. Now such pods
//! are refused at admission (`pods "x" is forbidden: ...`), and the ids the project's own pods
//! ask for (999 for postgres, 65532 for the operator image) are what a pod sees inside while
//! on the host it stays user 999.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test runtime pod_users::`
//! (needs PostgreSQL and bubblewrap, as every `runtime_*` test).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::Duration;

use test_support::runtime::{create, pod_manifest, start};
use test_support::Kubectl;

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// `kubectl create -f` of a manifest given as text; the whole output, failed or not.
async fn try_create(kubectl: &Kubectl, manifest: &str) -> test_support::KubectlOutput {
    kubectl.run_manifest("create", manifest).await
}

fn pod(name: &str, pod_context: &str, container_context: &str, command: &str) -> String {
    let spec = format!(
        r#"  securityContext: {pod_context}
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", {command:?}]
    securityContext: {container_context}
"#
    );
    pod_manifest(name, &spec)
}

/// As root: ids other than 999 and 65532 (and 0, which never means root here) are refused,
/// whether asked for by the pod or a container, as runAsUser, runAsGroup or fsGroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_asking_for_other_host_users_are_refused() {
    let (_sandbox, kubectl, _runtime) = start().await;
    let asks = [
        (
            "{runAsUser: 4321}",
            "{}",
            "spec.securityContext.runAsUser=4321",
        ),
        (
            "{runAsGroup: 4321}",
            "{}",
            "spec.securityContext.runAsGroup=4321",
        ),
        ("{fsGroup: 4321}", "{}", "spec.securityContext.fsGroup=4321"),
        (
            "{runAsUser: 999}",
            "{runAsUser: 1000}",
            "spec.containers[0].securityContext.runAsUser=1000",
        ),
    ];
    for (index, (pod_context, container_context, named)) in asks.into_iter().enumerate() {
        let name = format!("asks-{index}");
        let out = try_create(
            &kubectl,
            &pod(&name, pod_context, container_context, "sleep 600"),
        )
        .await;
        if !running_as_root() {
            // As non-root, pods run as the sandbox's own user whatever they ask: as before.
            assert!(out.success, "{out:?}");
            continue;
        }
        assert!(!out.success, "{pod_context} {container_context} accepted");
        assert!(
            out.stderr.contains(&format!(
                "pods \"{name}\" is forbidden: {named} not allowed"
            )),
            "{}",
            out.stderr
        );
        println!("{}", out.stderr.trim());
    }
}

/// As root: a pod asking for 65532 sees itself as 65532 inside, but cannot read a 0600 file
/// that host uid 65532 owns, because on the host it is user 999.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_id_is_seen_inside_but_is_not_the_host_user() {
    let (_sandbox, kubectl, _runtime) = start().await;
    let dir = tempfile::Builder::new()
        .prefix("pod-users-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a directory pods see");
    std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).expect("chmod");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "host secret of 65532").expect("write");
    std::fs::set_permissions(&secret, PermissionsExt::from_mode(0o600)).expect("chmod");
    if running_as_root() {
        std::os::unix::fs::chown(&secret, Some(65532), Some(65532)).expect("chown");
    }
    let command = format!(
        "echo uid=$(id -u) gid=$(id -g); cat {} || echo cannot-read; exec sleep 600",
        secret.display()
    );
    create(
        &kubectl,
        &pod(
            "nonroot",
            "{runAsUser: 65532, runAsGroup: 65532}",
            "{}",
            &command,
        ),
    )
    .await;
    let logs = test_support::eventually(Duration::from_secs(60), "the pod's output", || async {
        let logs = kubectl.run(&["logs", "nonroot"]).await.stdout;
        (logs.contains("cannot-read") || logs.contains("host secret")).then_some(logs)
    })
    .await;
    println!("{logs}");
    assert!(!logs.contains("host secret"), "the pod read it: {logs}");
    if running_as_root() {
        assert!(logs.contains("uid=65532 gid=65532"), "{logs}");
        let host_users: Vec<u32> = test_support::processes_matching("exec sleep 600")
            .into_iter()
            .filter_map(|pid| std::fs::metadata(format!("/proc/{pid}")).ok())
            .map(|m| m.uid())
            .collect();
        println!("host uids of the pod's processes: {host_users:?}");
        assert!(
            !host_users.is_empty() && host_users.iter().all(|uid| *uid == 999),
            "{host_users:?}"
        );
    }
}
