//! The sandbox: an embedded, in-memory Kubernetes API server that real `kubectl` accepts.
//!
//! WORKSHOP.md, "Set-up: the sandbox". It stands in for kube-apiserver + etcd, plus the few pieces
//! of kube-controller-manager and the kubelet an operator relies on: CRDs become Established,
//! deleting an owner deletes its dependents, and new pods go Pending → Running. **No container
//! ever runs**: a "Running" pod here is a status written by a simulated kubelet.
//!
//! # Module map
//!
//! | module | what it holds |
//! |---|---|
//! | `server.rs` | the hyper server: connections, TLS, bearer tokens, routing, discovery |
//! | `handlers.rs` | what each verb does on resource URLs, and the status/scale/log subresources |
//! | `access.rs` | `kubectl auth can-i`: access reviews, always allowed (there is no RBAC), with a warning |
//! | `responses.rs` | JSON, Table, text and Status responses; injected-fault answers |
//! | `store.rs` | objects, the global resourceVersion, the bounded event history, watcher fan-out |
//! | `resources.rs` | built-in kinds, kinds learnt from CRDs, discovery and OpenAPI documents |
//! | `objects.rs` | what the server does to an object on each write: metadata, generation, status, finalizers, garbage collection |
//! | `builtins.rs` | each built-in kind's defaults and checks; the kubelet's pod statuses; CRD names and conditions |
//! | `watch.rs` | one streaming response per watch: framing, bookmarks, timeouts, slow watchers |
//! | `table.rs` | `kubectl get` tables: printer columns and ages |
//! | `controllers.rs` | the simulated kubelet and CRD establishment (garbage collection is in `objects.rs`) |
//! | `protobuf.rs` | decoding the protobuf bodies `kubectl create namespace/secret/configmap` send |
//! | `tls.rs` | the generated CA, serving certificate and bearer token |
//! | `faults.rs` | the [`Faults`] handle tests use to break things on purpose |
//! | `errors.rs`, `body.rs`, `random.rs` | Status error answers, the response body type, xorshift |
//! | [`selector`], [`patch`], [`schema`], [`timefmt`], [`names`] | pure helpers: label/field selectors, the three patch kinds, CRD schema validation and pruning, RFC 3339 and ages, DNS-1123 names |
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
//! - No RBAC, admission, scheduler or container runtime; Deployments are stored, not run.
//!
//! # Start it
//!
//! ```text
//! cargo run --bin sandbox -- --listen 127.0.0.1:8001
//! kubectl --server http://127.0.0.1:8001 api-resources
//! ```

mod access;
mod body;
mod builtins;
mod controllers;
mod errors;
mod faults;
mod handlers;
mod names;
mod objects;
mod patch;
mod protobuf;
mod random;
mod resources;
mod responses;
mod schema;
mod selector;
mod server;
mod status;
mod store;
mod table;
mod timefmt;
mod tls;
mod watch;

pub use faults::{Faults, InjectedFault};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How to start a [`Sandbox`]. `Default` gives plain HTTP on `127.0.0.1:0` with no delays.
#[derive(Clone, Debug)]
pub struct SandboxOptions {
    pub listen: SocketAddr,
    /// Some(dir): serve HTTPS with a generated CA, require a bearer token, and write dir/ca.crt,
    /// dir/token, dir/namespace ("default") exactly as a pod's service-account directory.
    pub credentials_dir: Option<PathBuf>,
    /// How long after a CRD is created its `Established` condition turns True.
    pub established_delay: Duration,
    /// How long a new pod stays Pending before the simulated kubelet marks it Running.
    pub kubelet_delay: Duration,
    /// How long a deleted pod stays Terminating (deletionTimestamp set) before it is gone.
    /// Zero (the default) deletes pods at once, as `--grace-period=0` does.
    pub pod_termination_delay: Duration,
    /// Log one line per request (method, path, status, milliseconds) through `tracing`.
    pub log_requests: bool,
    /// Record the Events a scheduler and kubelet would (`Scheduled`, `Started`) when a pod
    /// starts, so `kubectl describe pod` and `kubectl get events` show them. Off by default:
    /// tests then see only the objects they make (the `sandbox` binary turns it on).
    pub pod_events: bool,
    /// How many past events the store keeps for watches that resume from a resourceVersion.
    /// Older resourceVersions get `410 Expired`, as etcd compaction does.
    pub history_window: usize,
    /// How often a watch with `allowWatchBookmarks=true` receives a BOOKMARK event.
    pub bookmark_interval: Duration,
    /// A watch without `timeoutSeconds` ends after this long (kube-apiserver: 30–60 min).
    pub default_watch_timeout: Duration,
    /// Events queued for one watcher before it counts as too slow and is ended.
    pub watch_queue_capacity: usize,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        SandboxOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            credentials_dir: None,
            established_delay: Duration::ZERO,
            kubelet_delay: Duration::ZERO,
            pod_termination_delay: Duration::ZERO,
            log_requests: false,
            pod_events: false,
            history_window: 1000,
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(30 * 60),
            watch_queue_capacity: 1000,
        }
    }
}

/// What went wrong while starting the sandbox; each variant names the step.
#[derive(Debug)]
pub enum SandboxError {
    /// The listen address could not be bound (in use, or not a local address).
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// Generating the CA or the serving certificate failed.
    Certificates(rcgen::Error),
    /// rustls refused the generated certificate or key.
    TlsConfig(rustls::Error),
    /// Writing ca.crt, token or namespace into the credentials directory failed.
    WriteCredentials {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for SandboxError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SandboxError::Bind { addr, source } => {
                write!(f, "cannot listen on {addr}: {source} (is the port in use?)")
            }
            SandboxError::Certificates(e) => write!(f, "generating the sandbox CA failed: {e}"),
            SandboxError::TlsConfig(e) => write!(f, "building the TLS configuration failed: {e}"),
            SandboxError::WriteCredentials { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for SandboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SandboxError::Bind { source, .. } | SandboxError::WriteCredentials { source, .. } => {
                Some(source)
            }
            SandboxError::Certificates(e) => Some(e),
            SandboxError::TlsConfig(e) => Some(e),
        }
    }
}

/// One request the sandbox answered, for tests that assert what a client did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// HTTP method as sent.
    pub method: String,
    /// Kubernetes verb: get, list, watch, create, update, patch, delete, deletecollection; or
    /// the HTTP method in lower case for non-resource paths (discovery, /version).
    pub verb: String,
    /// Plural resource (`postgresclusters`); empty for non-resource paths.
    pub resource: String,
    /// `status`, `scale`, `log`, or empty.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// The HTTP status code sent (200 for a watch, whatever its stream carried later).
    pub code: u16,
    /// Path and query as received.
    pub path: String,
}

/// A running sandbox. Dropping it stops the server too; [`Sandbox::shutdown`] also waits for it.
pub struct Sandbox {
    shared: Arc<server::Shared>,
    addr: SocketAddr,
    server_task: Option<tokio::task::JoinHandle<()>>,
}

impl Sandbox {
    /// Bind, generate credentials if asked, and serve in the background until `stop` is
    /// cancelled (or the `Sandbox` is dropped); [`Sandbox::stopped`] waits for the server to end.
    pub async fn start(
        options: SandboxOptions,
        stop: CancellationToken,
    ) -> Result<Sandbox, SandboxError> {
        let listener = tokio::net::TcpListener::bind(options.listen)
            .await
            .map_err(|source| SandboxError::Bind {
                addr: options.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SandboxError::Bind {
            addr: options.listen,
            source,
        })?;
        let security = match &options.credentials_dir {
            Some(dir) => Some(tls::Security::generate(dir)?),
            None => None,
        };
        let shared = server::Shared::new(options, addr, security);
        let server_task = tokio::spawn(server::serve(listener, shared.clone()));
        let watching = shared.clone();
        tokio::spawn(async move {
            let mut ended = watching.shutdown.subscribe();
            tokio::select! {
                _ = stop.cancelled() => watching.begin_shutdown(),
                _ = stopping(&mut ended) => {}
            }
        });
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
        lock(&self.shared.requests).clone()
    }

    /// The store's current resourceVersion (etcd's revision): it moves on every write of any object.
    pub fn resource_version(&self) -> String {
        self.shared.store.revision().to_string()
    }

    /// Stop accepting connections, end every watch, and wait for open connections to finish.
    pub async fn shutdown(self) {
        self.shared.begin_shutdown();
        self.stopped().await;
    }

    /// Wait until the server has ended (its `stop` token was cancelled, or [`Sandbox::shutdown`]).
    pub async fn stopped(mut self) {
        if let Some(task) = self.server_task.take() {
            let _ = task.await;
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

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Faults")
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shared.begin_shutdown();
    }
}

/// Lock a mutex even if a panicking thread poisoned it: the sandbox's state stays usable.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Resolves once the sandbox is shutting down (or its state is gone).
pub(crate) async fn stopping(shutdown: &mut tokio::sync::watch::Receiver<bool>) {
    // The guard `wait_for` returns is not Send; drop it here, not in the caller's select!.
    let _ = shutdown.wait_for(|stopping| *stopping).await;
}
