//! The words of the round's deletions: the story line, the Event type and reason of each.
//! Support: a learner may skip it on first read — words, not
//! decisions; the decisions are `plan.rs`'s.
//!
//! WORKSHOP.md, step 04 ("Telling the user").

use super::*;
use crate::postgres::plan::{DeleteReason, Member};

impl<L: ClusterLayer> PostgresTask<L> {
    /// `Running: [db-x (primary), db-y], pending: [db-z]`, when it changed since last said.
    pub(super) fn say_members(&mut self, observed: &Observed) {
        let mut running = Vec::new();
        let mut pending = Vec::new();
        let mut members: Vec<&Member> = observed.members.iter().collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        for member in members {
            let mut name = member.name.clone();
            if member.role == Some(Role::Primary) {
                name.push_str(" (primary)");
            }
            match (member.phase, member.ready) {
                (Phase::Running, true) => running.push(name),
                (Phase::Terminating, _) => pending.push(format!("{name} terminating")),
                (Phase::Done, _) => pending.push(format!("{name} failed")),
                _ => pending.push(name),
            }
        }
        let line = format!(
            "Running: [{}], pending: [{}]",
            running.join(", "),
            pending.join(", ")
        );
        if line != self.last_members_line {
            self.say(line.clone());
            self.last_members_line = line;
        }
    }
}

/// The story line, Event type and reason for deleting `pod`.
pub(super) fn delete_story(
    pod: &str,
    reason: DeleteReason,
    member: Option<&Member>,
    observed: &Observed,
) -> (String, EventType, &'static str) {
    let unready = member.map_or(0, |m| m.unready_for.as_secs());
    match reason {
        DeleteReason::MemberLost => (
            format!("Member lost: {pod} (unready for {unready}s); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::MemberDead => (
            format!("Member lost: {pod} (its pod failed); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::ScaleDown => (
            format!("Removing replica {pod} (scaling down to {})", observed.size),
            EventType::Normal,
            "ReplicaRemoved",
        ),
    }
}
