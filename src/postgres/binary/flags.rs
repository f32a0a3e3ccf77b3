//! Support: a learner may skip it on first read. The flags of the stages that run the Postgres
//! operator (the reconcile timer, the failover delays, where `/metrics` is served, the agent's
//! image, leader election), the options they set, and `--help`'s examples.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::ConfigArgs;
use crate::leader::LeaderElectionArgs;
use crate::postgres::cluster::PostgresOptions;
use crate::postgres::manifests::DEFAULT_AGENT_IMAGE;
use crate::postgres::plan::Delays;
use crate::process::parse_seconds;
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

/// `--help`'s examples for the stage binary `name`.
pub(super) fn examples(name: &str) -> String {
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
