//! The state every part of a running sandbox shares: the store, the options it started with,
//! the fault switches, the request log, the simulated controllers' delays, the process runtime
//! (when pods run for real), and the shutdown token.
//!
//! WORKSHOP.md, "Set-up: the sandbox". One `Arc<Shared>` is created per sandbox; the server,
//! the handlers, the simulated controllers and the public `Sandbox`/`Faults` handles all hold it.
//! Nothing here answers requests: this module only knows what there is, not what to do with it.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::builtins;
use crate::objects;
use crate::options::SandboxOptions;
use crate::random::Xorshift;
use crate::runtime::{Node, Runtime};
use crate::store::Store;
use crate::sync::lock;
use crate::tls::{Certificates, Security};
use crate::tokens::Tokens;

/// Keep the request log bounded in a long-running sandbox.
const MAX_RECORDED_REQUESTS: usize = 100_000;

/// Everything the request handlers share.
pub(crate) struct Shared {
    /// Shared with the process runtime, which writes pod statuses and events into it.
    pub(crate) store: Arc<Store>,
    pub(crate) options: SandboxOptions,
    pub(crate) addr: SocketAddr,
    /// The admin's token and credentials directory (the `sandbox` binary's default, or `--tls-dir`); None: plain HTTP, no token (`--insecure-http`).
    pub(crate) security: Option<Security>,
    /// The CA and serving certificate: always there, for pods' HTTPS even on plain HTTP.
    pub(crate) certificates: Certificates,
    /// Service-account tokens issued (TokenRequest and the kubelet's projected tokens).
    pub(crate) tokens: Arc<Tokens>,
    pub(crate) faults: Mutex<FaultSettings>,
    /// Images (`nginx:1.7.9`) whose pods never pass readiness (`Faults::fail_readiness`).
    pub(crate) unready_images: builtins::UnreadyImages,
    pub(crate) requests: Mutex<Vec<RequestRecord>>,
    /// Starts as `options.established_delay`; `Faults::set_established_delay` changes it, for
    /// the CRDs already waiting too.
    pub(crate) established_delay: watch::Sender<Duration>,
    /// Starts as `options.kubelet_delay`; `Faults::set_kubelet_delay` changes it, for the pods
    /// already waiting too.
    pub(crate) kubelet_delay: watch::Sender<Duration>,
    pub(crate) random: Mutex<Xorshift>,
    /// Bumped by `Faults::end_all_watches_now`: every open watch ends.
    pub(crate) watch_epoch: watch::Sender<u64>,
    /// Cancelled when the sandbox stops: the server stops accepting, watches end, timers stop.
    pub(crate) shutdown: CancellationToken,
    /// Bumped by `Faults::go_offline`: (count, how long to stay offline).
    pub(crate) outage: watch::Sender<(u64, Duration)>,
    /// Some: pods run as processes (`Runtime::Processes`); None: the simulated kubelet.
    pub(crate) node: Option<Arc<Node>>,
    /// True while `Faults::freeze` holds every request, as a stopped API server would.
    pub(crate) frozen: watch::Sender<bool>,
}

impl Shared {
    /// The shared state around `store`. An empty store becomes a fresh cluster: the
    /// namespaces and the node every cluster starts with, nothing else. A store loaded from a
    /// data directory already has them; its `kube-root-ca.crt` ConfigMaps are given this
    /// start's CA, as kube-controller-manager's root-CA publisher does when the CA changes.
    pub(crate) fn new(
        store: Store,
        options: SandboxOptions,
        addr: SocketAddr,
        security: Option<Security>,
        certificates: Certificates,
        runtime: Runtime,
        shutdown: CancellationToken,
    ) -> Arc<Shared> {
        let store = Arc::new(store);
        let mut random = Xorshift::from_entropy();
        {
            let mut state = store.lock();
            if state.revision() > 0 {
                objects::publish_root_ca(&mut state, &certificates.ca_pem);
            }
        }
        if store.revision() == 0 {
            let mut state = store.lock();
            // The namespaces every cluster starts with.
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                state.commit_added(
                    "/namespaces",
                    builtins::initial_namespace(name, random.uuid()),
                );
            }
            state.commit_added("/nodes", builtins::initial_node(random.uuid()));
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                objects::populate_namespace(&mut state, name, &certificates.ca_pem, &mut random);
            }
        }
        let tokens = Arc::new(Tokens::new());
        let unready_images = builtins::UnreadyImages::default();
        let node = match runtime {
            Runtime::Simulated => None,
            Runtime::Processes(config) => Some(Node::new(
                config,
                store.clone(),
                tokens.clone(),
                unready_images.clone(),
                shutdown.clone(),
            )),
        };
        Arc::new(Shared {
            store,
            node,
            established_delay: watch::Sender::new(options.established_delay),
            kubelet_delay: watch::Sender::new(options.kubelet_delay),
            options,
            addr,
            security,
            certificates,
            tokens,
            faults: Mutex::new(FaultSettings::default()),
            unready_images,
            requests: Mutex::new(Vec::new()),
            random: Mutex::new(random),
            watch_epoch: watch::channel(0).0,
            shutdown,
            outage: watch::channel((0, Duration::ZERO)).0,
            frozen: watch::channel(false).0,
        })
    }

    /// Add a request to the log, dropping the older half when it is full.
    pub(crate) fn record(&self, record: RequestRecord) {
        let mut requests = lock(&self.requests);
        if requests.len() >= MAX_RECORDED_REQUESTS {
            requests.drain(..MAX_RECORDED_REQUESTS / 2);
        }
        requests.push(record);
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
    /// The `User-Agent` header, empty when absent: kubectl sends `kubectl/v1.32...`, the operator
    /// `postgres-operator/0.1.0`, so a test can tell whose requests are whose.
    pub user_agent: String,
    /// The user the request acted as, after impersonation: `system:admin` for the sandbox's
    /// own kubectl, `system:serviceaccount:NS:NAME` for a service-account token; empty when
    /// authentication failed.
    pub user: String,
    /// The pod a bound service-account token was issued for (the caller's pod); empty otherwise.
    pub pod: String,
    /// When its head arrived (before any freeze held it), by the wall clock, as an audit log
    /// stamps it: a test orders one client's requests by it.
    pub received: SystemTime,
}

/// A failure to answer instead of the real response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InjectedFault {
    /// A proper Status body with this code and reason (+ a `Retry-After` header if set).
    /// 410 comes out as reason `Expired`, the way a watch start can fail.
    Status {
        code: u16,
        reason: String,
        retry_after_seconds: Option<u32>,
    },
    /// A body that is not JSON at all, e.g. an HTML error page from a proxy.
    NonJson { code: u16, body: String },
    /// 200 with an empty body, connection closed at once.
    EmptyOk,
    /// The handler panics, as a bug in the server would: that request gets a 500, and nothing
    /// else is affected.
    Panic,
}

/// The current fault settings, read by each request as it starts (`faults.rs` changes them).
#[derive(Clone, Debug, Default)]
pub(crate) struct FaultSettings {
    pub(crate) end_watches_after_events: Option<usize>,
    pub(crate) end_watches_after: Option<Duration>,
    pub(crate) stall_watches: bool,
    pub(crate) watch_chunk_size: Option<usize>,
    pub(crate) watch_events_per_chunk: Option<usize>,
    pub(crate) pending_failures: Vec<PendingFailure>,
}

#[derive(Clone, Debug)]
pub(crate) struct PendingFailure {
    pub(crate) remaining: usize,
    pub(crate) path_contains: String,
    pub(crate) fault: InjectedFault,
}

impl FaultSettings {
    /// The fault to answer a request for `path` with, if one is pending (and count it used).
    pub(crate) fn take_failure(&mut self, path: &str) -> Option<InjectedFault> {
        let pending = self
            .pending_failures
            .iter_mut()
            .find(|p| p.remaining > 0 && path.contains(&p.path_contains))?;
        pending.remaining -= 1;
        let fault = pending.fault.clone();
        self.pending_failures.retain(|p| p.remaining > 0);
        Some(fault)
    }
}
