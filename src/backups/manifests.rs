//! Step 06's objects: the claim backups live on, the settings that archive every WAL segment to
//! it, the backup pod that takes a base backup, and the init container that restores one. Support:
//! a learner may skip it on first read — it is JSON around the shell of `scripts.rs`, which is
//! where the work is done. Pure functions, like `manifests.rs`: nothing here talks to the API
//! server.
//!
//! WORKSHOP.md, step 06. For a cluster `db` with `spec.backup`:
//!
//! ```text
//!   PersistentVolumeClaim db-backups           (owned by db; storageSize)
//!     base/<time>-<lsn>/base.tar, backup_manifest   one per base backup, the newest `keep`
//!     wal/<segment>.gz, <timeline>.history.gz       every WAL segment the primary finished
//!   every member pod: the claim at /backups, archive_command copying into wal/
//!   Pod db-backup-xxxxx (restartPolicy Never): pg_basebackup -Ft -X none from db-replicas
//!                                      (db-primary when no replica is ready)
//!   a restored seed: init container `restore` unpacks the newest base.tar into PGDATA (claim
//!                    read only), then postgres replays wal/ (restore_command) and promotes
//! ```
//!
//! A base backup alone is a copy as of one moment; with the WAL archived since, a restore can
//! replay up to the last segment archived (or to a chosen time: point-in-time recovery). This is
//! what CloudNativePG, pgBackRest and WAL-G do against object storage; here the store is a
//! directory on a claim, and the tools are the ones in the postgres image.

use serde_json::{json, Value};

use super::scripts::backup_script;
pub use super::scripts::{archive_command, restore_command, restore_script};

use crate::api::PostgresCluster;
use crate::controller::pods::{owner_reference, pod_labels, Pod};
/// Lives beside its inverse, `events::rfc3339`; the backup rules read times with it.
pub use crate::events::parse_utc;
use crate::postgres::manifests::{
    self, from_secret, Role, DATA_MOUNT, PGDATA, POSTGRES_CONTAINER, POSTGRES_UID,
    REPLICATION_PASSWORD_KEY, ROLE_LABEL, SUPERUSER_PASSWORD_KEY,
};

/// Where the cluster's own claim is mounted, in members (read-write: they archive into it) and
/// in the backup pod.
pub const BACKUP_MOUNT: &str = "/backups";
/// Where another cluster's claim is mounted, read only, in a seed bootstrapped from it.
pub const SOURCE_MOUNT: &str = "/restore-source";
/// The volume names in the pod spec.
pub const BACKUP_VOLUME: &str = "backups";
pub const SOURCE_VOLUME: &str = "restore-source";
/// The role label's value on a backup pod: not a member, and no Service selects it.
pub const BACKUP_ROLE: &str = "backup";
/// The backup pod's one container, and the restoring seed's init container.
pub const BACKUP_CONTAINER: &str = "backup";
pub const RESTORE_CONTAINER: &str = "restore";
/// Where a container may leave a message for the kubelet to copy into its status
/// (`state.terminated.message`, at most 4096 bytes): Kubernetes' default path.
pub const TERMINATION_LOG: &str = "/dev/termination-log";

/// `archive_timeout`: the primary switches to a new WAL segment at least this often when it has
/// written anything, so a finished segment reaches the claim within a minute. It bounds what a
/// disaster loses to the last minute of commits. The price: each forced switch ships a whole
/// 16 MB segment however little was written, so a trickle of writes costs up to 60 segments an
/// hour. The archive gzips them: the unused tail of a switched segment is zeros (PostgreSQL
/// zeroes it), so a forced segment is a few kilobytes on the claim.
pub const ARCHIVE_TIMEOUT_SECONDS: u32 = 60;

/// `<name>-backups`
pub fn backup_claim_name(cluster_name: &str) -> String {
    format!("{cluster_name}-backups")
}

/// Whether member `pod`'s server was started with [`archive_args`]. PostgreSQL reads
/// `archive_mode` only when the server starts, so a member created before `spec.backup` was
/// set archives nothing until it is replaced (`plan.rs`, rule 3). Read from the container's
/// arguments, the fact itself, whichever build of the operator created the pod.
pub fn archives(pod: &Pod) -> bool {
    pod.spec
        .containers
        .iter()
        .find(|c| c.name == POSTGRES_CONTAINER)
        .is_some_and(|c| c.args.iter().any(|arg| arg == "archive_mode=on"))
}

/// The `-c` settings that make a member archive into its cluster's claim. Every member gets
/// them: only a primary archives (`archive_mode = on` does nothing during recovery), so a
/// replica promoted later starts archiving on its new timeline by itself, and its `.history`
/// file, which a restore needs to follow the timeline switch, is archived first.
pub fn archive_args() -> Vec<String> {
    vec![
        "-c".to_string(),
        "archive_mode=on".to_string(),
        "-c".to_string(),
        format!("archive_command={}", archive_command(BACKUP_MOUNT)),
        "-c".to_string(),
        format!("archive_timeout={ARCHIVE_TIMEOUT_SECONDS}"),
    ]
}

/// Where a restoring seed reads its backups from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreSource {
    /// The claim: the cluster's own (disaster recovery) or another cluster's (bootstrap).
    pub claim: String,
    /// Whether the claim is this cluster's own.
    pub own: bool,
    /// `spec.bootstrap.fromBackup.targetTime`, RFC 3339 in UTC.
    pub target_time: Option<String>,
}

impl RestoreSource {
    /// Where the seed's containers see the claim.
    pub fn mount(&self) -> &'static str {
        if self.own {
            BACKUP_MOUNT
        } else {
            SOURCE_MOUNT
        }
    }

    /// The `-c` recovery settings of the restoring seed's server. On the command line, not in
    /// PGDATA: replicas cloned from it later must not inherit a `restore_command` pointing at a
    /// claim they do not mount. `recovery.signal` (written by the init container) starts
    /// targeted recovery; PostgreSQL removes it when it promotes, so a later restart of the
    /// container starts normally and these settings are then unused.
    pub fn recovery_args(&self) -> Vec<String> {
        let mut args = vec![
            "-c".to_string(),
            format!("restore_command={}", restore_command(self.mount())),
            // Follow every timeline switch (failovers) found in the archive's .history files,
            // to the newest. The default since PostgreSQL 12; said here because it matters.
            "-c".to_string(),
            "recovery_target_timeline=latest".to_string(),
        ];
        if let Some(time) = &self.target_time {
            args.extend([
                "-c".to_string(),
                format!("recovery_target_time={}", recovery_target_time(time)),
                // Stop before the first commit after the target, then become a primary (the
                // default, 'pause', would wait for a human to call pg_wal_replay_resume()).
                "-c".to_string(),
                "recovery_target_inclusive=false".to_string(),
                "-c".to_string(),
                "recovery_target_action=promote".to_string(),
            ]);
        }
        args
    }
}

/// `2026-01-22T10:15:00Z` as `recovery_target_time` takes it on the command line:
/// `2026-01-22 10:15:00+00`. The `Z` would be refused ("invalid value for parameter"):
/// PostgreSQL reads it as a time zone abbreviation, and the abbreviations are not loaded yet
/// when the postmaster checks its command-line settings; a numeric offset needs no table.
pub fn recovery_target_time(rfc3339_utc: &str) -> String {
    let time = rfc3339_utc.strip_suffix('Z').unwrap_or(rfc3339_utc);
    format!("{}+00", time.replacen('T', " ", 1))
}

/// What stage 06 adds to a member pod; [`PodBackups::default`] adds nothing (stage 05's pod).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodBackups {
    /// Archive WAL into the cluster's claim `<name>-backups` (mounted at `/backups`).
    pub archive: bool,
    /// The seed restores a base backup instead of running initdb (a primary only).
    pub restore: Option<RestoreSource>,
}

/// Stage 04's pod ([`manifests::pod`]) with stage 05's additions (`failover::manifests::dress`)
/// and stage 06's ([`dress_member`]).
pub fn member_pod(
    cluster: &PostgresCluster,
    role: Role,
    backups: &PodBackups,
    agent_image: &str,
) -> Value {
    let mut pod = manifests::pod(cluster, role);
    crate::failover::manifests::dress(&mut pod, cluster, agent_image);
    dress_member(&mut pod, cluster, role, backups);
    pod
}

/// Add to a member `pod` of `cluster` (whose spec.version it runs): the claim mounted and the
/// archive settings when `backups.archive`; for a restoring seed, the source claim, the restore
/// init container (in place of initdb: the entrypoint skips initdb on a PGDATA that holds a
/// database) and the recovery settings.
pub fn dress_member(pod: &mut Value, cluster: &PostgresCluster, role: Role, backups: &PodBackups) {
    let name = &cluster.metadata.name;
    let image = format!("postgres:{}", cluster.spec.version);
    let mut args = Vec::new();
    let mut mounts = Vec::new();
    let mut volumes = Vec::new();
    if backups.archive {
        args.extend(archive_args());
        mounts.push(json!({"name": BACKUP_VOLUME, "mountPath": BACKUP_MOUNT}));
        volumes.push(claim_volume(BACKUP_VOLUME, &backup_claim_name(name), false));
    }
    let restore = backups.restore.as_ref().filter(|_| role == Role::Primary);
    if let Some(source) = restore {
        args.extend(source.recovery_args());
        // restore_command runs in the server's container, so it sees the source too.
        if !source.own {
            mounts
                .push(json!({"name": SOURCE_VOLUME, "mountPath": SOURCE_MOUNT, "readOnly": true}));
            volumes.push(claim_volume(SOURCE_VOLUME, &source.claim, true));
        } else if !backups.archive {
            mounts
                .push(json!({"name": BACKUP_VOLUME, "mountPath": BACKUP_MOUNT, "readOnly": true}));
            volumes.push(claim_volume(BACKUP_VOLUME, &source.claim, true));
        }
        // After the agent's copy, in place of a replica's clone (the seed is a primary).
        extend(
            &mut pod["spec"]["initContainers"],
            vec![restore_container(source, &image, PGDATA)],
        );
    }
    let spec = &mut pod["spec"];
    if let Some(container) = spec["containers"].as_array_mut().and_then(|containers| {
        containers
            .iter_mut()
            .find(|c| c["name"] == POSTGRES_CONTAINER)
    }) {
        extend(&mut container["args"], args);
        extend(&mut container["volumeMounts"], mounts);
        if restore.is_some() {
            // A server that stops during recovery (a segment it cannot replay) says why in its
            // log; the kubelet copies the log's end into the status, where the operator reads it.
            container["terminationMessagePolicy"] = json!("FallbackToLogsOnError");
        }
    }
    extend(&mut spec["volumes"], volumes);
}

/// Append `items` to the JSON array `list` (made one if it is not).
fn extend<T: Into<Value>>(list: &mut Value, items: Vec<T>) {
    if !list.is_array() {
        *list = json!([]);
    }
    if let Some(list) = list.as_array_mut() {
        list.extend(items.into_iter().map(Into::into));
    }
}

/// The init container that restores a base backup into an empty PGDATA (`RESTORE_SCRIPT`).
pub fn restore_container(source: &RestoreSource, image: &str, pgdata: &str) -> Value {
    let volume = if source.own {
        BACKUP_VOLUME
    } else {
        SOURCE_VOLUME
    };
    let mut env = vec![
        json!({"name": "PGDATA", "value": pgdata}),
        json!({"name": "SOURCE", "value": source.mount()}),
    ];
    if let Some(time) = &source.target_time {
        env.push(json!({"name": "TARGET_TIME", "value": time}));
        env.push(json!({"name": "TARGET_STAMP", "value": compact_stamp(time)}));
    }
    json!({
        "name": RESTORE_CONTAINER,
        "image": image,
        "command": ["sh", "-c", restore_script()],
        "env": env,
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            // Read only: a restore that goes wrong cannot damage the backups it reads.
            {"name": volume, "mountPath": source.mount(), "readOnly": true},
        ],
        // On failure the script writes why (naming the file) here; the kubelet copies it into
        // the pod's status. Without it, the last lines of the log stand in.
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    })
}

/// How long the backup pod waits for its last segment to reach the archive: the primary was
/// asked to switch at once; archive_timeout is the fallback, twice over.
const ARCHIVE_WAIT_SECONDS: u32 = 2 * ARCHIVE_TIMEOUT_SECONDS + 60;

/// PersistentVolumeClaim `<name>-backups`, owned by the cluster: deleting the cluster deletes
/// its backups. ReadWriteOnce: on a real multi-node cluster that is one node at a time, so
/// every member would have to run there; a cluster spread over nodes needs a ReadWriteMany
/// class (NFS, CephFS, EFS) here, or object storage instead of a claim.
pub fn backup_claim(cluster: &PostgresCluster, storage_size: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": backup_claim_name(&cluster.metadata.name),
            "namespace": cluster.metadata.namespace,
            "labels": pod_labels(&cluster.metadata.name),
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            // No storageClassName: the cluster's default class provisions it.
            "resources": {"requests": {"storage": storage_size}},
        },
    })
}

/// The backup pod: `pg_basebackup` from `source_host` (the `<name>-replicas` Service, or
/// `<name>-primary` when no replica is ready) into the claim (`BACKUP_SCRIPT`). restartPolicy
/// Never: a failed backup is reported and retried as a new pod, never half-repeated.
pub fn backup_pod(cluster: &PostgresCluster, source_host: &str, keep: i64) -> Value {
    let name = &cluster.metadata.name;
    let image = format!("postgres:{}", cluster.spec.version);
    let mut labels = pod_labels(name);
    labels.insert(ROLE_LABEL.to_string(), BACKUP_ROLE.to_string());
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-backup-"),
            "namespace": cluster.metadata.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": {
            "securityContext": {
                "runAsUser": POSTGRES_UID,
                "runAsGroup": POSTGRES_UID,
                "fsGroup": POSTGRES_UID,
                "runAsNonRoot": true,
            },
            "restartPolicy": "Never",
            "containers": [{
                "name": BACKUP_CONTAINER,
                // pg_basebackup must be of the server's major version.
                "image": image,
                "command": ["sh", "-c", backup_script()],
                "env": [
                    {"name": "SOURCE_HOST", "value": source_host},
                    {"name": "PRIMARY_HOST", "value": manifests::primary_service_name(name)},
                    from_secret(cluster, "PGPASSWORD", REPLICATION_PASSWORD_KEY),
                    from_secret(cluster, "SUPERUSER_PASSWORD", SUPERUSER_PASSWORD_KEY),
                    {"name": "KEEP", "value": keep.max(1).to_string()},
                    {"name": "ARCHIVE_WAIT", "value": ARCHIVE_WAIT_SECONDS.to_string()},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "volumeMounts": [{"name": BACKUP_VOLUME, "mountPath": BACKUP_MOUNT}],
                "terminationMessagePath": TERMINATION_LOG,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }],
            "volumes": [claim_volume(BACKUP_VOLUME, &backup_claim_name(name), false)],
        },
    })
}

/// A `persistentVolumeClaim` volume.
pub fn claim_volume(volume: &str, claim: &str, read_only: bool) -> Value {
    json!({"name": volume, "persistentVolumeClaim": {"claimName": claim, "readOnly": read_only}})
}

/// What a backup pod reports on success (its last line, and its termination message):
/// `backup-done name=... time=... lsn=... bytes=...`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupReport {
    pub name: String,
    pub time: String,
    pub lsn: String,
    pub bytes: i64,
}

/// A backup pod's output that holds no report.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("no `backup-done` line with name, time, lsn and bytes in {text:?}")]
pub struct NoReport {
    pub text: String,
}

impl BackupReport {
    /// The last `backup-done` line of `text` (a termination message or a log).
    pub fn parse(text: &str) -> Result<BackupReport, NoReport> {
        let no_report = || NoReport {
            text: text
                .chars()
                .rev()
                .take(400)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect(),
        };
        let line = text
            .lines()
            .rev()
            .find(|line| line.starts_with("backup-done "))
            .ok_or_else(no_report)?;
        let field = |key: &str| {
            line.split_whitespace()
                .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
                .map(str::to_string)
        };
        Ok(BackupReport {
            name: field("name").ok_or_else(no_report)?,
            time: field("time").ok_or_else(no_report)?,
            lsn: field("lsn").ok_or_else(no_report)?,
            bytes: field("bytes")
                .and_then(|b| b.parse().ok())
                .ok_or_else(no_report)?,
        })
    }
}

/// `2026-01-22T10:15:00Z` → `20260122T101500Z`, the form backup names start with.
pub fn compact_stamp(rfc3339: &str) -> String {
    rfc3339.chars().filter(|c| *c != '-' && *c != ':').collect()
}

#[cfg(test)]
mod tests {
    use super::super::scripts::script;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::api::PostgresClusterSpec;
    use crate::backups::api::{BackupSpec, BackupsSpec};
    use crate::events::rfc3339;
    use crate::failover::manifests::{AGENT_INSTALL_CONTAINER, DEFAULT_AGENT_IMAGE};

    /// `prod/db` with `size` members of Postgres 16 and `spec.backup` at its defaults.
    fn with_backups(size: i64) -> PostgresCluster {
        let mut spec = PostgresClusterSpec::new(size, "16");
        let backups = BackupsSpec {
            backup: Some(BackupSpec::default()),
            bootstrap: None,
        };
        backups.write(&mut spec);
        PostgresCluster::new("prod", "db", spec)
    }

    /// The archive command, run by `sh` as the archiver runs it: the segment is archived once
    /// (compressed, fsynced, renamed), the same segment again is success, and a different one
    /// under that name is a failure that leaves the archived one as it was.
    #[test]
    fn archive_command_archives_once_and_never_overwrites() {
        let scratch = tempfile::tempdir().expect("a temporary directory");
        let archive = scratch.path().join("backups");
        let command = archive_command(&archive.to_string_lossy());
        assert!(command.contains("> \"$f.tmp\" && sync \"$f.tmp\" && mv \"$f.tmp\" \"$f\""));
        let archive_segment = |content: &[u8]| {
            std::fs::write(scratch.path().join("segment"), content).expect("segment written");
            let command = command
                .replace("%p", "segment")
                .replace("%f", "000000010000000000000001");
            let status = std::process::Command::new("sh")
                .args(["-c", &command])
                .current_dir(scratch.path())
                .status()
                .expect("sh runs");
            status.success()
        };
        let archived = archive.join("wal/000000010000000000000001.gz");
        assert!(archive_segment(b"one segment's WAL"), "archived");
        let first = std::fs::read(&archived).expect("the archived file");
        assert!(
            archive_segment(b"one segment's WAL"),
            "the same again is success"
        );
        assert!(
            !archive_segment(b"another segment's WAL"),
            "a different one is refused"
        );
        assert_eq!(std::fs::read(&archived).expect("still there"), first);
        assert_eq!(
            restore_command("/restore-source"),
            "f=/restore-source/wal/%f.gz; [ -f \"$f\" ] && gunzip -c \"$f\" > %p"
        );
        let args = archive_args();
        assert_eq!(args[1], "archive_mode=on");
        assert_eq!(args[5], "archive_timeout=60");
    }

    /// A target time adds the target, exclusive, and promotion at it; without one, replay all.
    #[test]
    fn recovery_settings_follow_the_latest_timeline_and_the_target() {
        let mut source = RestoreSource {
            claim: "db-backups".into(),
            own: true,
            target_time: None,
        };
        let args = source.recovery_args();
        assert_eq!(args.len(), 4);
        assert!(args[1].starts_with("restore_command=f=/backups/wal/%f.gz"));
        assert_eq!(args[3], "recovery_target_timeline=latest");
        source.own = false;
        source.target_time = Some("2026-01-22T10:15:00Z".into());
        let args = source.recovery_args();
        assert!(args[1].starts_with("restore_command=f=/restore-source/wal/"));
        assert!(args.contains(&"recovery_target_time=2026-01-22 10:15:00+00".to_string()));
        assert!(args.contains(&"recovery_target_action=promote".to_string()));
    }

    /// The restore container mounts the backups read only and carries the target as a stamp.
    #[test]
    fn restore_container_reads_the_claim_read_only() {
        let source = RestoreSource {
            claim: "src-backups".into(),
            own: false,
            target_time: Some("2026-01-22T10:15:00Z".into()),
        };
        let container =
            restore_container(&source, "postgres:16", "/var/lib/postgresql/data/pgdata");
        assert_eq!(container["name"], "restore");
        assert_eq!(
            container["volumeMounts"][1],
            json!({"name": "restore-source", "mountPath": "/restore-source", "readOnly": true})
        );
        let env = container["env"].as_array().expect("env");
        assert!(env.contains(&json!({"name": "TARGET_STAMP", "value": "20260122T101500Z"})));
        assert_eq!(
            container["terminationMessagePolicy"],
            "FallbackToLogsOnError"
        );
    }

    /// The backup pod runs once, from the source host, with the claim mounted and `keep` passed.
    #[test]
    fn backup_pod_runs_once_against_the_source() {
        let cluster = with_backups(2);
        let pod = backup_pod(&cluster, "db-replicas", 3);
        assert_eq!(pod["metadata"]["generateName"], "db-backup-");
        assert_eq!(pod["metadata"]["labels"][ROLE_LABEL], "backup");
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        let container = &pod["spec"]["containers"][0];
        let script = container["command"][2].as_str().expect("script");
        assert!(script.contains("-Ft -X none -c fast"));
        assert!(script.contains("segno() {"));
        assert!(container["env"]
            .as_array()
            .expect("env")
            .contains(&json!({"name": "KEEP", "value": "3"})));
        assert_eq!(
            pod["spec"]["volumes"][0],
            json!({"name": "backups", "persistentVolumeClaim": {"claimName": "db-backups", "readOnly": false}})
        );
        let claim = backup_claim(&cluster, "1Gi");
        assert_eq!(claim["metadata"]["name"], "db-backups");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
        assert_eq!(
            claim["metadata"]["ownerReferences"][0]["kind"],
            "PostgresCluster"
        );
    }

    /// A restoring seed gets the restore init container, and its server reports a failure
    /// during recovery through its termination message (its log's end); a replica does not.
    #[test]
    fn a_restoring_seed_reports_why_it_failed_in_its_status() {
        let cluster = with_backups(1);
        let restore = Some(RestoreSource {
            claim: "db-backups".into(),
            own: true,
            target_time: None,
        });
        let seed = member_pod(
            &cluster,
            Role::Primary,
            &PodBackups {
                archive: true,
                restore,
            },
            DEFAULT_AGENT_IMAGE,
        );
        // The agent's copy first, then the restore.
        assert_eq!(
            seed["spec"]["initContainers"][0]["name"],
            AGENT_INSTALL_CONTAINER
        );
        assert_eq!(seed["spec"]["initContainers"][1]["name"], RESTORE_CONTAINER);
        assert_eq!(
            seed["spec"]["containers"][0]["terminationMessagePolicy"],
            "FallbackToLogsOnError"
        );
        let member = member_pod(
            &cluster,
            Role::Replica,
            &PodBackups {
                archive: true,
                restore: None,
            },
            DEFAULT_AGENT_IMAGE,
        );
        assert!(member["spec"]["containers"][0]["terminationMessagePolicy"].is_null());
    }

    /// The report is the last `backup-done` line; anything else is an error quoting the text.
    #[test]
    fn backup_reports_parse_from_the_last_line() {
        let log = "backup: pruned old\nbackup-done name=20260122T101500Z-0_3000028 time=2026-01-22T10:15:00Z lsn=0/3000028 bytes=4242\n";
        assert_eq!(
            BackupReport::parse(log),
            Ok(BackupReport {
                name: "20260122T101500Z-0_3000028".into(),
                time: "2026-01-22T10:15:00Z".into(),
                lsn: "0/3000028".into(),
                bytes: 4242,
            })
        );
        assert!(BackupReport::parse("pg_basebackup: error").is_err());
        assert!(BackupReport::parse("backup-done name=x time=y lsn=z bytes=many").is_err());
    }

    /// The scripts' WAL arithmetic, run by `sh`: the segment of a start LSN, the segment before
    /// an end LSN (the one before a boundary), and file names.
    #[test]
    fn wal_segment_arithmetic_in_the_scripts() {
        let body =
            "set -eu\necho $(segno 0/2000028) $(segno_before 0/4000000) $(segno_before 0/40000A0) \
                    $(segno 1/0) $(segment 2 $(segno_before 1/0))";
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(script(body))
            .output()
            .expect("sh runs");
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            "2 3 4 256 0000000200000000000000FF"
        );
        assert_eq!(
            recovery_target_time("2026-01-22T10:15:00Z"),
            "2026-01-22 10:15:00+00"
        );
    }

    /// UTC times round-trip through `events::rfc3339`; other shapes are refused.
    #[test]
    fn utc_times_parse_back() {
        for seconds in [0u64, 951_782_400, 1_769_076_900, 4_102_444_799] {
            let time = UNIX_EPOCH + Duration::from_secs(seconds);
            assert_eq!(parse_utc(&rfc3339(time)), Some(time), "{seconds}");
        }
        for bad in [
            "",
            "2026-01-22 10:15:00Z",
            "2026-01-22T10:15:00+01:00",
            "2026-13-01T00:00:00Z",
            "2026-01-22T10:15:00",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad:?}");
        }
        assert_eq!(compact_stamp("2026-01-22T10:15:00Z"), "20260122T101500Z");
    }
}
