//! What the tour reads back from the API server while it waits: the example's `status` (its
//! members, its primary, its newest backup, its restore and phase), and which pod has an address.
//! Each check answers `None` until the state it looks for is there; the tour asks again.

use std::cell::RefCell;

use postgres_operator::api::{PostgresCluster, PostgresClusterStatus};
use postgres_operator::backups::api::{BackupStatus, LastBackup};
use postgres_operator::backups::restore::RESTORE_RESTORED;
use postgres_operator::client::Client;
use postgres_operator::controller::pods::{label_selector, pods_path, Pod};
use postgres_operator::postgres::conditions::PHASE_RUNNING;

use crate::example::EXAMPLE_NAME;

/// `pod NAME` for a pod IP of the example's pods, or a note that none has it.
pub async fn pod_with_address(client: &Client, address: &str) -> String {
    let path = pods_path(client.namespace(), &label_selector(EXAMPLE_NAME));
    let pods = client.get::<serde_json::Value>(&path).await.ok();
    let items = pods
        .as_ref()
        .and_then(|list| list["items"].as_array())
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .find(|pod| pod["status"]["podIP"].as_str() == Some(address))
        .and_then(|pod| pod["metadata"]["name"].as_str())
        .map_or_else(
            || "no pod of the cluster has that address".to_string(),
            |name| format!("pod {name}"),
        )
}

/// The primary's name once the cluster has `size` members, all ready (from its `status`).
pub async fn ready_members(client: &Client, cluster_path: &str, size: i64) -> Option<String> {
    let cluster: PostgresCluster = client.get(cluster_path).await.ok()?;
    let status = cluster.status?;
    (status.size == Some(size) && status.ready_instances == Some(size))
        .then_some(status.primary)
        .flatten()
}

/// The new primary's name once `status.primary` names another pod than `old` and it is ready.
pub async fn new_primary(client: &Client, cluster_path: &str, old: &str) -> Option<String> {
    let cluster: PostgresCluster = client.get(cluster_path).await.ok()?;
    let primary = cluster.status?.primary.filter(|name| name != old)?;
    is_ready(client, &primary).await.then_some(primary)
}

/// Whether the pod `name` is Ready (false if it cannot be read).
async fn is_ready(client: &Client, name: &str) -> bool {
    let path = format!("/api/v1/namespaces/{}/pods/{name}", client.namespace());
    client
        .get::<Pod>(&path)
        .await
        .is_ok_and(|pod| pod.is_ready())
}

/// `status.lastBackup.name`, if a base backup has completed.
pub async fn last_backup_name(client: &Client, cluster_path: &str) -> Option<String> {
    let cluster: PostgresCluster = client.get(cluster_path).await.ok()?;
    Some(BackupStatus::read(&cluster.status?).last_backup?.name)
}

/// `status.lastBackup` once it names another backup than `before`.
pub async fn new_last_backup(
    client: &Client,
    cluster_path: &str,
    before: Option<&str>,
) -> Option<LastBackup> {
    let cluster: PostgresCluster = client.get(cluster_path).await.ok()?;
    BackupStatus::read(&cluster.status?)
        .last_backup
        .filter(|backup| Some(backup.name.as_str()) != before)
}

/// The phases `status.phase` goes through while the tour polls it (the cluster was Running
/// before the act).
pub struct PhaseLog {
    last: RefCell<String>,
}

impl Default for PhaseLog {
    fn default() -> Self {
        PhaseLog {
            last: RefCell::new(PHASE_RUNNING.to_string()),
        }
    }
}

impl PhaseLog {
    /// A line to print if `phase` is not the one seen last.
    pub fn changed(&self, phase: Option<&str>) -> Option<String> {
        let phase = phase.unwrap_or("<none>");
        let mut last = self.last.borrow_mut();
        (*last != phase).then(|| {
            let note = format!("   status.phase: {last} -> {phase}");
            *last = phase.to_string();
            note
        })
    }
}

/// Once the restore is recorded as done, the phase is Running again and the restored pod is
/// ready: its name and `status.restore.message` (the WAL position it reached). And a note when
/// the phase has changed.
pub async fn restored_primary(
    client: &Client,
    cluster_path: &str,
    phases: &PhaseLog,
) -> (Option<(String, String)>, Option<String>) {
    let Some(status) = client
        .get::<PostgresCluster>(cluster_path)
        .await
        .ok()
        .and_then(|cluster| cluster.status)
    else {
        return (None, None);
    };
    let note = phases.changed(status.phase.as_deref());
    (restored_and_ready(client, status).await, note)
}

async fn restored_and_ready(
    client: &Client,
    status: PostgresClusterStatus,
) -> Option<(String, String)> {
    let restore = BackupStatus::read(&status)
        .restore
        .filter(|restore| restore.state == RESTORE_RESTORED)?;
    let running = status.phase.as_deref() == Some(PHASE_RUNNING);
    let primary = status
        .primary
        .filter(|primary| running && *primary == restore.pod)?;
    is_ready(client, &primary)
        .await
        .then_some((primary, restore.message))
}
