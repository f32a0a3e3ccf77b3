//! `kubectl apply -k kube/` runs the operator inside the sandbox, as a learner would deploy it:
//! the README's deploy commands, verbatim, against a fresh sandbox whose node maps the image
//! `postgres-operator:<tag>` to the stage binaries this checkout built. The Deployment's two
//! pods authenticate as their service account (RBAC enforced), elect a leader through a Lease,
//! and the leader turns the example cluster into real Postgres pods; `kubectl rollout restart`
//! replaces both operator pods without two leaders ever acting, and `kill -9` of the leader's
//! process hands the lease to the standby once it expires.
//!
//! WORKSHOP.md, "Inside step 04: one operator at a time", and the README's deploy section. Needs
//! PostgreSQL, bubblewrap and kubectl: without them the test fails and says what is missing.

use std::collections::BTreeSet;
use std::process::Stdio;

use sandbox::RequestRecord;
use tokio::io::{AsyncBufReadExt, BufReader};

use super::deployed::{
    lease_holder, members, operator_pods, start_sandbox, Shell, CLUSTER, DEADLINE, DEPLOYMENT,
    NAMESPACE, OPERATOR_USER,
};

/// The README's deploy commands: the `sh` block that holds `kubectl apply -k kube/`, every
/// line that starts with `kubectl`, comments cut off.
fn readme_deploy_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md is readable");
    let block = readme
        .split("```sh\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .find(|block| block.contains("kubectl apply -k kube/"))
        .expect("README.md has an sh block with `kubectl apply -k kube/`");
    block
        .lines()
        .filter(|line| line.starts_with("kubectl "))
        .map(|line| line.split(" #").next().unwrap_or(line).trim().to_string())
        .collect()
}

/// Wait for three ready members, one primary, and the status agreeing; the primary's name.
async fn wait_healthy(shell: &Shell) -> String {
    test_support::eventually(DEADLINE, "three ready members, one primary", || async {
        let pods = members(shell).await;
        let primaries: Vec<_> = pods.iter().filter(|p| p.1 == "primary").collect();
        let status = shell
            .json(&format!("kubectl -n {NAMESPACE} get pgc {CLUSTER} -o json"))
            .await["status"]
            .clone();
        let healthy = pods.len() == 3
            && pods.iter().all(|p| p.2)
            && primaries.len() == 1
            && status["readyInstances"] == 3
            && status["primary"] == primaries[0].0.as_str();
        healthy.then(|| primaries[0].0.clone())
    })
    .await
}

/// Delete one replica and wait until the operator has replaced it: proof that someone leads.
async fn replace_a_replica(shell: &Shell) {
    let pods = members(shell).await;
    let replica = pods
        .iter()
        .find(|p| p.1 == "replica")
        .map(|p| p.0.clone())
        .expect("a replica");
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} delete pod {replica} --wait=false"
        ))
        .await;
    test_support::eventually(DEADLINE, "the lost replica replaced", || async {
        let pods = members(shell).await;
        (pods.len() == 3 && pods.iter().all(|p| p.2) && !pods.iter().any(|p| p.0 == replica))
            .then_some(())
    })
    .await;
}

/// The operator's writes, in the order the API server answered them: (pod, what).
/// Lease requests are the election itself and are left out.
fn operator_writes(log: &[RequestRecord]) -> Vec<(String, String)> {
    log.iter()
        .filter(|r| r.user == OPERATOR_USER)
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|r| r.resource != "leases")
        .map(|r| {
            (
                r.pod.clone(),
                format!("{} {} {}", r.verb, r.resource, r.name),
            )
        })
        .collect()
}

/// Never two leaders: once a pod's first write is seen, no earlier writer writes again; and
/// each writer had written the Lease (acquired it) before its first write.
fn assert_one_writer_at_a_time(log: &[RequestRecord]) {
    let writes = operator_writes(log);
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut current: Option<String> = None;
    for (pod, what) in &writes {
        assert!(
            !pod.is_empty(),
            "a write with no pod behind its token: {what}"
        );
        if current.as_deref() != Some(pod) {
            assert!(
                !finished.contains(pod),
                "{pod} wrote ({what}) after another pod had taken over: {writes:#?}"
            );
            if let Some(previous) = current.replace(pod.clone()) {
                finished.insert(previous);
            }
            let first = log
                .iter()
                .position(|r| {
                    r.pod == *pod
                        && r.resource != "leases"
                        && r.verb != "get"
                        && r.verb != "list"
                        && r.verb != "watch"
                })
                .expect("the first write is in the log");
            assert!(
                log[..first].iter().any(|r| r.pod == *pod
                    && r.resource == "leases"
                    && matches!(r.verb.as_str(), "create" | "update")
                    && (200..300).contains(&r.code)),
                "{pod} wrote before it held the Lease: {what}"
            );
        }
    }
}

/// The process running a pod's operator: found by its `HOSTNAME` (the pod name, as the kubelet
/// sets it) and its command line.
fn operator_process(pod: &str) -> Option<u32> {
    let wanted = format!("HOSTNAME={pod}");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let runs_stage = cmdline
                .split(|b| *b == 0)
                .next()
                .is_some_and(|argv0| argv0.starts_with(b"/stage0"));
            let is_pod = environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_bytes());
            (runs_stage && is_pod).then_some(pid)
        })
}

/// The README's commands deploy the operator into a fresh sandbox; it leads, reconciles the
/// example into real Postgres, survives a rollout restart with one writer at a time, and a
/// `kill -9` of the leader hands over to the standby.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_deploys_the_operator_into_the_sandbox() {
    let sandbox = start_sandbox().await;
    let shell = Shell::new(&sandbox.url());

    // The README, verbatim: apply, rollout status, the example, then `logs -f` in the background.
    let commands = readme_deploy_commands();
    assert!(commands.len() >= 4, "README deploy commands: {commands:?}");
    let mut follow = None;
    for line in &commands {
        println!("$ {line}");
        if line.contains("logs -f") {
            let mut child = shell
                .command(line)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("kubectl logs -f starts");
            let stdout = child.stdout.take().expect("stdout piped");
            follow = Some((child, BufReader::new(stdout).lines()));
        } else {
            print!("{}", shell.ok(line).await);
        }
    }
    let (mut logs_child, mut logs) = follow.expect("the README follows the operator's logs");

    // Two operator pods, Running and Ready; one of them holds the Lease.
    let pods = test_support::eventually(DEADLINE, "two ready operator pods", || async {
        let pods = operator_pods(&shell).await;
        (pods.len() == 2 && pods.iter().all(|p| p.1)).then_some(pods)
    })
    .await;
    let (_, leader) =
        test_support::eventually(DEADLINE, "a lease holder", || lease_holder(&shell)).await;
    assert!(
        pods.iter().any(|p| p.0 == leader),
        "the holder {leader} is one of {pods:?}"
    );

    // The example becomes a real Postgres cluster. `logs -f deploy/...` follows one of the two
    // pods: the leader's story, or the standby's "waiting for lease ... held by <leader>".
    let primary = wait_healthy(&shell).await;
    println!("primary {primary}, operator leader {leader}");
    let story = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(line)) = logs.next_line().await {
            println!("logs -f: {line}");
            if line.contains(CLUSTER) || line.contains(&format!("held by {leader}_")) {
                return Some(line);
            }
        }
        None
    })
    .await
    .expect("`kubectl logs -f` follows the operator's story lines");
    assert!(story.is_some(), "`kubectl logs -f` ended early");
    logs_child.kill().await.ok();
    let leader_log = shell
        .ok(&format!("kubectl -n {NAMESPACE} logs {leader}"))
        .await;
    assert!(
        leader_log.contains(&format!("leading as {leader}_")) && leader_log.contains(CLUSTER),
        "the leader's story names its lease and the example cluster:\n{leader_log}"
    );

    // A rollout restart replaces both operator pods; the cluster stays, one writer at a time.
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} rollout restart deploy/{DEPLOYMENT}"
        ))
        .await;
    shell
        .ok(&format!(
            "kubectl -n {NAMESPACE} rollout status deploy/{DEPLOYMENT} --timeout=240s"
        ))
        .await;
    let (new_holder, new_leader) =
        test_support::eventually(DEADLINE, "a new pod leading", || async {
            let pods = operator_pods(&shell).await;
            let holder = lease_holder(&shell).await?;
            (pods.len() == 2
                && pods.iter().all(|p| p.1 && p.0 != leader)
                && pods.iter().any(|p| p.0 == holder.1))
            .then_some(holder)
        })
        .await;
    replace_a_replica(&shell).await;
    println!("after the restart {new_leader} leads");

    // kill -9 of the leader's process: nobody releases the Lease, so another candidate takes
    // over once it expired. Usually the standby: it has watched the record stop changing since
    // the last renewal, while the killed pod's restarted container (the kubelet restarts it at
    // once, with a new identity) starts its own expiry clock only when it first reads the Lease.
    // Within one retry period of each other either may win, as on a real cluster.
    let pid = operator_process(&new_leader)
        .unwrap_or_else(|| panic!("no operator process with HOSTNAME={new_leader}"));
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("kill runs");
    let (_, standby) = test_support::eventually(DEADLINE, "another candidate leading", || async {
        let holder = lease_holder(&shell).await?;
        (holder.0 != new_holder).then_some(holder)
    })
    .await;
    replace_a_replica(&shell).await;
    println!("after kill -9 of {new_holder}, {standby} leads");
    // The kubelet restarted the killed container, which now stands by.
    test_support::eventually(DEADLINE, "the killed operator restarted", || async {
        operator_pods(&shell)
            .await
            .iter()
            .any(|p| p.0 == new_leader && p.2 >= 1 && p.1)
            .then_some(())
    })
    .await;

    // kube/deployment.yaml limits the container to 64Mi, which a cluster enforces (OOMKilled)
    // and the sandbox does not: the leader's resident memory, after leading through all this.
    let pid = operator_process(&standby)
        .unwrap_or_else(|| panic!("no operator process with HOSTNAME={standby}"));
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let rss_kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    println!(
        "the leading operator's RSS: {:.1} MiB (kube/deployment.yaml's limit: 64 MiB)",
        rss_kib as f64 / 1024.0
    );
    assert!(
        rss_kib < 64 * 1024,
        "{rss_kib} KiB would be OOMKilled at 64Mi"
    );

    let log = sandbox.requests();
    assert_one_writer_at_a_time(&log);
    let forbidden: Vec<_> = log
        .iter()
        .filter(|r| r.user == OPERATOR_USER && r.code == 403)
        .map(|r| format!("{} {}", r.verb, r.path))
        .collect();
    assert!(
        forbidden.is_empty(),
        "kube/rbac.yaml must grant all the operator does: {forbidden:?}"
    );
    let writers: BTreeSet<String> = operator_writes(&log).into_iter().map(|w| w.0).collect();
    assert!(
        writers.contains(&leader) && writers.contains(&new_leader),
        "the first leader and the one after the restart both wrote: {writers:?}"
    );
}
