//! The `sandbox` program: serves HTTPS with credentials it writes (plain HTTP only with
//! `--insecure-http`), prints its URL and the `export` lines to use, logs requests, stops
//! cleanly on SIGTERM, and refuses bad flags with exit code 2.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test program binary::`.

use std::process::Stdio;
use std::time::Duration;

use test_support::http_client::Http;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;

const BINARY: &str = env!("CARGO_BIN_EXE_sandbox");

/// It starts on a free port over HTTPS, prints the URL and the `export` lines to use, writes
/// a kubeconfig naming its CA and token (all 0600 in a 0700 directory of its own), answers
/// kubectl through that kubeconfig, and exits 0 on SIGTERM after logging the request.
#[tokio::test]
async fn prints_its_url_serves_and_stops_on_sigterm() {
    let mut child = Command::new(BINARY)
        .args(["--listen", "127.0.0.1:0", "--kubelet-delay-ms", "50"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("sandbox starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), stdout.next_line())
        .await
        .expect("prints within 10 s")
        .expect("read")
        .expect("a line");
    let url = first
        .strip_prefix("sandbox API server at ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let mut rest = String::new();
    for _ in 0..4 {
        rest.push_str(&stdout.next_line().await.expect("read").unwrap_or_default());
        rest.push('\n');
    }
    // Its own directory, named after its port: the kubeconfig, the CA and the token.
    let port = url.rsplit(':').next().expect("a port");
    let own_dir = std::env::temp_dir().join(format!("sandbox-{port}"));
    let kubeconfig = own_dir.join("kubeconfig");
    assert!(
        rest.contains(&format!("export KUBECONFIG={}", kubeconfig.display())),
        "{rest}"
    );
    assert!(rest.contains("\n  kubectl get pgc\n"), "{rest}");
    assert_private(&own_dir, 0o700);
    for file in ["kubeconfig", "ca.crt", "token"] {
        assert_private(&own_dir.join(file), 0o600);
    }
    // Its own kubectl discovery cache, named after its port and empty: it cannot be stale.
    let cache = std::env::temp_dir().join(format!("sandbox-kubectl-cache-{port}"));
    assert!(
        rest.contains(&format!("export KUBECACHEDIR={}", cache.display())),
        "{rest}"
    );
    assert_eq!(
        std::fs::read_dir(&cache)
            .expect("the cache dir exists")
            .count(),
        0
    );
    let cache = tempfile::tempdir().expect("cache dir");
    let namespaces = Command::new(test_support::kubectl_path())
        .args(["get", "namespaces", "-o", "name", "--cache-dir"])
        .arg(cache.path())
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .await
        .expect("kubectl runs");
    assert!(
        String::from_utf8_lossy(&namespaces.stdout).contains("namespace/default"),
        "{namespaces:?}"
    );

    let ca = std::fs::read(own_dir.join("ca.crt")).expect("ca.crt");
    let version = Http::with_tls(&url, &ca, None).get("/version").await;
    assert_eq!(version.json()["minor"], "32");

    let pid = child.id().expect("pid").to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stops within 10 s")
        .expect("exit status");
    assert!(status.success(), "{status:?}");
    assert!(
        !own_dir.exists(),
        "its credentials are removed when it stops"
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .await
        .expect("stderr");
    let stderr = strip_ansi(&stderr);
    assert!(
        stderr.contains("path=/version") && stderr.contains("status=200"),
        "{stderr}"
    );
    assert!(stderr.contains("SIGTERM"), "{stderr}");
}

/// Started as a user starts it, the sandbox refuses a client without its token (401), over
/// HTTPS and with plain HTTP alike; with the token from its directory, the same request is
/// answered.
#[tokio::test]
async fn an_anonymous_client_is_refused_by_default() {
    let (mut child, url) = test_support::spawn_sandbox_binary(
        Command::new(BINARY)
            .args(["--listen", "127.0.0.1:0", "--runtime", "simulated"])
            .stderr(Stdio::null()),
        Duration::from_secs(10),
    )
    .await;
    let port = url.rsplit(':').next().expect("a port");
    let own_dir = std::env::temp_dir().join(format!("sandbox-{port}"));
    let ca = std::fs::read(own_dir.join("ca.crt")).expect("ca.crt");
    let token = std::fs::read_to_string(own_dir.join("token")).expect("token");

    let anonymous = Http::with_tls(&url, &ca, None)
        .get("/api/v1/namespaces/kube-system/secrets")
        .await;
    assert_eq!(anonymous.status, 401, "{}", anonymous.text());
    let wrong = Http::with_tls(&url, &ca, Some("not-the-token".into()))
        .get("/api/v1/namespaces/kube-system/secrets")
        .await;
    assert_eq!(wrong.status, 401, "{}", wrong.text());
    // Plain HTTP gets no answer at all: the port speaks TLS only.
    let plain = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(url.replace("https://", "http://") + "/api/v1/secrets")
        .output()
        .await;
    if let Ok(plain) = plain {
        assert_ne!(String::from_utf8_lossy(&plain.stdout), "200", "{plain:?}");
    }
    let admin = Http::with_tls(&url, &ca, Some(token.trim().to_string()))
        .get("/api/v1/namespaces/kube-system/secrets")
        .await;
    assert_eq!(admin.status, 200, "{}", admin.text());
    let _ = child.kill().await;
    let _ = std::fs::remove_dir_all(&own_dir);
}

/// With `--insecure-http` it serves plain HTTP, says in its banner what that means, and answers
/// anyone (the tests' and `kubectl proxy`'s door).
#[tokio::test]
async fn insecure_http_is_plain_http_and_says_so() {
    let (mut child, banner) = test_support::spawn_sandbox_binary_banner(
        Command::new(BINARY)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--runtime",
                "simulated",
                "--insecure-http",
            ])
            .stderr(Stdio::null()),
        "Ctrl-C stops it.",
    )
    .await;
    let url = banner
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("sandbox API server at "))
        .unwrap_or_else(|| panic!("no URL in {banner}"))
        .to_string();
    assert!(url.starts_with("http://127.0.0.1:"), "{banner}");
    assert!(
        banner.contains("anyone who can reach this port is cluster-admin"),
        "{banner}"
    );
    let secrets = Http::new(&url)
        .get("/api/v1/namespaces/kube-system/secrets")
        .await;
    assert_eq!(secrets.status, 200, "{}", secrets.text());
    let _ = child.kill().await;
    let port = url.rsplit(':').next().expect("a port");
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("sandbox-{port}")));
}

/// `--insecure-http` with `--tls-dir` is a usage error: which one was meant?
#[tokio::test]
async fn insecure_http_and_tls_dir_conflict() {
    let output = Command::new(BINARY)
        .args(["--insecure-http", "--tls-dir", "/tmp/nowhere"])
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty());
}

/// A file or directory's permission bits, compared with what it should be.
fn assert_private(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    let actual = std::fs::metadata(path)
        .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(actual, mode, "{}: {actual:o}", path.display());
}

/// `--help` exits 0 and describes every flag.
#[tokio::test]
async fn help_names_every_flag() {
    let output = Command::new(BINARY)
        .arg("--help")
        .output()
        .await
        .expect("runs");
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen <ADDR:PORT>",
        "--tls-dir <DIR>",
        "--insecure-http",
        "--established-delay-ms <MS>",
        "--kubelet-delay-ms <MS>",
        "--pod-termination-delay-ms <MS>",
        "--help",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    assert!(
        help.contains("Anyone who can reach the port is cluster-admin"),
        "{help}"
    );
}

/// A bad flag or value gets a message naming the flag and exit code 2 (a usage error, never a
/// panic), and the server does not start.
#[tokio::test]
async fn bad_flags_exit_2_naming_the_flag() {
    for (args, expected) in [
        (vec!["--listen", "nonsense"], "--listen"),
        (vec!["--kubelet-delay-ms", "abc"], "--kubelet-delay-ms"),
        (vec!["--kubelet-delay-ms", "-1"], "--kubelet-delay-ms"),
        (vec!["--kubelet-delay-ms", "1e30"], "--kubelet-delay-ms"),
        (
            vec!["--established-delay-ms", "1e-12"],
            "--established-delay-ms",
        ),
        (
            vec!["--pod-termination-delay-ms=-1"],
            "--pod-termination-delay-ms",
        ),
        (vec!["--frobnicate"], "--frobnicate"),
        (vec!["--tls-dir"], "--tls-dir"),
    ] {
        let output = Command::new(BINARY)
            .args(&args)
            .output()
            .await
            .expect("runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(expected) && stderr.contains("--help"),
            "{args:?}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{args:?} started anyway");
    }
}

/// `Sandbox::shutdown` ends open watches and stops accepting connections.
#[tokio::test]
async fn shutdown_ends_watches_and_closes_the_port() {
    // An address of its own: the other tests of this binary bind 127.0.0.1:0 meanwhile, and
    // one of them may be handed the port this sandbox frees (pods' addresses are 127.B.x.y
    // with B ≥ 1, never 127.0.0.x).
    let sandbox = test_support::start_sandbox_with(sandbox::SandboxOptions {
        listen: std::net::SocketAddr::from(([127, 0, 0, 77], 0)),
        ..sandbox::SandboxOptions::default()
    })
    .await;
    let http = Http::new(&sandbox.url());
    let mut watch = http
        .stream("/api/v1/namespaces/default/pods?watch=true")
        .await;
    let addr = sandbox.addr();
    tokio::time::timeout(Duration::from_secs(10), sandbox.shutdown())
        .await
        .expect("shutdown finishes");
    assert_eq!(watch.next_line(Duration::from_secs(5)).await, None);
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
}

/// The log subscriber colours its output; compare the plain text.
fn strip_ansi(text: &str) -> String {
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for inner in chars.by_ref() {
                if inner == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// A kubectl cache left by an earlier sandbox on the same port is emptied at start, so kubectl
/// never believes in resource types the new server does not serve.
#[tokio::test]
async fn the_kubectl_cache_of_an_earlier_server_on_the_port_is_emptied() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let cache = std::env::temp_dir().join(format!("sandbox-kubectl-cache-{port}"));
    let stale = cache.join("discovery/127.0.0.1_PORT/servergroups.json");
    std::fs::create_dir_all(stale.parent().expect("a parent")).expect("mkdir");
    std::fs::write(&stale, "{}").expect("a stale cache file");
    let (mut child, banner) = test_support::spawn_sandbox_binary_banner(
        Command::new(BINARY)
            .args([
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--runtime",
                "simulated",
            ])
            .stderr(Stdio::null()),
        "KUBECACHEDIR",
    )
    .await;
    assert!(banner.contains(&cache.display().to_string()), "{banner}");
    assert!(!stale.exists(), "the stale cache file is gone");
    assert!(cache.is_dir());
    let _ = child.kill().await;
}
