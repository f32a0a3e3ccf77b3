//! What a restore makes of `status`: phase Recovering while a seed restores, Failed after a
//! failed restore, and the conditions that say why. Support: a learner may skip it on first read —
//! `restore.rs` is the restore itself; this file words it for `kubectl get pgc` and `kubectl wait`.
//!
//! WORKSHOP.md, step 06 ("What goes where": disaster recovery).

use crate::api::PostgresClusterStatus;
use crate::postgres::conditions::{all_members_lost, condition, set_condition, PHASE_FAILED};
use crate::postgres::Planned;

use super::api::BackupStatus;
use super::plan::BackupAction;

/// A seed restores a backup and replays the archived WAL; Running once promoted.
pub const PHASE_RECOVERING: &str = "Recovering";
/// `status.restore.state`.
pub const RESTORE_RESTORING: &str = "Restoring";
pub const RESTORE_RESTORED: &str = "Restored";
pub const RESTORE_FAILED: &str = "Failed";

/// The phase and conditions a restore gives the status step 04 computed: Failed after a failed
/// restore (with its reason), Recovering while a seed restores.
pub fn phase_and_conditions(
    next: &mut PostgresClusterStatus,
    previous: &PostgresClusterStatus,
    planned: &Planned<BackupAction>,
    now: &str,
) {
    let restore = BackupStatus::read(next).restore;
    let state = restore.as_ref().map(|r| r.state.as_str());
    let primary_ready = next
        .condition("Available")
        .is_some_and(|c| c.status == "True");
    if state == Some(RESTORE_FAILED) {
        next.phase = Some(PHASE_FAILED.into());
        if let Some(failed) = restore.clone().filter(|_| !primary_ready) {
            let message = format!(
                "restoring from {} failed: {}",
                failed.source, failed.message
            );
            let available = condition("Available", false, "RestoreFailed", message);
            set_condition(next, previous, available, now);
        }
        let members_only = next
            .condition("Degraded")
            .is_some_and(|c| matches!(c.reason.as_str(), "MembersNotReady" | "AllMembersReady"));
        if members_only {
            set_condition(next, previous, all_members_lost(), now);
        }
    } else if matches!(planned, Planned::Own(BackupAction::Restore { .. }))
        || state == Some(RESTORE_RESTORING)
    {
        next.phase = Some(PHASE_RECOVERING.into());
        if !primary_ready {
            let message =
                "the seed replays the archived WAL; writes resume when it is promoted".into();
            let available = condition("Available", false, "Recovering", message);
            set_condition(next, previous, available, now);
        }
    }
    let progressing = match planned {
        Planned::Own(BackupAction::Restore { from }) => condition(
            "Progressing",
            true,
            "Restoring",
            format!("creating a seed that restores the newest base backup in {from}"),
        ),
        Planned::Own(BackupAction::RestoreFailed { pod, .. }) => condition(
            "Progressing",
            false,
            "RestoreFailed",
            format!("the restoring seed {pod} failed; nothing more is tried"),
        ),
        Planned::Own(BackupAction::ReplaceToArchive { pod }) => condition(
            "Progressing",
            true,
            "ReplacingToArchive",
            format!(
                "replacing {pod}, which started before spec.backup and does not archive its WAL"
            ),
        ),
        Planned::Own(BackupAction::StayFailed) => {
            condition("Progressing", false, "Steady", "nothing to do".into())
        }
        Planned::Core(_) | Planned::Own(BackupAction::Failover(_)) => return,
    };
    set_condition(next, previous, progressing, now);
}

#[cfg(test)]
mod tests {
    use super::super::api::RestoreStatus;
    use super::*;
    use crate::api::{Condition, PostgresCluster, PostgresClusterSpec};
    use crate::postgres::conditions::next_status;
    use crate::postgres::manifests::Role;
    use crate::postgres::plan::{Action, VersionChange};
    use crate::postgres::plan::{Member, Observed};

    fn cluster(status: PostgresClusterStatus) -> PostgresCluster {
        let spec = PostgresClusterSpec::new(2, "16");
        let mut cluster = PostgresCluster::new("default", "db", spec);
        cluster.status = Some(status);
        cluster
    }

    /// One unready primary (the restoring seed), or none.
    fn observed(seed: bool) -> Observed {
        let seed = seed.then(|| Member::running("db-x", Role::Primary, false));
        Observed::of_running(seed.into_iter().collect())
    }

    /// Step 04's status for this round, then the layer's word on it.
    fn status_after(
        cluster: &PostgresCluster,
        observed: &Observed,
        action: Action,
        planned: Planned<BackupAction>,
    ) -> PostgresClusterStatus {
        // Step 04's status keeps `status.restore` (step 06's, carried in `more`).
        let mut next = next_status(cluster, observed, None, &action, &VersionChange::None, "T2");
        let previous = cluster.status.clone().unwrap_or_default();
        phase_and_conditions(&mut next, &previous, &planned, "T2");
        next
    }

    fn find<'a>(status: &'a PostgresClusterStatus, type_: &str) -> &'a Condition {
        status.condition(type_).expect("every condition is written")
    }

    /// A restore under way is Recovering; a failed one is Failed with its reason; with no
    /// restore, step 04's status stands.
    #[test]
    fn a_restore_is_recovering_then_failed_with_the_reason() {
        let mut restore = RestoreStatus {
            source: "db-backups".into(),
            pod: "db-x".into(),
            state: RESTORE_RESTORING.into(),
            message: String::new(),
        };
        let with_restore = |mut status: PostgresClusterStatus, restore: &RestoreStatus| {
            let restore = Some(restore.clone());
            BackupStatus {
                restore,
                ..BackupStatus::default()
            }
            .write(&mut status);
            status
        };
        let running = with_restore(
            PostgresClusterStatus {
                phase: Some("Running".into()),
                ..Default::default()
            },
            &restore,
        );
        let wait = Action::Wait("x".into());
        let recovering = status_after(
            &cluster(running.clone()),
            &observed(true),
            wait.clone(),
            Planned::Core(wait.clone()),
        );
        assert_eq!(recovering.phase.as_deref(), Some(PHASE_RECOVERING));
        assert_eq!(find(&recovering, "Available").reason, "Recovering");
        assert_eq!(
            BackupStatus::read(&recovering).restore,
            Some(restore.clone())
        );

        restore.state = RESTORE_FAILED.into();
        restore.message = "/backups/base/x/base.tar: not a readable tar archive".into();
        let failed_before = with_restore(running, &restore);
        let failed = status_after(
            &cluster(failed_before),
            &observed(false),
            Action::Disaster,
            Planned::Own(BackupAction::StayFailed),
        );
        assert_eq!(failed.phase.as_deref(), Some(PHASE_FAILED));
        let available = find(&failed, "Available");
        assert_eq!(available.reason, "RestoreFailed");
        assert!(
            available.message.contains("base.tar"),
            "{}",
            available.message
        );
        assert_eq!(find(&failed, "Progressing").reason, "Steady");

        let plain = status_after(
            &cluster(PostgresClusterStatus::default()),
            &observed(true),
            wait.clone(),
            Planned::Core(wait),
        );
        assert_eq!(plain.phase.as_deref(), Some("Creating"));
        assert_eq!(find(&plain, "Available").reason, "NoReadyPrimary");
    }

    /// Restoring a seed from a backup says so in Progressing and puts the cluster in Recovering.
    #[test]
    fn a_restore_planned_is_recovering_and_progressing() {
        let ran = PostgresClusterStatus {
            phase: Some("Running".into()),
            ..Default::default()
        };
        let planned = Planned::Own(BackupAction::Restore {
            from: "db-backups".into(),
        });
        let next = status_after(&cluster(ran), &observed(false), Action::Disaster, planned);
        assert_eq!(next.phase.as_deref(), Some(PHASE_RECOVERING));
        let progressing = find(&next, "Progressing");
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", "Restoring")
        );
    }
}
