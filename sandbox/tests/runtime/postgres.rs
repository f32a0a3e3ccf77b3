//! The process runtime with real kubectl and real PostgreSQL, no operator: a primary and a
//! `pg_basebackup -R` replica from plain manifests replicate a row; `kubectl logs` shows
//! postgres' own lines; deleting a pod stops its postmaster before the pod goes; killing the
//! sandbox with SIGKILL leaves no postgres behind.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap: without them every test
//! here fails and says how to install them (`.ci/install-test-deps`); none silently passes.
//! Run: `cargo test -p sandbox --test runtime postgres::`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use test_support::process_runtime;
use test_support::processes_matching;
use test_support::runtime::{
    create, pod_json, pod_manifest, psql, running_trusting_postgres, start, start_with, wait_ready,
    write_then_read,
};
use test_support::{eventually, Kubectl};
use tokio::io::{AsyncBufReadExt, BufReader};

const CREDENTIALS: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: pg-credentials}
stringData: {superuser-password: superuser-secret, replication-password: replication-secret}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: pg-init}
data:
  10-replication.sh: |
    psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres --set pw="$REPLICATION_PASSWORD" <<'SQL'
    CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw';
    SQL
    echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
"#;

/// The postgres container both pods share (the design's pod spec, in YAML).
fn postgres_container() -> &'static str {
    r#"
  - name: postgres
    image: postgres:16.4
    args: ["postgres", "-c", "wal_keep_size=512MB"]
    env:
    - {name: PGDATA, value: /var/lib/postgresql/data/pgdata}
    - {name: POSTGRES_PASSWORD, valueFrom: {secretKeyRef: {name: pg-credentials, key: superuser-password}}}
    - {name: REPLICATION_PASSWORD, valueFrom: {secretKeyRef: {name: pg-credentials, key: replication-password}}}
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    volumeMounts:
    - {name: data, mountPath: /var/lib/postgresql/data}
    - {name: init, mountPath: /docker-entrypoint-initdb.d}
    readinessProbe:
      exec: {command: [pg_isready, -h, 127.0.0.1, -p, "5432", -U, postgres]}
      periodSeconds: 1
      timeoutSeconds: 10
"#
}

const VOLUMES: &str = r#"
  volumes:
  - {name: data, emptyDir: {}}
  - {name: init, configMap: {name: pg-init}}
"#;

/// A primary and a `pg_basebackup -R` replica from plain manifests: a row written on the
/// primary is read on the replica (psql from the host to the pod IPs), `kubectl logs` shows
/// postgres' own startup lines, and deleting the primary stops its postmaster (the image's stop
/// signal, SIGINT: a fast shutdown, followed with `kubectl logs -f`) before the pod object goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_and_a_basebackup_replica_replicate_and_stop_cleanly() {
    let (sandbox, kubectl, runtime) = start().await;
    create(&kubectl, CREDENTIALS).await;
    let primary = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: pg-primary, labels: {{role: primary}}}}\nspec:\n  terminationGracePeriodSeconds: 30\n  containers:{}{}",
        postgres_container(),
        VOLUMES
    );
    create(&kubectl, &primary).await;
    let primary_pod = wait_ready(&kubectl, "pg-primary").await;
    let primary_ip = test_support::pod_ip(&primary_pod);
    assert!(primary_ip.starts_with("127."), "{primary_ip}");

    let replica = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: pg-replica, labels: {{role: replica}}}}
spec:
  initContainers:
  - name: clone
    image: postgres:16.4
    command: [sh, -c]
    args:
    - |
      set -e
      [ -s "$PGDATA/global/pg_control" ] && exit 0
      rm -rf "$PGDATA"; mkdir -p "$PGDATA"; chmod 700 "$PGDATA"
      until pg_isready -h "$PRIMARY_HOST" -U replicator; do sleep 1; done
      exec pg_basebackup -D "$PGDATA" -X stream -R -c fast -d "host=$PRIMARY_HOST port=5432 user=replicator application_name=$POD_NAME"
    env:
    - {{name: PGDATA, value: /var/lib/postgresql/data/pgdata}}
    - {{name: PRIMARY_HOST, value: "{primary_ip}"}}
    - {{name: PGPASSWORD, valueFrom: {{secretKeyRef: {{name: pg-credentials, key: replication-password}}}}}}
    - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    volumeMounts:
    - {{name: data, mountPath: /var/lib/postgresql/data}}
  containers:{}{}"#,
        postgres_container(),
        VOLUMES
    );
    create(&kubectl, &replica).await;
    let replica_pod = wait_ready(&kubectl, "pg-replica").await;
    let replica_ip = test_support::pod_ip(&replica_pod);
    assert_ne!(replica_ip, primary_ip);
    assert_eq!(
        replica_pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );

    write_then_read(
        &runtime,
        (
            &primary_ip,
            "CREATE TABLE greetings (text text); INSERT INTO greetings VALUES ('hello from the primary')",
        ),
        (&replica_ip, "SELECT text FROM greetings"),
        "hello from the primary",
    )
    .await;
    assert_eq!(
        psql(&runtime, &replica_ip, "SELECT pg_is_in_recovery()").await,
        Ok("t".to_string())
    );

    let logs = kubectl.ok(&["logs", "pg-primary"]).await;
    assert!(
        logs.contains(&format!(
            "listening on IPv4 address \"{primary_ip}\", port 5432"
        )) && logs.contains("database system is ready to accept connections"),
        "{logs}"
    );
    let clone_logs = kubectl.ok(&["logs", "pg-replica", "-c", "clone"]).await;
    assert!(clone_logs.contains("accepting connections"), "{clone_logs}");

    // Follow the primary's log, then delete it: the log ends with postgres' own shutdown.
    let needle = format!("listen_addresses={primary_ip}");
    // The postmaster, and for a moment after each fork a child not yet renamed.
    assert!(
        !processes_matching(&needle).is_empty(),
        "the postmaster runs"
    );
    let mut follow = kubectl
        .command(&["logs", "-f", "pg-primary"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kubectl logs -f");
    let mut lines = BufReader::new(follow.stdout.take().expect("stdout")).lines();
    let first = lines.next_line().await.expect("reads").unwrap_or_default();
    assert!(!first.is_empty(), "kubectl logs -f printed the log so far");
    kubectl
        .ok(&["delete", "pod", "pg-primary", "--wait=false"])
        .await;
    let mut followed = String::new();
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            followed.push_str(&line);
            followed.push('\n');
        }
    })
    .await;
    assert!(ended.is_ok(), "kubectl logs -f ended with the container");
    // The server's own stop, after its last start (the entrypoint's temporary init server,
    // earlier in the log, is stopped with `pg_ctl -m fast` whatever the signal).
    let last_run = followed
        .rsplit("database system is ready to accept connections")
        .next()
        .unwrap_or_default();
    assert!(
        last_run.contains("received fast shutdown request")
            && last_run.contains("database system is shut down"),
        "{followed}"
    );
    eventually(Duration::from_secs(60), "pg-primary gone", || async {
        pod_json(&kubectl, "pg-primary")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(processes_matching(&needle), Vec::<u32>::new());
    sandbox.shutdown().await;
    assert_eq!(
        processes_matching(&format!("listen_addresses={replica_ip}")),
        Vec::<u32>::new(),
        "shutdown stops every pod"
    );
}

/// `kill -9` of the `sandbox` binary leaves no process it started: bwrap's --die-with-parent
/// and the pod's PID namespace take postgres down with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_sandbox_binary_leaves_no_postgres() {
    process_runtime();
    let data_dir = tempfile::tempdir().expect("tempdir");
    let (mut child, banner) = test_support::spawn_sandbox_binary_banner(
        tokio::process::Command::new(env!("CARGO_BIN_EXE_sandbox"))
            .args(test_support::PROCESS_SANDBOX_FLAGS)
            .arg("--data-dir")
            .arg(data_dir.path())
            .stderr(Stdio::null()),
        "Ctrl-C",
    )
    .await;
    assert!(banner.contains("pods run as processes"), "{banner}");
    let url = banner
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("sandbox API server at "))
        .expect("the URL first")
        .to_string();
    let kubectl = Kubectl::new(&url);
    let ip = running_trusting_postgres(&kubectl, "pg").await;
    let needle = format!("listen_addresses={ip}");
    child.start_kill().expect("SIGKILL the sandbox");
    let _ = child.wait().await;
    eventually(Duration::from_secs(10), "no postgres left", || async {
        processes_matching(&needle).is_empty().then_some(())
    })
    .await;
    // Nothing the runtime started survives either: no bwrap still using this data directory.
    let data = data_dir.path().to_string_lossy().to_string();
    eventually(Duration::from_secs(10), "no bwrap left", || async {
        processes_matching(&data).is_empty().then_some(())
    })
    .await;
}

fn waiting_reason(pod: &Value) -> Option<String> {
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"]
        .as_str()
        .map(String::from)
}

/// A Secret that does not exist yet: `CreateContainerConfigError` with the kubelet's message and
/// no process; once the Secret is created the container starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_secret_blocks_the_container_until_it_exists() {
    let (_sandbox, kubectl, _) = start_with(
        r#"apiVersion: v1
kind: Pod
metadata: {name: waits}
spec:
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo "token is $TOKEN"; exec sleep 1000']
    env: [{name: TOKEN, valueFrom: {secretKeyRef: {name: later, key: token}}}]
"#,
    )
    .await;
    let pod = eventually(
        Duration::from_secs(30),
        "CreateContainerConfigError",
        || async {
            let pod = pod_json(&kubectl, "waits").await?;
            (waiting_reason(&pod).as_deref() == Some("CreateContainerConfigError")).then_some(pod)
        },
    )
    .await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "secret \"later\" not found"
    );
    assert_eq!(pod["status"]["phase"], "Pending");
    let table = kubectl.ok(&["get", "pod", "waits"]).await;
    assert!(table.contains("CreateContainerConfigError"), "{table}");
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    assert!(
        processes_matching(&uid).is_empty(),
        "nothing of the pod runs"
    );

    kubectl
        .ok(&[
            "create",
            "secret",
            "generic",
            "later",
            "--from-literal=token=abc",
        ])
        .await;
    wait_ready(&kubectl, "waits").await;
    let logs = eventually(Duration::from_secs(10), "the log line", || async {
        let out = kubectl.run(&["logs", "waits"]).await;
        out.stdout.contains("token is abc").then_some(out.stdout)
    })
    .await;
    assert_eq!(logs.trim(), "token is abc");
}

/// A command that exits non-zero restarts with back-off (`CrashLoopBackOff`, lastState with the
/// exit code, `kubectl logs --previous`); a command that does not exist is a StartError (128).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_crash_loops_and_a_missing_one_cannot_start() {
    let (_sandbox, kubectl, _) = start_with(
        r#"apiVersion: v1
kind: Pod
metadata: {name: crashes}
spec:
  containers:
  - name: main
    image: postgres:16
    command: [sh, -c, 'echo "boom"; exit 3']
---
apiVersion: v1
kind: Pod
metadata: {name: no-such-command}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command: [no-such-command-anywhere]
"#,
    )
    .await;
    let pod = eventually(Duration::from_secs(30), "CrashLoopBackOff", || async {
        let pod = pod_json(&kubectl, "crashes").await?;
        let status = &pod["status"]["containerStatuses"][0];
        (waiting_reason(&pod).as_deref() == Some("CrashLoopBackOff")
            && status["restartCount"].as_u64() >= Some(1))
        .then_some(pod)
    })
    .await;
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 3);
    assert_eq!(status["lastState"]["terminated"]["reason"], "Error");
    assert_eq!(status["ready"], false);
    let previous = kubectl.ok(&["logs", "crashes", "--previous"]).await;
    assert_eq!(previous.trim(), "boom");

    let pod = eventually(Duration::from_secs(30), "StartError", || async {
        let pod = pod_json(&kubectl, "no-such-command").await?;
        (pod["status"]["phase"] == "Failed").then_some(pod)
    })
    .await;
    let terminated = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(terminated["reason"], "StartError");
    assert_eq!(terminated["exitCode"], 128);
    assert!(
        terminated["message"]
            .as_str()
            .is_some_and(|m| m.contains("executable file not found in $PATH")),
        "{terminated}"
    );
}

/// A first crash is restarted at once, as the kubelet restarts one (its back-off has nothing
/// recorded for the container yet); the second waits the back-off in CrashLoopBackOff. With a
/// back-off of a minute, a restart count of 1 within 20 s can only be the restart at once, and
/// a count still 1 while the container waits is the back-off held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_crash_restarts_at_once_and_the_next_waits_the_back_off() {
    let mut runtime = process_runtime();
    runtime.restart_backoff = Duration::from_secs(60);
    let sandbox = sandbox::Sandbox::start_with_runtime(
        sandbox::SandboxOptions::default(),
        sandbox::Runtime::Processes(runtime),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("sandbox starts");
    let kubectl = Kubectl::new(&sandbox.url());
    let spec =
        "  containers:\n  - name: main\n    image: postgres:16\n    command: [sh, -c, 'exit 3']\n";
    create(&kubectl, &pod_manifest("crashes", spec)).await;
    let pod = eventually(
        Duration::from_secs(20),
        "restarted once, then backing off",
        || async {
            let pod = pod_json(&kubectl, "crashes").await?;
            let restarts = pod["status"]["containerStatuses"][0]["restartCount"].as_u64();
            (restarts == Some(1) && waiting_reason(&pod).as_deref() == Some("CrashLoopBackOff"))
                .then_some(pod)
        },
    )
    .await;
    let status = &pod["status"]["containerStatuses"][0];
    assert_eq!(status["lastState"]["terminated"]["exitCode"], 3);
    assert!(
        status["state"]["waiting"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("back-off 1m0s")),
        "{status}"
    );
}

/// A failing readiness probe leaves the pod Running but not Ready (with Unhealthy events); a
/// failing liveness probe restarts the container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_probes_keep_a_pod_unready_or_restart_it() {
    let (_sandbox, kubectl, _) = start_with(
        r#"apiVersion: v1
kind: Pod
metadata: {name: probed}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: never-ready
    image: busybox
    command: [sleep, "1000"]
    readinessProbe: {exec: {command: ["false"]}, periodSeconds: 1, timeoutSeconds: 10}
  - name: not-alive
    image: busybox
    command: [sleep, "1000"]
    livenessProbe: {tcpSocket: {port: 9}, periodSeconds: 1, failureThreshold: 1}
"#,
    )
    .await;
    let pod = eventually(Duration::from_secs(60), "a liveness restart", || async {
        let pod = pod_json(&kubectl, "probed").await?;
        (pod["status"]["containerStatuses"][1]["restartCount"].as_u64() >= Some(1)).then_some(pod)
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Running");
    let statuses = &pod["status"]["containerStatuses"];
    assert_eq!(statuses[0]["ready"], false);
    assert_eq!(statuses[0]["restartCount"], 0);
    let ready = pod["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == "Ready").cloned())
        .expect("a Ready condition");
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("never-ready")),
        "{ready}"
    );
    let described = kubectl.ok(&["describe", "pod", "probed"]).await;
    assert!(described.contains("Readiness probe failed"), "{described}");
    assert!(
        described.contains("Container not-alive failed liveness probe, will be restarted"),
        "{described}"
    );
}

/// An exec probe runs inside the running container, as the kubelet's runtime runs it: it sees
/// the container's PID 1 as its `/proc/1`. In a jail of its own, `/proc/1` would be the probe's
/// own shell, and the pod would never be Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_probe_runs_inside_the_running_container() {
    let (_sandbox, kubectl, _) = start_with(
        r#"apiVersion: v1
kind: Pod
metadata: {name: entered}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: busybox
    command: [sleep, "1000"]
    readinessProbe:
      exec: {command: [sh, -c, '[ "$(cat /proc/1/comm)" = sleep ]']}
      periodSeconds: 1
"#,
    )
    .await;
    let pod = eventually(Duration::from_secs(60), "the pod Ready", || async {
        let pod = pod_json(&kubectl, "entered").await?;
        (pod["status"]["containerStatuses"][0]["ready"] == true).then_some(pod)
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Running");
    let described = kubectl.ok(&["describe", "pod", "entered"]).await;
    assert!(!described.contains("Readiness probe failed"), "{described}");
}

/// `postgres:notatag` cannot be pulled: ErrImagePull, then ImagePullBackOff, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_postgres_tag_cannot_be_pulled() {
    let spec = "  containers:\n  - {name: db, image: \"postgres:notatag\"}\n";
    let (_sandbox, kubectl, _) = start_with(&pod_manifest("bad-image", spec)).await;
    let pod = eventually(Duration::from_secs(30), "ImagePullBackOff", || async {
        let pod = pod_json(&kubectl, "bad-image").await?;
        (waiting_reason(&pod).as_deref() == Some("ImagePullBackOff")).then_some(pod)
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Pending");
    let described = kubectl.ok(&["describe", "pod", "bad-image"]).await;
    assert!(
        described.contains("Failed to pull image \"postgres:notatag\""),
        "{described}"
    );
    let logs = kubectl.run(&["logs", "bad-image"]).await;
    assert!(
        !logs.success && logs.stderr.contains("is waiting to start"),
        "{logs:?}"
    );
}

/// A container that ignores SIGTERM (a shell as PID 1 has no handler) is killed when the grace
/// period ends; the pod object goes only then, and its emptyDir with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_ignoring_sigterm_is_killed_after_the_grace_period() {
    let (_sandbox, kubectl, runtime) = start_with(
        r#"apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: [sh, -c, 'echo started > /scratch/marker; while true; do sleep 1; done']
    volumeMounts: [{name: scratch, mountPath: /scratch}]
  volumes: [{name: scratch, emptyDir: {}}]
"#,
    )
    .await;
    let pod = wait_ready(&kubectl, "stubborn").await;
    let uid = pod["metadata"]["uid"].as_str().expect("uid").to_string();
    let pod_dir: PathBuf = runtime.data_dir().join("pods").join(&uid);
    let marker = pod_dir.join("volumes/scratch/marker");
    eventually(Duration::from_secs(10), "the marker file", || async {
        marker.exists().then_some(())
    })
    .await;
    let out = kubectl
        .ok(&["delete", "pod", "stubborn", "--wait=false"])
        .await;
    assert!(out.contains("deleted"), "{out}");
    let terminating = pod_json(&kubectl, "stubborn").await;
    assert!(
        terminating.is_some_and(|p| !p["metadata"]["deletionTimestamp"].is_null()),
        "the pod stays Terminating while its process runs"
    );
    eventually(Duration::from_secs(30), "stubborn gone", || async {
        pod_json(&kubectl, "stubborn").await.is_none().then_some(())
    })
    .await;
    assert!(!pod_dir.exists(), "the pod's emptyDir is removed");
    assert!(
        processes_matching(&uid).is_empty(),
        "nothing of the pod runs"
    );
}

/// `kubectl delete --grace-period=1` overrides the pod's own 60 s: the object records 1 s and the
/// stubborn container is killed after it, long before the spec's grace period would end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_with_a_grace_period_overrides_the_pods_own() {
    let spec = "  terminationGracePeriodSeconds: 60\n  containers:\n  - {name: main, image: busybox, command: [sh, -c, 'while true; do sleep 1; done']}\n";
    let (_sandbox, kubectl, _) = start_with(&pod_manifest("hurried", spec)).await;
    wait_ready(&kubectl, "hurried").await;
    kubectl
        .ok(&[
            "delete",
            "pod",
            "hurried",
            "--grace-period=1",
            "--wait=false",
        ])
        .await;
    let terminating = pod_json(&kubectl, "hurried")
        .await
        .expect("still terminating");
    assert_eq!(
        terminating["metadata"]["deletionGracePeriodSeconds"], 1,
        "{terminating}"
    );
    eventually(
        Duration::from_secs(20),
        "hurried gone well before 60 s",
        || async { pod_json(&kubectl, "hurried").await.is_none().then_some(()) },
    )
    .await;
}

/// `Faults::crash_container` kills a running container with SIGKILL; it comes back per
/// `restartPolicy`, with exit code 137 in its last state. Simulated sandboxes refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_container_is_restarted_with_exit_code_137() {
    let spec = "  containers:\n  - {name: main, image: busybox, command: [sleep, \"1000\"]}\n";
    let (sandbox, kubectl, _) = start_with(&pod_manifest("victim", spec)).await;
    wait_ready(&kubectl, "victim").await;
    assert!(!sandbox
        .faults()
        .crash_container("default", "victim", "nope"));
    assert!(sandbox
        .faults()
        .crash_container("default", "victim", "main"));
    let pod = eventually(Duration::from_secs(30), "a restart", || async {
        let pod = pod_json(&kubectl, "victim").await?;
        let status = &pod["status"]["containerStatuses"][0];
        (status["restartCount"] == 1 && status["state"]["running"].is_object()).then_some(pod)
    })
    .await;
    let last = &pod["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 137, "{last}");
    let simulated = test_support::start_sandbox().await;
    assert!(!simulated
        .faults()
        .crash_container("default", "victim", "main"));
}

/// `Faults::power_cut` takes the whole node down: the API server refuses connections and every
/// pod's processes are gone at once; when the power is back the pod runs again in a container
/// started anew (a new `startedAt`, the restart count from 0, as a rebooted node's kubelet
/// counts). Simulated sandboxes cut nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cut_kills_every_pod_and_the_node_boots_them_again() {
    let spec = "  containers:\n  - {name: main, image: busybox, command: [sleep, \"4207\"]}\n";
    let (sandbox, kubectl, _) = start_with(&pod_manifest("powered", spec)).await;
    wait_ready(&kubectl, "powered").await;
    assert!(sandbox
        .faults()
        .crash_container("default", "powered", "main"));
    let before = eventually(Duration::from_secs(30), "a restart", || async {
        let pod = pod_json(&kubectl, "powered").await?;
        let status = &pod["status"]["containerStatuses"][0];
        (status["restartCount"] == 1 && status["state"]["running"].is_object())
            .then(|| status["state"]["running"]["startedAt"].clone())
    })
    .await;
    let cut = sandbox.faults().power_cut(Duration::from_secs(2)).await;
    assert_eq!(cut, 1);
    assert!(processes_matching("sleep 4207").is_empty());
    let address = sandbox.url().replace("http://", "");
    let refused = tokio::net::TcpStream::connect(&address).await;
    assert!(
        refused.is_err(),
        "the API server answered during the power cut"
    );
    let after = eventually(Duration::from_secs(30), "the pod running again", || async {
        let pod = pod_json(&kubectl, "powered").await?;
        let status = &pod["status"]["containerStatuses"][0];
        let started = &status["state"]["running"]["startedAt"];
        (started.is_string() && *started != before && status["ready"] == true).then(|| pod.clone())
    })
    .await;
    let container = &after["status"]["containerStatuses"][0];
    assert_eq!(container["restartCount"], 0, "{container}");
    assert!(!processes_matching("sleep 4207").is_empty());
    let simulated = test_support::start_sandbox().await;
    assert_eq!(simulated.faults().power_cut(Duration::ZERO).await, 0);
}

/// Losing a pod's node kills its processes (the postmaster is gone from the process table and
/// its address refuses psql) but leaves the pod Running with Ready False and no restart, as
/// the node lifecycle controller marks a pod on a node whose kubelet stopped reporting: its
/// Ready condition only, ContainersReady and the container's status as last reported; a
/// forced delete still removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_leaves_its_pod_running_unready_and_its_processes_dead() {
    let (sandbox, kubectl, runtime) = start().await;
    let ip = running_trusting_postgres(&kubectl, "stranded").await;
    let needle = format!("listen_addresses={ip}");
    assert!(!sandbox.faults().lose_node_for_pod("default", "nope"));
    assert!(sandbox.faults().lose_node_for_pod("default", "stranded"));
    eventually(Duration::from_secs(10), "no postmaster left", || async {
        processes_matching(&needle).is_empty().then_some(())
    })
    .await;
    assert!(psql(&runtime, &ip, "select 1").await.is_err());
    let lost = pod_json(&kubectl, "stranded").await.expect("the pod stays");
    assert_eq!(lost["status"]["phase"], "Running");
    let ready = lost["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Ready")
        .expect("a Ready condition")
        .clone();
    assert_eq!(ready["status"], "False", "{ready}");
    let container = &lost["status"]["containerStatuses"][0];
    assert_eq!(container["restartCount"], 0, "{container}");
    assert_eq!(container["ready"], true, "{container}");
    assert!(container["state"]["running"].is_object(), "{container}");
    let containers_ready = lost["status"]["conditions"]
        .as_array()
        .and_then(|all| all.iter().find(|c| c["type"] == "ContainersReady"))
        .map(|c| c["status"].clone());
    assert_eq!(containers_ready, Some(serde_json::json!("True")));
    kubectl
        .ok(&["delete", "pod", "stranded", "--force", "--grace-period=0"])
        .await;
    eventually(Duration::from_secs(30), "stranded gone", || async {
        pod_json(&kubectl, "stranded").await.is_none().then_some(())
    })
    .await;
}
