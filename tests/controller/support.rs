//! Shared by the controller's tests: PostgresCluster objects to feed the controller, an
//! in-memory `PodApi`, and the transcript of its story lines, waited on with a deadline.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres_operator::api::{ObjectMeta, PostgresCluster};
use postgres_operator::controller::pods::{
    owner_reference, pod_labels, Pod, PodApi, PodApiError, PodStatus,
};
use postgres_operator::controller::{Controller, ControllerOptions, PlaceholderTask};
use postgres_operator::story::{LogLine, Reporter};
use tokio::sync::mpsc;

pub fn cluster(namespace: &str, name: &str, size: i64) -> PostgresCluster {
    let mut cluster = PostgresCluster::new(namespace, name, test_support::cluster_spec(size));
    cluster.metadata.uid = format!("uid-{namespace}-{name}").into();
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
            uid: format!("pod-uid-{name}").into(),
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

    async fn create_pod(&self, _namespace: &str, pod: &Pod) -> Result<(), PodApiError> {
        self.pods.lock().unwrap().push(pod.clone());
        Ok(())
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

/// Stage 03's controller over `pods` (in memory or the real client) with `options`, and the
/// transcript of what it says.
pub fn start<P: PodApi>(
    pods: P,
    options: ControllerOptions,
) -> (Controller<PlaceholderTask<P>>, Transcript) {
    let (reporter, transcript) = Transcript::record();
    (Controller::new(pods, options, reporter), transcript)
}

/// Options with this reconcile interval, the rest the defaults.
pub fn every(reconcile_interval: Duration) -> ControllerOptions {
    ControllerOptions {
        reconcile_interval,
        ..ControllerOptions::default()
    }
}

/// The story lines an operator tells, as they arrive: each wait has a deadline, never a sleep.
pub struct Transcript {
    lines: mpsc::UnboundedReceiver<LogLine>,
    /// Every line received so far, in order.
    pub seen: Vec<LogLine>,
}

impl Transcript {
    /// A reporter to hand to the operator, and the transcript it fills.
    pub fn record() -> (Reporter, Transcript) {
        let (reporter, lines) = Reporter::channel();
        let transcript = Transcript {
            lines,
            seen: Vec::new(),
        };
        (reporter, transcript)
    }

    /// The first line for `cluster` containing `needle`, among those received so far or those
    /// still to come. Panics with the whole transcript when `deadline` passes first.
    pub async fn wait_for(&mut self, cluster: &str, needle: &str, deadline: Duration) -> LogLine {
        let wanted = |l: &LogLine| l.is_about(cluster) && l.line.contains(needle);
        if let Some(found) = self.seen.iter().find(|l| wanted(l)) {
            return found.clone();
        }
        let (lines, seen) = (&mut self.lines, &mut self.seen);
        let waited = tokio::time::timeout(deadline, async {
            while let Some(line) = lines.recv().await {
                seen.push(line.clone());
                if wanted(&line) {
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
                self.seen
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }

    /// [`Transcript::wait_for`] each of `needles` in turn, each within `deadline`.
    pub async fn wait_for_each(&mut self, cluster: &str, needles: &[&str], deadline: Duration) {
        for needle in needles {
            self.wait_for(cluster, needle, deadline).await;
        }
    }

    /// Take in whatever lines are already waiting, without blocking.
    pub fn drain(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            self.seen.push(line);
        }
    }

    /// How many lines so far (waiting ones included) are `wanted`.
    pub fn count(&mut self, wanted: impl Fn(&LogLine) -> bool) -> usize {
        self.drain();
        self.seen.iter().filter(|l| wanted(l)).count()
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
