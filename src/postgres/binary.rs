//! A stage binary's `main` for steps 04 to 06: read the flags (`binary/flags.rs`), serve
//! `/metrics`, and run the operator (`operator.rs`'s `run_postgres_operator`) under leader
//! election, its story on stdout, until SIGTERM or Ctrl-C.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: one operator at a time", "Inside step 04: watching the
//! operator").

use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::cluster::{ClusterLayer, PostgresOptions};
use super::operator::run_postgres_operator;
use crate::client::Client;
use crate::config::CONNECTION_ORDER_HELP;
use crate::controller::ControllerStopped;
use crate::crd::CrdError;
use crate::leader::{run_when_leading, LeaderElection, LeaderError};
use crate::metrics::{serve, HealthBounds};
use crate::process::{fail, start};
use crate::story::Reporter;

mod flags;

use flags::examples;
pub use flags::{PostgresFlags, PostgresStageFlags};

/// The `main` of `stages/stage04.rs` (and of a later stage, with its layer `L`): the command
/// line `name --help` describes with `about` (with `L`'s own flags), then connect ([`start`])
/// and run the operator with the options the flags set, under leader election as they say, its
/// story on stdout. Exit status 0 after SIGTERM or Ctrl-C (the Lease released); 1, with the
/// reason, when the start failed or the Lease was lost; 2 for bad flags.
pub async fn run_postgres_binary<L: ClusterLayer>(
    name: &'static str,
    about: &'static str,
) -> ExitCode {
    use clap::{Args, CommandFactory, FromArgMatches};
    let command = L::Flags::augment_args(PostgresStageFlags::command())
        .name(name)
        .bin_name(name)
        .about(about)
        .after_help(format!("{CONNECTION_ORDER_HELP}\n\n{}", examples(name)));
    let matches = command.clone().get_matches();
    let flags = PostgresStageFlags::from_arg_matches(&matches)
        .unwrap_or_else(|error| error.format(&mut command.clone()).exit());
    let layer = L::Flags::from_arg_matches(&matches)
        .map(L::from_flags)
        .unwrap_or_else(|error| error.format(&mut command.clone()).exit());
    if let Err(error) = flags.operator.leader_election.check() {
        command
            .clone()
            .error(clap::error::ErrorKind::ValueValidation, error)
            .exit();
    }
    let Ok((client, shutdown)) = start(&flags.connection).await else {
        return ExitCode::FAILURE; // `start` has said why
    };
    let options = flags.operator.options();
    let election = match flags.operator.leader_election.election(client.namespace()) {
        Ok(election) => election,
        Err(error) => return fail(&error, error.hint(), &client),
    };
    // The probes' bounds follow the timers they watch (see `HealthBounds::for_operator`).
    let bounds = HealthBounds::for_operator(options.reconcile_interval, &options.watch);
    let metrics = Arc::clone(&options.metrics);
    let address = flags.operator.metrics_address;
    if let Err(error) = serve(address, metrics, bounds, shutdown.clone()).await {
        // Not fatal: a second copy on one machine (terminal 4 of `stages/stage04.rs`) finds
        // the port taken. In a pod the liveness probe then fails, and says so.
        tracing::warn!(%address, %error, "not serving /metrics, /healthz and /readyz (pick another --metrics-address)");
    }
    let (reporter, printer) = Reporter::to_stdout();
    let outcome = run_postgres_operator_when_leading(
        client.clone(),
        options,
        layer,
        election,
        reporter,
        shutdown,
    )
    .await;
    let _ = printer.await;
    match outcome {
        Ok(None | Some(Ok(_))) => ExitCode::SUCCESS,
        Ok(Some(Err(error))) => fail(&error, error.hint(), &client),
        Err(error) => fail(&error, error.hint(), &client),
    }
}

/// [`run_postgres_operator`] while this process holds the Lease `election` names (another copy
/// holding it: wait, as a standby), or at once with `None` (`--leader-elect=false`). The outer
/// `Err` is the election's (the Lease was lost: stop, another copy may act now); `Ok(None)`:
/// shut down before ever leading.
pub async fn run_postgres_operator_when_leading<L: ClusterLayer>(
    client: Client,
    options: PostgresOptions,
    layer: L,
    election: Option<LeaderElection>,
    reporter: Reporter,
    shutdown: CancellationToken,
) -> Result<Option<Result<ControllerStopped, CrdError>>, LeaderError> {
    let client = client.observed_by(options.metrics.request_observer());
    let metrics = Arc::clone(&options.metrics);
    let operator = {
        let reporter = reporter.clone();
        // Leading, `client` writes only while the Lease is ours (`src/leader/gate.rs`).
        move |client, acting| run_postgres_operator(client, options, layer, reporter, acting)
    };
    match election {
        Some(election) => {
            metrics.standing_by();
            run_when_leading(client, election, reporter, shutdown, operator).await
        }
        None => Ok(Some(operator(client, shutdown).await)),
    }
}
