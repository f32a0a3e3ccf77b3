//! State that survives a restart (`--data-dir`): the `sandbox` program, stopped by SIGTERM or
//! killed by SIGKILL and started again on the same directory, comes back with its namespaces,
//! ConfigMaps, CRDs and custom objects, with the same uids; resourceVersions keep rising, and a
//! watch from before the restart gets 410 Expired. A damaged store file stops the start. With
//! the process runtime, a postgres pod runs again after the restart, on its data: a row written
//! before is there after (that test needs PostgreSQL and bubblewrap, as `runtime_*.rs` do). Its
//! CA and admin token are kept there too, so its clients trust it and are known to it again.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test program restart::`.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use test_support::http_client::{cluster, sandbox_and_http, Http};
use test_support::process_runtime;
use test_support::processes_matching;
use test_support::runtime::{create, psql, wait_ready, TRUSTING_POSTGRES};
use test_support::{eventually, Kubectl};
use tokio::process::{Child, Command};

const BINARY: &str = env!("CARGO_BIN_EXE_sandbox");
const WAIT: Duration = Duration::from_secs(10);

/// `sandbox --listen 127.0.0.1:0 --data-dir DIR`, as a user starts it; its URL from the first
/// line it prints. stderr goes to DIR/../sandbox-N.log so a full pipe never blocks it.
async fn start(data_dir: &Path, run: u32, flags: &[&str]) -> (Child, String) {
    let log = std::fs::File::create(
        data_dir
            .parent()
            .expect("the data dir has a parent")
            .join(format!("sandbox-{run}.log")),
    )
    .expect("a log file");
    test_support::spawn_sandbox_binary(
        Command::new(BINARY)
            .args(["--listen", "127.0.0.1:0", "--insecure-http", "--data-dir"])
            .arg(data_dir)
            .args(flags)
            .env("RUST_LOG", "warn")
            .stderr(log),
        WAIT,
    )
    .await
}

async fn signal(child: &mut Child, name: &str) -> std::process::ExitStatus {
    let pid = child.id().expect("pid").to_string();
    let sent = Command::new("kill")
        .args([&format!("-{name}"), &pid])
        .status()
        .await
        .expect("kill runs");
    assert!(sent.success());
    tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("stops within 60 s")
        .expect("exit status")
}

fn rv(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {object}"))
}

const CONFIG_MAP: &str = "/api/v1/namespaces/persist/configmaps/settings";
const CLUSTER: &str = "/apis/workshop.example.com/v1/namespaces/persist/postgresclusters/db";
const CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com";

/// The namespace, ConfigMap, CRD and custom object as the first sandbox stored them.
async fn create_objects(http: &Http) -> Vec<(&'static str, Value)> {
    http.create_named("/api/v1/namespaces", "persist").await;
    http.create(
        "/api/v1/namespaces/persist/configmaps",
        &json!({"metadata": {"name": "settings"}, "data": {"colour": "blue"}}),
    )
    .await;
    http.install_crd().await;
    http.create(
        "/apis/workshop.example.com/v1/namespaces/persist/postgresclusters",
        &cluster("db", 3),
    )
    .await;
    let mut objects = Vec::new();
    for path in ["/api/v1/namespaces/persist", CONFIG_MAP, CRD, CLUSTER] {
        let answer = http.get(path).await;
        assert_eq!(answer.status, 200, "{path}: {}", answer.text());
        objects.push((path, answer.json()));
    }
    objects
}

/// Every object is back as it was: same uid, same resourceVersion, same content.
async fn assert_objects_back(http: &Http, objects: &[(&'static str, Value)]) {
    for (path, before) in objects {
        let answer = http.get(path).await;
        assert_eq!(
            answer.status,
            200,
            "{path} after the restart: {}",
            answer.text()
        );
        let after = answer.json();
        assert_eq!(
            after["metadata"]["uid"], before["metadata"]["uid"],
            "{path}"
        );
        assert_eq!(
            after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "{path}"
        );
        assert_eq!(after["spec"], before["spec"], "{path}");
        assert_eq!(after["data"], before["data"], "{path}");
    }
}

/// A watch from `old_rv` gets one ERROR event with a 410 Expired Status.
async fn assert_watch_expired(http: &Http, old_rv: u64) {
    let mut watch = http
        .stream(&format!(
            "/api/v1/namespaces/persist/configmaps?watch=true&resourceVersion={old_rv}"
        ))
        .await;
    assert_eq!(watch.status, 200);
    let error = watch.next_event(WAIT).await.expect("an ERROR event");
    assert_eq!(error["type"], "ERROR", "{error}");
    assert_eq!(error["object"]["code"], 410, "{error}");
    assert_eq!(error["object"]["reason"], "Expired", "{error}");
}

/// Objects survive a SIGTERM and a SIGKILL, with their uids and resourceVersions; new writes get
/// higher resourceVersions than any before the restart; a watch from an older RV gets 410; the
/// restarted sandbox still serves the custom kind to kubectl.
#[tokio::test]
async fn objects_survive_sigterm_and_sigkill() {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let data_dir = temporary.path().join("data");

    let (mut first, url) = start(&data_dir, 1, &[]).await;
    let http = Http::new(&url);
    let objects = create_objects(&http).await;
    let highest_before = rv(&http
        .get("/api/v1/namespaces/persist/configmaps")
        .await
        .json());
    let status = signal(&mut first, "TERM").await;
    assert!(status.success(), "{status:?}");

    let (mut second, url) = start(&data_dir, 2, &[]).await;
    let http = Http::new(&url);
    assert_objects_back(&http, &objects).await;
    let listed = rv(&http
        .get("/api/v1/namespaces/persist/configmaps")
        .await
        .json());
    assert!(listed >= highest_before, "{listed} < {highest_before}");
    assert_watch_expired(&http, rv(&objects[1].1)).await;
    // Written, acknowledged, then killed: a SIGKILL gives the sandbox no chance to save anything.
    let acknowledged = http
        .create(
            "/api/v1/namespaces/persist/configmaps",
            &json!({"metadata": {"name": "acknowledged"}, "data": {"k": "v"}}),
        )
        .await;
    let acknowledged = acknowledged.json();
    assert!(
        rv(&acknowledged) > highest_before,
        "resourceVersions rise after a restart"
    );
    let status = signal(&mut second, "KILL").await;
    assert!(!status.success());

    let (mut third, url) = start(&data_dir, 3, &[]).await;
    let http = Http::new(&url);
    assert_objects_back(&http, &objects).await;
    assert_objects_back(
        &http,
        &[(
            "/api/v1/namespaces/persist/configmaps/acknowledged",
            acknowledged.clone(),
        )],
    )
    .await;
    let later = http
        .create_named("/api/v1/namespaces/persist/configmaps", "later")
        .await;
    assert!(rv(&later.json()) > rv(&acknowledged));
    // (A watch from the last RV before the restart, `acknowledged`'s, misses nothing and is
    // allowed; one from any earlier RV may have missed events and gets 410.)
    assert_watch_expired(&http, rv(&acknowledged) - 1).await;
    let kubectl = Kubectl::new(&url);
    let clusters = kubectl
        .ok(&["get", "postgresclusters", "-n", "persist", "-o", "name"])
        .await;
    assert_eq!(clusters.trim(), "postgrescluster.workshop.example.com/db");
    let status = signal(&mut third, "TERM").await;
    assert!(status.success(), "{status:?}");
}

/// Killed and started again on its data directory, the sandbox is the same server to its
/// clients: the CA the first start made still signs what it serves, and its admin token is
/// still the token, so a client that kept the first start's `ca.crt` and token goes on.
#[tokio::test]
async fn a_restarted_sandbox_keeps_its_ca_and_admin_token() {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let data_dir = temporary.path().join("data");
    let tls_dir = temporary.path().join("tls");
    let tls = tls_dir.to_str().expect("a UTF-8 path");
    let start_with_tls = |run| {
        let log = std::fs::File::create(temporary.path().join(format!("sandbox-{run}.log")));
        let mut command = Command::new(BINARY);
        command
            .args(["--listen", "127.0.0.1:0", "--tls-dir", tls, "--data-dir"])
            .arg(&data_dir)
            .env("RUST_LOG", "warn")
            .stderr(log.expect("a log file"));
        command
    };
    let (mut first, url) = test_support::spawn_sandbox_binary(&mut start_with_tls(1), WAIT).await;
    let kept_ca = temporary.path().join("first-ca.crt");
    std::fs::copy(tls_dir.join("ca.crt"), &kept_ca).expect("ca.crt copied");
    let token = std::fs::read_to_string(tls_dir.join("token")).expect("the token");
    let kubectl = Kubectl::new(&url).with_ca_and_token(&kept_ca, token.trim());
    kubectl.ok(&["get", "namespaces", "-o", "name"]).await;
    let status = signal(&mut first, "KILL").await;
    assert!(!status.success());

    let (mut second, url) = test_support::spawn_sandbox_binary(&mut start_with_tls(2), WAIT).await;
    let kubectl = Kubectl::new(&url).with_ca_and_token(&kept_ca, token.trim());
    let namespaces = kubectl.ok(&["get", "namespaces", "-o", "name"]).await;
    assert!(namespaces.contains("namespace/default"), "{namespaces}");
    let status = signal(&mut second, "TERM").await;
    assert!(status.success(), "{status:?}");
}

/// Without --data-dir nothing is written and a second start is empty.
#[tokio::test]
async fn without_a_data_dir_nothing_is_written() {
    let (sandbox, http) = sandbox_and_http().await;
    http.create_named("/api/v1/namespaces/default/configmaps", "forgotten")
        .await;
    sandbox.shutdown().await;
    let (_sandbox, http) = sandbox_and_http().await;
    assert_eq!(
        http.get("/api/v1/namespaces/default/configmaps/forgotten")
            .await
            .status,
        404
    );
}

/// A damaged store file: the program exits 1 with a message naming the file and saying what
/// to do, and leaves the file as it was (nothing is silently started empty).
#[tokio::test]
async fn a_damaged_store_stops_the_start_naming_the_file() {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let data_dir = temporary.path().join("data");
    std::fs::create_dir_all(&data_dir).expect("data dir");
    let file = data_dir.join("store.sqlite3");
    let garbage = b"this is not a database, it is some bytes a disk error left here".repeat(100);
    std::fs::write(&file, &garbage).expect("write garbage");
    let output = tokio::time::timeout(
        WAIT,
        Command::new(BINARY)
            .args(["--listen", "127.0.0.1:0", "--insecure-http", "--data-dir"])
            .arg(&data_dir)
            .output(),
    )
    .await
    .expect("exits within 10 s")
    .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(stderr.contains("move it aside"), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("sandbox API server at"),
        "it must not serve"
    );
    assert_eq!(
        std::fs::read(&file).expect("the file is still there"),
        garbage
    );
}

/// A `postgres:16` pod that was Running runs again after the sandbox restarts on its data
/// directory (after a SIGTERM, then after a SIGKILL), on its old PGDATA: the rows written
/// before each restart are read after it.
#[tokio::test]
async fn a_postgres_pod_runs_again_on_its_data_after_a_restart() {
    let runtime = process_runtime();
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let data_dir = temporary.path().join("data");
    let flags = ["--runtime", "processes"];

    let (mut first, url) = start(&data_dir, 1, &flags).await;
    let kubectl = Kubectl::new(&url);
    create(&kubectl, TRUSTING_POSTGRES).await;
    let before = wait_ready(&kubectl, "pg").await;
    let ip = test_support::pod_ip(&before);
    let written = psql(
        &runtime,
        &ip,
        "CREATE TABLE kept (note text); INSERT INTO kept VALUES ('before the restart'); SELECT count(*) FROM kept",
    )
    .await
    .expect("the row is written");
    assert_eq!(written.lines().last(), Some("1"));
    let status = signal(&mut first, "TERM").await;
    assert!(status.success(), "{status:?}");
    assert!(
        processes_matching(&format!("listen_addresses={ip}")).is_empty(),
        "the first sandbox stopped its postmaster"
    );

    let (mut second, url) = start(&data_dir, 2, &flags).await;
    let kubectl = Kubectl::new(&url);
    let after = wait_ready(&kubectl, "pg").await;
    assert_eq!(
        after["metadata"]["uid"], before["metadata"]["uid"],
        "the same pod"
    );
    let ip = test_support::pod_ip(&after);
    let read = eventually(Duration::from_secs(30), "the row read back", || async {
        psql(&runtime, &ip, "SELECT note FROM kept").await.ok()
    })
    .await;
    assert_eq!(read, "before the restart");
    // SIGKILL: the sandbox cannot stop its pods or write anything; the postmaster dies with it
    // and leaves its postmaster.pid, which the next postgres sees is stale.
    psql(&runtime, &ip, "INSERT INTO kept VALUES ('before the kill')")
        .await
        .expect("the second row is written");
    let status = signal(&mut second, "KILL").await;
    assert!(!status.success());

    let (mut third, url) = start(&data_dir, 3, &flags).await;
    let kubectl = Kubectl::new(&url);
    let after = wait_ready(&kubectl, "pg").await;
    let ip = test_support::pod_ip(&after);
    let read = eventually(Duration::from_secs(30), "both rows read back", || async {
        psql(
            &runtime,
            &ip,
            "SELECT string_agg(note, ', ' ORDER BY note) FROM kept",
        )
        .await
        .ok()
    })
    .await;
    assert_eq!(read, "before the kill, before the restart");
    let status = signal(&mut third, "TERM").await;
    assert!(status.success(), "{status:?}");
}

/// `Sandbox::start` in one process, stopped and started again on the same directory (as a
/// test or an embedding program does): the second start gets the objects, not "in use".
#[tokio::test]
async fn a_library_sandbox_restarts_on_its_data_dir_in_process() {
    let temporary = tempfile::tempdir().expect("a temporary directory");
    let options = sandbox::SandboxOptions {
        data_dir: Some(temporary.path().join("data")),
        ..sandbox::SandboxOptions::default()
    };
    let first = test_support::start_sandbox_with(options.clone()).await;
    let created = Http::new(&first.url())
        .create_named("/api/v1/namespaces/default/configmaps", "kept")
        .await;
    first.shutdown().await;
    let second = test_support::start_sandbox_with(options).await;
    let kept = Http::new(&second.url())
        .get("/api/v1/namespaces/default/configmaps/kept")
        .await;
    assert_eq!(kept.status, 200, "{}", kept.text());
    assert_eq!(
        kept.json()["metadata"]["uid"],
        created.json()["metadata"]["uid"]
    );
}
