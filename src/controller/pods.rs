//! Support: skip it on first read — the pod type and its three calls (list, create, delete), of
//! which stage 03's placeholder only lists and deletes; create is the homework's.
//!
//! The cluster tasks' view of Pods: which labels mark a Postgres pod as ours, how ownership is
//! checked, and the calls a task makes (list, create, delete) behind a small trait.
//!
//! WORKSHOP.md, step 03 ("The cluster task"). The trait exists so the reconcile
//! loop can be unit-tested with a fake in memory; [`PodApi`] for [`Client`] is the real thing.

use std::collections::BTreeMap;
use std::future::Future;

use serde::{Deserialize, Serialize};

use crate::api::{HasMetadata, ObjectList, ObjectMeta, OwnerReference, PostgresCluster};
use crate::client::{Client, ClientError};

/// Every Postgres pod this operator makes carries this label (value [`APP_LABEL_VALUE`]).
/// `app.kubernetes.io/name` is the recommended label for "which application is this".
pub const APP_LABEL: &str = "app.kubernetes.io/name";
pub const APP_LABEL_VALUE: &str = "postgres";
/// ...and this one, naming the `PostgresCluster` it belongs to. Prefixed with our API group so it
/// cannot clash with anyone else's `cluster` label.
pub const CLUSTER_LABEL: &str = "workshop.example.com/cluster";

/// The labels a pod of `cluster_name` carries (what a homework solution puts on the pods it creates).
pub fn pod_labels(cluster_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.to_string(), APP_LABEL_VALUE.to_string()),
        (CLUSTER_LABEL.to_string(), cluster_name.to_string()),
    ])
}

/// `app.kubernetes.io/name=postgres,workshop.example.com/cluster=<name>`: the server-side filter.
/// Comma means AND in a Kubernetes equality-based label selector.
pub fn label_selector(cluster_name: &str) -> String {
    format!("{APP_LABEL}={APP_LABEL_VALUE},{CLUSTER_LABEL}={cluster_name}")
}

/// The ownerReference a pod of `cluster` carries. With it, deleting the `PostgresCluster` makes
/// the garbage collector delete its pods even if the operator is down at the time.
pub fn owner_reference(cluster: &PostgresCluster) -> OwnerReference {
    OwnerReference {
        api_version: crate::api::API_VERSION.to_string(),
        kind: crate::api::KIND.to_string(),
        name: cluster.metadata.name.clone(),
        uid: cluster.metadata.uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The fields of a Pod the reconcile loop reads. Everything else the server sends is ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: PodSpec,
    #[serde(default)]
    pub status: PodStatus,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodSpec {
    #[serde(default)]
    pub containers: Vec<Container>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub image: String,
    /// The arguments it was started with: a server's `-c` settings (step 06 reads them).
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment. The postgres image refuses to initialise a database without
    /// `POSTGRES_PASSWORD` (or `POSTGRES_HOST_AUTH_METHOD=trust`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
}

/// One variable of a container's environment, as a literal value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// Pending, Running, Succeeded, Failed or Unknown.
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodCondition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_statuses: Vec<ContainerStatus>,
}

/// One container's record, as the kubelet keeps it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    /// How many times the kubelet restarted it in place (step 05 asks a primary that came back
    /// whether it is still one).
    #[serde(default)]
    pub restart_count: u32,
    /// Its state now; step 05 reads only when a running one started.
    #[serde(default)]
    pub state: ContainerState,
}

/// A container's `state`, of which only `running` is kept.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerState {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<ContainerRunning>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRunning {
    /// When it started (RFC 3339, whole seconds). A node that rebooted starts its containers
    /// anew and may keep their `restartCount` (or count from 0 again): this moves all the same.
    #[serde(default)]
    pub started_at: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    /// When `status` last changed (RFC 3339, whole seconds), as the kubelet recorded it.
    #[serde(
        default,
        rename = "lastTransitionTime",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_transition_time: Option<String>,
}

/// So stage 04 can watch pods with the same `list_then_watch` as clusters.
impl HasMetadata for Pod {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl Pod {
    /// Labels can be copied onto any pod by anyone; the owner's uid cannot be faked by accident.
    /// A cluster deleted and re-created under the same name gets a new uid, so the old
    /// incarnation's pods (still being garbage-collected) are not counted as the new one's.
    pub fn is_owned_by(&self, cluster_uid: &str) -> bool {
        self.metadata
            .owner_references
            .iter()
            .any(|owner| owner.uid == cluster_uid)
    }

    pub fn phase(&self) -> &str {
        self.status.phase.as_deref().unwrap_or("")
    }

    /// The kubelet's verdict: condition `Ready` is `True` once every container passes its
    /// readiness probe. Only Ready pods are a Service's endpoints.
    pub fn is_ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }

    /// How many times the kubelet restarted `container` in place (0 when not reported).
    pub fn restarts(&self, container: &str) -> u32 {
        self.status
            .container_statuses
            .iter()
            .find(|c| c.name == container)
            .map_or(0, |c| c.restart_count)
    }

    /// When `container` last started (`state.running.startedAt`), if it runs.
    pub fn started_at(&self, container: &str) -> Option<&str> {
        self.status
            .container_statuses
            .iter()
            .find(|c| c.name == container)
            .and_then(|c| c.state.running.as_ref()?.started_at.as_deref())
    }

    /// A delete was accepted (`deletionTimestamp` set): the pod is on its way out, even while its
    /// processes still run their grace period.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// The pod calls a cluster task makes. Real: [`Client`]. Tests: a fake holding a `Vec<Pod>`.
///
/// Written as `fn .. -> impl Future + Send` (rather than `async fn`) so the futures are known to be
/// `Send` and a cluster task can run on any runtime thread; implementations may still use `async fn`.
pub trait PodApi: Clone + Send + Sync + 'static {
    fn list_pods(
        &self,
        namespace: &str,
        label_selector: &str,
    ) -> impl Future<Output = Result<Vec<Pod>, PodApiError>> + Send;

    /// Create `pod` in `namespace` (a POST to the namespace's pods). Stage 03 itself never does:
    /// launching the pods is its homework.
    fn create_pod(
        &self,
        namespace: &str,
        pod: &Pod,
    ) -> impl Future<Output = Result<(), PodApiError>> + Send;

    /// Deleting a pod that is already gone is success.
    fn delete_pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<(), PodApiError>> + Send;
}

/// Which pod call failed, wrapping the client's error so a caller can still ask what the server
/// said ([`PodApiError::status_code`]: 403 is missing RBAC, 503 an overloaded server).
#[derive(Debug, thiserror::Error)]
pub enum PodApiError {
    #[error("listing pods in namespace {namespace} with selector {label_selector}: {source}")]
    ListPods {
        namespace: String,
        label_selector: String,
        #[source]
        source: ClientError,
    },
    #[error("creating pod {namespace}/{name}: {source}")]
    CreatePod {
        namespace: String,
        name: String,
        #[source]
        source: ClientError,
    },
    #[error("deleting pod {namespace}/{name}: {source}")]
    DeletePod {
        namespace: String,
        name: String,
        #[source]
        source: ClientError,
    },
}

impl PodApiError {
    /// The client error underneath.
    pub fn client_error(&self) -> &ClientError {
        match self {
            PodApiError::ListPods { source, .. }
            | PodApiError::CreatePod { source, .. }
            | PodApiError::DeletePod { source, .. } => source,
        }
    }

    /// The HTTP status code the API server answered with, if it answered.
    pub fn status_code(&self) -> Option<u16> {
        self.client_error().status_code()
    }

    /// What a failed pod list means for the next tick, by the HTTP status underneath. 403: RBAC
    /// refuses us, and waiting alone will not change that, so say what to grant. Anything else
    /// (503 from an overloaded apiserver, a dropped connection) may well pass by the next tick.
    pub fn after_failed_list(&self) -> &'static str {
        match self.status_code() {
            Some(403) => "the operator may not list pods: grant `list` on pods in its Role (kube/rbac.yaml); trying again next tick",
            _ => "trying again next tick",
        }
    }
}

/// `/api/v1/namespaces/NS/pods?labelSelector=...` (the selector percent-encoded: it holds `/`, `=`, `,`).
pub fn pods_path(namespace: &str, label_selector: &str) -> String {
    let selector: String =
        url::form_urlencoded::byte_serialize(label_selector.as_bytes()).collect();
    format!("/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
}

impl PodApi for Client {
    async fn list_pods(
        &self,
        namespace: &str,
        label_selector: &str,
    ) -> Result<Vec<Pod>, PodApiError> {
        let list: ObjectList<Pod> = self
            .get(&pods_path(namespace, label_selector))
            .await
            .map_err(|source| PodApiError::ListPods {
                namespace: namespace.to_string(),
                label_selector: label_selector.to_string(),
                source,
            })?;
        Ok(list.items)
    }

    async fn create_pod(&self, namespace: &str, pod: &Pod) -> Result<(), PodApiError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods");
        match self.create::<_, serde_json::Value>(&path, pod).await {
            Ok(_) => Ok(()),
            Err(source) => Err(PodApiError::CreatePod {
                namespace: namespace.to_string(),
                name: pod.metadata.name.clone(),
                source,
            }),
        }
    }

    async fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), PodApiError> {
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        match self.delete::<serde_json::Value>(&path).await {
            Ok(_) => Ok(()),
            // 404: someone (the garbage collector, a user) deleted it first. That is what we wanted.
            Err(error) if error.status_code() == Some(404) => Ok(()),
            Err(source) => Err(PodApiError::DeletePod {
                namespace: namespace.to_string(),
                name: name.to_string(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The selector's `/`, `=` and `,` are percent-encoded in the query string.
    #[test]
    fn selector_is_percent_encoded_in_the_path() {
        assert_eq!(
            pods_path("default", &label_selector("db")),
            "/api/v1/namespaces/default/pods?labelSelector=app.kubernetes.io%2Fname%3Dpostgres%2Cworkshop.example.com%2Fcluster%3Ddb"
        );
    }

    /// A pod is ours only if an ownerReference carries our uid.
    #[test]
    fn ownership_is_by_uid_not_by_name() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0000", "ownerReferences": [
                {"apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster", "name": "db", "uid": "uid-1"}
            ]},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        assert!(pod.is_owned_by("uid-1"));
        assert!(!pod.is_owned_by("uid-2"));
        assert_eq!(pod.phase(), "Running");
    }
}
