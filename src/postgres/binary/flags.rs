//! Support: a learner may skip it on first read. The flags of the stages that run the Postgres
//! operator (the reconcile timer, the lost-member delay, where `/metrics` is served, leader
//! election; a layer adds its own), the options they set, and `--help`'s examples.

use std::net::SocketAddr;
use std::time::Duration;

use crate::config::ConfigArgs;
use crate::leader::LeaderElectionArgs;
use crate::postgres::cluster::PostgresOptions;
use crate::postgres::plan::Delays;
use crate::process::parse_seconds;
use crate::watch::WatchOptions;

/// The flags stages 04 to 06 take besides the connection's and their layer's: the reconcile
/// timer, the lost-member delay, where `/metrics` is served, and leader election.
#[derive(clap::Args, Clone, Debug)]
pub struct PostgresFlags {
    /// How often each cluster is reconciled when nothing happens, in seconds (pod changes wake it sooner)
    #[arg(long, value_name = "SECS", default_value = "8", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub reconcile_interval: Duration,
    /// How long a replica may be unready before it is replaced, in seconds
    #[arg(long, value_name = "SECS", default_value = "60", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub member_lost_after: Duration,
    /// The longest watch asked of the API server, in seconds (each asks between 85 % and 100 % of it); /healthz fails once a watch has not moved for twice this plus 60 s
    #[arg(long, value_name = "SECS", default_value = "340", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub watch_timeout: Duration,
    /// Where /metrics (Prometheus), /healthz and /readyz (probes) are served, as IP:PORT (port 0: any free one)
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:8080")]
    pub metrics_address: SocketAddr,
    #[command(flatten)]
    pub leader_election: LeaderElectionArgs,
}

impl PostgresFlags {
    /// The tasks' options these flags set; the rest as `PostgresOptions::default()`.
    pub fn options(&self) -> PostgresOptions {
        PostgresOptions {
            reconcile_interval: self.reconcile_interval,
            delays: Delays {
                member_lost_after: self.member_lost_after,
            },
            // Spread between 85 % and 100 %, as the default 290–340 s is: watches started
            // together (after a relist) do not all end, and reconnect, at the same moment.
            watch: WatchOptions {
                watch_timeout_min: self.watch_timeout * 85 / 100,
                watch_timeout_max: self.watch_timeout,
                ..WatchOptions::default()
            },
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
  {name} --member-lost-after 120            # the cluster your kubeconfig points at
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
        let flags = PostgresStageFlags::try_parse_from(["stage04", "--member-lost-after=9"])
            .expect("the delay flag");
        let delays = flags.operator.options().delays;
        assert_eq!(delays.member_lost_after, Duration::from_secs(9));
    }
}
