//! Support: skip it on first read — with one replica of the operator nothing changes; leader
//! election matters when two run.
//!
//! One operator acts at a time: leader election on a `coordination.k8s.io/v1` Lease, as
//! client-go's `leaderelection` package does it with a `LeaseLock`.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: one operator at a time"). Two copies of the operator
//! run at once during every rolling update, and `replicas: 2` keeps a standby warm; both would
//! create pods and fail over the same clusters. So each candidate tries to write its name into
//! one Lease; whoever holds it acts, the others wait and read it every retry period.
//!
//! | file | what it holds |
//! |---|---|
//! | `lease.rs` | the Lease as data: the decision "may I take it?" from a Lease, when we saw it change and now; the bodies to write |
//! | `elect.rs` | the loop: acquire, act while renewing, hold writes back while a renewal is late, stop when another holds it, release on shutdown |
//! | `gate.rs` | what every write of the work passes: the last renewal younger than the renew deadline, by the monotonic clock |
//! | `term.rs` | the leader's term, and the fence in each member that refuses a command of an earlier term |
//! | `stamp.rs` | the term stamped on every pod, and the label or deletion the API server refuses once a later one is |
//!
//! ```text
//! GET lease ── 404 ──▶ POST (ours) ─────────────────────────┐
//!    │ held by another, seen changing < leaseDuration ago:  │
//!    │    wait retryPeriod, GET again                        ▼
//!    └ free / expired ──▶ PUT with its resourceVersion ──▶ leading: work(gated client, token)
//!          (409: another candidate won; wait)                 │ PUT renewTime every retryPeriod
//!                                                            │ none succeeded for renewDeadline:
//!                                                            │   the gate holds writes back; GET
//!                                                            │   first: still ours ─▶ PUT, go on
//!                                                            │ another holder: stop, Err(Lost)
//!                                          shutdown ──▶ cancel the work, wait for it, then
//!                                                       PUT holder "" (released), Ok
//! ```

mod elect;
mod gate;
mod lease;
mod stamp;
mod term;

pub use elect::{
    holding_back_line, leading_line, lost_line, released_line, renewed_again_line,
    run_when_leading, waiting_line, Takeover,
};
pub use gate::LeaseGate;
pub use lease::{
    judge, lease_path, leases_path, micro_time, released, renewed, taken, Lease, LeaseSpec,
    Verdict, LEASE_API_VERSION,
};
pub use stamp::{
    conditional_patch, delete_in_term, patch_in_term, stamp_pods, stamped_term, TERM_ANNOTATION,
};
pub use term::{fenced_argv, term, FENCED_EXIT, TERM_FILE};

use std::time::Duration;

use crate::client::ClientError;
use crate::process::parse_seconds;

/// The Lease's name when `--lease-name` is not given (the Deployment's name, as
/// controller-runtime's `LeaderElectionID` usually is).
pub const DEFAULT_LEASE_NAME: &str = "postgres-operator";
/// client-go's and controller-runtime's defaults: a standby waits 15 s after the holder's last
/// renewal it saw; the holder holds its writes back after 10 s without a successful renewal
/// (so it has stopped 5 s before anyone may take over); every candidate retries every 2 s.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// The variable holding the pod's name: the kubelet sets `HOSTNAME` to it in every container.
pub const HOSTNAME_ENV: &str = "HOSTNAME";

/// Which Lease, who we are, and the three durations of client-go's `LeaderElectionConfig`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElection {
    pub namespace: String,
    pub lease_name: String,
    /// Unique per process: written into the Lease as `holderIdentity`.
    pub identity: String,
    /// How long a standby waits, after it last saw the Lease change, before taking over.
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal.
    pub renew_deadline: Duration,
    /// How often every candidate reads (and the leader renews) the Lease.
    pub retry_period: Duration,
}

impl LeaderElection {
    /// The defaults, for the Lease `namespace/postgres-operator`, as [`identity_from_env`].
    pub fn new(namespace: &str) -> LeaderElection {
        LeaderElection {
            namespace: namespace.into(),
            lease_name: DEFAULT_LEASE_NAME.into(),
            identity: identity_from_env(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }

    /// `namespace/name`, as the story lines say it.
    pub fn lease_key(&self) -> String {
        format!("{}/{}", self.namespace, self.lease_name)
    }

    /// client-go's checks (`NewLeaderElector`): the leader must give up before a standby may
    /// take over, and must get more than one try at renewing before it gives up.
    pub fn validate(&self) -> Result<(), LeaderError> {
        let invalid = |reason: String| Err(LeaderError::InvalidTimings { reason });
        if self.renew_deadline >= self.lease_duration {
            return invalid(format!(
                "--renew-deadline ({:?}) must be shorter than --lease-duration ({:?}): the leader must stop writing before a standby may take over",
                self.renew_deadline, self.lease_duration
            ));
        }
        if self.retry_period >= self.renew_deadline {
            return invalid(format!(
                "--retry-period ({:?}) must be shorter than --renew-deadline ({:?}): the leader needs more than one try at renewing",
                self.retry_period, self.renew_deadline
            ));
        }
        if self.identity.is_empty() || self.lease_name.is_empty() {
            return invalid("the lease name and the identity must not be empty".into());
        }
        Ok(())
    }
}

/// The leader-election flags, with controller-runtime's names and client-go's defaults: a binary
/// flattens them into its own parser (`#[command(flatten)]`).
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Leader election (one operator acts at a time)")]
pub struct LeaderElectionArgs {
    /// Act only while holding the Lease, so one operator acts at a time (--leader-elect=false: act at once, alone)
    #[arg(long, value_name = "BOOL", default_value_t = true, num_args = 0..=1, require_equals = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// The Lease's name, in the operator's namespace
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LEASE_NAME, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub lease_name: String,
    /// How long a standby waits, after it last saw the leader renew, before taking over, in seconds
    #[arg(long, value_name = "SECS", default_value = "15", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal, in seconds
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub renew_deadline: Duration,
    /// How often candidates try for the Lease and the leader renews it, in seconds
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub retry_period: Duration,
}

impl LeaderElectionArgs {
    /// The election these flags ask for in `namespace` (`None` with --leader-elect=false), as
    /// [`identity_from_env`], checked by [`LeaderElection::validate`].
    pub fn election(&self, namespace: &str) -> Result<Option<LeaderElection>, LeaderError> {
        if !self.leader_elect {
            return Ok(None);
        }
        let election = LeaderElection {
            lease_name: self.lease_name.clone(),
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaderElection::new(namespace)
        };
        election.validate()?;
        Ok(Some(election))
    }

    /// The same checks before there is a namespace: a binary calls this right after parsing, so
    /// durations that cannot work are a usage error (exit 2) before any connection is made.
    pub fn check(&self) -> Result<(), LeaderError> {
        self.election("default").map(|_| ())
    }
}

/// `<pod name>_<random digits>`: the pod name so that a person (or a test) reading the Lease can
/// tell which pod leads; the random part because a restarted container keeps its pod name, and
/// must not mistake the lease its previous life held (and may still be acting on, if it was
/// the other way round: a partitioned old process) for its own. client-go uses hostname_UUID.
/// Outside a pod `HOSTNAME` is often not exported; the kernel's hostname stands in.
pub fn identity_from_env() -> String {
    let host = std::env::var(HOSTNAME_ENV)
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "postgres-operator".into());
    format!("{host}_{}", random_digits())
}

/// Ten random digits without a random-number crate: std's `RandomState` is seeded from the OS
/// per process, which is all the uniqueness an identity needs.
fn random_digits() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("{:010}", hasher.finish() % 10_000_000_000)
}

/// Why leader election stopped, or never started.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The durations cannot work together (see [`LeaderElection::validate`]).
    #[error("leader election: {reason}")]
    InvalidTimings { reason: String },
    /// The API server refused to let us read or write the Lease: not worth retrying (403 from
    /// RBAC names the missing verb and resource; 404 a namespace that does not exist).
    #[error("leader election: {step} lease {lease}: {source}")]
    Refused {
        step: &'static str,
        lease: String,
        // Boxed: a ClientError is large, and every Result of this module would carry its size.
        #[source]
        source: Box<ClientError>,
    },
    /// We led, and then found another holder in the Lease: we stopped acting.
    #[error("lost lease {lease}: {why}")]
    Lost { lease: String, why: String },
}

impl LeaderError {
    /// What to do about it, for the binary's `hint:` line.
    pub fn hint(&self) -> Option<String> {
        match self {
            LeaderError::Refused { source, .. } if source.status_code() == Some(403) => Some(
                "the operator's service account needs get, create and update on leases \
                 (coordination.k8s.io) in its namespace: see kube/rbac.yaml"
                    .into(),
            ),
            LeaderError::Lost { .. } => Some(
                "another operator may have taken over; in a pod the kubelet restarts this one, \
                 which then waits as a standby"
                    .into(),
            ),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults are client-go's and pass its checks; durations that would let two leaders
    /// act at once are refused with the flag names.
    #[test]
    fn timings_are_checked_as_client_go_does() {
        let election = LeaderElection::new("ops");
        assert_eq!(election.validate().ok(), Some(()));
        assert_eq!(election.lease_key(), "ops/postgres-operator");
        let mut late = election.clone();
        late.renew_deadline = late.lease_duration;
        let error = late.validate().unwrap_err().to_string();
        assert!(error.contains("--renew-deadline"), "{error}");
        let mut slow = election;
        slow.retry_period = slow.renew_deadline;
        let error = slow.validate().unwrap_err().to_string();
        assert!(error.contains("--retry-period"), "{error}");
    }

    /// Two identities made in one process differ, and carry the host name before `_`.
    #[test]
    fn identities_are_the_host_and_random_digits() {
        let (a, b) = (identity_from_env(), identity_from_env());
        assert_ne!(a, b);
        let (host, digits) = a.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert!(digits.chars().all(|c| c.is_ascii_digit()), "{a}");
    }
}
