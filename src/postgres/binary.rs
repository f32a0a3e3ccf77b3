//! A stage binary's `main` for steps 04 and 05: the flags (the reconcile timer, the failover
//! delays, where `/metrics` is served, leader election), the `/metrics` server, and the operator
//! run under leader election with its story on stdout. Support: a learner may skip it on first
//! read — the operator itself is `operator.rs`'s `run_postgres_operator`; this is how a binary
//! sets it up and how it stops.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: one operator at a time", "Inside step 04: watching the
//! operator").

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::cluster::{ClusterLayer, PostgresOptions};
use super::manifests::DEFAULT_AGENT_IMAGE;
use super::operator::run_postgres_operator;
use super::plan::Delays;
use crate::client::Client;
use crate::config::{ConfigArgs, CONNECTION_ORDER_HELP};
use crate::controller::ControllerStopped;
use crate::crd::CrdError;
use crate::leader::{run_when_leading, LeaderElection, LeaderElectionArgs, LeaderError};
use crate::metrics::{serve, HealthBounds};
use crate::process::{fail, parse_seconds, start};
use crate::story::Reporter;
use crate::watch::WatchOptions;

/// The flags stage 04 and stage 05 take besides the connection's: the reconcile timer, the
/// failover delays, where `/metrics` is served, and leader election.
#[derive(clap::Args, Clone, Debug)]
pub struct PostgresFlags {
    /// How often each cluster is reconciled when nothing happens, in seconds (pod changes wake it sooner)
    #[arg(long, value_name = "SECS", default_value = "8", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub reconcile_interval: Duration,
    /// How long the primary may be unready, its readiness probe failing, before a replica is promoted, in seconds (a container that exited or a node lost does not wait this delay)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub failover_after: Duration,
    /// How long a replica may be unready before it is replaced, in seconds
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub member_lost_after: Duration,
    /// How long a deleted primary may take to stop before it is fenced and a replica promoted without it, in seconds
    #[arg(long, value_name = "SECS", default_value = "20", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub stop_timeout: Duration,
    /// How long a Ready replica may be missing from the primary's pg_stat_replication before it is replaced, in seconds
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub not_streaming_after: Duration,
    /// The longest watch asked of the API server, in seconds (each asks between 85 % and 100 % of it); /healthz fails once a watch has not moved for twice this plus 60 s
    #[arg(long, value_name = "SECS", default_value = "340", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub watch_timeout: Duration,
    /// Where /metrics (Prometheus), /healthz and /readyz (probes) are served, as IP:PORT (port 0: any free one)
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:8080")]
    pub metrics_address: SocketAddr,
    /// The operator's image, from which every member pod copies its readiness agent (pg-ready); on kind, load it first (`kind load docker-image postgres-operator:latest`)
    #[arg(long, value_name = "IMAGE", default_value = DEFAULT_AGENT_IMAGE)]
    pub agent_image: String,
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
}

impl PostgresFlags {
    /// The tasks' options these flags set; the rest as `PostgresOptions::default()`.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            reconcile_interval: self.reconcile_interval,
            delays: Delays {
                failover_after: self.failover_after,
                member_lost_after: self.member_lost_after,
                stop_timeout: self.stop_timeout,
                not_streaming_after: self.not_streaming_after,
            },
            // Spread between 85 % and 100 %, as the default 290–340 s is: watches started
            // together (after a relist) do not all end, and reconnect, at the same moment.
            watch: WatchOptions {
                watch_timeout_min: self.watch_timeout * 85 / 100,
                watch_timeout_max: self.watch_timeout,
                ..WatchOptions::default()
            },
            agent_image: self.agent_image.clone(),
            ..PostgresOptions::default()
        }
    }
}

/// The whole command line of a stage that runs this operator: its flags and the connection's.
#[derive(clap::Parser, Debug)]
pub struct PostgresStageFlags {
    #[command(flatten)]
    pub operator: PostgresFlags,
    #[command(flatten)]
    pub connection: ConfigArgs,
}

/// The `main` of `stages/stage04.rs` (and of a later stage, with its `layer`): the command line
/// `name --help` describes with `about`, then connect ([`start`]) and run the operator with the
/// options the flags set, under leader election as they say, its story on stdout. Exit status 0
/// after SIGTERM or Ctrl-C (the Lease released); 1, with the reason, when the start failed or
/// the Lease was lost; 2 for bad flags.
pub async fn run_postgres_binary<L: ClusterLayer>(
    name: &'static str,
    about: &'static str,
    layer: L,
) -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let command = PostgresStageFlags::command()
        .name(name)
        .bin_name(name)
        .about(about)
        .after_help(format!("{CONNECTION_ORDER_HELP}\n\n{}", examples(name)));
    let flags = PostgresStageFlags::from_arg_matches(&command.clone().get_matches())
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
        // Not fatal: a second copy on one machine (the standby of step 04's terminal 4) finds
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

/// `--help`'s examples for the stage binary `name`.
fn examples(name: &str) -> String {
    format!(
        "\
Examples:
  {name}                                    # the sandbox, after its `export KUBECONFIG=...` line
  {name} --server http://127.0.0.1:8001     # a cluster through `kubectl proxy --port 8001`
  {name} --failover-after 5                 # the cluster your kubeconfig points at
  {name} --server https://127.0.0.1:8443 --certificate-authority creds/ca.crt --token-file creds/token
  {name} --leader-elect=false               # act at once, sure that no other copy runs

Exit status: 0 stopped by SIGTERM or Ctrl-C (the Lease released), 1 the API server or configuration
said no, or the Lease was lost (another copy may act now), 2 bad flags"
    )
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
        let (client, reporter) = (client.clone(), reporter.clone());
        move |acting| run_postgres_operator(client, options, layer, reporter, acting)
    };
    match election {
        Some(election) => {
            metrics.standing_by();
            run_when_leading(client, election, reporter, shutdown, operator).await
        }
        None => Ok(Some(operator(shutdown).await)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// With no flag, the delays are `Delays::default()`'s: the flags' defaults and the code's
    /// cannot drift apart.
    #[test]
    fn the_flags_defaults_are_the_delays_defaults() {
        let flags = PostgresStageFlags::try_parse_from(["stage04"]).expect("no flags");
        assert_eq!(flags.operator.options().delays, Delays::default());
        let flags = PostgresStageFlags::try_parse_from([
            "stage04",
            "--stop-timeout=5",
            "--not-streaming-after=9",
        ])
        .expect("the delay flags");
        let delays = flags.operator.options().delays;
        assert_eq!(delays.stop_timeout, Duration::from_secs(5));
        assert_eq!(delays.not_streaming_after, Duration::from_secs(9));
    }
}
