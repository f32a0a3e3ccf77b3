//! The `sandbox` program checks at start that pods can reach its `--data-dir`. Run as root, it
//! runs pods as another user (999), and bwrap, started as that user, must walk to every
//! directory it mounts: a data dir below a 0700 directory (what `mktemp -d` makes) used to
//! crash-loop every pod with "bwrap: Can't find source path …/tmp: Permission denied" while
//! the sandbox said nothing. Now it refuses to start, naming the directory and the fix; and
//! the directories it creates itself on the way are made passable whatever the umask.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test runtime data_dir::`
//! (needs PostgreSQL and bubblewrap, as every `runtime_*` test).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_sandbox");

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The program, started in the background; its first line names its URL.
async fn start_program(command: &mut Command) -> (tokio::process::Child, String) {
    test_support::spawn_sandbox_binary(command.stderr(Stdio::piped()), Duration::from_secs(20))
        .await
}

/// As root, a data dir below a 0700 directory is refused at once, with or without
/// `--runtime processes` (never a silent fall-back to simulated pods): exit 1, and the
/// message names the blocked directory and `chmod o+x`.
#[tokio::test]
async fn a_data_dir_pods_cannot_reach_is_refused_naming_the_fix() {
    let private = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(private.path(), PermissionsExt::from_mode(0o700)).expect("chmod");
    let data_dir = private.path().join("data");
    if !running_as_root() {
        // Pods run as the sandbox's own user then, who can reach its own directory.
        let (mut child, url) = start_program(
            Command::new(BINARY)
                .args(["--listen", "127.0.0.1:0", "--insecure-http", "--data-dir"])
                .arg(&data_dir),
        )
        .await;
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        child.kill().await.expect("stopped");
        return;
    }
    for runtime in [&["--runtime", "processes"][..], &[][..]] {
        let started = Instant::now();
        let output = tokio::time::timeout(
            Duration::from_secs(20),
            Command::new(BINARY)
                .args(["--listen", "127.0.0.1:0", "--insecure-http", "--data-dir"])
                .arg(&data_dir)
                .args(runtime)
                .output(),
        )
        .await
        .expect("exits within 20 s")
        .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        println!(
            "{runtime:?}: exit {:?} after {:?}: {stderr}",
            output.status.code(),
            started.elapsed()
        );
        assert_eq!(output.status.code(), Some(1), "{runtime:?}: {stderr}");
        let blocked = private.path().display().to_string();
        assert!(
            stderr.contains(&format!("may not enter {blocked} (mode 700)"))
                && stderr.contains(&format!("chmod o+x {blocked}"))
                && stderr.contains(&data_dir.display().to_string()),
            "{runtime:?}: {stderr}"
        );
        assert!(
            output.stdout.is_empty(),
            "{runtime:?} started anyway: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}

/// Directories the sandbox creates on the way to its data dir are its own: under `umask 077`
/// they are made passable (o+x), and a pod started there runs and logs.
#[tokio::test]
async fn directories_the_sandbox_makes_are_passable_and_pods_run() {
    let parent = tempfile::tempdir().expect("a temporary directory");
    // The user's own fix for the directory the sandbox did not make.
    std::fs::set_permissions(parent.path(), PermissionsExt::from_mode(0o711)).expect("chmod");
    let data_dir = parent.path().join("made").join("by-sandbox").join("data");
    let (mut child, url) = start_program(
        Command::new("sh")
            .args(["-c", "umask 077; exec \"$0\" \"$@\"", BINARY])
            .args(test_support::PROCESS_SANDBOX_FLAGS)
            .arg("--data-dir")
            .arg(&data_dir),
    )
    .await;
    for dir in [
        parent.path().join("made"),
        parent.path().join("made/by-sandbox"),
    ] {
        let mode = std::fs::metadata(&dir).expect("created").mode();
        assert_eq!(mode & 0o111, 0o111, "{} has mode {mode:o}", dir.display());
    }
    let kubectl = test_support::Kubectl::new(&url);
    test_support::runtime::create(
        &kubectl,
        r#"apiVersion: v1
kind: Pod
metadata: {name: hello}
spec:
  containers:
  - name: hello
    image: busybox
    command: ["sh", "-c", "echo hello from the pod; exec sleep 600"]
"#,
    )
    .await;
    test_support::eventually(Duration::from_secs(60), "the pod's log line", || async {
        let logs = kubectl.run(&["logs", "hello"]).await;
        logs.stdout.contains("hello from the pod").then_some(())
    })
    .await;
    let pod = test_support::runtime::pod_json(&kubectl, "hello")
        .await
        .expect("the pod");
    assert_eq!(
        pod["status"]["containerStatuses"][0]["restartCount"], 0,
        "{pod}"
    );
    child.kill().await.expect("stopped");
}
