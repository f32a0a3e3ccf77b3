//! Support: skip it on first read — step 05's figures for `/metrics`, read at scrape time.
//!
//! | family | from |
//! |---|---|
//! | `postgres_cluster_synchronous_standbys_wanted` | `spec.replication.synchronous.number` |
//! | `postgres_cluster_synchronous_standbys` | `pg_stat_replication.sync_state` on the primary |
//!
//! The second is a row of the one query step 04's `figures.rs` asks each primary at a scrape.

use std::sync::Arc;

use crate::api::PostgresCluster;
use crate::metrics::text::{Family, Kind};
use crate::postgres::figures::{cluster_labels, stats_rows};

use super::api::ReplicationSpec;

/// The row step 05 adds to that query: `synchronous||<count>`.
pub const STATS_SQL: &str =
    " UNION ALL SELECT 'synchronous', '', count(*) FROM pg_stat_replication \
     WHERE sync_state IN ('sync', 'quorum')";

/// The two families, from each cluster's spec and what its primary said (see
/// `ClusterLayer::figures`).
pub fn figures(
    clusters: &[Arc<PostgresCluster>],
    answers: &[Option<Option<String>>],
) -> Vec<Family> {
    let mut wanted = Family::new(
        "postgres_cluster_synchronous_standbys_wanted",
        "Standbys each commit must reach (spec.replication.synchronous.number); absent: asynchronous.",
        Kind::Gauge,
    );
    let mut seen = Family::new(
        "postgres_cluster_synchronous_standbys",
        "Standbys streaming as synchronous ones now (pg_stat_replication.sync_state sync or quorum).",
        Kind::Gauge,
    );
    for (cluster, answer) in clusters.iter().zip(answers) {
        let labels = cluster_labels(cluster);
        if let Some(number) = ReplicationSpec::synchronous(&cluster.spec).map(|s| s.number) {
            wanted = wanted.sample(labels.clone(), number as f64);
        }
        for (kind, _, number) in answer.iter().flatten().flat_map(|out| stats_rows(out)) {
            if kind == "synchronous" {
                seen = seen.sample(labels.clone(), number as f64);
            }
        }
    }
    vec![wanted, seen]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::api::{DataDurability, SynchronousSpec};
    use crate::metrics::text::render;

    /// The standbys wanted come from the spec; those seen, from the primary's `synchronous` row.
    #[test]
    fn the_synchronous_figures_come_from_the_spec_and_the_primary() {
        let mut spec = crate::api::PostgresClusterSpec::new(3, "16");
        let replication = ReplicationSpec {
            synchronous: Some(SynchronousSpec {
                number: 1,
                data_durability: DataDurability::Required,
            }),
        };
        ReplicationSpec::write(Some(&replication), &mut spec);
        let cluster = Arc::new(PostgresCluster::new("ns", "db", spec));
        let answer = "replica|db-b|16\nsynchronous||1\n".to_string();
        let text = render(&figures(&[cluster], &[Some(Some(answer))]));
        for line in [
            "postgres_cluster_synchronous_standbys_wanted{namespace=\"ns\",cluster=\"db\"} 1\n",
            "postgres_cluster_synchronous_standbys{namespace=\"ns\",cluster=\"db\"} 1\n",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
