//! The one-command tour: `cargo run`. It plays the whole workshop at once — register the type,
//! start the step-03 operator, create a Postgres cluster, resize it, delete it — and prints what
//! the operator says at each step.
//!
//! WORKSHOP.md, "The whole workshop in one command". Nothing to install beyond the Rust
//! toolchain: with no flags the tour starts the sandbox API server (the `sandbox` binary, built
//! first when run through `cargo run`) as a child process on 127.0.0.1, and stops it at the end.
//! Two programs talking HTTP, as an operator and kube-apiserver are: the operator crate never
//! links the sandbox.
//!
//! ```text
//! cargo run                                  # the tour on a sandbox of its own
//! cargo run -- --reconcile-interval 8        # the original's 8 s timer (default here: 2 s)
//! kubectl proxy --port 8001                  # or a real cluster, through kubectl proxy (own terminal):
//! cargo run -- --server http://127.0.0.1:8001 --namespace default
//! cargo run -- --real-cluster                # or whatever cluster kubectl would use
//! ```
//!
//! On a real cluster the tour says first what it will do, then does only that: it registers the
//! CRD if missing (and leaves it), creates `example-postgresql-cluster` in the namespace, resizes
//! it, and deletes it again — also when stopped with Ctrl-C half-way, and then says what it
//! removed. It refuses to start if an object of that name already exists, or if the namespace
//! does not.
//!
//! The operator it runs is the one `stages/stage03.rs` runs: [`run_operator`]. The tour waits
//! for the operator's own lines after each act (with a deadline) rather than sleeping.
//! `cargo run -- --help` lists the flags.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use postgres_operator::api::{
    collection_path, object_path, PostgresCluster, PostgresClusterSpec, CRD_NAME,
};
use postgres_operator::client::{Client, Patch};
use postgres_operator::config::{Config, ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::controller::{run_operator, ControllerOptions};
use postgres_operator::crd::{self, DEFAULT_ESTABLISHED_TIMEOUT};
use postgres_operator::process::{
    cancel_on_signal, connect, exit_error, init_logging, parse_seconds,
};
use postgres_operator::story::{LogLine, Reporter};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The workshop's example object, as in `kube/example-postgres-cluster.yaml`.
const EXAMPLE_NAME: &str = "example-postgresql-cluster";
const EXAMPLE_SIZE: i64 = 3;
const RESIZED_SIZE: i64 = 5;
const EXAMPLE_VERSION: &str = "16";
/// How long one act may take before the tour gives up on the operator's reply.
const ACT_DEADLINE: Duration = Duration::from_secs(15);

/// tour: the whole workshop in one command (`cargo run`). Registers the PostgresCluster type,
/// starts the step-03 operator, creates, resizes and deletes a cluster, and prints what the
/// operator says at each step. With no flags it runs on a sandbox API server of its own;
/// with --server or --real-cluster on a real one, where it removes what it created.
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct TourFlags {
    /// Use the cluster the connection flags, in-cluster or kubeconfig point at, instead of a
    /// sandbox of its own (--server implies it)
    #[arg(long)]
    real_cluster: bool,
    /// The operator's reconcile timer, in seconds (2 here, so the tour shows a tick without a long
    /// wait; the original's is 8)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_seconds, allow_negative_numbers = true)]
    reconcile_interval: Duration,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  tour                                        # on a sandbox of its own: nothing to set up
  tour --server http://127.0.0.1:8001         # a real cluster, through kubectl proxy
  tour --real-cluster --namespace scratch     # whatever cluster kubectl would use

Exit status: 0 the tour ran or was stopped by SIGTERM/Ctrl-C, 1 something failed (the message says
what), 2 bad flags";

fn main() -> ExitCode {
    let flags = TourFlags::parse();
    // The tour's story is on stdout; keep stderr to warnings unless RUST_LOG asks for more.
    // Set before the runtime starts any thread: the environment is not thread-safe to change.
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    init_logging();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(tour(flags)),
        Err(error) => exit_error(&format!("starting the tokio runtime: {error}"), None),
    }
}

async fn tour(flags: TourFlags) -> ExitCode {
    let shutdown = cancel_on_signal();

    // The stage: a sandbox of our own, unless told to use a real API server.
    let (client, sandbox) = if flags.real_cluster || flags.connection.server.is_some() {
        match connect(&flags.connection).await {
            Ok(client) => (client, None),
            Err(exit) => return exit,
        }
    } else {
        let sandbox = match SandboxProcess::start().await {
            Ok(sandbox) => sandbox,
            Err(error) => return exit_error(&format!("starting the sandbox: {error}"), None),
        };
        let client = match Config::from_url(&sandbox.url).map(Client::new) {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return exit_error(&error, None),
            Err(error) => return exit_error(&error, None),
        };
        (client, Some(sandbox))
    };

    let namespace = client.namespace().to_string();
    match &sandbox {
        Some(sandbox) => println!(
            "== The stage: a sandbox API server at {} (no cluster needed)",
            sandbox.url
        ),
        None => {
            println!(
                "== The stage: the API server at {}, namespace {namespace}. This tour will:",
                client.server()
            );
            println!("   - register the CustomResourceDefinition {CRD_NAME} if it is missing, or update it if its schema is older (and leave it),");
            println!("   - create the PostgresCluster {namespace}/{EXAMPLE_NAME}, resize it, and delete it.");
            println!(
                "   Nothing else is created: the step-03 operator only reports what it would do."
            );
        }
    }

    let created_example = Arc::new(AtomicBool::new(false));
    // The operator stops on Ctrl-C/SIGTERM, or at the tour's curtain: a child token.
    let stop_operator = shutdown.child_token();
    let outcome = tokio::select! {
        outcome = play(&client, &flags, created_example.clone(), stop_operator) => outcome,
        () = shutdown.cancelled() => Err(TourEnd::Interrupted),
    };
    // A signal also stops the operator (a child token), and `play` may see that first and call it
    // a failure: whichever branch won, a stop asked for is a stop.
    let outcome = match outcome {
        Err(TourEnd::Failed { .. }) if shutdown.is_cancelled() => Err(TourEnd::Interrupted),
        other => other,
    };

    // Stopped half-way (a signal, a failed act): leave no example object behind, and say so.
    if outcome.is_err() {
        clean_up(&client, created_example.load(Ordering::SeqCst)).await;
    }
    if let Some(sandbox) = sandbox {
        sandbox.stop().await;
    }
    match outcome {
        // SIGTERM is Kubernetes' normal stop, Ctrl-C a person's: a clean stop either way.
        Ok(()) | Err(TourEnd::Interrupted) => ExitCode::SUCCESS,
        Err(TourEnd::Failed { message, hint }) => exit_error(&message, hint),
    }
}

enum TourEnd {
    Failed {
        message: String,
        hint: Option<String>,
    },
    Interrupted,
}

/// For `.map_err(failed)?`: the error's own message says which step failed.
fn failed(error: impl std::fmt::Display) -> TourEnd {
    TourEnd::Failed {
        message: error.to_string(),
        hint: None,
    }
}

/// After a stop half-way: delete the example object if the tour created it, and tell what was
/// removed and what was left (the CRD stays, as announced).
async fn clean_up(client: &Client, created_example: bool) {
    let key = format!("{}/{EXAMPLE_NAME}", client.namespace());
    if !created_example {
        println!(
            "== Stopped half-way: the tour had created no PostgresCluster; nothing to clean up"
        );
        return;
    }
    let path = object_path(client.namespace(), EXAMPLE_NAME);
    match client.delete::<serde_json::Value>(&path).await {
        Ok(_) => println!(
            "== Stopped half-way: deleted the PostgresCluster {key} the tour had created"
        ),
        Err(error) => eprintln!(
            "error: stopped half-way, but could not delete the PostgresCluster {key} the tour created: {error}\n\
             hint: delete it yourself: kubectl delete pgc {EXAMPLE_NAME} -n {}",
            client.namespace()
        ),
    }
}

/// The namespace must exist before anything is written in it. A 404 says it does not; any other
/// answer (a 403 for a user who may not read namespaces) lets the tour go on and find out.
async fn check_namespace(client: &Client) -> Result<(), TourEnd> {
    let namespace = client.namespace();
    match client
        .get::<serde_json::Value>(&format!("/api/v1/namespaces/{namespace}"))
        .await
    {
        Err(error) if error.status_code() == Some(404) => Err(TourEnd::Failed {
            message: format!("namespace {namespace:?} does not exist on this API server"),
            hint: Some(format!(
                "create it (`kubectl create namespace {namespace}`), or pick another with --namespace"
            )),
        }),
        _ => Ok(()),
    }
}

/// The workshop, act by act.
async fn play(
    client: &Client,
    flags: &TourFlags,
    created_example: Arc<AtomicBool>,
    stop_operator: CancellationToken,
) -> Result<(), TourEnd> {
    let namespace = client.namespace().to_string();
    let key = format!("{namespace}/{EXAMPLE_NAME}");
    check_namespace(client).await?;

    println!("== Step 01: kubectl apply -f kube/crd.yaml   (register the PostgresCluster type)");
    println!("{}", crd::register(client).await.map_err(failed)?);
    crd::wait_established(client, DEFAULT_ESTABLISHED_TIMEOUT)
        .await
        .map_err(failed)?;
    println!("CustomResourceDefinition is Established");

    let existing = client
        .get::<serde_json::Value>(&object_path(&namespace, EXAMPLE_NAME))
        .await;
    if existing.is_ok() {
        return Err(TourEnd::Failed {
            message: format!("PostgresCluster {key} already exists; the tour will not touch it"),
            hint: Some("delete it, or pick another namespace with --namespace".to_string()),
        });
    }

    println!("== Step 02: cargo run --bin stage02   (list the clusters, then watch from the list's resourceVersion)");
    let (reporter, lines) = Reporter::channel();
    let options = ControllerOptions {
        reconcile_interval: flags.reconcile_interval,
        ..ControllerOptions::default()
    };
    let operator = tokio::spawn(run_operator(
        client.clone(),
        options,
        reporter,
        stop_operator.clone(),
    ));
    let mut story = Story { lines };
    story.until(None, "Starting at watchVersion").await?;
    println!(
        "== Step 03: cargo run --bin stage03   (the operator: one task per cluster, each reconciling every {} s)",
        flags.reconcile_interval.as_secs_f64()
    );

    println!("== Act 1: kubectl create -f kube/example-postgres-cluster.yaml");
    let example = example_cluster(&namespace);
    let _: PostgresCluster = client
        .create(&collection_path(&namespace), &example)
        .await
        .map_err(failed)?;
    created_example.store(true, Ordering::SeqCst);
    story
        .until(Some(&key), "PLACEHOLDER: Start cluster!")
        .await?;

    println!(
        "== Interlude: the reconcile timer fires every {} s, whatever else happens",
        flags.reconcile_interval.as_secs_f64()
    );
    // A tick can be up to one interval away.
    story
        .until_within(
            Some(&key),
            "PLACEHOLDER: disaster recovery!",
            flags.reconcile_interval + ACT_DEADLINE,
        )
        .await?;

    println!(
        "== Act 2: kubectl patch pgc {EXAMPLE_NAME} --type merge -p '{{\"spec\":{{\"size\":{RESIZED_SIZE}}}}}'"
    );
    let resize = Patch::Merge(serde_json::json!({"spec": {"size": RESIZED_SIZE}}));
    let _: PostgresCluster = client
        .patch(&object_path(&namespace, EXAMPLE_NAME), &resize)
        .await
        .map_err(failed)?;
    story.until(Some(&key), "spec update").await?;

    println!("== Act 3: kubectl delete pgc {EXAMPLE_NAME}");
    let _: serde_json::Value = client
        .delete(&object_path(&namespace, EXAMPLE_NAME))
        .await
        .map_err(failed)?;
    created_example.store(false, Ordering::SeqCst);
    story.until(Some(&key), "cluster task ended").await?;

    println!("== Curtain: stopping the operator, as SIGTERM would");
    stop_operator.cancel();
    let stopped = operator
        .await
        .map_err(|error| failed(format!("the operator task failed: {error}")))?
        .map_err(failed)?;
    story.rest().await;
    println!(
        "operator stopped ({} cluster tasks left to stop). That was the workshop; now read WORKSHOP.md.",
        stopped.tasks_stopped
    );
    Ok(())
}

fn example_cluster(namespace: &str) -> PostgresCluster {
    let spec = PostgresClusterSpec {
        size: EXAMPLE_SIZE,
        version: EXAMPLE_VERSION.to_string(),
        paused: false,
    };
    PostgresCluster::new(namespace, EXAMPLE_NAME, spec)
}

/// The operator's lines, printed as they come.
struct Story {
    lines: mpsc::UnboundedReceiver<LogLine>,
}

impl Story {
    /// Print lines until one (of `cluster`, if given) contains `needle`. The operator reacts
    /// in milliseconds; the deadline is there so a broken operator fails the tour instead of
    /// hanging it.
    async fn until(&mut self, cluster: Option<&str>, needle: &str) -> Result<(), TourEnd> {
        self.until_within(cluster, needle, ACT_DEADLINE).await
    }

    async fn until_within(
        &mut self,
        cluster: Option<&str>,
        needle: &str,
        deadline: Duration,
    ) -> Result<(), TourEnd> {
        let wait = async {
            while let Some(log) = self.lines.recv().await {
                println!("{log}");
                if cluster.is_none_or(|c| log.is_about(c)) && log.line.contains(needle) {
                    return true;
                }
            }
            false
        };
        match tokio::time::timeout(deadline, wait).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(failed(format!(
                "the operator stopped before saying {needle:?}"
            ))),
            Err(_) => Err(failed(format!(
                "the operator did not say {needle:?} within {} s",
                deadline.as_secs()
            ))),
        }
    }

    /// Print whatever is left once the operator has stopped.
    async fn rest(&mut self) {
        while let Ok(log) = self.lines.try_recv() {
            println!("{log}");
        }
    }
}

/// The sandbox binary as a child process, for as long as the tour runs.
struct SandboxProcess {
    child: tokio::process::Child,
    url: String,
}

impl SandboxProcess {
    /// Start `sandbox --listen 127.0.0.1:0` and read the URL it prints first.
    async fn start() -> Result<SandboxProcess, String> {
        let program = sandbox_binary().await?;
        let mut child = tokio::process::Command::new(&program)
            // Pods would show as pending for a second before running (the operator of step 03
            // starts none yet: launching them is the workshop's homework).
            .args(["--listen", "127.0.0.1:0", "--kubelet-delay-ms", "1000"])
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot run {}: {error}", program.display()))?;
        let stdout = child.stdout.take().ok_or("the sandbox has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| "the sandbox printed no address within 30 s".to_string())?
            .map_err(|error| format!("reading the sandbox's output: {error}"))?
            .ok_or("the sandbox exited before it printed its address")?;
        let url = first
            .strip_prefix("sandbox API server at ")
            .ok_or_else(|| format!("unexpected first line from the sandbox: {first:?}"))?
            .to_string();
        // Keep reading its stdout, so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SandboxProcess { child, url })
    }

    /// The sandbox keeps nothing worth a graceful stop: end it and reap it.
    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The `sandbox` binary beside this one. Under `cargo run` it is built first (`cargo run` builds
/// only the tour, and a sandbox older than its source would mislead); otherwise it must be there.
async fn sandbox_binary() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|error| format!("where am I? {error}"))?;
    let dir = exe.parent().ok_or("this binary has no directory")?;
    let program = dir.join("sandbox");
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    if let (Some(cargo), true) = (std::env::var_os("CARGO"), manifest.exists()) {
        let mut build = tokio::process::Command::new(cargo);
        build.args([
            "build",
            "--quiet",
            "-p",
            "sandbox",
            "--bin",
            "sandbox",
            "--manifest-path",
        ]);
        build.arg(&manifest);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .await
            .map_err(|error| format!("running cargo build for the sandbox: {error}"))?;
        if !status.success() {
            return Err("cargo build -p sandbox failed (see above)".to_string());
        }
    }
    if program.exists() {
        Ok(program)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build -p sandbox`, or pass --server",
            program.display()
        ))
    }
}
