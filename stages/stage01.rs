//! Stage 01 of the workshop: make sure the API server has our resource type, as we define it, over
//! raw REST; wait until it serves it, show what discovery now lists, and stop.
//!
//! WORKSHOP.md, "Step 01". New here: everything. In the order the step's Lesson reads it: the
//! CustomResourceDefinition (`src/crd/`, which replaces the 2017 workshop's ThirdPartyResource)
//! and the HTTP client (`src/client/`); as support, finding the API server (`src/config/`). Running it twice is fine: the second run finds the
//! CRD "already up to date", and a CRD of an older schema is "updated".
//!
//! Run it against the embedded API server:
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage01                          # terminal 2
//! ```
//!
//! against a real cluster, with your kubeconfig (`cargo run --bin stage01`, as kubectl would), or
//! through `kubectl proxy` (which adds your kubeconfig's credentials itself):
//!
//! ```text
//! kubectl proxy --port 8001                                    # terminal 1
//! cargo run --bin stage01 -- --server http://127.0.0.1:8001    # terminal 2
//! kubectl get --raw /apis/workshop.example.com/v1
//! ```
//!
//! In-cluster, the Deployment in `kube/` runs a later stage (`/stage06`); stage01 exits when done,
//! so run it once from your machine or as a Job, not as that Deployment. `stage01 --help` lists
//! the flags.

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use postgres_operator::client::Client;
use postgres_operator::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::crd::{self, CrdError};
use postgres_operator::process::{fail, parse_seconds, start};

/// stage01: workshop step 01. Registers the PostgresCluster CustomResourceDefinition over raw
/// REST (or updates an older schema of it), waits until the API server serves it (Established),
/// prints what discovery lists, and stops. Running it again is fine: the CRD is "already up to
/// date".
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct Flags {
    /// How long to wait for the CRD to be Established, in seconds
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_seconds, allow_negative_numbers = true)]
    established_timeout: Duration,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  stage01                                    # the sandbox, after its `export KUBECONFIG=...` line
  stage01 --server http://127.0.0.1:8001     # a cluster through `kubectl proxy --port 8001`
  stage01 --established-timeout 60           # the cluster your kubeconfig points at
  KUBE_SERVER=http://127.0.0.1:8001 stage01  # the same as --server

Exit status: 0 done or stopped by SIGTERM/Ctrl-C, 1 the API server or configuration said no, 2 bad flags";

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    let Ok((client, shutdown)) = start(&flags.connection).await else {
        return ExitCode::FAILURE; // `start` has said why
    };
    tokio::select! {
        result = register_and_describe(&client, flags.established_timeout) => match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error, error.hint(), &client),
        },
        () = shutdown.cancelled() => ExitCode::SUCCESS,
    }
}

/// The step itself: ensure the CRD, wait for Established, show discovery.
async fn register_and_describe(
    client: &Client,
    established_timeout: Duration,
) -> Result<(), CrdError> {
    println!("{}", crd::ensure(client).await?);
    println!("waiting for Established ...");
    crd::wait_established(client, established_timeout).await?;
    println!("CustomResourceDefinition is Established");
    for resource in crd::served_resources(client).await? {
        let verbs = resource.verbs.join(" ");
        println!(
            "served: {} ({}) verbs: {verbs}",
            resource.name, resource.kind
        );
    }
    Ok(())
}
