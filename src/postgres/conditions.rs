//! Support: skip it on first read — the round computes `status` from the same observation the
//! plan was made from; this file is the words and rules of it, which nothing the round decides
//! depends on.
//!
//! What the operator writes to `status`: the columns of `kubectl get pgc` and the conditions of
//! `kubectl describe pgc`, computed from the same observation the plan was made from.
//!
//! WORKSHOP.md, step 04 ("Status"). Pure functions; the task writes the result with one merge
//! patch of the `/status` subresource, and only when it differs from what is there — a status
//! write is a new resourceVersion and a MODIFIED event for every watcher, so writing an unchanged
//! status every tick would wake every client of the cluster for nothing.
//!
//! Conditions follow Kubernetes' convention (`metav1.Condition`): `type`, `status`
//! True/False/Unknown, a CamelCase `reason`, a `message`, and `lastTransitionTime`, which moves
//! only when `status` flips — a reason or message may change under the same status without
//! moving it. "Since when has it been unavailable" is what that time answers.

use crate::api::{Condition, PostgresCluster, PostgresClusterStatus};
use crate::controller::pods::label_selector;

use super::plan::{Action, Observed, Phase, VersionChange};

pub const PHASE_CREATING: &str = "Creating";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_FAILED: &str = "Failed";

/// The status for `cluster` after this observation. `primary`: the pod labelled primary now (or
/// the one the action just made primary: the seed, or a layer's promotion); `version`: what a `spec.version` change means; `now`: RFC 3339, used only
/// for conditions whose status flips. Fields this step does not write (a later step's, in
/// `more`) are carried over from `cluster.status`.
pub fn next_status(
    cluster: &PostgresCluster,
    observed: &Observed,
    primary: Option<&str>,
    action: &Action,
    version: &VersionChange,
    now: &str,
) -> PostgresClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let alive: Vec<_> = observed
        .members
        .iter()
        .filter(|m| m.phase != Phase::Terminating)
        .collect();
    let ready = alive.iter().filter(|m| m.ready).count();
    let primary_ready = primary.is_some_and(|name| alive.iter().any(|m| m.name == name && m.ready));

    let phase = if matches!(action, Action::Disaster)
        || (previous.phase.as_deref() == Some(PHASE_FAILED) && alive.is_empty())
    {
        PHASE_FAILED
    } else if primary_ready || previous.phase.as_deref() == Some(PHASE_RUNNING) {
        // Once running, a cluster stays Running while its primary is away; Available says the rest.
        PHASE_RUNNING
    } else {
        PHASE_CREATING
    };
    // The version the cluster runs: the spec's once every member runs it.
    let current_version =
        if !alive.is_empty() && alive.iter().all(|m| m.version == cluster.spec.version) {
            Some(cluster.spec.version.clone())
        } else {
            previous.current_version.clone().or_else(|| {
                alive
                    .iter()
                    .find(|m| Some(m.name.as_str()) == primary)
                    .map(|m| m.version.clone())
            })
        };

    let size = i64::try_from(observed.size).unwrap_or(i64::MAX);
    let ready_count = i64::try_from(ready).unwrap_or(i64::MAX);
    let available = if primary_ready {
        let message = format!("{} accepts writes", primary.unwrap_or_default());
        condition("Available", true, "PrimaryReady", message)
    } else if phase == PHASE_FAILED {
        let message = "every member is gone and there is no backup to restore";
        condition("Available", false, "AllMembersLost", message.into())
    } else {
        let message = "no primary is ready to accept writes";
        condition("Available", false, "NoReadyPrimary", message.into())
    };
    let (moving, reason, message) = match action {
        Action::Steady | Action::Disaster => (false, "Steady", "nothing to do".into()),
        Action::Wait(why) => (true, "Waiting", why.clone()),
        Action::CreateSeed => (true, "Seeding", "creating the first member".into()),
        Action::CreateReplica => (
            true,
            "ScalingUp",
            format!("adding a replica to reach {size}"),
        ),
        Action::Delete { pod, reason } => {
            (true, "Replacing", format!("deleting {pod}: {reason:?}"))
        }
    };
    let progressing = condition("Progressing", moving, reason, message);
    let members_ready = format!("{ready_count} of {size} members ready");
    let degraded = match version {
        VersionChange::Major { from, to } => condition(
            "Degraded",
            true,
            "MajorVersionChangeRefused",
            format!("spec.version asks for PostgreSQL {to}, the cluster runs {from}: a major upgrade needs pg_upgrade or a dump and restore, not a new image; set spec.version back to a {from}.x version"),
        ),
        VersionChange::NeedsReplica => condition(
            "Degraded",
            true,
            "UpgradeNeedsReplica",
            "a one-member cluster cannot change version without losing its data: scale to 2 first".into(),
        ),
        VersionChange::Invalid(error) => condition("Degraded", true, "InvalidVersion", error.clone()),
        _ if phase == PHASE_FAILED => all_members_lost(),
        _ if ready_count < size => condition("Degraded", true, "MembersNotReady", members_ready),
        _ => condition("Degraded", false, "AllMembersReady", members_ready),
    };

    let mut next = PostgresClusterStatus {
        phase: Some(phase.into()),
        primary: primary.map(str::to_string).or(previous.primary.clone()),
        size: Some(i64::try_from(alive.len()).unwrap_or(i64::MAX)),
        ready_instances: Some(ready_count),
        current_version,
        selector: Some(label_selector(&cluster.metadata.name)),
        observed_generation: cluster.metadata.generation,
        conditions: Vec::new(),
        ..previous.clone()
    };
    for condition in [available, progressing, degraded] {
        set_condition(&mut next, &previous, condition, now);
    }
    next
}

/// Put `condition` into `next` in place of its type's, with `lastTransitionTime` kept from
/// `previous` unless its status flips.
pub fn set_condition(
    next: &mut PostgresClusterStatus,
    previous: &PostgresClusterStatus,
    mut condition: Condition,
    now: &str,
) {
    condition.observed_generation = next.observed_generation;
    let before = previous.condition(&condition.type_);
    condition.last_transition_time = match before {
        Some(before) if before.status == condition.status => before.last_transition_time.clone(),
        _ => now.to_string(),
    };
    match next
        .conditions
        .iter_mut()
        .find(|c| c.type_ == condition.type_)
    {
        Some(slot) => *slot = condition,
        None => next.conditions.push(condition),
    }
}

/// Degraded when every member of a cluster that ran is gone.
pub fn all_members_lost() -> Condition {
    condition(
        "Degraded",
        true,
        "AllMembersLost",
        "every member of the running cluster is gone".into(),
    )
}

/// A condition with no times yet ([`set_condition`] sets them).
pub fn condition(type_: &str, status: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        last_transition_time: String::new(),
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PostgresClusterSpec;
    use crate::postgres::manifests::Role;
    use crate::postgres::plan::Member;

    fn cluster() -> PostgresCluster {
        let mut cluster = PostgresCluster::new("default", "db", PostgresClusterSpec::new(2, "16"));
        cluster.metadata.generation = Some(4);
        cluster
    }

    fn observed(ready: &[bool]) -> Observed {
        Observed::of_running(
            ready
                .iter()
                .enumerate()
                .map(|(i, &ready)| {
                    let role = if i == 0 { Role::Primary } else { Role::Replica };
                    Member::running(&format!("db-{i}"), role, ready)
                })
                .collect(),
        )
    }

    /// `next_status` with the cluster's first member as the primary (none without members)
    /// and no version change.
    fn status_after(
        cluster: &PostgresCluster,
        observed: &Observed,
        action: &Action,
        now: &str,
    ) -> PostgresClusterStatus {
        let primary = observed.members.first().map(|m| m.name.as_str());
        next_status(
            cluster,
            observed,
            primary,
            action,
            &VersionChange::None,
            now,
        )
    }

    fn find<'a>(status: &'a PostgresClusterStatus, type_: &str) -> &'a Condition {
        status.condition(type_).expect("every condition is written")
    }

    /// A healthy cluster: Running, Available, not Degraded, with the scale selector.
    #[test]
    fn a_healthy_cluster_is_running_and_available() {
        let status = status_after(&cluster(), &observed(&[true, true]), &Action::Steady, "T1");
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.ready_instances, Some(2));
        assert_eq!(status.current_version.as_deref(), Some("16"));
        assert_eq!(status.observed_generation, Some(4));
        assert_eq!(
            status.selector.as_deref(),
            Some("app.kubernetes.io/name=postgres,workshop.example.com/cluster=db")
        );
        assert_eq!(find(&status, "Available").status, "True");
        assert_eq!(find(&status, "Degraded").status, "False");
    }

    /// lastTransitionTime moves when a condition's status flips, and only then.
    #[test]
    fn transition_time_moves_only_when_the_status_flips() {
        let mut cluster = cluster();
        let healthy = observed(&[true, true]);
        let first = status_after(&cluster, &healthy, &Action::Steady, "T1");
        cluster.status = Some(first);
        let degraded = observed(&[true, false]);
        let second = status_after(&cluster, &degraded, &Action::Wait("x".into()), "T2");
        assert_eq!(find(&second, "Available").last_transition_time, "T1");
        assert_eq!(find(&second, "Degraded").last_transition_time, "T2");
        assert_eq!(find(&second, "Degraded").message, "1 of 2 members ready");
        cluster.status = Some(second);
        let third = status_after(&cluster, &degraded, &Action::Wait("y".into()), "T3");
        assert_eq!(find(&third, "Degraded").last_transition_time, "T2");
        assert_eq!(find(&third, "Progressing").last_transition_time, "T2");
    }

    /// A refused major upgrade shows as Degraded with a reason naming both versions.
    #[test]
    fn a_refused_major_upgrade_is_a_degraded_condition() {
        let status = next_status(
            &cluster(),
            &observed(&[true, true]),
            Some("db-0"),
            &Action::Steady,
            &VersionChange::Major { from: 16, to: 17 },
            "T1",
        );
        let degraded = find(&status, "Degraded");
        assert_eq!(degraded.reason, "MajorVersionChangeRefused");
        assert!(degraded.message.contains("17") && degraded.message.contains("16"));
    }

    /// Losing every member of a running cluster is phase Failed, and stays so.
    #[test]
    fn a_disaster_is_failed_and_stays_failed() {
        let mut cluster = cluster();
        cluster.status = Some(PostgresClusterStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        let none = observed(&[]);
        let failed = status_after(&cluster, &none, &Action::Disaster, "T1");
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
        cluster.status = Some(failed);
        let again = status_after(&cluster, &none, &Action::Wait("x".into()), "T2");
        assert_eq!(again.phase.as_deref(), Some("Failed"));
        assert_eq!(find(&again, "Available").reason, "AllMembersLost");
    }

    /// Step 04 keeps every field it does not own: a later step's part of the status (here step
    /// 06's, which step 04 knows only as `more`) comes out of `next_status` as it went in, and so
    /// is never dropped by step 04's status write.
    #[test]
    fn next_status_keeps_every_field_it_does_not_own() {
        let mut cluster = cluster();
        let theirs = serde_json::json!({
            "lastBackup": {"name": "base/x", "time": "2026-01-22T10:15:00Z", "lsn": "0/3000028", "bytes": 1},
            "backupRequested": "1",
            "restore": {"source": "db-backups", "state": "Restored"},
        });
        let mut before: PostgresClusterStatus = serde_json::from_value(theirs.clone()).unwrap();
        before.phase = Some("Running".into());
        cluster.status = Some(before);
        let next = status_after(&cluster, &observed(&[true, true]), &Action::Steady, "T1");
        let written = serde_json::to_value(&next).unwrap();
        for (name, value) in theirs.as_object().unwrap() {
            assert_eq!(&written[name], value, "status.{name}");
        }
    }
}
