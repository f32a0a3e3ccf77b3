//! Step 05's decisions, pure like step 04's `plan.rs`: its rules, and step 04's by name, in one
//! list ([`RULES`]); the first that has an action wins.
//!
//! WORKSHOP.md, step 05 ("The rules, again"). Step 04 waits when the primary is gone; here:
//!
//! 1. **The primary first.** Two pods labelled primary: keep the recorded one, delete the other.
//!    The primary down for certain (its container exited, its node lost: [`Down`]) or unready
//!    for longer than the failover delay (a failed probe may be a flap): fence it (delete it),
//!    wait until it has stopped, then fail over to the most advanced ready replica. With
//!    synchronous replication `required`, the fence comes first and the promotion does not wait
//!    for the stop (see [`FailoverAction::Failover`]'s `fence`). A primary whose pod failed has
//!    stopped already: the failover is at once, and rule 2 removes the pod afterwards. A primary
//!    whose container started again before anyone took over (a crash restarted in place, a
//!    node back from a power cut) comes back in recovery and Ready: every member is asked, and
//!    the one with the most WAL promoted, itself unless another has more
//!    ([`FailoverAction::PromoteInPlace`]).
//! 2. **Lost members go**: one left fenced, then step 04's rule 2; and a replica Ready but not
//!    streaming from the primary for longer than the not-streaming delay: it answers queries,
//!    but follows nothing (an old timeline it cannot leave, a primary that is gone).
//! 3. **Wait while anything moves**, as in step 04, except a pod terminating past the stop
//!    timeout: it is stuck on a lost node, and waiting for it would wait for ever.
//! 4. **Count**: step 04's rule 4.
//! 5. **A planned switchover** (the `workshop.example.com/switchover-to` annotation names a
//!    ready replica): the primary is deleted and stops cleanly; rule 1 promotes that replica.
//! 6. **Minor upgrades**, one pod at a time: replace a replica still on the old image; when every
//!    replica runs the new one, switch over (delete the primary, so rule 1 promotes an upgraded
//!    replica). A major-version change is refused (step 04's `version_change`).

use std::time::Duration;

use crate::postgres::manifests::Role;
use crate::postgres::plan::{
    alive, count, leftovers_go, primaries, replicas, sorted_names, version_change, Action, Delays,
    Member, Observed, Phase, VersionChange,
};
use crate::postgres::Planned;

/// Certain evidence that a pod's server is down, read from its object: unlike a failed
/// readiness probe (a slow answer under load, two misses in a row), none of these passes by
/// itself in a second or two, so none waits the failover delay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Down {
    /// Its postgres container has exited since the pod went unready: `state.terminated`,
    /// `state.waiting` after a `lastState.terminated` (CrashLoopBackOff), or running again after
    /// one. The kubelet restarts it in place (a first crash at once, later ones after a
    /// back-off), but a primary that crashed comes back in recovery and waits for the operator
    /// (the manifests' start script): a failover is the faster road.
    Exited,
    /// Its node stopped reporting: the node lifecycle controller turned the pod's Ready
    /// condition False (`MarkPodsNotReady`) and left `ContainersReady` True, which the kubelet
    /// never does (it sets both from the same probe results). Its processes may still run, cut
    /// off; its deletion is never confirmed.
    NodeLost,
}

impl Down {
    /// For a story line: "its container exited".
    pub fn describe(self) -> &'static str {
        match self {
            Down::Exited => "its container exited",
            Down::NodeLost => "its node stopped reporting",
        }
    }
}

/// What step 05 observes of a member besides step 04's [`Member`] (its `more`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Labelled `fenced` by a failover (step 04 sees no role): no Service selects it.
    pub fenced: bool,
    /// Not ready, and its object says for certain why (`None`: ready, or only its readiness
    /// probe failed, which may pass again).
    pub down: Option<Down>,
    /// How long the pod has been Running but not Ready, as step 04's `unready_for`, but a task
    /// that first sees it unready credits at most half the failover delay (`observe.rs`).
    pub unready_for: Duration,
    /// How long the pod has been terminating (zero when it is not), on this task's clock; a
    /// task that first sees it so credits the time since its `deletionTimestamp`, at most half
    /// the stop timeout.
    pub terminating_for: Duration,
    /// Terminating, and its containers have all exited: the kubelet gives a deleted pod its
    /// final phase (Succeeded or Failed) once its processes are gone, before the object goes.
    pub stopped: bool,
    /// How long this task has seen the pod Ready but missing from the ready primary's
    /// `pg_stat_replication` (zero when it streams, or when no primary was asked).
    pub not_streaming_for: Duration,
    /// Its postgres container started again (its restart count or `startedAt` moved) since
    /// this task last asked the server whether it is in recovery. A primary that crashed, or
    /// whose node lost its power, comes back in recovery (the start script, `manifests.rs`) and
    /// waits for the operator.
    pub restarted: bool,
    /// Its container started anew since this task last asked (not merely never asked), with
    /// nothing saying it crashed: a node back from a power cut. Unready, it may be replaying its
    /// WAL, and could be the member with the most: it gets the replacement delay, as a replica.
    pub started_anew: bool,
}

/// A member as step 05 sees it.
pub type Seen = Member<Facts>;

/// Everything step 05's rules read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing {
    /// Step 04's observation, each member with its [`Facts`].
    pub cluster: Observed<Facts>,
    /// The `workshop.example.com/switchover-to` annotation's pod, when not acted on yet.
    pub switchover_to: Option<String>,
    /// With synchronous replication `required`: the standbys every acknowledged commit reached
    /// `number` of (`status.synchronous`). Only a promotion among them loses nothing.
    pub quorum: Option<Quorum>,
}

/// `synchronous_standby_names = ANY number (standbys)` as last set on the primary. Which
/// promotions it allows (`Quorum::allows`) is synchronous replication's: `synchronous.rs`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quorum {
    pub number: usize,
    pub standbys: Vec<String>,
}

/// How long to give the primary, and a replica that streams nothing, before acting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailoverDelays {
    /// The primary unready this long, with nothing more certain than its readiness probe to say
    /// why, is failed over; certain evidence ([`Down`]) does not wait it. Counted from when the
    /// probe said unready (two misses, 2 s apart), so it is the last allowance for a primary that
    /// answers again under load: each second of it is a second without writes for the clients of
    /// one that is really hung.
    pub failover_after: Duration,
    /// How long a deleted primary may take to stop before the failover goes on without it. A
    /// clean stop takes a second or two; one that takes longer is on a lost node, whose pods
    /// stay Terminating until someone confirms the node is gone. It is fenced (relabelled, out
    /// of the primary Service) and a replica promoted.
    pub stop_timeout: Duration,
    /// A Ready replica the primary does not stream to this long is deleted and replaced. Longer
    /// than a replica takes to reconnect after a failover: its WAL receiver retries every
    /// `wal_retrieve_retry_interval` (200 ms in our pods' arguments, 5 s by PostgreSQL's default)
    /// and finds the new primary through the Service.
    pub not_streaming_after: Duration,
}

impl Default for FailoverDelays {
    fn default() -> Self {
        FailoverDelays {
            failover_after: Duration::from_secs(2),
            stop_timeout: Duration::from_secs(20),
            not_streaming_after: Duration::from_secs(30),
        }
    }
}

/// Why step 05 deletes a pod; each has its story line and Event reason (`lines.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailReason {
    /// A second pod labelled primary: only one may take writes.
    SecondPrimary,
    /// The primary is down for certain, or unready past the failover delay: stop it before
    /// promoting another, so two primaries never take writes at once. Also a pod left labelled
    /// fenced by a failover that did not delete it (an operator stopped in between).
    FencePrimary,
    /// A replica Ready, but not streaming from the primary past the not-streaming delay.
    NotStreaming,
    /// A replica on the old minor version.
    Upgrade,
    /// Every replica runs the new minor version: the primary goes last, a replica takes over.
    Switchover,
    /// A switchover asked for by the annotation: the primary stops cleanly, the named replica
    /// takes over.
    PlannedSwitchover,
}

/// Step 05's own actions, carried out by `act.rs` in place of step 04's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FailoverAction {
    Delete {
        pod: String,
        reason: FailReason,
    },
    /// Promote the most advanced of `candidates` (ready replicas); `lost` is the old primary,
    /// already gone or terminating, or still there to `fence`.
    Failover {
        lost: Option<String>,
        candidates: Vec<String>,
        /// The old primary, lost or hung but not stopped, to fence before the promotion:
        /// relabelled so that no Service selects it, and its deletion asked. Only with
        /// synchronous replication `required` (see `fencing_first_is_safe`).
        fence: Option<String>,
    },
    /// The primary's container started again and it is Ready: ask every member whether it is
    /// in recovery and how far it got; the primary in recovery (a crash, a power cut: see the
    /// start script), promote the member with the most WAL once every one that may still answer
    /// has (`in_place.rs`). No replica took over (one would be labelled primary in its place).
    PromoteInPlace {
        pod: String,
    },
    /// The primary is gone, and promoting one of the standbys that answer could lose an
    /// acknowledged commit (synchronous replication, `required`): wait for more of them.
    FailoverRefused(String),
}

/// What a rule of this step plans: step 04's action, or one of this step's own.
pub type Step = Planned<FailoverAction>;

/// One rule of step 05, or one of step 04's taken by name.
pub type Rule = fn(&Failing, &Delays, &FailoverDelays) -> Option<Step>;

/// The rules of the module docs, in their order: step 04's rules 2 and 4 among step 05's.
// ANCHOR: rules
pub const RULES: &[Rule] = &[
    second_primary,
    primary_first,
    fenced_go,
    |f, delays, _| leftovers_go(&f.cluster, delays).map(Planned::Core),
    not_streaming_goes,
    wait_while_moving,
    |f, delays, _| count(&f.cluster, delays).map(Planned::Core),
    planned_switchover,
    minor_upgrades,
];
// ANCHOR_END: rules

/// The one next action for `failing`: the first rule's that has one, else step 04's Steady.
pub fn next_step(failing: &Failing, delays: &Delays, ours: &FailoverDelays) -> Step {
    RULES
        .iter()
        .find_map(|rule| rule(failing, delays, ours))
        .unwrap_or(Planned::Core(Action::Steady))
}

fn delete(member: &Seen, reason: FailReason) -> Option<Step> {
    Some(Planned::Own(FailoverAction::Delete {
        pod: member.name.clone(),
        reason,
    }))
}

fn wait(why: String) -> Step {
    Planned::Core(Action::Wait(why))
}

/// Rule 1a: Two pods labelled primary: keep the recorded one (else the oldest), delete the other.
fn second_primary(failing: &Failing, _: &Delays, _: &FailoverDelays) -> Option<Step> {
    let observed = &failing.cluster;
    let primaries = primaries(observed);
    if primaries.len() < 2 {
        return None;
    }
    let keep = primaries
        .iter()
        .find(|m| Some(&m.name) == observed.recorded_primary.as_ref())
        .or_else(|| primaries.iter().min_by(|a, b| a.created.cmp(&b.created)))
        .map(|m| m.name.clone());
    let other = primaries.iter().find(|m| Some(&m.name) != keep.as_ref())?;
    delete(other, FailReason::SecondPrimary)
}

/// Rule 1b: The primary first: wait for one on its way out, fence a lost one, promote a replica when
/// there is none, or promote a restarted one where it is.
fn primary_first(failing: &Failing, core: &Delays, delays: &FailoverDelays) -> Option<Step> {
    let observed = &failing.cluster;
    let primaries = primaries(observed);
    // A primary on its way out is waited for, not failed over at once: stopping cleanly, it
    // sends its last WAL to every connected replica, so all stop at the same point and any can
    // be promoted with the others able to follow. Stopped is enough: its processes are gone,
    // the object only follows. One that does not stop (a lost node) is fenced and the failover
    // goes on, at once when fencing first is safe.
    // ANCHOR: failover_order
    let fence_first = fencing_first_is_safe(failing);
    if let Some(leaving) = observed
        .members
        .iter()
        .find(|m| m.is(Role::Primary) && m.phase == Phase::Terminating)
    {
        let stopping = !leaving.more.stopped
            && leaving.more.terminating_for < delays.stop_timeout
            && !(fence_first && leaving.more.down == Some(Down::NodeLost));
        if primaries.is_empty() && stopping {
            return Some(wait(format!(
                "waiting for the old primary {} to stop",
                leaving.name
            )));
        }
    }
    // ANCHOR_END: failover_order
    let ready_replicas: Vec<String> = sorted_names(
        alive(observed).filter(|m| m.is(Role::Replica) && m.ready && m.phase == Phase::Running),
    );
    // Synchronous: the most advanced of the standbys, never a replica outside them.
    let candidates = |ready_replicas: Vec<String>| match &failing.quorum {
        Some(quorum) => ready_replicas
            .into_iter()
            .filter(|name| quorum.standbys.contains(name))
            .collect(),
        None => ready_replicas,
    };
    match primaries.first().copied() {
        Some(primary) if is_lost(primary, core, delays) && !ready_replicas.is_empty() => {
            let allowed = failing
                .quorum
                .as_ref()
                .is_some_and(|quorum| quorum.allows(&ready_replicas).is_ok());
            if fence_first && allowed {
                return Some(Planned::Own(FailoverAction::Failover {
                    lost: Some(primary.name.clone()),
                    candidates: candidates(ready_replicas),
                    fence: Some(primary.name.clone()),
                }));
            }
            delete(primary, FailReason::FencePrimary)
        }
        // ANCHOR: promote_in_place
        Some(primary) if primary.ready && primary.more.restarted => {
            Some(Planned::Own(FailoverAction::PromoteInPlace {
                pod: primary.name.clone(),
            }))
        }
        // ANCHOR_END: promote_in_place
        Some(_) => None,
        None if observed.has_run || observed.recorded_primary.is_some() => {
            if let Some(quorum) = &failing.quorum {
                if let Err(why) = quorum.allows(&ready_replicas) {
                    return Some(Planned::Own(FailoverAction::FailoverRefused(why)));
                }
            }
            if !ready_replicas.is_empty() {
                return Some(Planned::Own(FailoverAction::Failover {
                    lost: observed.recorded_primary.clone(),
                    candidates: candidates(ready_replicas),
                    fence: None,
                }));
            }
            alive(observed).any(|m| m.is(Role::Replica)).then(|| {
                wait("the primary is gone; waiting for a replica to be ready to promote".into())
            })
        }
        None => None,
    }
}

/// Rule 2a: A member left fenced by a failover that stopped before its DELETE (an operator
/// killed in between: no Service selects it, yet it runs and counts) goes; rule 4 replaces it.
fn fenced_go(failing: &Failing, _: &Delays, _: &FailoverDelays) -> Option<Step> {
    let fenced = alive(&failing.cluster).find(|m| m.more.fenced && m.phase != Phase::Done)?;
    delete(fenced, FailReason::FencePrimary)
}

/// Rule 2b: A replica Ready but not streaming from the primary past the delay goes too: it answers
/// queries, but follows nothing (an old timeline it cannot leave, a primary that is gone).
fn not_streaming_goes(failing: &Failing, _: &Delays, delays: &FailoverDelays) -> Option<Step> {
    let astray = replicas(&failing.cluster).into_iter().find(|m| {
        m.is(Role::Replica) && m.ready && m.more.not_streaming_for >= delays.not_streaming_after
    })?;
    delete(astray, FailReason::NotStreaming)
}

/// Rule 3: Wait while anything moves, as step 04's rule 3 does, but one terminating past the
/// stop timeout is not moving: it is stuck on a lost node.
fn wait_while_moving(failing: &Failing, _: &Delays, delays: &FailoverDelays) -> Option<Step> {
    let moving: Vec<String> = sorted_names(failing.cluster.members.iter().filter(|m| {
        m.phase == Phase::Pending
            || (m.phase == Phase::Terminating && m.more.terminating_for < delays.stop_timeout)
            || (m.phase == Phase::Running && !m.ready)
    }));
    (!moving.is_empty()).then(|| wait(format!("waiting for {} to settle", moving.join(", "))))
}

/// Rule 5: A planned switchover, on a healthy cluster only (every member ready, rule 3): the primary
/// is deleted, stops cleanly, shipping its last WAL to every replica, and rule 1 promotes the
/// named replica, now as advanced as any (see [`choose`]).
fn planned_switchover(failing: &Failing, _: &Delays, _: &FailoverDelays) -> Option<Step> {
    let (observed, target) = (&failing.cluster, failing.switchover_to.as_ref()?);
    let primary = primaries(observed).first().copied()?;
    replicas(observed)
        .iter()
        .any(|m| &m.name == target && m.is(Role::Replica) && m.ready)
        .then(|| delete(primary, FailReason::PlannedSwitchover))
        .flatten()
}

/// Rule 6: Minor upgrades, one pod at a time, the primary last. Per pod, so a spec changed back
/// half-way brings the pods already replaced back too.
fn minor_upgrades(failing: &Failing, _: &Delays, _: &FailoverDelays) -> Option<Step> {
    let observed = &failing.cluster;
    let wanted = observed.wanted_version.as_str();
    let outdated =
        |m: &Seen| version_change(Some(&m.version), wanted, observed.size) == VersionChange::Minor;
    if let Some(old) = replicas(observed).into_iter().find(|m| outdated(m)) {
        return delete(old, FailReason::Upgrade);
    }
    let primary = primaries(observed)
        .first()
        .copied()
        .filter(|p| outdated(p))?;
    delete(primary, FailReason::Switchover)
}

/// The primary `member` is lost: Running but not Ready, and either down for certain or unready
/// past its delay ([`unready_allowance`]).
fn is_lost(member: &Seen, core: &Delays, delays: &FailoverDelays) -> bool {
    !member.ready
        && member.phase == Phase::Running
        && (member.more.down.is_some()
            || member.more.unready_for >= unready_allowance(member, core, delays))
}

/// How long an unready primary is given: the failover delay, or the replacement delay when its
/// container started anew ([`Facts::started_anew`]).
fn unready_allowance(member: &Seen, core: &Delays, delays: &FailoverDelays) -> Duration {
    match member.more.started_anew {
        true => core.member_lost_after,
        false => delays.failover_after,
    }
}

/// Whether a lost primary may be fenced and a standby promoted without waiting for it to stop:
/// only with synchronous replication `required` (the plan then has a [`Quorum`]).
///
/// With `required`, PostgreSQL returns a commit only once one of the primary's synchronous
/// standbys has flushed it. Fenced, the old primary gets no new client and no standby from the
/// Services; the standbys that streamed from it have dropped it already (each drops a primary
/// silent for `wal_receiver_timeout`, 5 s in our pods, shorter than two missed probes and the
/// failover delay, or a node's grace period) and follow the new one. So an old primary that
/// comes back (a hung process that resumes, a node whose network returns) has no standby to
/// acknowledge a commit: it cannot return one the new primary lacks.
///
/// With `preferred` (it drops to fewer standbys, down to none, when they do not answer) or
/// asynchronous replication, the old primary acknowledges commits on its own. One that came
/// back before it stopped could return writes no standby has, beside the new primary's: so it is
/// deleted, and the failover waits until it has stopped (at most the stop timeout).
pub fn fencing_first_is_safe(failing: &Failing) -> bool {
    failing.quorum.is_some()
}

/// The replica to promote, `preferred` (a planned switchover's) when it has everything the most
/// advanced has, so that choosing it loses nothing; else the most advanced.
pub fn choose<'a>(positions: &'a [Position], preferred: Option<&str>) -> Option<&'a Position> {
    let best = most_advanced(positions)?;
    let reach = |p: &Position| p.received.max(p.replayed);
    let preferred = positions
        .iter()
        .find(|p| Some(p.pod.as_str()) == preferred)
        .filter(|p| p.in_recovery == best.in_recovery && reach(p) >= reach(best));
    Some(preferred.unwrap_or(best))
}

/// How long until one of the delays runs out for a member of `failing`, so that the round that
/// acts on it runs then, not at the next tick: with an 8 s reconcile interval, a 2 s failover
/// delay would otherwise end anywhere up to 8 s late (controller-runtime's `RequeueAfter`).
/// `None`: no delay is running.
pub fn next_deadline(
    failing: &Failing,
    delays: &Delays,
    ours: &FailoverDelays,
) -> Option<Duration> {
    failing
        .cluster
        .members
        .iter()
        .filter_map(|m| {
            let (delay, waited) = match (m.phase, m.ready) {
                (Phase::Terminating, _) => (ours.stop_timeout, m.more.terminating_for),
                // Certain evidence is acted on now: no delay runs.
                (Phase::Running, false) if m.is(Role::Primary) && m.more.down.is_some() => {
                    return None
                }
                (Phase::Running, false) if m.is(Role::Primary) => {
                    (unready_allowance(m, delays, ours), m.more.unready_for)
                }
                (Phase::Running, false) => (delays.member_lost_after, m.unready_for),
                (Phase::Running, true) if m.more.not_streaming_for > Duration::ZERO => {
                    (ours.not_streaming_after, m.more.not_streaming_for)
                }
                _ => return None,
            };
            delay.checked_sub(waited).filter(|left| !left.is_zero())
        })
        .min()
}

/// A replica's position in the WAL: what it has received and what it has replayed. After the
/// primary is lost, the one that has the most is the one that loses the least when promoted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub pod: String,
    /// `pg_is_in_recovery()`: false means it was promoted already (an operator that stopped
    /// between promoting and relabelling): finish that instead of promoting a second one.
    pub in_recovery: bool,
    /// `pg_last_wal_receive_lsn()` (NULL → 0: nothing streamed since start).
    pub received: u64,
    /// `pg_last_wal_replay_lsn()`.
    pub replayed: u64,
}

/// The replica to promote: one already out of recovery if any (see [`Position::in_recovery`]),
/// else the highest of received and replayed LSN — what was streamed is on its disk and is
/// replayed before promotion completes. Ties go to the first name, so the choice is stable.
pub fn most_advanced(positions: &[Position]) -> Option<&Position> {
    if let Some(promoted) = positions.iter().find(|p| !p.in_recovery) {
        return Some(promoted);
    }
    positions.iter().min_by(|a, b| {
        let key = |p: &Position| std::cmp::Reverse(p.received.max(p.replayed));
        key(a).cmp(&key(b)).then(a.pod.cmp(&b.pod))
    })
}

#[cfg(test)]
mod tests;
