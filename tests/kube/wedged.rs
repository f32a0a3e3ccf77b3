//! The Deployment's probes restart an operator whose watches are wedged, end to end: `kubectl
//! apply -k kube/` into a fresh sandbox, the example cluster reconciled, then every watch the
//! API server is asked for is refused (`Faults::refuse_watches`: the open ones end, new ones get
//! a 500) while lists, reads and the Lease's renewals go on. The operator's `/healthz` fails once
//! a watch has made no progress within its bound, the sandbox's kubelet sees it through the
//! liveness probe of `kube/deployment.yaml` and restarts the container, and once the API server
//! serves watches again the restarted operator is Ready and acts on a change to the cluster.
//!
//! WORKSHOP.md, "Inside step 04: watching the operator". Needs PostgreSQL, bubblewrap and kubectl: without them
//! the test fails and says what is missing. The Deployment is patched to `--watch-timeout=20`
//! (the default 340 s makes the bound 740 s, `HealthBounds::for_operator`): a 100 s bound, the
//! same probes. Its times are printed: `cargo test --test kube wedged:: -- --nocapture`.

use std::time::Duration;

use clap::Parser;
use postgres_operator::metrics::HealthBounds;
use postgres_operator::postgres::PostgresStageFlags;
use serde_json::Value;
use test_support::http_client::Http;
use tokio::time::Instant;

use super::deployed::{
    lease_holder, members, operator_pods, start_sandbox, Shell, CLUSTER, DEADLINE, DEPLOYMENT,
    NAMESPACE,
};

/// Shorter watches than the default 340 s, so the bound is 100 s rather than 740 s.
const WATCH_TIMEOUT: &str = "--watch-timeout=20";

/// `kubectl get pod NAME -o json` in the operator's namespace.
async fn pod(shell: &Shell, name: &str) -> Value {
    shell
        .json(&format!("kubectl -n {NAMESPACE} get pod {name} -o json"))
        .await
}

/// `GET path` on the operator's metrics port, as the kubelet's probe sends it: the status code
/// and the body, or None when no answer came within 5 s (the probe's `timeoutSeconds`).
async fn probe(metrics: &Http, path: &str) -> Option<(u16, String)> {
    let answer = tokio::time::timeout(Duration::from_secs(5), metrics.get(path))
        .await
        .ok()?;
    Some((answer.status.as_u16(), answer.text()))
}

/// The events about pod `name`: (reason, message).
async fn events_of(shell: &Shell, name: &str) -> Vec<(String, String)> {
    let events = shell
        .json(&format!("kubectl -n {NAMESPACE} get events -o json"))
        .await;
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|event| event["involvedObject"]["name"] == name)
        .map(|event| (text(&event["reason"]), text(&event["message"])))
        .collect()
}

/// The operator stops seeing changes (its watches are refused), `/healthz` says so within its
/// bound, the liveness probe restarts the container, and the restarted operator is Ready and
/// reconciles once watches are served again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_liveness_probe_restarts_an_operator_whose_watches_are_wedged() {
    // The bound stage06 runs with once the Deployment below carries this flag.
    let flags =
        PostgresStageFlags::try_parse_from(["stage06", WATCH_TIMEOUT]).expect("the flags parse");
    let options = flags.operator.options();
    let bounds = HealthBounds::for_operator(options.reconcile_interval, &options.watch);
    let sandbox = start_sandbox().await;
    let shell = Shell::new(&sandbox.url());

    // One replica, so the container the probe restarts is the one that leads afterwards (with
    // two, the standby would take the released Lease and be wedged in its turn).
    shell.ok("kubectl apply -k kube/").await;
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} patch deploy/{DEPLOYMENT} --type json -p '[{{\"op\":\"add\",\"path\":\"/spec/template/spec/containers/0/args/-\",\"value\":\"{WATCH_TIMEOUT}\"}}]'"
        ))
        .await;
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} scale deploy/{DEPLOYMENT} --replicas=1"
        ))
        .await;
    let operator = test_support::eventually(
        DEADLINE,
        "one ready operator pod, rolled out with the flag",
        || async {
            let pods = operator_pods(&shell).await;
            let [(name, true, _)] = pods.as_slice() else {
                return None;
            };
            let args = pod(&shell, name).await["spec"]["containers"][0]["args"].clone();
            let rolled_out = args.as_array()?.iter().any(|arg| arg == WATCH_TIMEOUT);
            rolled_out.then(|| name.clone())
        },
    )
    .await;
    // The example with one member: the operator's watches have a pod to follow.
    shell
        .ok(&format!(
            "sed 's/^  size: 3$/  size: 1/' kube/example-postgres-cluster.yaml | kubectl -n {NAMESPACE} apply -f -"
        ))
        .await;
    test_support::eventually(
        DEADLINE,
        "the example's primary ready, and the pod leading",
        || async {
            let members = members(&shell).await;
            let leads = lease_holder(&shell).await.is_some_and(|h| h.1 == operator);
            (leads && members.len() == 1 && members[0].1 == "primary" && members[0].2).then_some(())
        },
    )
    .await;
    let pod_ip = pod(&shell, &operator).await["status"]["podIP"]
        .as_str()
        .expect("the operator pod has an IP")
        .to_string();
    let metrics = Http::new(&format!("http://{pod_ip}:8080"));
    assert_eq!(probe(&metrics, "/healthz").await.map(|a| a.0), Some(200));
    println!("{operator} leads and is live; its watch bound is {bounds:?}");

    // Wedge: from now on no watch makes progress.
    sandbox.faults().refuse_watches(true);
    let wedged = Instant::now();
    let why = test_support::eventually(
        bounds.watch + Duration::from_secs(120),
        "/healthz to fail",
        || async {
            let (code, body) = probe(&metrics, "/healthz").await?;
            (code == 500).then_some(body)
        },
    )
    .await;
    let failed = wedged.elapsed();
    assert!(why.contains("watch made no progress"), "{why}");
    println!("{failed:.0?} after the wedge /healthz says: {}", why.trim());

    // Three failed probes ten seconds apart (kube/deployment.yaml), then the restart.
    let restarted = test_support::eventually(DEADLINE, "the container restarted", || async {
        let pod = pod(&shell, &operator).await;
        let status = &pod["status"]["containerStatuses"][0];
        (status["restartCount"].as_u64() >= Some(1)).then(|| status.clone())
    })
    .await;
    let restart = wedged.elapsed();
    let terminated = &restarted["lastState"]["terminated"];
    println!(
        "{restart:.0?} after the wedge the kubelet restarted it: lastState.terminated {} (exit code {})",
        terminated["reason"], terminated["exitCode"]
    );
    assert!(
        terminated["reason"].is_string(),
        "the last state says how the old container ended: {restarted}"
    );
    let events = events_of(&shell, &operator).await;
    let said = |reason: &str, message: &str| {
        events
            .iter()
            .any(|(r, m)| r == reason && m.starts_with(message))
    };
    assert!(
        said(
            "Unhealthy",
            "Liveness probe failed: HTTP probe failed with statuscode: 500"
        ),
        "{events:#?}"
    );
    assert!(
        said(
            "Killing",
            "Container operator failed liveness probe, will be restarted"
        ),
        "{events:#?}"
    );

    // Watches are served again: the restarted operator leads, lists, watches, and is Ready.
    sandbox.faults().refuse_watches(false);
    test_support::eventually(DEADLINE, "the restarted operator ready", || async {
        let pods = operator_pods(&shell).await;
        let ready = pods.len() == 1 && pods[0].0 == operator && pods[0].1 && pods[0].2 >= 1;
        let leads = ready && lease_holder(&shell).await.is_some_and(|h| h.1 == operator);
        if !leads {
            return None;
        }
        // Ready: the new process listens, so the GETs connect.
        let live = probe(&metrics, "/healthz").await.map(|a| a.0) == Some(200);
        (live && probe(&metrics, "/readyz").await.map(|a| a.0) == Some(200)).then_some(())
    })
    .await;
    println!(
        "{:.0?} after the wedge the restarted operator is ready and leads",
        wedged.elapsed()
    );

    // And it reconciles: a second member, asked for now, is created and streams.
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} patch pgc {CLUSTER} --type merge -p '{{\"spec\":{{\"size\":2}}}}'"
        ))
        .await;
    test_support::eventually(
        DEADLINE,
        "the example grown to two ready members",
        || async {
            let members = members(&shell).await;
            (members.len() == 2 && members.iter().all(|m| m.2)).then_some(())
        },
    )
    .await;
    println!(
        "wedge → /healthz failing {failed:.0?} → restarted {restart:.0?} → a second member ready {:.0?}",
        wedged.elapsed()
    );
}
