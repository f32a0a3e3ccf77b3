//! What the tests that deploy `kube/` into a sandbox share: a sandbox whose node runs the image
//! `postgres-operator:<tag>` from the stage binaries this checkout built, kubectl as a reader of
//! the README runs it ([`Shell`]), and what they read back: the operator's pods, the Lease's
//! holder, the example cluster's members.

use std::process::Stdio;
use std::time::Duration;

use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;

pub const NAMESPACE: &str = "postgres-operator";
pub const DEPLOYMENT: &str = "postgres-operator";
pub const LEASE: &str = "postgres-operator";
pub const CLUSTER: &str = "example-postgresql-cluster";
pub const OPERATOR_USER: &str = "system:serviceaccount:postgres-operator:postgres-operator";
/// Generous: the machine may be compiling other tests meanwhile.
pub const DEADLINE: Duration = Duration::from_secs(300);

/// A fresh sandbox running pods as processes, the operator's image from the binaries cargo
/// built for this test (test-support's default, `built_binaries`). Fails, saying what is
/// missing, without PostgreSQL or bubblewrap.
pub async fn start_sandbox() -> Sandbox {
    test_support::start_process_sandbox(SandboxOptions::default()).await
}

/// kubectl as the README's reader runs it: a kubeconfig whose current context is the sandbox,
/// and a fresh discovery cache.
pub struct Shell {
    dir: tempfile::TempDir,
}

impl Shell {
    pub fn new(server: &str) -> Shell {
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sandbox\n  cluster:\n    server: {server}\n\
             contexts:\n- name: sandbox\n  context:\n    cluster: sandbox\n    user: learner\n\
             users:\n- name: learner\n  user: {{}}\ncurrent-context: sandbox\n"
        );
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig).expect("kubeconfig written");
        std::fs::create_dir(dir.path().join("cache")).expect("cache dir");
        Shell { dir }
    }

    /// One command line through `sh -c`, from the repository root (the README's paths are
    /// relative to it).
    pub fn command(&self, line: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("sh");
        command
            .args(["-c", line])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("KUBECONFIG", self.dir.path().join("kubeconfig"))
            .env("KUBECACHEDIR", self.dir.path().join("cache"))
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Run `line`, which must succeed: its stdout.
    pub async fn ok(&self, line: &str) -> String {
        let output = tokio::time::timeout(DEADLINE, self.command(line).output())
            .await
            .unwrap_or_else(|_| panic!("`{line}` did not finish in {DEADLINE:?}"))
            .expect("sh runs");
        assert!(
            output.status.success(),
            "`{line}` failed ({:?}):\nstdout: {}\nstderr: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Run `line` (a `kubectl ... -o json`), which must succeed: its output parsed.
    pub async fn json(&self, line: &str) -> Value {
        serde_json::from_str(&self.ok(line).await).expect("kubectl prints JSON")
    }
}

/// The pods in the operator's namespace that `selector` picks, without terminating ones.
pub async fn live_pods(shell: &Shell, selector: &str) -> Vec<Value> {
    let list = shell
        .json(&format!(
            "kubectl -n {NAMESPACE} get pods -l {selector} -o json"
        ))
        .await;
    test_support::live_items(&list)
        .into_iter()
        .cloned()
        .collect()
}

/// The operator pods: name → (ready, restart count), without terminating ones.
pub async fn operator_pods(shell: &Shell) -> Vec<(String, bool, u64)> {
    live_pods(shell, "app.kubernetes.io/name=postgres-operator")
        .await
        .iter()
        .map(|pod| {
            let ready = test_support::pod_is_ready(pod);
            let restarts = pod["status"]["containerStatuses"][0]["restartCount"]
                .as_u64()
                .unwrap_or(0);
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            (name.to_string(), ready, restarts)
        })
        .collect()
}

/// The Lease's holder, as `<pod name>_<suffix>` (client-go's identity), and the pod part.
pub async fn lease_holder(shell: &Shell) -> Option<(String, String)> {
    let lease = shell
        .command(&format!(
            "kubectl -n {NAMESPACE} get lease {LEASE} -o jsonpath='{{.spec.holderIdentity}}'"
        ))
        .output()
        .await
        .ok()?;
    let holder = String::from_utf8_lossy(&lease.stdout).trim().to_string();
    let pod = holder.rsplit_once('_')?.0.to_string();
    (lease.status.success() && !holder.is_empty()).then_some((holder, pod))
}

/// The example cluster's members: (name, role, ready), without terminating ones.
pub async fn members(shell: &Shell) -> Vec<(String, String, bool)> {
    live_pods(shell, &format!("workshop.example.com/cluster={CLUSTER}"))
        .await
        .iter()
        .map(|pod| {
            let ready = test_support::pod_is_ready(pod);
            (
                pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                pod["metadata"]["labels"]["workshop.example.com/role"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                ready,
            )
        })
        .collect()
}
