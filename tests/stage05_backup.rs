//! Stage 05 end to end: backups and disaster recovery with real PostgreSQL on the sandbox's
//! process runtime, driven by real kubectl — rows, a base backup, more rows archived, every pod
//! deleted at once, the restore; a new cluster restored to a target time; a corrupt backup.
//!
//! WORKSHOP.md, step 05. Needs PostgreSQL, bubblewrap, kubectl, and the sandbox's
//! PersistentVolumeClaims. The timings (all pods lost → ready primary, backup duration and size)
//! are printed, not asserted: `cargo test --test stage05_backup -- --nocapture`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Kubectl;
use postgres_operator::client::Client;
use postgres_operator::config::Config;
use postgres_operator::postgres::manifests::{psql_argv, POSTGRES_CONTAINER};
use postgres_operator::postgres::plan::Delays;
use postgres_operator::postgres::{run_postgres_operator, PostgresOptions};
use postgres_operator::story::Reporter;
use sandbox::{Runtime, Sandbox, SandboxOptions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(300);

struct World {
    _sandbox: Sandbox,
    kubectl: Kubectl,
    lines: Arc<Mutex<Vec<String>>>,
}

impl World {
    async fn start() -> World {
        let sandbox = Sandbox::start_with_runtime(
            SandboxOptions::default(),
            Runtime::Processes(common::process_runtime()),
            CancellationToken::new(),
        )
        .await
        .expect("sandbox starts");
        let client = Client::new(Config::from_url(&sandbox.url()).expect("URL")).expect("client");
        let options = PostgresOptions {
            reconcile_interval: Duration::from_secs(1),
            delays: Delays {
                failover_after: Duration::from_secs(2),
                member_lost_after: Duration::from_secs(30),
            },
            expectation_timeout: Duration::from_secs(10),
            backups: true,
        };
        let (reporter, mut receiver) = Reporter::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = Arc::clone(&lines);
        tokio::spawn(async move {
            while let Some(line) = receiver.recv().await {
                println!("operator: {line}");
                collected.lock().expect("lines").push(line.to_string());
            }
        });
        tokio::spawn(run_postgres_operator(
            client,
            options,
            reporter,
            CancellationToken::new(),
        ));
        World {
            kubectl: Kubectl::new(&sandbox.url()),
            _sandbox: sandbox,
            lines,
        }
    }

    async fn create(&self, manifest: Value) {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        std::fs::write(file.path(), manifest.to_string()).expect("manifest written");
        let path = file.path().to_string_lossy().to_string();
        common::eventually(DEADLINE, "kubectl to create the cluster", || async {
            self.kubectl
                .run(&["create", "-f", &path])
                .await
                .success
                .then_some(())
        })
        .await;
    }

    async fn cluster(&self, name: &str) -> Value {
        let out = self.kubectl.ok(&["get", "pgc", name, "-o", "json"]).await;
        serde_json::from_str(&out).expect("kubectl prints JSON")
    }

    /// The members' names, and the primary once it is ready and recorded with `ready` members.
    async fn wait_healthy(&self, name: &str, size: usize) -> String {
        common::eventually(
            DEADLINE,
            &format!("{name}: {size} ready members"),
            || async {
                let status = self.cluster(name).await["status"].clone();
                let ready = status["readyInstances"] == size && status["phase"] == "Running";
                ready
                    .then(|| status["primary"].as_str().map(str::to_string))
                    .flatten()
            },
        )
        .await
    }

    async fn psql(&self, pod: &str, sql: &str) -> String {
        let argv = psql_argv(sql);
        let mut args = vec!["exec", pod, "-c", POSTGRES_CONTAINER, "--"];
        args.extend(argv.iter().map(String::as_str));
        self.kubectl.ok(&args).await.trim().to_string()
    }

    /// Switch the primary to a new WAL segment and wait until the finished one is archived.
    async fn archive_now(&self, primary: &str) {
        let switched = self
            .psql(primary, "SELECT pg_walfile_name(pg_switch_wal())")
            .await;
        common::eventually(DEADLINE, &format!("{switched} archived"), || async {
            let last = self
                .psql(
                    primary,
                    "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
                )
                .await;
            (last.as_str() >= switched.as_str()).then_some(())
        })
        .await;
    }

    fn said(&self, part: &str) -> bool {
        self.lines
            .lock()
            .expect("lines")
            .iter()
            .any(|l| l.contains(part))
    }
}

fn cluster_manifest(name: &str, spec: Value) -> Value {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// Rows before and after a base backup survive losing every pod at once; a new cluster restored
/// to a time between two batches holds exactly the first; a corrupt base backup fails the
/// restore with the file named and leaves the backups as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_lost_entirely_comes_back_from_its_backups() {
    let world = World::start().await;
    world
        .create(cluster_manifest(
            "db",
            serde_json::json!({"size": 2, "version": "16", "backup": {"keep": 2}}),
        ))
        .await;
    let primary = world.wait_healthy("db", 2).await;
    world
        .psql(&primary, "CREATE TABLE t (batch text, n int)")
        .await;
    world
        .psql(
            &primary,
            "INSERT INTO t SELECT 'a', generate_series(1, 1000)",
        )
        .await;

    // A base backup: the first is taken as soon as the cluster is steady.
    let started = Instant::now();
    let backup = common::eventually(DEADLINE, "status.lastBackup", || async {
        let status = world.cluster("db").await["status"].clone();
        status["lastBackup"]["name"].as_str().map(str::to_string)
    })
    .await;
    println!(
        "first base backup {backup} in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Batch b, archived; then a moment; then batch c, archived.
    world
        .psql(
            &primary,
            "INSERT INTO t SELECT 'b', generate_series(1, 1000)",
        )
        .await;
    let between = world
        .psql(&primary, "SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")
        .await;
    common::eventually(DEADLINE, "the clock to pass the target time", || async {
        let passed = world
            .psql(
                &primary,
                &format!("SELECT now() > '{between}'::timestamptz + interval '1 second'"),
            )
            .await;
        (passed == "t").then_some(())
    })
    .await;
    world
        .psql(
            &primary,
            "INSERT INTO t SELECT 'c', generate_series(1, 1000)",
        )
        .await;
    world.archive_now(&primary).await;

    // Every pod at once.
    let lost = Instant::now();
    world
        .kubectl
        .ok(&[
            "delete",
            "pods",
            "-l",
            "workshop.example.com/cluster=db",
            "--wait=false",
        ])
        .await;
    common::eventually(DEADLINE, "phase Recovering", || async {
        (world.cluster("db").await["status"]["phase"] == "Recovering").then_some(())
    })
    .await;
    let restored = world.wait_healthy("db", 2).await;
    println!(
        "all pods lost → restored primary ready and 2 members: {:.1} s",
        lost.elapsed().as_secs_f64()
    );
    let counts = world
        .psql(&restored, "SELECT string_agg(batch || '=' || c, ',') FROM (SELECT batch, count(*) c FROM t GROUP BY batch ORDER BY batch) x")
        .await;
    assert_eq!(counts, "a=1000,b=1000,c=1000", "every archived row is back");
    let status = world.cluster("db").await["status"].clone();
    assert_eq!(status["restore"]["state"], "Restored", "{status}");
    assert!(world.said("Restored:"), "the story says so");

    // A new cluster at the time between b and c.
    world
        .create(cluster_manifest(
            "copy",
            serde_json::json!({"size": 1, "version": "16",
                "bootstrap": {"fromBackup": {"cluster": "db", "targetTime": between}}}),
        ))
        .await;
    let copy = world.wait_healthy("copy", 1).await;
    let counts = world
        .psql(&copy, "SELECT string_agg(batch || '=' || c, ',') FROM (SELECT batch, count(*) c FROM t GROUP BY batch ORDER BY batch) x")
        .await;
    assert_eq!(
        counts, "a=1000,b=1000",
        "exactly the rows before the target"
    );

    // A corrupt base backup: the restore fails naming the file, and touches nothing.
    let tar = format!("/backups/base/{backup}/base.tar");
    let newest = world.cluster("db").await["status"]["lastBackup"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let newest_tar = format!("/backups/base/{newest}/base.tar");
    world
        .kubectl
        .ok(&[
            "exec",
            &restored,
            "-c",
            POSTGRES_CONTAINER,
            "--",
            "sh",
            "-c",
            &format!("truncate -s 100000 {newest_tar}; ls -l {tar} {newest_tar}"),
        ])
        .await;
    let before = world
        .kubectl
        .ok(&[
            "exec",
            &restored,
            "-c",
            POSTGRES_CONTAINER,
            "--",
            "sh",
            "-c",
            "ls -lR /backups/base | sort",
        ])
        .await;
    world
        .create(cluster_manifest(
            "broken",
            serde_json::json!({"size": 1, "version": "16", "bootstrap": {"fromBackup": {"cluster": "db"}}}),
        ))
        .await;
    let reason = common::eventually(DEADLINE, "phase Failed", || async {
        let status = world.cluster("broken").await["status"].clone();
        (status["phase"] == "Failed")
            .then(|| status["restore"]["message"].as_str().map(str::to_string))
            .flatten()
    })
    .await;
    assert!(
        reason.contains("base.tar"),
        "the reason names the file: {reason}"
    );
    let after = world
        .kubectl
        .ok(&[
            "exec",
            &restored,
            "-c",
            POSTGRES_CONTAINER,
            "--",
            "sh",
            "-c",
            "ls -lR /backups/base | sort",
        ])
        .await;
    assert_eq!(before, after, "the backups are untouched");
}
