//! One pod's worker: it gives the pod an address and its files, runs the init containers in
//! order and then the containers, writes the status whenever something changed, and, when the
//! pod is deleted, stops the processes before the pod object may go.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Deletion, as the kubelet does it: a pod with a
//! `deletionTimestamp` gets its image's stop signal in every container (SIGTERM unless the image
//! says otherwise; SIGINT for postgres), up to its grace period to exit
//! (`deletionGracePeriodSeconds`, at most `terminationGracePeriodSeconds`), then SIGKILL; only
//! then is the object removed and its emptyDirs deleted. A pod removed outright (`--force
//! --grace-period=0`, its namespace deleted) has its processes killed at once.

use std::sync::Arc;
use std::time::Duration;

use super::container::{self, Kind};
use super::image::Image;
use super::worker::{PodWorker, StoreLookup};
use super::{services, volumes, Node};
use crate::builtins;
use crate::sync::lock;
use crate::timefmt;

/// What the worker found when it looked at its pod object.
enum Seen {
    Present,
    /// A deletionTimestamp: stop within this grace period, then remove the object.
    Terminating(Duration),
    /// Removed (or replaced by a new pod of the same name): kill at once.
    Gone,
}

/// The pod's whole life on this node.
pub(crate) async fn run(node: Arc<Node>, worker: Arc<PodWorker>) {
    node.event(
        &worker.pod,
        false,
        "Scheduled",
        format!(
            "Successfully assigned {}/{} to {}",
            worker.namespace,
            worker.name,
            crate::builtins::SANDBOX_NODE
        ),
    );
    let address = lock(&node.addresses).allocate();
    match address {
        Some(ip) => worker.update(|record| record.pod_ip = Some(ip)),
        None => node.event(
            &worker.pod,
            true,
            "FailedCreatePodSandBox",
            "no free pod address left in the sandbox's /16".to_string(),
        ),
    }
    publish(&node, &worker);
    let lifecycle = tokio::spawn(lifecycle(node.clone(), worker.clone()));

    // The store's revision at the last look: a resync with nothing changed has nothing to do.
    let mut looked: Option<u64> = None;
    // (grace period, remove the object afterwards, sandbox shutting down)
    let (grace, remove, shutting_down) = loop {
        tokio::select! {
            _ = worker.changed.notified() => {
                publish(&node, &worker);
                continue;
            }
            _ = worker.look.notified() => {}
            _ = tokio::time::sleep(node.config.sync_period) => {
                // Everything a look reads (the pod, the Services for /etc/hosts) is in the store.
                let revision = node.store.revision();
                if looked == Some(revision) {
                    continue;
                }
                looked = Some(revision);
            }
            _ = node.shutdown.cancelled() => break (node.config.shutdown_grace, false, true),
            // Its processes were killed with the node: nothing to wait for, nothing to report.
            _ = worker.power_cut.cancelled() => break (Duration::ZERO, false, true),
        }
        match look_at_pod(&node, &worker) {
            Seen::Present if worker.silent.is_cancelled() => {}
            Seen::Present => {
                publish(&node, &worker);
                refresh_hosts(&node, &worker);
            }
            // No kubelet confirms the deletion of a pod on a lost node: it stays
            // Terminating until someone removes it with gracePeriodSeconds=0.
            Seen::Terminating(_) if worker.silent.is_cancelled() => {}
            Seen::Terminating(grace) => break (grace, true, false),
            Seen::Gone => break (Duration::ZERO, false, false),
        }
    };
    *lock(&worker.grace) = grace;
    worker.stop.cancel();
    let _ = lifecycle.await;
    // A kubelet that is going down reports nothing more: the pod keeps its last status
    // (Running), so a sandbox restarted on its data directory runs it again.
    if !shutting_down {
        publish(&node, &worker);
    }
    // emptyDirs, /tmp, /run and logs go with the pod; claims stay. When the sandbox stops, a
    // `--data-dir` keeps them for inspection (a temporary data directory goes as a whole).
    // Before the object goes, as the kubelet cleans up before it lets the API server forget the
    // pod: whoever sees the pod gone may rely on its volumes being gone too.
    if !shutting_down {
        let _ = std::fs::remove_dir_all(&worker.dir);
    }
    // At once, as soon as the processes are gone. A real kubelet does this later: its status
    // manager sends the final DELETE (gracePeriodSeconds=0) at its next sync after the
    // containers stopped, so a pod whose processes exit on SIGTERM stays Terminating a moment.
    if remove {
        super::remove_terminated_pod(
            &mut node.store.lock(),
            &worker.namespace,
            &worker.name,
            &worker.uid,
        );
    }
    if let Some(ip) = address {
        lock(&node.addresses).release(ip);
    }
    node.forget(&worker.uid);
    tracing::debug!(namespace = %worker.namespace, name = %worker.name, "pod stopped");
}

/// Files, then init containers one by one, then every container side by side.
async fn lifecycle(node: Arc<Node>, worker: Arc<PodWorker>) {
    if !prepare_files(&node, &worker).await {
        return;
    }
    let init_count = lock(&worker.record).init.len();
    for index in 0..init_count {
        if !container::run_init(&node, &worker, index).await {
            return;
        }
    }
    worker.update(|record| record.initialized = true);
    let main_count = lock(&worker.record).main.len();
    let supervisors: Vec<_> = (0..main_count)
        .map(|index| {
            tokio::spawn(container::supervise(
                node.clone(),
                worker.clone(),
                Kind::Main,
                index,
            ))
        })
        .collect();
    for supervisor in supervisors {
        let _ = supervisor.await;
    }
}

/// The pod's directories, /etc files and volumes; retried (FailedMount) until they work or the
/// pod stops. False if it stopped first.
async fn prepare_files(node: &Node, worker: &PodWorker) -> bool {
    let (uid, gid) = worker.ids;
    let owner = worker.host_user;
    let ip = worker.pod_ip().map(|ip| ip.to_string()).unwrap_or_default();
    let postgres = worker.pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            matches!(
                Image::parse(c["image"].as_str().unwrap_or_default()),
                Image::Postgres { .. }
            )
        });
    let user_name = if postgres { "postgres" } else { "sandbox" };
    let base = volumes::make_dir(&worker.dir, 0o755, None)
        .and_then(|_| {
            volumes::write_etc(&worker.dir.join("etc"), uid, gid, user_name, &worker.name)
        })
        .and_then(|_| write_hosts(node, worker, &ip));
    if let Err(error) = base {
        node.event(
            &worker.pod,
            true,
            "FailedCreatePodSandBox",
            format!(
                "cannot create the pod's files in {}: {error}",
                worker.dir.display()
            ),
        );
        return false;
    }
    let claims_dir = node.config.data_dir().join("claims");
    let token = node.pod_token(&worker.pod);
    loop {
        let lookup = StoreLookup {
            store: &node.store,
            namespace: &worker.namespace,
        };
        let claim_exists = |claim: &str| {
            node.store
                .lock()
                .get("/persistentvolumeclaims", &worker.namespace, claim)
                .is_some()
        };
        match volumes::prepare(
            &worker.pod,
            &worker.dir,
            &claims_dir,
            &lookup,
            &claim_exists,
            token.as_deref(),
            owner,
        ) {
            Ok(prepared) => {
                *lock(&worker.volumes) = prepared;
                return true;
            }
            Err(volumes::MountError(message)) => {
                node.event(&worker.pod, true, "FailedMount", message);
                if !worker.sleep(node.config.retry_period).await {
                    return false;
                }
            }
        }
    }
}

/// Rewrite the pod's /etc/hosts if the Services' names or addresses changed since the last
/// write (a failure is retried at the next sync).
fn refresh_hosts(node: &Node, worker: &PodWorker) {
    let ip = worker.pod_ip().map(|ip| ip.to_string()).unwrap_or_default();
    if let Err(error) = write_hosts(node, worker, &ip) {
        tracing::warn!(namespace = %worker.namespace, name = %worker.name, %error, "cannot rewrite /etc/hosts");
    }
}

/// Write /etc/hosts with the Services as they are now, unless that is what it already says.
fn write_hosts(node: &Node, worker: &PodWorker, ip: &str) -> std::io::Result<()> {
    let names = services::host_names(&node.store.lock(), &worker.namespace);
    let text = volumes::hosts_file(ip, &worker.name, &names);
    let mut written = lock(&worker.hosts);
    if *written != text {
        volumes::write_hosts(&worker.dir.join("etc"), &text)?;
        *written = text;
    }
    Ok(())
}

fn look_at_pod(node: &Node, worker: &PodWorker) -> Seen {
    let Some(pod) = node
        .store
        .lock()
        .get("/pods", &worker.namespace, &worker.name)
    else {
        return Seen::Gone;
    };
    if pod["metadata"]["uid"].as_str() != Some(worker.uid.as_str()) {
        return Seen::Gone;
    }
    if pod["metadata"]["deletionTimestamp"].is_null() {
        return Seen::Present;
    }
    let requested = pod["metadata"]["deletionGracePeriodSeconds"].as_u64();
    let spec = pod["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    Seen::Terminating(Duration::from_secs(requested.map_or(spec, |r| r.min(spec))))
}

/// Write the status if it changed (and the pod is still this pod).
fn publish(node: &Node, worker: &PodWorker) {
    // A lost node's kubelet reports nothing more; the pod keeps its last status.
    if worker.lost.is_cancelled() || worker.silent.is_cancelled() {
        return;
    }
    // A frozen kubelet reports nothing until thawed (`Node::freeze` then publishes).
    if *node.frozen.borrow() {
        return;
    }
    let record = lock(&worker.record).clone();
    let mut state = node.store.lock();
    let Some(pod) = state.get("/pods", &worker.namespace, &worker.name) else {
        return;
    };
    if pod["metadata"]["uid"].as_str() != Some(worker.uid.as_str()) {
        return;
    }
    let mut status = record.to_status(&pod["status"], &timefmt::now_rfc3339());
    // The readiness fault (`Faults::fail_readiness`): running, but never Ready.
    if builtins::runs_image(&pod, &lock(&node.unready_images)) {
        status = builtins::with_readiness(status, false);
    }
    if status == pod["status"] {
        return;
    }
    let mut next = (*pod).clone();
    next["status"] = status;
    state.commit_modified("/pods", next);
}
