//! `kubectl exec` into a real PostgreSQL pod over a WebSocket: output, exit codes, stdin and a
//! terminal; `kubectl port-forward` refused with what to do instead; a simulated pod refused.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap (see `postgres.rs`);
//! the terminal test needs `script` from util-linux. Run: `cargo test -p sandbox --test runtime exec::`.

use std::process::Stdio;

use test_support::http_client::Http;
use test_support::runtime::{create, psql_in, start, wait_ready, TRUSTING_POSTGRES};
use test_support::{start_sandbox, Kubectl};
use tokio::io::AsyncWriteExt;

/// One shell word, for the command line `script` runs.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `kubectl exec` runs psql inside the pod (its socket in the pod's /run/postgresql), carries
/// stdout, stderr and stdin, hands the command's exit code to kubectl, works with `-it` under a
/// terminal, and `kubectl port-forward` says to use the pod's own address instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_exec_runs_commands_in_a_running_pod() {
    let (_sandbox, kubectl, _) = start().await;
    create(&kubectl, TRUSTING_POSTGRES).await;
    let ip = test_support::pod_ip(&wait_ready(&kubectl, "pg").await);

    let selected = kubectl.ok(&psql_in("pg", "select 1")).await;
    assert_eq!(selected, "1\n");

    let failed = kubectl
        .run(&["exec", "pg", "--", "sh", "-c", "exit 3"])
        .await;
    assert_eq!(failed.code, Some(3), "{failed:?}");

    let stderr = kubectl
        .run(&[
            "exec",
            "pg",
            "--",
            "sh",
            "-c",
            "echo to-stderr >&2; echo \"$HOSTNAME\"",
        ])
        .await;
    assert!(stderr.success, "{stderr:?}");
    assert_eq!(stderr.stdout, "pg\n");
    assert_eq!(stderr.stderr, "to-stderr\n");

    let mut cat = kubectl
        .command(&["exec", "-i", "pg", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl exec -i");
    let mut stdin = cat.stdin.take().expect("stdin");
    stdin.write_all(b"hi\n").await.expect("write stdin");
    drop(stdin);
    let output = cat.wait_with_output().await.expect("kubectl exits");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "hi\n");

    // `-it` needs kubectl's own stdin to be a terminal: `script` gives it one (of size 0×0 here,
    // which would make psql page its output: no pager).
    let line = kubectl
        .argv(&[
            "exec",
            "-it",
            "pg",
            "--",
            "psql",
            "-U",
            "postgres",
            "-P",
            "pager=off",
            "-c",
            "select 2 as two",
        ])
        .iter()
        .map(|w| quote(w))
        .collect::<Vec<_>>()
        .join(" ");
    let terminal = tokio::process::Command::new("script")
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env("KUBECONFIG", "/dev/null")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("script runs kubectl");
    let shown = String::from_utf8_lossy(&terminal.stdout);
    assert!(terminal.status.success(), "{terminal:?}");
    assert!(
        shown.contains(" two ") && shown.contains("(1 row)"),
        "{shown}"
    );

    let forwarded = kubectl.run(&["port-forward", "pod/pg", "25432:5432"]).await;
    assert!(!forwarded.success);
    assert!(
        forwarded.stderr.contains("port-forward is not supported")
            && forwarded.stderr.contains(&format!("at {ip} directly")),
        "{forwarded:?}"
    );
}

/// With the simulated kubelet nothing runs, and `kubectl exec` says so and how to change it;
/// discovery lists `pods/exec` and `pods/portforward` as kube-apiserver does.
#[tokio::test]
async fn exec_into_a_simulated_pod_is_refused_with_the_reason() {
    let sandbox = start_sandbox().await;
    let kubectl = Kubectl::new(&sandbox.url());
    kubectl
        .ok(&["run", "web", "--image=nginx", "--restart=Never"])
        .await;
    let refused = kubectl.run(&["exec", "web", "--", "true"]).await;
    assert!(!refused.success);
    assert!(
        refused.stderr.contains("pod web is simulated")
            && refused.stderr.contains("--runtime processes"),
        "{refused:?}"
    );
    let resources = Http::new(&sandbox.url()).get("/api/v1").await.json();
    let listed = |name: &str| {
        resources["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["name"] == name)
            .map(|r| r["verbs"].clone())
    };
    assert_eq!(
        listed("pods/exec"),
        Some(serde_json::json!(["create", "get"]))
    );
    assert_eq!(
        listed("pods/portforward"),
        Some(serde_json::json!(["create", "get"]))
    );
}
