//! Support: skip it on first read — part of leader election, which one replica never needs.
//!
//! The Lease as data: the `coordination.k8s.io/v1` object, the one decision a candidate makes
//! from it ("may I take it? is it still mine?"), and the bodies it writes. No I/O here: the
//! loop in `elect.rs` reads, calls these, and writes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::LeaderElection;
use crate::api::ObjectMeta;
use crate::events::rfc3339;

/// `coordination.k8s.io/v1`, the group and version Leases live in since Kubernetes 1.14.
pub const LEASE_API_VERSION: &str = "coordination.k8s.io/v1";

/// `/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases`: where a new Lease is POSTed.
pub fn leases_path(namespace: &str) -> String {
    format!("/apis/{LEASE_API_VERSION}/namespaces/{namespace}/leases")
}

/// `.../leases/{name}`: GET to read it, PUT (with its resourceVersion) to renew, take or release.
pub fn lease_path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", leases_path(namespace))
}

/// A `coordination.k8s.io/v1` Lease: the fields leader election reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: LeaseSpec,
}

/// What client-go's `LeaseLock` keeps in the Lease's spec (its `LeaderElectionRecord`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseSpec {
    /// Who leads; empty after a release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// How long others must wait, after they last saw this record change, before taking over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i64>,
    /// MicroTime: when the current holder took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// MicroTime: the holder's last renewal, by the holder's clock (informative only, see [`judge`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// How many times the lease changed hands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i64>,
    /// Spec fields this election does not model (`strategy`, `preferredHolder`, ...): every write
    /// is a PUT of the whole Lease, which would otherwise erase them.
    #[serde(flatten)]
    pub more: serde_json::Map<String, serde_json::Value>,
}

impl LeaseSpec {
    /// The holder, `None` when nobody holds it (never taken, or released with `""`).
    pub fn holder(&self) -> Option<&str> {
        self.holder_identity
            .as_deref()
            .filter(|holder| !holder.is_empty())
    }
}

/// What a candidate may do with the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody holds it: take it now.
    Released,
    /// It already names this identity (only with a fixed identity: `identity_from_env` makes a
    /// new one for every process).
    Ours,
    /// Another holder, silent for longer than its leaseDuration: take it.
    Expired { holder: String },
    /// Another holder who may still be acting: wait.
    Held {
        holder: String,
        expires_in: Duration,
    },
}

/// The decision, as client-go's `tryAcquireOrRenew` makes it. `observed_at` is the local instant
/// at which this candidate last saw the record change (a new renewTime, a new holder).
///
/// Why not compare `renewTime` with our own clock: renewTime was written with the holder's
/// clock, on another machine; a skew of a few seconds between nodes would have a standby take
/// over from a live leader (or wait too long). Instead each candidate measures with its own
/// monotonic clock from the moment *it* saw the record change; a holder that keeps renewing
/// keeps changing the record, so the lease only expires after leaseDuration of silence, however
/// far apart the clocks are. Only the rate of the clocks must agree.
pub fn judge(spec: &LeaseSpec, observed_at: Instant, now: Instant, identity: &str) -> Verdict {
    let Some(holder) = spec.holder() else {
        return Verdict::Released;
    };
    if holder == identity {
        return Verdict::Ours;
    }
    // A missing or negative duration gives no protection: client-go reads it as 0 too.
    let seconds = spec.lease_duration_seconds.unwrap_or(0).max(0);
    let expires_at = observed_at + Duration::from_secs(seconds.unsigned_abs());
    if now >= expires_at {
        Verdict::Expired {
            holder: holder.to_string(),
        }
    } else {
        Verdict::Held {
            holder: holder.to_string(),
            expires_in: expires_at - now,
        }
    }
}

/// The Lease `election` names, with its identity the holder. From `current` (the one read,
/// with its resourceVersion, so the PUT fails with 409 if someone else wrote in between), or a
/// new one to POST when there is none. `acquireTime` and `leaseTransitions` move only when the
/// holder changes, as client-go does.
pub fn taken(current: Option<&Lease>, election: &LeaderElection, now: SystemTime) -> Lease {
    let stamp = micro_time(now);
    let mut lease = current.cloned().unwrap_or_else(|| Lease {
        api_version: LEASE_API_VERSION.into(),
        kind: "Lease".into(),
        metadata: ObjectMeta {
            name: election.lease_name.clone(),
            namespace: election.namespace.as_str().into(),
            ..ObjectMeta::default()
        },
        spec: LeaseSpec::default(),
    });
    let spec = &mut lease.spec;
    let identity = &election.identity;
    if current.is_none() {
        spec.lease_transitions = Some(0);
        spec.acquire_time = Some(stamp.clone());
    } else if spec.holder() != Some(identity) {
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        spec.acquire_time = Some(stamp.clone());
    }
    spec.holder_identity = Some(identity.clone());
    spec.lease_duration_seconds = Some(whole_seconds(election.lease_duration));
    spec.renew_time = Some(stamp);
    lease
}

/// Our Lease with a new renewTime: the change every other candidate watches for.
pub fn renewed(ours: &Lease, now: SystemTime) -> Lease {
    let mut lease = ours.clone();
    lease.spec.renew_time = Some(micro_time(now));
    lease
}

/// client-go's `ReleaseOnCancel`: holder `""` (free for the next candidate at its next read, no
/// waiting out the duration) and leaseDurationSeconds 1 (a candidate that still sees our name,
/// by an old read, waits one second only). The transitions count is kept.
pub fn released(ours: &Lease, now: SystemTime) -> Lease {
    let mut lease = ours.clone();
    let stamp = micro_time(now);
    lease.spec.holder_identity = Some(String::new());
    lease.spec.lease_duration_seconds = Some(1);
    lease.spec.acquire_time = Some(stamp.clone());
    lease.spec.renew_time = Some(stamp);
    lease
}

/// A Lease's duration field holds whole seconds; round up so we never promise less than asked,
/// and at least 1.
fn whole_seconds(duration: Duration) -> i64 {
    let seconds = duration.as_secs() + u64::from(duration.subsec_nanos() > 0);
    i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
}

/// `2026-11-22T10:04:05.123456Z`: Kubernetes' MicroTime, the type of a Lease's acquireTime and
/// renewTime. kube-apiserver parses it with Go's layout `2006-01-02T15:04:05.000000Z07:00`, so
/// the six digits of microseconds are part of the format, not decoration.
pub fn micro_time(time: SystemTime) -> String {
    let whole = rfc3339(time);
    let micros = time
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.subsec_micros());
    match whole.strip_suffix('Z') {
        Some(seconds) => format!("{seconds}.{micros:06}Z"),
        None => whole,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, seconds: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    /// Another holder's lease is valid for leaseDuration after *we* saw it change, whatever its
    /// renewTime says; then it has expired.
    #[test]
    fn expiry_counts_from_when_we_observed_the_change() {
        let seen = Instant::now();
        let mut spec = held_by("a_1", 15);
        // A renewTime far in the past by our clock changes nothing: only our observation counts.
        spec.renew_time = Some("1999-01-01T00:00:00.000000Z".into());
        assert_eq!(
            judge(&spec, seen, seen + Duration::from_secs(14), "b_2"),
            Verdict::Held {
                holder: "a_1".into(),
                expires_in: Duration::from_secs(1)
            }
        );
        assert_eq!(
            judge(&spec, seen, seen + Duration::from_secs(15), "b_2"),
            Verdict::Expired {
                holder: "a_1".into()
            }
        );
    }

    /// A released lease (holder `""`) or one never held is free at once; our own is ours.
    #[test]
    fn released_is_free_and_ours_is_ours() {
        let now = Instant::now();
        assert_eq!(judge(&held_by("", 1), now, now, "b_2"), Verdict::Released);
        assert_eq!(
            judge(&LeaseSpec::default(), now, now, "b_2"),
            Verdict::Released
        );
        assert_eq!(judge(&held_by("b_2", 15), now, now, "b_2"), Verdict::Ours);
        // No duration at all protects nobody.
        let mut spec = held_by("a_1", 0);
        spec.lease_duration_seconds = None;
        assert!(matches!(
            judge(&spec, now, now, "b_2"),
            Verdict::Expired { .. }
        ));
    }

    /// Taking over bumps leaseTransitions and acquireTime and keeps the resourceVersion for the
    /// conditional PUT; a new lease starts at 0 transitions; renewing moves renewTime only.
    #[test]
    fn bodies_written_for_take_renew_and_release() {
        let t0 = UNIX_EPOCH + Duration::from_micros(1_795_341_845_000_001);
        // One lease, ops/postgres-operator, taken by one candidate and then by another.
        let take = |current: Option<&Lease>, holder: &str, duration: Duration, now: SystemTime| {
            let election = LeaderElection {
                identity: holder.into(),
                lease_duration: duration,
                ..LeaderElection::new("ops")
            };
            taken(current, &election, now)
        };
        let fresh = take(None, "a_1", Duration::from_secs(15), t0);
        assert_eq!(fresh.metadata.name, "postgres-operator");
        assert_eq!(fresh.metadata.namespace, "ops");
        assert_eq!(fresh.api_version, "coordination.k8s.io/v1");
        assert_eq!(fresh.spec.holder(), Some("a_1"));
        assert_eq!(fresh.spec.lease_transitions, Some(0));
        assert_eq!(fresh.spec.lease_duration_seconds, Some(15));
        assert_eq!(
            fresh.spec.renew_time.as_deref(),
            Some("2026-11-22T10:04:05.000001Z")
        );

        let mut stored = fresh.clone();
        stored.metadata.resource_version = "42".into();
        let t1 = t0 + Duration::from_millis(2500);
        let renewal = renewed(&stored, t1);
        assert_eq!(renewal.metadata.resource_version, "42");
        assert_eq!(renewal.spec.acquire_time, fresh.spec.acquire_time);
        assert_eq!(
            renewal.spec.renew_time.as_deref(),
            Some("2026-11-22T10:04:07.500001Z")
        );

        let takeover = take(Some(&stored), "b_2", Duration::from_millis(1500), t1);
        assert_eq!(takeover.metadata.resource_version, "42");
        assert_eq!(takeover.spec.holder(), Some("b_2"));
        assert_eq!(takeover.spec.lease_transitions, Some(1));
        assert_eq!(takeover.spec.acquire_time, takeover.spec.renew_time);
        assert_eq!(takeover.spec.lease_duration_seconds, Some(2));

        let release = released(&stored, t1);
        assert_eq!(release.spec.holder_identity.as_deref(), Some(""));
        assert_eq!(release.spec.holder(), None);
        assert_eq!(release.spec.lease_duration_seconds, Some(1));
        assert_eq!(release.spec.lease_transitions, Some(0));
        // The release is sent as `holderIdentity: ""`, not left out.
        let body = serde_json::to_value(&release).unwrap();
        assert_eq!(body["spec"]["holderIdentity"], "");
    }
}
