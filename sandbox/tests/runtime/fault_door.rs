//! The node faults over HTTP (`sandbox/src/fault_door.rs`), driven by real kubectl as a learner
//! drives them: `kubectl create --raw /sandbox/faults/namespaces/default/pods/NAME/hang -f
//! /dev/null` stops a real postgres pod until `.../resume`; a service account may not; a bad
//! fault, a bad query and a pod that runs nothing here are refused with the reason.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL, bubblewrap and kubectl.

use std::time::Duration;

use test_support::runtime::{pod_json, psql, running_trusting_postgres, start};
use test_support::{eventually, pod_is_ready};

fn door(name: &str, fault: &str) -> String {
    format!("/sandbox/faults/namespaces/default/pods/{name}/{fault}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_hangs_and_resumes_a_pod_through_the_fault_door() {
    let (_sandbox, kubectl, runtime) = start().await;
    let ip = running_trusting_postgres(&kubectl, "door").await;

    // Only the admin: a service account's RBAC has no nonResourceURLs rule for it.
    let path = door("door", "hang");
    let refused = kubectl
        .run(&[
            "create",
            "--raw",
            &path,
            "-f",
            "/dev/null",
            "--as=system:serviceaccount:default:default",
        ])
        .await;
    assert!(!refused.success, "a service account hung a pod");
    assert!(refused.stderr.contains("forbidden"), "{}", refused.stderr);
    assert!(
        psql(&runtime, &ip, "select 1").await.is_ok(),
        "the refused fault acted"
    );

    let said = kubectl
        .ok(&["create", "--raw", &path, "-f", "/dev/null"])
        .await;
    assert!(said.contains("pod default/door hung"), "{said}");
    // Its tcpSocket readiness probe stays green: the kernel still completes a connection to a
    // stopped postmaster's listening socket. Only a query finds it hung.
    assert!(
        psql(&runtime, &ip, "select 1").await.is_err(),
        "a hung postgres answered"
    );

    let said = kubectl
        .ok(&[
            "create",
            "--raw",
            &door("door", "resume"),
            "-f",
            "/dev/null",
        ])
        .await;
    assert!(said.contains("pod default/door resumed"), "{said}");
    eventually(
        Duration::from_secs(30),
        "the resumed postgres answering",
        || async { psql(&runtime, &ip, "select 1").await.ok() },
    )
    .await;
    let pod = pod_json(&kubectl, "door").await.expect("the pod is there");
    assert!(pod_is_ready(&pod), "the resumed pod is Ready");

    // Refusals name what was wrong, and change nothing.
    for (path, says) in [
        (door("door", "melt"), "no fault \"melt\""),
        (
            format!("{}?processes=asleep", door("door", "lose-node")),
            "processes=\"asleep\"",
        ),
        (door("door", "crash"), "crash needs ?container=NAME"),
        (
            door("nobody", "hang"),
            "no running process of pod default/nobody",
        ),
        (
            "/sandbox/faults/pods/door/hang".to_string(),
            "expected /sandbox/faults/namespaces/NAMESPACE/pods/NAME/FAULT",
        ),
    ] {
        let out = kubectl
            .run(&["create", "--raw", &path, "-f", "/dev/null"])
            .await;
        assert!(!out.success, "{path} was accepted");
        assert!(out.stderr.contains(says), "{path}: {}", out.stderr);
    }
    assert_eq!(psql(&runtime, &ip, "select 1").await.as_deref(), Ok("1"));
}
