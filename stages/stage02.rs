//! Stage 02 of the workshop: list the existing PostgresClusters, then watch for changes, and print
//! each one — until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, "Step 02". New since stage 01, in the order the step's Lesson reads it: the typed
//! `PostgresCluster` (`src/api.rs`); `list_then_watch` (`src/watch/mod.rs`), which lists, watches
//! from the list's resourceVersion, resumes when a watch ends, relists after a 410, and backs off
//! on failures (`recover.rs`); the socket's bytes → lines (`frame.rs`); lines → events
//! (`event.rs`). The lines it prints are `src/story.rs`'s. The CRD is checked with `crd_check::check` (`src/crd_check.rs`): created if
//! absent, else left as it is — changing it is stage 01's job, not every operator's.
//!
//! ```text
//! cargo run --bin sandbox                          # terminal 1: prints the two export lines
//! export KUBECONFIG=/tmp/sandbox-8001/kubeconfig   # in each other terminal (and KUBECACHEDIR)
//! cargo run --bin stage02                          # terminal 3
//! kubectl apply -f kube/example-postgres-cluster.yaml   # terminal 2
//! kubectl patch pgc example-postgresql-cluster --type merge -p '{"spec":{"size":5}}'
//! kubectl delete pgc example-postgresql-cluster
//! ```
//!
//! Story lines go to stdout, diagnostics (`RUST_LOG=debug` for more) to stderr. `stage02 --help`
//! lists the flags.

use std::process::ExitCode;

use clap::Parser;
use postgres_operator::api::{collection_path, PostgresCluster};
use postgres_operator::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::crd::DEFAULT_ESTABLISHED_TIMEOUT;
use postgres_operator::crd_check;
use postgres_operator::process::{fail, start};
use postgres_operator::story::event_lines;
use postgres_operator::watch::{list_then_watch, WatchOptions, Watcher};

/// stage02: workshop step 02. Lists the PostgresClusters, then watches for changes and prints each
/// one, resuming, relisting and backing off as Kubernetes requires, until SIGTERM or Ctrl-C.
/// Creates the CustomResourceDefinition first if it is absent; never changes one that exists.
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct Flags {
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  stage02                                    # the sandbox, after its `export KUBECONFIG=...` line
  stage02 --server http://127.0.0.1:8001     # a cluster through `kubectl proxy --port 8001`
  stage02 --namespace team-a                 # the cluster your kubeconfig points at
  RUST_LOG=debug stage02 --server http://127.0.0.1:8001   # and every request on stderr

Exit status: 0 stopped by SIGTERM or Ctrl-C, 1 the API server or configuration said no, 2 bad flags";

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    let Ok((client, shutdown)) = start(&flags.connection).await else {
        return ExitCode::FAILURE; // `start` has said why
    };
    // Make sure our resource type exists and is served: created if absent, as the workshop's
    // operators did at start; if present, checked and left as it is (stage 01 owns it).
    let registered = crd_check::check(&client, DEFAULT_ESTABLISHED_TIMEOUT, |found| {
        println!("{found}")
    });
    tokio::select! {
        registered = registered => if let Err(error) = registered {
            return fail(&error, error.hint(), &client);
        },
        () = shutdown.cancelled() => return ExitCode::SUCCESS,
    }
    println!("Finding existing clusters...");
    let path = collection_path(client.namespace());
    let watcher = list_then_watch(client, path, WatchOptions::default(), shutdown);
    print_story(watcher).await;
    ExitCode::SUCCESS
}

/// Every event, change or notice, as the workshop's lines. Ends when the watch stops (on
/// shutdown).
async fn print_story(mut watcher: Watcher<PostgresCluster>) {
    let mut first_watch = true;
    while let Some(event) = watcher.events.recv().await {
        for line in event_lines(&event, &mut first_watch) {
            println!("{line}");
        }
    }
}
