//! Shared by the `controller_*` tests: PostgresCluster objects to feed the controller, an
//! in-memory `PodApi`, and a way to wait for a cluster's story line with a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres_operator::api::{ObjectMeta, PostgresCluster};
use postgres_operator::controller::pods::{
    owner_reference, pod_labels, Pod, PodApi, PodApiError, PodStatus,
};
use postgres_operator::story::LogLine;
use tokio::sync::mpsc;

pub fn cluster(namespace: &str, name: &str, size: i64) -> PostgresCluster {
    let mut cluster = PostgresCluster::new(namespace, name, test_support::cluster_spec(size));
    cluster.metadata.uid = format!("uid-{namespace}-{name}");
    cluster
}

pub fn resized(cluster: &PostgresCluster, size: i64) -> PostgresCluster {
    let mut newer = cluster.clone();
    newer.spec.size = size;
    newer
}

/// A pod owned by `owner` (labels + ownerReference) in the given phase.
pub fn owned_pod(owner: &PostgresCluster, name: &str, phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: owner.metadata.namespace.clone(),
            uid: format!("pod-uid-{name}"),
            labels: pod_labels(&owner.metadata.name),
            owner_references: vec![owner_reference(owner)],
            ..ObjectMeta::default()
        },
        status: PodStatus {
            phase: Some(phase.into()),
            ..PodStatus::default()
        },
        ..Pod::default()
    }
}

/// Pods in memory. Lists ignore the selector (the tasks must filter by owner uid themselves).
#[derive(Clone, Default)]
pub struct FakePods {
    pub pods: Arc<Mutex<Vec<Pod>>>,
    pub deleted: Arc<Mutex<Vec<String>>>,
    pub lists: Arc<Mutex<usize>>,
}

impl PodApi for FakePods {
    async fn list_pods(&self, _namespace: &str, _selector: &str) -> Result<Vec<Pod>, PodApiError> {
        *self.lists.lock().unwrap() += 1;
        Ok(self.pods.lock().unwrap().clone())
    }

    async fn delete_pod(&self, _namespace: &str, name: &str) -> Result<(), PodApiError> {
        self.pods
            .lock()
            .unwrap()
            .retain(|pod| pod.metadata.name != name);
        self.deleted.lock().unwrap().push(name.to_string());
        Ok(())
    }
}

/// Every line received so far plus the new ones, until one for `cluster` contains `needle`.
/// Panics with the whole transcript when `deadline` passes first.
pub async fn wait_for_line(
    lines: &mut mpsc::UnboundedReceiver<LogLine>,
    seen: &mut Vec<LogLine>,
    cluster: &str,
    needle: &str,
    deadline: Duration,
) -> LogLine {
    if let Some(found) = seen
        .iter()
        .find(|l| l.is_about(cluster) && l.line.contains(needle))
    {
        return found.clone();
    }
    let waited = tokio::time::timeout(deadline, async {
        while let Some(line) = lines.recv().await {
            seen.push(line.clone());
            if line.is_about(cluster) && line.line.contains(needle) {
                return Some(line);
            }
        }
        None
    })
    .await;
    match waited {
        Ok(Some(line)) => line,
        _ => panic!(
            "no line for {cluster} containing {needle:?} within {deadline:?}; transcript:\n{}",
            seen.iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// Whatever lines are already waiting, without blocking.
pub fn drain(lines: &mut mpsc::UnboundedReceiver<LogLine>, seen: &mut Vec<LogLine>) {
    while let Ok(line) = lines.try_recv() {
        seen.push(line);
    }
}

/// A sandbox on 127.0.0.1:0 with the CRD registered and Established, and a client for it.
pub async fn sandbox_with_crd(
    kubelet_delay: Duration,
) -> (sandbox::Sandbox, postgres_operator::client::Client) {
    test_support::sandbox_with_crd(sandbox::SandboxOptions {
        kubelet_delay,
        ..sandbox::SandboxOptions::default()
    })
    .await
}

/// POST a pod owned by `owner`, carrying the operator's labels (what a finished operator would do).
pub async fn create_owned_pod(
    client: &postgres_operator::client::Client,
    owner: &PostgresCluster,
    name: &str,
) {
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": pod_labels(&owner.metadata.name),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": {"containers": [{"name": "postgres", "image": format!("postgres:{}", owner.spec.version)}]},
    });
    let _: serde_json::Value = client
        .create(
            &format!("/api/v1/namespaces/{}/pods", owner.metadata.namespace),
            &body,
        )
        .await
        .expect("pod created");
}
