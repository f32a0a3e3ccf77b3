//! The process runtime's node faults with real PostgreSQL: a hung pod (every process stopped
//! with SIGSTOP: probes time out, the sandbox carries on, SIGCONT brings it back) and a lost
//! node (the pod stays Running and Ready for the grace period, then Ready False; its deletion
//! never completes; a forced delete removes it and its processes).
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap.
//! Run: `cargo test -p sandbox --test runtime_node_faults`.

use std::time::{Duration, Instant};

use sandbox::{LostNode, LostProcesses};
use serde_json::Value;
use test_support::runtime::{create, pod_json, psql, start, wait_ready, TRUSTING_POSTGRES};
use test_support::{eventually, pod_is_ready, processes_matching, Kubectl};

/// A trusting postgres pod named `name` (exec readiness probe, 1 s timeout), Ready; its IP.
async fn running_postgres(kubectl: &Kubectl, name: &str) -> String {
    create(
        kubectl,
        &TRUSTING_POSTGRES.replace(
            "metadata: {name: pg}",
            &format!("metadata: {{name: {name}}}"),
        ),
    )
    .await;
    let pod = wait_ready(kubectl, name).await;
    pod["status"]["podIP"].as_str().expect("pod IP").to_string()
}

/// The state letter of each process serving `ip` (`T`: stopped), from /proc/PID/stat.
fn states_of_postgres(ip: &str) -> Vec<char> {
    processes_matching(&format!("listen_addresses={ip}"))
        .into_iter()
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            stat.rsplit_once(')')?.1.trim_start().chars().next()
        })
        .collect()
}

fn ready_condition(pod: &Value) -> String {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Wait (20 s at most) until pod `name`'s Ready condition is False: after a lost node's grace.
async fn wait_ready_false(kubectl: &Kubectl, name: &str) {
    eventually(
        Duration::from_secs(20),
        "Ready False after the grace",
        || async {
            let pod = pod_json(kubectl, name).await?;
            (ready_condition(&pod) == "False").then_some(())
        },
    )
    .await;
}

/// `kubectl get events` about pod `name`.
async fn events_of(kubectl: &Kubectl, name: &str) -> String {
    let about = format!("involvedObject.name={name}");
    kubectl
        .ok(&["get", "events", "--field-selector", &about])
        .await
}

/// A hung pod: its postmaster stopped, its exec readiness probe times out (the pod turns
/// unready, with a "timed out" Unhealthy event), psql gets no answer, the API server still
/// answers; resumed, the same postmaster answers again and the pod is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_pod_times_out_its_probes_until_resumed() {
    let (sandbox, kubectl, runtime) = start().await;
    let ip = running_postgres(&kubectl, "hung").await;
    assert!(!sandbox.faults().hang_pod("default", "nope"));
    assert!(sandbox.faults().hang_pod("default", "hung"));
    let states = states_of_postgres(&ip);
    assert!(
        !states.is_empty() && states.iter().all(|s| *s == 'T'),
        "every postgres process stopped: {states:?}"
    );
    let asked = Instant::now();
    assert!(psql(&runtime, &ip, "select 1").await.is_err());
    assert!(asked.elapsed() < Duration::from_secs(20), "psql gave up");
    eventually(Duration::from_secs(30), "the hung pod unready", || async {
        let pod = pod_json(&kubectl, "hung").await?;
        (!pod_is_ready(&pod)).then_some(())
    })
    .await;
    let events = events_of(&kubectl, "hung").await;
    assert!(events.contains("timed out"), "{events}");
    let pod = pod_json(&kubectl, "hung").await.expect("the pod stays");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);

    assert!(sandbox.faults().resume_pod("default", "hung"));
    wait_ready(&kubectl, "hung").await;
    assert_eq!(psql(&runtime, &ip, "select 1").await.as_deref(), Ok("1"));
    assert!(states_of_postgres(&ip).iter().all(|s| *s != 'T'));
}

/// A lost node, processes frozen: the pod stays Running and Ready (its Service would still
/// send it traffic) until the grace period ends, then Ready False; an exec fails; a deletion
/// leaves it Terminating; only a forced delete removes it, and its processes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_keeps_its_pod_ready_for_the_grace_period_and_terminating_for_ever() {
    let (sandbox, kubectl, _runtime) = start().await;
    let ip = running_postgres(&kubectl, "stranded").await;
    let grace = Duration::from_secs(4);
    let how = LostNode {
        processes: LostProcesses::Frozen,
        grace,
    };
    assert!(!sandbox.faults().lose_node("default", "nope", how));
    let lost_at = Instant::now();
    assert!(sandbox.faults().lose_node("default", "stranded", how));
    assert!(states_of_postgres(&ip).iter().all(|s| *s == 'T'));
    tokio::time::sleep(grace / 2).await;
    let pod = pod_json(&kubectl, "stranded").await.expect("the pod stays");
    if lost_at.elapsed() < grace {
        assert_eq!(
            ready_condition(&pod),
            "True",
            "still Ready in the grace period"
        );
    }
    let exec = kubectl.run(&["exec", "stranded", "--", "true"]).await;
    assert!(
        !exec.success,
        "an exec on a lost node fails: {}",
        exec.stdout
    );
    wait_ready_false(&kubectl, "stranded").await;
    assert!(lost_at.elapsed() >= grace);
    let pod = pod_json(&kubectl, "stranded").await.expect("the pod stays");
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 0);

    kubectl
        .ok(&["delete", "pod", "stranded", "--wait=false"])
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let terminating = pod_json(&kubectl, "stranded").await.expect("still there");
    assert!(!terminating["metadata"]["deletionTimestamp"].is_null());
    assert!(states_of_postgres(&ip).iter().all(|s| *s == 'T'));

    kubectl
        .ok(&["delete", "pod", "stranded", "--force", "--grace-period=0"])
        .await;
    eventually(
        Duration::from_secs(30),
        "stranded gone, and its postgres",
        || async {
            let gone = pod_json(&kubectl, "stranded").await.is_none();
            (gone && states_of_postgres(&ip).is_empty()).then_some(())
        },
    )
    .await;
}

/// A lost node, processes killed: the postmaster is gone at once, while the object still says
/// Running and Ready until the grace period ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_with_killed_processes_looks_ready_until_the_grace_ends() {
    let (sandbox, kubectl, runtime) = start().await;
    let ip = running_postgres(&kubectl, "powerless").await;
    let how = LostNode {
        processes: LostProcesses::Killed,
        grace: Duration::from_secs(6),
    };
    let lost_at = Instant::now();
    assert!(sandbox.faults().lose_node("default", "powerless", how));
    eventually(Duration::from_secs(10), "no postmaster left", || async {
        states_of_postgres(&ip).is_empty().then_some(())
    })
    .await;
    assert!(psql(&runtime, &ip, "select 1").await.is_err());
    let pod = pod_json(&kubectl, "powerless")
        .await
        .expect("the pod stays");
    if lost_at.elapsed() < how.grace {
        assert_eq!(ready_condition(&pod), "True", "{pod}");
        assert!(pod["status"]["containerStatuses"][0]["state"]["running"].is_object());
    }
    wait_ready_false(&kubectl, "powerless").await;
    assert!(lost_at.elapsed() >= how.grace);
    let events = events_of(&kubectl, "powerless").await;
    assert!(events.contains("NodeNotReady"), "{events}");
}
