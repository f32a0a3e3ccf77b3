//! `httpGet` probes, as the kubelet runs them against the pod's IP and a named port: any status
//! from 200 to 399 passes. A failing readiness probe takes Ready away (and gives it back once it
//! passes again); a failing liveness probe restarts the container. The operator's Deployment
//! (`kube/deployment.yaml`) is probed this way on `/healthz` and `/readyz`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs bubblewrap and python3 (the pod runs a small HTTP
//! server with this machine's python3). Run: `cargo test -p sandbox --test runtime http_probes::`.

use std::time::Duration;

use test_support::runtime::{create, pod_json, start};
use test_support::{eventually, pod_is_ready};

/// A pod whose server answers `/ready` (503 while `/scratch/unready` exists) and `/live` (500
/// while `/scratch/sick` exists) on its own IP, port `http` (8081), probed every second.
const PROBED_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  volumes: [{name: work, emptyDir: {}}]
  containers:
  - name: web
    image: busybox:1.36
    command:
    - /usr/bin/python3
    - -c
    - |
      import http.server, os
      class H(http.server.BaseHTTPRequestHandler):
          def do_GET(self):
              flags = {"/ready": ("/scratch/unready", 503), "/live": ("/scratch/sick", 500)}
              if self.path not in flags:
                  self.send_response(404)
              elif os.path.exists(flags[self.path][0]):
                  self.send_response(flags[self.path][1])
              else:
                  self.send_response(200)
              self.end_headers()
      http.server.HTTPServer((os.environ["POD_IP"], 8081), H).serve_forever()
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    ports: [{name: http, containerPort: 8081}]
    volumeMounts: [{name: work, mountPath: /scratch}]
    readinessProbe: {httpGet: {path: /ready, port: http}, periodSeconds: 1, failureThreshold: 1}
    livenessProbe: {httpGet: {path: /live, port: 8081}, periodSeconds: 1, failureThreshold: 2}
"#;

/// Ready follows the readiness probe's status code both ways; a liveness probe answered 500
/// restarts the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_probes_drive_ready_and_restarts() {
    let (_sandbox, kubectl, _) = start().await;
    create(&kubectl, PROBED_POD).await;
    let ready = |wanted: bool| {
        let kubectl = &kubectl;
        async move {
            eventually(
                Duration::from_secs(60),
                &format!("pod web Ready={wanted}"),
                || async {
                    let pod = pod_json(kubectl, "web").await?;
                    (pod_is_ready(&pod) == wanted).then_some(pod)
                },
            )
            .await
        }
    };
    ready(true).await;

    let exec = |script: &'static str| {
        let kubectl = &kubectl;
        async move {
            kubectl
                .ok(&["exec", "web", "--", "/bin/sh", "-c", script])
                .await;
        }
    };
    exec("touch /scratch/unready").await;
    ready(false).await;
    exec("rm /scratch/unready").await;
    ready(true).await;

    exec("touch /scratch/sick").await;
    eventually(Duration::from_secs(60), "a restart of web", || async {
        let pod = pod_json(&kubectl, "web").await?;
        let restarts = pod["status"]["containerStatuses"][0]["restartCount"].as_u64()?;
        (restarts >= 1).then_some(())
    })
    .await;
}
