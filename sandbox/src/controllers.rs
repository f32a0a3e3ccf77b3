//! The few controllers an operator relies on: the CRD controller that marks a new CRD
//! Established, and the kubelet. (Garbage collection runs inline with each deletion, in
//! `objects.rs`.) With the simulated runtime the kubelet only marks a new pod Running and
//! nothing is executed; with the process runtime (`runtime.rs`) a new pod is handed to it, and
//! its own pod worker notices deletions and removes the pod once its processes have exited.
//!
//! WORKSHOP.md, "Set-up: the sandbox" (what it is and is not).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::builtins;
use crate::objects::FollowUp;
use crate::runtime;
use crate::state::Shared;
use crate::storage;
use crate::sync::lock;

/// Start the timers that finish what a write began (after the store lock is released).
pub(crate) fn spawn_follow_ups(shared: &Arc<Shared>, follow_ups: Vec<FollowUp>) {
    for follow_up in follow_ups {
        // The process runtime's pod workers see deletions themselves and remove the pod only
        // once its processes have exited: no timer may remove it first.
        if shared.node.is_some() && matches!(follow_up, FollowUp::RemovePod { .. }) {
            continue;
        }
        let shared = shared.clone();
        tokio::spawn(async move {
            let delay = match &follow_up {
                FollowUp::StartPod { .. } => shared.kubelet_delay.subscribe(),
                FollowUp::EstablishCrd { .. } => shared.established_delay.subscribe(),
                FollowUp::RemovePod { .. } => {
                    watch::Sender::new(shared.options.pod_termination_delay).subscribe()
                }
            };
            if !wait_out(delay, &shared.shutdown).await {
                return;
            }
            match follow_up {
                FollowUp::StartPod {
                    namespace,
                    name,
                    uid,
                } => {
                    // The scheduler's storage rule: a pod waits until its claims are bound.
                    let store = &shared.store;
                    match storage::wait_for_claims(store, &namespace, &name, &uid, &shared.shutdown)
                        .await
                    {
                        storage::Scheduling::Schedulable => {
                            start_pod(&shared, &namespace, &name, &uid)
                        }
                        // Deleted before the kubelet started it: nothing runs, so nothing
                        // waits out the termination delay. Removed at once here; a real
                        // cluster removes it later, once its kubelet has seen the pod, found
                        // no container running and confirmed the deletion.
                        storage::Scheduling::Deleted => {
                            remove_pod(&shared, &namespace, &name, &uid)
                        }
                        storage::Scheduling::Gone => {}
                    }
                }
                FollowUp::EstablishCrd { name, uid } => establish_crd(&shared, &name, &uid),
                FollowUp::RemovePod {
                    namespace,
                    name,
                    uid,
                } => remove_pod(&shared, &namespace, &name, &uid),
            }
        });
    }
}

/// Wait until `delay` has passed since now, the delay as it is at each moment: a fault that
/// changes it moves the end of a wait already under way. False if the sandbox stops first.
async fn wait_out(mut delay: watch::Receiver<Duration>, shutdown: &CancellationToken) -> bool {
    let began = Instant::now();
    loop {
        let wanted = *delay.borrow_and_update();
        // Duration::MAX ("never") does not fit in an Instant: a year from now stands for it.
        let never = began + Duration::from_secs(365 * 24 * 3600);
        let until = began.checked_add(wanted).unwrap_or(never);
        tokio::select! {
            () = tokio::time::sleep_until(until) => return true,
            // A closed channel (a fixed delay) disables this branch; the sleep decides.
            Ok(()) = delay.changed() => {}
            () = shutdown.cancelled() => return false,
        }
    }
}

/// After a restart on a data directory, pick up where the loaded objects left off: the
/// process runtime runs the pods that were Running again (on their data, which stayed on disk),
/// Pending pods are scheduled, pods that were terminating are removed (their processes ended
/// with the previous sandbox), and CRDs not yet Established become so. A fresh store has none
/// of these, so this does nothing.
pub(crate) fn resume(shared: &Arc<Shared>) {
    let mut follow_ups = Vec::new();
    {
        let mut state = shared.store.lock();
        for pod in state.list("/pods", None) {
            let metadata = &pod["metadata"];
            let field = |name: &str| metadata[name].as_str().unwrap_or_default().to_string();
            let (namespace, name, uid) = (field("namespace"), field("name"), field("uid"));
            if !metadata["deletionTimestamp"].is_null() {
                runtime::remove_terminated_pod(&mut state, &namespace, &name, &uid);
                continue;
            }
            match pod["status"]["phase"].as_str() {
                Some("Pending") | None => follow_ups.push(FollowUp::StartPod {
                    namespace,
                    name,
                    uid,
                }),
                Some("Running") => {
                    if let Some(node) = &shared.node {
                        tracing::info!(%namespace, %name, "running a pod again after the restart");
                        node.start_pod(&pod);
                    }
                }
                // Succeeded and Failed pods stay as they ended.
                Some(_) => {}
            }
        }
        let crds = state.list("apiextensions.k8s.io/customresourcedefinitions", None);
        for crd in crds {
            let established = crd["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Established"));
            if !established {
                let field = |name: &str| crd["metadata"][name].as_str().unwrap_or_default().into();
                follow_ups.push(FollowUp::EstablishCrd {
                    name: field("name"),
                    uid: field("uid"),
                });
            }
        }
    }
    spawn_follow_ups(shared, follow_ups);
}

/// The kubelet's part: Pending → Running, with an IP, Ready conditions and container statuses.
fn start_pod(shared: &Shared, namespace: &str, name: &str, uid: &str) {
    let mut state = shared.store.lock();
    let Some(pod) = state.get("/pods", namespace, name) else {
        return;
    };
    // The pod may have been deleted and re-created under the same name meanwhile.
    if pod["metadata"]["uid"].as_str() != Some(uid)
        || pod["status"]["phase"].as_str() != Some("Pending")
        || !pod["metadata"]["deletionTimestamp"].is_null()
    {
        return;
    }
    if let Some(node) = &shared.node {
        node.start_pod(&pod);
        return;
    }
    let mut running = (*pod).clone();
    running["status"] = builtins::running_pod_status(&pod, &mut lock(&shared.random));
    // The readiness fault: pods of an image it names run, but never pass readiness.
    if builtins::runs_image(&pod, &lock(&shared.unready_images)) {
        running["status"] = builtins::with_readiness(running["status"].take(), false);
    }
    state.commit_modified("/pods", running);
    tracing::debug!(namespace, name, "simulated kubelet: pod Running");
    if shared.options.pod_events {
        let mut random = lock(&shared.random);
        let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let mut events = vec![builtins::pod_event(
            &pod,
            &mut random,
            "default-scheduler",
            "Scheduled",
            format!("Successfully assigned {namespace}/{name} to {node}"),
        )];
        for container in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let container = container["name"].as_str().unwrap_or_default();
            events.push(builtins::pod_event(
                &pod,
                &mut random,
                "kubelet",
                "Started",
                format!("Started container {container} (simulated: no process runs)"),
            ));
        }
        for event in events {
            state.commit_added("/events", event);
        }
    }
}

/// The simulated kubelet has "stopped" a terminating pod: remove it (or end its grace period
/// if finalizers hold it).
fn remove_pod(shared: &Shared, namespace: &str, name: &str, uid: &str) {
    runtime::remove_terminated_pod(&mut shared.store.lock(), namespace, name, uid);
}

/// The apiextensions controller's part: add `Established=True` (a MODIFIED on CRD watches).
fn establish_crd(shared: &Shared, name: &str, uid: &str) {
    let mut state = shared.store.lock();
    let key = "apiextensions.k8s.io/customresourcedefinitions";
    let Some(crd) = state.get(key, "", name) else {
        return;
    };
    if crd["metadata"]["uid"].as_str() != Some(uid) {
        return;
    }
    let conditions = crd["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if conditions.iter().any(|c| c["type"] == "Established") {
        return;
    }
    let mut established = (*crd).clone();
    let mut conditions = conditions;
    conditions.push(builtins::established_condition());
    established["status"]["conditions"] = json!(conditions);
    state.commit_modified(key, established);
    tracing::debug!(name, "CRD established");
}
