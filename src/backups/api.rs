//! Support: skip it on first read — the fields' shapes, read from and written to the `more` step 02
//! carries; the lesson is what the layer does with them.
//!
//! Step 06's own fields of a `PostgresCluster`: `spec.backup` and `spec.bootstrap`, the
//! backup-now annotation, and what the layer records in `status.lastBackup`,
//! `status.backupRequested` and `status.restore`.
//!
//! WORKSHOP.md, step 06. Step 02's `src/api.rs` carries these fields untyped (`more`); this file
//! gives them their types. Stages 04 and 05 never read them, and their status writes keep them.

use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::api::{PostgresClusterSpec, PostgresClusterStatus};
use crate::events::parse_utc;
use crate::postgres::api::{field, set_field};

/// Asks for a base backup at once when its value changes (any value; a timestamp is handy):
/// `kubectl annotate pgc NAME workshop.example.com/backup-now="$(date +%s)" --overwrite`.
pub const BACKUP_NOW_ANNOTATION: &str = "workshop.example.com/backup-now";

/// Step 06's part of the spec: `spec.backup` and `spec.bootstrap`, both optional.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupsSpec {
    /// Base backups and WAL archiving to a PersistentVolumeClaim.
    pub backup: Option<BackupSpec>,
    /// How a new cluster's first member starts (empty, or from another's backups).
    pub bootstrap: Option<BootstrapSpec>,
}

impl BackupsSpec {
    /// Step 06's fields of `spec`. The CRD's schema gives them their shape on the server; one
    /// of another shape (an old CRD, or someone else's) is said and read as absent.
    pub fn read(spec: &PostgresClusterSpec) -> BackupsSpec {
        fn or_absent<T>(name: &str, read: Result<Option<T>, serde_json::Error>) -> Option<T> {
            read.unwrap_or_else(|error| {
                tracing::warn!(%error, "spec.{name} is not of the CRD's shape; ignoring it");
                None
            })
        }
        BackupsSpec {
            backup: or_absent("backup", field(&spec.more, "backup")),
            bootstrap: or_absent("bootstrap", field(&spec.more, "bootstrap")),
        }
    }

    /// Put these in `spec` (an absent one removed).
    pub fn write(&self, spec: &mut PostgresClusterSpec) {
        set_field(&mut spec.more, "backup", self.backup.as_ref());
        set_field(&mut spec.more, "bootstrap", self.bootstrap.as_ref());
    }

    /// `spec.bootstrap.fromBackup`.
    pub fn from_backup(&self) -> Option<&FromBackup> {
        self.bootstrap.as_ref()?.from_backup.as_ref()
    }
}

/// `spec.backup`. The names are fixed: scripts rely on them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The size of the claim `<name>-backups`, a Kubernetes quantity ("1Gi").
    #[serde(default = "default_storage_size")]
    pub storage_size: String,
    /// Minutes between two base backups.
    #[serde(default = "default_interval_minutes")]
    pub interval_minutes: i64,
    /// How many base backups to keep (the newest); at least 1.
    #[serde(default = "default_keep")]
    pub keep: i64,
}

fn default_storage_size() -> String {
    "1Gi".to_string()
}

fn default_interval_minutes() -> i64 {
    60
}

fn default_keep() -> i64 {
    3
}

impl Default for BackupSpec {
    fn default() -> Self {
        BackupSpec {
            storage_size: default_storage_size(),
            interval_minutes: default_interval_minutes(),
            keep: default_keep(),
        }
    }
}

/// `spec.bootstrap`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapSpec {
    /// Seed the new cluster from another cluster's base backups and WAL archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_backup: Option<FromBackup>,
}

/// `spec.bootstrap.fromBackup`: the source cluster's claim `<cluster>-backups`, in the same
/// namespace, read only.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FromBackup {
    /// The source cluster's name.
    pub cluster: String,
    /// Replay the WAL up to this moment (RFC 3339 in UTC, `2026-01-22T10:15:00Z`) and stop;
    /// absent: replay everything archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_time: Option<String>,
}

/// Step 06's part of the status. The layer reads it at the start of a round, changes it as it
/// acts, and puts it back into the status step 04 computed, which keeps it otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackupStatus {
    /// `status.lastBackup`: the newest base backup that completed.
    pub last_backup: Option<LastBackup>,
    /// `status.backupRequested`: the value of [`BACKUP_NOW_ANNOTATION`] last acted on.
    pub backup_requested: Option<String>,
    /// `status.restore`: the last restore (disaster recovery or `bootstrap.fromBackup`), or why
    /// it failed.
    pub restore: Option<RestoreStatus>,
}

impl BackupStatus {
    /// Step 06's fields of `status`. Only this operator writes them, so one of another shape is
    /// read as absent.
    pub fn read(status: &PostgresClusterStatus) -> BackupStatus {
        BackupStatus {
            last_backup: LastBackup::read(status),
            backup_requested: field(&status.more, "backupRequested").ok().flatten(),
            restore: field(&status.more, "restore").ok().flatten(),
        }
    }

    /// Put these in `status` (an absent one removed); its other fields stay as they are.
    pub fn write(&self, status: &mut PostgresClusterStatus) {
        set_field(&mut status.more, "lastBackup", self.last_backup.as_ref());
        set_field(
            &mut status.more,
            "backupRequested",
            self.backup_requested.as_ref(),
        );
        set_field(&mut status.more, "restore", self.restore.as_ref());
    }
}

/// `status.lastBackup`: one base backup, as its backup pod reported it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// Its directory in the claim: `base/<name>`, named by time and start LSN.
    pub name: String,
    /// When it completed (RFC 3339).
    pub time: String,
    /// The WAL position it starts from (a restore replays from here).
    pub lsn: String,
    /// Its size in the claim.
    pub bytes: i64,
}

impl LastBackup {
    /// How long ago it completed, at `now`; `None` for a time that does not parse. A clock
    /// behind the backup pod's reads as 0, not as a negative age.
    pub fn age(&self, now: SystemTime) -> Option<Duration> {
        let time = parse_utc(&self.time)?;
        Some(now.duration_since(time).unwrap_or_default())
    }

    /// `status.lastBackup` alone, without the rest of step 06's status.
    pub fn read(status: &PostgresClusterStatus) -> Option<LastBackup> {
        field(&status.more, "lastBackup").ok().flatten()
    }
}

/// `status.restore`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// The claim restored from (`<cluster>-backups`).
    pub source: String,
    /// The seed pod that restored, replays and is promoted.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod: String,
    /// `Restoring`, `Restored` or `Failed`.
    pub state: String,
    /// Restored: the WAL position the new primary reached. Failed: why (names the file).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `spec.backup: {}` is every default; the spec's fields go in and out under their API names.
    #[test]
    fn the_spec_fields_read_with_their_defaults() {
        let spec: PostgresClusterSpec = serde_json::from_value(serde_json::json!({
            "size": 3, "version": "16",
            "backup": {},
            "bootstrap": {"fromBackup": {"cluster": "old", "targetTime": "2026-01-22T10:15:00Z"}},
        }))
        .unwrap();
        let read = BackupsSpec::read(&spec);
        assert_eq!(read.backup, Some(BackupSpec::default()));
        assert_eq!(read.from_backup().map(|f| f.cluster.as_str()), Some("old"));
        let mut written = PostgresClusterSpec::new(3, "16");
        read.write(&mut written);
        assert_eq!(BackupsSpec::read(&written), read);
        assert_eq!(
            BackupsSpec::read(&PostgresClusterSpec::new(3, "16")),
            BackupsSpec::default()
        );
    }

    /// A field of another shape is read as absent, not as a reason to stop.
    #[test]
    fn a_backup_of_another_shape_is_absent() {
        let mut spec = PostgresClusterSpec::new(3, "16");
        spec.more
            .insert("backup".into(), serde_json::json!({"keep": "three"}));
        assert_eq!(BackupsSpec::read(&spec).backup, None);
    }

    /// Writing step 06's part of a status leaves step 04's (and every other field) as it was,
    /// and an absent field is removed.
    #[test]
    fn writing_the_status_part_keeps_the_other_fields() {
        let before = serde_json::json!({
            "phase": "Running",
            "switchover": "db-b",
            "synchronous": {"primary": "db-b", "number": 1, "standbys": ["db-a"]},
            "restore": {"source": "db-backups", "state": "Restored"},
        });
        let mut status: PostgresClusterStatus = serde_json::from_value(before.clone()).unwrap();
        let mut part = BackupStatus::read(&status);
        assert_eq!(
            part.restore.as_ref().map(|r| r.state.as_str()),
            Some("Restored")
        );
        part.restore = None;
        part.backup_requested = Some("1".into());
        part.write(&mut status);
        let mut after = before;
        after["backupRequested"] = "1".into();
        after.as_object_mut().unwrap().remove("restore");
        assert_eq!(serde_json::to_value(&status).unwrap(), after);
        assert_eq!(BackupStatus::read(&status), part);
    }
}
