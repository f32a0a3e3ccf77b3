//! Stage 02 of the workshop: list the existing PostgresClusters, then watch for changes, and print
//! each one — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 02". New since stage 01: `watch/` — bytes → lines (`frame.rs`), lines →
//! typed events (`event.rs`), and `list_then_watch` (`watch/mod.rs`), which resumes from the last
//! resourceVersion when a watch ends, relists after a 410, and backs off on failures. Registering
//! the CRD is stage 01's library code, called again here (the CRD may already exist: fine).
//!
//! ```text
//! cargo run --bin sandbox                                      # terminal 1: prints its URL
//! cargo run --bin stage02 -- --server http://127.0.0.1:8001    # terminal 2
//! kubectl --server http://127.0.0.1:8001 apply -f kube/example-postgres-cluster.yaml   # terminal 3
//! kubectl --server http://127.0.0.1:8001 patch pgc example-postgresql-cluster --type merge -p '{"spec":{"size":5}}'
//! kubectl --server http://127.0.0.1:8001 delete pgc example-postgresql-cluster
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr.
//! Flags: the connection flags of every stage (`--server`, `--certificate-authority`,
//! `--token-file`, `--token`, `--namespace`); `stage02 --help` lists them (the text is `USAGE`
//! below).

use std::process::ExitCode;

use postgres_operator::api::{collection_path, PostgresCluster};
use postgres_operator::client::Client;
use postgres_operator::config::ConfigArgs;
use postgres_operator::crd::{self, CrdError, DEFAULT_ESTABLISHED_TIMEOUT};
use postgres_operator::process::{
    help_requested, init_logging, shutdown_signal, usage_error, Usage,
};
use postgres_operator::story::{event_line, watch_notice_lines};
use postgres_operator::watch::{list_then_watch, WatchItem, WatchOptions};

const USAGE: Usage = Usage {
    name: "stage02",
    about: "stage02: workshop step 02. Lists the PostgresClusters, then watches for changes and prints\n\
            each one, resuming, relisting and backing off as Kubernetes requires, until SIGTERM or\n\
            Ctrl-C. Registers the CustomResourceDefinition first, as stage01 does.",
    flags: &[],
    connection_flags: true,
    examples: &[
        "stage02 --server http://127.0.0.1:8001     # the sandbox, or a cluster through kubectl proxy",
        "stage02 --namespace team-a                 # the cluster your kubeconfig points at",
        "RUST_LOG=debug stage02 --server http://127.0.0.1:8001   # and every request on stderr",
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
    let config_args = match ConfigArgs::parse(args) {
        Ok((config_args, rest)) if rest.is_empty() => config_args,
        Ok((_, rest)) => return usage_error(format!("unknown argument {:?}", rest[0])),
        Err(error) => return usage_error(error),
    };
    let client = match Client::infer(&config_args) {
        Ok(client) => client,
        Err(error) => return fail(&error.to_string()),
    };

    // Listen for SIGTERM/Ctrl-C from the start: a stop during start-up is a clean stop too.
    let (stop_sender, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_sender.send(true);
    });
    let stopped = move || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
    };

    tokio::select! {
        registered = register_crd(&client) => if let Err(error) = registered {
            return fail(&error.to_string());
        },
        () = stopped() => return ExitCode::SUCCESS,
    }

    println!("Finding existing clusters...");
    let path = collection_path(client.namespace());
    let mut watcher =
        list_then_watch::<PostgresCluster>(client, path, WatchOptions::default(), stopped());
    let mut first_watch = true;
    // Ends when the watch task stops, which it does on SIGTERM/Ctrl-C.
    while let Some(item) = watcher.items.recv().await {
        match item {
            WatchItem::Event(event) => println!("{}", event_line(&event)),
            WatchItem::Notice(notice) => {
                for line in watch_notice_lines(&notice, &mut first_watch) {
                    println!("{line}");
                }
            }
        }
    }
    ExitCode::SUCCESS
}

/// Stage 01's step, reused: make sure our resource type exists and is served.
async fn register_crd(client: &Client) -> Result<(), CrdError> {
    println!("{}", crd::register(client).await?);
    crd::wait_established(client, DEFAULT_ESTABLISHED_TIMEOUT).await
}

fn fail(message: &str) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::FAILURE
}
