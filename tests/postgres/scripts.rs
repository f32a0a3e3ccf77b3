//! The shell inside the stage-04 pod manifests, run with `sh` on this machine: the probes'
//! reading of `pg_isready`'s exit codes, and the clone init container keeping a PGDATA that
//! already holds a database. Fast: a stand-in `pg_isready` on PATH plays the server's answers.
//!
//! WORKSHOP.md, step 04. Run: `cargo test -p postgres-operator --test postgres scripts::`.

use std::path::Path;
use std::process::{Command, Output};

use postgres_operator::api::PostgresCluster;
use postgres_operator::postgres::manifests::{pod, Role};
use serde_json::Value;

fn replica_pod() -> Value {
    let mut cluster = PostgresCluster::new("default", "db", test_support::cluster_spec(2));
    cluster.metadata.uid = "uid-db".into();
    pod(&cluster, Role::Replica)
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
    argv(&replica_pod()["spec"]["initContainers"][0]["command"])
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

/// Startup and liveness count exit 0 (accepting) and 1 (rejecting: replaying WAL, starting,
/// stopping) as alive, and 2 (no response) and 3 (no attempt) as dead; both ask 127.0.0.1:5432.
#[test]
fn liveness_and_startup_count_rejecting_connections_as_alive() {
    let pod = replica_pod();
    let container = &pod["spec"]["containers"][0];
    for probe in ["startupProbe", "livenessProbe"] {
        let command = argv(&container[probe]["exec"]["command"]);
        for (code, alive) in [(0, true), (1, true), (2, false), (3, false)] {
            let tools = tempfile::tempdir().expect("tempdir");
            fake_tools(tools.path(), code);
            let output = run(&command, tools.path(), &[]);
            assert_eq!(
                output.status.success(),
                alive,
                "{probe} with pg_isready exiting {code}: {output:?}"
            );
            let calls = std::fs::read_to_string(tools.path().join("calls")).expect("called");
            assert_eq!(calls.trim(), "-q -h 127.0.0.1 -p 5432", "{probe}");
        }
    }
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
