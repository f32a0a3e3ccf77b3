//! Shared helpers of the operator's tests that drive a sandbox with real kubectl: start a
//! sandbox, and run kubectl against it with a fresh cache directory (never a real cluster:
//! KUBECONFIG=/dev/null). The sandbox's own tests have a fuller set in `sandbox/tests/common/`
//! (an HTTP client for raw requests); the operator's tests talk through the operator's client.
//!
//! ```text
//! let sandbox = common::start_sandbox_with(SandboxOptions::default()).await;
//! let out = common::Kubectl::new(&sandbox.url()).ok(&["get", "pgc"]).await;
//! ```
#![allow(dead_code)]

use std::time::Duration;

use sandbox::{ProcessRuntime, Sandbox, SandboxOptions};

/// The workshop's example cluster: example-postgresql-cluster, size 3, version "16".
pub const EXAMPLE_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/kube/example-postgres-cluster.yaml"
);

pub async fn start_sandbox_with(options: SandboxOptions) -> Sandbox {
    Sandbox::start(options, tokio_util::sync::CancellationToken::new())
        .await
        .expect("sandbox starts")
}

// ---------------------------------------------------------------------------------------------
// kubectl
// ---------------------------------------------------------------------------------------------

/// The kubectl binary (override with `KUBECTL=/path`).
pub fn kubectl_path() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into())
}

/// kubectl bound to one server, with its own discovery cache (a reused port must never be
/// answered from an earlier server's cache).
pub struct Kubectl {
    pub server: String,
    cache_dir: tempfile::TempDir,
    extra: Vec<String>,
}

#[derive(Debug)]
pub struct KubectlOutput {
    pub success: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    pub fn new(server: &str) -> Kubectl {
        Kubectl {
            server: server.to_string(),
            cache_dir: tempfile::tempdir().expect("cache dir"),
            extra: Vec::new(),
        }
    }

    /// Extra global flags for every call (`--token`, `--certificate-authority`, ...).
    pub fn with_flags(mut self, flags: &[&str]) -> Kubectl {
        self.extra.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(kubectl_path());
        command
            .env("KUBECONFIG", "/dev/null")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .arg("--cache-dir")
            .arg(self.cache_dir.path())
            .arg("--server")
            .arg(&self.server)
            .args(&self.extra)
            .args(args)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Run kubectl to completion (30 s at most).
    pub async fn run(&self, args: &[&str]) -> KubectlOutput {
        let output = tokio::time::timeout(Duration::from_secs(30), self.command(args).output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in 30 s"))
            .expect("kubectl runs");
        KubectlOutput {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Run and require success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(
            output.success,
            "kubectl {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            output.code, output.stdout, output.stderr
        );
        output.stdout
    }
}

/// The sandbox's process runtime (pods as real PostgreSQL processes) with the short back-offs
/// tests want, or a failure that says what is missing: a test that needs real Postgres never
/// passes without it.
pub fn process_runtime() -> ProcessRuntime {
    let mut runtime = ProcessRuntime::detect(None).unwrap_or_else(|error| {
        panic!(
            "this test runs pods as real PostgreSQL processes, which this machine cannot: {error}. \
             Install PostgreSQL and bubblewrap (.ci/install-test-deps)"
        )
    });
    runtime.restart_backoff = Duration::from_millis(500);
    runtime.max_restart_backoff = Duration::from_secs(2);
    runtime.retry_period = Duration::from_millis(200);
    runtime.sync_period = Duration::from_millis(100);
    runtime
}

/// Poll `check` every 200 ms until it returns `Some`, or fail after `deadline` naming `what`.
pub async fn eventually<T, F, Fut>(deadline: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let end = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
