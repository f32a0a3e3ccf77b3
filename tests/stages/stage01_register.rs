//! Stage 01 end to end: the real `stage01` binary registers the CRD with the sandbox over HTTPS,
//! authenticating with a token file exactly as in a pod (the in-cluster configuration), waits for
//! Established, and prints what discovery serves; a second run finds it already up to date, and a
//! run against an older CRD updates it. Real kubectl then sees what stage 01 registered. Failures
//! exit non-zero with the Status and a hint.

use std::time::Duration;

use postgres_operator::api::CRD_NAME;
use sandbox::{InjectedFault, Sandbox, SandboxOptions};
use test_support::{start_sandbox_with, Kubectl};

/// An HTTPS sandbox whose service-account style credentials are written to a temp dir, with a
/// CRD Established delay (`Faults::set_established_delay` changes it, for a waiting CRD too).
async fn tls_sandbox(established_delay: Duration) -> (Sandbox, tempfile::TempDir) {
    test_support::start_tls_sandbox(SandboxOptions {
        established_delay,
        ..SandboxOptions::default()
    })
    .await
}

/// The stage01 binary, configured only through the in-cluster environment: service host/port
/// pointing at the sandbox, and the service-account directory pointing at its credentials.
fn stage01_in_cluster(sandbox: &Sandbox, credentials: &std::path::Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_stage01"));
    command
        .env_remove("KUBE_SERVER")
        .env("KUBECONFIG", "/dev/null")
        .env("KUBERNETES_SERVICE_HOST", sandbox.addr().ip().to_string())
        .env("KUBERNETES_SERVICE_PORT", sandbox.addr().port().to_string())
        .env("POSTGRES_OPERATOR_SERVICEACCOUNT_DIR", credentials)
        .env("RUST_LOG", "info")
        .kill_on_drop(true);
    command
}

/// How many times the sandbox was asked for the CRD (GET), by anyone.
fn crd_polls(sandbox: &Sandbox) -> usize {
    sandbox
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET" && r.resource == "customresourcedefinitions" && r.name == CRD_NAME
        })
        .count()
}

/// What one run of stage01 printed.
struct Ran {
    stdout: String,
    stderr: String,
}

/// Run `command` to its end (60 s at most), requiring exit code `code`.
async fn run(mut command: tokio::process::Command, code: i32) -> Ran {
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("stage01 finishes within 60 s")
        .expect("stage01 runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    Ran { stdout, stderr }
}

/// The stage01 binary with these flags, and no kubeconfig.
fn stage01(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_stage01"));
    command
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .kill_on_drop(true);
    command
}

/// stage01 against a plain-HTTP sandbox through `--server`, required to succeed: its stdout.
async fn run_plain(sandbox: &Sandbox) -> String {
    let server = sandbox.url();
    let flags = ["--server", &server, "--established-timeout", "10"];
    run(stage01(&flags), 0).await.stdout
}

/// Assert that `text` (what stage01 wrote) contains each of `parts`.
fn assert_says(text: &str, parts: &[&str]) {
    for part in parts {
        assert!(text.contains(part), "no {part:?} in:\n{text}");
    }
}

/// First run creates the CRD and waits for Established; the second says "already up to date".
/// Both exit 0 and print what discovery serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage01_creates_then_finds_the_crd_up_to_date() {
    // Not Established until stage01 has polled the CRD twice, then let go: a fixed delay would
    // race with how soon a busy machine runs those polls.
    let (sandbox, credentials) = tls_sandbox(Duration::from_secs(3600)).await;
    let first = tokio::spawn(run(stage01_in_cluster(&sandbox, credentials.path()), 0));
    test_support::eventually(
        Duration::from_secs(30),
        "stage01 polling the CRD",
        || async { (crd_polls(&sandbox) >= 2).then_some(()) },
    )
    .await;
    sandbox.faults().set_established_delay(Duration::ZERO);
    let Ran { stdout, stderr } = first.await.expect("stage01's first run");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0],
        "CustomResourceDefinition postgresclusters.workshop.example.com created"
    );
    assert_eq!(lines[1], "waiting for Established ...");
    assert_eq!(lines[2], "CustomResourceDefinition is Established");
    let served = lines
        .iter()
        .find(|line| line.starts_with("served: postgresclusters (PostgresCluster) verbs: "))
        .unwrap_or_else(|| panic!("no served line in:\n{stdout}"));
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        assert!(
            served.split(' ').any(|word| word == verb),
            "{verb} missing: {served}"
        );
    }
    assert!(
        stderr.contains("in-cluster service account"),
        "config source logged: {stderr}"
    );

    // Two polls while it was not Established, and the one that found it so.
    let polls = crd_polls(&sandbox);
    assert!(
        polls >= 3,
        "expected the CRD to be polled while not Established, saw {polls} GETs"
    );

    let stdout = run(stage01_in_cluster(&sandbox, credentials.path()), 0)
        .await
        .stdout;
    assert_eq!(
        stdout.lines().next(),
        Some("CustomResourceDefinition postgresclusters.workshop.example.com already up to date")
    );
    assert!(
        stdout.contains("CustomResourceDefinition is Established"),
        "{stdout}"
    );
}

/// Real kubectl (HTTPS, CA and token as flags, fresh cache dir, no kubeconfig) sees the CRD that
/// stage01 registered, `api-resources` lists the new resource with its short name, and
/// `kubectl explain` describes the kind and its fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_what_stage01_registered() {
    let (sandbox, credentials) = tls_sandbox(Duration::ZERO).await;
    run(stage01_in_cluster(&sandbox, credentials.path()), 0).await;

    let token = sandbox.token().expect("TLS mode has a token");
    let kubectl =
        Kubectl::new(&sandbox.url()).with_ca_and_token(&credentials.path().join("ca.crt"), &token);

    let crd = kubectl.ok(&["get", "crd", CRD_NAME, "-o", "json"]).await;
    let crd: serde_json::Value = serde_json::from_str(&crd).unwrap();
    assert_eq!(crd["spec"]["names"]["shortNames"][0], "pgc");
    let established = crd["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "{crd}");

    let resources = kubectl
        .ok(&["api-resources", "--api-group", "workshop.example.com"])
        .await;
    let line = resources
        .lines()
        .find(|line| line.starts_with("postgresclusters"))
        .unwrap_or_else(|| panic!("no postgresclusters in:\n{resources}"));
    let columns: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "postgresclusters",
            "pgc",
            "workshop.example.com/v1",
            "true",
            "PostgresCluster"
        ]
    );

    // The schema's descriptions are what `kubectl explain` shows, for the kind and each field.
    let explained = kubectl.ok(&["explain", "pgc"]).await;
    assert!(
        explained.contains("A PostgreSQL cluster: one primary and streaming replicas"),
        "{explained}"
    );
    assert!(!explained.contains("<empty>"), "{explained}");
    let size = kubectl.ok(&["explain", "pgc.spec.size"]).await;
    assert!(size.contains("Number of Postgres pods: 1 to 7"), "{size}");
    let phase = kubectl.ok(&["explain", "pgc.status.phase"]).await;
    assert!(phase.contains("Creating, Running, Recovering"), "{phase}");
}

/// `--server http://...` (the sandbox's plain mode, or `kubectl proxy`) works too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage01_works_through_a_plain_http_server_flag() {
    let sandbox = start_sandbox_with(SandboxOptions::default()).await;
    let stdout = run_plain(&sandbox).await;
    assert!(
        stdout
            .starts_with("CustomResourceDefinition postgresclusters.workshop.example.com created"),
        "{stdout}"
    );
}

/// A 403 on the CRD GET, the first thing stage 01 asks: exit 1, the Status message, and a hint
/// naming the verb, the resource and kube/rbac.yaml.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage01_reports_forbidden_with_an_rbac_hint() {
    let (sandbox, credentials) = tls_sandbox(Duration::ZERO).await;
    sandbox.faults().fail_next(
        1,
        "customresourcedefinitions",
        InjectedFault::Status {
            code: 403,
            reason: "Forbidden".into(),
            retry_after_seconds: None,
        },
    );
    let stderr = run(stage01_in_cluster(&sandbox, credentials.path()), 1)
        .await
        .stderr;
    assert_says(
        &stderr,
        &[
            "error: reading CustomResourceDefinition postgresclusters.workshop.example.com: GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com: Forbidden (403)",
            "hint: the service account may not get customresourcedefinitions.apiextensions.k8s.io",
            "kube/rbac.yaml",
        ],
    );
}

/// An older CRD of ours on the cluster (no status or scale subresource, no version rule): stage 01
/// says it updated it, and afterwards discovery serves the scale subresource and the server
/// refuses a version the operator cannot run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage01_updates_an_older_crd() {
    let sandbox = start_sandbox_with(SandboxOptions::default()).await;
    let client = test_support::plain_client(&sandbox.url());
    let mut older = postgres_operator::crd::postgres_cluster_crd();
    let version = &mut older["spec"]["versions"][0];
    version.as_object_mut().unwrap().remove("subresources");
    version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["version"]
        .as_object_mut()
        .unwrap()
        .remove("pattern");
    let _: serde_json::Value = client
        .create(postgres_operator::crd::CRDS_PATH, &older)
        .await
        .unwrap();

    let stdout = run_plain(&sandbox).await;
    assert_eq!(
        stdout.lines().next(),
        Some("CustomResourceDefinition postgresclusters.workshop.example.com updated: an older schema was replaced"),
        "{stdout}"
    );
    assert_says(&stdout, &["served: postgresclusters/scale (Scale)"]);
    let updates = sandbox
        .requests()
        .iter()
        .filter(|r| r.resource == "customresourcedefinitions" && r.verb == "update")
        .count();
    assert_eq!(updates, 1);

    let object = serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": "old-version"}, "spec": {"size": 3, "version": "9.6.3"},
    });
    Kubectl::new(&sandbox.url())
        .fails_saying_manifest("create", &object.to_string(), "spec.version")
        .await;
}

/// A token the server does not accept: exit 1 with the 401 and a hint about credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage01_reports_a_rejected_token() {
    let (sandbox, credentials) = tls_sandbox(Duration::ZERO).await;
    let ca = credentials.path().join("ca.crt").display().to_string();
    let server = sandbox.url();
    let flags = [
        "--server",
        &server,
        "--certificate-authority",
        &ca,
        "--token",
        "not-the-token",
    ];
    let stderr = run(stage01(&flags), 1).await.stderr;
    assert_says(
        &stderr,
        &[
            "(401)",
            "hint: the API server did not accept our credentials",
        ],
    );
}

/// No configuration at all: exit 1 with the one message listing what was tried and both fixes;
/// a flag without its value or an unknown flag: exit 2 (clap's usage errors).
#[tokio::test]
async fn stage01_config_errors_are_clear() {
    let home = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_stage01"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("KUBECONFIG", home.path().join("missing"));
    let stderr = run(command, 1).await.stderr;
    assert_says(
        &stderr,
        &[
            "no usable Kubernetes API server configuration",
            "cargo run --bin sandbox",
        ],
    );

    for (args, says) in [
        (
            &["--server"][..],
            "a value is required for '--server <URL>'",
        ),
        (
            &["--server", "http://127.0.0.1:1", "--frobnicate"][..],
            "unexpected argument '--frobnicate'",
        ),
    ] {
        assert_says(&run(stage01(args), 2).await.stderr, &[says]);
    }
}

/// `--server 127.0.0.1:8001`, the address `kubectl proxy` prints, is a usage error (exit 2) that
/// says which URL was meant.
#[tokio::test]
async fn stage01_suggests_the_scheme_a_server_address_lacks() {
    let stderr = run(stage01(&["--server", "127.0.0.1:8001"]), 2)
        .await
        .stderr;
    assert_says(&stderr, &["did you mean http://127.0.0.1:8001?"]);
}

/// Nothing listening on the `--server` port: exit 1, and the hint says what to start there.
#[tokio::test]
async fn stage01_hints_what_to_start_when_the_connection_is_refused() {
    // A port that was free a moment ago: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!("http://127.0.0.1:{port}");
    let stderr = run(stage01(&["--server", &server]), 1).await.stderr;
    assert_says(
        &stderr,
        &[
            &format!("hint: nothing is listening on 127.0.0.1:{port}"),
            &format!("cargo run --bin sandbox -- --listen 127.0.0.1:{port}"),
            &format!("kubectl proxy --port {port}"),
        ],
    );
}

/// SIGTERM (what the kubelet sends) while stage01 waits on the API server: a clean stop, exit 0,
/// as every binary does.
#[tokio::test]
async fn stage01_exits_0_on_sigterm() {
    // An API server that accepts connections and never answers: stage01 is then surely past
    // installing its signal handlers, and still busy.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let mut child = stage01(&["--server", &url])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let (_connection, _) = tokio::time::timeout(Duration::from_secs(30), silent.accept())
        .await
        .expect("stage01 connects within 30 s")
        .unwrap();
    let pid = child.id().expect("still running").to_string();
    let killed = tokio::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("stage01 stops within 10 s of SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}
