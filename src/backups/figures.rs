//! Support: skip it on first read — what `/metrics` shows of backups; nothing in the restore
//! depends on it.
//!
//! Step 06's figures for `/metrics`, beside step 04's (`src/postgres/figures.rs`) and step 05's
//! (`src/failover/figures.rs`), and asked of each primary in the same `pods/exec`:
//!
//! | family | from |
//! |---|---|
//! | `postgres_cluster_seconds_since_last_backup` | `status.lastBackup.time` |
//! | `postgres_cluster_wal_archive_failures_total` | `pg_stat_archiver.failed_count` on the primary |

use std::sync::Arc;
use std::time::SystemTime;

use crate::api::PostgresCluster;
use crate::metrics::text::{Family, Kind};
use crate::postgres::figures::{cluster_labels, stats_rows};

use super::api::LastBackup;

/// The row step 06 adds to step 04's query: `archiver||<failed_count>`.
pub const STATS_SQL: &str = " UNION ALL SELECT 'archiver', '', failed_count FROM pg_stat_archiver";

/// The families, from each cluster's status and what its primary said (see
/// `ClusterLayer::figures`).
pub fn figures(
    clusters: &[Arc<PostgresCluster>],
    answers: &[Option<Option<String>>],
    now: SystemTime,
) -> Vec<Family> {
    let mut since_backup = Family::new(
        "postgres_cluster_seconds_since_last_backup",
        "Seconds since the newest base backup completed (status.lastBackup.time).",
        Kind::Gauge,
    );
    let mut archive_failures = Family::new(
        "postgres_cluster_wal_archive_failures_total",
        "Failed attempts to archive a WAL segment on the primary (pg_stat_archiver.failed_count; a new primary counts from 0).",
        Kind::Counter,
    );
    for (cluster, answer) in clusters.iter().zip(answers) {
        let labels = cluster_labels(cluster);
        let last = cluster.status.as_ref().and_then(LastBackup::read);
        if let Some(age) = last.and_then(|last| last.age(now)) {
            since_backup = since_backup.sample(labels.clone(), age.as_secs() as f64);
        }
        let rows = answer.iter().flatten().flat_map(|out| stats_rows(out));
        for (_, _, failures) in rows.filter(|(kind, ..)| *kind == "archiver") {
            archive_failures = archive_failures.sample(labels.clone(), failures as f64);
        }
    }
    vec![since_backup, archive_failures]
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::api::{PostgresClusterSpec, PostgresClusterStatus};
    use crate::backups::api::BackupStatus;
    use crate::events::parse_utc;
    use crate::metrics::text::render;

    /// The backup's age comes from the status, the archiver's failures from the primary's rows;
    /// a cluster whose primary did not answer has no failure count.
    #[test]
    fn figures_come_from_the_status_and_the_primary() {
        let mut cluster = PostgresCluster::new("ns", "db", PostgresClusterSpec::new(3, "16"));
        let mut status = PostgresClusterStatus::default();
        let backups = BackupStatus {
            last_backup: Some(LastBackup {
                time: "2026-01-22T10:15:00Z".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        backups.write(&mut status);
        cluster.status = Some(status);
        let silent = PostgresCluster::new("ns", "quiet", PostgresClusterSpec::new(1, "16"));
        let backup = parse_utc("2026-01-22T10:15:00Z").unwrap_or(UNIX_EPOCH);
        let answers = [
            Some(Some("replica|db-b|16\narchiver||2\n".to_string())),
            Some(None),
        ];
        let text = render(&figures(
            &[Arc::new(cluster), Arc::new(silent)],
            &answers,
            backup + Duration::from_secs(90),
        ));
        for line in [
            "postgres_cluster_seconds_since_last_backup{namespace=\"ns\",cluster=\"db\"} 90\n",
            "postgres_cluster_wal_archive_failures_total{namespace=\"ns\",cluster=\"db\"} 2\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
        assert!(!text.contains("cluster=\"quiet\""), "{text}");
    }
}
