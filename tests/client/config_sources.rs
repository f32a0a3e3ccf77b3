//! Where a binary finds its API server: flags > KUBE_SERVER > in-cluster > kubeconfig, each
//! proven against a real HTTPS server where it matters (CA data, token, client certificate), the
//! one "nothing usable" message, bad flags, and that Debug never shows a secret.
//!
//! The environment is passed as a value (an `Environment` map), never set on the process:
//! tests run in parallel threads of one process.

use std::path::Path;

use base64::Engine as _;
use clap::Parser;
use postgres_operator::client::{Client, RequestError};
use postgres_operator::config::{
    Config, ConfigArgs, ConfigError, ConfigSource, Environment, TokenSource,
};
use serde_json::{json, Value};
use test_support::scripted_server::{json, ready, ScriptedServer, TestPki};

/// The connection flags as a binary's clap parser would read them.
fn args(list: &[&str]) -> ConfigArgs {
    try_args(list).unwrap()
}

fn try_args(list: &[&str]) -> Result<ConfigArgs, clap::Error> {
    ConfigArgs::try_parse_from(std::iter::once("test").chain(list.iter().copied()))
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Indent a PEM block under a YAML key is not needed: kubeconfig carries PEM as base64 data.
fn write_kubeconfig(dir: &Path, cluster: &str, user: &str, namespace: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig.yaml");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n{cluster}users:\n- name: tester\n  user:\n{user}contexts:\n- name: test-context\n  context:\n    cluster: test\n    user: tester\n    namespace: {namespace}\ncurrent-context: test-context\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

// On this machine `/usr/bin/kubectl` is gcloud's dispatcher, which first GETs `/version` from
// the kubeconfig's server (even for `config view`) to pick a kubectl. Tests call the bundled
// kubectl directly so the fake servers see only our client's requests.
use test_support::BUNDLED_KUBECTL;

/// An environment with only what kubectl needs plus the given variables.
fn env_with(kubeconfig: &Path, home: &Path, extra: &[(&str, String)]) -> Environment {
    let mut pairs = vec![
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        ("HOME".to_string(), home.display().to_string()),
        ("KUBECONFIG".to_string(), kubeconfig.display().to_string()),
    ];
    if Path::new(BUNDLED_KUBECTL).exists() {
        pairs.push(("KUBECTL".to_string(), BUNDLED_KUBECTL.to_string()));
    }
    pairs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
    Environment(pairs.into_iter().collect())
}

fn service_account_dir(pki: &TestPki, namespace: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "sa-token").unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("namespace"), namespace).unwrap();
    dir
}

async fn ok_server(pki: &TestPki, require_client_certificate: bool) -> ScriptedServer {
    ScriptedServer::https(pki.server_config(require_client_certificate), |_, _| {
        ready(json(200, json!({"kind": "APIVersions"})))
    })
    .await
}

/// `--server` wins over KUBE_SERVER, in-cluster and kubeconfig all being present.
#[test]
fn flags_win_over_every_other_source() {
    let pki = TestPki::generate();
    let home = tempfile::tempdir().unwrap();
    let sa = service_account_dir(&pki, "from-sa");
    let kubeconfig = write_kubeconfig(
        home.path(),
        "    server: http://127.0.0.1:9\n",
        "    token: kc\n",
        "from-kubeconfig",
    );
    let env = env_with(
        &kubeconfig,
        home.path(),
        &[
            ("KUBE_SERVER", "http://127.0.0.1:7".into()),
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".into()),
            ("KUBERNETES_SERVICE_PORT", "6443".into()),
            (
                "POSTGRES_OPERATOR_SERVICEACCOUNT_DIR",
                sa.path().display().to_string(),
            ),
        ],
    );
    let config = Config::infer_from(&args(&["--server", "http://127.0.0.1:8001"]), &env).unwrap();
    assert_eq!(config.source, ConfigSource::Flags);
    assert_eq!(config.server.as_str(), "http://127.0.0.1:8001/");
    assert_eq!(config.namespace, "default");

    let config = Config::infer_from(&args(&[]), &env).unwrap();
    assert_eq!(
        config.source,
        ConfigSource::KubeServerEnv,
        "then KUBE_SERVER"
    );
    assert_eq!(config.server.as_str(), "http://127.0.0.1:7/");
}

/// In-cluster wins over kubeconfig; its namespace file is used, and `--namespace` overrides it.
#[test]
fn in_cluster_wins_over_kubeconfig_and_namespace_flag_overrides() {
    let pki = TestPki::generate();
    let home = tempfile::tempdir().unwrap();
    let sa = service_account_dir(&pki, "from-sa\n");
    let kubeconfig = write_kubeconfig(
        home.path(),
        "    server: http://127.0.0.1:9\n",
        "    token: kc\n",
        "from-kubeconfig",
    );
    let env = env_with(
        &kubeconfig,
        home.path(),
        &[
            ("KUBERNETES_SERVICE_HOST", "fd00::1".into()),
            ("KUBERNETES_SERVICE_PORT", "443".into()),
            (
                "POSTGRES_OPERATOR_SERVICEACCOUNT_DIR",
                sa.path().display().to_string(),
            ),
        ],
    );
    let config = Config::infer_from(&args(&[]), &env).unwrap();
    assert!(
        matches!(config.source, ConfigSource::InCluster { .. }),
        "{:?}",
        config.source
    );
    assert_eq!(
        config.server.as_str(),
        "https://[fd00::1]/",
        "IPv6 bracketed; 443 is https's default"
    );
    assert_eq!(config.namespace, "from-sa");
    assert!(matches!(&config.auth.token, Some(TokenSource::File(path)) if path.ends_with("token")));

    let config = Config::infer_from(&args(&["--namespace", "override"]), &env).unwrap();
    assert_eq!(config.namespace, "override");
}

/// In a pod whose service-account files are missing, kubeconfig is used; if that fails too, the
/// error says why in-cluster was not usable.
#[test]
fn a_broken_in_cluster_source_falls_through_and_is_reported() {
    let home = tempfile::tempdir().unwrap();
    let empty_sa = tempfile::tempdir().unwrap();
    let env = env_with(
        &home.path().join("missing-kubeconfig"),
        home.path(),
        &[
            ("KUBERNETES_SERVICE_HOST", "10.96.0.1".into()),
            ("KUBERNETES_SERVICE_PORT", "443".into()),
            (
                "POSTGRES_OPERATOR_SERVICEACCOUNT_DIR",
                empty_sa.path().display().to_string(),
            ),
        ],
    );
    let error = Config::infer_from(&args(&[]), &env).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("3. in-cluster service account"), "{text}");
    assert!(text.contains("cannot read service-account CA"), "{text}");
}

/// Nothing configured: one error listing each source tried, why, and the two ways to fix it.
#[test]
fn nothing_usable_lists_what_was_tried_and_both_fixes() {
    let home = tempfile::tempdir().unwrap();
    let env = env_with(&home.path().join("no-such-kubeconfig"), home.path(), &[]);
    let error = Config::infer_from(&args(&[]), &env).unwrap_err();
    assert!(
        matches!(error, ConfigError::NothingUsable { ref tried } if tried.len() == 4),
        "{error:?}"
    );
    let text = error.to_string();
    for expected in [
        "1. --server flag: not given",
        "2. KUBE_SERVER environment variable: not set",
        "3. in-cluster service account (/var/run/secrets/kubernetes.io/serviceaccount): KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set (not running in a pod)",
        "4. kubeconfig (KUBECONFIG=",
        "no current context",
        "kubectl proxy",
        "--server http://127.0.0.1:8001",
        "cargo run --bin sandbox",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    // Same with KUBECONFIG pointing at an empty file.
    let empty = home.path().join("empty");
    std::fs::write(&empty, "").unwrap();
    let text = Config::infer_from(&args(&[]), &env_with(&empty, home.path(), &[]))
        .unwrap_err()
        .to_string();
    assert!(text.contains("no current context"), "{text}");
}

/// kubeconfig with certificate-authority-data and a token: the client verifies the server with
/// that CA, sends the token, and uses the context's namespace.
#[tokio::test]
async fn kubeconfig_ca_data_and_token_reach_an_https_server() {
    let pki = TestPki::generate();
    let server = ok_server(&pki, false).await;
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(
        home.path(),
        &format!(
            "    server: {}\n    certificate-authority-data: {}\n",
            server.url,
            b64(&pki.ca_pem)
        ),
        "    token: kubeconfig-token\n",
        "team-b",
    );
    let config = Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap();
    assert_eq!(
        config.source,
        ConfigSource::Kubeconfig {
            context: "test-context".into()
        }
    );
    assert_eq!(config.namespace, "team-b");
    let client = Client::new(config).unwrap();
    let answer: Value = client.get("/api").await.unwrap();
    assert_eq!(answer["kind"], "APIVersions");
    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some("Bearer kubeconfig-token")
    );
}

/// kubeconfig with a CA *file* (relative path) and a tokenFile: both resolved next to the kubeconfig.
#[tokio::test]
async fn kubeconfig_file_references_resolve_relative_to_the_kubeconfig() {
    let pki = TestPki::generate();
    let server = ok_server(&pki, false).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("cluster-ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(home.path().join("user.token"), "file-token\n").unwrap();
    let kubeconfig = write_kubeconfig(
        home.path(),
        &format!(
            "    server: {}\n    certificate-authority: cluster-ca.crt\n",
            server.url
        ),
        "    tokenFile: user.token\n",
        "default",
    );
    let client = Client::new(
        Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap(),
    )
    .unwrap();
    let _: Value = client.get("/api").await.unwrap();
    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some("Bearer file-token")
    );
}

/// With two files in KUBECONFIG, a relative CA path is read next to the file that names it (here
/// the second), not next to the first: why the kubeconfig is read with `--flatten`, which has
/// kubectl inline each file, rather than `--raw`, which prints the path as written.
#[tokio::test]
async fn kubeconfig_file_references_resolve_next_to_the_file_that_names_them() {
    let pki = TestPki::generate();
    let server = ok_server(&pki, false).await;
    let home = tempfile::tempdir().unwrap();
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    std::fs::write(
        first.path().join("kubeconfig.yaml"),
        "apiVersion: v1\nkind: Config\npreferences: {}\n",
    )
    .unwrap();
    std::fs::write(second.path().join("cluster-ca.crt"), &pki.ca_pem).unwrap();
    let named = write_kubeconfig(
        second.path(),
        &format!(
            "    server: {}\n    certificate-authority: cluster-ca.crt\n",
            server.url
        ),
        "    token: t\n",
        "default",
    );
    let list = format!(
        "{}:{}",
        first.path().join("kubeconfig.yaml").display(),
        named.display()
    );
    let config =
        Config::infer_from(&args(&[]), &env_with(Path::new(&list), home.path(), &[])).unwrap();
    let _: Value = Client::new(config).unwrap().get("/api").await.unwrap();
    assert_eq!(server.requests().len(), 1);
}

/// kubeconfig with client-certificate-data and client-key-data: mutual TLS against a server that
/// requires a client certificate. Without it the handshake fails (a Connect error).
#[tokio::test]
async fn kubeconfig_client_certificate_authenticates_with_mutual_tls() {
    let pki = TestPki::generate();
    let server = ok_server(&pki, true).await;
    let home = tempfile::tempdir().unwrap();
    let cluster = format!(
        "    server: {}\n    certificate-authority-data: {}\n",
        server.url,
        b64(&pki.ca_pem)
    );
    let kubeconfig = write_kubeconfig(
        home.path(),
        &cluster,
        &format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&pki.client_cert_pem),
            b64(&pki.client_key_pem)
        ),
        "default",
    );
    let config = Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap();
    assert!(config.auth.client_identity.is_some());
    let client = Client::new(config).unwrap();
    let answer: Value = client.get("/api").await.unwrap();
    assert_eq!(answer["kind"], "APIVersions");
    assert_eq!(server.requests()[0].authorization, None);

    let kubeconfig = write_kubeconfig(home.path(), &cluster, "    token: not-enough\n", "default");
    let client = Client::new(
        Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap(),
    )
    .unwrap();
    let error = client.get::<Value>("/api").await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            Some(RequestError::Connect { .. } | RequestError::Transport(_))
        ),
        "{error:?}"
    );
}

/// A server whose certificate is not signed by the configured CA is refused; only
/// `insecure-skip-tls-verify: true` makes the client accept it.
#[tokio::test]
async fn server_certificates_are_verified_unless_the_kubeconfig_says_skip() {
    let pki = TestPki::generate();
    let other_ca = TestPki::generate();
    let server = ok_server(&pki, false).await;
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(
        home.path(),
        &format!(
            "    server: {}\n    certificate-authority-data: {}\n",
            server.url,
            b64(&other_ca.ca_pem)
        ),
        "    token: t\n",
        "default",
    );
    let client = Client::new(
        Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap(),
    )
    .unwrap();
    let error = client.get::<Value>("/api").await.unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Connect { .. })),
        "{error:?}"
    );
    assert!(
        error.to_string().to_lowercase().contains("certificate"),
        "{error}"
    );
    assert!(server.requests().is_empty());

    let kubeconfig = write_kubeconfig(
        home.path(),
        &format!(
            "    server: {}\n    insecure-skip-tls-verify: true\n",
            server.url
        ),
        "    token: t\n",
        "default",
    );
    let config = Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap();
    assert!(config.tls.insecure_skip_verify);
    let _: Value = Client::new(config).unwrap().get("/api").await.unwrap();
}

/// A context that authenticates with an exec plugin is reported as not usable, with the fix.
#[test]
fn kubeconfig_exec_plugins_are_reported_as_unsupported() {
    let home = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(
        home.path(),
        "    server: http://127.0.0.1:9\n",
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n",
        "default",
    );
    let text = Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[]))
        .unwrap_err()
        .to_string();
    assert!(text.contains("exec credential plugin"), "{text}");
    assert!(text.contains("kubectl proxy"), "{text}");
}

/// `--server https://...` plus `--certificate-authority` and `--token-file`: an HTTPS client that
/// verifies with that CA and sends the file's token.
#[tokio::test]
async fn https_flags_with_ca_and_token_file_work() {
    let pki = TestPki::generate();
    let server = ok_server(&pki, false).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("token"), "flag-token\n").unwrap();
    let ca = dir.path().join("ca.crt").display().to_string();
    let token = dir.path().join("token").display().to_string();
    let config = Config::infer_from(
        &args(&[
            "--server",
            &server.url,
            "--certificate-authority",
            &ca,
            &format!("--token-file={token}"),
        ]),
        &Environment::default(),
    )
    .unwrap();
    let _: Value = Client::new(config).unwrap().get("/api").await.unwrap();
    assert_eq!(
        server.requests()[0].authorization.as_deref(),
        Some("Bearer flag-token")
    );
}

/// Bad flags are clear errors: https without a CA, a CA file that does not exist, an unusable URL,
/// --token with --token-file.
#[test]
fn bad_flags_are_clear_errors() {
    let env = Environment::default();
    let text = Config::infer_from(&args(&["--server", "https://127.0.0.1:6443"]), &env)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("no certificate authority") && text.contains("--certificate-authority FILE"),
        "{text}"
    );

    let text = Config::infer_from(
        &args(&[
            "--server",
            "https://127.0.0.1:6443",
            "--certificate-authority",
            "/nonexistent/ca.crt",
        ]),
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(
        text.starts_with("cannot read certificate authority file /nonexistent/ca.crt: "),
        "{text}"
    );

    // The flag is refused by clap (exit 2); KUBE_SERVER, read later, by Config::infer.
    let text = try_args(&["--server", "127.0.0.1:8001"])
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("did you mean http://127.0.0.1:8001?"),
        "{text}"
    );
    let kube_server = Environment([("KUBE_SERVER".into(), "127.0.0.1:8001".into())].into());
    let text = Config::infer_from(&args(&[]), &kube_server)
        .unwrap_err()
        .to_string();
    assert!(
        text.contains("is not a usable URL")
            && text.contains("did you mean http://127.0.0.1:8001?"),
        "{text}"
    );

    let error = try_args(&["--token", "a", "--token-file", "b"]).unwrap_err();
    assert!(error.to_string().contains("cannot be used with"), "{error}");

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), "not a certificate").unwrap();
    let ca = dir.path().join("ca.crt").display().to_string();
    let text = Config::infer_from(
        &args(&[
            "--server",
            "https://127.0.0.1:6443",
            "--certificate-authority",
            &ca,
        ]),
        &env,
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("is not valid PEM"), "{text}");
}

/// Debug of ConfigArgs, Config, Auth and Client never shows a token or a private key.
#[test]
fn debug_output_redacts_tokens_and_keys() {
    let pki = TestPki::generate();
    let parsed = args(&[
        "--server",
        "http://127.0.0.1:8001",
        "--token",
        "super-secret-token",
    ]);
    assert!(
        !format!("{parsed:?}").contains("super-secret-token"),
        "{parsed:?}"
    );
    let config = Config::infer_from(&parsed, &Environment::default()).unwrap();

    let home = tempfile::tempdir().unwrap();
    let kubeconfig = write_kubeconfig(
        home.path(),
        &format!("    server: https://127.0.0.1:6443\n    certificate-authority-data: {}\n", b64(&pki.ca_pem)),
        &format!(
            "    token: super-secret-token\n    client-certificate-data: {}\n    client-key-data: {}\n",
            b64(&pki.client_cert_pem),
            b64(&pki.client_key_pem)
        ),
        "default",
    );
    let with_key =
        Config::infer_from(&args(&[]), &env_with(&kubeconfig, home.path(), &[])).unwrap();
    assert!(with_key.auth.client_identity.is_some());

    let key_body: String = pki.client_key_pem.lines().nth(1).unwrap().to_string();
    for text in [
        format!("{config:?}"),
        format!("{:?}", config.auth),
        format!("{with_key:?}"),
        format!("{:?}", with_key.auth),
        format!("{:?}", Client::new(with_key.clone()).unwrap()),
        format!("{:?}", Client::new(config.clone()).unwrap()),
    ] {
        assert!(!text.contains("super-secret-token"), "token leaked: {text}");
        assert!(!text.contains(&key_body), "key leaked: {text}");
        assert!(text.contains("redacted"), "says it redacted: {text}");
    }
}
