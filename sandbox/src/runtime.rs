//! The process runtime: a kubelet whose pods are real processes on this machine. `postgres:<tag>`
//! pods run the PostgreSQL installed here; every pod gets its own loopback address and its own
//! mount namespace (bubblewrap). The other choice, [`Runtime::Simulated`], is the status-only
//! kubelet of `controllers.rs`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The library's default is `Simulated` (fast, needs
//! nothing installed); the `sandbox` binary picks `Processes` when PostgreSQL and bubblewrap are
//! found. Layout:
//!
//! | module | what it holds |
//! |---|---|
//! | `runtime.rs` | [`Runtime`], [`ProcessRuntime`]; `Node`: the running kubelet, its pods, events and logs |
//! | `pod.rs` | one pod's worker's life: address, files, init containers then containers, status, deletion |
//! | `worker.rs` | what a pod's tasks share (`PodWorker`) and the store lookups they read; below `pod.rs`, `container.rs` and `logs.rs` |
//! | `container.rs` | one container: start, restart with back-off, probes, stop |
//! | `status.rs` | what the kubelet tracks and the `status` it writes from it, termination messages included |
//! | `logs.rs` | `kubectl logs`: the current or previous instance's output, or following it |
//! | `exec.rs` | `kubectl exec`: one more process in a running container's jail, its streams piped (a pty through `script` for `-t`) |
//! | `env.rs`, `volumes.rs`, `image.rs` | environment, volumes and what an image runs |
//! | `claims.rs` | a `persistentVolumeClaim` volume: the bound PersistentVolume's directory |
//! | `probes.rs` | exec, tcpSocket and httpGet checks |
//! | `lost_node.rs` | a node that stops reporting: frozen or killed processes, and the node lifecycle controller's grace period |
//! | `jail.rs`, `process.rs`, `enter.rs` | the bubblewrap command line; starting and signalling a process; a probe inside a running container |
//! | `services.rs` | Services: Endpoints and EndpointSlices, a proxy on each ClusterIP (127.B.192.0/18) to ready endpoints, the names pods' /etc/hosts give them, the `<SVC>_SERVICE_HOST` variables; the `kubernetes` Service and the `KUBERNETES_SERVICE_*` variables every pod gets |
//! | `host.rs`, `addresses.rs` | finding loopback addresses, PostgreSQL and bwrap; pod IPs on 127.B.0.0 to 127.B.191.255 |
//!
//! # Where it simplifies
//!
//! - Pods share the machine's network namespace: each listens on its own 127.x.y.z, and
//!   `localhost` inside a pod names the pod's address (see `probes.rs`). Connections between
//!   pods come from 127.0.0.1, which initdb's default pg_hba.conf trusts.
//! - Services proxy TCP only, in this process (no iptables): the ClusterIP listens while the
//!   Service has a ready endpoint, else a connection is refused. There is no cluster DNS: each
//!   pod's /etc/hosts names the Services (rewritten in place within a sync period of a change),
//!   so names resolve through the C library's hosts file, not a DNS server (`dig` and SRV
//!   records see nothing; ExternalName Services have no name). No `port-forward`, resource
//!   limits or image pulls;
//!   persistentVolumeClaim volumes are plain directories that outlive their pods. An `exec`
//!   runs in a bwrap of its own beside the container (same mounts, environment and user, its
//!   own PID namespace), not inside the container's namespaces. Exec probes (a
//!   `pg_isready` every 2 s was nine a second on six clusters of three) enter the running
//!   container's user, mount, IPC and UTS namespaces instead (`enter.rs`: a jail costs four
//!   times the `pg_isready` it runs), not its PID one.
//! - Losing a pod's node (`Faults::lose_node`) loses that pod's node only: each pod has a
//!   "node" of its own. Its processes are frozen or killed, its status stays as last written
//!   until a grace period ends, then Ready False; its deletion is never confirmed. Nothing brings
//!   the node back. `Faults::lose_node_for_pod` is the older, quicker form: processes killed
//!   and the pod marked as the node lifecycle controller marks it (Ready False, the rest as last
//!   reported) at once, deletions still completed. `Faults::power_cut` takes the whole node
//!   (API server and kubelet) down and brings it back, as a restart on the data directory does.
//! - Hanging a pod (`Faults::hang_pod`) stops every process of its containers with SIGSTOP; the
//!   kubelet carries on (probes time out, a failed liveness probe restarts the container). An
//!   `exec` runs beside the stopped processes, not among them, as on a node.
//! - `postgres-operator:<tag>` (the Dockerfile's image) runs the stage binaries cargo built from
//!   this checkout ([`crate::SandboxOptions::operator_binaries`]), bound at `/stageNN` in the
//!   root every image gets here (`jail.rs`: /usr, its own /etc, its volumes, nothing else of
//!   the machine; `image.rs` says what happens to each field of kube/deployment.yaml).
//!   Pods reach the API server at the sandbox's own address, which `KUBERNETES_SERVICE_HOST`
//!   and `_PORT` name, not through the `kubernetes` Service's ClusterIP (`services.rs`).
//! - Pod processes never run as root. When the sandbox is root they run as host user 999 (the
//!   official image's postgres user), seeing themselves as their `runAsUser`/`runAsGroup`
//!   inside (bwrap maps one onto the other); pods asking for ids other than 999 and 65532 are
//!   refused at admission (`builtins::check_pod_ids_as_root`). Otherwise they run as the
//!   sandbox's own user.

mod addresses;
mod claims;
mod container;
mod enter;
mod env;
mod exec;
mod host;
mod image;
mod jail;
mod logs;
mod lost_node;
mod pod;
mod probes;
mod process;
mod services;
mod status;
mod usage;
mod volumes;
mod worker;

pub(crate) use exec::{ExecRequest, PreparedExec};
pub use host::{HostError, HostTools, INSTALL_HINT};
pub(crate) use logs::{LogOutput, LogRequest};
pub use lost_node::{LostNode, LostProcesses};
pub(crate) use usage::ContainerUsage;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::builtins;
use crate::errors::ApiError;
use crate::objects;
use crate::random::Xorshift;
use crate::store::{Store, StoreState};
use crate::sync::lock;
use crate::timefmt;
use crate::tokens::{self, TokenClaims, Tokens};

/// The stand-in for the official image's entrypoint, written into the data directory and
/// mounted at `/usr/local/bin/docker-entrypoint.sh` in `postgres:<tag>` containers.
const POSTGRES_ENTRYPOINT_SCRIPT: &str = include_str!("runtime/docker-entrypoint.sh");

/// How a container that runs no process (an image the runtime cannot run) is named in its
/// `containerID`: `sandbox://simulated-<name>`.
pub(crate) const SIMULATED_CONTAINER_ID: &str = "sandbox://simulated-";

/// Which kubelet the sandbox runs.
#[derive(Clone, Debug, Default)]
pub enum Runtime {
    /// Pods get a Running status and nothing runs (the default of [`crate::Sandbox::start`]).
    #[default]
    Simulated,
    /// Pods run as processes on this machine.
    Processes(ProcessRuntime),
}

/// How the process runtime runs pods.
#[derive(Clone, Debug)]
pub struct ProcessRuntime {
    pub tools: HostTools,
    data: Arc<DataDir>,
    /// The wait before restarting a container that crashed again (a first crash is restarted
    /// at once); it doubles up to `max_restart_backoff` (the kubelet's 10 s and 5 min; tests
    /// shorten them).
    pub restart_backoff: Duration,
    pub max_restart_backoff: Duration,
    /// How often a waiting container retries what blocked it (a missing Secret, a volume).
    pub retry_period: Duration,
    /// How often each pod's worker looks again at its pod object and the Services when the
    /// store has changed (a resync: a deletion is noticed at once, /etc/hosts follows a new
    /// Service within it), and the Services' endpoints are recomputed with no change seen
    /// (they follow each change at once).
    pub sync_period: Duration,
    /// How long pods get to stop when the sandbox itself stops.
    pub shutdown_grace: Duration,
    /// Pods get addresses in 127.B.0.0/16 below 127.B.192.0, Services above; None picks a B at
    /// random that no other sandbox on this machine holds (`runtime/addresses.rs`).
    pub address_block: Option<u8>,
    /// What the sandbox tells its kubelet when it starts (behind an `Arc`: `Runtime` stays small).
    pub(crate) cluster: Arc<Cluster>,
}

/// What the kubelet learns from the rest of the sandbox when it starts.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cluster {
    /// The sandbox's own address, as pods reach it: the `KUBERNETES_SERVICE_*` variables and the
    /// `kubernetes` Service's endpoint.
    pub(crate) api_server: Option<SocketAddr>,
    /// Where `postgres-operator:<tag>` images find the stage binaries
    /// ([`crate::SandboxOptions::operator_binaries`]).
    pub(crate) operator_binaries: Option<PathBuf>,
}

impl ProcessRuntime {
    /// Find PostgreSQL and bubblewrap and prepare `data_dir` (None: a temporary directory that
    /// is removed when the sandbox is dropped).
    pub fn detect(data_dir: Option<PathBuf>) -> Result<ProcessRuntime, HostError> {
        ProcessRuntime::new(HostTools::detect()?, data_dir)
    }

    pub fn new(tools: HostTools, data_dir: Option<PathBuf>) -> Result<ProcessRuntime, HostError> {
        let data = DataDir::create(data_dir)?;
        Ok(ProcessRuntime {
            tools,
            data: Arc::new(data),
            restart_backoff: Duration::from_secs(10),
            max_restart_backoff: Duration::from_secs(300),
            retry_period: Duration::from_secs(2),
            sync_period: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(5),
            address_block: None,
            cluster: Arc::new(Cluster::default()),
        })
    }

    /// Where pod data lives.
    pub fn data_dir(&self) -> &Path {
        &self.data.path
    }
}

/// The directory holding every pod's files; a temporary one is removed when the last handle goes.
#[derive(Debug)]
struct DataDir {
    path: PathBuf,
    temporary: bool,
}

impl DataDir {
    fn create(path: Option<PathBuf>) -> Result<DataDir, HostError> {
        let temporary = path.is_none();
        if temporary {
            remove_abandoned_data_dirs();
        }
        let path = path.unwrap_or_else(|| {
            let mut random = Xorshift::from_entropy();
            std::env::temp_dir().join(format!(
                "{TEMPORARY_PREFIX}{}-{}",
                std::process::id(),
                random.hex(6)
            ))
        });
        let failed = |source| HostError::DataDir {
            path: path.clone(),
            source,
        };
        let as_root = own_ids().0 == 0;
        if as_root {
            allow_others_to_enter_new_files();
        }
        // 0755: the pods' users (999) must be able to reach their own directories inside.
        volumes::make_dir(&path, 0o755, None).map_err(failed)?;
        // As root, pods run as another user (`worker::DEFAULT_POD_USER`), and bwrap, started
        // as that user, must walk to every directory it mounts: a 0700 directory on the way
        // (`mktemp -d` makes them) would crash-loop every pod. Say so now, naming it.
        if as_root {
            let pod_user = worker::DEFAULT_POD_USER;
            if let Some((blocked, mode)) =
                host::first_unsearchable(&path, pod_user, pod_user).map_err(failed)?
            {
                if temporary {
                    let _ = std::fs::remove_dir_all(&path);
                }
                return Err(HostError::DataDirUnreachable {
                    data_dir: path.clone(),
                    blocked,
                    mode,
                    pod_user,
                });
            }
        }
        let entrypoint = path.join("bin").join("docker-entrypoint.sh");
        volumes::make_dir(&path.join("bin"), 0o755, None).map_err(failed)?;
        std::fs::write(&entrypoint, POSTGRES_ENTRYPOINT_SCRIPT).map_err(failed)?;
        std::fs::set_permissions(
            &entrypoint,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(failed)?;
        Ok(DataDir { path, temporary })
    }
}

/// As root, pods run as another user, who must enter every directory the sandbox makes for
/// them (the data dir's parents it creates, `pods/<uid>/containers/...`, volumes): under a
/// umask such as 077 those would be 0700 and every pod would crash-loop. So the umask keeps
/// only its "no writing by others" bits (077 becomes 022), as a kubelet's umask is 022. Files
/// holding secrets are created with explicit modes (0600 tokens, a 0700 credentials directory).
fn allow_others_to_enter_new_files() {
    // SAFETY: umask(2) only swaps an integer of the process; it cannot fail.
    let previous = unsafe { libc::umask(0o022) };
    // SAFETY: as above.
    unsafe { libc::umask(previous & 0o022) };
}

/// The effective user and group of this process: the owner of /proc/self.
fn own_ids() -> (u32, u32) {
    std::fs::metadata("/proc/self")
        .map(|m| (m.uid(), m.gid()))
        .unwrap_or((65534, 65534))
}

/// Temporary data directories of sandboxes that were killed (SIGKILL leaves no chance to clean
/// up): `sandbox-pods-<pid>-<random>` whose process is gone.
fn remove_abandoned_data_dirs() {
    let temp = std::env::temp_dir();
    for entry in std::fs::read_dir(&temp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMPORARY_PREFIX))
            .and_then(|rest| rest.split('-').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

const TEMPORARY_PREFIX: &str = "sandbox-pods-";

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// The running process kubelet: one worker per pod.
pub(crate) struct Node {
    config: ProcessRuntime,
    store: Arc<Store>,
    /// Where the kubelet's projected service-account tokens come from.
    tokens: Arc<Tokens>,
    addresses: Mutex<addresses::PodAddresses>,
    /// Our `127.B.0.0/16`, held against other sandboxes on this machine while we run.
    block_claim: addresses::BlockClaim,
    pods: Mutex<HashMap<String, Arc<worker::PodWorker>>>,
    /// The last CPU reading of each container, for `kubectl top`'s rates (`usage.rs`).
    usage: Mutex<usage::Samples>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    random: Mutex<Xorshift>,
    /// The readiness fault: pods of these images are reported not Ready, whatever runs.
    unready_images: builtins::UnreadyImages,
    shutdown: CancellationToken,
    /// Whether the sandbox runs as root (then pods run as their runAsUser, never as root).
    is_root: bool,
    own_ids: (u32, u32),
    /// True while the kubelet is frozen (`Faults::freeze`): no restart, no status written.
    pub(crate) frozen: tokio::sync::watch::Sender<bool>,
}

impl Node {
    pub(crate) fn new(
        config: ProcessRuntime,
        store: Arc<Store>,
        tokens: Arc<Tokens>,
        unready_images: builtins::UnreadyImages,
        shutdown: CancellationToken,
    ) -> Arc<Node> {
        let mut random = Xorshift::from_entropy();
        // A store loaded from a data directory keeps its Services' ClusterIPs: keep their block.
        let wanted = config
            .address_block
            .or_else(|| services::stored_block(&store.lock()));
        let block_claim = addresses::BlockClaim::claim(wanted, &mut random);
        let block = block_claim.block();
        let own_ids = own_ids();
        // kube-apiserver creates the `kubernetes` Service before anyone else can take the first
        // Service address; the loop below keeps it (and its Endpoints) as the apiserver does.
        if let Some(api_server) = config.cluster.api_server {
            services::ensure_kubernetes_service(&mut store.lock(), block, api_server, &mut random);
        }
        let services = tokio::spawn(services::run(
            store.clone(),
            block,
            config.cluster.api_server,
            config.sync_period,
            shutdown.clone(),
        ));
        Arc::new(Node {
            config,
            store,
            tokens,
            addresses: Mutex::new(addresses::PodAddresses::new(block)),
            block_claim,
            pods: Mutex::new(HashMap::new()),
            usage: Mutex::new(usage::Samples::default()),
            tasks: Mutex::new(vec![services]),
            random: Mutex::new(random),
            unready_images,
            shutdown,
            is_root: own_ids.0 == 0,
            own_ids,
            frozen: tokio::sync::watch::channel(false).0,
        })
    }

    /// Stop (or start again) the kubelet's work: restarts wait and statuses go unwritten; once
    /// thawed, every pod's status is written again as it now is.
    pub(crate) fn freeze(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
        if !frozen {
            for worker in lock(&self.pods).values() {
                worker.changed.notify_one();
            }
        }
    }

    /// The token the kubelet writes into the pod's service-account volume: bound to the pod,
    /// so it stops working when the pod (or its service account) is deleted, and valid for
    /// the pod's life otherwise (kube-apiserver's one-year extension of kubelet tokens), so
    /// it is written once and never refreshed. None if the service account is gone (or the
    /// OS gave no randomness).
    pub(crate) fn pod_token(&self, pod: &Value) -> Option<String> {
        let namespace = pod["metadata"]["namespace"].as_str()?;
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let account_uid = self
            .store
            .lock()
            .get("/serviceaccounts", namespace, account)?["metadata"]["uid"]
            .as_str()?
            .to_string();
        let now = tokens::now_seconds();
        let issued = self.tokens.issue(TokenClaims {
            namespace: namespace.to_string(),
            service_account: account.to_string(),
            service_account_uid: account_uid,
            pod: Some((
                pod["metadata"]["name"].as_str()?.to_string(),
                pod["metadata"]["uid"].as_str()?.to_string(),
            )),
            audiences: vec![tokens::ISSUER.to_string()],
            issued_at: now,
            expires_at: now + tokens::KUBELET_TOKEN_SECONDS,
        });
        issued
            .inspect_err(|error| tracing::error!(%error, "cannot issue a pod's token"))
            .ok()
    }

    /// Whether the sandbox runs as root: then pods run as host user 999 (`worker.rs`).
    pub(crate) fn runs_as_root(&self) -> bool {
        self.is_root
    }

    /// The directory every PersistentVolume's path must lie below (`storage.rs` provisions
    /// there), with the data dir's links resolved, as admission compares resolved paths.
    pub(crate) fn volume_root(&self) -> PathBuf {
        let data_dir = self.config.data_dir();
        let data_dir = data_dir
            .canonicalize()
            .unwrap_or_else(|_| data_dir.to_path_buf());
        crate::storage::VolumeDirs::under(&data_dir).volumes
    }

    /// B of the sandbox's `127.B.0.0/16`: Services get ClusterIPs in `127.B.192.0/18`.
    pub(crate) fn service_block(&self) -> u8 {
        self.block_claim.block()
    }

    /// One line for the banner: what runs pods, and where.
    pub(crate) fn describe(&self) -> String {
        let pods = lock(&self.addresses).range();
        let block = self.service_block();
        let operator = match &self.config.cluster.operator_binaries {
            Some(dir) => format!(
                "postgres-operator images run the stage binaries in {}",
                dir.display()
            ),
            None => "no stage binaries for postgres-operator images (--operator-binaries DIR)"
                .to_string(),
        };
        format!(
            "pods run as processes: PostgreSQL {} from {}, bubblewrap {}, pod IPs {pods}, Service IPs 127.{block}.192.0/18, data in {}; {operator}",
            self.config.tools.postgres_version,
            self.config.tools.postgres_bin.display(),
            self.config.tools.bwrap.display(),
            self.config.data_dir().display()
        )
    }

    /// Start running `pod` (once per uid).
    pub(crate) fn start_pod(self: &Arc<Self>, pod: &Value) {
        let uid = pod["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut pods = lock(&self.pods);
        if uid.is_empty() || pods.contains_key(&uid) || self.shutdown.is_cancelled() {
            return;
        }
        let worker = Arc::new(worker::PodWorker::new(self, pod));
        pods.insert(uid, worker.clone());
        let task = tokio::spawn(pod::run(self.clone(), worker));
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// The API server accepted `pod`'s deletion: its worker looks at once, as a kubelet hears of
    /// it through its watch (the sync period is only a resync).
    pub(crate) fn look_at(&self, pod: &Value) {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        if let Some(worker) = lock(&self.pods).get(uid) {
            worker.look.notify_one();
        }
    }

    /// Wait until every pod worker has stopped its processes (after the shutdown token).
    pub(crate) async fn stopped(&self) {
        let tasks: Vec<_> = std::mem::take(&mut *lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// `kubectl logs`.
    pub(crate) fn logs(&self, pod: &Value, request: &LogRequest) -> Result<LogOutput, ApiError> {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let worker = lock(&self.pods).get(uid).cloned();
        logs::read(self, worker, pod, request)
    }

    /// `kubectl exec`: check that `request` can run in the pod, ready to start.
    pub(crate) fn prepare_exec(
        &self,
        pod: &Value,
        request: &ExecRequest,
    ) -> Result<PreparedExec, ApiError> {
        exec::prepare(self, pod, request)
    }

    /// Kill a running container's process as if it had crashed (SIGKILL); the kubelet then
    /// restarts it per `restartPolicy`. False if no such pod or container runs here.
    pub(crate) fn crash_container(&self, namespace: &str, name: &str, container: &str) -> bool {
        let worker = lock(&self.pods)
            .values()
            .find(|w| w.namespace == namespace && w.name == name)
            .cloned();
        let Some(worker) = worker else {
            return false;
        };
        let index = worker.pod["spec"]["containers"]
            .as_array()
            .and_then(|all| all.iter().position(|c| c["name"] == container));
        match index.and_then(|i| worker.crash.get(i)) {
            Some(crash) => {
                crash.notify_waiters();
                true
            }
            None => false,
        }
    }

    /// Lose the "node" of pod `namespace/name`: its processes are killed (SIGKILL), nothing is
    /// restarted, and the pod stays Running with Ready False, what the node lifecycle controller
    /// leaves of a pod whose kubelet stopped reporting. Deleting it still removes it. False if no
    /// such pod runs here.
    pub(crate) fn lose_node_for_pod(&self, namespace: &str, name: &str) -> bool {
        let worker = lock(&self.pods)
            .values()
            .find(|w| w.namespace == namespace && w.name == name)
            .cloned();
        let Some(worker) = worker else {
            return false;
        };
        // First silence the pod's status writer, then mark the pod as the node lifecycle
        // controller marks a lost node's pods, here with no grace period: its Ready condition
        // False, nothing else (ContainersReady and the containers' statuses stay as the kubelet
        // last wrote them; nobody is left to report that the processes died).
        worker.lost.cancel();
        if !lost_node::mark_pod_not_ready(
            &mut self.store.lock(),
            &worker.namespace,
            &worker.name,
            &worker.uid,
        ) {
            return false;
        }
        self.event(
            &worker.pod,
            true,
            "NodeNotReady",
            "Node is not ready".to_string(),
        );
        true
    }

    /// The worker of pod `namespace/name`, if it runs here.
    fn worker(&self, namespace: &str, name: &str) -> Option<Arc<worker::PodWorker>> {
        lock(&self.pods)
            .values()
            .find(|w| w.namespace == namespace && w.name == name)
            .cloned()
    }

    /// Send `signal` to every process of every running container of `worker` (bwrap, the
    /// shim, aside). The number of processes signalled.
    fn signal_containers(worker: &worker::PodWorker, signal: i32) -> usize {
        let roots: Vec<u32> = lock(&worker.running).iter().flatten().copied().collect();
        roots
            .into_iter()
            .map(|root| process::signal_descendants(root, signal))
            .sum()
    }

    /// Hang pod `namespace/name`: SIGSTOP every process of its containers. The kubelet goes on
    /// (probes, restarts), and the pod object is left alone. False if no process was stopped.
    pub(crate) fn hang_pod(&self, namespace: &str, name: &str) -> bool {
        self.worker(namespace, name)
            .is_some_and(|worker| Node::signal_containers(&worker, process::SIGSTOP) > 0)
    }

    /// Undo [`Node::hang_pod`] (or a frozen lost node's stop): SIGCONT every process of the
    /// pod's containers. False if there was none.
    pub(crate) fn resume_pod(&self, namespace: &str, name: &str) -> bool {
        self.worker(namespace, name)
            .is_some_and(|worker| Node::signal_containers(&worker, process::SIGCONT) > 0)
    }

    /// Lose the node of pod `namespace/name` as `how` says (`lost_node.rs`): the kubelet falls
    /// silent, the processes are frozen or killed, and after `how.grace` the pod's Ready
    /// condition turns False. False if no such pod runs here.
    pub(crate) fn lose_node(self: &Arc<Self>, namespace: &str, name: &str, how: LostNode) -> bool {
        let Some(worker) = self.worker(namespace, name) else {
            return false;
        };
        // Silence first: no status write, probe or restart may follow what the fault does.
        worker.silent.cancel();
        match how.processes {
            LostProcesses::Frozen => {
                Node::signal_containers(&worker, process::SIGSTOP);
            }
            LostProcesses::Killed => worker.lost.cancel(),
        }
        // The node lifecycle controller: it sees the node's Lease go stale, waits out the grace
        // period, then marks the node's pods not Ready.
        let node = self.clone();
        let node_controller = tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(how.grace) => {}
                () = node.shutdown.cancelled() => return,
            }
            let marked = lost_node::mark_pod_not_ready(
                &mut node.store.lock(),
                &worker.namespace,
                &worker.name,
                &worker.uid,
            );
            if marked {
                tracing::info!(namespace = %worker.namespace, name = %worker.name, "fault: the lost node's pod is marked not ready");
                node.event(
                    &worker.pod,
                    true,
                    "NodeNotReady",
                    "Node is not ready".to_string(),
                );
            }
        });
        let mut tasks = lock(&self.tasks);
        tasks.retain(|t| !t.is_finished());
        tasks.push(node_controller);
        true
    }

    /// Cut the node's power: every process of every pod killed at once (SIGKILL), with no
    /// status written, probe run or container restarted, and each pod's worker ended as at a
    /// sandbox shutdown (files, claims and the pods' last status kept). Returns the pods cut
    /// once every worker has ended; `controllers::resume` runs them again, as a node that
    /// boots does (new containers, restart counts from 0).
    pub(crate) async fn power_cut(&self) -> usize {
        let workers: Vec<Arc<worker::PodWorker>> = lock(&self.pods).values().cloned().collect();
        for worker in &workers {
            worker.silent.cancel();
        }
        for worker in &workers {
            Node::signal_containers(worker, process::SIGKILL);
            worker.lost.cancel();
        }
        for worker in &workers {
            worker.power_cut.cancel();
        }
        while workers
            .iter()
            .any(|w| lock(&self.pods).contains_key(&w.uid))
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        workers.len()
    }

    fn forget(&self, uid: &str) {
        lock(&self.pods).remove(uid);
        lock(&self.usage).forget(&format!("{uid}/"));
    }

    /// What each running container of pod `namespace/name` uses now (`kubectl top`). None if
    /// the pod does not run here or none of its containers runs.
    pub(crate) fn pod_usage(&self, namespace: &str, name: &str) -> Option<Vec<ContainerUsage>> {
        let worker = self.worker(namespace, name)?;
        let roots = lock(&worker.running).clone();
        // A container the runtime only simulates (an image it cannot run) is Running with no
        // process: it reports zero, as pods of the simulated kubelet do.
        let simulated: Vec<bool> = lock(&worker.record)
            .main
            .iter()
            .map(|c| {
                c.container_id.starts_with(SIMULATED_CONTAINER_ID)
                    && matches!(c.state, status::State::Running { .. })
            })
            .collect();
        let names = worker.pod["spec"]["containers"].as_array()?;
        let mut samples = lock(&self.usage);
        let used: Vec<ContainerUsage> = roots
            .iter()
            .zip(names)
            .zip(simulated.iter().chain(std::iter::repeat(&false)))
            .filter_map(|((root, container), simulated)| {
                let name = container["name"].as_str().unwrap_or_default();
                match root {
                    Some(root) => samples.read(&format!("{}/{name}", worker.uid), name, *root),
                    None => simulated.then(|| ContainerUsage::nothing_runs(name)),
                }
            })
            .collect();
        (!used.is_empty()).then_some(used)
    }

    /// Record an Event about `pod`, or count it again if the same one exists (as the kubelet's
    /// event recorder aggregates: `kubectl describe` shows "(x4 over 2m)").
    fn event(&self, pod: &Value, warning: bool, reason: &str, message: String) {
        let mut state = self.store.lock();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
        let existing = state
            .list("/events", Some(namespace))
            .into_iter()
            .find(|e| {
                e["involvedObject"]["uid"] == uid
                    && e["reason"] == reason
                    && e["message"] == message
            });
        match existing {
            Some(event) => {
                let mut again = (*event).clone();
                again["count"] = json!(event["count"].as_u64().unwrap_or(1) + 1);
                again["lastTimestamp"] = json!(timefmt::now_rfc3339());
                state.commit_modified("/events", again);
            }
            None => {
                let mut event =
                    builtins::pod_event(pod, &mut lock(&self.random), "kubelet", reason, message);
                if warning {
                    event["type"] = json!("Warning");
                }
                state.commit_added("/events", event);
            }
        }
    }
}

/// The kubelet has stopped a terminating pod: remove it, unless finalizers still hold it (then
/// its grace period is over, and removing the last finalizer deletes it).
pub(crate) fn remove_terminated_pod(
    state: &mut StoreState,
    namespace: &str,
    name: &str,
    uid: &str,
) {
    let Some(pod) = state.get("/pods", namespace, name) else {
        return;
    };
    if pod["metadata"]["uid"].as_str() != Some(uid)
        || pod["metadata"]["deletionTimestamp"].is_null()
    {
        return;
    }
    let Some(pods) = state.registry.find("", "v1", "pods").cloned() else {
        return;
    };
    let held = pod["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty());
    if held {
        let mut ended = (*pod).clone();
        ended["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        state.commit_modified("/pods", ended);
    } else {
        objects::remove(state, &pods, namespace, name, false);
    }
}
