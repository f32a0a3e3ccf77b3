//! Support: a learner may skip it on first read — words, not decisions; the decisions are
//! `plan.rs`'s. The story line, the Event type and reason of each of step 05's deletions, and
//! how an LSN is printed.
//!
//! WORKSHOP.md, step 05.

use crate::events::EventType;

use super::plan::{FailReason, Failing, Seen};
use super::FENCED;

/// The story line, Event type and reason for deleting `pod`.
pub fn delete_story(
    pod: &str,
    reason: FailReason,
    member: Option<&Seen>,
    failing: &Failing,
) -> (String, EventType, &'static str) {
    let observed = &failing.cluster;
    let fenced = member.is_some_and(|m| m.more.fenced);
    match reason {
        FailReason::FencePrimary if fenced => (
            format!("Deleting {pod}: a failover fenced it (relabelled {FENCED}) and did not delete it"),
            EventType::Warning,
            "PrimaryLost",
        ),
        FailReason::SecondPrimary => (
            format!("Deleting {pod}: a second pod labelled primary (keeping {})", observed.recorded_primary.as_deref().unwrap_or("the older one")),
            EventType::Warning,
            "SecondPrimary",
        ),
        FailReason::FencePrimary => (
            format!("Member lost: {pod} (the primary, {}); deleting it before promoting a replica", member.map_or(String::from("lost"), lost_because)),
            EventType::Warning,
            "PrimaryLost",
        ),
        FailReason::NotStreaming => (
            format!("Replica {pod} is Ready but has not streamed from the primary {} for {}s (an old timeline it cannot leave, or a primary that is gone); replacing it with a fresh clone", observed.recorded_primary.as_deref().unwrap_or("?"), member.map_or(0, |m| m.more.not_streaming_for.as_secs())),
            EventType::Warning,
            "ReplicaNotStreaming",
        ),
        FailReason::Upgrade => (
            format!("Upgrading: replacing replica {pod} (runs {}, spec.version is {})", member.map_or("?", |m| m.version.as_str()), observed.wanted_version),
            EventType::Normal,
            "Upgrading",
        ),
        FailReason::PlannedSwitchover => (
            format!("Switching over to {}: stopping the primary {pod} cleanly (it ships its last WAL to every replica), then promoting it", failing.switchover_to.as_deref().unwrap_or("the named replica")),
            EventType::Normal,
            "Switchover",
        ),
        FailReason::Switchover => (
            format!("Upgrading: every replica runs {}; switching over from the primary {pod}", observed.wanted_version),
            EventType::Normal,
            "Switchover",
        ),
    }
}

/// Why a primary counts as lost, for a story line: its [`Down`] evidence, or how long it has
/// been unready.
pub fn lost_because(member: &Seen) -> String {
    match member.more.down {
        Some(down) => down.describe().to_string(),
        None => format!("unready for {}s", member.more.unready_for.as_secs()),
    }
}

/// `0/3000148`, as Postgres prints an LSN.
pub fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}
