//! Support: skip it on first read — it matters once the operator runs in a pod.
//!
//! Reading the pod's service account: the in-cluster source.
//!
//! The kubelet sets `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` in every pod and mounts
//! the service account's `token`, `ca.crt` and `namespace` under [`SERVICE_ACCOUNT_DIR`].

use std::path::Path;

#[cfg(doc)]
use super::SERVICE_ACCOUNT_DIR;
use super::{
    parse_server_url, read_certificates, read_file, Auth, Config, ConfigError, ConfigSource, Tls,
    TokenSource, DEFAULT_NAMESPACE, DEFAULT_REQUEST_TIMEOUT, SERVICE_ACCOUNT_CA_FILE,
    SERVICE_ACCOUNT_NAMESPACE_FILE, SERVICE_ACCOUNT_TOKEN_FILE,
};

impl Config {
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
        let source = ConfigSource::InCluster {
            service_account_dir: service_account_dir.to_path_buf(),
        };
        let server = parse_server_url(&format!("https://{host}:{port}"), &source.to_string())?;

        let ca_path = service_account_dir.join(SERVICE_ACCOUNT_CA_FILE);
        let root_certificates = read_certificates("service-account CA", &ca_path)?;

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
            source,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv6 cluster IP gets brackets in the URL.
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
