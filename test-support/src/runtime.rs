//! Pods as real processes, for the tests that need them (`sandbox/tests/runtime/` and others): a
//! sandbox with the process runtime and short back-offs, manifests through kubectl, waiting for
//! Ready, psql from the host, and the process table.

use std::time::Duration;

use sandbox::{ProcessRuntime, Runtime, Sandbox, SandboxOptions};
use serde_json::Value;

use crate::{eventually, pod_is_ready, process_runtime, processes_matching, Kubectl};

/// A pod `pg` running `postgres:16` with trust authentication, Ready once `pg_isready` answers.
pub const TRUSTING_POSTGRES: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: pg}
spec:
  containers:
  - name: postgres
    image: postgres:16
    env: [{name: POSTGRES_HOST_AUTH_METHOD, value: trust}]
    readinessProbe:
      exec: {command: [pg_isready, -h, 127.0.0.1, -U, postgres]}
      periodSeconds: 1
"#;

pub async fn start() -> (Sandbox, Kubectl, ProcessRuntime) {
    let runtime = process_runtime();
    let sandbox = Sandbox::start_with_runtime(
        SandboxOptions::default(),
        Runtime::Processes(runtime.clone()),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("sandbox starts");
    let kubectl = Kubectl::new(&sandbox.url());
    (sandbox, kubectl, runtime)
}

/// A process sandbox ([`start`]) with `manifest` created in it.
pub async fn start_with(manifest: &str) -> (Sandbox, Kubectl, ProcessRuntime) {
    let (sandbox, kubectl, runtime) = start().await;
    create(&kubectl, manifest).await;
    (sandbox, kubectl, runtime)
}

/// A pod manifest (YAML) named `name` whose spec is `spec`: its lines, indented by two spaces.
pub fn pod_manifest(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

/// `kubectl create -f` of a manifest given as text.
pub async fn create(kubectl: &Kubectl, manifest: &str) {
    kubectl.ok_manifest("create", manifest).await;
}

pub async fn pod_json(kubectl: &Kubectl, name: &str) -> Option<Value> {
    kubectl.get_json(&["get", "pod", name, "-o", "json"]).await
}

/// Wait (90 s at most) until pod `name` is Ready: the pod then. On timeout the failure prints
/// what the pod says about itself ([`Kubectl::pod_report`]).
pub async fn wait_ready(kubectl: &Kubectl, name: &str) -> Value {
    let deadline = Duration::from_secs(90);
    let ready = crate::within(deadline, || async {
        let pod = pod_json(kubectl, name).await?;
        pod_is_ready(&pod).then_some(pod)
    })
    .await;
    match ready {
        Some(pod) => pod,
        None => panic!(
            "timed out after {deadline:?} waiting for pod {name} Ready\n{}",
            kubectl.pod_report("default", name).await
        ),
    }
}

/// A one-container `postgres:15` pod named `name` with trust authentication and a tcpSocket
/// readiness probe, created and waited for until Ready; checks its postmaster runs (on the pod
/// IP, as the process table shows) and returns its IP.
pub async fn running_trusting_postgres(kubectl: &Kubectl, name: &str) -> String {
    let spec = r#"  containers:
  - name: postgres
    image: postgres:15
    env: [{name: POSTGRES_HOST_AUTH_METHOD, value: trust}]
    readinessProbe: {tcpSocket: {port: 5432}, periodSeconds: 1}
"#;
    create(kubectl, &pod_manifest(name, spec)).await;
    let pod = wait_ready(kubectl, name).await;
    let ip = crate::pod_ip(&pod);
    assert!(
        !processes_matching(&format!("listen_addresses={ip}")).is_empty(),
        "the postmaster of {name} runs"
    );
    ip
}

/// `kubectl exec POD -- psql -U postgres -Atc SQL`: the arguments for `Kubectl::ok`, `run` or
/// `command`, to ask a pod's own server as its superuser.
pub fn psql_in<'a>(pod: &'a str, sql: &'a str) -> [&'a str; 8] {
    ["exec", pod, "--", "psql", "-U", "postgres", "-Atc", sql]
}

/// `psql -Atc SQL` against a pod IP from the host, as the superuser.
pub async fn psql(runtime: &ProcessRuntime, host: &str, sql: &str) -> Result<String, String> {
    let output = tokio::process::Command::new(runtime.tools.postgres_bin.join("psql"))
        .args(["-h", host, "-U", "postgres", "-d", "postgres", "-Atc", sql])
        .env("PGPASSWORD", "superuser-secret")
        .env("PGCONNECT_TIMEOUT", "5")
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// Run `write` on `writer`, which must succeed, then wait (30 s at most) until `read` on `reader`
/// answers with `expected`: a row that travels, by replication or through a Service.
pub async fn write_then_read(
    runtime: &ProcessRuntime,
    (writer, write): (&str, &str),
    (reader, read): (&str, &str),
    expected: &str,
) {
    psql(runtime, writer, write)
        .await
        .unwrap_or_else(|error| panic!("{write:?} on {writer}: {error}"));
    let rows = eventually(
        Duration::from_secs(30),
        &format!("{expected:?} read on {reader}"),
        || async {
            psql(runtime, reader, read)
                .await
                .ok()
                .filter(|rows| rows.contains(expected))
        },
    )
    .await;
    assert_eq!(rows, expected, "{read:?} on {reader}");
}
