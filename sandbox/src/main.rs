//! The sandbox API server as a program: an in-memory Kubernetes API server for kubectl and the
//! workshop's operator. Where PostgreSQL and bubblewrap are installed, pods run as real
//! processes (`postgres:<tag>` pods are real PostgreSQL servers); elsewhere, or with
//! `--runtime simulated`, pods only get a simulated status.
//!
//! WORKSHOP.md, "Set-up: the sandbox".
//!
//! It serves HTTPS with a CA it generates and wants a bearer token, like kind or k3s: both are
//! written to a directory of its own (`$TMPDIR/sandbox-PORT/`, 0700, or `--tls-dir DIR`), with a
//! kubeconfig that names them, so kubectl and the operator's binaries need only `KUBECONFIG`.
//!
//! ```text
//! cargo run --bin sandbox                       # prints: export KUBECONFIG=/tmp/sandbox-8001/kubeconfig
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig && kubectl get pgc   # in every other terminal
//! cargo run --bin sandbox -- --tls-dir /tmp/sandbox-creds   # the CA and token in a directory you name
//! cargo run --bin sandbox -- --insecure-http    # plain HTTP, no credentials: anyone on the port is admin
//! cargo run --bin sandbox -- --runtime processes --data-dir /tmp/sandbox-data   # kept across restarts
//! cargo build --bins && target/debug/sandbox   # postgres-operator:<tag> pods run target/debug/stageNN
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sandbox::{
    HostError, ProcessRuntime, Runtime, Sandbox, SandboxError, SandboxOptions, INSTALL_HINT,
};
use tokio_util::sync::CancellationToken;

/// sandbox: the workshop's set-up. An in-memory Kubernetes API server for kubectl and the
/// operator stages. Pods run as real processes where PostgreSQL and bubblewrap are installed
/// (`postgres:<tag>` pods run the installed PostgreSQL), else they only get a simulated status.
/// Stops on SIGTERM or Ctrl-C (stopping every pod). Without --data-dir it forgets everything;
/// with it, a restart on the same directory brings back every object and runs its pods again.
/// It serves HTTPS and wants a bearer token: its CA, token and a kubeconfig naming them are
/// written to $TMPDIR/sandbox-PORT/ (readable by you only); the banner prints the
/// `export KUBECONFIG=...` line that makes kubectl and the operator's binaries use them.
#[derive(Parser, Debug)]
#[command(
    name = "sandbox",
    after_help = "Examples:\n  \
        sandbox                                   # then: export KUBECONFIG=/tmp/sandbox-8001/kubeconfig; kubectl get pgc\n  \
        sandbox --tls-dir /tmp/sandbox-creds      # the CA and token in DIR, laid out as a pod's service account\n  \
        sandbox --insecure-http                   # plain HTTP, no authentication (anyone on the port is admin)\n  \
        sandbox --established-delay-ms 2000 --kubelet-delay-ms 1000    # slower, like a real cluster\n  \
        sandbox --runtime simulated               # pods get a status only, nothing runs\n  \
        sandbox --data-dir ~/sandbox-data         # objects and pod data survive a restart\n\n\
        Exit status: 0 stopped by SIGTERM or Ctrl-C, 1 could not start (is the port taken? is the --data-dir store damaged?), 2 bad flags"
)]
struct Flags {
    /// Where to listen (port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8001")]
    listen: SocketAddr,
    /// Write the generated CA and the bearer token to DIR/ca.crt and DIR/token (with
    /// DIR/namespace: a pod's service-account directory) instead of $TMPDIR/sandbox-PORT/.
    #[arg(long, value_name = "DIR")]
    tls_dir: Option<PathBuf>,
    /// Serve plain HTTP with no authentication. Anyone who can reach the port is cluster-admin:
    /// they can read every Secret and run programs in pods as your user. For tests, and for a
    /// port only you can reach; the default is HTTPS with a token.
    #[arg(long, conflicts_with = "tls_dir")]
    insecure_http: bool,
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
    /// Default: processes where PostgreSQL and bubblewrap are found, else simulated. A pod's
    /// root is its image's: this machine's /usr read-only, an /etc of its own, its volumes, its
    /// own /tmp, /run, /dev and /proc, and no other file of the machine. It still shares the
    /// machine's network namespace (it listens on its own loopback address, as there is one
    /// network for all pods and no bridge to give each a device) and its kernel.
    #[arg(long, value_enum, value_name = "KIND")]
    runtime: Option<RuntimeChoice>,
    /// Keep every object (DIR/store.sqlite3, each write on disk before it is answered) and pod
    /// data (PGDATA, emptyDirs, logs) in DIR, kept after exit: started again on DIR, the
    /// sandbox comes back with its objects and runs their pods again. Default: objects in
    /// memory only, pod data in a temporary directory removed on exit.
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Where pods of the image `postgres-operator:<tag>` (the Dockerfile's) find the operator's
    /// binaries, stage01 ... stage06 and pg-ready, the readiness agent every postgres pod copies
    /// (`cargo build --bins` puts them in target/debug). Default: this program's own directory,
    /// when stage06 or pg-ready is there too.
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
    // Bound first: the sandbox's own directory is named after the port (port 0 picks one).
    let listener = match bind(flags.listen).await {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!("sandbox: {error}");
            return ExitCode::FAILURE;
        }
    };
    let (listener, port) = listener;
    let own_dir = std::env::temp_dir().join(format!("sandbox-{port}"));
    if let Err(error) = create_private_dir(&own_dir) {
        eprintln!("sandbox: cannot use {}: {error}", own_dir.display());
        return ExitCode::FAILURE;
    }
    let status = serve(flags, listener, port, &own_dir).await;
    // Its credentials die with it: the next start on this port writes new ones here.
    if let Err(error) = std::fs::remove_dir_all(&own_dir) {
        tracing::warn!(%error, dir = %own_dir.display(), "could not remove the sandbox's directory");
    }
    status
}

/// Start the sandbox on `listener`, print the banner, and serve until SIGTERM or Ctrl-C.
async fn serve(
    flags: Flags,
    listener: tokio::net::TcpListener,
    port: u16,
    own_dir: &Path,
) -> ExitCode {
    let credentials_dir = match (&flags.tls_dir, flags.insecure_http) {
        (_, true) => None,
        // Absolute, as the kubeconfig must name it: kubectl reads a relative path as relative
        // to the kubeconfig's own directory.
        (Some(dir), false) => Some(std::path::absolute(dir).unwrap_or_else(|_| dir.clone())),
        (None, false) => Some(own_dir.to_path_buf()),
    };
    let options = SandboxOptions {
        listen: flags.listen,
        credentials_dir: credentials_dir.clone(),
        established_delay: flags.established_delay_ms,
        kubelet_delay: flags.kubelet_delay_ms,
        pod_termination_delay: flags.pod_termination_delay_ms,
        log_requests: true,
        // What a learner sees in `kubectl describe pod`: the scheduler's and kubelet's Events.
        pod_events: true,
        operator_binaries: flags
            .operator_binaries
            .or_else(own_directory_with_operator_binaries),
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
    let sandbox = match Sandbox::start_on(listener, options, runtime, stop.clone()).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            eprintln!("sandbox: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("sandbox API server at {}", sandbox.url());
    println!("use it with (the exports once per terminal):");
    let kubeconfig = own_dir.join("kubeconfig");
    match write_kubeconfig(&kubeconfig, &sandbox.url(), credentials_dir.as_deref()) {
        Ok(()) => println!("  export KUBECONFIG={}", kubeconfig.display()),
        Err(error) => println!(
            "  (no kubeconfig written to {}: {error})",
            kubeconfig.display()
        ),
    }
    match kubectl_cache_dir(port) {
        Ok(cache) => println!("  export KUBECACHEDIR={}", cache.display()),
        Err(error) => {
            println!("  (no kubectl cache directory: {error}; pass --cache-dir \"$(mktemp -d)\")")
        }
    }
    println!("  kubectl get pgc");
    if flags.insecure_http {
        println!(
            "  (plain HTTP, no authentication: anyone who can reach this port is cluster-admin)"
        );
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

/// Bind `listen`, and say which port that is.
async fn bind(listen: SocketAddr) -> Result<(tokio::net::TcpListener, u16), SandboxError> {
    let listener = Sandbox::bind(listen).await?;
    let port = listener
        .local_addr()
        .map_err(|source| SandboxError::Bind {
            addr: listen,
            source,
        })?
        .port();
    Ok((listener, port))
}

/// The sandbox's own directory, for its kubeconfig and (without --tls-dir) its credentials:
/// made 0700, or, if it is there already, used only if it is a directory of this user's (not a
/// link) — in a shared temporary directory another user could have made it first, to read the
/// token or to swap the kubeconfig.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let metadata = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid(2) takes nothing, touches no memory and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !metadata.is_dir() || metadata.uid() != me {
        return Err(std::io::Error::other(
            "it is there but is not a directory of this user's; remove it, or start on another --listen port",
        ));
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

/// The directory this program runs from, if the operator's binaries are there too (a stage, or
/// the readiness agent its postgres pods copy): cargo builds every binary of the workspace into
/// one directory (target/debug, target/release).
fn own_directory_with_operator_binaries() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    (dir.join("stage06").is_file() || dir.join("pg-ready").is_file()).then(|| dir.to_path_buf())
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

/// A kubeconfig at `path` whose current context, `sandbox`, is this sandbox, so that kubectl,
/// `kubectl proxy` and the operator's binaries find it as they find any cluster. JSON is YAML,
/// so kubectl reads it. It names the CA and the token file in `credentials_dir` (none with
/// `--insecure-http`); kubectl re-reads a `tokenFile`, so a rotated token is picked up.
/// Written 0600, though it holds only paths.
fn write_kubeconfig(path: &Path, url: &str, credentials_dir: Option<&Path>) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut cluster = serde_json::json!({"server": url});
    let mut user = serde_json::json!({});
    if let Some(dir) = credentials_dir {
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
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(&serde_json::to_vec_pretty(&config).map_err(std::io::Error::other)?)
}

/// kubectl caches discovery per host and port for hours, so a sandbox restarted on the same port
/// with other resource types would be misread from a stale cache. This sandbox's own cache
/// directory (`KUBECACHEDIR`) is emptied at every start, so it cannot go stale.
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
