//! Where the Kubernetes API server is and how to prove who we are to it.
//!
//! WORKSHOP.md, "Set-up". Every binary asks [`Config::infer`], which tries these sources in order
//! and takes the first that is usable:
//!
//! 1. `--server URL` (or the `KUBE_SERVER` environment variable). `http://` is what `kubectl proxy`
//!    and the sandbox serve; `https://` also needs `--certificate-authority FILE` and usually
//!    `--token-file FILE` or `--token TOKEN`.
//! 2. In-cluster: the `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` variables the kubelet sets
//!    in every pod, and the service account's `token`, `ca.crt` and `namespace` files.
//! 3. The current kubeconfig context, read as JSON through `kubectl config view` (this crate has no
//!    YAML parser, and kubectl already knows how to merge `KUBECONFIG` files).
//!
//! If none is usable, the one error lists what was tried and why each was not usable, and the two
//! ways to fix it. Tokens and private keys are wrapped ([`SecretString`], [`SecretKey`]) so that
//! `Debug` and logs never show them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;

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
/// rewrites this file, so the client re-reads it (see `client.rs`).
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

/// A string that `Debug` and `Display` print as `<redacted>`: bearer tokens.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    pub fn new(secret: impl Into<String>) -> SecretString {
        SecretString(secret.into())
    }

    /// The secret itself: only for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

/// A client private key that `Debug` never prints.
#[derive(Clone)]
pub struct SecretKey(Arc<PrivateKeyDer<'static>>);

impl SecretKey {
    pub fn new(key: PrivateKeyDer<'static>) -> SecretKey {
        SecretKey(Arc::new(key))
    }

    /// A copy of the key for rustls' `with_client_auth_cert`.
    pub fn clone_key(&self) -> PrivateKeyDer<'static> {
        self.0.clone_key()
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

/// The environment variables config reads, as a value: tests pass their own map instead of
/// mutating the process environment (which races between tests running in one process).
#[derive(Clone, Debug, Default)]
pub struct Environment {
    vars: BTreeMap<String, String>,
}

impl Environment {
    /// A snapshot of this process's environment.
    pub fn from_process() -> Environment {
        Environment {
            vars: std::env::vars().collect(),
        }
    }

    /// Exactly these variables and no others.
    pub fn from_pairs<K: Into<String>, V: Into<String>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Environment {
        Environment {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// A variable's value; set-but-empty counts as unset, as in most Kubernetes tooling.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// The connection flags every binary accepts. Build it with [`ConfigArgs::parse`].
#[derive(Clone, Default)]
pub struct ConfigArgs {
    pub server: Option<String>,
    pub certificate_authority: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub token: Option<String>,
    pub namespace: Option<String>,
}

impl fmt::Debug for ConfigArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigArgs")
            .field("server", &self.server)
            .field("certificate_authority", &self.certificate_authority)
            .field("token_file", &self.token_file)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("namespace", &self.namespace)
            .finish()
    }
}

/// The flags [`ConfigArgs::parse`] takes; `-n` is kubectl's short form of `--namespace`.
const CONFIG_FLAGS: &[&str] = &[
    "--server",
    "--certificate-authority",
    "--token-file",
    "--token",
    "--namespace",
    "-n",
];

/// The `--help` lines for the flags above, as `(flag and value, what it means)`, and how
/// [`Config::infer`] chooses without them. Every binary that takes these flags shows them through
/// `process::Usage`, so no stage repeats them.
pub const CONNECTION_FLAGS_HELP: &[(&str, &str)] = &[
    (
        "--server URL",
        "the API server: http:// for `kubectl proxy` or the sandbox,\n\
         https:// with the two flags below (env: KUBE_SERVER)",
    ),
    (
        "--certificate-authority FILE",
        "PEM file of the CA that signed an https:// server's certificate",
    ),
    (
        "--token-file FILE",
        "bearer token, re-read when the file changes (a service account's)",
    ),
    (
        "--token TOKEN",
        "bearer token given inline (not with --token-file)",
    ),
    (
        "-n, --namespace NS",
        "namespace to work in (default: the source's, else \"default\")",
    ),
];

/// What [`Config::infer`] does when `--server` is not given, for `--help`.
pub const CONNECTION_ORDER_HELP: &str = "\
Without --server the first usable source wins: the KUBE_SERVER variable, then in-cluster
(KUBERNETES_SERVICE_HOST/PORT and the service account's token, ca.crt and namespace files),
then the current kubeconfig context (read through `kubectl config view`).";

impl ConfigArgs {
    /// Takes `--server`, `--certificate-authority`, `--token-file`, `--token` and `--namespace`
    /// (`-n`), each as `--flag value` or `--flag=value`, out of `args` (without the program name:
    /// pass `std::env::args().skip(1)`), and returns the rest in order for the binary's own flags.
    /// The `KUBE_SERVER` variable stands in for `--server` when [`Config::infer`] runs.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
    ) -> Result<(ConfigArgs, Vec<String>), ConfigError> {
        let mut parsed = ConfigArgs::default();
        let mut rest = Vec::new();
        let mut args = args.into_iter().peekable();
        while let Some(arg) = args.next() {
            let (flag, inline_value) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with('-') => (flag.to_string(), Some(value)),
                _ => (arg.clone(), None),
            };
            if !CONFIG_FLAGS.contains(&flag.as_str()) {
                rest.push(arg);
                continue;
            }
            let value = match inline_value {
                Some(value) => value.to_string(),
                // `--server --namespace x` is a missing value, not a server called "--namespace".
                None => match args.next_if(|next| !next.starts_with('-')) {
                    Some(value) => value,
                    None => return Err(ConfigError::MissingFlagValue { flag }),
                },
            };
            if value.is_empty() {
                return Err(ConfigError::MissingFlagValue { flag });
            }
            match flag.as_str() {
                "--server" => parsed.server = Some(value),
                "--certificate-authority" => parsed.certificate_authority = Some(value.into()),
                "--token-file" => parsed.token_file = Some(value.into()),
                "--token" => parsed.token = Some(value),
                _ => parsed.namespace = Some(value),
            }
        }
        if parsed.token.is_some() && parsed.token_file.is_some() {
            return Err(ConfigError::ConflictingFlags {
                flags: "--token and --token-file",
            });
        }
        Ok((parsed, rest))
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
#[derive(Debug)]
pub enum ConfigError {
    /// `--server` with nothing after it.
    MissingFlagValue { flag: String },
    /// Two flags that cannot be used together.
    ConflictingFlags { flags: &'static str },
    /// The server URL does not parse or is not http/https.
    InvalidServerUrl {
        origin: String,
        url: String,
        reason: String,
    },
    /// An `https://` server with no CA to verify it against.
    MissingCertificateAuthority { origin: String, server: String },
    /// A file we were pointed at could not be read.
    ReadFile {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// A certificate or key (from a file or kubeconfig data) is not usable PEM.
    InvalidPem { what: String, reason: String },
    /// The kubeconfig's current context cannot be used, and why.
    Kubeconfig { reason: String },
    /// No source was usable: each source tried and why it was not.
    NothingUsable { tried: Vec<(String, String)> },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::MissingFlagValue { flag } => {
                write!(f, "{flag} needs a value (write `{flag} VALUE` or `{flag}=VALUE`)")
            }
            ConfigError::ConflictingFlags { flags } => {
                write!(f, "{flags} cannot be used together; pick one")
            }
            ConfigError::InvalidServerUrl {
                origin,
                url,
                reason,
            } => write!(
                f,
                "{origin}: server {url:?} is not a usable URL ({reason}); expected http://HOST:PORT or https://HOST:PORT"
            ),
            ConfigError::MissingCertificateAuthority { origin, server } => write!(
                f,
                "{origin}: {server} is https but no certificate authority was given to verify it; \
                 pass --certificate-authority FILE (for the sandbox: its ca.crt), or use an http:// server such as `kubectl proxy`"
            ),
            ConfigError::ReadFile { what, path, reason } => {
                write!(f, "cannot read {what} {}: {reason}", path.display())
            }
            ConfigError::InvalidPem { what, reason } => write!(f, "{what} is not valid PEM: {reason}"),
            ConfigError::Kubeconfig { reason } => write!(f, "kubeconfig: {reason}"),
            ConfigError::NothingUsable { tried } => {
                writeln!(f, "no usable Kubernetes API server configuration. Tried, in order:")?;
                for (index, (source, reason)) in tried.iter().enumerate() {
                    writeln!(f, "  {}. {source}: {reason}", index + 1)?;
                }
                writeln!(f, "Fix it one of two ways:")?;
                writeln!(
                    f,
                    "  - against a real cluster: run `kubectl proxy` in another terminal and pass --server http://127.0.0.1:8001"
                )?;
                write!(
                    f,
                    "  - against the embedded API server: run `cargo run --bin sandbox` in another terminal and pass the --server URL it prints"
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

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

        let mut tried = vec![
            ("--server flag".to_string(), "not given".to_string()),
            (
                format!("{KUBE_SERVER_ENV} environment variable"),
                "not set".to_string(),
            ),
        ];
        let service_account_dir = PathBuf::from(
            env.get(SERVICE_ACCOUNT_DIR_ENV)
                .unwrap_or(SERVICE_ACCOUNT_DIR),
        );
        let in_cluster_label = format!(
            "in-cluster service account ({})",
            service_account_dir.display()
        );
        match (env.get(SERVICE_HOST_ENV), env.get(SERVICE_PORT_ENV)) {
            (Some(host), Some(port)) => {
                match Config::incluster_from(&service_account_dir, host, port) {
                    Ok(config) => return Ok(config),
                    Err(error) => {
                        // In a pod but unusable (token not mounted?): say so, then try kubeconfig.
                        tracing::warn!(%error, "in-cluster configuration not usable");
                        tried.push((in_cluster_label, error.to_string()));
                    }
                }
            }
            _ => tried.push((
                in_cluster_label,
                format!("{SERVICE_HOST_ENV}/{SERVICE_PORT_ENV} not set (not running in a pod)"),
            )),
        }

        match Config::from_kubeconfig(env) {
            Ok(config) => Ok(config),
            Err(error) => {
                let kubeconfig = env.get(KUBECONFIG_ENV).unwrap_or("~/.kube/config");
                tried.push((
                    format!("kubeconfig (KUBECONFIG={kubeconfig})"),
                    match error {
                        ConfigError::Kubeconfig { reason } => reason,
                        other => other.to_string(),
                    },
                ));
                Err(ConfigError::NothingUsable { tried })
            }
        }
    }

    /// Plain http, no authentication: `kubectl proxy` (which adds your credentials itself) or the
    /// sandbox in its default mode.
    pub fn from_url(server: &str) -> Result<Config, ConfigError> {
        let server = parse_server_url(server, "URL")?;
        if server.scheme() == "https" {
            return Err(ConfigError::MissingCertificateAuthority {
                origin: "Config::from_url".into(),
                server: server.to_string(),
            });
        }
        Ok(Config {
            server,
            namespace: DEFAULT_NAMESPACE.into(),
            auth: Auth::default(),
            tls: Tls::default(),
            source: ConfigSource::Url,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// `--server` (or `KUBE_SERVER`) plus the CA and token flags.
    fn from_flags(
        server: &str,
        args: &ConfigArgs,
        source: ConfigSource,
    ) -> Result<Config, ConfigError> {
        let label = source.to_string();
        let server = parse_server_url(server, &label)?;
        let mut tls = Tls::default();
        match &args.certificate_authority {
            Some(path) => {
                let pem = read_file("certificate authority file", path)?;
                tls.root_certificates =
                    parse_certificates(&pem, &format!("certificate authority {}", path.display()))?;
            }
            None if server.scheme() == "https" => {
                return Err(ConfigError::MissingCertificateAuthority {
                    origin: label,
                    server: server.to_string(),
                })
            }
            None => {}
        }
        let token = match (&args.token, &args.token_file) {
            (Some(token), _) => Some(TokenSource::Inline(SecretString::new(token.trim()))),
            (None, Some(path)) => {
                // Read it once now, so a wrong path is an error at start-up, not at the first request.
                read_file("token file", path)?;
                Some(TokenSource::File(path.clone()))
            }
            (None, None) => None,
        };
        if token.is_some() && server.scheme() == "http" {
            tracing::warn!(server = %server, "sending a bearer token over plain http");
        }
        Ok(Config {
            server,
            namespace: DEFAULT_NAMESPACE.into(),
            auth: Auth {
                token,
                client_identity: None,
            },
            tls,
            source,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The in-cluster source with its directory and service address given explicitly.
    /// `host` is `KUBERNETES_SERVICE_HOST` (an IPv6 address gets brackets), `port` is
    /// `KUBERNETES_SERVICE_PORT`.
    pub fn incluster_from(
        service_account_dir: &Path,
        host: &str,
        port: &str,
    ) -> Result<Config, ConfigError> {
        // An IPv6 cluster IP ("fd00::1") must be bracketed in a URL: https://[fd00::1]:443.
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        let label = format!(
            "in-cluster service account ({})",
            service_account_dir.display()
        );
        let server = parse_server_url(&format!("https://{host}:{port}"), &label)?;

        let ca_path = service_account_dir.join(SERVICE_ACCOUNT_CA_FILE);
        let ca_pem = read_file("service-account CA", &ca_path)?;
        let root_certificates = parse_certificates(
            &ca_pem,
            &format!("service-account CA {}", ca_path.display()),
        )?;

        let token_path = service_account_dir.join(SERVICE_ACCOUNT_TOKEN_FILE);
        read_file("service-account token", &token_path)?;

        // The namespace file is there in every pod; if not, fall back like kubectl does.
        let namespace_path = service_account_dir.join(SERVICE_ACCOUNT_NAMESPACE_FILE);
        let namespace = std::fs::read_to_string(&namespace_path)
            .ok()
            .map(|text| text.trim().to_string())
            .filter(|text| !text.is_empty())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());

        Ok(Config {
            server,
            namespace,
            auth: Auth {
                token: Some(TokenSource::File(token_path)),
                client_identity: None,
            },
            tls: Tls {
                root_certificates,
                insecure_skip_verify: false,
            },
            source: ConfigSource::InCluster {
                service_account_dir: service_account_dir.to_path_buf(),
            },
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }

    /// The current kubeconfig context, read through
    /// `kubectl config view --flatten --minify -o json` (flatten turns file references into
    /// inline data, so relative paths are resolved by kubectl itself). kubectl runs with only
    /// `PATH`, `HOME` and `KUBECONFIG` from `env`.
    pub fn from_kubeconfig(env: &Environment) -> Result<Config, ConfigError> {
        let kubectl = env.get(KUBECTL_ENV).unwrap_or("kubectl");
        let mut command = std::process::Command::new(kubectl);
        command
            .args(["config", "view", "--flatten", "--minify", "-o", "json"])
            .env_clear()
            .stdin(std::process::Stdio::null());
        for name in ["PATH", "HOME", KUBECONFIG_ENV] {
            if let Some(value) = env.get(name) {
                command.env(name, value);
            }
        }
        let output = command.output().map_err(|error| ConfigError::Kubeconfig {
            reason: format!("could not run `{kubectl} config view`: {error}"),
        })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let reason = if stderr.contains("current-context must exist") {
                "no current context (no kubeconfig file, or it names no current-context)"
                    .to_string()
            } else {
                format!("`kubectl config view` failed: {}", stderr.trim())
            };
            return Err(ConfigError::Kubeconfig { reason });
        }
        let json: Value =
            serde_json::from_slice(&output.stdout).map_err(|error| ConfigError::Kubeconfig {
                reason: format!("`kubectl config view -o json` printed something else: {error}"),
            })?;
        // A relative tokenFile is relative to the kubeconfig file that named it; flatten does not
        // inline tokens, so resolve against the first KUBECONFIG file (a simplification: kubectl
        // tracks the origin of each entry).
        let base_dir = match env.get(KUBECONFIG_ENV) {
            Some(list) => list
                .split(':')
                .next()
                .map(|first| {
                    Path::new(first)
                        .parent()
                        .unwrap_or(Path::new("."))
                        .to_path_buf()
                })
                .unwrap_or_default(),
            None => env
                .get("HOME")
                .map(|home| Path::new(home).join(".kube"))
                .unwrap_or_default(),
        };
        Config::from_kubeconfig_json(&json, &base_dir)
    }

    /// Build a config from `kubectl config view -o json` output: the current context's cluster,
    /// user and namespace.
    pub fn from_kubeconfig_json(json: &Value, base_dir: &Path) -> Result<Config, ConfigError> {
        let fail = |reason: String| ConfigError::Kubeconfig { reason };
        let context_name = json["current-context"]
            .as_str()
            .filter(|name| !name.is_empty())
            .ok_or_else(|| fail("no current-context".into()))?;
        let named = |list: &str, name: &str| -> Option<Value> {
            json[list]
                .as_array()?
                .iter()
                .find(|entry| entry["name"].as_str() == Some(name))
                .cloned()
        };
        let context = named("contexts", context_name)
            .ok_or_else(|| fail(format!("context {context_name:?} is not defined")))?;
        let context = &context["context"];
        let cluster_name = context["cluster"].as_str().unwrap_or_default();
        let cluster = named("clusters", cluster_name).ok_or_else(|| {
            fail(format!(
                "context {context_name:?} names cluster {cluster_name:?}, which is not defined"
            ))
        })?;
        let cluster = &cluster["cluster"];
        let user = context["user"]
            .as_str()
            .and_then(|name| named("users", name))
            .map(|entry| entry["user"].clone())
            .unwrap_or(Value::Null);

        let label = format!("kubeconfig context {context_name:?}");
        let server = cluster["server"]
            .as_str()
            .ok_or_else(|| fail(format!("cluster {cluster_name:?} has no server")))?;
        let server = parse_server_url(server, &label)?;

        let mut tls = Tls {
            insecure_skip_verify: cluster["insecure-skip-tls-verify"].as_bool() == Some(true),
            ..Tls::default()
        };
        let ca_what = format!("certificate-authority of cluster {cluster_name:?}");
        if let Some(pem) = data_or_file(cluster, "certificate-authority", base_dir, &ca_what)? {
            tls.root_certificates = parse_certificates(&pem, &ca_what)?;
        }
        if server.scheme() == "https"
            && tls.root_certificates.is_empty()
            && !tls.insecure_skip_verify
        {
            // No bundled public roots here: clusters sign their API server with their own CA.
            return Err(fail(format!(
                "cluster {cluster_name:?} is https but has no certificate-authority(-data)"
            )));
        }
        for ignored in ["proxy-url", "tls-server-name"] {
            if cluster[ignored].is_string() {
                // Not implemented here; `kubectl proxy` honours both.
                tracing::warn!(
                    cluster = cluster_name,
                    field = ignored,
                    "kubeconfig field is ignored by this client; if connecting fails, use `kubectl proxy`"
                );
            }
        }
        if tls.insecure_skip_verify {
            tracing::warn!(
                cluster = cluster_name,
                "kubeconfig sets insecure-skip-tls-verify: the server's certificate will NOT be checked"
            );
        }

        let token = if let Some(token) = user["token"].as_str().filter(|t| !t.is_empty()) {
            Some(TokenSource::Inline(SecretString::new(token)))
        } else if let Some(path) = user["tokenFile"].as_str().filter(|t| !t.is_empty()) {
            let path = base_dir.join(path);
            read_file("kubeconfig tokenFile", &path)?;
            Some(TokenSource::File(path))
        } else {
            None
        };
        let cert_what = "client-certificate".to_string();
        let key_what = "client-key".to_string();
        let certificate = data_or_file(&user, "client-certificate", base_dir, &cert_what)?;
        let key = data_or_file(&user, "client-key", base_dir, &key_what)?;
        let client_identity =
            match (certificate, key) {
                (Some(certificate), Some(key)) => Some(ClientIdentity {
                    certificate_chain: parse_certificates(&certificate, &cert_what)?,
                    key: SecretKey::new(PrivateKeyDer::from_pem_slice(&key).map_err(|error| {
                        ConfigError::InvalidPem {
                            what: key_what.clone(),
                            reason: error.to_string(),
                        }
                    })?),
                }),
                (None, None) => None,
                _ => return Err(fail(
                    "user has a client certificate without a key, or a key without a certificate"
                        .into(),
                )),
            };
        if token.is_none() && client_identity.is_none() {
            for (field, what) in [
                ("exec", "an exec credential plugin"),
                ("auth-provider", "an auth-provider plugin"),
                ("username", "basic auth"),
            ] {
                if !user[field].is_null() {
                    return Err(fail(format!(
                        "context {context_name:?} authenticates with {what}, which this hand-rolled client does not run; use `kubectl proxy`"
                    )));
                }
            }
        }

        let namespace = context["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .unwrap_or(DEFAULT_NAMESPACE)
            .to_string();
        Ok(Config {
            server,
            namespace,
            auth: Auth {
                token,
                client_identity,
            },
            tls,
            source: ConfigSource::Kubeconfig {
                context: context_name.to_string(),
            },
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }
}

fn parse_server_url(server: &str, origin: &str) -> Result<url::Url, ConfigError> {
    let invalid = |reason: String| ConfigError::InvalidServerUrl {
        origin: origin.to_string(),
        url: server.to_string(),
        reason,
    };
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

/// kubeconfig's two spellings of the same thing: `NAME-data` (base64 of the PEM) or `NAME` (a
/// file path, relative to the kubeconfig's directory).
fn data_or_file(
    section: &Value,
    name: &str,
    base_dir: &Path,
    what: &str,
) -> Result<Option<Vec<u8>>, ConfigError> {
    if let Some(data) = section[format!("{name}-data")].as_str() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|error| ConfigError::Kubeconfig {
                reason: format!("{what}: {name}-data is not base64: {error}"),
            })?;
        return Ok(Some(pem));
    }
    match section[name].as_str() {
        Some(path) => Ok(Some(read_file("kubeconfig file", &base_dir.join(path))?)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parse_takes_both_flag_spellings_and_returns_the_rest() {
        let (args, rest) = ConfigArgs::parse(strings(&[
            "--server",
            "http://127.0.0.1:8001",
            "--established-timeout",
            "5",
            "--namespace=team-a",
        ]))
        .unwrap();
        assert_eq!(args.server.as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!(args.namespace.as_deref(), Some("team-a"));
        assert_eq!(rest, strings(&["--established-timeout", "5"]));
    }

    #[test]
    fn a_flag_without_its_value_is_an_error_naming_it() {
        let error = ConfigArgs::parse(strings(&["--server"])).unwrap_err();
        assert!(
            error.to_string().starts_with("--server needs a value"),
            "{error}"
        );
        let error = ConfigArgs::parse(strings(&["--token-file", "--namespace", "x"])).unwrap_err();
        assert!(
            error.to_string().starts_with("--token-file needs a value"),
            "{error}"
        );
        let error = ConfigArgs::parse(strings(&["--namespace="])).unwrap_err();
        assert!(
            error.to_string().starts_with("--namespace needs a value"),
            "{error}"
        );
    }

    /// `--help` documents every flag `ConfigArgs::parse` takes, so the two cannot drift apart.
    #[test]
    fn every_connection_flag_has_help() {
        for flag in CONFIG_FLAGS {
            assert!(
                CONNECTION_FLAGS_HELP
                    .iter()
                    .any(|(names, _)| names.split([',', ' ']).any(|name| name == *flag)),
                "{flag} has no help line"
            );
        }
    }

    proptest::proptest! {
        /// Arguments that are not connection flags come back untouched and in order.
        #[test]
        fn other_arguments_pass_through_in_order(
            words in proptest::collection::vec("[a-z0-9=./-]{1,12}", 0..8)
        ) {
            let others: Vec<String> = words
                .into_iter()
                .filter(|word| {
                    let flag = word.split('=').next().unwrap_or_default();
                    !CONFIG_FLAGS.contains(&flag)
                })
                .collect();
            let mut args = vec!["--server".to_string(), "http://127.0.0.1:1".to_string()];
            args.extend(others.iter().cloned());
            let (parsed, rest) = ConfigArgs::parse(args).unwrap();
            proptest::prop_assert_eq!(parsed.server.as_deref(), Some("http://127.0.0.1:1"));
            proptest::prop_assert_eq!(rest, others);
        }
    }

    #[test]
    fn ipv6_service_hosts_are_bracketed() {
        let dir = tempfile::tempdir().unwrap();
        let error = Config::incluster_from(dir.path(), "fd00::1", "443").unwrap_err();
        // The URL parsed (so the host was bracketed); what is missing is the CA file.
        assert!(
            matches!(
                error,
                ConfigError::ReadFile {
                    what: "service-account CA",
                    ..
                }
            ),
            "{error}"
        );
        assert!(parse_server_url("https://[fd00::1]:443", "test").is_ok());
    }
}
