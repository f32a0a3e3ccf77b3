//! The sandbox: an embedded, in-memory Kubernetes API server that real `kubectl` accepts.
//!
//! WORKSHOP.md, "Set-up: the sandbox". It stands in for kube-apiserver + etcd, plus the few pieces
//! of kube-controller-manager and the kubelet an operator relies on: CRDs become Established,
//! deleting an owner deletes its dependents, and new pods go Pending → Running. With the default
//! [`Runtime::Simulated`] **no container ever runs**: a "Running" pod is a status written by a
//! simulated kubelet. With [`Runtime::Processes`] (the `sandbox` binary's default where
//! PostgreSQL and bubblewrap are installed) pods run as real processes: `postgres:<tag>` pods are
//! real PostgreSQL servers on their own loopback addresses (`runtime.rs`).
//!
//! # Module map
//!
//! Layered from the top (what a caller touches) down to pure helpers. A module in layer N may
//! import modules of layers 0 to N, never above: the helpers import nothing of the crate, the
//! kinds only helpers, the store the kinds, the shared state (`Shared`, which holds the store)
//! the store, the answers and handlers the state, and the server the handlers. Inside one
//! layer imports go one way too. The house rule says "state below the store, the store below
//! the handlers, the handlers below the server"; here `Shared` holds the `Store`, so the store
//! sits below the state. `tests/program/module_layers.rs` reads this table
//! and the `crate::` paths of every file, and fails on an import that points up or closes a
//! cycle.
//!
//! | module | what it holds | layer |
//! |---|---|---|
//! | `lib.rs` | [`Sandbox`]: start, stop, URL, token, request log; re-exports the public types | 7 api |
//! | `server.rs` | the hyper server: connections (TLS, or HTTP and TLS on one port), the request log line, routing, discovery | 6 server |
//! | `handlers.rs` | what each verb does on resource URLs, and the status/scale/log/exec/portforward subresources | 5 handlers |
//! | `watch.rs` | one streaming response per watch: framing, bookmarks, timeouts, slow watchers | 4 answers |
//! | `responses.rs` | JSON, Table, text and Status responses; injected-fault answers | 4 answers |
//! | `remotecommand.rs` | `kubectl exec` over a WebSocket (the channel.k8s.io streams, the exit Status); port-forward's refusal | 4 answers |
//! | `workloads.rs` | the Deployment and ReplicaSet controllers: rollouts, pods from templates, their status (its own files in `workloads/`) | 4 answers |
//! | `controllers.rs` | the simulated kubelet and CRD establishment (garbage collection is in `objects.rs`) | 4 answers |
//! | `authn.rs` | who is asking (admin, service-account token, impersonation) and whether RBAC lets them; owner-reference admission | 4 answers |
//! | `metrics.rs` | `kubectl top`: the metrics.k8s.io API (PodMetrics, NodeMetrics) from the pods' processes; zero for simulated pods | 4 answers |
//! | `faults.rs` | the [`Faults`] handle tests use to break things on purpose | 4 answers |
//! | `fault_door.rs` | the node faults over HTTP: `POST /sandbox/faults/namespaces/NS/pods/NAME/FAULT` and `/sandbox/faults/images/FAULT?image=IMAGE` (`kubectl create --raw`), admin only | 4 answers |
//! | `state.rs` | `Shared`: the store, options, fault switches, request log, process runtime and shutdown token everyone holds | 3 state |
//! | `runtime.rs` | the process runtime: pods as jailed processes, real postgres, probes, restarts, logs (its own files in `runtime/`) | 3 state |
//! | `tls.rs` | the generated CA and serving certificate (always), the admin's bearer token (with a credentials directory: the `sandbox` binary's default) | 3 state |
//! | `storage.rs` | the PersistentVolume controller: default StorageClass, provisioning, binding, reclaim, pvc/pv-protection; the scheduler's wait for claims | 2 store |
//! | `objects.rs` | what the server does to an object on each write: metadata, generation, status, finalizers, garbage collection; service-account admission, each namespace's `default` ServiceAccount and `kube-root-ca.crt` | 2 store |
//! | `table.rs` | `kubectl get` tables: printer columns and ages | 2 store |
//! | `store.rs` | objects, the global resourceVersion, the bounded event history, watcher fan-out | 2 store |
//! | `builtins.rs` | each built-in kind's defaults and checks; the kubelet's pod statuses; CRD names and conditions | 1 kinds |
//! | `errors.rs` | the Status error answers (`ApiError`): not found, conflict, invalid, ... | 1 kinds |
//! | `resources.rs` | built-in kinds, kinds learnt from CRDs, discovery and OpenAPI documents, the version | 1 kinds |
//! | `options.rs` | [`SandboxOptions`] and [`SandboxError`]: how to start, what can fail | 0 helpers |
//! | `store_file.rs` | the store on disk (`--data-dir`): objects and the revision in an SQLite file, its format version, [`StoreFileError`] | 0 helpers |
//! | `connections.rs` | which connections stay open: a bounded number, idle ones closed first to make room; the open-file limit | 0 helpers |
//! | `cluster_ips.rs` | the ClusterIP allocator: unique addresses from the Service range, requested ones honoured | 0 helpers |
//! | `access.rs` | `kubectl auth can-i`: SelfSubjectAccessReview and SelfSubjectRulesReview answered by RBAC; `kubectl auth whoami`: SelfSubjectReview | 0 helpers |
//! | `rbac.rs` | users and groups, request attributes from URLs, rule matching, kube's forbidden messages | 0 helpers |
//! | `tokens.rs` | JWT-shaped service-account tokens, remembered and looked up | 0 helpers |
//! | `protobuf.rs` | decoding the protobuf bodies `kubectl create namespace/secret/configmap` send | 0 helpers |
//! | `schema.rs`, `patch.rs` | CRD schema validation and pruning; the three patch kinds | 0 helpers |
//! | `selector.rs`, `names.rs` | label and field selectors; DNS-1123 names and label values | 0 helpers |
//! | `status.rs`, `body.rs` | the `Status` wire type; the response body (whole or streamed) | 0 helpers |
//! | `timefmt.rs`, `random.rs`, `sync.rs` | RFC 3339 and ages; xorshift for names, the OS CSPRNG for secrets; locking a mutex | 0 helpers |
//!
//! # Where it simplifies
//!
//! - Watches never block writers: each watcher has a bounded queue
//!   ([`SandboxOptions::watch_queue_capacity`]); a watcher whose queue is full is ended (its
//!   stream closes cleanly after what was queued), as kube-apiserver ends watchers that fall
//!   behind. The client re-watches from its last resourceVersion.
//! - Pods are deleted at once (as with `--grace-period=0`) unless
//!   [`SandboxOptions::pod_termination_delay`] is set; a namespace goes at once with its
//!   contents; garbage collection (background and foreground) runs inside the owner's DELETE.
//! - Server-side apply is a merge of the applied object; no field ownership is tracked.
//! - PersistentVolumeClaims bind at once to directories the sandbox provisions (`storage.rs`);
//!   their capacity is recorded, not enforced.
//! - RBAC is enforced for every caller but the sandbox's admin (`rbac.rs`); admission is
//!   limited to namespaces, service accounts and owner references; no scheduler (a pod only
//!   waits for its claims). Deployments and ReplicaSets run (`workloads.rs` says where they
//!   simplify). The process runtime runs pods on this machine, not images: see `runtime.rs`
//!   for what it simplifies.
//!
//! # Start it
//!
//! ```text
//! cargo run --bin sandbox                          # HTTPS; prints the export lines below
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # names its CA and token
//! kubectl api-resources
//! ```

mod access;
mod authn;
mod body;
mod builtins;
mod cluster_ips;
mod connections;
mod controllers;
mod errors;
mod fault_door;
mod faults;
mod handlers;
mod metrics;
mod names;
mod objects;
mod options;
mod patch;
mod protobuf;
mod random;
mod rbac;
mod remotecommand;
mod resources;
mod responses;
mod runtime;
mod schema;
mod selector;
mod server;
mod state;
mod status;
mod storage;
mod store;
mod store_file;
mod sync;
mod table;
mod timefmt;
mod tls;
mod tokens;
mod watch;
mod workloads;

pub use faults::Faults;
pub use options::{SandboxError, SandboxOptions};
pub use runtime::{
    HostError, HostTools, LostNode, LostProcesses, ProcessRuntime, Runtime, INSTALL_HINT,
};
pub use state::{InjectedFault, RequestRecord};
pub use store_file::StoreFileError;

use std::net::SocketAddr;
use std::sync::Arc;

use state::Shared;
use tokio_util::sync::CancellationToken;

/// A running sandbox. Dropping it stops the server too; [`Sandbox::shutdown`] also waits for it.
pub struct Sandbox {
    shared: Arc<Shared>,
    addr: SocketAddr,
    server_task: Option<tokio::task::JoinHandle<()>>,
}

impl Sandbox {
    /// Bind, generate credentials if asked, and serve in the background until `stop` is
    /// cancelled (or the `Sandbox` is dropped); [`Sandbox::stopped`] waits for the server to end.
    /// Pods are simulated: nothing runs.
    pub async fn start(
        options: SandboxOptions,
        stop: CancellationToken,
    ) -> Result<Sandbox, SandboxError> {
        Sandbox::start_with_runtime(options, Runtime::Simulated, stop).await
    }

    /// [`Sandbox::start`] with a choice of kubelet: [`Runtime::Processes`] runs pods as real
    /// processes (find what it needs with [`ProcessRuntime::detect`]). Its pods are told this
    /// server's address (`KUBERNETES_SERVICE_HOST`/`PORT`, the `kubernetes` Service), and
    /// `postgres-operator:<tag>` pods run [`SandboxOptions::operator_binaries`].
    pub async fn start_with_runtime(
        options: SandboxOptions,
        runtime: Runtime,
        stop: CancellationToken,
    ) -> Result<Sandbox, SandboxError> {
        let listener = Sandbox::bind(options.listen).await?;
        Sandbox::start_on(listener, options, runtime, stop).await
    }

    /// Bind `listen` (port 0 picks a free one): the first step of
    /// [`Sandbox::start_with_runtime`], on its own for a caller that must know the port before
    /// the sandbox starts (the `sandbox` binary names its credentials directory after it).
    pub async fn bind(listen: SocketAddr) -> Result<tokio::net::TcpListener, SandboxError> {
        tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|source| SandboxError::Bind {
                addr: listen,
                source,
            })
    }

    /// [`Sandbox::start_with_runtime`] on a listener already bound ([`Sandbox::bind`]);
    /// `options.listen` is not used.
    pub async fn start_on(
        listener: tokio::net::TcpListener,
        mut options: SandboxOptions,
        mut runtime: Runtime,
        stop: CancellationToken,
    ) -> Result<Sandbox, SandboxError> {
        // Real processes need time to stop: a deleted pod stays Terminating (deletionTimestamp
        // set) until its worker has stopped them, within Kubernetes' default 30 s grace period
        // (or the pod's shorter terminationGracePeriodSeconds).
        if matches!(runtime, Runtime::Processes(_)) && options.pod_termination_delay.is_zero() {
            options.pod_termination_delay = std::time::Duration::from_secs(30);
        }
        let addr = listener.local_addr().map_err(|source| SandboxError::Bind {
            addr: options.listen,
            source,
        })?;
        let certificates = tls::Certificates::generate(addr.ip(), options.data_dir.as_deref())?;
        if let Runtime::Processes(config) = &mut runtime {
            // What pods are told about the API server (`KUBERNETES_SERVICE_HOST`/`PORT`): this
            // listener, reached from a pod at the same address (pods share the machine's
            // network); a wildcard listen address is reached at 127.0.0.1.
            let mut reachable = addr;
            if reachable.ip().is_unspecified() {
                reachable.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            config.cluster = std::sync::Arc::new(runtime::Cluster {
                api_server: Some(reachable),
                operator_binaries: options.operator_binaries.clone(),
            });
        }
        let security = match &options.credentials_dir {
            Some(dir) => Some(tls::Security::generate(
                dir,
                &certificates,
                options.data_dir.as_deref(),
            )?),
            None => None,
        };
        // A child token: cancelling `stop` stops the sandbox, while `shutdown` (or dropping the
        // `Sandbox`) stops only the sandbox, never the caller's other tasks.
        let volume_dirs = match &runtime {
            Runtime::Processes(config) => Some(storage::VolumeDirs::under(config.data_dir())),
            Runtime::Simulated => None,
        };
        // With a data directory, the cluster it holds; a damaged or newer file stops the start
        // here, naming the file, rather than starting empty and orphaning what is there.
        let store = match &options.data_dir {
            Some(dir) => {
                let (file, loaded) =
                    store_file::StoreFile::open(dir).map_err(SandboxError::StoreFile)?;
                tracing::info!(file = %dir.join(store_file::FILE_NAME).display(), objects = loaded.objects.len(), revision = loaded.revision, "loaded the store");
                store::Store::open(
                    options.history_window,
                    options.watch_queue_capacity,
                    file,
                    loaded,
                )
            }
            None => store::Store::new(options.history_window, options.watch_queue_capacity),
        };
        let shared = Shared::new(
            store,
            options,
            addr,
            security,
            certificates,
            runtime,
            stop.child_token(),
        );
        storage::start(shared.store.clone(), volume_dirs, shared.shutdown.clone());
        // Objects loaded from a data directory: pods run again, unfinished work is finished.
        controllers::resume(&shared);
        tokio::spawn(workloads::run(shared.clone()));
        let server_task = tokio::spawn(server::serve(listener, shared.clone()));
        tracing::info!(%addr, "sandbox API server listening");
        Ok(Sandbox {
            shared,
            addr,
            server_task: Some(server_task),
        })
    }

    /// `http://127.0.0.1:PORT`, or `https://...` when started with a credentials directory.
    pub fn url(&self) -> String {
        let scheme = if self.shared.security.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The bearer token clients must send (TLS mode only).
    pub fn token(&self) -> Option<String> {
        self.shared.security.as_ref().map(|s| s.current_token())
    }

    /// Issue a new token: the old one gets 401 from now on, and dir/token is rewritten atomically.
    /// Without a credentials directory this returns an empty string and changes nothing.
    pub fn rotate_token(&self) -> String {
        match &self.shared.security {
            Some(security) => security.rotate_token(),
            None => String::new(),
        }
    }

    pub fn faults(&self) -> Faults {
        Faults::new(self.shared.clone())
    }

    /// Every request answered so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        sync::lock(&self.shared.requests).clone()
    }

    /// The store's current resourceVersion (etcd's revision): it moves on every write of any object.
    pub fn resource_version(&self) -> String {
        self.shared.store.revision().to_string()
    }

    /// What runs pods: `None` for the simulated kubelet, else a line naming the PostgreSQL,
    /// bubblewrap, pod address range and data directory the process runtime uses.
    pub fn runtime_description(&self) -> Option<String> {
        self.shared.node.as_ref().map(|node| node.describe())
    }

    /// Stop accepting connections, end every watch, stop every pod's processes, and wait for
    /// open connections to finish.
    pub async fn shutdown(self) {
        self.shared.shutdown.cancel();
        self.stopped().await;
    }

    /// Wait until the server has ended (its `stop` token was cancelled, or [`Sandbox::shutdown`])
    /// and, with the process runtime, every pod's processes have exited.
    pub async fn stopped(mut self) {
        if let Some(task) = self.server_task.take() {
            let _ = task.await;
        }
        if let Some(node) = &self.shared.node {
            node.stopped().await;
        }
    }
}

impl std::fmt::Debug for Sandbox {
    /// `Sandbox { url: "http://127.0.0.1:PORT", resource_version: "42" }` (never the token).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("url", &self.url())
            .field("resource_version", &self.resource_version())
            .finish()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}
