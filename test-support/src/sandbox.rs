//! Starting a sandbox for a test: on 127.0.0.1:0, in memory or with pods as real processes.

use std::time::Duration;

use sandbox::{ProcessRuntime, Runtime, Sandbox, SandboxOptions};
use tokio_util::sync::CancellationToken;

use crate::eventually;

/// A sandbox on 127.0.0.1:0 with default options.
pub async fn start_sandbox() -> Sandbox {
    start_sandbox_with(SandboxOptions::default()).await
}

/// A sandbox on 127.0.0.1:0 with default options, and the real kubectl bound to it.
pub async fn sandbox_and_kubectl() -> (Sandbox, crate::Kubectl) {
    let sandbox = start_sandbox().await;
    let kubectl = crate::Kubectl::new(&sandbox.url());
    (sandbox, kubectl)
}

/// A sandbox on 127.0.0.1:0 with these options (pods are simulated, in memory).
pub async fn start_sandbox_with(options: SandboxOptions) -> Sandbox {
    Sandbox::start(options, CancellationToken::new())
        .await
        .expect("sandbox starts")
}

/// A sandbox with these options that serves HTTPS and wants a bearer token: its CA, admin token
/// and the rest are written to a fresh credentials directory (laid out as a pod's
/// service-account files), returned with it, to be kept as long as the sandbox.
pub async fn start_tls_sandbox(options: SandboxOptions) -> (Sandbox, tempfile::TempDir) {
    let credentials = tempfile::tempdir().expect("a credentials directory");
    let options = SandboxOptions {
        credentials_dir: Some(credentials.path().to_path_buf()),
        ..options
    };
    (start_sandbox_with(options).await, credentials)
}

/// A sandbox whose pods run as real PostgreSQL processes ([`process_runtime`]).
pub async fn start_process_sandbox(options: SandboxOptions) -> Sandbox {
    start_process_sandbox_on(options, process_runtime()).await
}

/// A sandbox whose pods run under `runtime`: [`process_runtime`] with a field changed. Unless
/// `options` say where, the operator's image is the binaries cargo built beside the running
/// test ([`built_binaries`]): every postgres pod the operator makes copies its readiness agent
/// from it.
pub async fn start_process_sandbox_on(
    mut options: SandboxOptions,
    runtime: ProcessRuntime,
) -> Sandbox {
    if options.operator_binaries.is_none() {
        options.operator_binaries = built_binaries();
    }
    Sandbox::start_with_runtime(
        options,
        Runtime::Processes(runtime),
        CancellationToken::new(),
    )
    .await
    .expect("sandbox starts")
}

/// The directory cargo built this test's package's binaries into (`target/debug`: a test runs
/// from `target/debug/deps`), when it holds the readiness agent, `pg-ready`. Cargo builds a
/// package's binaries before its integration tests run.
pub fn built_binaries() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?;
    dir.join("pg-ready").is_file().then(|| dir.to_path_buf())
}

/// The sandbox's process runtime (pods as real processes) with the short back-offs tests want,
/// or a failure that says what is missing: a test that needs real Postgres never passes
/// without it.
pub fn process_runtime() -> ProcessRuntime {
    let mut runtime = ProcessRuntime::detect(None).unwrap_or_else(|error| {
        panic!(
            "this test runs pods as real processes, which this machine cannot: {error}. \
             Install PostgreSQL and bubblewrap (.ci/install-test-deps)"
        )
    });
    runtime.restart_backoff = Duration::from_millis(200);
    runtime.max_restart_backoff = Duration::from_secs(1);
    runtime.retry_period = Duration::from_millis(200);
    runtime.sync_period = Duration::from_millis(100);
    runtime
}

/// Wait until some client (kubectl, say) has a watch open on `resource`, per the request log, so
/// that a change made next arrives as a live event rather than in the initial list.
pub async fn until_watch_opened(sandbox: &Sandbox, resource: &str) {
    eventually(
        Duration::from_secs(15),
        &format!("a watch on {resource}"),
        || {
            let opened = sandbox
                .requests()
                .iter()
                .any(|r| r.verb == "watch" && r.resource == resource);
            async move { opened.then_some(()) }
        },
    )
    .await;
}

type StdoutLines = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;

/// Spawn `command` with its stdout piped to us, killed when the child is dropped.
fn spawn_reading_stdout(
    command: &mut tokio::process::Command,
) -> (tokio::process::Child, StdoutLines) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the sandbox binary starts");
    let stdout = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, stdout)
}

/// The `sandbox` binary's flags for pods as real processes, plain HTTP on a free port (add
/// `--data-dir`).
pub const PROCESS_SANDBOX_FLAGS: [&str; 5] = [
    "--listen",
    "127.0.0.1:0",
    "--insecure-http",
    "--runtime",
    "processes",
];

/// Spawn the `sandbox` binary as `command` describes (its stdout is taken here; stderr is the
/// caller's choice) and return it with the URL its first line names (`sandbox API server at
/// URL`), read within `within`. The rest of stdout is read away in the background, so the
/// program never blocks on a full pipe. Killed when the child is dropped.
pub async fn spawn_sandbox_binary(
    command: &mut tokio::process::Command,
    within: Duration,
) -> (tokio::process::Child, String) {
    let (child, mut stdout) = spawn_reading_stdout(command);
    let first = tokio::time::timeout(within, stdout.next_line())
        .await
        .unwrap_or_else(|_| panic!("the sandbox prints its URL within {within:?}"))
        .expect("read")
        .unwrap_or_default();
    let url = first
        .strip_prefix("sandbox API server at ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (child, url)
}

/// Spawn the `sandbox` binary as `command` describes and read its banner: every line up to
/// and including the first that contains `last` (or until stdout ends, or a line takes more
/// than 10 s). Killed when the child is dropped.
pub async fn spawn_sandbox_binary_banner(
    command: &mut tokio::process::Command,
    last: &str,
) -> (tokio::process::Child, String) {
    let (child, mut stdout) = spawn_reading_stdout(command);
    let mut banner = String::new();
    while let Ok(Ok(Some(line))) =
        tokio::time::timeout(Duration::from_secs(10), stdout.next_line()).await
    {
        banner.push_str(&line);
        banner.push('\n');
        if line.contains(last) {
            break;
        }
    }
    (child, banner)
}
