//! The words of the round's deletions and failovers: the story line, the Event type and reason of
//! each, and how an LSN is printed. Support: a learner may skip it on first read — words, not
//! decisions; the decisions are `plan.rs`'s.
//!
//! WORKSHOP.md, step 04 ("Telling the user").

use super::*;

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
    let fenced = member.is_some_and(|m| m.role == Some(Role::Fenced));
    match reason {
        DeleteReason::FencePrimary if fenced => (
            format!("Deleting {pod}: a failover fenced it (relabelled {}) and did not delete it", Role::Fenced.label_value()),
            EventType::Warning,
            "PrimaryLost",
        ),
        DeleteReason::SecondPrimary => (
            format!("Deleting {pod}: a second pod labelled primary (keeping {})", observed.recorded_primary.as_deref().unwrap_or("the older one")),
            EventType::Warning,
            "SecondPrimary",
        ),
        DeleteReason::FencePrimary => (
            format!("Member lost: {pod} (the primary, {}); deleting it before promoting a replica", member.map_or(String::from("lost"), lost_because)),
            EventType::Warning,
            "PrimaryLost",
        ),
        DeleteReason::MemberLost => (
            format!("Member lost: {pod} (unready for {unready}s); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::NotStreaming => (
            format!("Replica {pod} is Ready but has not streamed from the primary {} for {}s (an old timeline it cannot leave, or a primary that is gone); replacing it with a fresh clone", observed.recorded_primary.as_deref().unwrap_or("?"), member.map_or(0, |m| m.not_streaming_for.as_secs())),
            EventType::Warning,
            "ReplicaNotStreaming",
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
        DeleteReason::Upgrade => (
            format!("Upgrading: replacing replica {pod} (runs {}, spec.version is {})", member.map_or("?", |m| m.version.as_str()), observed.wanted_version),
            EventType::Normal,
            "Upgrading",
        ),
        DeleteReason::PlannedSwitchover => (
            format!("Switching over to {}: stopping the primary {pod} cleanly (it ships its last WAL to every replica), then promoting it", observed.switchover_to.as_deref().unwrap_or("the named replica")),
            EventType::Normal,
            "Switchover",
        ),
        DeleteReason::Switchover => (
            format!("Upgrading: every replica runs {}; switching over from the primary {pod}", observed.wanted_version),
            EventType::Normal,
            "Switchover",
        ),
    }
}

/// Why a primary counts as lost, for a story line: its [`Down`] evidence, or how long it has
/// been unready.
pub(super) fn lost_because(member: &Member) -> String {
    match member.down {
        Some(down) => down.describe().to_string(),
        None => format!("unready for {}s", member.unready_for.as_secs()),
    }
}

/// `0/3000148`, as Postgres prints an LSN.
pub(super) fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}
