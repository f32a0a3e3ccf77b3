//! The stage02 binary tells the workshop's story: list, then watch, one line per change made with
//! the real kubectl — and it stops cleanly (exit 0) on SIGTERM.
//!
//! WORKSHOP.md, step 02 (the transcript). Runs the built binary against the sandbox.

use std::time::Duration;

use postgres_operator::api::object_path;
use sandbox::InjectedFault;
use test_support::EXAMPLE_FIXTURE;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

const WITHIN: Duration = Duration::from_secs(20);

struct Stage02 {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl Stage02 {
    fn start(server: &str) -> Stage02 {
        let mut child = test_support::operator_command(env!("CARGO_BIN_EXE_stage02"), server)
            .spawn()
            .expect("stage02 starts");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        Stage02 {
            child,
            stdout,
            seen: Vec::new(),
        }
    }

    /// The next stdout line, or panic after WITHIN.
    async fn line(&mut self) -> String {
        let line = tokio::time::timeout(WITHIN, self.stdout.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!("no output line within {WITHIN:?}; so far: {:#?}", self.seen)
            })
            .expect("read stdout")
            .unwrap_or_else(|| panic!("stage02 exited early; output: {:#?}", self.seen));
        self.seen.push(line.clone());
        line
    }

    async fn expect_lines(&mut self, expected: &[String]) {
        for wanted in expected {
            assert_eq!(
                &self.line().await,
                wanted,
                "output so far: {:#?}",
                self.seen
            );
        }
    }

    /// SIGTERM, as the kubelet sends; then the exit status and any output not read yet.
    async fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().expect("running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .expect("stage02 exits within 10 s of SIGTERM")
            .expect("wait");
        let mut rest = Vec::new();
        while let Ok(Some(line)) = self.stdout.next_line().await {
            rest.push(line);
        }
        (exit, rest)
    }
}

fn event_line(kind: &str, size: i64) -> String {
    format!("PostgresCluster event: {kind} default/example-postgresql-cluster {{size: {size}, version: 16, paused: false}}")
}

/// Create → resize 3→5 → delete with kubectl prints ADDED, MODIFIED, DELETED after the list/watch
/// preamble; an ended watch prints a resume line; a delete during an outage with compaction prints
/// a relist line and the DELETED it found; a second run finds the CRD and the existing cluster and
/// watches from the list's resourceVersion (no replay). Both runs exit 0 on SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage02_prints_the_workshop_story_and_stops_on_sigterm() {
    let (sandbox, kubectl) = test_support::sandbox_and_kubectl().await;

    let mut stage = Stage02::start(&sandbox.url());
    assert_eq!(
        stage.line().await,
        "CustomResourceDefinition postgresclusters.workshop.example.com created"
    );
    assert_eq!(stage.line().await, "Finding existing clusters...");
    let version_line = stage.line().await;
    let version = version_line
        .strip_prefix("Watch version: ")
        .unwrap_or_else(|| panic!("{version_line}"))
        .to_string();
    assert!(
        !version.is_empty() && version != "0",
        "watch from the list's RV, never 0"
    );
    stage
        .expect_lines(&[
            "Controller initialised".into(),
            format!("Starting at watchVersion {version}"),
        ])
        .await;

    kubectl.ok(&["apply", "-f", EXAMPLE_FIXTURE]).await;
    stage.expect_lines(&[event_line("ADDED", 3)]).await;
    kubectl
        .ok(&[
            "patch",
            "pgc",
            "example-postgresql-cluster",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"size":5}}"#,
        ])
        .await;
    stage.expect_lines(&[event_line("MODIFIED", 5)]).await;
    kubectl
        .ok(&["delete", "pgc", "example-postgresql-cluster"])
        .await;
    stage.expect_lines(&[event_line("DELETED", 5)]).await;
    kubectl.ok(&["apply", "-f", EXAMPLE_FIXTURE]).await;
    stage.expect_lines(&[event_line("ADDED", 3)]).await;

    // The server ends the watch: stage02 says so and resumes from where it was.
    // Then an outage (two 500s) during which the cluster is deleted and etcd compacts:
    // the resumed watch gets 410 Expired, relists, and reports the deletion it missed.
    let faults = sandbox.faults();
    faults.fail_next(
        2,
        "watch=true",
        InjectedFault::Status {
            code: 500,
            reason: "InternalError".into(),
            retry_after_seconds: None,
        },
    );
    faults.end_all_watches_now();
    let client = test_support::plain_client(&sandbox.url());
    let _: serde_json::Value = client
        .delete(&object_path("default", "example-postgresql-cluster"))
        .await
        .expect("delete");
    faults.compact_history();
    let resumed = stage.line().await;
    assert!(
        resumed.starts_with("Watch resumed at watchVersion ")
            && resumed.ends_with(": the server ended the watch after 4 events"),
        "{resumed}"
    );
    let mut retries = 0;
    let relisted = loop {
        let line = stage.line().await;
        if line.starts_with("Watch failed, retrying in ") && line.contains("InternalError (500)") {
            retries += 1;
            continue;
        }
        break line;
    };
    assert_eq!(retries, 2, "{:#?}", stage.seen);
    assert!(
        relisted.starts_with("Relisted at watchVersion "),
        "{relisted}"
    );
    assert!(
        relisted.contains("(resourceVersion too old (410 Expired: too old resource version"),
        "{relisted}"
    );
    assert!(
        relisted.ends_with("0 added, 0 modified, 1 deleted while away"),
        "{relisted}"
    );
    stage.expect_lines(&[event_line("DELETED", 3)]).await;
    kubectl.ok(&["apply", "-f", EXAMPLE_FIXTURE]).await;
    stage.expect_lines(&[event_line("ADDED", 3)]).await;
    let transcript = stage.seen.join("\n");
    let (status, _) = stage.terminate().await;
    assert_eq!(status.code(), Some(0), "SIGTERM is a clean stop");
    println!("first run (cargo test -- --nocapture shows it):\n{transcript}");

    // Second run: the CRD is there, the cluster is listed (once), then the watch starts after it.
    let mut again = Stage02::start(&sandbox.url());
    again
        .expect_lines(&[
            "CustomResourceDefinition postgresclusters.workshop.example.com already up to date"
                .into(),
            "Finding existing clusters...".into(),
        ])
        .await;
    let version_line = again.line().await;
    let version = version_line
        .strip_prefix("Watch version: ")
        .unwrap_or_else(|| panic!("{version_line}"))
        .to_string();
    again
        .expect_lines(&[
            "Controller initialised".into(),
            event_line("ADDED", 3),
            format!("Starting at watchVersion {version}"),
        ])
        .await;
    let (status, rest) = again.terminate().await;
    assert_eq!(status.code(), Some(0));
    assert!(
        rest.iter()
            .all(|line| !line.starts_with("PostgresCluster event")),
        "no replay: {rest:?}"
    );
}

/// SIGTERM while the first list keeps failing (the watch is backing off) is still a clean stop:
/// exit 0, promptly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage02_exits_0_on_sigterm_while_the_list_is_failing() {
    let sandbox = test_support::start_sandbox().await;
    sandbox.faults().fail_next(
        1000,
        "namespaces/default/postgresclusters",
        InjectedFault::Status {
            code: 500,
            reason: "InternalError".into(),
            retry_after_seconds: None,
        },
    );
    let mut stage = Stage02::start(&sandbox.url());
    loop {
        let line = stage.line().await;
        if line.starts_with("Watch failed, retrying in ") && line.contains("InternalError (500)") {
            break;
        }
        assert!(
            !line.starts_with("Watch version"),
            "the list cannot succeed: {:#?}",
            stage.seen
        );
    }
    let asked = std::time::Instant::now();
    let (status, _) = stage.terminate().await;
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM during backoff is a clean stop"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "stopped in {:?}",
        asked.elapsed()
    );
}
