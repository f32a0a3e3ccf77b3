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
//! 1. **The primary is gone: wait.** Replicas follow the primary; with none, nothing is cloned
//!    and nothing is promoted here. Step 05 adds the failover that promotes a replica.
//! 2. **Lost members go.** A member Failed or Succeeded, or a replica unready for longer than
//!    the lost-member delay (a lost node, a crash loop), is deleted; rule 4 clones a replica in
//!    its place (a primary gets here only once no replica is left: rule 1 comes first).
//! 3. **Wait while anything moves**: a pod pending (a replica's base backup runs in its init
//!    container), starting, or terminating.
//! 4. **Count.** No pods: a new cluster gets its seed primary; a cluster that ran is a disaster
//!    (re-seeding an empty database would hide the loss). Fewer than `size`: add one replica.
//!    More: delete the newest replica, never the primary (every member is ready by now: rule 3
//!    waited otherwise).

use std::time::Duration;

use super::manifests::Role;

mod version;
mod with_more;

pub use version::{version_change, VersionChange};

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

/// One pod of the cluster, as the plan sees it. `X`: what a later step observes of it besides
/// (step 04: nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member<X = ()> {
    pub name: String,
    /// From the `workshop.example.com/role` label; `None` if it is neither (someone removed it).
    pub role: Option<Role>,
    pub phase: Phase,
    /// Kubernetes' Ready condition: the readiness probe (`pg_isready`) passes.
    pub ready: bool,
    /// How long the pod has been Running but not Ready (zero when Ready), on this task's clock.
    /// A task that first sees it unready credits the kubelet's record (the Ready condition's
    /// `lastTransitionTime`), at most half the lost-member delay (`cluster::since_recorded`).
    pub unready_for: Duration,
    /// The `postgres` image tag its container runs (`16.4`).
    pub version: String,
    /// `metadata.creationTimestamp` (RFC 3339, so later sorts after earlier).
    pub created: String,
    /// A later step's own observation of this member.
    pub more: X,
}

impl<X> Member<X> {
    pub fn is(&self, role: Role) -> bool {
        self.role == Some(role)
    }
}

/// Everything the plan needs about a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed<X = ()> {
    /// The cluster's pods (owned by its uid), in any order.
    pub members: Vec<Member<X>>,
    /// `status.primary`: the pod the operator last made (or found) primary.
    pub recorded_primary: Option<String>,
    /// The cluster ran before: `status.phase` is Running or Failed (step 06 adds Recovering from
    /// its own backups). With no pods left, this is what tells a disaster from a cluster that is
    /// new.
    pub has_run: bool,
    /// `spec.size`.
    pub size: usize,
    /// `spec.version`.
    pub wanted_version: String,
}

/// How long to give a pod before acting on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delays {
    /// A replica Running but unready this long is deleted and replaced. Longer than a replica's
    /// start (recovery replays the WAL it missed) on a slow machine.
    pub member_lost_after: Duration,
}

impl Default for Delays {
    fn default() -> Self {
        Delays {
            member_lost_after: Duration::from_secs(60),
        }
    }
}

/// Why a pod is deleted; each has its story line and Event reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// A replica unready past the lost-member delay.
    MemberLost,
    /// Failed or Succeeded: it will not run again.
    MemberDead,
    /// More pods than `spec.size`.
    ScaleDown,
}

/// The one next thing to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The cluster is as wanted.
    Steady,
    /// Something is moving, or only a later step could act; look again at the next tick or pod
    /// event.
    Wait(String),
    /// Create the first pod, the primary, of a new cluster.
    CreateSeed,
    /// Create one replica (it clones the primary in its init container).
    CreateReplica,
    Delete {
        pod: String,
        reason: DeleteReason,
    },
    /// Every member of a cluster that ran is gone.
    Disaster,
}

/// One rule of the plan: the action it calls for, or `None` to leave the choice to the next.
pub type Rule = fn(&Observed, &Delays) -> Option<Action>;

/// The rules of the module docs, in their order: the first that has something to say wins.
// ANCHOR: rules
pub const RULES: &[Rule] = &[primary_lost_waits, leftovers_go, wait_while_moving, count];
// ANCHOR_END: rules

/// The one next action for `observed`: the first rule's that has one, else [`Action::Steady`].
pub fn next_action(observed: &Observed, delays: &Delays) -> Action {
    RULES
        .iter()
        .find_map(|rule| rule(observed, delays))
        .unwrap_or(Action::Steady)
}

/// The members not on their way out.
pub fn alive<X>(observed: &Observed<X>) -> impl Iterator<Item = &Member<X>> {
    observed
        .members
        .iter()
        .filter(|m| m.phase != Phase::Terminating)
}

/// The members labelled primary that may still serve: alive, not Failed or Succeeded.
pub fn primaries<X>(observed: &Observed<X>) -> Vec<&Member<X>> {
    alive(observed)
        .filter(|m| m.is(Role::Primary) && m.phase != Phase::Done)
        .collect()
}

/// Every member but the primaries, alive, by name.
pub fn replicas<X>(observed: &Observed<X>) -> Vec<&Member<X>> {
    let mut replicas: Vec<&Member<X>> = alive(observed).filter(|m| !m.is(Role::Primary)).collect();
    replicas.sort_by(|a, b| a.name.cmp(&b.name));
    replicas
}

fn delete<X>(member: &Member<X>, reason: DeleteReason) -> Option<Action> {
    Some(Action::Delete {
        pod: member.name.clone(),
        reason,
    })
}

/// Rule 1: The primary is gone from a cluster that ran: wait. Nothing here makes a replica the
/// primary; step 05's failover does.
pub fn primary_lost_waits<X>(observed: &Observed<X>, _: &Delays) -> Option<Action> {
    let ran = observed.has_run || observed.recorded_primary.is_some();
    let replicas_left = alive(observed).any(|m| m.phase != Phase::Done);
    (ran && replicas_left && primaries(observed).is_empty()).then(|| {
        Action::Wait(format!(
            "the primary {} is gone; promoting a replica in its place is step 05's failover",
            observed
                .recorded_primary
                .as_deref()
                .unwrap_or("<none recorded>")
        ))
    })
}

/// Rule 2: Members that will not serve again go (rule 4 replaces them): one Failed or
/// Succeeded, a replica unready past the delay.
pub fn leftovers_go<X>(observed: &Observed<X>, delays: &Delays) -> Option<Action> {
    if let Some(dead) = alive(observed).find(|m| m.phase == Phase::Done) {
        return delete(dead, DeleteReason::MemberDead);
    }
    let lost = replicas(observed).into_iter().find(|m| {
        m.phase == Phase::Running && !m.ready && m.unready_for >= delays.member_lost_after
    })?;
    delete(lost, DeleteReason::MemberLost)
}

/// Rule 3: Wait while anything moves: a pod pending, starting, or terminating.
pub fn wait_while_moving<X>(observed: &Observed<X>, _: &Delays) -> Option<Action> {
    let moving: Vec<String> = sorted_names(observed.members.iter().filter(|m| {
        m.phase == Phase::Pending
            || m.phase == Phase::Terminating
            || (m.phase == Phase::Running && !m.ready)
    }));
    (!moving.is_empty())
        .then(|| Action::Wait(format!("waiting for {} to settle", moving.join(", "))))
}

/// Rule 4: Count: the seed of a new cluster (a cluster that ran and has no pod is a disaster), one
/// replica more, or the newest replica less, never the primary.
pub fn count<X>(observed: &Observed<X>, _: &Delays) -> Option<Action> {
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

/// The names of `members`, sorted.
pub fn sorted_names<'a, X: 'a>(members: impl Iterator<Item = &'a Member<X>>) -> Vec<String> {
    let mut names: Vec<String> = members.map(|m| m.name.clone()).collect();
    names.sort();
    names
}

// Test helpers, also used by the tests of conditions.rs, src/failover/ and src/backups/.
#[cfg(test)]
impl<X: Default> Member<X> {
    /// A member for the tests: Running, on version 16, no delay running.
    pub(crate) fn running(name: &str, role: Role, ready: bool) -> Member<X> {
        Member {
            name: name.into(),
            role: Some(role),
            phase: Phase::Running,
            ready,
            unready_for: Duration::ZERO,
            version: "16".into(),
            created: String::new(),
            more: X::default(),
        }
    }
}

#[cfg(test)]
impl Observed {
    /// For the tests: the same observation, each member with a later step's default `more`.
    pub(crate) fn more<Y: Default>(self) -> Observed<Y> {
        Observed {
            members: self
                .members
                .into_iter()
                .map(|m| m.with(Y::default()))
                .collect(),
            recorded_primary: self.recorded_primary,
            has_run: self.has_run,
            size: self.size,
            wanted_version: self.wanted_version,
        }
    }
}

#[cfg(test)]
impl<X> Observed<X> {
    /// For the tests: `members` of a cluster of two that has run, with `db-0` its recorded
    /// primary, on version 16.
    pub(crate) fn of_running(members: Vec<Member<X>>) -> Observed<X> {
        Observed {
            members,
            recorded_primary: Some("db-0".into()),
            has_run: true,
            size: 2,
            wanted_version: "16".into(),
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

    /// The primary gone, replicas left: step 04 waits and says why; it promotes nothing.
    #[test]
    fn a_lost_primary_is_waited_for() {
        let mut cluster = observed(
            vec![ready("db-a", Role::Replica), ready("db-b", Role::Replica)],
            3,
        );
        cluster.recorded_primary = Some("db-p".into());
        cluster.has_run = true;
        match plan(&cluster) {
            Action::Wait(why) => assert!(why.contains("db-p is gone"), "{why}"),
            other => panic!("expected a wait, got {other:?}"),
        }
        // A new cluster's seed, starting: nothing is lost yet.
        let seeding = observed(
            vec![member("db-p", Role::Primary, Phase::Pending, false)],
            3,
        );
        assert_eq!(
            plan(&seeding),
            Action::Wait("waiting for db-p to settle".into())
        );
    }
}
