//! The resource metrics API (`metrics.k8s.io/v1beta1`) that `kubectl top pod` and `kubectl top
//! node` read, as metrics-server serves it in a cluster: `PodMetrics` per running pod and
//! `NodeMetrics` for the node.
//!
//! WORKSHOP.md, "Set-up". With the process runtime the figures are the pods' real processes
//! (`runtime/usage.rs` reads them from /proc as cAdvisor reads cgroups); simulated pods run
//! nothing and report zero. The node reports what its pods use together, not the whole
//! machine's load: its capacity is made up too (`builtins::initial_node`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::resources::{METRICS_GROUP as GROUP, METRICS_VERSION as VERSION};
use crate::runtime::ContainerUsage;
use crate::selector::LabelSelector;
use crate::state::Shared;
use crate::status::{Status, StatusDetails};
use crate::timefmt;

/// metrics-server's usual window, for a node with no pod running.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

/// `GET /apis/metrics.k8s.io/v1beta1/<rest>`: `pods`, `namespaces/NS/pods[/NAME]`,
/// `nodes[/NAME]`.
pub(crate) fn answer(
    shared: &Arc<Shared>,
    rest: &[&str],
    query: &HashMap<String, String>,
) -> Result<Value, ApiError> {
    let selector = match query.get("labelSelector").filter(|s| !s.trim().is_empty()) {
        Some(text) => Some(
            LabelSelector::parse(text)
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        ),
        None => None,
    };
    let selected = |object: &Value| selector.as_ref().is_none_or(|s| s.matches_object(object));
    match rest {
        ["pods"] => Ok(pod_list(shared, None, &selected)),
        ["namespaces", namespace, "pods"] => Ok(pod_list(shared, Some(namespace), &selected)),
        ["namespaces", namespace, "pods", name] => {
            let pod = shared.store.lock().get("/pods", namespace, name);
            pod.and_then(|pod| pod_metrics(shared, &pod))
                .ok_or_else(|| not_found("pods", &format!("{namespace}/{name}")))
        }
        ["nodes"] => {
            let nodes = shared.store.lock().list("/nodes", None);
            let items: Vec<Value> = nodes
                .iter()
                .filter(|node| selected(node))
                .map(|node| node_metrics(shared, node))
                .collect();
            Ok(list("NodeMetricsList", items))
        }
        ["nodes", name] => {
            let node = shared.store.lock().get("/nodes", "", name);
            node.map(|node| node_metrics(shared, &node))
                .ok_or_else(|| not_found("nodes", name))
        }
        _ => Err(ApiError::path_not_found()),
    }
}

fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": format!("{GROUP}/{VERSION}"),
           "metadata": {}, "items": items})
}

/// metrics-server's NotFound: `podmetrics.metrics.k8s.io "default/web" not found`.
fn not_found(plural: &str, name: &str) -> ApiError {
    let kind = if plural == "pods" {
        "podmetrics"
    } else {
        "nodemetrics"
    };
    let mut status = Status::failure(
        404,
        "NotFound",
        format!("{kind}.{GROUP} \"{name}\" not found"),
    );
    status.details = Some(StatusDetails {
        name: name.to_string(),
        group: GROUP.to_string(),
        kind: kind.to_string(),
        ..Default::default()
    });
    status.into()
}

fn pod_list(
    shared: &Arc<Shared>,
    namespace: Option<&str>,
    selected: &dyn Fn(&Value) -> bool,
) -> Value {
    let pods = shared.store.lock().list("/pods", namespace);
    let items = pods
        .iter()
        .filter(|pod| selected(pod))
        .filter_map(|pod| pod_metrics(shared, pod))
        .collect();
    list("PodMetricsList", items)
}

/// What each container of `pod` uses; None for a pod with nothing running (metrics-server has
/// no figures for it either: Pending, finished, or on a lost node).
fn container_usage(shared: &Arc<Shared>, pod: &Value) -> Option<Vec<ContainerUsage>> {
    let metadata = &pod["metadata"];
    let namespace = metadata["namespace"].as_str().unwrap_or_default();
    let name = metadata["name"].as_str().unwrap_or_default();
    match &shared.node {
        Some(node) => node.pod_usage(namespace, name),
        None => {
            if pod["status"]["phase"] != "Running" {
                return None;
            }
            let containers = pod["spec"]["containers"].as_array()?;
            Some(
                containers
                    .iter()
                    .map(|c| ContainerUsage::nothing_runs(c["name"].as_str().unwrap_or_default()))
                    .collect(),
            )
        }
    }
}

fn pod_metrics(shared: &Arc<Shared>, pod: &Value) -> Option<Value> {
    let used = container_usage(shared, pod)?;
    let window = used.iter().map(|u| u.window).max().unwrap_or(IDLE_WINDOW);
    let containers: Vec<Value> = used
        .iter()
        .map(|u| json!({"name": u.name, "usage": usage(u.cpu_nanocores, u.memory_bytes)}))
        .collect();
    let metadata = &pod["metadata"];
    Some(json!({
        "kind": "PodMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
                     "labels": metadata["labels"], "creationTimestamp": timefmt::now_rfc3339()},
        "timestamp": timefmt::now_rfc3339(),
        "window": window_text(window),
        "containers": containers
    }))
}

/// The node's use: its running pods' together.
fn node_metrics(shared: &Arc<Shared>, node: &Value) -> Value {
    let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
    let pods = shared.store.lock().list("/pods", None);
    let (mut cpu, mut memory, mut window) = (0u64, 0u64, IDLE_WINDOW);
    for pod in pods
        .iter()
        .filter(|pod| pod["spec"]["nodeName"] == node_name)
    {
        for used in container_usage(shared, pod).into_iter().flatten() {
            cpu = cpu.saturating_add(used.cpu_nanocores);
            memory = memory.saturating_add(used.memory_bytes);
            window = used.window;
        }
    }
    json!({
        "kind": "NodeMetrics", "apiVersion": format!("{GROUP}/{VERSION}"),
        "metadata": {"name": node_name, "labels": node["metadata"]["labels"],
                     "creationTimestamp": timefmt::now_rfc3339()},
        "timestamp": timefmt::now_rfc3339(),
        "window": window_text(window),
        "usage": usage(cpu, memory)
    })
}

/// Quantities as metrics-server writes them: CPU in nanocores, memory in KiB.
fn usage(nanocores: u64, bytes: u64) -> Value {
    json!({"cpu": format!("{nanocores}n"), "memory": format!("{}Ki", bytes / 1024)})
}

/// A Go duration (`metav1.Duration`): `1500ms`.
fn window_text(window: Duration) -> String {
    format!("{}ms", window.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_written_as_metrics_server_writes_them() {
        assert_eq!(
            usage(1_500_000, 10 * 1024 * 1024),
            json!({"cpu": "1500000n", "memory": "10240Ki"})
        );
        assert_eq!(window_text(Duration::from_millis(10_250)), "10250ms");
    }

    #[test]
    fn a_missing_pod_is_a_not_found_status_in_metrics_server_words() {
        let error = not_found("pods", "default/gone");
        assert_eq!(error.code(), 404);
        assert_eq!(
            error.status.message,
            "podmetrics.metrics.k8s.io \"default/gone\" not found"
        );
    }
}
