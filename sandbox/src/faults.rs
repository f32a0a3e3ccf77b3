//! Breaking the sandbox on purpose: every failure a watch client must survive (the fault list in
//! WORKSHOP.md, step 02, "Testing against faults") on one handle.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and step 02 ("Testing against faults").
//! Each setting applies to requests that start after it is made. The switches themselves
//! (`FaultSettings`, `InjectedFault`) live in `state.rs`, where every request reads them.

use std::sync::Arc;
use std::time::Duration;

use crate::builtins;
use crate::controllers;
use crate::objects::{self, DeleteOptions};
use crate::random::Xorshift;
use crate::runtime::LostNode;
use crate::state::{InjectedFault, PendingFailure, Shared};
use crate::sync::lock;

/// A handle on the running sandbox's fault switches. Cheap to clone.
#[derive(Clone)]
pub struct Faults {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

impl Faults {
    pub(crate) fn new(shared: Arc<Shared>) -> Faults {
        Faults { shared }
    }

    /// End every new watch after it has sent `n` events (None: no limit).
    pub fn end_watches_after_events(&self, n: Option<usize>) {
        lock(&self.shared.faults).end_watches_after_events = n;
    }

    /// End every new watch after `d` (a clean end of stream, like a server-side timeout).
    pub fn end_watches_after(&self, d: Option<Duration>) {
        lock(&self.shared.faults).end_watches_after = d;
    }

    /// End every open watch now, cleanly (as an API server restart or a load balancer would).
    pub fn end_all_watches_now(&self) {
        self.shared.store.lock().end_all_watchers();
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Forget the event history: a watch from any resourceVersion older than now gets an
    /// in-stream `410 Expired`, as after etcd compaction.
    pub fn compact_history(&self) {
        self.shared.store.lock().compact();
    }

    /// Answer the next `n` requests whose path (with query) contains `path_contains` with `fault`.
    pub fn fail_next(&self, n: usize, path_contains: &str, fault: InjectedFault) {
        lock(&self.shared.faults)
            .pending_failures
            .push(PendingFailure {
                remaining: n,
                path_contains: path_contains.to_string(),
                fault,
            });
    }

    /// New watches send their headers, then nothing, and keep the connection open: a silent
    /// stall, as when a load balancer drops an idle connection without telling anyone.
    pub fn stall_watches(&self, stall: bool) {
        lock(&self.shared.faults).stall_watches = stall;
    }

    /// Split the output of new watches into HTTP chunks of at most `bytes` bytes (down to 1),
    /// so events arrive cut at arbitrary points, UTF-8 characters included.
    pub fn watch_chunk_size(&self, bytes: Option<usize>) {
        lock(&self.shared.faults).watch_chunk_size = bytes.map(|b| b.max(1));
    }

    /// Simulate an API server restart: close the port and every open connection (watches end
    /// mid-stream, new connections are refused), then listen again on the same address after
    /// `downtime`. Unlike a real restart, the objects and the resourceVersion survive.
    pub fn go_offline(&self, downtime: Duration) {
        self.shared.outage.send_modify(|(count, duration)| {
            *count += 1;
            *duration = downtime;
        });
    }

    /// Send up to `events` already-waiting events in one HTTP chunk (new watches), instead of one
    /// chunk per event: a watch from RV 0 then delivers its synthetic ADDED events in groups, so
    /// a client's decoder sees several events in one chunk.
    pub fn watch_events_per_chunk(&self, events: Option<usize>) {
        lock(&self.shared.faults).watch_events_per_chunk = events.map(|e| e.max(1));
    }

    /// How long after its creation a pod turns Running, for the pods waiting now too: a long
    /// delay keeps them Pending (as when images are slow to pull), and a shorter one set later
    /// lets them start, so a test can hold pods Pending for as long as it needs to.
    pub fn set_kubelet_delay(&self, d: Duration) {
        self.shared.kubelet_delay.send_replace(d);
    }

    /// How long after its creation a CRD turns Established, for the CRDs waiting now too (as
    /// [`Faults::set_kubelet_delay`] for pods).
    pub fn set_established_delay(&self, d: Duration) {
        self.shared.established_delay.send_replace(d);
    }

    /// Delete `count` pods picked with a seeded xorshift (same seed, same pods), as a node
    /// failure would. Returns their names.
    pub fn kill_random_pods(&self, seed: u64, count: usize) -> Vec<String> {
        let mut state = self.shared.store.lock();
        let Some(pods) = state.registry.find("", "v1", "pods").cloned() else {
            return Vec::new();
        };
        let mut candidates = state.list(&pods.store_key(), None);
        let mut random = Xorshift::from_seed(seed);
        let mut killed = Vec::new();
        while killed.len() < count && !candidates.is_empty() {
            let pod = candidates.remove(random.below(candidates.len() as u64) as usize);
            let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let deleted = objects::delete(
                &mut state,
                &pods,
                namespace,
                name,
                &DeleteOptions::default(),
                false,
            );
            if deleted.is_ok() {
                tracing::info!(namespace, name, "fault: killed pod");
                killed.push(name.to_string());
            }
        }
        killed
    }

    /// With the process runtime: kill `container` of pod `namespace/name` with SIGKILL, as if it
    /// had crashed (exit code 137); the kubelet restarts it per `restartPolicy`. Returns false
    /// when pods are simulated or no such container runs.
    pub fn crash_container(&self, namespace: &str, name: &str, container: &str) -> bool {
        self.shared
            .node
            .as_ref()
            .is_some_and(|node| node.crash_container(namespace, name, container))
    }

    /// With the process runtime: lose the "node" pod `namespace/name` runs on. Its processes
    /// are killed, nothing restarts them, and the pod stays Running with its Ready condition
    /// False at once and the rest as last reported (its containers running and ready), as the
    /// node lifecycle controller marks a pod on a node whose kubelet stopped reporting.
    /// Returns false when pods are simulated or no such pod runs.
    pub fn lose_node_for_pod(&self, namespace: &str, name: &str) -> bool {
        self.shared
            .node
            .as_ref()
            .is_some_and(|node| node.lose_node_for_pod(namespace, name))
    }

    /// With the process runtime: lose the node pod `namespace/name` runs on, as a cluster
    /// loses one (`runtime/lost_node.rs`). Its kubelet stops reporting: the pod's processes are
    /// frozen (SIGSTOP) or killed (SIGKILL), as `how.processes` says, and nothing restarts or
    /// probes them; its object stays Running and Ready for `how.grace` (the node lifecycle
    /// controller's grace period), then its Ready condition turns False; a deletion leaves it
    /// Terminating for ever, unless made with `gracePeriodSeconds=0`; an exec into it fails.
    /// Returns false when pods are simulated or no such pod runs.
    pub fn lose_node(&self, namespace: &str, name: &str, how: LostNode) -> bool {
        self.shared
            .node
            .as_ref()
            .is_some_and(|node| node.lose_node(namespace, name, how))
    }

    /// With the process runtime: cut the power of the whole node for `downtime`, as a restart
    /// of the sandbox process on its `--data-dir` does (`kill -9`, then start it again): the
    /// API server closes its port and every connection, every pod's processes are killed at
    /// once, and nothing is reported. After `downtime` the server listens again and the node
    /// boots: the pods that were Running run again, on the data they left (containers started
    /// anew, restart counts from 0, maybe other pod IPs), and pods that were terminating are
    /// removed. Unlike a restart, the objects' watchers may resume and the tokens stay valid.
    /// Returns how many pods lost their processes (0 when pods are simulated).
    pub async fn power_cut(&self, downtime: Duration) -> usize {
        let Some(node) = self.shared.node.clone() else {
            return 0;
        };
        self.go_offline(downtime);
        let began = tokio::time::Instant::now();
        let cut = node.power_cut().await;
        let shared = self.shared.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(began + downtime).await;
            if !shared.shutdown.is_cancelled() {
                tracing::info!("fault: the node's power is back");
                controllers::resume(&shared);
            }
        });
        cut
    }

    /// With the process runtime: hang pod `namespace/name`: every process of its containers
    /// stopped with SIGSTOP, its object untouched. The kubelet carries on as on a real node:
    /// exec probes time out, and a liveness probe that fails often enough restarts the
    /// container (a new process, not stopped). Returns false when no process was stopped.
    pub fn hang_pod(&self, namespace: &str, name: &str) -> bool {
        self.shared
            .node
            .as_ref()
            .is_some_and(|node| node.hang_pod(namespace, name))
    }

    /// Resume a hung pod (or a lost node's frozen one): SIGCONT every process of its
    /// containers. Returns false when there was none.
    pub fn resume_pod(&self, namespace: &str, name: &str) -> bool {
        self.shared
            .node
            .as_ref()
            .is_some_and(|node| node.resume_pod(namespace, name))
    }

    /// Mark `count` Running pods (seeded pick) as crashed without deleting them: phase Failed,
    /// Ready False, containers terminated with exit code 137 — what an operator's health check
    /// sees when a database process dies. Returns their names.
    pub fn fail_random_pods(&self, seed: u64, count: usize) -> Vec<String> {
        let mut state = self.shared.store.lock();
        let mut candidates: Vec<_> = state
            .list("/pods", None)
            .into_iter()
            .filter(|p| p["status"]["phase"] == "Running")
            .collect();
        let mut random = Xorshift::from_seed(seed);
        let mut failed = Vec::new();
        while failed.len() < count && !candidates.is_empty() {
            let pod = candidates.remove(random.below(candidates.len() as u64) as usize);
            let mut crashed = (*pod).clone();
            crashed["status"] = builtins::failed_pod_status(&pod);
            let name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            state.commit_modified("/pods", crashed);
            tracing::info!(name, "fault: pod failed");
            failed.push(name);
        }
        failed
    }

    /// Make every pod of `image` (as its container spec names it, `nginx:1.7.9`) fail
    /// readiness (`fail: false` lifts it): the Running ones turn not Ready now, and new ones
    /// start Running but not Ready, so their ReplicaSet never counts them available — one
    /// version of a Deployment whose readiness probe never passes. The simulated kubelet and
    /// the process runtime alike. Returns the Running pods marked now.
    pub fn fail_readiness(&self, image: &str, fail: bool) -> Vec<String> {
        {
            let mut unready = lock(&self.shared.unready_images);
            if fail {
                unready.insert(image.to_string());
            } else {
                unready.remove(image);
            }
        }
        let images = std::collections::BTreeSet::from([image.to_string()]);
        let mut state = self.shared.store.lock();
        let mut marked = Vec::new();
        for pod in state.list("/pods", None) {
            if pod["status"]["phase"] != "Running" || !builtins::runs_image(&pod, &images) {
                continue;
            }
            let mut next = (*pod).clone();
            next["status"] = builtins::with_readiness(pod["status"].clone(), !fail);
            if next["status"] == pod["status"] {
                continue;
            }
            marked.push(
                pod["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            );
            state.commit_modified("/pods", next);
        }
        tracing::info!(image, fail, pods = marked.len(), "fault: readiness");
        marked
    }

    /// Wedge every watch (`refuse: false` lifts it): the open ones end now, and each new one,
    /// whoever sends it, is answered `500 InternalError` until lifted, so a client's watches make
    /// no progress at all while its lists, reads and writes are answered as ever. What a client
    /// sees behind a proxy or a watch cache that has stopped serving watches; unlike
    /// `stall_watches` (headers, then silence), no watch is ever accepted, which a client counts
    /// as progress. The sandbox's own controllers and kubelet read the store, not HTTP watches.
    pub fn refuse_watches(&self, refuse: bool) {
        // Every watch request carries it; the operator's, kubectl's and client-go's alike.
        const WATCH: &str = "watch=true";
        {
            let mut faults = lock(&self.shared.faults);
            faults.pending_failures.retain(|p| p.path_contains != WATCH);
            if refuse {
                faults.pending_failures.push(PendingFailure {
                    remaining: usize::MAX,
                    path_contains: WATCH.to_string(),
                    fault: InjectedFault::Status {
                        code: 500,
                        reason: "InternalError".into(),
                        retry_after_seconds: None,
                    },
                });
            }
        }
        if refuse {
            self.end_all_watches_now();
        }
    }

    /// Freeze the API server and the kubelet (`frozen: false` thaws them), as a SIGSTOP of
    /// the `sandbox` process would: every request, new or held, waits unanswered and open
    /// watches send nothing; the kubelet restarts no container and reports no status. The pods'
    /// processes run on, as containers do while their node's kubelet is stopped. The objects
    /// and open connections survive; what was held is answered once thawed.
    pub fn freeze(&self, frozen: bool) {
        self.shared.frozen.send_replace(frozen);
        if let Some(node) = &self.shared.node {
            node.freeze(frozen);
        }
    }
}
