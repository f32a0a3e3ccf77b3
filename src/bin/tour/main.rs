//! The one-command tour: `cargo run`. It plays the whole workshop at once — register the type,
//! watch, run the step-03 operator on a cluster, then the step-06 operator (step 05's plus
//! backups) for real: a seed primary and its replicas, a row written through the primary Service,
//! the primary deleted, a failover, the row read back; then a base backup, a second row archived,
//! every pod deleted at once, and the cluster restored from its backups with both rows — and
//! prints what the operators say at each step.
//!
//! WORKSHOP.md, "The whole workshop in one command". Nothing to install beyond the Rust
//! toolchain: with no flags the tour starts the sandbox API server (the `sandbox` binary, built
//! first when run through `cargo run`) as a child process on 127.0.0.1, and stops it at the end.
//! Two programs talking HTTP, as an operator and kube-apiserver are: the operator crate never
//! links the sandbox. Where PostgreSQL and bubblewrap are installed the sandbox runs the pods as
//! real PostgreSQL servers; elsewhere they are simulated, the tour says so, and skips what needs
//! a real server (the SQL, the promotion, the backup and the restore).
//!
//! ```text
//! cargo run                                  # the tour on a sandbox of its own
//! cargo run -- --sandbox-runtime simulated   # the same with simulated pods (no PostgreSQL needed)
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
//! does not. Steps 04 to 06, whose operator starts pods, play on the tour's own sandbox only.
//!
//! The operators it runs are the ones the stages run:
//! [`run_operator`](postgres_operator::controller::run_operator) (`stages/stage03.rs`) and
//! [`run_postgres_operator`](postgres_operator::postgres::run_postgres_operator) with the
//! `Backups` layer (`stages/stage06.rs`). The tour waits for the operator's own lines, or polls the cluster's
//! status, after each act (with a deadline) rather than sleeping. `cargo run -- --help` lists the
//! flags.
//!
//! Where it lives. The script is `acts.rs`: a table of acts, each with its caption, what it does,
//! what it waits for and within what deadline, and what it reports, and the short loop that plays
//! them. What an act does is in `does.rs`, what it waits for in `until.rs`, and what the acts
//! share (the client, the operator running, what the tour has seen) in `scene.rs`. `story.rs`
//! prints the operator's lines while the tour waits, `status.rs` reads the cluster's status,
//! `sql.rs` takes the tour's SQL to Postgres, `example.rs` is the workshop's example object, and
//! `sandbox.rs` starts and stops the sandbox child process. This file: the flags, the stage, and
//! how the tour ends.

mod acts;
mod does;
mod example;
mod sandbox;
mod scene;
mod sql;
mod status;
mod story;
mod until;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use postgres_operator::api::{object_path, CRD_NAME};
use postgres_operator::client::Client;
use postgres_operator::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::process::{
    cancel_on_signal, connect, exit_error, init_logging, parse_seconds,
};

use crate::example::EXAMPLE_NAME;
use crate::sandbox::SandboxProcess;
use crate::scene::{Scene, Stage};
use crate::sql::SqlRoute;

/// How long one act may take before the tour gives up on the operator's reply.
const ACT_DEADLINE: Duration = Duration::from_secs(15);
/// How long a step-04 act may take: real pods run initdb or copy the primary with
/// pg_basebackup, on a machine that may be busy with other work.
const POD_ACT_DEADLINE: Duration = Duration::from_secs(180);

/// tour: the whole workshop in one command (`cargo run`). Registers the PostgresCluster type,
/// runs the step-03 operator on a cluster, then the step-06 operator (step 05's plus backups):
/// creates a Postgres cluster with backups, grows it, writes a row through its primary Service,
/// deletes the primary pod, watches the failover and reads the row back; takes a base backup,
/// writes and archives a second row, deletes every pod and reads both rows back from the restored
/// cluster. Prints what the operators say at each step. With no flags it runs on a sandbox API
/// server of its own; with --server or --real-cluster on a real one (steps 01-03 only), where it
/// removes what it created.
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
    /// What runs the pods of the tour's own sandbox: `processes` (real PostgreSQL; needs
    /// PostgreSQL and bubblewrap) or `simulated` (a status only). Default: the sandbox's choice,
    /// processes where they can run
    #[arg(long, value_name = "KIND", value_parser = ["processes", "simulated"], conflicts_with_all = ["real_cluster", "server"])]
    sandbox_runtime: Option<String>,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  tour                                        # on a sandbox of its own: nothing to set up
  tour --sandbox-runtime simulated            # the same, with pods that only get a status
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
    let started = Instant::now();
    let shutdown = cancel_on_signal();

    // The stage: a sandbox of our own, unless told to use a real API server.
    let (client, sandbox) = if flags.real_cluster || flags.connection.server.is_some() {
        match connect(&flags.connection).await {
            Ok(client) => (client, None),
            Err(exit) => return exit,
        }
    } else {
        let sandbox = match SandboxProcess::start(flags.sandbox_runtime.as_deref()).await {
            Ok(sandbox) => sandbox,
            Err(error) => return exit_error(&format!("starting the sandbox: {error}"), None),
        };
        let client = match sandbox.config().map(Client::new) {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return exit_error(&error, None),
            Err(error) => return exit_error(&error, None),
        };
        (client, Some(sandbox))
    };

    let namespace = client.namespace().to_string();
    let stage = match &sandbox {
        Some(sandbox) => {
            println!(
                "== The stage: a sandbox API server at {} (no cluster needed)",
                sandbox.url
            );
            // The sandbox's own banner says what runs its pods.
            println!("   {}", sandbox.runtime.banner());
            Stage::Sandbox {
                sql: SqlRoute::for_runtime(&sandbox.runtime).await,
            }
        }
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
            println!("   Steps 04 to 06 (their operator starts pods) play on the tour's own sandbox only: `cargo run` with no flags.");
            Stage::RealCluster
        }
    };

    // The operators stop on Ctrl-C/SIGTERM, or at their curtain: child tokens.
    let mut scene = Scene::new(
        client.clone(),
        stage,
        flags.reconcile_interval,
        shutdown.child_token(),
    );
    let outcome = tokio::select! {
        outcome = acts::play(acts::ACTS, &mut scene) => outcome,
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
        clean_up(&client, scene.created_example).await;
    }
    if let Some(sandbox) = sandbox {
        sandbox.stop().await;
    }
    match outcome {
        Ok(()) => {
            println!(
                "The tour took {:.1} s. That was the workshop; now read WORKSHOP.md.",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        // SIGTERM is Kubernetes' normal stop, Ctrl-C a person's: a clean stop either way.
        Err(TourEnd::Interrupted) => ExitCode::SUCCESS,
        Err(TourEnd::Failed { message, hint }) => exit_error(&message, hint),
    }
}

/// How a tour ends before its last act.
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
