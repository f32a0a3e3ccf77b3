//! What one pod's tasks share: the `PodWorker` (its identity, spec, directories, status record
//! and stop token) and the store lookups its environment and volumes read. Below `pod.rs` (the
//! worker's life), `container.rs` (each container's) and `logs.rs`, which all use it.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::env::Lookup;
use super::status::{ContainerRecord, PodRecord};
use super::Node;
use crate::store::Store;
use crate::sync::lock;
use crate::timefmt;

/// The host user every pod runs as when the sandbox is root (and the pod's user inside when it
/// names none): the official postgres image's `postgres` user.
pub(crate) const DEFAULT_POD_USER: u32 = crate::builtins::POSTGRES_USER;

/// What one pod's tasks share.
pub(crate) struct PodWorker {
    pub(crate) uid: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The pod as the kubelet first saw it (its spec cannot change but for images).
    pub(crate) pod: Value,
    pub(crate) dir: PathBuf,
    pub(crate) record: Mutex<PodRecord>,
    /// Wakes the status writer.
    pub(crate) changed: Notify,
    /// Wakes the pod's loop to look at its object now: the API server accepted its deletion.
    pub(crate) look: Notify,
    /// Cancelled when the pod must stop; `grace` says how long its processes get.
    pub(crate) stop: CancellationToken,
    pub(crate) grace: Mutex<Duration>,
    /// The user and group the pod's processes see themselves as inside the jail.
    pub(crate) ids: (u32, u32),
    /// Some((999, 999)) when the sandbox is root: bwrap is started as that host user, and maps
    /// it onto `ids` inside.
    pub(crate) host_user: Option<(u32, u32)>,
    /// The volumes, once prepared: name → directory.
    pub(crate) volumes: Mutex<std::collections::BTreeMap<String, PathBuf>>,
    /// One per main container: wakes its running instance to be killed (the crash fault).
    pub(crate) crash: Vec<Notify>,
    /// Cancelled when the pod's "node" is lost (the fault): its processes are killed and its
    /// status is no longer written, as when a kubelet stops reporting.
    pub(crate) lost: CancellationToken,
    /// Cancelled when the pod's node stops reporting (`Node::lose_node`): no status is
    /// written, no probe runs, nothing restarts, a deletion is never confirmed and no exec
    /// reaches the pod; its processes are frozen or gone, as the fault said.
    pub(crate) silent: CancellationToken,
    /// Cancelled when the node's power is cut (`Node::power_cut`): the worker ends as at a
    /// sandbox shutdown, its files and its pod's status left as they were, to run again when
    /// the node is back.
    pub(crate) power_cut: CancellationToken,
    /// One per main container: bwrap's PID while an instance runs (the root of its process
    /// tree, for the freezing faults).
    pub(crate) running: Mutex<Vec<Option<u32>>>,
    /// The /etc/hosts text last written (rewritten when the Services' addresses change); its
    /// lock also keeps two writers from interleaving.
    pub(crate) hosts: Mutex<String>,
}

impl PodWorker {
    pub(crate) fn new(node: &Node, pod: &Value) -> PodWorker {
        let metadata = &pod["metadata"];
        let uid = metadata["uid"].as_str().unwrap_or_default().to_string();
        let containers = |field: &str, waiting: &str| -> Vec<ContainerRecord> {
            pod["spec"][field]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    ContainerRecord::new(
                        c["name"].as_str().unwrap_or_default(),
                        c["image"].as_str().unwrap_or_default(),
                        waiting,
                    )
                })
                .collect()
        };
        let init = containers("initContainers", "PodInitializing");
        let main_waiting = if init.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        let ids = if node.is_root {
            let context = |field: &str| {
                pod["spec"]["securityContext"][field]
                    .as_u64()
                    .or_else(|| pod["spec"]["containers"][0]["securityContext"][field].as_u64())
            };
            // Never root: a pod asking for uid 0 runs as the default user too.
            let uid = context("runAsUser")
                .and_then(|u| u32::try_from(u).ok())
                .filter(|u| *u != 0)
                .unwrap_or(DEFAULT_POD_USER);
            let gid = context("runAsGroup")
                .and_then(|g| u32::try_from(g).ok())
                .filter(|g| *g != 0)
                .unwrap_or(uid);
            (uid, gid)
        } else {
            node.own_ids
        };
        PodWorker {
            namespace: metadata["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string(),
            name: metadata["name"].as_str().unwrap_or_default().to_string(),
            dir: node.config.data_dir().join("pods").join(&uid),
            uid,
            pod: pod.clone(),
            record: Mutex::new(PodRecord {
                pod_ip: None,
                start_time: timefmt::now_rfc3339(),
                initialized: init.is_empty(),
                init,
                main: containers("containers", main_waiting),
                init_failed: false,
            }),
            changed: Notify::new(),
            look: Notify::new(),
            stop: CancellationToken::new(),
            grace: Mutex::new(Duration::ZERO),
            ids,
            // Whatever ids the pod sees inside, on the host it is always the pod user: a pod
            // asking for uid N never acts as host user N (on the files bound into its root).
            host_user: node.is_root.then_some((DEFAULT_POD_USER, DEFAULT_POD_USER)),
            volumes: Mutex::new(Default::default()),
            crash: pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|_| Notify::new())
                .collect(),
            lost: CancellationToken::new(),
            silent: CancellationToken::new(),
            power_cut: CancellationToken::new(),
            running: Mutex::new(vec![
                None;
                pod["spec"]["containers"].as_array().map_or(0, Vec::len)
            ]),
            hosts: Mutex::new(String::new()),
        }
    }

    /// Change the record and have the status written, if the change changed anything: as the
    /// kubelet's status manager, which writes a status only when it differs. A readiness probe
    /// that passes again (nine a second on 18 pods) sets `ready` to what it already is.
    pub(crate) fn update(&self, change: impl FnOnce(&mut PodRecord)) {
        let mut record = lock(&self.record);
        let before = record.clone();
        change(&mut record);
        if *record != before {
            self.changed.notify_one();
        }
    }

    pub(crate) fn pod_ip(&self) -> Option<Ipv4Addr> {
        lock(&self.record).pod_ip
    }

    /// Wait `delay`, or less if the pod is stopping; false if it is.
    pub(crate) async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(delay) => true,
            _ = self.stop.cancelled() => false,
        }
    }
}

/// Secrets, ConfigMaps and claims in the pod's namespace, read from the store.
pub(crate) struct StoreLookup<'a> {
    pub(crate) store: &'a Store,
    pub(crate) namespace: &'a str,
}

impl Lookup for StoreLookup<'_> {
    fn secret(&self, name: &str) -> Option<Value> {
        let object = self.store.lock().get("/secrets", self.namespace, name)?;
        Some((*object).clone())
    }
    fn config_map(&self, name: &str) -> Option<Value> {
        let object = self.store.lock().get("/configmaps", self.namespace, name)?;
        Some((*object).clone())
    }
}
