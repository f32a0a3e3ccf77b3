//! The one-command tour: `cargo run`. It plays the whole workshop at once — register the type,
//! start the step-03 operator, create a Postgres cluster, resize it, delete it — and prints what
//! the operator says at each step.
//!
//! WORKSHOP.md, "The tour". Nothing to install beyond the Rust toolchain: with no flags the tour
//! starts the sandbox API server (`src/sandbox/`) inside this process, on 127.0.0.1, and
//! throws it away at the end.
//!
//! ```text
//! cargo run                                  # the tour on an in-process sandbox
//! cargo run -- --reconcile-interval 8        # the original's 8 s timer (default here: 2 s)
//! kubectl proxy --port 8001 &                # or a real cluster, through kubectl proxy:
//! cargo run -- --server http://127.0.0.1:8001 --namespace default
//! cargo run -- --real-cluster                # or whatever cluster kubectl would use
//! ```
//!
//! On a real cluster the tour says first what it will do, then does only that: it registers the
//! CRD if missing (and leaves it), creates `example-postgresql-cluster` in the namespace, resizes
//! it, and deletes it again — also when stopped with Ctrl-C half-way. It refuses to start if an
//! object of that name already exists.
//!
//! The operator it runs is the one `stages/stage03.rs` runs: [`run_operator`]. The tour waits
//! for the operator's own lines after each act (with a deadline) rather than sleeping.
//!
//! Flags: the connection flags of every stage (`--server`, `--certificate-authority`,
//! `--token-file`, `--token`, `--namespace`), `--real-cluster`, `--reconcile-interval SECS`;
//! `cargo run -- --help` lists them (the text is `USAGE` below).

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use postgres_operator::api::{
    collection_path, object_path, ObjectMeta, PostgresCluster, PostgresClusterSpec, API_VERSION,
    CRD_NAME, KIND,
};
use postgres_operator::client::{Client, Patch};
use postgres_operator::config::{Config, ConfigArgs};
use postgres_operator::controller::{run_operator, ControllerOptions, LogLine, Reporter};
use postgres_operator::crd::{self, DEFAULT_ESTABLISHED_TIMEOUT};
use postgres_operator::process::{
    help_requested, init_logging, shutdown_signal, usage_error, Usage,
};
use sandbox::{Sandbox, SandboxOptions};
use tokio::sync::mpsc;

/// The workshop's example object, as in `kube/example-postgres-cluster.yaml`.
const EXAMPLE_NAME: &str = "example-postgresql-cluster";
const EXAMPLE_SIZE: i64 = 3;
const RESIZED_SIZE: i64 = 5;
const EXAMPLE_VERSION: &str = "9.6.3";
/// Ticks every 2 s instead of 8 s, so the tour shows reconciliation without a long wait.
const TOUR_RECONCILE_INTERVAL: Duration = Duration::from_secs(2);
/// How long one act may take before the tour gives up on the operator's reply.
const ACT_DEADLINE: Duration = Duration::from_secs(15);

const USAGE: Usage = Usage {
    name: "tour",
    about: "tour: the whole workshop in one command (`cargo run`). Registers the PostgresCluster type,\n\
            starts the step-03 operator, creates, resizes and deletes a cluster, and prints what the\n\
            operator says at each step. With no flags it runs on a sandbox API server in this process;\n\
            with --server or --real-cluster on a real one, where it removes what it created.",
    flags: &[
        (
            "--real-cluster",
            "use the cluster the connection flags, in-cluster or kubeconfig point\n\
             at, instead of an in-process sandbox (--server implies it)",
        ),
        (
            "--reconcile-interval SECS",
            "the operator's reconcile timer (default 2 here; the original's is 8)",
        ),
    ],
    connection_flags: true,
    examples: &[
        "tour                                        # on an in-process sandbox: nothing to set up",
        "tour --server http://127.0.0.1:8001         # a real cluster, through kubectl proxy",
        "tour --real-cluster --namespace scratch     # whatever cluster kubectl would use",
    ],
    exit_status: "0 the tour ran, 1 something failed (the message says what), 2 bad flags,\n\
                  130 stopped by a signal",
};

struct TourFlags {
    connection: ConfigArgs,
    real_cluster: bool,
    reconcile_interval: Duration,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if help_requested(&args) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    // The tour's story is on stdout; keep stderr to warnings unless RUST_LOG asks for more.
    // Set before the runtime starts any thread: the environment is not thread-safe to change.
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    init_logging();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(tour(args)),
        Err(error) => fail(&format!("starting the tokio runtime: {error}")),
    }
}

async fn tour(args: Vec<String>) -> ExitCode {
    let flags = match parse_flags(args) {
        Ok(flags) => flags,
        Err(message) => return usage_error(message),
    };

    // The stage: a sandbox in this process, unless told to use a real API server.
    let (client, sandbox) = if flags.real_cluster || flags.connection.server.is_some() {
        match Client::infer(&flags.connection) {
            Ok(client) => (client, None),
            Err(error) => return fail(&error.to_string()),
        }
    } else {
        let options = SandboxOptions {
            // Pods would show as pending for a second before running (the operator of step 03
            // starts none yet: launching them is the workshop's homework).
            kubelet_delay: Duration::from_secs(1),
            ..SandboxOptions::default()
        };
        let sandbox =
            match Sandbox::start(options, tokio_util::sync::CancellationToken::new()).await {
                Ok(sandbox) => sandbox,
                Err(error) => return fail(&format!("starting the sandbox: {error}")),
            };
        let client = match Config::from_url(&sandbox.url()).map(Client::new) {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return fail(&error.to_string()),
            Err(error) => return fail(&error.to_string()),
        };
        (client, Some(sandbox))
    };

    let namespace = client.namespace().to_string();
    match &sandbox {
        Some(sandbox) => println!(
            "== The stage: a sandbox API server in this process at {} (no cluster needed)",
            sandbox.url()
        ),
        None => {
            println!(
                "== The stage: the API server at {}, namespace {namespace}. This tour will:",
                client.server()
            );
            println!("   - register the CustomResourceDefinition {CRD_NAME} if it is missing (and leave it),");
            println!("   - create the PostgresCluster {namespace}/{EXAMPLE_NAME}, resize it, and delete it.");
            println!(
                "   Nothing else is created: the step-03 operator only reports what it would do."
            );
        }
    }

    let created_example = Arc::new(AtomicBool::new(false));
    let outcome = tokio::select! {
        outcome = play(&client, &flags, created_example.clone()) => outcome,
        () = shutdown_signal() => Err(TourEnd::Interrupted),
    };

    // Stopped half-way (a signal, a failed act): leave no example object behind.
    if outcome.is_err() && created_example.load(Ordering::SeqCst) {
        let _ = client
            .delete::<serde_json::Value>(&object_path(&namespace, EXAMPLE_NAME))
            .await;
    }
    if let Some(sandbox) = sandbox {
        sandbox.shutdown().await;
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(TourEnd::Interrupted) => ExitCode::from(130),
        Err(TourEnd::Failed(message)) => fail(&message),
    }
}

enum TourEnd {
    Failed(String),
    Interrupted,
}

/// For `.map_err(failed)?`: the error's own message says which step failed.
fn failed(error: impl std::fmt::Display) -> TourEnd {
    TourEnd::Failed(error.to_string())
}

/// The workshop, act by act.
async fn play(
    client: &Client,
    flags: &TourFlags,
    created_example: Arc<AtomicBool>,
) -> Result<(), TourEnd> {
    let namespace = client.namespace().to_string();
    let key = format!("{namespace}/{EXAMPLE_NAME}");

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
        return Err(TourEnd::Failed(format!(
            "PostgresCluster {key} already exists; the tour will not touch it. Delete it, or pick another namespace with --namespace"
        )));
    }

    println!(
        "== Step 03: cargo run --bin stage03   (the operator: list, watch, one task per cluster; reconcile every {} s)",
        flags.reconcile_interval.as_secs_f64()
    );
    let (reporter, lines) = Reporter::channel();
    let (stop_operator, operator_stopped) = tokio::sync::oneshot::channel::<()>();
    let options = ControllerOptions {
        reconcile_interval: flags.reconcile_interval,
        ..ControllerOptions::default()
    };
    let operator = tokio::spawn(run_operator(client.clone(), options, reporter, async {
        let _ = operator_stopped.await;
    }));
    let mut story = Story { lines };
    story.until(None, "Starting at watchVersion").await?;

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
    let _ = stop_operator.send(());
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
    PostgresCluster {
        api_version: API_VERSION.to_string(),
        kind: KIND.to_string(),
        metadata: ObjectMeta {
            name: EXAMPLE_NAME.to_string(),
            namespace: namespace.to_string(),
            ..ObjectMeta::default()
        },
        spec: PostgresClusterSpec {
            size: EXAMPLE_SIZE,
            version: EXAMPLE_VERSION.to_string(),
            paused: false,
        },
        status: None,
    }
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
            Ok(false) => Err(TourEnd::Failed(format!(
                "the operator stopped before saying {needle:?}"
            ))),
            Err(_) => Err(TourEnd::Failed(format!(
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

fn parse_flags(args: impl IntoIterator<Item = String>) -> Result<TourFlags, String> {
    let (connection, rest) = ConfigArgs::parse(args).map_err(|error| error.to_string())?;
    let mut flags = TourFlags {
        connection,
        real_cluster: false,
        reconcile_interval: TOUR_RECONCILE_INTERVAL,
    };
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), Some(value.to_string())),
            None => (arg.clone(), None),
        };
        match flag.as_str() {
            "--real-cluster" if inline.is_none() => flags.real_cluster = true,
            "--reconcile-interval" => {
                let value = inline
                    .or_else(|| rest.next())
                    .ok_or("--reconcile-interval needs a number of seconds")?;
                flags.reconcile_interval = parse_seconds(&value).ok_or_else(|| {
                    format!("--reconcile-interval: {value:?} is not a positive number of seconds")
                })?;
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(flags)
}

/// `2`, `0.5`: a positive number of seconds.
fn parse_seconds(value: &str) -> Option<Duration> {
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds > 0.0).then(|| Duration::from_secs_f64(seconds))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(1)
}
