//! Support: skip it on first read — it finds the server in a fixed order, much as kubectl does, so
//! that `Client::new` has a `Config`; nothing here is about operators.
//!
//! Where the Kubernetes API server is and how to prove who we are to it.
//!
//! WORKSHOP.md, "Set-up". Every binary asks [`Config::infer`], which tries these sources in order
//! and takes the first that is usable:
//!
//! 1. `--server URL` (or the `KUBE_SERVER` environment variable). `http://` is what `kubectl proxy`
//!    (and the sandbox with `--insecure-http`) serve; `https://` also needs
//!    `--certificate-authority FILE` and usually `--token-file FILE` or `--token TOKEN`.
//! 2. In-cluster: the `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` variables the kubelet sets
//!    in every pod, and the service account's `token`, `ca.crt` and `namespace` files.
//! 3. The current kubeconfig context, read as JSON through `kubectl config view` (this crate has no
//!    YAML parser, and kubectl already knows how to merge `KUBECONFIG` files).
//!
//! If none is usable, the one error lists what was tried and why each was not usable, and the two
//! ways to fix it. Tokens and private keys are wrapped ([`SecretString`], [`SecretKey`]) so that
//! `Debug` and logs never show them.
//!
//! | file | source |
//! |---|---|
//! | `flags.rs` | [`ConfigArgs`], the connection flags every binary flattens into its own, and `--server` |
//! | `incluster.rs` | the pod's service account ([`Config::incluster_from`]) |
//! | `kubeconfig.rs` | the current kubeconfig context, through `kubectl config view` ([`Config::from_kubeconfig`]) |
//! | `secret.rs` | [`SecretString`] and [`SecretKey`], whose `Debug` says `<redacted>` |
//!
//! Choosing a source reads files and may run kubectl: it blocks. [`Config::infer`] is therefore
//! a plain function, and async callers run it on tokio's blocking pool (`process::connect` does).

mod flags;
mod incluster;
mod kubeconfig;
mod secret;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

pub use flags::{parse_server, ConfigArgs, CONNECTION_ORDER_HELP};
pub use secret::{SecretKey, SecretString};

/// Set by the kubelet in every pod: the cluster IP of the `kubernetes` Service.
pub const SERVICE_HOST_ENV: &str = "KUBERNETES_SERVICE_HOST";
/// Set by the kubelet in every pod: the HTTPS port of the `kubernetes` Service.
pub const SERVICE_PORT_ENV: &str = "KUBERNETES_SERVICE_PORT";
/// Where the kubelet mounts the pod's service-account credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Ours, not Kubernetes': points the in-cluster source at another directory (tests and the
/// sandbox's `credentials_dir`, which has the same three files).
pub const SERVICE_ACCOUNT_DIR_ENV: &str = "POSTGRES_OPERATOR_SERVICEACCOUNT_DIR";
/// The service account's bearer token. Bound tokens expire (about an hour) and the kubelet
/// rewrites this file, so the client re-reads it (see `client/token.rs`).
pub const SERVICE_ACCOUNT_TOKEN_FILE: &str = "token";
/// The CA that signed the API server's serving certificate.
pub const SERVICE_ACCOUNT_CA_FILE: &str = "ca.crt";
/// The namespace the pod runs in.
pub const SERVICE_ACCOUNT_NAMESPACE_FILE: &str = "namespace";
/// Same meaning as `--server`.
pub const KUBE_SERVER_ENV: &str = "KUBE_SERVER";
/// Colon-separated kubeconfig files; read by kubectl itself.
pub const KUBECONFIG_ENV: &str = "KUBECONFIG";
/// Which kubectl to run to read the kubeconfig (default `kubectl` on `PATH`).
pub const KUBECTL_ENV: &str = "KUBECTL";
/// The namespace when no source names one, as kubectl does.
pub const DEFAULT_NAMESPACE: &str = "default";
/// How long a non-watch request may take, end to end.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variables config reads, as a value: tests pass their own map instead of
/// mutating the process environment (which races between tests running in one process):
/// exactly the variables of the map, and no others.
#[derive(Clone, Debug, Default)]
pub struct Environment(pub BTreeMap<String, String>);

impl Environment {
    /// A snapshot of this process's environment.
    pub fn from_process() -> Environment {
        Environment(std::env::vars().collect())
    }

    /// A variable's value; set-but-empty counts as unset, as in most Kubernetes tooling.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Where a bearer token comes from.
#[derive(Clone, Debug)]
pub enum TokenSource {
    /// Given once (`--token`, a kubeconfig `token`): never changes.
    Inline(SecretString),
    /// A file the kubelet (or you) may rewrite: the client re-reads it every minute and after a 401.
    File(PathBuf),
}

/// A client certificate chain and its private key (kubeconfig `client-certificate`/`client-key`).
#[derive(Clone, Debug)]
pub struct ClientIdentity {
    pub certificate_chain: Vec<CertificateDer<'static>>,
    pub key: SecretKey,
}

/// How we authenticate. Both can be set: kubectl would then send both too.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    pub token: Option<TokenSource>,
    pub client_identity: Option<ClientIdentity>,
}

/// How we check the server's certificate.
#[derive(Clone, Default)]
pub struct Tls {
    /// The CAs we trust for this server; nothing else (no system roots: clusters use their own CA).
    pub root_certificates: Vec<CertificateDer<'static>>,
    /// kubeconfig `insecure-skip-tls-verify: true`. Honoured with a loud warning, never a default.
    pub insecure_skip_verify: bool,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("root_certificates", &self.root_certificates.len())
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish()
    }
}

/// Which source a [`Config`] came from; logged at start-up so "which cluster am I talking to?"
/// has an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigSource {
    /// `--server` (and friends) on the command line.
    Flags,
    /// The `KUBE_SERVER` environment variable.
    KubeServerEnv,
    /// The pod's service account.
    InCluster { service_account_dir: PathBuf },
    /// The current context of the kubeconfig.
    Kubeconfig { context: String },
    /// [`Config::from_url`].
    Url,
}

impl fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigSource::Flags => f.write_str("--server flag"),
            ConfigSource::KubeServerEnv => write!(f, "{KUBE_SERVER_ENV} environment variable"),
            ConfigSource::InCluster {
                service_account_dir,
            } => write!(
                f,
                "in-cluster service account ({})",
                service_account_dir.display()
            ),
            ConfigSource::Kubeconfig { context } => write!(f, "kubeconfig context {context:?}"),
            ConfigSource::Url => f.write_str("URL"),
        }
    }
}

/// Everything the client needs to reach one API server.
#[derive(Clone, Debug)]
pub struct Config {
    /// Base URL; request paths are appended to it (it may carry a path prefix, as behind Rancher).
    pub server: url::Url,
    /// The namespace our binaries work in.
    pub namespace: String,
    pub auth: Auth,
    pub tls: Tls,
    pub source: ConfigSource,
    /// End-to-end limit for one non-watch request.
    pub request_timeout: Duration,
}

/// Why no configuration could be built. Variants name the source or flag that was wrong.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The server URL does not parse or is not http/https.
    #[error("{origin}: server {url:?} is not a usable URL ({reason}); expected http://HOST:PORT or https://HOST:PORT")]
    InvalidServerUrl {
        origin: String,
        url: String,
        reason: String,
    },
    /// An `https://` server with no CA to verify it against.
    #[error("{origin}: {server} is https but no certificate authority was given to verify it; \
             pass --certificate-authority FILE (for the sandbox: its ca.crt), or use an http:// server such as `kubectl proxy`")]
    MissingCertificateAuthority { origin: String, server: String },
    /// A file we were pointed at could not be read.
    #[error("cannot read {what} {}: {reason}", path.display())]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// A certificate or key (from a file or kubeconfig data) is not usable PEM.
    #[error("{what} is not valid PEM: {reason}")]
    InvalidPem { what: String, reason: String },
    /// The kubeconfig's current context cannot be used, and why.
    #[error("kubeconfig: {reason}")]
    Kubeconfig { reason: String },
    /// No source was usable: each source tried and why it was not.
    #[error("no usable Kubernetes API server configuration. Tried, in order:\n{}Fix it one of two ways:\n  \
             - against a real cluster: run `kubectl proxy` in another terminal and pass --server http://127.0.0.1:8001\n  \
             - against the embedded API server: run `cargo run --bin sandbox` in another terminal, then the `export KUBECONFIG=...` line it prints",
             numbered(tried))]
    NothingUsable { tried: Vec<(String, String)> },
}

/// `  1. SOURCE: REASON`, one line each.
fn numbered(tried: &[(String, String)]) -> String {
    let lines = tried.iter().enumerate();
    lines
        .map(|(index, (source, reason))| format!("  {}. {source}: {reason}\n", index + 1))
        .collect()
}

impl Config {
    /// The first usable source of: flags, `KUBE_SERVER`, in-cluster, kubeconfig. `--namespace`
    /// overrides the namespace any source gives.
    pub fn infer(args: &ConfigArgs) -> Result<Config, ConfigError> {
        Config::infer_from(args, &Environment::from_process())
    }

    /// [`Config::infer`] with the environment given as a value (what tests use).
    pub fn infer_from(args: &ConfigArgs, env: &Environment) -> Result<Config, ConfigError> {
        let mut config = Config::infer_source(args, env)?;
        if let Some(namespace) = &args.namespace {
            config.namespace = namespace.clone();
        }
        tracing::info!(
            source = %config.source,
            server = %config.server,
            namespace = %config.namespace,
            "API server configuration"
        );
        Ok(config)
    }

    fn infer_source(args: &ConfigArgs, env: &Environment) -> Result<Config, ConfigError> {
        if let Some(server) = &args.server {
            return Config::from_flags(server, args, ConfigSource::Flags);
        }
        if let Some(server) = env.get(KUBE_SERVER_ENV) {
            return Config::from_flags(server, args, ConfigSource::KubeServerEnv);
        }

        let service_account_dir = PathBuf::from(
            env.get(SERVICE_ACCOUNT_DIR_ENV)
                .unwrap_or(SERVICE_ACCOUNT_DIR),
        );
        let in_cluster = match (env.get(SERVICE_HOST_ENV), env.get(SERVICE_PORT_ENV)) {
            (Some(host), Some(port)) => Config::incluster_from(&service_account_dir, host, port)
                .map_err(|error| {
                    // In a pod but unusable (token not mounted?): say so, then try kubeconfig.
                    tracing::warn!(%error, "in-cluster configuration not usable");
                    error.to_string()
                }),
            _ => Err(format!(
                "{SERVICE_HOST_ENV}/{SERVICE_PORT_ENV} not set (not running in a pod)"
            )),
        };
        let in_cluster_failed = match in_cluster {
            Ok(config) => return Ok(config),
            Err(reason) => reason,
        };
        let kubeconfig_failed = match Config::from_kubeconfig(env) {
            Ok(config) => return Ok(config),
            Err(ConfigError::Kubeconfig { reason }) => reason,
            Err(other) => other.to_string(),
        };
        let kubeconfig = env.get(KUBECONFIG_ENV).unwrap_or("~/.kube/config");
        let in_cluster = ConfigSource::InCluster {
            service_account_dir,
        };
        let tried = [
            (ConfigSource::Flags.to_string(), "not given".to_string()),
            (ConfigSource::KubeServerEnv.to_string(), "not set".into()),
            (in_cluster.to_string(), in_cluster_failed),
            (
                format!("kubeconfig (KUBECONFIG={kubeconfig})"),
                kubeconfig_failed,
            ),
        ];
        Err(ConfigError::NothingUsable {
            tried: tried.into(),
        })
    }

    /// Plain http, no authentication: `kubectl proxy` (which adds your credentials itself) or the
    /// sandbox with `--insecure-http`.
    /// That is `--server URL` with no other flag: an https URL fails for want of a CA.
    pub fn from_url(server: &str) -> Result<Config, ConfigError> {
        Config::from_flags(server, &ConfigArgs::default(), ConfigSource::Url)
    }
}

fn parse_server_url(server: &str, origin: &str) -> Result<url::Url, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidServerUrl {
        origin: origin.to_string(),
        url: server.to_string(),
        reason,
    };
    if !server.contains("://") {
        // `kubectl proxy` prints "Starting to serve on 127.0.0.1:8001": an address, not a URL.
        return Err(invalid(format!("no scheme; did you mean http://{server}?")));
    }
    let url = url::Url::parse(server).map_err(|error| invalid(error.to_string()))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(invalid(format!(
            "scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if url.host_str().is_none() {
        return Err(invalid("no host".into()));
    }
    Ok(url)
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    std::fs::read(path).map_err(|error| ConfigError::ReadFile {
        what,
        path: path.to_path_buf(),
        reason: error.to_string(),
    })
}

/// Every certificate in the PEM file at `path`, which holds `what` (for messages).
fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let pem = read_file(what, path)?;
    parse_certificates(&pem, &format!("{what} {}", path.display()))
}

/// Every certificate in a PEM bundle; none at all is an error.
fn parse_certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, ConfigError> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| ConfigError::InvalidPem {
            what: what.to_string(),
            reason: error.to_string(),
        })?;
    if certificates.is_empty() {
        return Err(ConfigError::InvalidPem {
            what: what.to_string(),
            reason: "no CERTIFICATE block found".into(),
        });
    }
    Ok(certificates)
}
