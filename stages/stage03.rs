//! Stage 03 of the workshop: one task per cluster, each with its own channel and a reconcile
//! timer — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 03". New since stage 02: `src/controller/` — `operator.rs` checks the type
//! (`crd_check::check_and_tell`: created if absent, never changed), runs step 02's
//! list-then-watch and hands each event to the `Controller` (`controller/mod.rs`), which routes it
//! to the cluster's own task; the task sets the cluster up, takes spec updates, reconciles on its
//! timer and cleans up when the cluster is deleted (`controller/cluster.rs`), looking at pods
//! through `controller/pods.rs`. Stage 02's lines come first, unchanged; every line about one cluster is
//! prefixed with `[namespace/name]`.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage03                          # terminal 3
//! kubectl create -f kube/example-postgres-cluster.yaml   # terminal 2
//! kubectl patch pgc example-postgresql-cluster --type merge -p '{"spec":{"size":5}}'
//! kubectl delete pgc example-postgresql-cluster
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr. `stage03 --help`
//! lists the flags.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use postgres_operator::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::controller::{run_operator, ControllerOptions};
use postgres_operator::process::{fail, parse_seconds, start};
use postgres_operator::story::Reporter;

/// stage03: workshop step 03. The operator: lists and watches the PostgresClusters and hands each
/// cluster's events to its own task, with its own channel and a reconcile timer, until SIGTERM or
/// Ctrl-C. Lines about one cluster start with [namespace/name].
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct Flags {
    /// How often each cluster's task reconciles, in seconds (8, as the original)
    #[arg(long, value_name = "SECS", default_value = "8", value_parser = parse_seconds, allow_negative_numbers = true)]
    reconcile_interval: Duration,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  stage03                                    # the sandbox, after its `export KUBECONFIG=...` line
  stage03 --server http://127.0.0.1:8001     # a cluster through `kubectl proxy --port 8001`
  stage03 --reconcile-interval 2             # the cluster your kubeconfig points at
  stage03 --server https://127.0.0.1:8443 --certificate-authority creds/ca.crt --token-file creds/token

Exit status: 0 stopped by SIGTERM or Ctrl-C, 1 the API server or configuration said no, 2 bad flags";

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    let Ok((client, shutdown)) = start(&flags.connection).await else {
        return ExitCode::FAILURE; // `start` has said why
    };
    let options = ControllerOptions {
        reconcile_interval: flags.reconcile_interval,
        ..ControllerOptions::default()
    };
    // Every story line, in order, on stdout; the printer ends when the operator has stopped.
    let (reporter, printer) = Reporter::to_stdout();
    let outcome = run_operator(client.clone(), options, reporter, shutdown).await;
    let _ = printer.await;
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => fail(&error, error.hint(), &client),
    }
}
