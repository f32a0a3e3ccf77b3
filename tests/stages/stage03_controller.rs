//! `stages/stage03.rs` as a learner runs it: against a sandbox, printing stage 02's lines and
//! then each cluster's, prefixed `[namespace/name]`; stopping cleanly on SIGTERM. WORKSHOP.md step 03.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use postgres_operator::api::object_path;
use postgres_operator::client::Patch;
use sandbox::SandboxOptions;
use test_support::{create_cluster, sandbox_with_crd};

const DEADLINE: Duration = Duration::from_secs(15);

struct Stage03 {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Stage03 {
    fn start(server: &str, extra: &[&str]) -> Stage03 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_stage03"))
            .args(["--server", server])
            .args(extra)
            .env("KUBECONFIG", "/dev/null")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("stage03 starts");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        Stage03 {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Block (off the runtime) until a line equal to `wanted` arrives; panic with the transcript.
    fn expect(&mut self, wanted: &str) {
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(100)) {
                let found = line == wanted;
                self.seen.push(line);
                if found {
                    return;
                }
            }
        }
        panic!(
            "stage03 never printed {wanted:?}; it printed:\n{}",
            self.seen.join("\n")
        );
    }

    /// Send SIGTERM and block until the process exits: its status and how long that took.
    /// `when` names the moment in the failure message ("stage03 ignored SIGTERM{when}").
    fn terminate(&mut self, when: &str) -> (std::process::ExitStatus, Duration) {
        let asked = Instant::now();
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, asked.elapsed());
            }
            assert!(asked.elapsed() < DEADLINE, "stage03 ignored SIGTERM{when}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Stage03 {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

/// The workshop's step 03 transcript: create, resize, delete; stage 02's lines first, each
/// cluster line tagged; SIGTERM ends it with exit 0 within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage03_prints_the_workshop_lines_and_stops_on_sigterm() {
    let (_sandbox, client) = sandbox_with_crd(SandboxOptions::default()).await;
    let url = _sandbox.url();
    let mut stage = tokio::task::spawn_blocking(move || {
        let mut stage = Stage03::start(&url, &["--reconcile-interval", "0.5"]);
        stage.expect(
            "CustomResourceDefinition postgresclusters.workshop.example.com already up to date",
        );
        stage.expect("Finding existing clusters...");
        stage.expect("Controller initialised");
        stage
    })
    .await
    .unwrap();

    create_cluster(&client, "default", "example-postgresql-cluster", 3).await;
    let key = "[default/example-postgresql-cluster]";
    stage = tokio::task::spawn_blocking(move || {
        stage.expect("PostgresCluster event: ADDED default/example-postgresql-cluster {size: 3, version: 16, paused: false}");
        stage.expect(&format!("{key} creating cluster with Spec {{size: 3, version: 16, paused: false}}, Status <none>"));
        stage.expect(&format!("{key} PLACEHOLDER: Launch seed Postgres node!"));
        stage.expect(&format!("{key} PLACEHOLDER: Start cluster!"));
        stage.expect(&format!("{key} Running: [], pending: []"));
        stage.expect(&format!("{key} All Postgres pods are dead. Trying to recover from a previous backup"));
        stage.expect(&format!("{key} PLACEHOLDER: disaster recovery!"));
        stage
    })
    .await
    .unwrap();

    let path = object_path("default", "example-postgresql-cluster");
    let _: serde_json::Value = client
        .patch(
            &path,
            &Patch::Merge(serde_json::json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    stage = tokio::task::spawn_blocking(move || {
        stage.expect(&format!("{key} spec update: from {{size: 3, version: 16, paused: false}} to {{size: 5, version: 16, paused: false}}"));
        stage
    })
    .await
    .unwrap();

    let _: serde_json::Value = client.delete(&path).await.unwrap();
    let (status, took) = tokio::task::spawn_blocking(move || {
        stage.expect(&format!("{key} cluster is deleted by the user"));
        stage.expect(&format!("{key} cluster task ended"));
        stage.terminate("")
    })
    .await
    .unwrap();
    assert!(status.success(), "exit {status:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// A bad `--reconcile-interval` (not a number, zero or rounding to it, negative, too large for a
/// Duration) is a usage error (exit 2) that names the flag, never a panic.
#[test]
fn stage03_rejects_a_bad_reconcile_interval() {
    for bad in ["soon", "0", "-1", "1e30", "1e-12", "NaN"] {
        let output = Command::new(env!("CARGO_BIN_EXE_stage03"))
            .args([
                "--server",
                "http://127.0.0.1:9",
                "--reconcile-interval",
                bad,
            ])
            .env("KUBECONFIG", "/dev/null")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.contains("--reconcile-interval") && !stderr.contains("panicked"),
            "{bad}: {stderr}"
        );
    }
}

/// SIGTERM while stage03 still waits for its CRD to be Established (start-up) is a clean exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage03_stops_cleanly_during_start_up() {
    use sandbox::{Sandbox, SandboxOptions};
    let sandbox = Sandbox::start(
        SandboxOptions {
            established_delay: Duration::from_secs(120),
            ..SandboxOptions::default()
        },
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let url = sandbox.url();
    let (status, took) = tokio::task::spawn_blocking(move || {
        let mut stage = Stage03::start(&url, &[]);
        stage.expect("CustomResourceDefinition postgresclusters.workshop.example.com created");
        stage.terminate(" during start-up")
    })
    .await
    .unwrap();
    assert!(status.success(), "exit {status:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    sandbox.shutdown().await;
}

/// WORKSHOP.md step 03, "Try it yourself": the member pod made by hand from
/// `kube/try-it/member-pod.yaml`, with the shell lines the text gives, is counted by the tick
/// (it carries the labels and the cluster's uid), and the tick then says the resize it would do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hand_made_member_pod_of_try_it_yourself_is_counted() {
    let (sandbox, client) = sandbox_with_crd(SandboxOptions::default()).await;
    let url = sandbox.url();
    let stage = tokio::task::spawn_blocking(move || {
        let mut stage = Stage03::start(&url, &["--reconcile-interval", "0.5"]);
        stage.expect("Controller initialised");
        stage
    })
    .await
    .unwrap();
    create_cluster(&client, "default", "example-postgresql-cluster", 3).await;

    // The two lines WORKSHOP.md gives, with the sandbox's real address (where the learner's
    // exported KUBECONFIG names it) and a fresh kubectl cache.
    let workshop = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/WORKSHOP.md"))
        .expect("WORKSHOP.md");
    let script: Vec<&str> = workshop
        .lines()
        .skip_while(|line| !line.starts_with("### Try it yourself"))
        .map(str::trim)
        .filter(|line| line.starts_with("uid=$(kubectl") || line.starts_with("sed "))
        .collect();
    assert_eq!(
        script.len(),
        2,
        "the two shell lines in 'Try it yourself': {script:?}"
    );
    let cache = tempfile::tempdir().unwrap();
    let kubectl = format!(
        "kubectl --cache-dir {} --server {} ",
        cache.path().display(),
        sandbox.url()
    );
    let script = script.join("\n").replace("kubectl ", &kubectl);
    let output = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", "/dev/null")
        .output()
        .await
        .expect("sh runs");
    assert!(
        output.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let key = "[default/example-postgresql-cluster]";
    tokio::task::spawn_blocking(move || {
        let mut stage = stage;
        stage.expect(&format!(
            "{key} Running: [example-postgresql-cluster-member], pending: []"
        ));
        stage.expect(&format!(
            "{key} PLACEHOLDER: resize from 1 to 3 pods, one pod per tick!"
        ));
    })
    .await
    .unwrap();
}
