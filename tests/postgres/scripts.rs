//! The shell inside the stage-04 pod manifests, run with `sh` on this machine: the probes'
//! reading of `pg_isready`'s exit codes, the clone init container keeping a PGDATA that
//! already holds a database, and the postgres container's start script starting a primary that
//! crashed in recovery. Fast: a stand-in `pg_isready` on PATH plays the server's answers.
//!
//! WORKSHOP.md, step 04. Run: `cargo test -p postgres-operator --test postgres scripts::`.

use std::path::Path;
use std::process::{Command, Output};

use postgres_operator::api::PostgresCluster;
use postgres_operator::failover::manifests::{member_pod as pod, DEFAULT_AGENT_IMAGE};
use postgres_operator::postgres::manifests::{Role, CLONE_CONTAINER};
use serde_json::Value;

fn replica_pod() -> Value {
    let mut cluster = PostgresCluster::new("default", "db", test_support::cluster_spec(2));
    cluster.metadata.uid = "uid-db".into();
    pod(&cluster, Role::Replica, DEFAULT_AGENT_IMAGE)
}

fn argv(command: &Value) -> Vec<String> {
    command
        .as_array()
        .expect("an argv")
        .iter()
        .map(|a| a.as_str().expect("a string").to_string())
        .collect()
}

/// Write an executable shell script `dir/name` running `body`. A child `sh` writes it, not this
/// process: a file this process had open for writing could be inherited by a child another test
/// thread forks at that moment, and exec'ing the script would then fail with "Text file busy"
/// (ETXTBSY) until that child execs.
fn write_tool(dir: &Path, name: &str, body: &str) {
    let status = Command::new("sh")
        .args([
            "-c",
            "printf '#!/bin/sh\\n%s\\n' \"$2\" > \"$1\" && chmod 755 \"$1\"",
        ])
        .args(["sh", &dir.join(name).to_string_lossy(), body])
        .status()
        .expect("sh runs");
    assert!(status.success(), "writing {name}");
}

/// A directory holding a `pg_isready` that records its arguments and exits with `code`, and
/// a `pg_basebackup` that fails loudly (the tests below must never reach it).
fn fake_tools(dir: &Path, code: i32) {
    write_tool(
        dir,
        "pg_isready",
        &format!("echo \"$@\" >> \"$(dirname \"$0\")/calls\"; exit {code}"),
    );
    write_tool(
        dir,
        "pg_basebackup",
        "echo pg_basebackup must not run >&2; exit 99",
    );
}

fn run(argv: &[String], tools: &Path, envs: &[(&str, &str)]) -> Output {
    let path = format!(
        "{}:{}",
        tools.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(&argv[0])
        .args(&argv[1..])
        .env("PATH", path)
        .envs(envs.iter().copied())
        .output()
        .expect("sh runs")
}

/// The command of the replica's clone init container.
fn clone_command() -> Vec<String> {
    let pod = replica_pod();
    let clone = pod["spec"]["initContainers"]
        .as_array()
        .and_then(|init| init.iter().find(|c| c["name"] == CLONE_CONTAINER))
        .expect("a clone init container");
    argv(&clone["command"])
}

/// The clone init container `clone` of pod `db-abcde`, cloning from `db-primary` into `pgdata`.
fn run_clone(clone: &[String], tools: &Path, pgdata: &Path) -> Output {
    let pgdata = pgdata.to_str().expect("utf-8");
    let envs = [
        ("PGDATA", pgdata),
        ("PRIMARY_HOST", "db-primary"),
        ("POD_NAME", "db-abcde"),
    ];
    run(clone, tools, &envs)
}

/// The startup probe counts exit 0 (accepting) and 1 (rejecting: replaying WAL, starting,
/// stopping) as alive at once, and 2 (no response) and 3 (no attempt) as dead once it has asked
/// for 2 s (20 times, 0.1 s apart); it asks 127.0.0.1:5432.
/// (Liveness is the agent's `/livez`, which reads pg_isready the same way:
/// `agent::tests::the_kubelet_reads_200_or_503_with_the_reason`.)
#[test]
fn startup_counts_rejecting_connections_as_alive() {
    let pod = replica_pod();
    let container = &pod["spec"]["containers"][0];
    let command = argv(&container["startupProbe"]["exec"]["command"]);
    for (code, alive) in [(0, true), (1, true), (2, false), (3, false)] {
        let tools = tempfile::tempdir().expect("tempdir");
        fake_tools(tools.path(), code);
        let output = run(&command, tools.path(), &[]);
        assert_eq!(
            output.status.success(),
            alive,
            "with pg_isready exiting {code}: {output:?}"
        );
        let calls = std::fs::read_to_string(tools.path().join("calls")).expect("called");
        let asked: Vec<&str> = calls.lines().collect();
        assert_eq!(asked.len(), if alive { 1 } else { 20 }, "{calls}");
        assert!(
            asked.iter().all(|a| *a == "-q -h 127.0.0.1 -p 5432"),
            "{calls}"
        );
    }
}

/// A postmaster that listens while the startup probe waits (no answer twice, then accepting)
/// passes that one probe: a restarted container is started as soon as postgres is there.
#[test]
fn startup_passes_as_soon_as_the_postmaster_listens() {
    let pod = replica_pod();
    let command = argv(&pod["spec"]["containers"][0]["startupProbe"]["exec"]["command"]);
    let tools = tempfile::tempdir().expect("tempdir");
    write_tool(
        tools.path(),
        "pg_isready",
        "calls=\"$(dirname \"$0\")/calls\"; echo x >> \"$calls\"; [ $(wc -l < \"$calls\") -ge 3 ] || exit 2",
    );
    let output = run(&command, tools.path(), &[]);
    assert!(output.status.success(), "{output:?}");
    let calls = std::fs::read_to_string(tools.path().join("calls")).expect("called");
    assert_eq!(calls.lines().count(), 3);
}

/// A clone init container that finds a database in PGDATA (the pod restarted, its emptyDir
/// kept) exits 0 at once: no waiting for the primary, no pg_basebackup over its data.
#[test]
fn the_clone_keeps_an_existing_database() {
    let clone = clone_command();
    let data = tempfile::tempdir().expect("tempdir");
    let pgdata = data.path().join("pgdata");
    std::fs::create_dir(&pgdata).expect("pgdata");
    std::fs::write(pgdata.join("PG_VERSION"), "16\n").expect("PG_VERSION");
    std::fs::write(pgdata.join("marker"), "mine").expect("marker");
    let tools = tempfile::tempdir().expect("tempdir");
    // A primary that never answers: the script must not even ask.
    fake_tools(tools.path(), 2);
    let output = run_clone(&clone, tools.path(), &pgdata);
    assert!(output.status.success(), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("already holds a database"),
        "{output:?}"
    );
    assert!(!tools.path().join("calls").exists(), "pg_isready was run");
    assert_eq!(
        std::fs::read_to_string(pgdata.join("marker"))
            .ok()
            .as_deref(),
        Some("mine")
    );
}

/// A clone interrupted half-way left only `PGDATA.partial`: the next run removes it and starts
/// over (here it then waits for the primary, which this test's stand-in never lets it reach,
/// so the script is stopped after its first wait).
#[test]
fn an_interrupted_clone_starts_over() {
    let clone = clone_command();
    let data = tempfile::tempdir().expect("tempdir");
    let pgdata = data.path().join("pgdata");
    let partial = data.path().join("pgdata.partial");
    std::fs::create_dir(&partial).expect("partial");
    std::fs::write(partial.join("PG_VERSION"), "16\n").expect("half a copy");
    let tools = tempfile::tempdir().expect("tempdir");
    fake_tools(tools.path(), 2);
    // `sleep` that ends the script instead of waiting: proves it got to the wait loop.
    write_tool(tools.path(), "sleep", "exit 42");
    let output = run_clone(&clone, tools.path(), &pgdata);
    assert_eq!(output.status.code(), Some(42), "{output:?}");
    assert!(!partial.exists(), "the half copy was removed");
    assert!(!pgdata.exists(), "nothing claims to be a database");
    let calls = std::fs::read_to_string(tools.path().join("calls")).expect("pg_isready ran");
    assert_eq!(calls.trim(), "-q -h db-primary -p 5432");
}

/// The postgres container's command and arguments, as the kubelet joins them.
fn start_argv() -> Vec<String> {
    let pod = replica_pod();
    let container = &pod["spec"]["containers"][0];
    let mut all = argv(&container["command"]);
    all.extend(argv(&container["args"]));
    all
}

/// The start script in a PGDATA whose control file says `state` (None: an empty PGDATA, a
/// first start) and holding the file `signal` if given, with a `pg_controldata` that says so and a `docker-entrypoint.sh` that records
/// its arguments: those arguments, whether the script wrote `standby.signal`, and what the script
/// said.
fn start_in(state: Option<&str>, signal: Option<&str>) -> (Vec<String>, bool, String) {
    let data = tempfile::tempdir().expect("tempdir");
    let pgdata = data.path().join("pgdata");
    std::fs::create_dir(&pgdata).expect("pgdata");
    if let Some(state) = state {
        std::fs::write(pgdata.join("PG_VERSION"), "16\n").expect("PG_VERSION");
        std::fs::write(pgdata.join("state"), state).expect("the state");
    }
    if let Some(signal) = signal {
        std::fs::write(pgdata.join(signal), "").expect("a signal file");
    }
    let tools = tempfile::tempdir().expect("tempdir");
    write_tool(
        tools.path(),
        "docker-entrypoint.sh",
        "for a in \"$@\"; do echo \"$a\"; done > \"$(dirname \"$0\")/args\"",
    );
    // As PostgreSQL 16 prints it, in English only when LC_ALL=C (it is translated otherwise).
    write_tool(
        tools.path(),
        "pg_controldata",
        "[ \"$LC_ALL\" = C ] || exit 9; echo 'pg_control version number:            1300'; \
         echo \"Database cluster state:               $(cat \"$1/state\")\"",
    );
    let output = run(
        &start_argv(),
        tools.path(),
        &[
            ("PGDATA", pgdata.to_str().expect("utf-8")),
            ("LC_ALL", "de_DE.UTF-8"),
        ],
    );
    assert!(output.status.success(), "{output:?}");
    let args = std::fs::read_to_string(tools.path().join("args")).expect("the entrypoint ran");
    (
        args.lines().map(String::from).collect(),
        signal.is_none() && pgdata.join("standby.signal").exists(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A primary that did not stop cleanly (its control file still says `in production`) starts as
/// a standby of nothing: `standby.signal` written, `primary_conninfo` emptied. A clean stop, a
/// standby or a restore (`in archive recovery`, or a signal file beside a base backup's copied
/// control file), and a first start run the entrypoint as asked.
#[test]
fn a_primary_that_crashed_starts_in_recovery_and_nothing_else_does() {
    let asked: Vec<String> = start_argv().into_iter().skip(4).collect();
    assert_eq!(asked[0], "postgres");

    let (args, standby, said) = start_in(Some("in production"), None);
    assert!(standby, "standby.signal written");
    let mut wanted = asked.clone();
    wanted.extend(["-c".to_string(), "primary_conninfo=".to_string()]);
    assert_eq!(args, wanted);
    assert!(said.contains("did not stop cleanly"), "{said}");

    // A fresh base backup's control file says `in production` too: a replica's clone has
    // `standby.signal`, a restore's `recovery.signal`.
    for (state, signal) in [
        (Some("shut down"), None),
        (Some("shut down in recovery"), None),
        (Some("in archive recovery"), None),
        (Some("in production"), Some("standby.signal")),
        (Some("in production"), Some("recovery.signal")),
        (None, None),
    ] {
        let (args, standby, said) = start_in(state, signal);
        assert_eq!(args, asked, "{state:?} {signal:?}");
        assert!(!standby, "{state:?} {signal:?}");
        assert!(said.is_empty(), "{state:?} {signal:?}: {said}");
    }
}
