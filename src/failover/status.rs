//! Support: a learner may skip it on first read — step 05's part of `status`: the Progressing
//! condition of its own actions, a primary in recovery (`in_place.rs`), the switchover acted on,
//! and synchronous replication's
//! `status.synchronous` and condition. Written over what step 04's `next_status` made.
//!
//! WORKSHOP.md, step 05.

use crate::api::PostgresClusterStatus;
use crate::postgres::conditions::{condition, set_condition};
use crate::postgres::PostgresTask;

use super::api::{set_switchover, switchover, SWITCHOVER_ANNOTATION};
use super::in_place;
use super::plan::{FailReason, FailoverAction};
use super::synchronous::{self, SYNCHRONOUS_CONDITION};
use super::WithFailover;

/// Step 05's part of `next`, the status this round writes; `own`: the action it carried out in
/// place of step 04's, if any.
pub fn status<L: WithFailover>(
    task: &PostgresTask<L>,
    own: Option<&FailoverAction>,
    next: &mut PostgresClusterStatus,
    now: &str,
) {
    let previous = task.status();
    if let Some(action) = own {
        let (moving, reason, message) = progressing(action);
        set_condition(
            next,
            &previous,
            condition("Progressing", moving, reason, message),
            now,
        );
    }
    let primary = next.primary.clone();
    let annotation = task
        .cluster()
        .metadata
        .annotations
        .get(SWITCHOVER_ANNOTATION);
    set_switchover(
        switched_to(annotation, primary.as_deref(), own, &previous).as_ref(),
        next,
    );
    in_place::set_status(task, next, &previous, now);
    match &task.failover_state().synchronous {
        Some(round) => synchronous::set_status(next, &previous, round.clone(), now),
        // Not set this round (the cluster is paused): as it was.
        None => {
            if let Some(kept) = previous.condition(SYNCHRONOUS_CONDITION) {
                next.conditions.retain(|c| c.type_ != SYNCHRONOUS_CONDITION);
                next.conditions.push(kept.clone());
            }
        }
    }
}

/// The Progressing condition's status, reason and message for one of step 05's actions.
fn progressing(action: &FailoverAction) -> (bool, &'static str, String) {
    match action {
        FailoverAction::FailoverRefused(why) => (false, "FailoverRefused", why.clone()),
        FailoverAction::Delete { pod, reason } => {
            (true, "Replacing", format!("deleting {pod}: {reason:?}"))
        }
        FailoverAction::PromoteInPlace { pod } => (
            true,
            "PromotingInPlace",
            format!("{pod} started again; promoting the member with the most WAL if it came back in recovery"),
        ),
        FailoverAction::Failover { lost, .. } => {
            let lost = lost.as_deref().unwrap_or("the lost primary");
            (
                true,
                "FailingOver",
                format!("promoting a replica in place of {lost}"),
            )
        }
    }
}

/// `status.switchover`: a switchover is acted on once per value: when its primary is deleted
/// (whichever replica then has the most WAL is promoted), or once the pod it names is the
/// primary. No annotation, no record.
fn switched_to(
    annotation: Option<&String>,
    primary: Option<&str>,
    own: Option<&FailoverAction>,
    previous: &PostgresClusterStatus,
) -> Option<String> {
    let deleted_for_it = matches!(
        own,
        Some(FailoverAction::Delete {
            reason: FailReason::PlannedSwitchover,
            ..
        })
    );
    match annotation {
        Some(pod) if primary == Some(pod.as_str()) || deleted_for_it => Some(pod.clone()),
        Some(_) => switchover(previous),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A switchover is acted on once per annotation value: recorded when the primary is
    /// deleted for it, so that a target that could not be promoted is not tried again and again.
    #[test]
    fn a_switchover_is_recorded_once_acted_on() {
        let annotation = "db-1".to_string();
        let switch = FailoverAction::Delete {
            pod: "db-0".into(),
            reason: FailReason::PlannedSwitchover,
        };
        let before = PostgresClusterStatus::default();
        // The healthy cluster's primary is still db-0: the delete is what acts on it.
        let acted = switched_to(Some(&annotation), Some("db-0"), Some(&switch), &before);
        assert_eq!(acted.as_deref(), Some("db-1"));
        let waiting = switched_to(Some(&annotation), Some("db-0"), None, &before);
        assert_eq!(waiting, None);
        // Another deletion is not the switchover's.
        let upgrade = FailoverAction::Delete {
            pod: "db-0".into(),
            reason: FailReason::Switchover,
        };
        let upgraded = switched_to(Some(&annotation), Some("db-0"), Some(&upgrade), &before);
        assert_eq!(upgraded, None);
        // Once recorded, it stays while the annotation does; the annotation removed, no record.
        let mut recorded = PostgresClusterStatus::default();
        set_switchover(acted.as_ref(), &mut recorded);
        assert_eq!(switchover(&recorded).as_deref(), Some("db-1"));
        let kept = switched_to(Some(&annotation), Some("db-0"), None, &recorded);
        assert_eq!(kept.as_deref(), Some("db-1"));
        let removed = switched_to(None, Some("db-1"), None, &recorded);
        assert_eq!(removed, None);
        // The pod it names is the primary: recorded, whatever this round did.
        let promoted = switched_to(Some(&annotation), Some("db-1"), None, &before);
        assert_eq!(promoted.as_deref(), Some("db-1"));
    }
}
