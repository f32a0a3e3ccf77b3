//! The ReplicaSet controller: create or delete pods until `replicas` of them are active,
//! then write the status kube's controller writes.

use std::cmp::Reverse;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{
    controller_reference, int, is_active, is_available, is_deleting, is_ready, name, namespace,
    remove_condition, replicas, set_condition, set_count, status_object, Writer, BURST, PODS,
    REPLICA_SETS,
};
use crate::errors::ApiError;
use crate::objects::Part;
use crate::selector::LabelSelector;
use crate::timefmt;

const COMPONENT: &str = "replicaset-controller";

pub(super) fn sync(writer: &mut Writer<'_>, replica_set: &Arc<Value>) -> Result<(), ApiError> {
    let mut failure: Option<(&str, String)> = None;
    // A ReplicaSet being deleted keeps its pods until the garbage collector takes them.
    if !is_deleting(replica_set) {
        let active = active_pods(writer, replica_set);
        let diff = active.len() as i64 - replicas(replica_set);
        if diff < 0 {
            failure = create_pods(writer, replica_set, diff.unsigned_abs() as usize)
                .err()
                .map(|message| ("FailedCreate", message));
        } else if diff > 0 {
            failure = delete_pods(writer, replica_set, active, diff as usize)
                .err()
                .map(|message| ("FailedDelete", message));
        }
    }
    write_status(writer, replica_set, failure)
}

/// The pods this ReplicaSet controls that are neither finished nor terminating.
fn active_pods(writer: &Writer<'_>, replica_set: &Value) -> Vec<Arc<Value>> {
    writer
        .owned(PODS, replica_set)
        .into_iter()
        .filter(|pod| is_active(pod))
        .collect()
}

/// A pod of the template: labels, annotations and finalizers from it, a generated name
/// `<replicaset>-<5 characters>`, and this ReplicaSet as its controller.
fn pod_from_template(replica_set: &Value) -> Value {
    let template = &replica_set["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{}-", name(replica_set)),
        "ownerReferences": [controller_reference(replica_set)]
    });
    for field in ["labels", "annotations", "finalizers"] {
        if !template["metadata"][field].is_null() {
            metadata[field] = template["metadata"][field].clone();
        }
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
}

/// Create up to `missing` pods (at most [`BURST`]); stop at the first refusal.
fn create_pods(writer: &mut Writer<'_>, replica_set: &Value, missing: usize) -> Result<(), String> {
    for _ in 0..missing.min(BURST) {
        match writer.create(PODS, namespace(replica_set), pod_from_template(replica_set)) {
            Ok(pod) => {
                let message = format!("Created pod: {}", name(&pod));
                writer.event(
                    replica_set,
                    COMPONENT,
                    "Normal",
                    "SuccessfulCreate",
                    message,
                );
            }
            Err(error) => {
                let message = format!("Error creating: {}", error.status.message);
                writer.event(replica_set, COMPONENT, "Warning", "FailedCreate", message);
                return Err(error.status.message.clone());
            }
        }
    }
    Ok(())
}

/// Delete `surplus` pods (at most [`BURST`]), the least useful first.
fn delete_pods(
    writer: &mut Writer<'_>,
    replica_set: &Value,
    mut active: Vec<Arc<Value>>,
    surplus: usize,
) -> Result<(), String> {
    active.sort_by_key(|pod| deletion_rank(pod));
    for pod in active.iter().take(surplus.min(BURST)) {
        match writer.delete(PODS, pod) {
            Ok(()) => {
                let message = format!("Deleted pod: {}", name(pod));
                writer.event(
                    replica_set,
                    COMPONENT,
                    "Normal",
                    "SuccessfulDelete",
                    message,
                );
            }
            Err(error) => {
                let message = format!("Error deleting: {}", error.status.message);
                writer.event(replica_set, COMPONENT, "Warning", "FailedDelete", message);
                return Err(error.status.message.clone());
            }
        }
    }
    Ok(())
}

/// kube's `ActivePodsWithRanks` order, first deleted first: not scheduled before scheduled,
/// Pending before Unknown before Running, not ready before ready, ready more recently
/// first, more restarts first, newer first.
#[allow(clippy::type_complexity)]
fn deletion_rank(
    pod: &Value,
) -> (
    bool,
    u8,
    bool,
    Reverse<String>,
    Reverse<i64>,
    Reverse<String>,
) {
    let status = &pod["status"];
    let phase = match status["phase"].as_str() {
        Some("Unknown") => 1,
        Some("Running") => 2,
        _ => 0,
    };
    let ready_time = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or_default()
        .to_string();
    let restarts = status["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| int(&c["restartCount"]))
        .max()
        .unwrap_or(0);
    (
        !pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        phase,
        is_ready(pod),
        Reverse(ready_time),
        Reverse(restarts),
        Reverse(
            pod["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ),
    )
}

/// `replicas, fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration`
/// of the pods as they are now, and a ReplicaFailure condition while creating or deleting fails.
fn write_status(
    writer: &mut Writer<'_>,
    replica_set: &Value,
    failure: Option<(&str, String)>,
) -> Result<(), ApiError> {
    let active = active_pods(writer, replica_set);
    let template_labels: Vec<String> = replica_set["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    let fully_labeled = LabelSelector::parse(&template_labels.join(",")).ok();
    let min_ready = int(&replica_set["spec"]["minReadySeconds"]);
    let (mut labeled, mut ready, mut available) = (0, 0, 0);
    for pod in &active {
        if fully_labeled
            .as_ref()
            .is_some_and(|s| s.matches_object(pod))
        {
            labeled += 1;
        }
        if is_ready(pod) {
            ready += 1;
            if is_available(writer, pod, min_ready) {
                available += 1;
            }
        }
    }
    // `replicas` is the one count Go does not omit when 0.
    let mut status = json!({"replicas": active.len()});
    set_count(&mut status, "fullyLabeledReplicas", labeled);
    set_count(&mut status, "readyReplicas", ready);
    set_count(&mut status, "availableReplicas", available);
    set_count(
        &mut status,
        "observedGeneration",
        int(&replica_set["metadata"]["generation"]),
    );
    let existing = replica_set["status"]["conditions"].clone();
    if existing.is_array() {
        status["conditions"] = existing;
    }
    let has_failure = super::condition(&status, "ReplicaFailure").is_some();
    match failure {
        Some((reason, message)) if !has_failure => set_condition(
            &mut status,
            json!({"type": "ReplicaFailure", "status": "True", "reason": reason,
                   "message": message, "lastTransitionTime": timefmt::now_rfc3339()}),
        ),
        None if has_failure => remove_condition(&mut status, "ReplicaFailure"),
        _ => {}
    }
    writer.update(REPLICA_SETS, replica_set, Part::Status, |stored| {
        *status_object(stored) = status;
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pending goes before Running, not ready before ready, and the newest of equals first.
    #[test]
    fn pods_are_deleted_least_useful_first() {
        let pod = |name: &str, phase: &str, ready: bool, created: &str| {
            json!({"metadata": {"name": name, "creationTimestamp": created},
                   "spec": {"nodeName": "sandbox-node"},
                   "status": {"phase": phase, "conditions": [
                       {"type": "Ready", "status": if ready { "True" } else { "False" },
                        "lastTransitionTime": created}]}})
        };
        let mut pods = [
            pod("old-ready", "Running", true, "2024-01-01T00:00:00Z"),
            pod("pending", "Pending", false, "2024-01-01T00:00:00Z"),
            pod("new-ready", "Running", true, "2024-01-02T00:00:00Z"),
            pod(
                "running-not-ready",
                "Running",
                false,
                "2024-01-01T00:00:00Z",
            ),
        ];
        pods.sort_by_key(deletion_rank);
        let order: Vec<&str> = pods.iter().map(name).collect();
        assert_eq!(
            order,
            ["pending", "running-not-ready", "new-ready", "old-ready"]
        );
    }
}
