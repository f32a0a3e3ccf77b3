//! Stage 03 of the workshop: one task per cluster, each with its own channel and a reconcile
//! timer — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 03". New since stage 02: `controller/` — the controller routes each
//! list-then-watch event to the cluster's own task (`controller/mod.rs`); the task sets the
//! cluster up, follows spec updates, reconciles every few seconds and cleans up when the cluster
//! is deleted (`controller/cluster.rs`), looking at pods through `controller/pods.rs`. Stage 02's
//! lines come first, unchanged; every line about one cluster is prefixed with `[namespace/name]`.
//!
//! ```text
//! cargo run --bin sandbox -- --listen 127.0.0.1:8001           # terminal 1
//! cargo run --bin stage03 -- --server http://127.0.0.1:8001    # terminal 2
//! kubectl --server http://127.0.0.1:8001 create -f kube/example-postgres-cluster.yaml   # terminal 3
//! kubectl --server http://127.0.0.1:8001 patch pgc example-postgresql-cluster --type merge -p '{"spec":{"size":5}}'
//! kubectl --server http://127.0.0.1:8001 delete pgc example-postgresql-cluster
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr.
//! Flags: the connection flags of every stage (`--server`, `--certificate-authority`,
//! `--token-file`, `--token`, `--namespace`) and `--reconcile-interval SECS` (default 8, as in the
//! original); `stage03 --help` lists them (the text is `USAGE` below).

use std::process::ExitCode;
use std::time::Duration;

use postgres_operator::client::Client;
use postgres_operator::config::ConfigArgs;
use postgres_operator::controller::{run_operator, ControllerOptions, Reporter};
use postgres_operator::process::{
    help_requested, init_logging, shutdown_signal, usage_error, Usage,
};

const USAGE: Usage = Usage {
    name: "stage03",
    about: "stage03: workshop step 03. The operator: lists and watches the PostgresClusters and hands\n\
            each cluster's events to its own task, with its own channel and a reconcile timer, until\n\
            SIGTERM or Ctrl-C. Lines about one cluster start with [namespace/name].",
    flags: &[(
        "--reconcile-interval SECS",
        "how often each cluster's task reconciles (default 8, as the original)",
    )],
    connection_flags: true,
    examples: &[
        "stage03 --server http://127.0.0.1:8001     # the sandbox, or a cluster through kubectl proxy",
        "stage03 --reconcile-interval 2             # the cluster your kubeconfig points at",
        "stage03 --server https://127.0.0.1:8443 --certificate-authority creds/ca.crt --token-file creds/token",
    ],
    exit_status: "0 stopped by SIGTERM or Ctrl-C, 1 the API server or configuration said no, 2 bad flags",
};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if help_requested(&args) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    init_logging();
    let (config_args, options) = match parse_flags(args) {
        Ok(flags) => flags,
        Err(message) => return usage_error(message),
    };
    let client = match Client::infer(&config_args) {
        Ok(client) => client,
        Err(error) => return fail(&error.to_string()),
    };

    // Every story line, in order, on stdout; the channel closes when the operator has stopped.
    let (reporter, mut lines) = Reporter::channel();
    let printer = tokio::spawn(async move {
        while let Some(line) = lines.recv().await {
            println!("{line}");
        }
    });
    let outcome = run_operator(client, options, reporter, shutdown_signal()).await;
    let _ = printer.await;
    match outcome {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(hint) = error.hint() {
                eprintln!("hint: {hint}");
            }
            fail(&error.to_string())
        }
    }
}

fn parse_flags(
    args: impl IntoIterator<Item = String>,
) -> Result<(ConfigArgs, ControllerOptions), String> {
    let (config_args, rest) = ConfigArgs::parse(args).map_err(|error| error.to_string())?;
    let mut options = ControllerOptions::default();
    let mut rest = rest.into_iter();
    while let Some(arg) = rest.next() {
        let value = match arg.split_once('=') {
            Some(("--reconcile-interval", value)) => value.to_string(),
            None if arg == "--reconcile-interval" => rest
                .next()
                .ok_or("--reconcile-interval needs a number of seconds")?,
            _ => return Err(format!("unknown argument {arg:?}")),
        };
        options.reconcile_interval = value
            .parse::<f64>()
            .ok()
            // `try_`: a value too large for a Duration (1e30) is an error, not a panic; and a
            // tokio interval panics on a zero period, which 1e-12 s rounds to.
            .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
            .filter(|interval| !interval.is_zero())
            .ok_or_else(|| {
                format!("--reconcile-interval: {value:?} is not a positive number of seconds")
            })?;
    }
    Ok((config_args, options))
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}
