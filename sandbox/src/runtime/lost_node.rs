//! A node that stops reporting, as Kubernetes sees one: what the fault leaves of its pods'
//! processes, and what the node lifecycle controller (kube-controller-manager) does to their
//! objects once the node's grace period is over.
//!
//! WORKSHOP.md, "Set-up: the sandbox". On a cluster, the kubelet of a node that loses power or
//! its network stops renewing its Lease. For `--node-monitor-grace-period` nothing changes in
//! the API: the node's pods stay Running and Ready, and Services keep sending them traffic.
//! Then the controller sets the node's Ready condition to Unknown and each of its pods' Ready
//! condition to False (`MarkPodsNotReady`: the Ready condition only, not the containers'
//! statuses), with a `NodeNotReady` Event. A deletion of such a pod is never confirmed, since
//! the kubelet that would stop its containers and remove the object is gone: the pod stays
//! Terminating until someone deletes it with `gracePeriodSeconds=0` (`kubectl delete --force
//! --grace-period=0`), which removes the object without any word from the node.

use std::time::Duration;

use serde_json::json;

use crate::store::StoreState;
use crate::timefmt;

/// How the node lifecycle controller's grace period defaults: kube-controller-manager's
/// `--node-monitor-grace-period` is 40 s up to Kubernetes 1.31 and 50 s from 1.32
/// (kubernetes/kubernetes#126287). Tests want a short one.
const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// What happens to the processes of a lost node's pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostProcesses {
    /// Stopped with SIGSTOP and left so: a node cut off from the network, or hung, whose
    /// postgres still holds its data directory and its open connections. Nothing resumes them;
    /// removing the pod (force delete) kills them.
    Frozen,
    /// Killed with SIGKILL: a node that lost its power.
    Killed,
}

/// How a node is lost ([`crate::Faults::lose_node`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LostNode {
    pub processes: LostProcesses,
    /// How long the pod's object stays as the kubelet last wrote it (Running, Ready) before the
    /// node lifecycle controller marks it not Ready.
    pub grace: Duration,
}

impl Default for LostNode {
    /// Frozen processes, and a 5 s grace period.
    fn default() -> LostNode {
        LostNode {
            processes: LostProcesses::Frozen,
            grace: DEFAULT_GRACE,
        }
    }
}

/// `MarkPodsNotReady` for one pod: its Ready condition False (if it is still this pod, `uid`).
/// True if the object changed.
pub(crate) fn mark_pod_not_ready(
    state: &mut StoreState,
    namespace: &str,
    name: &str,
    uid: &str,
) -> bool {
    let Some(pod) = state.get("/pods", namespace, name) else {
        return false;
    };
    if pod["metadata"]["uid"].as_str() != Some(uid) {
        return false;
    }
    let mut next = (*pod).clone();
    let mut changed = false;
    for condition in next["status"]["conditions"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        if condition["type"] == "Ready" && condition["status"] != "False" {
            condition["status"] = json!("False");
            condition["lastTransitionTime"] = json!(timefmt::now_rfc3339());
            changed = true;
        }
    }
    if changed {
        state.commit_modified("/pods", next);
    }
    changed
}
