//! What the operator last observed of a cluster, `status`, in its typed shape, and the one line
//! the workshop's log prints of it. Support: a learner may skip it on first read — step 02 only
//! carries `status` along; step 04 is the first to write it.
//!
//! WORKSHOP.md, step 04 ("Status").

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What the operator last observed. Written through the `/status` subresource only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresClusterStatus {
    /// `Creating`, `Running` or `Failed` (step 04); `Recovering` (step 05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The pod name of the current primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// How many member pods exist: the scale subresource's `status.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// How many member pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<i64>,
    /// The version every member runs (an upgrade is under way while it differs from the spec's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// A label selector string matching the member pods. The scale subresource serves it as
    /// `status.selector`, which `kubectl scale` ignores but a HorizontalPodAutoscaler needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One per type (`Available`, `Progressing`, `Degraded`): the CRD declares the list a map
    /// keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The fields later steps write (step 04: `switchover`, `synchronous`; step 05:
    /// `lastBackup`, `backupRequested`, `restore`), carried as they are, so that a status
    /// written by one step keeps the others'. Each step reads and writes its own (`field` and
    /// `set_field` in `src/postgres/api.rs`).
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

/// One status condition, in the shape every Kubernetes API uses (`metav1.Condition`), so
/// `kubectl wait --for=condition=Available pgc/NAME` and `kubectl describe` understand it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`: a string, not a bool, because "we do not know" is a state.
    pub status: String,
    /// One CamelCase word; the CRD schema refuses an empty one, as metav1.Condition does.
    pub reason: String,
    pub message: String,
    /// RFC 3339. Moves only when `status` flips, not on every write.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `{phase: Running, size: 3}` with the fields that are set, or `<none>` (the workshop's word).
pub fn describe_status(status: Option<&PostgresClusterStatus>) -> String {
    let Some(status) = status else {
        return "<none>".to_string();
    };
    let mut fields = Vec::new();
    if let Some(phase) = &status.phase {
        fields.push(format!("phase: {phase}"));
    }
    if let Some(size) = status.size {
        fields.push(format!("size: {size}"));
    }
    if let Some(ready) = status.ready_instances {
        fields.push(format!("readyInstances: {ready}"));
    }
    if fields.is_empty() {
        "<none>".to_string()
    } else {
        format!("{{{}}}", fields.join(", "))
    }
}
