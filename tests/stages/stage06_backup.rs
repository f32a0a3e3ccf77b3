//! Stage 06 end to end: backups and disaster recovery with real PostgreSQL on the sandbox's
//! process runtime, driven by real kubectl — rows, a base backup, more rows archived, every pod
//! deleted at once, the restore; a new cluster restored to a target time; a missing WAL segment
//! and a corrupt backup.
//!
//! WORKSHOP.md, step 06. Needs PostgreSQL, bubblewrap, kubectl, and the sandbox's
//! PersistentVolumeClaims. The timings (all pods lost → ready primary, backup duration and size)
//! are printed, not asserted: `cargo test --test stages stage06_backup:: -- --nocapture`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use postgres_operator::postgres::manifests::{psql_argv, POSTGRES_CONTAINER};
use postgres_operator::postgres::run_postgres_operator;
use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::Kubectl;
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(300);

struct World {
    _sandbox: Sandbox,
    kubectl: Kubectl,
    lines: test_support::Story,
}

impl World {
    async fn start() -> World {
        let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
        let client = test_support::plain_client(&sandbox.url());
        let options = test_support::quick_postgres_options();
        let (reporter, lines) = test_support::Story::record();
        tokio::spawn(run_postgres_operator(
            client,
            options,
            test_support::quick_backups(),
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
        let manifest = manifest.to_string();
        self.kubectl.create_when_served(&manifest, DEADLINE).await;
    }

    async fn cluster(&self, name: &str) -> Value {
        self.kubectl.json(&["get", "pgc", name]).await
    }

    /// The members' names, and the primary once it is ready and recorded with `ready` members.
    async fn wait_healthy(&self, name: &str, size: usize) -> String {
        test_support::eventually(
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
        test_support::cluster::psql(&self.kubectl, pod, sql).await
    }

    /// Switch the primary to a new WAL segment and wait until the finished one is archived.
    async fn archive_now(&self, primary: &str) {
        let switched = self
            .psql(primary, "SELECT pg_walfile_name(pg_switch_wal())")
            .await;
        test_support::eventually(DEADLINE, &format!("{switched} archived"), || async {
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

    /// The host directory of claim `claim`: its PersistentVolume's `hostPath` (the sandbox
    /// provisions a directory under its data directory).
    async fn claim_dir(&self, claim: &str) -> PathBuf {
        let volume = self
            .kubectl
            .ok(&["get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}"])
            .await;
        let path = self
            .kubectl
            .ok(&[
                "get",
                "pv",
                volume.trim(),
                "-o",
                "jsonpath={.spec.hostPath.path}",
            ])
            .await;
        let dir = PathBuf::from(path.trim());
        assert!(dir.is_dir(), "claim {claim}'s volume {volume} is at {path}");
        dir
    }

    fn said(&self, part: &str) -> bool {
        self.lines.said(part)
    }

    /// Every pod of cluster `name` deleted at once, without waiting for them to go.
    async fn lose_every_pod(&self, name: &str) {
        test_support::cluster::delete_every_pod(&self.kubectl, name).await;
    }

    /// Table `t`'s rows in `pod`, counted by batch: `a=1000,b=1000`.
    async fn batches(&self, pod: &str) -> String {
        self.psql(pod, "SELECT string_agg(batch || '=' || c, ',') FROM (SELECT batch, count(*) c FROM t GROUP BY batch ORDER BY batch) x")
            .await
    }

    /// A new cluster `name` of one member restored from `db`'s backups, whose restore must fail:
    /// the reason its status gives.
    async fn failed_restore(&self, name: &str) -> String {
        self.create(cluster_manifest(
            name,
            serde_json::json!({"size": 1, "version": "16", "bootstrap": {"fromBackup": {"cluster": "db"}}}),
        ))
        .await;
        test_support::eventually(DEADLINE, &format!("{name}: phase Failed"), || async {
            let status = self.cluster(name).await["status"].clone();
            (status["phase"] == "Failed")
                .then(|| status["restore"]["message"].as_str().map(str::to_string))
                .flatten()
        })
        .await
    }

    /// `jsonpath` (kubectl's `-o`) over the member pods, primary and replicas, of cluster `name`.
    async fn members(&self, name: &str, jsonpath: &str) -> String {
        let selector = format!(
            "workshop.example.com/cluster={name},workshop.example.com/role in (primary,replica)"
        );
        self.kubectl
            .ok(&["get", "pods", "-l", &selector, "-o", jsonpath])
            .await
    }

    /// Delete cluster `name`, without waiting for it to go.
    async fn delete(&self, name: &str) {
        self.kubectl
            .ok(&["delete", "pgc", name, "--wait=false"])
            .await;
    }

    /// `script` run by `sh -c` in `pod`'s postgres container: its output.
    async fn sh(&self, pod: &str, script: &str) -> String {
        self.kubectl
            .ok(&[
                "exec",
                pod,
                "-c",
                POSTGRES_CONTAINER,
                "--",
                "sh",
                "-c",
                script,
            ])
            .await
    }
}

fn cluster_manifest(name: &str, spec: Value) -> Value {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// Every file under `dir`, by relative path: its size and a hash of its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).expect("the claim's directory is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let bytes = std::fs::read(&path).expect("a backup file is readable");
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            let relative = path
                .strip_prefix(dir)
                .expect("under the claim")
                .to_path_buf();
            files.insert(relative, (bytes.len() as u64, hasher.finish()));
        }
    }
    files
}

/// Every file there before is there after, unchanged (the live primary may archive more).
fn assert_untouched(before: &BTreeMap<PathBuf, (u64, u64)>, after: &BTreeMap<PathBuf, (u64, u64)>) {
    assert!(before.keys().any(|p| p.ends_with("base.tar")), "{before:?}");
    for (path, size_and_hash) in before {
        assert_eq!(
            after.get(path),
            Some(size_and_hash),
            "{} changed or went",
            path.display()
        );
    }
}

/// A WAL segment taken off the claim, to be put back as it was (bytes, owner, mode).
struct RemovedSegment {
    path: PathBuf,
    bytes: Vec<u8>,
    metadata: std::fs::Metadata,
}

impl RemovedSegment {
    fn put_back(self) {
        std::fs::write(&self.path, &self.bytes).expect("the segment written back");
        std::fs::set_permissions(&self.path, self.metadata.permissions()).expect("its mode");
        std::os::unix::fs::chown(
            &self.path,
            Some(self.metadata.uid()),
            Some(self.metadata.gid()),
        )
        .expect("its owner");
    }
}

/// Remove the archived segment the backup starting at `start_lsn` starts in, which a restore of
/// it needs first (with more archived after it: a gap, not just an archive that ends early).
/// Its name (without `.gz`) and how to put it back.
fn remove_needed_segment(wal: &Path, start_lsn: &str) -> (String, RemovedSegment) {
    // A segment's number from LSN X/Y with 16 MB segments: X * 256 + Y / 16 MB.
    let (hi, lo) = start_lsn.split_once('/').expect("an LSN X/Y");
    let first = u64::from_str_radix(hi, 16).expect("hex") * 256
        + (u64::from_str_radix(lo, 16).expect("hex") >> 24);
    // Names are timeline, then the number as two 8-digit hex halves.
    let mut by_number: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(wal).expect("the archive is readable") {
        let name = entry
            .expect("an entry")
            .file_name()
            .to_string_lossy()
            .to_string();
        let Some(segment) = name.strip_suffix(".gz").filter(|s| s.len() == 24) else {
            continue;
        };
        let (Ok(hi), Ok(lo)) = (
            u64::from_str_radix(&segment[8..16], 16),
            u64::from_str_radix(&segment[16..24], 16),
        ) else {
            continue;
        };
        by_number
            .entry(hi * 256 + lo)
            .or_default()
            .push(segment.to_string());
    }
    let last = by_number.keys().next_back().copied().unwrap_or_default();
    let segment = match by_number.get(&first) {
        Some(names) if names.len() == 1 && first < last => names[0].clone(),
        _ => panic!("no single segment {first:X} with more after it: {by_number:?}"),
    };
    let path = wal.join(format!("{segment}.gz"));
    let removed = RemovedSegment {
        bytes: std::fs::read(&path).expect("the segment is readable"),
        metadata: std::fs::metadata(&path).expect("its metadata"),
        path,
    };
    std::fs::remove_file(&removed.path).expect("the segment removed");
    (segment, removed)
}

/// Rows before and after a base backup survive losing every pod at once; a new cluster restored
/// to a time between two batches holds exactly the first; a missing WAL segment and a corrupt
/// base backup each fail the restore with the file named and leave the backups as they were.
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
    let backup = test_support::eventually(DEADLINE, "status.lastBackup", || async {
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
    test_support::eventually(DEADLINE, "the clock to pass the target time", || async {
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
    world.lose_every_pod("db").await;
    test_support::cluster::wait_phase(&world.kubectl, "db", "Recovering", DEADLINE).await;
    let restored = world.wait_healthy("db", 2).await;
    println!(
        "all pods lost → restored primary ready and 2 members: {:.1} s",
        lost.elapsed().as_secs_f64()
    );
    let counts = world.batches(&restored).await;
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
    let counts = world.batches(&copy).await;
    assert_eq!(
        counts, "a=1000,b=1000",
        "exactly the rows before the target"
    );

    // The copy has done its part; one server fewer on a small machine.
    world.delete("copy").await;

    // A missing WAL segment: the restore fails naming it, and touches nothing.
    world.archive_now(&restored).await;
    world.archive_now(&restored).await;
    let claim = world.claim_dir("db-backups").await;
    let start_lsn = world.cluster("db").await["status"]["lastBackup"]["lsn"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let (segment, saved) = remove_needed_segment(&claim.join("wal"), &start_lsn);
    let before_gap = snapshot(&claim);
    let reason = world.failed_restore("gap").await;
    assert!(
        reason.contains(&format!("{segment}.gz is missing")),
        "the reason names the segment {segment}: {reason}"
    );
    assert_untouched(&before_gap, &snapshot(&claim));
    saved.put_back();
    world.delete("gap").await;

    // A corrupt base backup: the restore fails naming the file, and touches nothing.
    let tar = format!("/backups/base/{backup}/base.tar");
    let newest = world.cluster("db").await["status"]["lastBackup"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let newest_tar = format!("/backups/base/{newest}/base.tar");
    world
        .sh(
            &restored,
            &format!("truncate -s 100000 {newest_tar}; ls -l {tar} {newest_tar}"),
        )
        .await;
    let listing = "ls -lR /backups/base | sort";
    let before = world.sh(&restored, listing).await;
    let reason = world.failed_restore("broken").await;
    assert!(
        reason.contains("base.tar"),
        "the reason names the file: {reason}"
    );
    let after = world.sh(&restored, listing).await;
    assert_eq!(before, after, "the backups are untouched");
}

/// The closing note's numbers, printed, not asserted (`cargo test --test stages stage06_backup:: --
/// --ignored --nocapture`): a base backup of a 100 MB database (duration and size), the rows a
/// steady writer committed that a restore after losing every pod does not have (with the
/// deployed `archive_timeout`), and the time from "all pods lost" to a ready primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of several minutes: run with --ignored --nocapture"]
async fn measure_the_loss_window_the_recovery_time_and_a_100_mb_backup() {
    use postgres_operator::backups::api::BACKUP_NOW_ANNOTATION;
    use postgres_operator::backups::manifests::ARCHIVE_TIMEOUT_SECONDS;
    use tokio::io::AsyncBufReadExt;

    let world = World::start().await;
    world
        .create(cluster_manifest(
            "db",
            serde_json::json!({"size": 1, "version": "16", "backup": {}}),
        ))
        .await;
    let primary = world.wait_healthy("db", 1).await;
    let first = test_support::eventually(DEADLINE, "the first base backup", || async {
        world.cluster("db").await["status"]["lastBackup"]["name"]
            .as_str()
            .map(str::to_string)
    })
    .await;

    // 100 MB of rows, in four statements (each kubectl exec has 30 s).
    world
        .psql(&primary, "CREATE TABLE big (g int, pad text)")
        .await;
    for part in 0..4 {
        let from = part * 25_000 + 1;
        let to = from + 24_999;
        world
            .psql(
                &primary,
                &format!("INSERT INTO big SELECT g, repeat(md5(g::text), 28) FROM generate_series({from}, {to}) g"),
            )
            .await;
    }
    let size = world
        .psql(
            &primary,
            "SELECT pg_size_pretty(pg_database_size('postgres'))",
        )
        .await;
    let asked = Instant::now();
    world
        .kubectl
        .ok(&[
            "annotate",
            "pgc",
            "db",
            &format!("{BACKUP_NOW_ANNOTATION}=measure"),
        ])
        .await;
    let backup = test_support::eventually(DEADLINE, "the backup of 100 MB", || async {
        let last = world.cluster("db").await["status"]["lastBackup"].clone();
        (last["name"].as_str() != Some(first.as_str())).then_some(last)
    })
    .await;
    println!(
        "MEASURE base backup of a {size} database: {:.1} s from the annotation to status.lastBackup, {} bytes on the claim ({})",
        asked.elapsed().as_secs_f64(),
        backup["bytes"],
        backup["name"]
    );

    // A steady writer: one committed row every 100 ms, each commit announced on stderr.
    world
        .psql(&primary, "CREATE TABLE ticks (i int, at timestamptz)")
        .await;
    let writer_sql = "DO $$ BEGIN FOR i IN 1..100000 LOOP \
        INSERT INTO ticks VALUES (i, clock_timestamp()); COMMIT; \
        RAISE NOTICE 'committed % at %', i, clock_timestamp(); PERFORM pg_sleep(0.1); \
        END LOOP; END $$";
    let argv = psql_argv(writer_sql);
    let mut args = vec!["exec", primary.as_str(), "-c", POSTGRES_CONTAINER, "--"];
    args.extend(argv.iter().map(String::as_str));
    let mut writer = world
        .kubectl
        .command(&args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl exec runs");
    let stderr = writer.stderr.take().expect("the writer's stderr");
    let last_commit = Arc::new(Mutex::new(None::<(u64, String)>));
    let reader = {
        let last_commit = Arc::clone(&last_commit);
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(rest) = line.split("committed ").nth(1) else {
                    continue;
                };
                if let Some((i, at)) = rest.split_once(" at ") {
                    if let Ok(i) = i.trim().parse::<u64>() {
                        *last_commit.lock().expect("last commit") = Some((i, at.to_string()));
                    }
                }
            }
        })
    };
    // Longer than archive_timeout, so that at least one forced switch has archived rows.
    let wanted = u64::from(ARCHIVE_TIMEOUT_SECONDS) * 10 + 300;
    test_support::eventually(
        Duration::from_secs(u64::from(ARCHIVE_TIMEOUT_SECONDS) * 3),
        "the writer's rows",
        || async {
            let done = last_commit.lock().expect("last commit").clone();
            done.filter(|(i, _)| *i >= wanted).map(|_| ())
        },
    )
    .await;

    let lost = Instant::now();
    world.lose_every_pod("db").await;
    let _ = writer.wait().await;
    let _ = reader.await;
    let (committed, committed_at) = last_commit
        .lock()
        .expect("last commit")
        .clone()
        .expect("the writer committed rows");
    let restored = world.wait_healthy("db", 1).await;
    let ready_after = lost.elapsed();
    test_support::eventually(DEADLINE, "the restore recorded", || async {
        (world.cluster("db").await["status"]["restore"]["state"] == "Restored").then_some(())
    })
    .await;
    let kept = world
        .psql(
            &restored,
            &format!(
                "SELECT max(i) || ' ' || round(extract(epoch FROM '{committed_at}'::timestamptz - max(at))::numeric, 1) FROM ticks"
            ),
        )
        .await;
    let (kept_rows, window) = kept.split_once(' ').unwrap_or((kept.as_str(), "?"));
    let kept_rows: u64 = kept_rows.parse().unwrap_or_default();
    println!(
        "MEASURE data loss with archive_timeout={ARCHIVE_TIMEOUT_SECONDS}s: {} of {committed} committed rows not restored (one every 100 ms): the last {window} s of commits",
        committed.saturating_sub(kept_rows)
    );
    println!(
        "MEASURE all pods lost → restored primary ready: {:.1} s",
        ready_after.as_secs_f64()
    );
    assert!(kept_rows > 0 && kept_rows <= committed, "{kept}");
}

/// `spec.backup` set on a cluster that already runs: its members started without the archive
/// settings, which PostgreSQL reads only at start. They are replaced one at a time, the replica
/// first, then the primary (a clean stop and a promotion); then the first base backup is taken,
/// and the rows written before are all there.
#[tokio::test]
async fn backups_turned_on_for_a_running_cluster_replace_every_member_first() {
    let world = World::start().await;
    world
        .create(cluster_manifest(
            "late",
            serde_json::json!({"size": 2, "version": "16"}),
        ))
        .await;
    let first_primary = world.wait_healthy("late", 2).await;
    world
        .psql(
            &first_primary,
            "CREATE TABLE t AS SELECT 'a' AS batch, generate_series(1, 1000) AS n",
        )
        .await;
    let members_before = world
        .members("late", "jsonpath={.items[*].metadata.name}")
        .await;

    world
        .kubectl
        .ok(&[
            "patch",
            "pgc",
            "late",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"backup":{}}}"#,
        ])
        .await;
    let backup = test_support::eventually(DEADLINE, "late: status.lastBackup", || async {
        let status = world.cluster("late").await["status"].clone();
        status["lastBackup"]["name"].as_str().map(str::to_string)
    })
    .await;
    let primary = world.wait_healthy("late", 2).await;
    // The replica first, the primary last.
    let replaced_at = |pod: &str| {
        let said = format!("Replacing {pod}: it started before spec.backup");
        world
            .lines
            .lines()
            .iter()
            .position(|line| line.contains(&said))
    };
    let replica = members_before
        .split_whitespace()
        .find(|pod| *pod != first_primary)
        .expect("a replica before");
    let (replica_at, primary_at) = (replaced_at(replica), replaced_at(&first_primary));
    assert!(
        replica_at.is_some() && primary_at.is_some() && replica_at < primary_at,
        "the replica {replica} replaced before the primary {first_primary}: {replica_at:?}, {primary_at:?}"
    );
    assert_ne!(primary, first_primary, "the primary was replaced too");
    let args = world
        .members(
            "late",
            r#"jsonpath={range .items[*]}{.spec.containers[?(@.name=="postgres")].args}{"\n"}{end}"#,
        )
        .await;
    let archiving = args
        .lines()
        .filter(|line| line.contains("archive_mode=on"))
        .count();
    assert_eq!(archiving, 2, "every member archives: {args}");
    assert_eq!(world.batches(&primary).await, "a=1000", "no row lost");
    println!("late backups: {backup} taken after replacing {members_before}");
}
