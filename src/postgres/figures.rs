//! Each cluster's figures for `/metrics`, read when Prometheus scrapes (`src/metrics/`):
//!
//! | family | from |
//! |---|---|
//! | `postgres_cluster_members_wanted` | `spec.size` |
//! | `postgres_cluster_members_ready` | `status.readyInstances` |
//! | `postgres_cluster_primary{pod}` = 1 | `status.primary` |
//! | `postgres_cluster_seconds_since_last_backup` | `status.lastBackup.time` (stage 05) |
//! | `postgres_cluster_synchronous_standbys_wanted` | `spec.replication.synchronous.number` |
//! | `postgres_cluster_replication_lag_bytes{pod}` | `pg_stat_replication` on the primary |
//! | `postgres_cluster_wal_archive_failures_total` | `pg_stat_archiver.failed_count` on the primary |
//! | `postgres_cluster_synchronous_standbys` | `pg_stat_replication.sync_state` on the primary |
//! | `postgres_cluster_stats_up` | whether that `psql` answered before the scrape's deadline |
//!
//! The first five cost nothing: they come from the cluster watch's store, which the operator
//! keeps anyway. The last four cost one `pods/exec` per cluster with a primary, per scrape,
//! and only then: the reconcile rounds never pay for them.

use std::borrow::Borrow;
use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};

use super::api::ReplicationSpec;
use super::cluster::psql_in_pod;
use super::manifests::psql_argv;
use crate::api::{PostgresCluster, PostgresClusterStatus};
use crate::client::Client;
use crate::events::parse_utc;
use crate::metrics::text::{Family, Kind};
use crate::metrics::ScrapeTime;
use crate::postgres::api::field;
use crate::watch::Store;

/// One query for both: `archiver||<failed_count>`, then `replica|<pod>|<bytes>` per standby
/// connected. A replica's `application_name` is its pod's name (the clone sets it, see
/// `manifests.rs`); its lag is how far its replay is behind the primary's WAL, in bytes. NULL
/// (nothing replayed yet) comes out empty and is left out.
pub const STATS_SQL: &str = "SELECT 'archiver', '', failed_count FROM pg_stat_archiver \
     UNION ALL SELECT 'replica', application_name, \
     pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication \
     UNION ALL SELECT 'synchronous', '', count(*) FROM pg_stat_replication \
     WHERE sync_state IN ('sync', 'quorum')";

/// `pods/exec` sessions open at once, whatever the number of clusters or scrapes.
const CONCURRENT_EXECS: usize = 4;

/// The clusters' figures, from the cluster watch's store and, at scrape time, their primaries.
pub struct ClusterFigures {
    client: Client,
    clusters: Store<PostgresCluster>,
    execs: Semaphore,
}

/// What the primary said.
#[derive(Debug, Default, PartialEq)]
pub struct PrimaryStats {
    pub archive_failures: Option<u64>,
    /// (replica pod, bytes behind).
    pub lag: Vec<(String, u64)>,
    /// Standbys streaming as synchronous ones (`sync_state` sync or quorum).
    pub synchronous: Option<u64>,
}

impl ClusterFigures {
    pub fn new(client: Client, clusters: Store<PostgresCluster>) -> ClusterFigures {
        ClusterFigures {
            client,
            clusters,
            execs: Semaphore::new(CONCURRENT_EXECS),
        }
    }

    /// [`STATS_SQL`] on `primary`, before `deadline`.
    async fn primary_stats(
        &self,
        namespace: &str,
        primary: &str,
        deadline: Instant,
    ) -> Result<PrimaryStats, String> {
        let asked = async {
            let _slot = self.execs.acquire().await.map_err(|e| e.to_string())?;
            psql_in_pod(&self.client, namespace, primary, &psql_argv(STATS_SQL)).await
        };
        let out = timeout_at(deadline, asked)
            .await
            .map_err(|_| "no answer before the scrape's deadline".to_string())??;
        Ok(parse_stats(&out))
    }

    async fn read(&self, deadline: Instant) -> Vec<Family> {
        let clusters = self.clusters.list(|_| true);
        let stats = futures_util::future::join_all(clusters.iter().map(|cluster| async move {
            let primary = cluster.status.as_ref()?.primary.as_deref()?;
            let namespace = &cluster.metadata.namespace;
            let stats = self.primary_stats(namespace, primary, deadline).await;
            if let Err(error) = &stats {
                tracing::debug!(cluster = %cluster.key(), %error, "no stats from the primary");
            }
            Some(stats.ok())
        }))
        .await;
        figures(&clusters, &stats, SystemTime::now())
    }
}

impl ScrapeTime for ClusterFigures {
    fn families(
        &self,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = Vec<Family>> + Send + '_>> {
        Box::pin(self.read(deadline))
    }
}

/// `psql -At` lines of [`STATS_SQL`]; lines of another shape are skipped.
pub fn parse_stats(out: &str) -> PrimaryStats {
    let mut stats = PrimaryStats::default();
    for line in out.lines() {
        let mut fields = line.trim().splitn(3, '|');
        let (Some(kind), Some(name), Some(number)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let Ok(number) = number.parse::<u64>() else {
            continue;
        };
        match kind {
            "archiver" => stats.archive_failures = Some(number),
            "synchronous" => stats.synchronous = Some(number),
            "replica" if !name.is_empty() => stats.lag.push((name.to_string(), number)),
            _ => {}
        }
    }
    stats
}

/// `status.lastBackup.time`: stage 05 writes the whole `lastBackup`; this step reads only its
/// time (RFC 3339), so that the figure is there whichever stage runs.
fn backup_time(status: &PostgresClusterStatus) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct LastBackup {
        time: String,
    }
    let last: Option<LastBackup> = field(&status.more, "lastBackup").ok().flatten();
    last.map(|last| last.time)
}

/// The families from the cluster watch's store (the first five in the table at the top), each
/// still without samples.
const FROM_THE_STORE: [Family; 5] = [
    Family::new(
        "postgres_cluster_members_wanted",
        "Members the cluster should have (spec.size).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_members_ready",
        "Member pods that are ready (status.readyInstances).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_primary",
        "1 for the pod that is the cluster's primary (status.primary).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_seconds_since_last_backup",
        "Seconds since the newest base backup completed (status.lastBackup.time).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_synchronous_standbys_wanted",
        "Standbys each commit must reach (spec.replication.synchronous.number); absent: asynchronous.",
        Kind::Gauge,
    ),
];

/// The families from what the primary's `psql` said (the last four).
const FROM_THE_PRIMARY: [Family; 4] = [
    Family::new(
        "postgres_cluster_replication_lag_bytes",
        "How far each replica's replay is behind the primary's WAL, in bytes (pg_stat_replication).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_wal_archive_failures_total",
        "Failed attempts to archive a WAL segment on the primary (pg_stat_archiver.failed_count; a new primary counts from 0).",
        Kind::Counter,
    ),
    Family::new(
        "postgres_cluster_synchronous_standbys",
        "Standbys streaming as synchronous ones now (pg_stat_replication.sync_state sync or quorum).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_stats_up",
        "1 when the primary answered the scrape's psql in time, 0 when not.",
        Kind::Gauge,
    ),
];

/// The families, from each cluster and what its primary said: `stats[i]` is `clusters[i]`'s,
/// `None` without a primary, `Some(None)` when the primary did not answer.
pub fn figures<C: Borrow<PostgresCluster>>(
    clusters: &[C],
    stats: &[Option<Option<PrimaryStats>>],
    now: SystemTime,
) -> Vec<Family> {
    let [mut wanted, mut ready, mut primaries, mut since_backup, mut sync_wanted] = FROM_THE_STORE;
    let [mut lag, mut archive_failures, mut sync_seen, mut up] = FROM_THE_PRIMARY;
    for (cluster, stats) in clusters.iter().zip(stats) {
        let cluster: &PostgresCluster = cluster.borrow();
        let labels = vec![
            ("namespace", cluster.metadata.namespace.clone()),
            ("cluster", cluster.metadata.name.clone()),
        ];
        let with_pod = |pod: &str| {
            let mut labels = labels.clone();
            labels.push(("pod", pod.to_string()));
            labels
        };
        let status = cluster.status.clone().unwrap_or_default();
        wanted = wanted.sample(labels.clone(), cluster.spec.size as f64);
        if let Some(number) = ReplicationSpec::synchronous(&cluster.spec).map(|s| s.number) {
            sync_wanted = sync_wanted.sample(labels.clone(), number as f64);
        }
        ready = ready.sample(labels.clone(), status.ready_instances.unwrap_or(0) as f64);
        if let Some(primary) = &status.primary {
            primaries = primaries.sample(with_pod(primary), 1.0);
        }
        let backup_time = backup_time(&status).and_then(|time| parse_utc(&time));
        if let Some(time) = backup_time {
            // A clock behind the backup pod's reads as 0, not as a negative age.
            let age = now.duration_since(time).unwrap_or_default();
            since_backup = since_backup.sample(labels.clone(), age.as_secs() as f64);
        }
        let Some(answer) = stats else { continue };
        up = up.sample(labels.clone(), if answer.is_some() { 1.0 } else { 0.0 });
        let Some(answer) = answer else { continue };
        for (pod, bytes) in &answer.lag {
            lag = lag.sample(with_pod(pod), *bytes as f64);
        }
        if let Some(seen) = answer.synchronous {
            sync_seen = sync_seen.sample(labels.clone(), seen as f64);
        }
        if let Some(failures) = answer.archive_failures {
            archive_failures = archive_failures.sample(labels.clone(), failures as f64);
        }
    }
    vec![
        wanted,
        ready,
        sync_wanted,
        sync_seen,
        primaries,
        since_backup,
        up,
        lag,
        archive_failures,
    ]
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::api::PostgresClusterSpec;
    use crate::metrics::text::render;
    use crate::postgres::api::set_field;

    /// psql's `-At` lines become the archiver's count and each replica's lag; odd lines are
    /// skipped.
    #[test]
    fn stats_lines_parse() {
        let stats =
            parse_stats("archiver||2\nreplica|db-b|0\nreplica|db-c|8192\nreplica|db-d|\nsynchronous||1\nnoise\n");
        assert_eq!(
            stats,
            PrimaryStats {
                archive_failures: Some(2),
                lag: vec![("db-b".into(), 0), ("db-c".into(), 8192)],
                synchronous: Some(1),
            }
        );
    }

    /// A cluster's figures come from its spec and status, and from what its primary said.
    #[test]
    fn figures_come_from_spec_status_and_the_primary() {
        let mut cluster = PostgresCluster::new("ns", "db", PostgresClusterSpec::new(3, "16"));
        let mut status = PostgresClusterStatus {
            primary: Some("db-a".into()),
            ready_instances: Some(2),
            ..Default::default()
        };
        // As stage 05 writes it (`backups::api::LastBackup`).
        let last_backup = serde_json::json!({
            "name": "base/x", "time": "2026-01-22T10:15:00Z", "lsn": "0/3000028", "bytes": 4242,
        });
        set_field(&mut status.more, "lastBackup", Some(&last_backup));
        cluster.status = Some(status);
        let backup = parse_utc("2026-01-22T10:15:00Z").unwrap_or(UNIX_EPOCH);
        let stats = [Some(Some(parse_stats("archiver||0\nreplica|db-b|16\n")))];
        let text = render(&figures(
            &[cluster],
            &stats,
            backup + Duration::from_secs(90),
        ));
        for line in [
            "postgres_cluster_members_wanted{namespace=\"ns\",cluster=\"db\"} 3\n",
            "postgres_cluster_members_ready{namespace=\"ns\",cluster=\"db\"} 2\n",
            "postgres_cluster_primary{namespace=\"ns\",cluster=\"db\",pod=\"db-a\"} 1\n",
            "postgres_cluster_seconds_since_last_backup{namespace=\"ns\",cluster=\"db\"} 90\n",
            "postgres_cluster_stats_up{namespace=\"ns\",cluster=\"db\"} 1\n",
            "postgres_cluster_replication_lag_bytes{namespace=\"ns\",cluster=\"db\",pod=\"db-b\"} 16\n",
            "postgres_cluster_wal_archive_failures_total{namespace=\"ns\",cluster=\"db\"} 0\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
