//! Step 04's decisions as one pure function: given what the cluster looks like now, the one next
//! thing to do.
//!
//! WORKSHOP.md, step 04 ("One action per tick"). [`next_action`] reads an [`Observed`] — the
//! cluster's pods reduced to what matters — and returns one [`Action`]. The task in `cluster/`
//! carries it out, then observes again before deciding anything else: a second action planned
//! from the same observation would be planned from a world the first one just changed. This is
//! etcd-operator's rule ("one member at a time"), and why every rule below can be simple.
//!
//! The rules, in order ([`RULES`], one function each, as etcd-operator's `reconcile.go` lists
//! its own); the first that has an action wins:
//!
//! 1. **The primary first.** Two pods labelled primary: keep the recorded one, delete the other.
//!    The primary down for certain (its container exited, its node lost: [`Down`]) or unready
//!    for longer than the failover delay (a failed probe may be a flap): fence it (delete it),
//!    wait until it has stopped, then fail over to the most advanced ready replica. With
//!    synchronous replication `required`, the fence comes first and the promotion does not wait
//!    for the stop (see [`Action::Failover`]'s `fence`). A primary whose pod failed has stopped
//!    already: the failover is at once, and rule 2 removes the pod afterwards. A primary that
//!    crashed and was restarted in place before anyone took over comes back in recovery and
//!    Ready: it is promoted where it is ([`Action::PromoteInPlace`]).
//! 2. **Lost members go.** A replica unready for longer than the lost-member delay (a lost node,
//!    a crash loop) or failed is deleted; rule 4 replaces it. So is a replica Ready but not
//!    streaming from the primary for longer than the not-streaming delay: it answers queries,
//!    but follows nothing (an old timeline it cannot leave, a primary that is gone).
//! 3. **Wait while anything moves**: a pod pending (a replica's base backup runs in its init
//!    container), starting, or terminating.
//! 4. **Count.** No pods: a new cluster gets its seed primary; a cluster that ran is a disaster
//!    (re-seeding an empty database would hide the loss).
//!    Fewer than `size`: add one replica. More: delete the newest replica, never the primary
//!    (every member is ready by now: rule 3 waited otherwise).
//! 5. **A planned switchover** (the `workshop.example.com/switchover-to` annotation names a
//!    ready replica): the primary is deleted and stops cleanly; rule 1 promotes that replica.
//! 6. **Minor upgrades**, one pod at a time: replace a replica still on the old image; when every
//!    replica runs the new one, switch over (delete the primary, so rule 1 promotes an upgraded
//!    replica). A major-version change is refused (see [`version_change`]): `pg_upgrade` is not
//!    a rolling restart.

use std::time::Duration;

use crate::api::PostgresVersion;

use super::manifests::Role;

/// Where a pod is in its life, from `status.phase` and `deletionTimestamp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Scheduled or not, its containers have not all started: for a replica, the init
    /// container's `pg_basebackup` may be running.
    Pending,
    Running,
    /// Failed or Succeeded: a pod never leaves these, it will not serve again.
    Done,
    /// A delete was accepted; its processes are stopping within their grace period.
    Terminating,
}

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

/// One pod of the cluster, as the plan sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    /// From the `workshop.example.com/role` label; `None` if someone removed it.
    pub role: Option<Role>,
    pub phase: Phase,
    /// Kubernetes' Ready condition: the readiness probe (`pg_isready`) passes.
    pub ready: bool,
    /// Not ready, and its object says for certain why (`None`: ready, or only its readiness
    /// probe failed, which may pass again).
    pub down: Option<Down>,
    /// How long the pod has been Running but not Ready (zero when Ready), on this task's clock.
    /// A task that first sees it unready credits the kubelet's record (the Ready condition's
    /// `lastTransitionTime`), at most half the failover delay (`cluster::since_recorded`).
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
    /// The `postgres` image tag its container runs (`16.4`).
    pub version: String,
    /// `metadata.creationTimestamp` (RFC 3339, so later sorts after earlier).
    pub created: String,
    /// Its postgres container was restarted in place since this task last asked the server
    /// whether it is in recovery. A primary that crashed comes back in recovery (the manifests'
    /// start script) and waits for the operator.
    pub restarted: bool,
}

impl Member {
    fn is(&self, role: Role) -> bool {
        self.role == Some(role)
    }
}

/// Everything the plan needs about a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// The cluster's pods (owned by its uid), in any order.
    pub members: Vec<Member>,
    /// `status.primary`: the pod the operator last made (or found) primary.
    pub recorded_primary: Option<String>,
    /// The cluster ran before: `status.phase` is Running or Failed (step 05 adds Recovering from
    /// its own backups). With no pods left, this is what tells a disaster from a cluster that is
    /// new.
    pub has_run: bool,
    /// `spec.size`.
    pub size: usize,
    /// `spec.version`.
    pub wanted_version: String,
    /// The `workshop.example.com/switchover-to` annotation's pod, when not acted on yet.
    pub switchover_to: Option<String>,
    /// With synchronous replication `required`: the standbys every acknowledged commit reached
    /// `number` of (`status.synchronous`). Only a promotion among them loses nothing.
    pub quorum: Option<Quorum>,
}

/// `synchronous_standby_names = ANY number (standbys)` as last set on the primary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quorum {
    pub number: usize,
    pub standbys: Vec<String>,
}

/// How long to give a pod before acting on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delays {
    /// The primary unready this long, with nothing more certain than its readiness probe to say
    /// why, is failed over; certain evidence ([`Down`]) does not wait it. Counted from when the
    /// probe said unready (two misses, 2 s apart), so it is the last allowance for a primary that
    /// answers again under load: each second of it is a second without writes for the clients of
    /// one that is really hung.
    pub failover_after: Duration,
    /// A replica Running but unready this long is deleted and replaced. Longer than a replica's
    /// start (recovery replays the WAL it missed) on a slow machine.
    pub member_lost_after: Duration,
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

impl Default for Delays {
    fn default() -> Self {
        Delays {
            failover_after: Duration::from_secs(2),
            member_lost_after: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(20),
            not_streaming_after: Duration::from_secs(30),
        }
    }
}

/// Why a pod is deleted; each has its story line and Event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// A second pod labelled primary: only one may take writes.
    SecondPrimary,
    /// The primary is down for certain, or unready past the failover delay: stop it before
    /// promoting another, so two primaries never take writes at once. Also a pod left labelled
    /// fenced by a failover that did not delete it (an operator stopped in between).
    FencePrimary,
    /// A replica unready past the lost-member delay.
    MemberLost,
    /// A replica Ready, but not streaming from the primary past the not-streaming delay.
    NotStreaming,
    /// Failed or Succeeded: it will not run again.
    MemberDead,
    /// More pods than `spec.size`.
    ScaleDown,
    /// A replica on the old minor version.
    Upgrade,
    /// Every replica runs the new minor version: the primary goes last, a replica takes over.
    Switchover,
    /// A switchover asked for by the annotation: the primary stops cleanly, the named replica
    /// takes over.
    PlannedSwitchover,
}

/// The one next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The cluster is as wanted.
    Steady,
    /// Something is moving; look again at the next tick or pod event.
    Wait(String),
    /// Create the first pod, the primary, of a new cluster.
    CreateSeed,
    /// Create one replica (it clones the primary in its init container).
    CreateReplica,
    Delete {
        pod: String,
        reason: DeleteReason,
    },
    /// Promote the most advanced of `candidates` (ready replicas); `lost` is the old primary,
    /// already gone or terminating, or still there to `fence`.
    Failover {
        lost: Option<String>,
        candidates: Vec<String>,
        /// The old primary, lost or hung but not stopped, to fence before the promotion:
        /// relabelled so that no Service selects it, and its deletion asked. Only with
        /// synchronous replication `required` (see `next_action`).
        fence: Option<String>,
    },
    /// The primary's container was restarted in place and it is Ready again: ask whether it
    /// came back in recovery (a crash, see the manifests' start script) and if so promote it
    /// where it is. No replica took over (one would be labelled primary in its place), so
    /// nothing newer exists anywhere.
    PromoteInPlace {
        pod: String,
    },
    /// Every member of a cluster that ran is gone.
    Disaster,
    /// The primary is gone, and promoting one of the standbys that answer could lose an
    /// acknowledged commit (synchronous replication, `required`): wait for more of them.
    FailoverRefused(String),
}

/// What a change of `spec.version` means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionChange {
    /// The pods run what the spec asks (or the cluster has no pods yet).
    None,
    /// Same major version: a rolling replacement, one pod at a time.
    Minor,
    /// A different major version: PostgreSQL's data directory format changes between majors
    /// (`pg_upgrade` or a dump and restore); an image swap would not start. Refused.
    Major { from: u32, to: u32 },
    /// A minor change of a one-member cluster: replacing its only pod loses its data (the data
    /// directory is an emptyDir). Refused until the cluster has a replica to switch over to.
    NeedsReplica,
    /// The spec's version does not parse; the CRD's pattern stops this unless it was bypassed.
    Invalid(String),
}

/// What changing the pods from `running` (the primary's version, or the version last recorded)
/// to `wanted` would take.
pub fn version_change(running: Option<&str>, wanted: &str, size: usize) -> VersionChange {
    let Some(running) = running else {
        return VersionChange::None;
    };
    if running == wanted {
        return VersionChange::None;
    }
    let (from, to) = match (
        running.parse::<PostgresVersion>(),
        wanted.parse::<PostgresVersion>(),
    ) {
        (Ok(from), Ok(to)) => (from, to),
        (_, Err(error)) => return VersionChange::Invalid(error.to_string()),
        // A pod on an odd tag: nothing to compare with, treat it as "different, same major".
        (Err(_), Ok(_)) => return VersionChange::Minor,
    };
    if from.major != to.major {
        VersionChange::Major {
            from: from.major,
            to: to.major,
        }
    } else if size < 2 {
        VersionChange::NeedsReplica
    } else {
        VersionChange::Minor
    }
}

/// One rule of the plan: the action it calls for, or `None` to leave the choice to the next.
pub type Rule = fn(&Observed, &Delays) -> Option<Action>;

/// The rules of the module docs, in their order: the first that has something to say wins.
pub const RULES: &[Rule] = &[
    second_primary,
    primary_first,
    leftovers_go,
    not_streaming_goes,
    wait_while_moving,
    count,
    planned_switchover,
    minor_upgrades,
];

/// The one next action for `observed`: the first rule's that has one, else [`Action::Steady`].
pub fn next_action(observed: &Observed, delays: &Delays) -> Action {
    RULES
        .iter()
        .find_map(|rule| rule(observed, delays))
        .unwrap_or(Action::Steady)
}

/// The members not on their way out.
fn alive(observed: &Observed) -> impl Iterator<Item = &Member> {
    observed
        .members
        .iter()
        .filter(|m| m.phase != Phase::Terminating)
}

/// The members labelled primary that may still serve: alive, not Failed or Succeeded.
fn primaries(observed: &Observed) -> Vec<&Member> {
    alive(observed)
        .filter(|m| m.is(Role::Primary) && m.phase != Phase::Done)
        .collect()
}

/// Every member but the primaries, alive, by name.
fn replicas(observed: &Observed) -> Vec<&Member> {
    let mut replicas: Vec<&Member> = alive(observed).filter(|m| !m.is(Role::Primary)).collect();
    replicas.sort_by(|a, b| a.name.cmp(&b.name));
    replicas
}

fn delete(member: &Member, reason: DeleteReason) -> Option<Action> {
    Some(Action::Delete {
        pod: member.name.clone(),
        reason,
    })
}

/// Rule 1a: Two pods labelled primary: keep the recorded one (else the oldest), delete the other.
fn second_primary(observed: &Observed, _: &Delays) -> Option<Action> {
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
    delete(other, DeleteReason::SecondPrimary)
}

/// Rule 1b: The primary first: wait for one on its way out, fence a lost one, promote a replica when
/// there is none, or promote a restarted one where it is.
fn primary_first(observed: &Observed, delays: &Delays) -> Option<Action> {
    let primaries = primaries(observed);
    // A primary on its way out is waited for, not failed over at once: stopping cleanly, it
    // sends its last WAL to every connected replica, so all stop at the same point and any can
    // be promoted with the others able to follow. Stopped is enough: its processes are gone,
    // the object only follows. One that does not stop (a lost node) is fenced and the failover
    // goes on, at once when fencing first is safe.
    // ANCHOR: failover_order
    let fence_first = fencing_first_is_safe(observed);
    if let Some(leaving) = observed
        .members
        .iter()
        .find(|m| m.is(Role::Primary) && m.phase == Phase::Terminating)
    {
        let stopping = !leaving.stopped
            && leaving.terminating_for < delays.stop_timeout
            && !(fence_first && leaving.down == Some(Down::NodeLost));
        if primaries.is_empty() && stopping {
            return Some(Action::Wait(format!(
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
    let candidates = |ready_replicas: Vec<String>| match &observed.quorum {
        Some(quorum) => ready_replicas
            .into_iter()
            .filter(|name| quorum.standbys.contains(name))
            .collect(),
        None => ready_replicas,
    };
    match primaries.first().copied() {
        Some(primary) if is_lost(primary, delays) && !ready_replicas.is_empty() => {
            let allowed = observed
                .quorum
                .as_ref()
                .is_some_and(|quorum| quorum.allows(&ready_replicas).is_ok());
            if fence_first && allowed {
                return Some(Action::Failover {
                    lost: Some(primary.name.clone()),
                    candidates: candidates(ready_replicas),
                    fence: Some(primary.name.clone()),
                });
            }
            delete(primary, DeleteReason::FencePrimary)
        }
        // ANCHOR: promote_in_place
        Some(primary) if primary.ready && primary.restarted => Some(Action::PromoteInPlace {
            pod: primary.name.clone(),
        }),
        // ANCHOR_END: promote_in_place
        Some(_) => None,
        None if observed.has_run || observed.recorded_primary.is_some() => {
            if let Some(quorum) = &observed.quorum {
                if let Err(why) = quorum.allows(&ready_replicas) {
                    return Some(Action::FailoverRefused(why));
                }
            }
            if !ready_replicas.is_empty() {
                return Some(Action::Failover {
                    lost: observed.recorded_primary.clone(),
                    candidates: candidates(ready_replicas),
                    fence: None,
                });
            }
            alive(observed).any(|m| m.is(Role::Replica)).then(|| {
                Action::Wait(
                    "the primary is gone; waiting for a replica to be ready to promote".into(),
                )
            })
        }
        None => None,
    }
}

/// Rule 2a: Members that will not serve again go (rule 4 replaces them): one left fenced by a
/// failover that stopped before its DELETE (an operator killed in between: no Service selects
/// it, yet it runs and counts), one Failed or Succeeded, a replica unready past the delay.
fn leftovers_go(observed: &Observed, delays: &Delays) -> Option<Action> {
    if let Some(fenced) = alive(observed).find(|m| m.is(Role::Fenced) && m.phase != Phase::Done) {
        return delete(fenced, DeleteReason::FencePrimary);
    }
    if let Some(dead) = alive(observed).find(|m| m.phase == Phase::Done) {
        return delete(dead, DeleteReason::MemberDead);
    }
    let lost = replicas(observed).into_iter().find(|m| {
        m.phase == Phase::Running && !m.ready && m.unready_for >= delays.member_lost_after
    })?;
    delete(lost, DeleteReason::MemberLost)
}

/// Rule 2b: A replica Ready but not streaming from the primary past the delay goes too: it answers
/// queries, but follows nothing (an old timeline it cannot leave, a primary that is gone).
fn not_streaming_goes(observed: &Observed, delays: &Delays) -> Option<Action> {
    let astray = replicas(observed).into_iter().find(|m| {
        m.is(Role::Replica) && m.ready && m.not_streaming_for >= delays.not_streaming_after
    })?;
    delete(astray, DeleteReason::NotStreaming)
}

/// Rule 3: Wait while anything moves: a pod pending, starting, or terminating. One terminating past
/// the stop timeout is not moving: it is stuck on a lost node.
fn wait_while_moving(observed: &Observed, delays: &Delays) -> Option<Action> {
    let moving: Vec<String> = sorted_names(observed.members.iter().filter(|m| {
        m.phase == Phase::Pending
            || (m.phase == Phase::Terminating && m.terminating_for < delays.stop_timeout)
            || (m.phase == Phase::Running && !m.ready)
    }));
    (!moving.is_empty())
        .then(|| Action::Wait(format!("waiting for {} to settle", moving.join(", "))))
}

/// Rule 4: Count: the seed of a new cluster (a cluster that ran and has no pod is a disaster), one
/// replica more, or the newest replica less, never the primary.
fn count(observed: &Observed, _: &Delays) -> Option<Action> {
    let alive = alive(observed).count();
    if alive == 0 {
        return Some(if observed.has_run {
            Action::Disaster
        } else {
            Action::CreateSeed
        });
    }
    if alive < observed.size {
        // Replicas clone the primary: without one there is nothing to clone.
        return Some(if primaries(observed).is_empty() {
            Action::Wait("no primary to clone a replica from".into())
        } else {
            Action::CreateReplica
        });
    }
    if alive > observed.size {
        // All are Ready here (rule 3 waited otherwise): the newest replica goes.
        let replicas = replicas(observed);
        let newest = replicas.iter().max_by(|a, b| {
            (a.created.as_str(), a.name.as_str()).cmp(&(b.created.as_str(), b.name.as_str()))
        })?;
        return delete(newest, DeleteReason::ScaleDown);
    }
    None
}

/// Rule 5: A planned switchover, on a healthy cluster only (every member ready, rule 3): the primary
/// is deleted, stops cleanly, shipping its last WAL to every replica, and rule 1 promotes the
/// named replica, now as advanced as any (see [`choose`]).
fn planned_switchover(observed: &Observed, _: &Delays) -> Option<Action> {
    let target = observed.switchover_to.as_ref()?;
    let primary = primaries(observed).first().copied()?;
    replicas(observed)
        .iter()
        .any(|m| &m.name == target && m.is(Role::Replica) && m.ready)
        .then(|| delete(primary, DeleteReason::PlannedSwitchover))
        .flatten()
}

/// Rule 6: Minor upgrades, one pod at a time, the primary last. Per pod, so a spec changed back
/// half-way brings the pods already replaced back too.
fn minor_upgrades(observed: &Observed, _: &Delays) -> Option<Action> {
    let wanted = observed.wanted_version.as_str();
    let outdated = |m: &Member| {
        version_change(Some(&m.version), wanted, observed.size) == VersionChange::Minor
    };
    if let Some(old) = replicas(observed).into_iter().find(|m| outdated(m)) {
        return delete(old, DeleteReason::Upgrade);
    }
    let primary = primaries(observed)
        .first()
        .copied()
        .filter(|p| outdated(p))?;
    delete(primary, DeleteReason::Switchover)
}

/// The primary `member` is lost: Running but not Ready, and either down for certain or unready
/// past the failover delay.
fn is_lost(member: &Member, delays: &Delays) -> bool {
    !member.ready
        && member.phase == Phase::Running
        && (member.down.is_some() || member.unready_for >= delays.failover_after)
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
fn fencing_first_is_safe(observed: &Observed) -> bool {
    observed.quorum.is_some()
}

impl Quorum {
    /// Whether promoting the most advanced of `ready` loses no acknowledged commit. Each such
    /// commit reached `number` of the `standbys` (M of them), so it is on at least one of any
    /// M − number + 1 of them: that many must answer. (CloudNativePG's failover quorum.)
    pub fn allows(&self, ready: &[String]) -> Result<(), String> {
        let answering: Vec<&String> = self
            .standbys
            .iter()
            .filter(|name| ready.contains(name))
            .collect();
        let needed = (self.standbys.len() + 1).saturating_sub(self.number).max(1);
        if answering.len() >= needed {
            return Ok(());
        }
        Err(format!(
            "promoting could lose acknowledged commits: each reached {} of the synchronous standbys [{}], and only {} of them [{}] can answer ({needed} needed)",
            self.number,
            self.standbys.join(", "),
            answering.len(),
            answering
                .iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
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

/// How long until one of the delays above runs out for a member of `observed`, so that the
/// round that acts on it runs then, not at the next tick: with an 8 s reconcile interval, a 2 s
/// failover delay would otherwise end anywhere up to 8 s late (controller-runtime's
/// `RequeueAfter`). `None`: no delay is running.
pub fn next_deadline(observed: &Observed, delays: &Delays) -> Option<Duration> {
    observed
        .members
        .iter()
        .filter_map(|m| {
            let (delay, waited) = match (m.phase, m.ready) {
                (Phase::Terminating, _) => (delays.stop_timeout, m.terminating_for),
                // Certain evidence is acted on now: no delay runs.
                (Phase::Running, false) if m.is(Role::Primary) && m.down.is_some() => return None,
                (Phase::Running, false) if m.is(Role::Primary) => {
                    (delays.failover_after, m.unready_for)
                }
                (Phase::Running, false) => (delays.member_lost_after, m.unready_for),
                (Phase::Running, true) if m.not_streaming_for > Duration::ZERO => {
                    (delays.not_streaming_after, m.not_streaming_for)
                }
                _ => return None,
            };
            delay.checked_sub(waited).filter(|left| !left.is_zero())
        })
        .min()
}

fn sorted_names<'a>(members: impl Iterator<Item = &'a Member>) -> Vec<String> {
    let mut names: Vec<String> = members.map(|m| m.name.clone()).collect();
    names.sort();
    names
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

// Test helpers, also used by the tests of conditions.rs, synchronous.rs and backups/.
#[cfg(test)]
impl Member {
    /// A member for the tests: Running, on version 16, no delay running.
    pub(crate) fn running(name: &str, role: Role, ready: bool) -> Member {
        Member {
            name: name.into(),
            role: Some(role),
            phase: Phase::Running,
            ready,
            down: None,
            unready_for: Duration::ZERO,
            terminating_for: Duration::ZERO,
            stopped: false,
            not_streaming_for: Duration::ZERO,
            version: "16".into(),
            created: String::new(),
            restarted: false,
        }
    }
}

#[cfg(test)]
impl Observed {
    /// For the tests: `members` of a cluster of two that has run, with `db-0` its recorded
    /// primary, on version 16, nothing else asked for.
    pub(crate) fn of_running(members: Vec<Member>) -> Observed {
        Observed {
            members,
            recorded_primary: Some("db-0".into()),
            has_run: true,
            size: 2,
            wanted_version: "16".into(),
            switchover_to: None,
            quorum: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, role: Role, phase: Phase, ready: bool) -> Member {
        Member {
            phase,
            created: format!("2026-11-22T10:00:0{}Z", name.len() % 10),
            ..Member::running(name, role, ready)
        }
    }

    fn ready(name: &str, role: Role) -> Member {
        member(name, role, Phase::Running, true)
    }

    fn observed(members: Vec<Member>, size: usize) -> Observed {
        let recorded_primary = members
            .iter()
            .find(|m| m.role == Some(Role::Primary))
            .map(|m| m.name.clone());
        Observed {
            has_run: recorded_primary.is_some(),
            members,
            recorded_primary,
            size,
            wanted_version: "16".into(),
            switchover_to: None,
            quorum: None,
        }
    }

    fn position(pod: &str, in_recovery: bool, received: u64, replayed: u64) -> Position {
        Position {
            pod: pod.into(),
            in_recovery,
            received,
            replayed,
        }
    }

    fn plan(observed: &Observed) -> Action {
        next_action(observed, &Delays::default())
    }

    /// `size` members, all ready: the primary `db-p`, then the replicas `db-a`, `db-b`...
    fn healthy(size: usize) -> Observed {
        let replicas = ["db-a", "db-b", "db-c", "db-d"];
        let mut members = vec![ready("db-p", Role::Primary)];
        for name in &replicas[..size - 1] {
            members.push(ready(name, Role::Replica));
        }
        observed(members, size)
    }

    /// The action that deletes `pod`, for `reason`.
    fn deletes(pod: &str, reason: DeleteReason) -> Action {
        Action::Delete {
            pod: pod.into(),
            reason,
        }
    }

    /// A new cluster with no pods gets its seed; one that ran gets the disaster, never a re-seed.
    #[test]
    fn no_pods_means_seed_when_new_and_disaster_when_it_ran() {
        let mut new = observed(vec![], 3);
        assert_eq!(plan(&new), Action::CreateSeed);
        new.has_run = true;
        assert_eq!(plan(&new), Action::Disaster);
    }

    /// Growing adds one replica per action, and only once everything is ready.
    #[test]
    fn grows_one_replica_at_a_time_after_everything_is_ready() {
        let mut cluster = observed(vec![ready("db-a", Role::Primary)], 3);
        assert_eq!(plan(&cluster), Action::CreateReplica);
        cluster
            .members
            .push(member("db-b", Role::Replica, Phase::Pending, false));
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for db-b to settle".into())
        );
        cluster.members[1] = ready("db-b", Role::Replica);
        assert_eq!(plan(&cluster), Action::CreateReplica);
        cluster.members.push(ready("db-c", Role::Replica));
        assert_eq!(plan(&cluster), Action::Steady);
    }

    /// Shrinking deletes the newest replica, never the primary, even if the primary is newest.
    #[test]
    fn shrinking_deletes_the_newest_replica_never_the_primary() {
        let mut primary = ready("db-p", Role::Primary);
        primary.created = "2026-11-22T12:00:00Z".into();
        let mut old = ready("db-old", Role::Replica);
        old.created = "2026-11-22T10:00:00Z".into();
        let mut new = ready("db-new", Role::Replica);
        new.created = "2026-11-22T11:00:00Z".into();
        let cluster = observed(vec![primary, old, new], 1);
        assert_eq!(plan(&cluster), deletes("db-new", DeleteReason::ScaleDown));
    }

    /// The primary gone with ready replicas left: fail over to them.
    #[test]
    fn a_vanished_primary_is_failed_over_to_the_ready_replicas() {
        let mut cluster = observed(
            vec![
                ready("db-b", Role::Replica),
                member("db-c", Role::Replica, Phase::Pending, false),
                ready("db-a", Role::Replica),
            ],
            3,
        );
        // No pod is the primary, and the status still names the one that was.
        cluster.has_run = true;
        cluster.recorded_primary = Some("db-p".into());
        assert_eq!(
            plan(&cluster),
            Action::Failover {
                lost: Some("db-p".into()),
                candidates: vec!["db-a".into(), "db-b".into()],
                fence: None,
            }
        );
    }

    /// A terminating primary is waited for (its last WAL reaches every replica), then failed over.
    #[test]
    fn a_terminating_primary_is_waited_for_then_failed_over() {
        let mut cluster = observed(
            vec![
                member("db-p", Role::Primary, Phase::Terminating, true),
                ready("db-b", Role::Replica),
            ],
            2,
        );
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for the old primary db-p to stop".into())
        );
        cluster.members.remove(0);
        assert!(matches!(plan(&cluster), Action::Failover { .. }));
    }

    /// A deleted primary whose processes have exited is not waited for until its object goes:
    /// it can no longer write, and its last WAL has reached the replicas.
    #[test]
    fn a_stopped_primary_is_failed_over_before_its_pod_goes() {
        let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
        leaving.stopped = true;
        let cluster = observed(vec![leaving, ready("db-b", Role::Replica)], 2);
        assert!(matches!(plan(&cluster), Action::Failover { .. }));
    }

    /// An unready primary is left alone within the failover delay, fenced after it.
    #[test]
    fn an_unready_primary_is_fenced_only_after_the_failover_delay() {
        let mut primary = member("db-p", Role::Primary, Phase::Running, false);
        primary.unready_for = Duration::from_secs(1);
        let mut cluster = observed(vec![primary, ready("db-b", Role::Replica)], 2);
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for db-p to settle".into())
        );
        cluster.members[0].unready_for = Duration::from_secs(10);
        assert_eq!(plan(&cluster), deletes("db-p", DeleteReason::FencePrimary));
    }

    /// Certain evidence (the container exited, the node lost) is acted on at once; a failed
    /// probe alone waits the failover delay, and no timer runs for what is acted on now.
    #[test]
    fn a_primary_down_for_certain_does_not_wait_the_failover_delay() {
        let primary = member("db-p", Role::Primary, Phase::Running, false);
        let mut cluster = observed(vec![primary, ready("db-b", Role::Replica)], 2);
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for db-p to settle".into())
        );
        assert!(next_deadline(&cluster, &Delays::default()).is_some());
        for down in [Down::Exited, Down::NodeLost] {
            cluster.members[0].down = Some(down);
            assert_eq!(
                plan(&cluster),
                deletes("db-p", DeleteReason::FencePrimary),
                "{down:?}"
            );
            assert_eq!(next_deadline(&cluster, &Delays::default()), None);
        }
    }

    /// A size-3 cluster with synchronous `required` (`ANY 1` of the two replicas) whose primary
    /// is lost as `down` says, unready for `unready_for`.
    fn required_with_lost_primary(down: Option<Down>, unready_for: Duration) -> Observed {
        let mut primary = member("db-p", Role::Primary, Phase::Running, false);
        primary.down = down;
        primary.unready_for = unready_for;
        let mut cluster = observed(
            vec![
                primary,
                ready("db-a", Role::Replica),
                ready("db-b", Role::Replica),
            ],
            3,
        );
        cluster.quorum = Some(Quorum {
            number: 1,
            standbys: vec!["db-a".into(), "db-b".into()],
        });
        cluster
    }

    /// Synchronous `required`: a lost primary (down for certain, or unready past the delay) is
    /// fenced and a standby promoted in the same action, without waiting for it to stop; when
    /// the quorum does not allow a promotion, it is deleted and waited for as before.
    #[test]
    fn with_required_a_lost_primary_is_fenced_first_and_a_standby_promoted() {
        let fenced_first = Action::Failover {
            lost: Some("db-p".into()),
            candidates: vec!["db-a".into(), "db-b".into()],
            fence: Some("db-p".into()),
        };
        let node_lost = required_with_lost_primary(Some(Down::NodeLost), Duration::ZERO);
        assert_eq!(plan(&node_lost), fenced_first);
        let hung = required_with_lost_primary(None, Delays::default().failover_after);
        assert_eq!(plan(&hung), fenced_first);
        let flapping = required_with_lost_primary(None, Duration::from_secs(1));
        assert!(matches!(plan(&flapping), Action::Wait(_)));
        // One of the two standbys unready: a commit may be on it alone.
        let mut short = required_with_lost_primary(Some(Down::Exited), Duration::ZERO);
        short.members[2].ready = false;
        assert_eq!(plan(&short), deletes("db-p", DeleteReason::FencePrimary));
    }

    /// `preferred` and asynchronous clusters (no quorum) wait for a lost primary to stop, up to
    /// the stop timeout, even on a lost node; `required` does not wait for one whose node is
    /// lost.
    #[test]
    fn only_required_promotes_before_a_lost_nodes_primary_stops() {
        let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
        leaving.down = Some(Down::NodeLost);
        let mut cluster = required_with_lost_primary(None, Duration::ZERO);
        cluster.members[0] = leaving;
        assert!(matches!(
            plan(&cluster),
            Action::Failover { fence: None, candidates, .. } if candidates.len() == 2
        ));
        cluster.quorum = None;
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for the old primary db-p to stop".into())
        );
    }

    /// A pod a failover fenced but did not delete (the operator stopped in between) is deleted
    /// before anything else is counted: it still runs, and no Service selects it.
    #[test]
    fn a_pod_left_fenced_is_deleted() {
        let mut cluster = healthy(3);
        cluster.members[1].role = Some(Role::Fenced);
        assert_eq!(plan(&cluster), deletes("db-a", DeleteReason::FencePrimary));
    }

    /// A primary restarted in place is asked, and promoted where it is, once Ready again; a
    /// restarted replica, or a primary not Ready yet, is not.
    #[test]
    fn a_restarted_primary_is_promoted_in_place_once_ready() {
        let restarted = |role, ready| Member {
            restarted: true,
            ..member("db-0", role, Phase::Running, ready)
        };
        let primary = observed(vec![restarted(Role::Primary, true)], 1);
        assert_eq!(
            plan(&primary),
            Action::PromoteInPlace { pod: "db-0".into() }
        );
        let not_yet = observed(vec![restarted(Role::Primary, false)], 1);
        assert!(!matches!(plan(&not_yet), Action::PromoteInPlace { .. }));
        let replica = observed(
            vec![ready("db-1", Role::Primary), restarted(Role::Replica, true)],
            2,
        );
        assert_eq!(plan(&replica), Action::Steady);
    }

    /// Without a ready replica, fencing the primary would leave nothing: wait instead.
    #[test]
    fn an_unready_primary_without_a_ready_replica_is_not_fenced() {
        let mut primary = member("db-p", Role::Primary, Phase::Running, false);
        primary.unready_for = Duration::from_secs(600);
        let cluster = observed(vec![primary], 1);
        assert_eq!(
            plan(&cluster),
            Action::Wait("waiting for db-p to settle".into())
        );
    }

    /// Two primaries: the recorded one stays.
    #[test]
    fn of_two_primaries_the_recorded_one_stays() {
        let mut cluster = observed(
            vec![
                ready("db-new", Role::Primary),
                ready("db-rec", Role::Primary),
            ],
            2,
        );
        cluster.recorded_primary = Some("db-rec".into());
        assert_eq!(
            plan(&cluster),
            deletes("db-new", DeleteReason::SecondPrimary)
        );
    }

    /// A replica unready past the lost-member delay is deleted; before it, waited for.
    #[test]
    fn a_lost_replica_is_deleted_after_the_delay() {
        let mut lost = member("db-b", Role::Replica, Phase::Running, false);
        lost.unready_for = Duration::from_secs(59);
        let mut cluster = observed(vec![ready("db-p", Role::Primary), lost], 2);
        assert!(matches!(plan(&cluster), Action::Wait(_)));
        cluster.members[1].unready_for = Duration::from_secs(60);
        assert_eq!(plan(&cluster), deletes("db-b", DeleteReason::MemberLost));
    }

    /// A Ready replica the primary does not stream to is replaced once the delay has passed, even
    /// while another member moves; within the delay it is left to reconnect.
    #[test]
    fn a_ready_replica_that_does_not_stream_is_replaced_after_the_delay() {
        let mut astray = ready("db-b", Role::Replica);
        astray.not_streaming_for = Duration::from_secs(29);
        let mut cluster = observed(
            vec![
                ready("db-p", Role::Primary),
                ready("db-a", Role::Replica),
                astray,
            ],
            3,
        );
        assert_eq!(plan(&cluster), Action::Steady);
        cluster.members[2].not_streaming_for = Delays::default().not_streaming_after;
        let replace = deletes("db-b", DeleteReason::NotStreaming);
        assert_eq!(plan(&cluster), replace);
        cluster
            .members
            .push(member("db-c", Role::Replica, Phase::Pending, false));
        assert_eq!(plan(&cluster), replace);
        // The primary comes first: unready past the failover delay, it is fenced instead.
        cluster.members[0].ready = false;
        cluster.members[0].unready_for = Duration::from_secs(60);
        assert!(matches!(
            plan(&cluster),
            Action::Delete {
                reason: DeleteReason::FencePrimary,
                ..
            }
        ));
    }

    /// The round is asked for when the first running delay ends, whatever the tick.
    #[test]
    fn the_next_round_comes_when_the_first_delay_runs_out() {
        let delays = Delays::default();
        let mut cluster = healthy(2);
        assert_eq!(next_deadline(&cluster, &delays), None);
        cluster.members[0].ready = false;
        cluster.members[0].unready_for = Duration::from_secs(1);
        assert_eq!(
            next_deadline(&cluster, &delays),
            Some(delays.failover_after - Duration::from_secs(1))
        );
        cluster.members[1].not_streaming_for =
            delays.not_streaming_after - Duration::from_millis(500);
        assert_eq!(
            next_deadline(&cluster, &delays),
            Some(Duration::from_millis(500))
        );
        // A delay already over is the plan's to act on now, not a deadline.
        cluster.members[0].unready_for = Duration::from_secs(600);
        cluster.members[1].not_streaming_for = Duration::ZERO;
        assert_eq!(next_deadline(&cluster, &delays), None);
    }

    /// A minor upgrade replaces replicas first, one at a time, then switches the primary over.
    #[test]
    fn a_minor_upgrade_replaces_replicas_then_the_primary() {
        let mut cluster = healthy(3);
        for m in &mut cluster.members {
            m.version = "16.3".into();
        }
        cluster.wanted_version = "16.4".into();
        assert_eq!(plan(&cluster), deletes("db-a", DeleteReason::Upgrade));
        cluster.members[1].version = "16.4".into();
        cluster.members[2].version = "16.4".into();
        assert_eq!(plan(&cluster), deletes("db-p", DeleteReason::Switchover));
    }

    /// A major change is refused and nothing is replaced; a one-member minor change too.
    #[test]
    fn major_changes_and_single_member_upgrades_are_refused() {
        assert_eq!(
            version_change(Some("15.2"), "16", 3),
            VersionChange::Major { from: 15, to: 16 }
        );
        assert_eq!(
            version_change(Some("16.2"), "16.4", 1),
            VersionChange::NeedsReplica
        );
        assert_eq!(
            version_change(Some("16.2"), "16.4", 2),
            VersionChange::Minor
        );
        assert_eq!(version_change(None, "16.4", 2), VersionChange::None);
        let mut cluster = healthy(2);
        for m in &mut cluster.members {
            m.version = "15".into();
        }
        assert_eq!(plan(&cluster), Action::Steady);
    }

    /// The replica with the most WAL is promoted; one already promoted wins outright.
    #[test]
    fn the_most_advanced_replica_is_chosen() {
        let positions = [
            position("db-a", true, 100, 90),
            position("db-b", true, 0, 120),
            position("db-c", true, 110, 110),
        ];
        assert_eq!(
            most_advanced(&positions).map(|p| p.pod.as_str()),
            Some("db-b")
        );
        let with_promoted = [
            position("db-a", true, 500, 500),
            position("db-z", false, 0, 0),
        ];
        assert_eq!(
            most_advanced(&with_promoted).map(|p| p.pod.as_str()),
            Some("db-z")
        );
        assert_eq!(most_advanced(&[]), None);
    }

    /// Synchronous `required`: the primary gone, a promotion only among the standbys, and only
    /// when enough of them answer that every acknowledged commit is on one of them.
    #[test]
    fn a_synchronous_failover_needs_its_quorum() {
        let mut lost = observed(
            vec![ready("db-a", Role::Replica), ready("db-b", Role::Replica)],
            3,
        );
        lost.has_run = true;
        lost.recorded_primary = Some("db-p".into());
        lost.quorum = Some(Quorum {
            number: 1,
            standbys: vec!["db-a".into(), "db-b".into()],
        });
        assert!(
            matches!(plan(&lost), Action::Failover { candidates, .. } if candidates.len() == 2)
        );
        // One of two answers with ANY 1: a commit may be on the other only.
        lost.members[1].ready = false;
        assert!(
            matches!(plan(&lost), Action::FailoverRefused(why) if why.contains("only 1 of them [db-a]"))
        );
        // ANY 2 of two: every commit is on both, one suffices.
        lost.quorum = Some(Quorum {
            number: 2,
            standbys: vec!["db-a".into(), "db-b".into()],
        });
        assert!(
            matches!(plan(&lost), Action::Failover { candidates, .. } if candidates == ["db-a"])
        );
        // A ready replica outside the standbys is never the one promoted.
        lost.quorum = Some(Quorum {
            number: 1,
            standbys: vec!["db-a".into()],
        });
        lost.members[1].ready = true;
        assert!(
            matches!(plan(&lost), Action::Failover { candidates, .. } if candidates == ["db-a"])
        );
    }

    /// A deleted primary is waited for while it stops; one that does not stop within
    /// `stop_timeout` (its node is lost) no longer holds the failover up.
    #[test]
    fn a_primary_that_does_not_stop_is_failed_over_after_the_stop_timeout() {
        let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
        let mut cluster = observed(vec![leaving.clone(), ready("db-r", Role::Replica)], 2);
        assert!(matches!(plan(&cluster), Action::Wait(why) if why.contains("to stop")));
        leaving.terminating_for = Delays::default().stop_timeout;
        cluster.members[0] = leaving;
        assert!(matches!(
            plan(&cluster),
            Action::Failover { candidates, .. } if candidates == ["db-r"]
        ));
        // Fenced and failed over: the stuck pod does not hold up its replacement.
        cluster.members[0].role = Some(Role::Fenced);
        cluster.members[1].role = Some(Role::Primary);
        assert_eq!(plan(&cluster), Action::CreateReplica);
    }

    /// A planned switchover: on a healthy cluster the primary goes first; then the named
    /// replica is promoted when it is as advanced as the best, never at the cost of a commit.
    #[test]
    fn a_planned_switchover_stops_the_primary_then_prefers_the_named_replica() {
        let mut cluster = healthy(3);
        cluster.switchover_to = Some("db-b".into());
        assert_eq!(
            plan(&cluster),
            deletes("db-p", DeleteReason::PlannedSwitchover)
        );
        // Not while a member is unready, nor to a pod that is not a ready replica.
        cluster.members[1].ready = false;
        assert!(matches!(plan(&cluster), Action::Wait(_)));
        cluster.members[1].ready = true;
        cluster.switchover_to = Some("db-x".into());
        assert_eq!(plan(&cluster), Action::Steady);

        let even = [
            position("db-a", true, 100, 100),
            position("db-b", true, 100, 100),
        ];
        let behind = [
            position("db-a", true, 100, 100),
            position("db-b", true, 90, 90),
        ];
        // The replicas' positions, the one named, the one promoted.
        for (positions, named, chosen) in [
            (&even, Some("db-b"), "db-b"),
            (&behind, Some("db-b"), "db-a"),
            (&even, None, "db-a"),
        ] {
            let promoted = choose(positions, named).map(|p| p.pod.as_str());
            assert_eq!(promoted, Some(chosen), "{named:?} named");
        }
    }
}
