//! Step 06's decisions, pure like step 04's `plan.rs`, and made after step 05's: what the members' plan
//! becomes when backups exist (a seed that restores in place of the disaster, members that do
//! not archive replaced), and when to take a base backup.
//!
//! WORKSHOP.md, step 06. The rules [`plan_restore`] adds to step 05's (and so step 04's), in order:
//!
//! 0. **A restore that failed is not retried**: it would fail the same way, and the pod's log and
//!    the reason are what the user needs to look at. The seed goes; the cluster is Failed.
//! 1. **No pods**: with a backup to restore (the cluster's own once it ran, else
//!    `spec.bootstrap.fromBackup`'s), a seed that restores it, in place of step 04's disaster or
//!    empty seed. After a failed restore, the disaster stays.
//! 2. **While a seed restores**, nothing is added: a restored seed answers read-only queries once
//!    consistent, before it promotes, and a replica cloned then would clone a server still in
//!    recovery.
//! 3. **Members that do not archive are replaced**, one at a time, on a steady cluster: those
//!    started before `spec.backup` was set (PostgreSQL reads `archive_mode` only at start).
//!    Replicas first; the primary last, deleted so that it stops cleanly and step 05's rule 1
//!    promotes a replica that archives. A cluster of one waits: its pod holds the only copy.
//!
//! [`next_backup`] then says whether a base backup is due, on a steady cluster only.

use std::time::Duration;

use crate::failover::plan::{FailReason, FailoverAction};
use crate::postgres::manifests::Role;
use crate::postgres::plan::{Action, DeleteReason, Observed, Phase};
use crate::postgres::Planned;

/// Step 06's actions, carried out by the layer, and step 05's kept (`Failover`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupAction {
    /// Create the seed primary restoring from the claim `from` (disaster recovery, or a new
    /// cluster bootstrapped from another's backups).
    Restore { from: String },
    /// The restoring seed `pod` failed; delete it and fail the cluster with `reason`.
    RestoreFailed { pod: String, reason: String },
    /// Every member is gone after a restore failed: the cluster stays Failed.
    StayFailed,
    /// Delete member `pod`, which does not archive; step 04's count (rule 4) replaces it.
    ReplaceToArchive { pod: String },
    /// Step 05's action, kept.
    Failover(FailoverAction),
}

/// What the restore rules read besides step 04's observation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RestoreObserved {
    /// The claim a seed would restore from, if there is one to use now: the cluster's own (a
    /// backup exists and it has run) or `spec.bootstrap.fromBackup`'s (it is new).
    pub from: Option<String>,
    /// A seed is restoring and has not been promoted yet (`status.restore`).
    pub restoring: bool,
    /// The last restore failed: the cluster stays Failed, never re-seeded empty.
    pub failed: bool,
    /// The restoring seed failed this round (its init container, or its server during
    /// recovery, exited with an error): the pod, and why, naming the file.
    pub seed_failure: Option<(String, String)>,
    /// With `spec.backup`: the members started without the archive settings.
    pub not_archiving: Vec<String>,
}

/// Step 05's `step` for `observed` (step 04's action, or one of step 05's), or one of the
/// rules above in its place (see the module docs).
pub fn plan_restore(
    restore: &RestoreObserved,
    observed: &Observed,
    step: Planned<FailoverAction>,
) -> Planned<BackupAction> {
    let alive = observed
        .members
        .iter()
        .any(|m| m.phase != Phase::Terminating);
    // 0. A failed restore is not retried.
    if let Some((pod, reason)) = &restore.seed_failure {
        return Planned::Own(BackupAction::RestoreFailed {
            pod: pod.clone(),
            reason: reason.clone(),
        });
    }
    let action = match step {
        // 2. Step 05's upgrade rules wait while the seed restores.
        Planned::Own(FailoverAction::Delete {
            reason: FailReason::Upgrade | FailReason::Switchover,
            ..
        }) if restore.restoring && alive => return restoring(),
        Planned::Own(own) => return Planned::Own(BackupAction::Failover(own)),
        Planned::Core(action) => action,
    };
    match action {
        // 1. No pods: step 04 seeds or declares the disaster.
        Action::CreateSeed | Action::Disaster if restore.failed => {
            Planned::Own(BackupAction::StayFailed)
        }
        Action::CreateSeed | Action::Disaster => match &restore.from {
            Some(from) => Planned::Own(BackupAction::Restore { from: from.clone() }),
            None => Planned::Core(action),
        },
        // 2. Step 04's count rule waits while the seed restores.
        Action::Steady
        | Action::CreateReplica
        | Action::Delete {
            reason: DeleteReason::ScaleDown,
            ..
        } if restore.restoring && alive => restoring(),
        // 3. Members that do not archive are replaced, on a steady cluster only.
        Action::Steady if !restore.not_archiving.is_empty() => {
            replace_to_archive(restore, observed)
        }
        action => Planned::Core(action),
    }
}

/// Rule 2's wait.
fn restoring() -> Planned<BackupAction> {
    Planned::Core(Action::Wait(
        "restoring: waiting for the seed to replay the archived WAL and be promoted".into(),
    ))
}

/// Rule 3: a replica that does not archive first; the primary once every replica archives, and
/// only with a ready replica to take over. The primary goes as in a planned switchover: its
/// clean stop hands its last WAL to the standbys connected then. With synchronous replication
/// the new replica is a standby from its start, so no commit can be missing from it; with
/// asynchronous replication a replica Ready but not yet streaming could miss the last commits,
/// as it could in step 05's switchover.
fn replace_to_archive(restore: &RestoreObserved, observed: &Observed) -> Planned<BackupAction> {
    let not_archiving = |role: Role| {
        observed
            .members
            .iter()
            .find(|m| m.role == Some(role) && restore.not_archiving.contains(&m.name))
    };
    if let Some(replica) = not_archiving(Role::Replica) {
        return Planned::Own(BackupAction::ReplaceToArchive {
            pod: replica.name.clone(),
        });
    }
    let replica_ready = observed
        .members
        .iter()
        .any(|m| m.role == Some(Role::Replica) && m.ready);
    match not_archiving(Role::Primary) {
        Some(primary) if replica_ready => Planned::Own(BackupAction::ReplaceToArchive {
            pod: primary.name.clone(),
        }),
        Some(primary) => Planned::Core(Action::Wait(format!(
            "{} started before spec.backup and does not archive its WAL; with no replica to take over, replacing it would lose its data: scale to 2",
            primary.name
        ))),
        None => Planned::Core(Action::Steady),
    }
}

/// A backup pod of the cluster, as the backup plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupPod {
    pub name: String,
    pub phase: Phase,
}

/// What decides whether to take a base backup now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupObserved {
    /// The cluster's backup pods (role label `backup`).
    pub pods: Vec<BackupPod>,
    /// How long ago the last base backup completed; `None`: there is none yet.
    pub since_last: Option<Duration>,
    /// `spec.backup.intervalMinutes`.
    pub interval: Duration,
    /// The backup-now annotation holds a value not acted on yet.
    pub requested: bool,
    /// How long ago the last backup pod failed, if the last one did.
    pub since_failure: Option<Duration>,
    /// Whether a replica is ready: back up from `<name>-replicas`, else from `<name>-primary`.
    pub replica_ready: bool,
}

/// How long after a failed backup the next is tried (unless one is asked for).
pub const BACKUP_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Where to take a base backup from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackupSource {
    /// `<name>-replicas`: the copy's reads do not compete with the primary's clients.
    Replicas,
    /// `<name>-primary`, when no replica is ready.
    Primary,
}

/// The backup step, planned after the members' action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackupStep {
    /// Nothing to do.
    Idle,
    /// A backup pod is running.
    Running(String),
    /// A backup pod finished (Succeeded or Failed): read its report, record it, delete it.
    Collect(String),
    /// Start a backup pod.
    Start { from: BackupSource },
}

/// The backup step for `observed`. `members_steady`: the members' plan had nothing to do. A
/// finished pod is collected whatever the members do; a new backup starts only on a steady
/// cluster (a failover or a clone in progress would change the source under it), and one at a
/// time.
pub fn next_backup(observed: &BackupObserved, members_steady: bool) -> BackupStep {
    if let Some(done) = observed.pods.iter().find(|p| p.phase == Phase::Done) {
        return BackupStep::Collect(done.name.clone());
    }
    if let Some(running) = observed.pods.first() {
        return BackupStep::Running(running.name.clone());
    }
    if !members_steady {
        return BackupStep::Idle;
    }
    let due = observed
        .since_last
        .is_none_or(|since| since >= observed.interval);
    let backing_off = observed
        .since_failure
        .is_some_and(|since| since < BACKUP_RETRY_AFTER);
    if observed.requested || (due && !backing_off) {
        let from = if observed.replica_ready {
            BackupSource::Replicas
        } else {
            BackupSource::Primary
        };
        return BackupStep::Start { from };
    }
    BackupStep::Idle
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::plan::{next_step, Failing, FailoverDelays};
    use crate::postgres::plan::{Delays, Member};

    fn observed(members: Vec<Member>, size: usize) -> Observed {
        Observed {
            has_run: false,
            recorded_primary: None,
            members,
            size,
            wanted_version: "16".into(),
        }
    }

    fn ready_primary(name: &str) -> Member {
        Member {
            created: "2026-11-22T10:00:00Z".into(),
            ..Member::running(name, Role::Primary, true)
        }
    }

    fn plan(observed: &Observed, restore: &RestoreObserved) -> Planned<BackupAction> {
        let failing = Failing::of(observed.clone().more());
        let step = next_step(&failing, &Delays::default(), &FailoverDelays::default());
        plan_restore(restore, observed, step)
    }

    /// Every member lost with a backup → a restoring seed; a failed restore → the cluster stays
    /// Failed, never an empty seed; a new cluster bootstrapped from a backup restores too; with
    /// no backup, step 04's plan stands.
    #[test]
    fn no_pods_with_a_backup_means_restore_and_a_failed_restore_means_failed() {
        let mut lost = observed(vec![], 3);
        lost.has_run = true;
        let mut restore = RestoreObserved {
            from: Some("db-backups".into()),
            ..RestoreObserved::default()
        };
        assert_eq!(
            plan(&lost, &restore),
            Planned::Own(BackupAction::Restore {
                from: "db-backups".into()
            })
        );
        restore.failed = true;
        assert_eq!(
            plan(&lost, &restore),
            Planned::Own(BackupAction::StayFailed)
        );
        let new = observed(vec![], 2);
        let mut bootstrap = RestoreObserved {
            from: Some("src-backups".into()),
            ..RestoreObserved::default()
        };
        assert!(matches!(
            plan(&new, &bootstrap),
            Planned::Own(BackupAction::Restore { .. })
        ));
        bootstrap.failed = true;
        assert_eq!(
            plan(&new, &bootstrap),
            Planned::Own(BackupAction::StayFailed)
        );
        let none = RestoreObserved::default();
        assert_eq!(plan(&lost, &none), Planned::Core(Action::Disaster));
        assert_eq!(plan(&new, &none), Planned::Core(Action::CreateSeed));
    }

    /// Members started before `spec.backup` are replaced on a steady cluster, replicas first,
    /// the primary last and only with a ready replica to take over; a cluster of one waits.
    #[test]
    fn members_that_do_not_archive_are_replaced_replicas_first() {
        let mut steady = observed(
            vec![
                Member::running("db-0", Role::Primary, true),
                Member::running("db-1", Role::Replica, true),
            ],
            2,
        );
        steady.has_run = true;
        steady.recorded_primary = Some("db-0".into());
        let replace = |pod: &str| Planned::Own(BackupAction::ReplaceToArchive { pod: pod.into() });
        let mut restore = RestoreObserved {
            not_archiving: vec!["db-0".into(), "db-1".into()],
            ..RestoreObserved::default()
        };
        assert_eq!(plan(&steady, &restore), replace("db-1"));
        restore.not_archiving = vec!["db-0".into()];
        assert_eq!(plan(&steady, &restore), replace("db-0"));
        restore.not_archiving.clear();
        assert_eq!(plan(&steady, &restore), Planned::Core(Action::Steady));

        // Only on a steady cluster: a replica still cloning is waited for first.
        let mut cloning = steady.clone();
        cloning.members[1].phase = Phase::Pending;
        restore.not_archiving = vec!["db-0".into()];
        assert!(matches!(
            plan(&cloning, &restore),
            Planned::Core(Action::Wait(_))
        ));

        let mut alone = steady.clone();
        alone.members.truncate(1);
        alone.size = 1;
        match plan(&alone, &restore) {
            Planned::Core(Action::Wait(why)) => assert!(why.contains("scale to 2"), "{why}"),
            other => panic!("a cluster of one must wait, not {other:?}"),
        }
    }

    /// A restoring seed's failure wins over everything; while it replays, no replica is added.
    #[test]
    fn a_restoring_seed_is_waited_for_and_its_failure_reported() {
        let cluster = observed(vec![ready_primary("db-p")], 3);
        let mut restore = RestoreObserved {
            restoring: true,
            ..RestoreObserved::default()
        };
        assert!(matches!(
            plan(&cluster, &restore),
            Planned::Core(Action::Wait(why)) if why.starts_with("restoring")
        ));
        restore.seed_failure = Some((
            "db-p".into(),
            "base/x/base.tar: not a readable tar archive".into(),
        ));
        assert_eq!(
            plan(&cluster, &restore),
            Planned::Own(BackupAction::RestoreFailed {
                pod: "db-p".into(),
                reason: "base/x/base.tar: not a readable tar archive".into()
            })
        );
        // Not restoring: step 04 adds the replica.
        assert_eq!(
            plan(&cluster, &RestoreObserved::default()),
            Planned::Core(Action::CreateReplica)
        );
    }

    fn backups(pods: Vec<BackupPod>, since_last: Option<u64>) -> BackupObserved {
        BackupObserved {
            pods,
            since_last: since_last.map(Duration::from_secs),
            interval: Duration::from_secs(3600),
            requested: false,
            since_failure: None,
            replica_ready: true,
        }
    }

    /// A first backup at once, then one per interval, from the replicas when one is ready.
    #[test]
    fn backups_are_taken_when_due_from_a_replica() {
        let start = BackupStep::Start {
            from: BackupSource::Replicas,
        };
        assert_eq!(next_backup(&backups(vec![], None), true), start);
        assert_eq!(
            next_backup(&backups(vec![], Some(60)), true),
            BackupStep::Idle
        );
        assert_eq!(next_backup(&backups(vec![], Some(3600)), true), start);
        let mut alone = backups(vec![], None);
        alone.replica_ready = false;
        assert_eq!(
            next_backup(&alone, true),
            BackupStep::Start {
                from: BackupSource::Primary
            }
        );
        // Not while the members are busy.
        assert_eq!(next_backup(&backups(vec![], None), false), BackupStep::Idle);
    }

    /// The annotation asks at once; a failure backs off unless asked; one pod at a time, and a
    /// finished pod is collected even while the members are busy.
    #[test]
    fn requests_failures_and_running_pods() {
        let mut asked = backups(vec![], Some(60));
        asked.requested = true;
        assert!(matches!(
            next_backup(&asked, true),
            BackupStep::Start { .. }
        ));
        let mut failed = backups(vec![], Some(7200));
        failed.since_failure = Some(Duration::from_secs(10));
        assert_eq!(next_backup(&failed, true), BackupStep::Idle);
        failed.since_failure = Some(BACKUP_RETRY_AFTER);
        assert!(matches!(
            next_backup(&failed, true),
            BackupStep::Start { .. }
        ));
        let pod = |name: &str, phase| BackupPod {
            name: name.into(),
            phase,
        };
        let running = backups(vec![pod("b-1", Phase::Running)], None);
        assert_eq!(
            next_backup(&running, true),
            BackupStep::Running("b-1".into())
        );
        let done = backups(
            vec![pod("b-1", Phase::Running), pod("b-2", Phase::Done)],
            None,
        );
        assert_eq!(next_backup(&done, false), BackupStep::Collect("b-2".into()));
    }
}
