//! The sandbox API server as a program: an in-memory Kubernetes API server for kubectl and the
//! workshop's operator. Where PostgreSQL and bubblewrap are installed, pods run as real
//! processes (`postgres:<tag>` pods are real PostgreSQL servers); elsewhere, or with
//! `--runtime simulated`, pods only get a simulated status.
//!
//! WORKSHOP.md, "Set-up: the sandbox".
//!
//! ```text
//! cargo run --bin sandbox -- --listen 127.0.0.1:8001
//! kubectl --server http://127.0.0.1:8001 get pgc
//! cargo run --bin sandbox -- --listen 127.0.0.1:8443 --tls-dir /tmp/sandbox-creds
//! cargo run --bin sandbox -- --runtime processes --data-dir /tmp/sandbox-data   # kept across restarts
//! cargo build --bins && target/debug/sandbox   # postgres-operator:<tag> pods run target/debug/stageNN
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sandbox::{HostError, ProcessRuntime, Runtime, Sandbox, SandboxOptions, INSTALL_HINT};
use tokio_util::sync::CancellationToken;

/// sandbox: the workshop's set-up. An in-memory Kubernetes API server for kubectl and the
/// operator stages. Pods run as real processes where PostgreSQL and bubblewrap are installed
/// (`postgres:<tag>` pods run the installed PostgreSQL), else they only get a simulated status.
/// Stops on SIGTERM or Ctrl-C (stopping every pod). Without --data-dir it forgets everything;
/// with it, a restart on the same directory brings back every object and runs its pods again.
#[derive(Parser, Debug)]
#[command(
    name = "sandbox",
    after_help = "Examples:\n  \
        sandbox                                   # then: kubectl --server http://127.0.0.1:8001 get pgc\n  \
        sandbox --listen 127.0.0.1:8443 --tls-dir /tmp/sandbox-creds   # HTTPS with a token, like a cluster\n  \
        sandbox --established-delay-ms 2000 --kubelet-delay-ms 1000    # slower, like a real cluster\n  \
        sandbox --runtime simulated               # pods get a status only, nothing runs\n  \
        sandbox --data-dir ~/sandbox-data         # objects and pod data survive a restart\n\n\
        Exit status: 0 stopped by SIGTERM or Ctrl-C, 1 could not start (is the port taken? is the --data-dir store damaged?), 2 bad flags"
)]
struct Flags {
    /// Where to listen (port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8001")]
    listen: SocketAddr,
    /// Serve HTTPS with a generated CA, require a bearer token, and write DIR/ca.crt, DIR/token
    /// and DIR/namespace (a service-account directory).
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
    /// How long a new CRD waits before it is Established, in milliseconds.
    #[arg(long, value_name = "MS", default_value = "0", value_parser = milliseconds, allow_negative_numbers = true)]
    established_delay_ms: Duration,
    /// How long a new pod stays Pending before it is Running, in milliseconds.
    #[arg(long, value_name = "MS", default_value = "0", value_parser = milliseconds, allow_negative_numbers = true)]
    kubelet_delay_ms: Duration,
    /// How long a deleted pod stays Terminating, in milliseconds (0: gone at once with
    /// simulated pods; with real processes, up to 30 s while they stop after SIGTERM).
    #[arg(long, value_name = "MS", default_value = "0", value_parser = milliseconds, allow_negative_numbers = true)]
    pod_termination_delay_ms: Duration,
    /// What runs pods: `processes` (real processes, each in its own mount namespace and on its
    /// own 127.x.y.z address; needs PostgreSQL and bubblewrap) or `simulated` (a status only).
    /// Default: processes where PostgreSQL and bubblewrap are found, else simulated.
    #[arg(long, value_enum, value_name = "KIND")]
    runtime: Option<RuntimeChoice>,
    /// Keep every object (DIR/store.sqlite3, each write on disk before it is answered) and pod
    /// data (PGDATA, emptyDirs, logs) in DIR, kept after exit: started again on DIR, the
    /// sandbox comes back with its objects and runs their pods again. Default: objects in
    /// memory only, pod data in a temporary directory removed on exit.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where pods of the image `postgres-operator:<tag>` (the Dockerfile's) find the operator's
    /// stage binaries, stage01 ... stage05 (`cargo build --bins` puts them in target/debug).
    /// Default: this program's own directory, when stage05 is there too.
    #[arg(long, value_name = "DIR")]
    operator_binaries: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RuntimeChoice {
    Processes,
    Simulated,
}

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logging();
    let options = SandboxOptions {
        listen: flags.listen,
        credentials_dir: flags.tls_dir.clone(),
        established_delay: flags.established_delay_ms,
        kubelet_delay: flags.kubelet_delay_ms,
        pod_termination_delay: flags.pod_termination_delay_ms,
        log_requests: true,
        // What a learner sees in `kubectl describe pod`: the scheduler's and kubelet's Events.
        pod_events: true,
        operator_binaries: flags.operator_binaries.or_else(own_directory_with_stages),
        data_dir: flags.data_dir.clone(),
        ..SandboxOptions::default()
    };
    let (runtime, runtime_note) = match choose_runtime(flags.runtime, flags.data_dir.clone()) {
        Ok(choice) => choice,
        Err(message) => {
            eprintln!("sandbox: {message}");
            return ExitCode::FAILURE;
        }
    };
    let stop = CancellationToken::new();
    let sandbox = match Sandbox::start_with_runtime(options, runtime, stop.clone()).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            eprintln!("sandbox: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("sandbox API server at {}", sandbox.url());
    let cache = kubectl_cache_dir(sandbox.addr().port());
    println!("use it with (the export once per terminal):");
    match &cache {
        Ok(cache) => println!("  export KUBECACHEDIR={}", cache.display()),
        Err(error) => {
            println!("  (no kubectl cache directory: {error}; pass --cache-dir \"$(mktemp -d)\")")
        }
    }
    match &flags.tls_dir {
        None => println!("  kubectl --server {} get pgc", sandbox.url()),
        Some(dir) => println!(
            "  kubectl --server {} --certificate-authority {} --token \"$(cat {})\" get pgc",
            sandbox.url(),
            dir.join("ca.crt").display(),
            dir.join("token").display()
        ),
    }
    match write_kubeconfig(&sandbox.url(), sandbox.addr().port(), flags.tls_dir.as_deref()) {
        Ok(path) => println!(
            "or, for kubectl without --server (the README's `kubectl apply -k kube/`):\n  export KUBECONFIG={}",
            path.display()
        ),
        Err(error) => println!("  (no kubeconfig written: {error})"),
    }
    // The runtime in two lines, then the same last line in every mode.
    match sandbox.runtime_description() {
        Some(description) => {
            println!("{description}\n  ({runtime_note}; --runtime simulated for status-only pods)")
        }
        None => println!(
            "no containers run here: pods get a simulated status only.\n  ({runtime_note})"
        ),
    }
    println!("Ctrl-C stops it.");
    shutdown_signal().await;
    stop.cancel();
    sandbox.stopped().await;
    ExitCode::SUCCESS
}

/// The directory this program runs from, if the operator's stage binaries are there too: cargo
/// builds every binary of the workspace into one directory (target/debug, target/release).
fn own_directory_with_stages() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    dir.join("stage05").is_file().then(|| dir.to_path_buf())
}

/// `--runtime` as given, or the default: processes where the host has what they need. The
/// second value says why, for the banner.
fn choose_runtime(
    choice: Option<RuntimeChoice>,
    data_dir: Option<PathBuf>,
) -> Result<(Runtime, String), String> {
    match choice {
        Some(RuntimeChoice::Simulated) => Ok((
            Runtime::Simulated,
            "--runtime simulated; --runtime processes runs them for real".to_string(),
        )),
        Some(RuntimeChoice::Processes) => match ProcessRuntime::detect(data_dir) {
            Ok(runtime) => Ok((
                Runtime::Processes(runtime),
                "--runtime processes".to_string(),
            )),
            Err(error) => Err(format!("--runtime processes: {error}")),
        },
        None => match ProcessRuntime::detect(data_dir) {
            Ok(runtime) => Ok((
                Runtime::Processes(runtime),
                "the default here: PostgreSQL and bubblewrap are installed".to_string(),
            )),
            // A --data-dir pods cannot reach is the user's to fix, not a reason to fall back.
            Err(error @ HostError::DataDirUnreachable { .. }) => Err(error.to_string()),
            // Installing packages does not give a system more loopback addresses.
            Err(error @ HostError::NoLoopbackAliases { .. }) => Ok((
                Runtime::Simulated,
                format!("pods cannot run as processes here: {error}"),
            )),
            Err(error) => Ok((
                Runtime::Simulated,
                format!("to run pods as real processes, `{INSTALL_HINT}`: {error}"),
            )),
        },
    }
}

/// A delay flag's value: whole milliseconds. `-1`, `1e30` or `soon` are usage errors (exit 2,
/// naming the flag); `allow_negative_numbers` makes clap hand `-1` here instead of reading it as
/// an unknown flag.
fn milliseconds(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| "expected a whole number of milliseconds, such as 1500".to_string())
}

/// Log to stderr, filtered by `RUST_LOG` (default `info`).
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour only for a person at a terminal, not in a file or a pipe.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// SIGTERM (what Kubernetes and most supervisors send) or Ctrl-C.
async fn shutdown_signal() {
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        Ok(sigterm) => sigterm,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("received Ctrl-C, shutting down"),
        _ = sigterm.recv() => tracing::info!("received SIGTERM, shutting down"),
    }
}

/// kubectl caches discovery per host and port for hours, so a sandbox restarted on the same port
/// with other resource types would be misread from a stale cache. This sandbox's own cache
/// directory (`KUBECACHEDIR`) is emptied at every start, so it cannot go stale.
/// A kubeconfig whose current context is this sandbox, beside the cache directory, so that
/// commands written for any cluster (`kubectl apply -k kube/`) work unchanged. JSON is YAML, so
/// kubectl reads it. With `--tls-dir` it names the CA and the token file (kubectl re-reads a
/// `tokenFile`, so a rotated token is picked up).
fn write_kubeconfig(url: &str, port: u16, tls_dir: Option<&Path>) -> std::io::Result<PathBuf> {
    let mut cluster = serde_json::json!({"server": url});
    let mut user = serde_json::json!({});
    if let Some(dir) = tls_dir {
        cluster["certificate-authority"] = dir.join("ca.crt").display().to_string().into();
        user["tokenFile"] = dir.join("token").display().to_string().into();
    }
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sandbox", "cluster": cluster}],
        "users": [{"name": "sandbox-admin", "user": user}],
        "contexts": [{"name": "sandbox", "context": {"cluster": "sandbox", "user": "sandbox-admin"}}],
        "current-context": "sandbox"
    });
    let path = std::env::temp_dir().join(format!("sandbox-kubeconfig-{port}"));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&config).map_err(std::io::Error::other)?,
    )?;
    Ok(path)
}

fn kubectl_cache_dir(port: u16) -> std::io::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("sandbox-kubectl-cache-{port}"));
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
