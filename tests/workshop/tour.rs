//! The one-command tour (`cargo run`, `src/bin/tour/main.rs`) runs to the end on its own
//! sandbox — steps 04 to 06 on real PostgreSQL there, or on simulated pods when asked — and
//! against a named API server writes only what it announced. WORKSHOP.md, "The whole workshop in one command".

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use postgres_operator::api::{object_path, PostgresCluster};

/// Only a bound for a hung tour: steps 04 to 06 start real PostgreSQL servers (and restore
/// one from a backup) on a machine that may be busy with other tests. How long it took is printed, not asserted.
const TOUR_DEADLINE: Duration = Duration::from_secs(300);

/// The tour binary, isolated from any real cluster configuration on this machine.
fn tour_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tour"));
    // Under `cargo run` the tour builds the sandbox binary first; cargo test already built it.
    command.env_remove("CARGO");
    command
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .env_remove("KUBE_SERVER")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Run to completion, failing if it outlives the deadline. Blocking: call via spawn_blocking
/// when a sandbox in this process must keep serving meanwhile.
fn run_with_deadline(mut command: Command) -> (Output, Duration) {
    let started = Instant::now();
    let (output, killed) = test_support::run_with_deadline(&mut command, TOUR_DEADLINE);
    assert!(!killed, "the tour ran longer than {TOUR_DEADLINE:?}");
    (output, started.elapsed())
}

/// Every `expected` line is found in `text`, in this order, as a substring of some line.
fn assert_in_order(text: &str, expected: &[&str]) {
    let mut lines = text.lines();
    for wanted in expected {
        assert!(
            lines.any(|line| line.contains(wanted)),
            "missing (in order) {wanted:?} in:\n{text}"
        );
    }
}

/// The example's `spec.backup` as the operator prints it.
const BACKUP: &str = "backup: {intervalMinutes: 60, keep: 2, storageSize: 256Mi}";

/// The lines of steps 01-03, the same on every runtime.
fn steps_01_to_03(key: &str) -> Vec<String> {
    [
        "== Step 01: kubectl apply -f kube/crd.yaml",
        "CustomResourceDefinition is Established",
        "== Step 02: cargo run --bin stage02",
        "Finding existing clusters...",
        "Watch version: ",
        "Controller initialised",
        "Starting at watchVersion ",
        "== Step 03: cargo run --bin stage03",
        "== Act 1: kubectl create -f kube/example-postgres-cluster.yaml",
        "PostgresCluster event: ADDED default/example-postgresql-cluster {size: 3, version: 16, paused: false}",
        &format!("{key} creating cluster with Spec {{size: 3, version: 16, paused: false}}, Status <none>"),
        &format!("{key} PLACEHOLDER: Launch seed Postgres node!"),
        &format!("{key} PLACEHOLDER: Start cluster!"),
        "== Interlude: the reconcile timer fires every 2 s",
        &format!("{key} Running: [], pending: []"),
        &format!("{key} All Postgres pods are dead. Trying to recover from a previous backup"),
        &format!("{key} PLACEHOLDER: disaster recovery!"),
        "== Act 2: kubectl patch pgc example-postgresql-cluster",
        "PostgresCluster event: MODIFIED",
        &format!("{key} spec update: from {{size: 3, version: 16, paused: false}} to {{size: 5, version: 16, paused: false}}"),
        "== Act 3: kubectl delete pgc example-postgresql-cluster",
        "PostgresCluster event: DELETED",
        &format!("{key} cluster is deleted by the user"),
        &format!("{key} cluster task ended"),
        "== Curtain for step 03: stopping its operator",
        "operator stopped (0 cluster tasks left to stop)",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Steps 04 to 06 up to the point where real and simulated pods part: the operator's real
/// lines. `pods_note`: what the tour says about the pods.
fn steps_04_05_until_the_failover(key: &str, pods_note: &str) -> Vec<String> {
    [
        "== Steps 04 to 06: cargo run --bin stage06",
        pods_note,
        "Watching the clusters' pods...",
        "Starting at watchVersion ",
        "== Act 4: kubectl create -f kube/example-postgres-cluster.yaml, with spec.backup {storageSize: 256Mi, keep: 2} added",
        &format!("{key} created Secret example-postgresql-cluster-credentials"),
        &format!("{key} created PersistentVolumeClaim example-postgresql-cluster-backups"),
        &format!("{key} created Service example-postgresql-cluster-primary"),
        &format!("{key} Launching seed Postgres node example-postgresql-cluster-"),
        &format!("{key} Adding replica example-postgresql-cluster-"),
        "== 3 of 3 members ready, example-postgresql-cluster-",
        "== Act 5: kubectl scale pgc example-postgresql-cluster --replicas 4",
        &format!("{key} spec update: from {{size: 3, version: 16, paused: false, {BACKUP}}} to {{size: 4, version: 16, paused: false, {BACKUP}}}"),
        &format!("{key} Adding replica example-postgresql-cluster-"),
        "== 4 of 4 members ready",
    ]
    .map(str::to_string)
    .to_vec()
}

/// Run the tour with `args` to its end: exit 0, a quiet stderr; its stdout.
fn run_tour_to_the_end(args: &[&str]) -> String {
    let (output, took) = run_with_deadline(tour_command(args));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        output.status
    );
    assert!(
        stderr.trim().is_empty(),
        "stderr is quiet by default:\n{stderr}"
    );
    println!("tour {args:?} took {:.1} s", took.as_secs_f64());
    stdout
}

/// `cargo run` with no flags: a sandbox of its own (a child process) running pods as real
/// PostgreSQL, steps 01-03 with the operator's own lines, then steps 04 to 06 for real: a seed
/// and its replicas, a row written through the primary Service, the primary deleted, a replica
/// promoted, the row read back; a base backup, a second row archived, every pod deleted, the
/// cluster restored from the backup with both rows. Fails, saying so, where the sandbox cannot
/// run real pods.
#[test]
fn tour_plays_the_workshop_on_a_sandbox_of_its_own() {
    let stdout = run_tour_to_the_end(&[]);
    assert!(
        stdout.contains("   pods run as processes: PostgreSQL "),
        "the tour's steps 04 to 06 play on real PostgreSQL servers, which this machine's sandbox \
         cannot run (install PostgreSQL and bubblewrap: .ci/install-test-deps); it said:\n{stdout}"
    );
    let key = "[default/example-postgresql-cluster]";
    let mut expected = vec!["== The stage: a sandbox API server at https://127.0.0.1:".to_string()];
    expected.extend(steps_01_to_03(key));
    expected.extend(steps_04_05_until_the_failover(
        key,
        "   The pods are real PostgreSQL servers; the tour's SQL goes through the primary Service with this host's ",
    ));
    expected.extend(
        [
            "== Act 6: PGPASSWORD=... psql -h 127.",
            "   written: answered by 127.",
            "== Act 7: kubectl delete pod example-postgresql-cluster-",
            &format!("{key} Primary lost: example-postgresql-cluster-"),
            &format!("{key} Promoting example-postgresql-cluster-"),
            "is the new primary, ready",
            "== Act 8: PGPASSWORD=... psql -h 127.",
            "   read back: \"written before the failover\", answered by 127.",
            "== Step 06: backups and disaster recovery",
            "== Act 9: kubectl annotate pgc example-postgresql-cluster workshop.example.com/backup-now=",
            &format!("{key} Backing up: example-postgresql-cluster-backup-"),
            &format!("{key} Backup "),
            "== status.lastBackup: ",
            "== Act 10: PGPASSWORD=... psql -h 127.",
            "   written: answered by 127.",
            "-c \"SELECT pg_walfile_name(pg_switch_wal())\"",
            " archived to example-postgresql-cluster-backups ",
            "== Act 11: kubectl delete pods -l workshop.example.com/cluster=example-postgresql-cluster",
            "pod \"example-postgresql-cluster-",
            &format!("{key} All Postgres pods are dead. Trying to recover from a previous backup"),
            &format!("{key} Launching seed Postgres node restoring base backup "),
            "   status.phase: Running -> Recovering",
            &format!("{key} Restored: example-postgresql-cluster-"),
            "   status.phase: Recovering -> Running",
            "== Restored in ",
            "== Act 12: PGPASSWORD=... psql -h 127.",
            "   read back: \"written before the failover\", \"written after the base backup\", answered by 127.",
            "== 4 of 4 members ready again",
            "== Act 13: kubectl delete pgc example-postgresql-cluster",
            &format!("{key} cluster is deleted by the user"),
            "== Curtain: stopping the step-06 operator",
            "The tour took ",
        ]
        .map(str::to_string),
    );
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_in_order(&stdout, &expected);
    // The first row was written on the primary and read back from the promoted replica: two
    // pods. Both rows were read back from the seed that restored the backup: a third.
    let answered_by = |prefix: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(prefix))
            .and_then(|rest| rest.split(" (pod ").nth(1))
            .map(|pod| pod.trim_end_matches(')').to_string())
    };
    let writer = answered_by("   written: answered by ").expect("the writer is a pod");
    let reader = answered_by("   read back: \"written before the failover\", answered by ")
        .expect("the reader is a pod");
    assert_ne!(writer, reader, "the row was read back from the new primary");
    let restored = answered_by(
        "   read back: \"written before the failover\", \"written after the base backup\", answered by ",
    )
    .expect("the restored primary is a pod");
    assert!(
        restored != writer && restored != reader,
        "both rows were read back from the restored seed, a new pod: {restored}"
    );
    // What the restore replayed: the base backup it named, and the segment archived after it.
    let restored_from = format!("{key} Launching seed Postgres node restoring base backup ");
    let newest = stdout
        .lines()
        .find_map(|line| line.strip_prefix("== status.lastBackup: "))
        .and_then(|rest| rest.split(' ').next())
        .expect("the tour names the backup");
    assert!(
        stdout.contains(&format!("{restored_from}{newest} ")),
        "the restore starts from the backup asked for, {newest}:\n{stdout}"
    );
}

/// `cargo run -- --sandbox-runtime simulated`: the same tour on simulated pods says so, skips
/// the SQL, shows the failover stop at its first question to Postgres, skips the backup and the
/// restore, and still ends cleanly.
#[test]
fn tour_on_simulated_pods_says_so_and_skips_the_sql() {
    let stdout = run_tour_to_the_end(&["--sandbox-runtime", "simulated"]);
    let key = "[default/example-postgresql-cluster]";
    let mut expected = vec![
        "== The stage: a sandbox API server at https://127.0.0.1:".to_string(),
        "   no containers run here: pods get a simulated status only.".to_string(),
    ];
    expected.extend(steps_01_to_03(key));
    expected.extend(steps_04_05_until_the_failover(
        key,
        "   The pods are simulated: the operator acts all the same, but no Postgres runs in them, so the SQL acts are skipped",
    ));
    expected.extend(
        [
            "== Act 6: (skipped: write a row through the Service example-postgresql-cluster-primary; the pods are simulated",
            "== Act 7: kubectl delete pod example-postgresql-cluster-",
            &format!("{key} Primary lost: example-postgresql-cluster-"),
            &format!("{key} cannot ask example-postgresql-cluster-"),
            "== The failover stops here: a simulated pod runs no Postgres",
            "== Act 8: (skipped: read the row back",
            "== Acts 9 to 12: (skipped: step 06's base backup, a second row archived, every pod deleted and the cluster restored",
            "== Act 13: kubectl delete pgc example-postgresql-cluster",
            "== Curtain: stopping the step-06 operator",
            "The tour took ",
        ]
        .map(str::to_string),
    );
    let expected: Vec<&str> = expected.iter().map(String::as_str).collect();
    assert_in_order(&stdout, &expected);
    assert!(
        !stdout.contains("Promoting ") && !stdout.contains("Restored: "),
        "nothing is promoted or restored on simulated pods:\n{stdout}"
    );
}

/// Pointed at an API server (`--server`), the tour first says what it will do, then its writes
/// are exactly those: the CRD (missing here), the example object, its resize and its deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tour_against_a_named_server_writes_only_what_it_announces() {
    let sandbox = test_support::start_sandbox().await;
    let url = sandbox.url();
    let (output, _) =
        tokio::task::spawn_blocking(move || run_with_deadline(tour_command(&["--server", &url])))
            .await
            .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_in_order(
        &stdout,
        &[
            &format!("== The stage: the API server at {}", sandbox.url()),
            "register the CustomResourceDefinition postgresclusters.workshop.example.com if it is missing",
            "create the PostgresCluster default/example-postgresql-cluster, resize it, and delete it.",
            "Nothing else is created",
            "Steps 04 to 06 (their operator starts pods) play on the tour's own sandbox only",
            "== Act 3: kubectl delete pgc example-postgresql-cluster",
            "== Curtain: stopping the operator, as SIGTERM would",
        ],
    );
    let writes: Vec<(String, String, String)> = sandbox
        .requests()
        .into_iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .map(|r| (r.verb, r.resource, r.name))
        .collect();
    let expected = [
        // Once: the operator's own ensure finds it up to date and writes nothing.
        ("create", "customresourcedefinitions", ""),
        ("create", "postgresclusters", ""),
        ("patch", "postgresclusters", "example-postgresql-cluster"),
        ("delete", "postgresclusters", "example-postgresql-cluster"),
    ]
    .map(|(verb, resource, name)| (verb.to_string(), resource.to_string(), name.to_string()));
    assert_eq!(writes, expected);
    sandbox.shutdown().await;
}

/// If the example object already exists on the named server, the tour leaves it alone and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tour_refuses_to_touch_an_existing_example() {
    let sandbox = test_support::start_sandbox().await;
    let client = test_support::plain_client(&sandbox.url());
    test_support::register_crd(&client).await;
    let example = serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": "example-postgresql-cluster"},
        "spec": {"size": 2, "version": "16.4"}
    });
    let _: serde_json::Value = client
        .create(
            &postgres_operator::api::collection_path("default"),
            &example,
        )
        .await
        .unwrap();

    let url = sandbox.url();
    let (output, _) =
        tokio::task::spawn_blocking(move || run_with_deadline(tour_command(&["--server", &url])))
            .await
            .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("already exists; the tour will not touch it"),
        "{stderr}"
    );
    let kept: PostgresCluster = client
        .get(&object_path("default", "example-postgresql-cluster"))
        .await
        .unwrap();
    assert_eq!((kept.spec.size, kept.spec.version.as_str()), (2, "16.4"));
    sandbox.shutdown().await;
}

/// A flag the tour does not know is a usage error (exit 2) naming the flag.
#[test]
fn tour_rejects_unknown_flags() {
    let (output, _) = run_with_deadline(tour_command(&["--frobnicate"]));
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--frobnicate"));
}

/// Stopped half-way with SIGTERM (here while waiting for a 60 s tick), the tour deletes the
/// example object it created, says so, and exits 0 (SIGTERM is a normal stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tour_interrupted_half_way_removes_its_example() {
    use std::io::{BufRead, BufReader};
    let sandbox = test_support::start_sandbox().await;
    let url = sandbox.url();
    let (code, stdout) = tokio::task::spawn_blocking(move || {
        let mut child = tour_command(&["--server", &url, "--reconcile-interval", "60"])
            .spawn()
            .expect("tour starts");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = sender.send(line);
            }
        });
        let mut seen = Vec::new();
        let deadline = Instant::now() + TOUR_DEADLINE;
        while !seen.iter().any(|l: &String| l.starts_with("== Interlude")) {
            assert!(
                Instant::now() < deadline,
                "no interlude:\n{}",
                seen.join("\n")
            );
            if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
                seen.push(line);
            }
        }
        let killed = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        // The rest of stdout, up to its end when the tour exited.
        seen.extend(lines.iter());
        (status.code(), seen.join("\n"))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains(
            "== Stopped half-way: deleted the PostgresCluster default/example-postgresql-cluster the tour had created"
        ),
        "{stdout}"
    );
    let client = test_support::plain_client(&sandbox.url());
    let gone = client
        .get::<serde_json::Value>(&object_path("default", "example-postgresql-cluster"))
        .await;
    assert_eq!(
        gone.unwrap_err().status_code(),
        Some(404),
        "the example was left behind"
    );
    sandbox.shutdown().await;
}

/// Pointed at a namespace that does not exist, the tour writes nothing and says how to create it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tour_in_a_missing_namespace_says_how_to_create_it() {
    let sandbox = test_support::start_sandbox().await;
    let url = sandbox.url();
    let (output, _) = tokio::task::spawn_blocking(move || {
        run_with_deadline(tour_command(&["--server", &url, "-n", "scratch"]))
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("namespace \"scratch\" does not exist")
            && stderr.contains("hint: create it (`kubectl create namespace scratch`)"),
        "{stderr}"
    );
    let writes = sandbox
        .requests()
        .into_iter()
        .filter(|r| !matches!(r.verb.as_str(), "get" | "list" | "watch"))
        .count();
    assert_eq!(
        writes, 0,
        "nothing is written before the namespace is checked"
    );
    sandbox.shutdown().await;
}
