//! Termination messages: what a container writes to its `terminationMessagePath` (default
//! `/dev/termination-log`) becomes `state.terminated.message` in its status, and
//! `lastState.terminated.message` after a restart; with `terminationMessagePolicy:
//! FallbackToLogsOnError`, a container that failed without writing one reports the end of its log.
//! And termination itself: a deletion reaches the pod's processes at once.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs bubblewrap (the pods run `sh` from this machine).
//! Run: `cargo test -p sandbox --test runtime termination_message::`.

use std::time::Duration;

use serde_json::Value;
use test_support::eventually;
use test_support::runtime::{create, pod_json, pod_manifest, start};
use test_support::Kubectl;

/// One pod that runs `script` once (`restartPolicy` as given) with extra container fields.
fn shell_pod(name: &str, restart_policy: &str, extra: &str, script: &str) -> String {
    let spec = format!(
        r#"  restartPolicy: {restart_policy}
  volumes: [{{name: work, emptyDir: {{}}}}]
  containers:
  - name: main
    image: busybox:1.36
    command: [sh, -c, '{script}']
    volumeMounts: [{{name: work, mountPath: /scratch}}]
{extra}"#
    );
    pod_manifest(name, &spec)
}

/// The pod once it has reached `phase`.
async fn in_phase(kubectl: &Kubectl, name: &str, phase: &str) -> Value {
    eventually(
        Duration::from_secs(60),
        &format!("pod {name} {phase}"),
        || async {
            let pod = pod_json(kubectl, name).await?;
            (pod["status"]["phase"] == phase).then_some(pod)
        },
    )
    .await
}

/// A message written to `/dev/termination-log`, or to a custom `terminationMessagePath` in a
/// directory the machine does not have, is the terminated state's message; a restarted container
/// starts with an empty file, so its first instance's message stays in `lastState` only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_container_writes_to_its_termination_log_is_its_message() {
    let (_sandbox, kubectl, _) = start().await;
    create(
        &kubectl,
        &shell_pod("done", "Never", "", "echo done > /dev/termination-log"),
    )
    .await;
    create(
        &kubectl,
        &shell_pod(
            "custom",
            "Never",
            "    terminationMessagePath: /var/result/message\n",
            "echo custom > /var/result/message; test ! -e /dev/termination-log",
        ),
    )
    .await;
    create(
        &kubectl,
        &shell_pod(
            "again",
            "OnFailure",
            "",
            "if [ -e /scratch/ran ]; then echo -n second-run >&2; exit 0; fi; touch /scratch/ran; echo first > /dev/termination-log; exit 1",
        ),
    )
    .await;

    let done = in_phase(&kubectl, "done", "Succeeded").await;
    assert_eq!(
        done["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "done\n",
        "{done}"
    );
    let custom = in_phase(&kubectl, "custom", "Succeeded").await;
    assert_eq!(
        custom["status"]["containerStatuses"][0]["state"]["terminated"]["message"], "custom\n",
        "{custom}"
    );
    let again = in_phase(&kubectl, "again", "Succeeded").await;
    let status = &again["status"]["containerStatuses"][0];
    assert_eq!(status["restartCount"], 1, "{again}");
    assert_eq!(status["lastState"]["terminated"]["message"], "first\n");
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 1);
    assert!(
        status["state"]["terminated"]["message"].is_null(),
        "the second run wrote nothing: {again}"
    );
    // kubectl shows it where users look.
    let described = kubectl.ok(&["describe", "pod", "done"]).await;
    assert!(
        described.lines().any(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            words == ["Message:", "done"]
        }),
        "{described}"
    );
}

/// Under `FallbackToLogsOnError`, a failed container that wrote no message reports its log's last
/// lines (at most 80), what it wrote to the file wins when it did, and a success reports nothing
/// from its log; under the default policy a failure without a message has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_without_a_message_falls_back_to_the_end_of_its_log() {
    let (_sandbox, kubectl, _) = start().await;
    let fallback = "    terminationMessagePolicy: FallbackToLogsOnError\n";
    create(
        &kubectl,
        &shell_pod(
            "from-log",
            "Never",
            fallback,
            "for i in $(seq 1 100); do echo line $i; done; echo \"ERROR: no such file\" >&2; exit 3",
        ),
    )
    .await;
    create(
        &kubectl,
        &shell_pod(
            "from-file",
            "Never",
            fallback,
            "echo noise; echo \"the reason\" > /dev/termination-log; exit 4",
        ),
    )
    .await;
    create(
        &kubectl,
        &shell_pod("succeeded", "Never", fallback, "echo all well"),
    )
    .await;
    create(
        &kubectl,
        &shell_pod("silent", "Never", "", "echo only in the log; exit 5"),
    )
    .await;

    let from_log = in_phase(&kubectl, "from-log", "Failed").await;
    let terminated = &from_log["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 3, "{from_log}");
    let message = terminated["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("line 22\n") && message.ends_with("line 100\nERROR: no such file\n"),
        "the last 80 lines: {message:?}"
    );
    assert_eq!(message.lines().count(), 80);

    let from_file = in_phase(&kubectl, "from-file", "Failed").await;
    assert_eq!(
        from_file["status"]["containerStatuses"][0]["state"]["terminated"]["message"],
        "the reason\n",
        "{from_file}"
    );
    let succeeded = in_phase(&kubectl, "succeeded", "Succeeded").await;
    assert!(
        succeeded["status"]["containerStatuses"][0]["state"]["terminated"]["message"].is_null(),
        "{succeeded}"
    );
    let silent = in_phase(&kubectl, "silent", "Failed").await;
    let terminated = &silent["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["exitCode"], 5, "{silent}");
    assert!(terminated["message"].is_null(), "{silent}");
}

/// The kubelet hears of a deletion through its watch, not at its next resync: with a sync period
/// of an hour, a deleted pod's process still gets its stop signal, and the pod goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_stops_without_waiting_for_the_sync_period() {
    let mut runtime = test_support::process_runtime();
    runtime.sync_period = Duration::from_secs(3600);
    let sandbox =
        test_support::start_process_sandbox_on(sandbox::SandboxOptions::default(), runtime).await;
    let kubectl = Kubectl::new(&sandbox.url());
    // Ends on SIGTERM (the shell's trap) long before its 60 s grace period would.
    let script = "trap \"exit 0\" TERM; while true; do sleep 0.1; done";
    create(
        &kubectl,
        &shell_pod(
            "sleeper",
            "Always",
            "  terminationGracePeriodSeconds: 60\n",
            script,
        ),
    )
    .await;
    in_phase(&kubectl, "sleeper", "Running").await;
    kubectl
        .ok(&["delete", "pod", "sleeper", "--wait=false"])
        .await;
    eventually(Duration::from_secs(20), "pod sleeper gone", || async {
        let out = kubectl
            .run(&["get", "pod", "sleeper", "--ignore-not-found", "-o", "name"])
            .await;
        (out.success && out.stdout.trim().is_empty()).then_some(())
    })
    .await;
}
