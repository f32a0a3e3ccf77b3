//! Stage 01 of the workshop: register our resource type over raw REST, wait until the API server
//! serves it, show what discovery now lists, and stop.
//!
//! WORKSHOP.md, "Step 01". New here: everything — finding the API server (`config.rs`), the HTTP
//! client (`client.rs`), and the CustomResourceDefinition (`crd.rs`, which replaces the 2017
//! workshop's ThirdPartyResource). Running it twice is fine: the second run finds the CRD already
//! there ("already exists; continuing"), as the original did.
//!
//! Run it against the embedded API server:
//!
//! ```text
//! cargo run --bin sandbox                                      # terminal 1: prints its URL
//! cargo run --bin stage01 -- --server http://127.0.0.1:8001    # terminal 2
//! ```
//!
//! against a real cluster, through `kubectl proxy` (which adds your kubeconfig's credentials):
//!
//! ```text
//! kubectl proxy --port 8001 &
//! cargo run --bin stage01 -- --server http://127.0.0.1:8001
//! kubectl get --raw /apis/workshop.example.com/v1
//! ```
//!
//! or in-cluster, as the Deployment in `kube/` runs it (`command: ["/stage01"]`):
//! `kubectl apply -k kube/ && kubectl logs deploy/postgres-operator`.
//!
//! Flags: the connection flags of every stage (`--server`, `--certificate-authority`,
//! `--token-file`, `--token`, `--namespace`) and `--established-timeout SECS` (default 30);
//! `stage01 --help` lists them (the text is `USAGE` below).

use std::process::ExitCode;
use std::time::Duration;

use postgres_operator::client::Client;
use postgres_operator::config::ConfigArgs;
use postgres_operator::crd::{self, CrdError, DEFAULT_ESTABLISHED_TIMEOUT};
use postgres_operator::process::{
    help_requested, init_logging, shutdown_signal, usage_error, Usage,
};

const USAGE: Usage = Usage {
    name: "stage01",
    about: "stage01: workshop step 01. Registers the PostgresCluster CustomResourceDefinition over raw\n\
            REST, waits until the API server serves it (Established), prints what discovery lists, and\n\
            stops. Running it again is fine: the CRD \"already exists; continuing\".",
    flags: &[(
        "--established-timeout SECS",
        "how long to wait for Established (default 30)",
    )],
    connection_flags: true,
    examples: &[
        "stage01 --server http://127.0.0.1:8001     # the sandbox, or a cluster through kubectl proxy",
        "stage01 --established-timeout 60           # the cluster your kubeconfig points at",
        "KUBE_SERVER=http://127.0.0.1:8001 stage01  # the same as --server",
    ],
    exit_status: "0 done, 1 the API server or configuration said no, 2 bad flags, 130 stopped by a signal",
};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if help_requested(&args) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    init_logging();
    let (config_args, established_timeout) = match parse_flags(args) {
        Ok(flags) => flags,
        Err(message) => return usage_error(message),
    };
    let client = match Client::infer(&config_args) {
        Ok(client) => client,
        Err(error) => return fail(&error.to_string(), None),
    };

    tokio::select! {
        result = register_and_describe(&client, established_timeout) => match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => fail(&error.to_string(), error.hint()),
        },
        () = shutdown_signal() => ExitCode::from(130),
    }
}

/// The step itself: register, wait for Established, show discovery.
async fn register_and_describe(
    client: &Client,
    established_timeout: Duration,
) -> Result<(), CrdError> {
    let registration = crd::register(client).await?;
    println!("{registration}");
    println!("waiting for Established ...");
    crd::wait_established(client, established_timeout).await?;
    println!("CustomResourceDefinition is Established");
    for resource in crd::served_resources(client).await? {
        println!(
            "served: {} ({}) verbs: {}",
            resource.name,
            resource.kind,
            resource.verbs.join(" ")
        );
    }
    Ok(())
}

/// The connection flags, then our own `--established-timeout SECS`.
fn parse_flags(args: Vec<String>) -> Result<(ConfigArgs, Duration), String> {
    let (config_args, rest) = ConfigArgs::parse(args).map_err(|error| error.to_string())?;
    let mut established_timeout = DEFAULT_ESTABLISHED_TIMEOUT;
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        let value = match arg.split_once('=') {
            Some(("--established-timeout", value)) => Some(value.to_string()),
            None if arg == "--established-timeout" => rest.next(),
            _ => return Err(format!("unknown argument {arg:?}")),
        };
        let seconds: f64 = value
            .as_deref()
            .and_then(|value| value.parse().ok())
            .filter(|seconds: &f64| seconds.is_finite() && *seconds > 0.0)
            .ok_or(
                "--established-timeout needs a number of seconds, e.g. --established-timeout 30",
            )?;
        established_timeout = Duration::from_secs_f64(seconds);
    }
    Ok((config_args, established_timeout))
}

fn fail(message: &str, hint: Option<String>) -> ExitCode {
    eprintln!("error: {message}");
    if let Some(hint) = hint {
        eprintln!("hint: {hint}");
    }
    ExitCode::FAILURE
}
