//! Support: skip it on first read — the flags every binary shares, parsed by clap.
//!
//! The `--server` source: the connection flags every binary takes, and the [`Config`] they make.
//!
//! [`ConfigArgs`] is a `clap::Args` struct: each binary flattens it into its own parser
//! (`#[command(flatten)]`), so the flags, their `--help` text and their errors are the same
//! everywhere and no binary repeats them.

use std::path::PathBuf;

use super::{
    parse_server_url, read_certificates, read_file, Auth, Config, ConfigError, ConfigSource,
    SecretString, Tls, TokenSource, DEFAULT_NAMESPACE, DEFAULT_REQUEST_TIMEOUT,
};

/// The connection flags every binary accepts: where the API server is, and who we are to it.
/// Without `--server`, [`Config::infer`] tries `KUBE_SERVER`, in-cluster, then kubeconfig.
///
/// It is a `Parser` as well as `Args` so that a test can parse these flags alone
/// (`ConfigArgs::try_parse_from(["test", "--server", URL])`).
#[derive(clap::Parser, Clone, Debug, Default)]
#[command(next_help_heading = "Connection (where the API server is, who we are)")]
pub struct ConfigArgs {
    /// The API server: http:// for `kubectl proxy`, https:// with --certificate-authority and
    /// a token (without it: the current kubeconfig context, as kubectl) [env: KUBE_SERVER]
    #[arg(long, value_name = "URL", value_parser = parse_server)]
    pub server: Option<String>,
    /// PEM file of the CA that signed an https:// server's certificate
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// File holding the bearer token, re-read every minute and after a 401 (a service account's)
    #[arg(long, value_name = "FILE", conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Bearer token given inline (not with --token-file)
    #[arg(long, value_name = "TOKEN", value_parser = parse_token)]
    pub token: Option<SecretString>,
    /// Namespace to work in (default: the source's, else "default")
    #[arg(short = 'n', long, value_name = "NS", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub namespace: Option<String>,
}

/// What [`Config::infer`] does when `--server` is not given: every binary's `--help` ends with it
/// (`#[command(after_help = ...)]`).
pub const CONNECTION_ORDER_HELP: &str = "\
Without --server the first usable source wins: the KUBE_SERVER variable, then in-cluster
(KUBERNETES_SERVICE_HOST/PORT and the service account's token, ca.crt and namespace files),
then the current kubeconfig context (read through `kubectl config view`).";

/// `--server`'s value parser: an http:// or https:// URL with a host. A bare `127.0.0.1:8001`
/// is refused with "did you mean http://127.0.0.1:8001?" (exit 2, as every bad flag).
pub fn parse_server(value: &str) -> Result<String, String> {
    match parse_server_url(value, "--server") {
        Ok(_) => Ok(value.to_string()),
        Err(ConfigError::InvalidServerUrl { reason, .. }) => Err(reason),
        Err(other) => Err(other.to_string()),
    }
}

/// `--token`'s value parser: wrapped at once, so `Debug` of the flags never shows it.
fn parse_token(value: &str) -> Result<SecretString, String> {
    match value.trim() {
        "" => Err("the token is empty".to_string()),
        token => Ok(SecretString::new(token)),
    }
}

impl Config {
    /// `--server` (or `KUBE_SERVER`) plus the CA and token flags.
    pub(super) fn from_flags(
        server: &str,
        args: &ConfigArgs,
        source: ConfigSource,
    ) -> Result<Config, ConfigError> {
        let label = source.to_string();
        let server = parse_server_url(server, &label)?;
        let mut tls = Tls::default();
        match &args.certificate_authority {
            Some(path) => {
                tls.root_certificates = read_certificates("certificate authority file", path)?;
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
            (Some(token), _) => Some(TokenSource::Inline(token.clone())),
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
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<ConfigArgs, clap::Error> {
        ConfigArgs::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
    }

    /// `--flag value`, `--flag=value` and kubectl's `-n` all work.
    #[test]
    fn both_flag_spellings_and_short_namespace() {
        let args = parse(&["--server", "http://127.0.0.1:8001", "--namespace=team-a"]).unwrap();
        assert_eq!(args.server.as_deref(), Some("http://127.0.0.1:8001"));
        assert_eq!(args.namespace.as_deref(), Some("team-a"));
        assert_eq!(parse(&["-n", "b"]).unwrap().namespace.as_deref(), Some("b"));
    }

    /// A flag without its value, or with an empty one, is an error naming the flag.
    #[test]
    fn a_flag_without_its_value_is_an_error_naming_it() {
        for (args, flag) in [
            (&["--server"][..], "--server"),
            (&["--token-file", "--namespace", "x"][..], "--token-file"),
            (&["--namespace="][..], "--namespace"),
            (&["--server="][..], "--server"),
        ] {
            let error = parse(args).unwrap_err().to_string();
            assert!(error.contains(flag), "{args:?}: {error}");
        }
    }

    /// `--server 127.0.0.1:8001` (what `kubectl proxy` prints) gets the URL it meant.
    #[test]
    fn a_server_without_scheme_suggests_http() {
        for address in ["127.0.0.1:8001", "localhost:8001"] {
            let error = parse(&["--server", address]).unwrap_err().to_string();
            let suggestion = format!("did you mean http://{address}?");
            assert!(error.contains(&suggestion), "{error}");
        }
    }

    /// `--token` with `--token-file` is refused: which one would win?
    #[test]
    fn token_and_token_file_conflict() {
        let error = parse(&["--token", "a", "--token-file", "b"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::ArgumentConflict);
    }
}
