//! Starting a sandbox: the options it takes and what can go wrong while it starts.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The `sandbox` binary fills these from its flags; tests
//! start from `SandboxOptions::default()` and change the few fields they care about.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::store_file::StoreFileError;

/// How to start a sandbox ([`crate::Sandbox::start`]). `Default` gives plain HTTP on `127.0.0.1:0` with no delays.
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
    /// A connection that has not sent a whole request head this long after it opened (or after
    /// its previous response) is closed: kube-apiserver's `ReadHeaderTimeout` is 32 s. An idle
    /// keep-alive connection is closed after this long too, as Go's server does without an
    /// `IdleTimeout`; clients open a new one.
    pub header_read_timeout: Duration,
    /// Connections open at once (kept within the open-file limit, which the sandbox raises to
    /// the hard limit at start). At the cap, the connection that has waited longest for a
    /// request head (over a quarter of a second) is closed to make room for a new one; when
    /// every connection has a request in flight, new connections wait in the kernel's listen
    /// queue until one ends.
    pub max_connections: usize,
    /// With the process runtime: the directory holding the operator's stage binaries (`stage01`
    /// ... `stage06`, as `cargo build --bins` leaves them in target/debug), which pods of the
    /// image `postgres-operator:<tag>` run (`runtime/image.rs`). None: such pods fail to pull.
    /// The `sandbox` binary defaults it to its own directory when `stage06` (or `pg-ready`) is there.
    pub operator_binaries: Option<PathBuf>,
    /// Some(dir): keep every object in `dir/store.sqlite3`, each write on disk before it is
    /// answered, and start from what is there (`store_file.rs`). None (the default): in memory
    /// only, nothing written, an empty cluster at every start.
    pub data_dir: Option<PathBuf>,
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
            header_read_timeout: Duration::from_secs(32),
            max_connections: 4096,
            operator_binaries: None,
            data_dir: None,
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
    /// A CA key, CA certificate or admin token kept in the data directory could not be read.
    ReadKept {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The operating system's random number generator, where tokens come from, failed.
    Randomness,
    /// The store file in the data directory could not be opened or read.
    StoreFile(StoreFileError),
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
            SandboxError::ReadKept { path, source } => write!(
                f,
                "cannot read {}: {source} (the sandbox keeps its CA and admin token in its data directory)",
                path.display()
            ),
            SandboxError::Randomness => write!(
                f,
                "the operating system's random number generator failed (is getrandom(2) or /dev/urandom available?)"
            ),
            SandboxError::StoreFile(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SandboxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SandboxError::Bind { source, .. }
            | SandboxError::WriteCredentials { source, .. }
            | SandboxError::ReadKept { source, .. } => Some(source),
            SandboxError::Certificates(e) => Some(e),
            SandboxError::TlsConfig(e) => Some(e),
            SandboxError::StoreFile(e) => Some(e),
            SandboxError::Randomness => None,
        }
    }
}
