//! Support: skip it on first read — it asks kubectl for the current context, so a laptop needs no
//! flags.
//!
//! Reading the current kubeconfig context: the source for a laptop.
//!
//! This crate has no YAML parser, and kubectl already knows how to merge the files in
//! `KUBECONFIG`, so [`Config::from_kubeconfig`] asks kubectl for the current context as JSON and
//! [`Config::from_kubeconfig_json`] turns that into a [`Config`].

use std::path::Path;

use base64::Engine as _;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::PrivateKeyDer;
use serde_json::Value;

use super::{
    parse_certificates, parse_server_url, read_file, Auth, ClientIdentity, Config, ConfigError,
    ConfigSource, Environment, SecretKey, SecretString, Tls, TokenSource, DEFAULT_NAMESPACE,
    DEFAULT_REQUEST_TIMEOUT, KUBECONFIG_ENV, KUBECTL_ENV,
};

impl Config {
    /// The current kubeconfig context, read through `kubectl config view --flatten --minify -o
    /// json`. kubectl runs with only `PATH`, `HOME` and `KUBECONFIG` from `env`.
    ///
    /// This runs a child process and waits for it: it blocks. Async code calls it through
    /// [`Config::infer`] on tokio's blocking pool (see `process::connect`), never on a runtime
    /// thread.
    pub fn from_kubeconfig(env: &Environment) -> Result<Config, ConfigError> {
        let kubectl = env.get(KUBECTL_ENV).unwrap_or("kubectl");
        let mut command = std::process::Command::new(kubectl);
        // Plain `config view` prints tokens as "REDACTED" and data as "DATA+OMITTED". Both
        // `--raw` and `--flatten` print them; we need `--flatten` for file references: `--raw`
        // prints `certificate-authority: ca.crt` as written, relative to whichever KUBECONFIG
        // file named it, which the merged output no longer says; `--flatten` has kubectl read
        // each file next to its own kubeconfig and inline it as `certificate-authority-data`.
        // Tested by `kubeconfig_file_references_resolve_next_to_the_file_that_names_them`.
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
            Some(list) => {
                let first = list.split(':').next().unwrap_or_default();
                Path::new(first).parent().unwrap_or(Path::new(".")).into()
            }
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

        let token = if let Some(token) = user["token"].as_str().filter(|t| !t.is_empty()) {
            Some(TokenSource::Inline(SecretString::new(token)))
        } else if let Some(path) = user["tokenFile"].as_str().filter(|t| !t.is_empty()) {
            let path = base_dir.join(path);
            read_file("kubeconfig tokenFile", &path)?;
            Some(TokenSource::File(path))
        } else {
            None
        };
        let certificate =
            data_or_file(&user, "client-certificate", base_dir, "client-certificate")?;
        let key = data_or_file(&user, "client-key", base_dir, "client-key")?;
        let client_identity =
            match (certificate, key) {
                (Some(certificate), Some(key)) => Some(ClientIdentity {
                    certificate_chain: parse_certificates(&certificate, "client-certificate")?,
                    key: SecretKey::new(PrivateKeyDer::from_pem_slice(&key).map_err(|error| {
                        ConfigError::InvalidPem {
                            what: "client-key".into(),
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
