//! The real kubectl, bound to one server: never a real cluster (`KUBECONFIG=/dev/null`, no
//! in-cluster variables) and a discovery cache of its own, so a port a test reuses is never
//! answered from an earlier server's cache.

use std::time::Duration;

use tokio::io::AsyncBufReadExt;

/// The kubectl binary (override with `KUBECTL=/path`).
pub fn kubectl_path() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into())
}

/// kubectl bound to one server, with its own `--cache-dir` (removed when this is dropped).
pub struct Kubectl {
    pub server: String,
    cache_dir: tempfile::TempDir,
    extra: Vec<String>,
}

/// What one kubectl run printed and how it ended.
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

    /// Over HTTPS: trust the CA in `ca_file` and present the bearer `token`.
    pub fn with_ca_and_token(self, ca_file: &std::path::Path, token: &str) -> Kubectl {
        let ca = ca_file.to_str().expect("a UTF-8 CA path");
        self.with_flags(&["--certificate-authority", ca, "--token", token])
    }

    /// The cache directory this kubectl uses.
    pub fn cache_dir(&self) -> &std::path::Path {
        self.cache_dir.path()
    }

    /// The whole command line of `kubectl ARGS`, for running it under another program (`script`
    /// gives it a terminal); the environment [`Kubectl::command`] sets must be set around it.
    pub fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut argv = vec![
            kubectl_path(),
            "--cache-dir".into(),
            self.cache_dir.path().to_string_lossy().into_owned(),
            "--server".into(),
            self.server.clone(),
        ];
        argv.extend(self.extra.iter().cloned());
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    }

    /// `kubectl ARGS` ready to spawn: stdin closed, killed when dropped.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let argv = self.argv(args);
        let mut command = tokio::process::Command::new(&argv[0]);
        command
            .env("KUBECONFIG", "/dev/null")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        command
    }

    /// Run kubectl to completion (30 s at most).
    pub async fn run(&self, args: &[&str]) -> KubectlOutput {
        self.try_run(args)
            .await
            .unwrap_or_else(|why| panic!("kubectl {args:?} {why}"))
    }

    /// [`Kubectl::run`], or why kubectl did not run or finish: for what a test prints while it
    /// fails, which must not panic a second time.
    pub async fn try_run(&self, args: &[&str]) -> Result<KubectlOutput, String> {
        let output = tokio::time::timeout(Duration::from_secs(30), self.command(args).output())
            .await
            .map_err(|_| "did not finish in 30 s".to_string())?
            .map_err(|error| format!("does not run: {error}"))?;
        Ok(KubectlOutput {
            success: output.status.success(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// What pod `namespace/name` says about itself, for the message of a check around it that
    /// failed: its phase, every container's status (state, last state, restarts), each
    /// container's log (the previous instance's too, once it restarted) and the pod's Events.
    /// Then the failure says why (a container that exited, a probe that failed), not only what
    /// the test saw. Never panics: whatever cannot be read is said so.
    pub async fn pod_report(&self, namespace: &str, name: &str) -> String {
        let mut report = format!("--- pod {namespace}/{name} ---\n");
        let pod = self
            .try_run(&["get", "pod", name, "-n", namespace, "-o", "json"])
            .await
            .ok()
            .filter(|out| out.success)
            .and_then(|out| serde_json::from_str::<serde_json::Value>(&out.stdout).ok());
        let Some(pod) = pod else {
            report.push_str("(the pod cannot be read: gone, or the server does not answer)\n");
            return report;
        };
        let status = &pod["status"];
        report.push_str(&format!("phase: {}\n", status["phase"]));
        for field in ["initContainerStatuses", "containerStatuses"] {
            for container in status[field].as_array().into_iter().flatten() {
                let pretty = serde_json::to_string_pretty(container).unwrap_or_default();
                report.push_str(&format!("{field}: {pretty}\n"));
                let Some(container_name) = container["name"].as_str() else {
                    continue;
                };
                let restarted = container["restartCount"].as_u64().unwrap_or(0) > 0;
                let instances: &[(&str, &[&str])] = if restarted {
                    &[("previous", &["--previous"]), ("current", &[])]
                } else {
                    &[("current", &[])]
                };
                for (instance, flags) in instances {
                    let mut args = vec!["logs", name, "-n", namespace, "-c", container_name];
                    args.extend_from_slice(flags);
                    args.extend(["--tail", "40"]);
                    let log = match self.try_run(&args).await {
                        Ok(out) if out.success => out.stdout,
                        Ok(out) => format!("(kubectl logs failed: {})", out.stderr.trim()),
                        Err(why) => format!("(kubectl logs {why})"),
                    };
                    report.push_str(&format!(
                        "log of {container_name} ({instance} instance, last 40 lines):\n{}\n",
                        log.trim_end()
                    ));
                }
            }
        }
        let selector = format!("involvedObject.name={name}");
        if let Some(out) = self
            .try_run(&[
                "get",
                "events",
                "-n",
                namespace,
                "--field-selector",
                &selector,
            ])
            .await
            .ok()
            .filter(|out| out.success)
        {
            report.push_str(&format!("events:\n{}\n", out.stdout.trim_end()));
        }
        report
    }

    /// Run and require success; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        self.run(args).await.stdout_of_success(args)
    }

    /// `kubectl ARGS` (add `-o json` yourself) parsed as JSON, or None if it fails: what a
    /// check inside `eventually` wants when the object may not exist yet.
    pub async fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let out = self.run(args).await;
        out.success
            .then(|| serde_json::from_str(&out.stdout).ok())
            .flatten()
    }

    /// `kubectl ARGS -o json`, required to succeed, parsed.
    pub async fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        let out = self.ok(&args).await;
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("kubectl {args:?}: not JSON ({e})"))
    }

    /// `kubectl create -f` of `manifest`, tried again at every poll until the server accepts it
    /// (`within` at most): its type may not be served yet, as when an operator registers its CRD
    /// as it starts.
    pub async fn create_when_served(&self, manifest: &str, within: Duration) {
        crate::eventually(within, "kubectl to create the object", || async {
            self.run_manifest("create", manifest)
                .await
                .success
                .then_some(())
        })
        .await;
    }

    /// `kubectl VERB -f FILE` (`create`, `apply`, ...) where FILE holds `manifest`; the whole
    /// output, failed or not.
    pub async fn run_manifest(&self, verb: &str, manifest: &str) -> KubectlOutput {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("manifest.yaml");
        std::fs::write(&file, manifest).expect("write manifest");
        self.run(&[verb, "-f", file.to_str().expect("utf-8 path")])
            .await
    }

    /// The same, required to succeed; returns stdout.
    pub async fn ok_manifest(&self, verb: &str, manifest: &str) -> String {
        self.run_manifest(verb, manifest)
            .await
            .stdout_of_success(&[verb, "-f", "(manifest)"])
    }

    /// `kubectl ARGS`, required to succeed and to print `expected`: stdout.
    pub async fn ok_saying(&self, args: &[&str], expected: &str) -> String {
        let out = self.ok(args).await;
        assert!(
            out.contains(expected),
            "kubectl {args:?} did not print {expected:?}:\n{out}"
        );
        out
    }

    /// `kubectl ARGS`, required to fail with `expected` in its stderr: stderr.
    pub async fn fails_saying(&self, args: &[&str], expected: &str) -> String {
        self.run(args).await.stderr_of_failure(args, expected)
    }

    /// `kubectl VERB -f FILE` where FILE holds `manifest`, required to fail with `expected` in its
    /// stderr: stderr.
    pub async fn fails_saying_manifest(
        &self,
        verb: &str,
        manifest: &str,
        expected: &str,
    ) -> String {
        self.run_manifest(verb, manifest)
            .await
            .stderr_of_failure(&[verb, "-f", "(manifest)"], expected)
    }

    /// `kubectl ARGS` left running (`get -w`), its stdout read line by line; killed when dropped.
    pub fn watch(&self, args: &[&str]) -> KubectlWatch {
        let mut child = self
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl starts");
        let stdout = child.stdout.take().expect("kubectl's stdout");
        KubectlWatch {
            _child: child,
            lines: tokio::io::BufReader::new(stdout).lines(),
        }
    }
}

/// A kubectl left running, such as `get -w`: the lines it prints, as they come.
pub struct KubectlWatch {
    _child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl KubectlWatch {
    /// The next line kubectl prints (10 s at most).
    pub async fn next_line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(10), self.lines.next_line())
            .await
            .expect("kubectl printed a line within 10 s")
            .expect("kubectl's output is readable")
            .expect("kubectl still running")
    }
}

impl KubectlOutput {
    /// stdout, after asserting that `kubectl ARGS` succeeded (the failure shows both streams).
    pub fn stdout_of_success(self, args: &[&str]) -> String {
        assert!(
            self.success,
            "kubectl {args:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            self.code, self.stdout, self.stderr
        );
        self.stdout
    }

    /// stderr, after asserting that `kubectl ARGS` failed and said `expected` there.
    pub fn stderr_of_failure(self, args: &[&str], expected: &str) -> String {
        assert!(!self.success, "kubectl {args:?} succeeded: {self:?}");
        assert!(
            self.stderr.contains(expected),
            "kubectl {args:?} did not say {expected:?}:\n{}",
            self.stderr
        );
        self.stderr
    }
}

/// True if `pod` (as JSON) has the condition Ready=True.
pub fn pod_is_ready(pod: &serde_json::Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The IP address a pod (as JSON) was given; panics if it has none yet.
pub fn pod_ip(pod: &serde_json::Value) -> String {
    let ip = pod["status"]["podIP"].as_str();
    ip.expect("a pod IP").to_string()
}

/// Line `index` of kubectl's table output (0 is the header) split into its words; empty when
/// the table has no such line.
pub fn table_row(table: &str, index: usize) -> Vec<&str> {
    table
        .lines()
        .nth(index)
        .unwrap_or_default()
        .split_whitespace()
        .collect()
}

/// The items of a list (`kubectl get ... -o json`) that are not being deleted: those without a
/// `deletionTimestamp`, as a terminating pod is no member any more.
pub fn live_items(list: &serde_json::Value) -> Vec<&serde_json::Value> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// The kubectl that gcloud's dispatcher (`/usr/bin/kubectl` on this machine) runs. The
/// dispatcher first GETs `/version` from a server, even for `config view`; this one never does.
pub const BUNDLED_KUBECTL: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";

/// kubectl for what it does without any server (`kustomize`, `patch --local`), run to
/// completion: stdout, after asserting success. On this machine `/usr/bin/kubectl` is a
/// dispatcher that first asks a server for `/version`; the bundled kubectl it dispatches to never
/// does, so that one runs when present. No kubeconfig, a fresh `--cache-dir`.
pub fn kubectl_offline(args: &[&str]) -> Vec<u8> {
    let kubectl = if std::path::Path::new(BUNDLED_KUBECTL).exists() {
        BUNDLED_KUBECTL
    } else {
        "kubectl"
    };
    let cache = tempfile::tempdir().expect("cache dir");
    let output = std::process::Command::new(kubectl)
        .args(args)
        .arg("--cache-dir")
        .arg(cache.path())
        .env("KUBECONFIG", "/dev/null")
        .output()
        .unwrap_or_else(|error| panic!("kubectl ({kubectl}) does not run: {error}"));
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}
