//! The Deployer: a second operator on steps 01–03's library (WORKSHOP.md, "Your own operator:
//! the Deployer"). It registers the `Deployer` kind, lists then watches the Deployers, and runs
//! one task per Deployer: a canary rollout over two Deployments, with rollback — until SIGTERM or
//! Ctrl-C.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin deployer                         # terminal 2
//! kubectl apply -f kube/example-deployer.yaml      # terminal 3
//! kubectl patch dep nginx --type merge -p '{"spec":{"deployment":{"version":"1.7.8"}}}'
//! kubectl describe dep nginx
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use postgres_operator::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::controller::ControllerOptions;
use postgres_operator::deployer::run_deployer;
use postgres_operator::process::{fail, parse_seconds, start};
use postgres_operator::story::Reporter;

/// deployer: the workshop's second operator. Registers the Deployer kind, then rolls each
/// Deployer's new version out in steps, rolling back a canary whose pods are not available,
/// until SIGTERM or Ctrl-C. Lines about one Deployer start with [namespace/name].
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct Flags {
    /// How often each Deployer's task looks at its Deployments, in seconds
    #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_seconds, allow_negative_numbers = true)]
    reconcile_interval: Duration,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  deployer                                   # the sandbox, after its `export KUBECONFIG=...` line
  deployer --server http://127.0.0.1:8001    # a cluster through `kubectl proxy --port 8001`
  deployer --reconcile-interval 2            # the cluster your kubeconfig points at

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
    let (reporter, printer) = Reporter::to_stdout();
    let outcome = run_deployer(client.clone(), options, reporter, shutdown).await;
    let _ = printer.await;
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => fail(&error, error.hint(), &client),
    }
}
