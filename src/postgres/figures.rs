//! Support: skip it on first read — each cluster's figures for `/metrics`, read at scrape time,
//! never by a round.
//!
//! Each cluster's figures for `/metrics`, read when Prometheus scrapes (`src/metrics/`):
//!
//! | family | from |
//! |---|---|
//! | `postgres_cluster_members_wanted` | `spec.size` |
//! | `postgres_cluster_members_ready` | `status.readyInstances` |
//! | `postgres_cluster_primary{pod}` = 1 | `status.primary` |
//! | `postgres_cluster_replication_lag_bytes{pod}` | `pg_stat_replication` on the primary |
//! | `postgres_cluster_stats_up` | whether that `psql` answered before the scrape's deadline |
//!
//! The first three cost nothing: they come from the cluster watch's store, which the operator
//! keeps anyway. The last two cost one `pods/exec` per cluster with a primary, per scrape,
//! and only then: the reconcile rounds never pay for them. A layer adds its own figures to
//! both (`ClusterLayer::stats_sql` and `ClusterLayer::figures`), in the same one `pods/exec`.

use std::borrow::Borrow;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::time::SystemTime;

use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};

use super::cluster::{psql_in_pod, ClusterLayer};
use super::manifests::psql_argv;
use crate::api::PostgresCluster;
use crate::client::Client;
use crate::metrics::text::{Family, Kind};
use crate::metrics::ScrapeTime;
use crate::watch::Store;

/// One query, a row `kind|name|number` each: `replica|<pod>|<bytes>` per standby connected. A
/// replica's `application_name` is its pod's name (the clone sets it,
/// see `manifests.rs`); its lag is how far its replay is behind the primary's WAL, in bytes.
/// NULL (nothing replayed yet) comes out empty and is left out.
pub const STATS_SQL: &str = "SELECT 'replica', application_name, \
     pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint FROM pg_stat_replication";

/// `pods/exec` sessions open at once, whatever the number of clusters or scrapes.
const CONCURRENT_EXECS: usize = 4;

/// The clusters' figures, from the cluster watch's store and, at scrape time, their primaries;
/// with the figures of the layer `L`.
pub struct ClusterFigures<L> {
    client: Client,
    clusters: Store<PostgresCluster>,
    execs: Semaphore,
    /// [`STATS_SQL`] and the layer's rows.
    sql: String,
    layer: PhantomData<fn() -> L>,
}

impl<L: ClusterLayer> ClusterFigures<L> {
    pub fn new(client: Client, clusters: Store<PostgresCluster>) -> ClusterFigures<L> {
        ClusterFigures {
            client,
            clusters,
            execs: Semaphore::new(CONCURRENT_EXECS),
            sql: format!("{STATS_SQL}{}", L::stats_sql()),
            layer: PhantomData,
        }
    }

    /// `sql` on `primary`, before `deadline`: its `psql -At` lines.
    async fn ask(
        &self,
        namespace: &str,
        primary: &str,
        sql: &str,
        deadline: Instant,
    ) -> Result<String, String> {
        let asked = async {
            let _slot = self.execs.acquire().await.map_err(|e| e.to_string())?;
            psql_in_pod(&self.client, namespace, primary, &psql_argv(sql)).await
        };
        timeout_at(deadline, asked)
            .await
            .map_err(|_| "no answer before the scrape's deadline".to_string())?
    }

    async fn read(&self, deadline: Instant) -> Vec<Family> {
        let clusters = self.clusters.list(|_| true);
        let answers = futures_util::future::join_all(clusters.iter().map(|cluster| async move {
            let primary = cluster.status.as_ref()?.primary.as_deref()?;
            let namespace = &cluster.metadata.namespace;
            let answer = self.ask(namespace, primary, &self.sql, deadline).await;
            if let Err(error) = &answer {
                tracing::debug!(cluster = %cluster.key(), %error, "no stats from the primary");
            }
            Some(answer.ok())
        }))
        .await;
        let mut families = figures(&clusters, &answers);
        families.extend(L::figures(&clusters, &answers, SystemTime::now()));
        families
    }
}

impl<L: ClusterLayer> ScrapeTime for ClusterFigures<L> {
    fn families(
        &self,
        deadline: Instant,
    ) -> Pin<Box<dyn Future<Output = Vec<Family>> + Send + '_>> {
        Box::pin(self.read(deadline))
    }
}

/// The rows of a stats query's `psql -At` lines, `(kind, name, number)`; lines of another
/// shape are skipped.
pub fn stats_rows(out: &str) -> impl Iterator<Item = (&str, &str, u64)> {
    out.lines().filter_map(|line| {
        let mut fields = line.trim().splitn(3, '|');
        let (kind, name, number) = (fields.next()?, fields.next()?, fields.next()?);
        Some((kind, name, number.parse().ok()?))
    })
}

/// The labels every figure of `cluster` carries.
pub fn cluster_labels(cluster: &PostgresCluster) -> Vec<(&'static str, String)> {
    vec![
        ("namespace", cluster.metadata.namespace.to_string()),
        ("cluster", cluster.metadata.name.clone()),
    ]
}

/// The families from the cluster watch's store (the first three in the table at the top), each
/// still without samples.
const FROM_THE_STORE: [Family; 3] = [
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
];

/// The families from what the primary's `psql` said (the last two).
const FROM_THE_PRIMARY: [Family; 2] = [
    Family::new(
        "postgres_cluster_replication_lag_bytes",
        "How far each replica's replay is behind the primary's WAL, in bytes (pg_stat_replication).",
        Kind::Gauge,
    ),
    Family::new(
        "postgres_cluster_stats_up",
        "1 when the primary answered the scrape's psql in time, 0 when not.",
        Kind::Gauge,
    ),
];

/// The families, from each cluster and what its primary said: `answers[i]` is `clusters[i]`'s
/// `psql -At` lines, `None` without a primary, `Some(None)` when the primary did not answer.
pub fn figures<C: Borrow<PostgresCluster>>(
    clusters: &[C],
    answers: &[Option<Option<String>>],
) -> Vec<Family> {
    let [mut wanted, mut ready, mut primaries] = FROM_THE_STORE;
    let [mut lag, mut up] = FROM_THE_PRIMARY;
    for (cluster, answer) in clusters.iter().zip(answers) {
        let cluster: &PostgresCluster = cluster.borrow();
        let labels = cluster_labels(cluster);
        let with_pod = |pod: &str| {
            let mut labels = labels.clone();
            labels.push(("pod", pod.to_string()));
            labels
        };
        let status = cluster.status.as_ref();
        wanted = wanted.sample(labels.clone(), cluster.spec.size as f64);
        let ready_instances = status.and_then(|s| s.ready_instances).unwrap_or(0);
        ready = ready.sample(labels.clone(), ready_instances as f64);
        if let Some(primary) = status.and_then(|s| s.primary.as_deref()) {
            primaries = primaries.sample(with_pod(primary), 1.0);
        }
        let Some(answer) = answer else { continue };
        up = up.sample(labels.clone(), if answer.is_some() { 1.0 } else { 0.0 });
        let Some(answer) = answer else { continue };
        // The rows of other kinds are a layer's.
        for (kind, name, number) in stats_rows(answer) {
            if kind == "replica" && !name.is_empty() {
                lag = lag.sample(with_pod(name), number as f64);
            }
        }
    }
    vec![wanted, ready, primaries, up, lag]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{PostgresClusterSpec, PostgresClusterStatus};
    use crate::metrics::text::render;

    /// psql's `-At` lines become rows of (kind, name, number); lines of another shape (no
    /// number, no fields) are skipped.
    #[test]
    fn stats_lines_parse() {
        let out = "archiver||2\nreplica|db-b|0\nreplica|db-c|8192\nreplica|db-d|\nsynchronous||1\nnoise\n";
        let rows: Vec<_> = stats_rows(out).collect();
        assert_eq!(
            rows,
            [
                ("archiver", "", 2),
                ("replica", "db-b", 0),
                ("replica", "db-c", 8192),
                ("synchronous", "", 1),
            ]
        );
    }

    /// A cluster's figures come from its spec and status, and from what its primary said.
    #[test]
    fn figures_come_from_spec_status_and_the_primary() {
        let mut cluster = PostgresCluster::new("ns", "db", PostgresClusterSpec::new(3, "16"));
        cluster.status = Some(PostgresClusterStatus {
            primary: Some("db-a".into()),
            ready_instances: Some(2),
            ..Default::default()
        });
        let answer = "archiver||2\nreplica|db-b|16\nreplica||7\nsynchronous||1\n";
        let text = render(&figures(&[cluster], &[Some(Some(answer.to_string()))]));
        assert!(
            !text.contains("archiver")
                && !text.contains("synchronous")
                && !text.contains("pod=\"\""),
            "{text}"
        );
        for line in [
            "postgres_cluster_members_wanted{namespace=\"ns\",cluster=\"db\"} 3\n",
            "postgres_cluster_members_ready{namespace=\"ns\",cluster=\"db\"} 2\n",
            "postgres_cluster_primary{namespace=\"ns\",cluster=\"db\",pod=\"db-a\"} 1\n",
            "postgres_cluster_stats_up{namespace=\"ns\",cluster=\"db\"} 1\n",
            "postgres_cluster_replication_lag_bytes{namespace=\"ns\",cluster=\"db\",pod=\"db-b\"} 16\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
