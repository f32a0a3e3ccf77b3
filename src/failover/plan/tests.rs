//! Step 05's rules, as the tests of the plan before the split had them: every expected action
//! the same, step 04's as `Planned::Core`, this step's own as `Planned::Own`.

use super::*;

impl Failing {
    /// For the tests (these, `fence.rs`'s, step 06's): `cluster`, with no switchover asked for
    /// and asynchronous replication.
    pub(crate) fn of(cluster: Observed<Facts>) -> Failing {
        Failing {
            cluster,
            switchover_to: None,
            quorum: None,
        }
    }
}

fn member(name: &str, role: Role, phase: Phase, ready: bool) -> Seen {
    Member {
        phase,
        created: format!("2026-11-22T10:00:0{}Z", name.len() % 10),
        ..Member::running(name, role, ready)
    }
}

fn ready(name: &str, role: Role) -> Seen {
    member(name, role, Phase::Running, true)
}

/// `members` of a cluster of `size`; it has run, with its primary recorded, if one is labelled
/// so. No switchover asked for, asynchronous replication.
fn observed(members: Vec<Seen>, size: usize) -> Failing {
    let recorded_primary = members
        .iter()
        .find(|m| m.role == Some(Role::Primary))
        .map(|m| m.name.clone());
    Failing::of(Observed {
        has_run: recorded_primary.is_some(),
        members,
        recorded_primary,
        size,
        wanted_version: "16".into(),
    })
}

fn position(pod: &str, in_recovery: bool, received: u64, replayed: u64) -> Position {
    Position {
        pod: pod.into(),
        in_recovery,
        received,
        replayed,
    }
}

fn plan(failing: &Failing) -> Step {
    next_step(failing, &Delays::default(), &FailoverDelays::default())
}

fn deadline(failing: &Failing) -> Option<Duration> {
    next_deadline(failing, &Delays::default(), &FailoverDelays::default())
}

/// `size` members, all ready: the primary `db-p`, then the replicas `db-a`, `db-b`...
fn healthy(size: usize) -> Failing {
    let replicas = ["db-a", "db-b", "db-c", "db-d"];
    let mut members = vec![ready("db-p", Role::Primary)];
    for name in &replicas[..size - 1] {
        members.push(ready(name, Role::Replica));
    }
    observed(members, size)
}

/// The action that deletes `pod`, for `reason`.
fn deletes(pod: &str, reason: FailReason) -> Step {
    Planned::Own(FailoverAction::Delete {
        pod: pod.into(),
        reason,
    })
}

fn waits(why: &str) -> Step {
    Planned::Core(Action::Wait(why.into()))
}

/// The primary gone with ready replicas left: fail over to them.
#[test]
fn a_vanished_primary_is_failed_over_to_the_ready_replicas() {
    let mut failing = observed(
        vec![
            ready("db-b", Role::Replica),
            member("db-c", Role::Replica, Phase::Pending, false),
            ready("db-a", Role::Replica),
        ],
        3,
    );
    // No pod is the primary, and the status still names the one that was.
    failing.cluster.has_run = true;
    failing.cluster.recorded_primary = Some("db-p".into());
    assert_eq!(
        plan(&failing),
        Planned::Own(FailoverAction::Failover {
            lost: Some("db-p".into()),
            candidates: vec!["db-a".into(), "db-b".into()],
            fence: None,
        })
    );
}

/// A terminating primary is waited for (its last WAL reaches every replica), then failed over.
#[test]
fn a_terminating_primary_is_waited_for_then_failed_over() {
    let mut failing = observed(
        vec![
            member("db-p", Role::Primary, Phase::Terminating, true),
            ready("db-b", Role::Replica),
        ],
        2,
    );
    assert_eq!(
        plan(&failing),
        waits("waiting for the old primary db-p to stop")
    );
    failing.cluster.members.remove(0);
    assert!(matches!(
        plan(&failing),
        Planned::Own(FailoverAction::Failover { .. })
    ));
}

/// A deleted primary whose processes have exited is not waited for until its object goes:
/// it can no longer write, and its last WAL has reached the replicas.
#[test]
fn a_stopped_primary_is_failed_over_before_its_pod_goes() {
    let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
    leaving.more.stopped = true;
    let failing = observed(vec![leaving, ready("db-b", Role::Replica)], 2);
    assert!(matches!(
        plan(&failing),
        Planned::Own(FailoverAction::Failover { .. })
    ));
}

/// An unready primary is left alone within the failover delay, fenced after it.
#[test]
fn an_unready_primary_is_fenced_only_after_the_failover_delay() {
    let mut primary = member("db-p", Role::Primary, Phase::Running, false);
    primary.more.unready_for = Duration::from_secs(1);
    let mut failing = observed(vec![primary, ready("db-b", Role::Replica)], 2);
    assert_eq!(plan(&failing), waits("waiting for db-p to settle"));
    failing.cluster.members[0].more.unready_for = Duration::from_secs(10);
    assert_eq!(plan(&failing), deletes("db-p", FailReason::FencePrimary));
}

/// A primary whose container started anew (a node back from a power cut) may be replaying the
/// most WAL of all: it is given the replacement delay, not the failover delay, to answer.
#[test]
fn a_primary_started_anew_is_given_the_replacement_delay() {
    let mut primary = member("db-p", Role::Primary, Phase::Running, false);
    primary.more.started_anew = true;
    primary.more.unready_for = Duration::from_secs(10);
    let mut failing = observed(vec![primary, ready("db-b", Role::Replica)], 2);
    assert_eq!(plan(&failing), waits("waiting for db-p to settle"));
    let lost_after = Delays::default().member_lost_after;
    assert_eq!(
        deadline(&failing),
        Some(lost_after - Duration::from_secs(10))
    );
    failing.cluster.members[0].more.unready_for = lost_after;
    assert_eq!(plan(&failing), deletes("db-p", FailReason::FencePrimary));
}

/// Certain evidence (the container exited, the node lost) is acted on at once; a failed
/// probe alone waits the failover delay, and no timer runs for what is acted on now.
#[test]
fn a_primary_down_for_certain_does_not_wait_the_failover_delay() {
    let primary = member("db-p", Role::Primary, Phase::Running, false);
    let mut failing = observed(vec![primary, ready("db-b", Role::Replica)], 2);
    assert_eq!(plan(&failing), waits("waiting for db-p to settle"));
    assert!(deadline(&failing).is_some());
    for down in [Down::Exited, Down::NodeLost] {
        failing.cluster.members[0].more.down = Some(down);
        assert_eq!(
            plan(&failing),
            deletes("db-p", FailReason::FencePrimary),
            "{down:?}"
        );
        assert_eq!(deadline(&failing), None);
    }
}

/// A size-3 cluster with synchronous `required` (`ANY 1` of the two replicas) whose primary
/// is lost as `down` says, unready for `unready_for`.
fn required_with_lost_primary(down: Option<Down>, unready_for: Duration) -> Failing {
    let mut primary = member("db-p", Role::Primary, Phase::Running, false);
    primary.more.down = down;
    primary.more.unready_for = unready_for;
    let mut failing = observed(
        vec![
            primary,
            ready("db-a", Role::Replica),
            ready("db-b", Role::Replica),
        ],
        3,
    );
    failing.quorum = Some(Quorum {
        number: 1,
        standbys: vec!["db-a".into(), "db-b".into()],
    });
    failing
}

/// Synchronous `required`: a lost primary (down for certain, or unready past the delay) is
/// fenced and a standby promoted in the same action, without waiting for it to stop; when
/// the quorum does not allow a promotion, it is deleted and waited for as before.
#[test]
fn with_required_a_lost_primary_is_fenced_first_and_a_standby_promoted() {
    let fenced_first = Planned::Own(FailoverAction::Failover {
        lost: Some("db-p".into()),
        candidates: vec!["db-a".into(), "db-b".into()],
        fence: Some("db-p".into()),
    });
    let node_lost = required_with_lost_primary(Some(Down::NodeLost), Duration::ZERO);
    assert_eq!(plan(&node_lost), fenced_first);
    let hung = required_with_lost_primary(None, FailoverDelays::default().failover_after);
    assert_eq!(plan(&hung), fenced_first);
    let flapping = required_with_lost_primary(None, Duration::from_secs(1));
    assert!(matches!(plan(&flapping), Planned::Core(Action::Wait(_))));
    // One of the two standbys unready: a commit may be on it alone.
    let mut short = required_with_lost_primary(Some(Down::Exited), Duration::ZERO);
    short.cluster.members[2].ready = false;
    assert_eq!(plan(&short), deletes("db-p", FailReason::FencePrimary));
}

/// `preferred` and asynchronous clusters (no quorum) wait for a lost primary to stop, up to
/// the stop timeout, even on a lost node; `required` does not wait for one whose node is
/// lost.
#[test]
fn only_required_promotes_before_a_lost_nodes_primary_stops() {
    let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
    leaving.more.down = Some(Down::NodeLost);
    let mut failing = required_with_lost_primary(None, Duration::ZERO);
    failing.cluster.members[0] = leaving;
    assert!(matches!(
        plan(&failing),
        Planned::Own(FailoverAction::Failover { fence: None, candidates, .. })
            if candidates.len() == 2
    ));
    failing.quorum = None;
    assert_eq!(
        plan(&failing),
        waits("waiting for the old primary db-p to stop")
    );
}

/// A pod a failover fenced but did not delete (the operator stopped in between) is deleted
/// before anything else is counted: it still runs, and no Service selects it.
#[test]
fn a_pod_left_fenced_is_deleted() {
    let mut failing = healthy(3);
    fence(&mut failing.cluster.members[1]);
    assert_eq!(plan(&failing), deletes("db-a", FailReason::FencePrimary));
}

/// A primary restarted in place is asked, and promoted where it is, once Ready again; a
/// restarted replica, or a primary not Ready yet, is not.
#[test]
fn a_restarted_primary_is_promoted_in_place_once_ready() {
    let restarted = |role, ready| {
        let mut member = member("db-0", role, Phase::Running, ready);
        member.more.restarted = true;
        member
    };
    let primary = observed(vec![restarted(Role::Primary, true)], 1);
    assert_eq!(
        plan(&primary),
        Planned::Own(FailoverAction::PromoteInPlace { pod: "db-0".into() })
    );
    let not_yet = observed(vec![restarted(Role::Primary, false)], 1);
    assert!(!matches!(
        plan(&not_yet),
        Planned::Own(FailoverAction::PromoteInPlace { .. })
    ));
    let replica = observed(
        vec![ready("db-1", Role::Primary), restarted(Role::Replica, true)],
        2,
    );
    assert_eq!(plan(&replica), Planned::Core(Action::Steady));
}

/// Without a ready replica, fencing the primary would leave nothing: wait instead.
#[test]
fn an_unready_primary_without_a_ready_replica_is_not_fenced() {
    let mut primary = member("db-p", Role::Primary, Phase::Running, false);
    primary.more.unready_for = Duration::from_secs(600);
    let failing = observed(vec![primary], 1);
    assert_eq!(plan(&failing), waits("waiting for db-p to settle"));
}

/// Two primaries: the recorded one stays.
#[test]
fn of_two_primaries_the_recorded_one_stays() {
    let mut failing = observed(
        vec![
            ready("db-new", Role::Primary),
            ready("db-rec", Role::Primary),
        ],
        2,
    );
    failing.cluster.recorded_primary = Some("db-rec".into());
    assert_eq!(plan(&failing), deletes("db-new", FailReason::SecondPrimary));
}

/// A Ready replica the primary does not stream to is replaced once the delay has passed, even
/// while another member moves; within the delay it is left to reconnect.
#[test]
fn a_ready_replica_that_does_not_stream_is_replaced_after_the_delay() {
    let mut astray = ready("db-b", Role::Replica);
    astray.more.not_streaming_for = Duration::from_secs(29);
    let mut failing = observed(
        vec![
            ready("db-p", Role::Primary),
            ready("db-a", Role::Replica),
            astray,
        ],
        3,
    );
    assert_eq!(plan(&failing), Planned::Core(Action::Steady));
    failing.cluster.members[2].more.not_streaming_for =
        FailoverDelays::default().not_streaming_after;
    let replace = deletes("db-b", FailReason::NotStreaming);
    assert_eq!(plan(&failing), replace);
    failing
        .cluster
        .members
        .push(member("db-c", Role::Replica, Phase::Pending, false));
    assert_eq!(plan(&failing), replace);
    // The primary comes first: unready past the failover delay, it is fenced instead.
    failing.cluster.members[0].ready = false;
    failing.cluster.members[0].more.unready_for = Duration::from_secs(60);
    assert!(matches!(
        plan(&failing),
        Planned::Own(FailoverAction::Delete {
            reason: FailReason::FencePrimary,
            ..
        })
    ));
}

/// The round is asked for when the first running delay ends, whatever the tick.
#[test]
fn the_next_round_comes_when_the_first_delay_runs_out() {
    let delays = FailoverDelays::default();
    let mut failing = healthy(2);
    assert_eq!(deadline(&failing), None);
    failing.cluster.members[0].ready = false;
    failing.cluster.members[0].more.unready_for = Duration::from_secs(1);
    assert_eq!(
        deadline(&failing),
        Some(delays.failover_after - Duration::from_secs(1))
    );
    failing.cluster.members[1].more.not_streaming_for =
        delays.not_streaming_after - Duration::from_millis(500);
    assert_eq!(deadline(&failing), Some(Duration::from_millis(500)));
    // A delay already over is the plan's to act on now, not a deadline.
    failing.cluster.members[0].more.unready_for = Duration::from_secs(600);
    failing.cluster.members[1].more.not_streaming_for = Duration::ZERO;
    assert_eq!(deadline(&failing), None);
}

/// A minor upgrade replaces replicas first, one at a time, then switches the primary over.
#[test]
fn a_minor_upgrade_replaces_replicas_then_the_primary() {
    let mut failing = healthy(3);
    for m in &mut failing.cluster.members {
        m.version = "16.3".into();
    }
    failing.cluster.wanted_version = "16.4".into();
    assert_eq!(plan(&failing), deletes("db-a", FailReason::Upgrade));
    failing.cluster.members[1].version = "16.4".into();
    failing.cluster.members[2].version = "16.4".into();
    assert_eq!(plan(&failing), deletes("db-p", FailReason::Switchover));
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
    lost.cluster.has_run = true;
    lost.cluster.recorded_primary = Some("db-p".into());
    lost.quorum = Some(Quorum {
        number: 1,
        standbys: vec!["db-a".into(), "db-b".into()],
    });
    assert!(matches!(
        plan(&lost),
        Planned::Own(FailoverAction::Failover { candidates, .. }) if candidates.len() == 2
    ));
    // One of two answers with ANY 1: a commit may be on the other only.
    lost.cluster.members[1].ready = false;
    assert!(matches!(
        plan(&lost),
        Planned::Own(FailoverAction::FailoverRefused(why)) if why.contains("only 1 of them [db-a]")
    ));
    // ANY 2 of two: every commit is on both, one suffices.
    lost.quorum = Some(Quorum {
        number: 2,
        standbys: vec!["db-a".into(), "db-b".into()],
    });
    assert!(matches!(
        plan(&lost),
        Planned::Own(FailoverAction::Failover { candidates, .. }) if candidates == ["db-a"]
    ));
    // A ready replica outside the standbys is never the one promoted.
    lost.quorum = Some(Quorum {
        number: 1,
        standbys: vec!["db-a".into()],
    });
    lost.cluster.members[1].ready = true;
    assert!(matches!(
        plan(&lost),
        Planned::Own(FailoverAction::Failover { candidates, .. }) if candidates == ["db-a"]
    ));
}

/// A deleted primary is waited for while it stops; one that does not stop within
/// `stop_timeout` (its node is lost) no longer holds the failover up.
#[test]
fn a_primary_that_does_not_stop_is_failed_over_after_the_stop_timeout() {
    let mut leaving = member("db-p", Role::Primary, Phase::Terminating, false);
    let mut failing = observed(vec![leaving.clone(), ready("db-r", Role::Replica)], 2);
    assert!(matches!(
        plan(&failing),
        Planned::Core(Action::Wait(why)) if why.contains("to stop")
    ));
    leaving.more.terminating_for = FailoverDelays::default().stop_timeout;
    failing.cluster.members[0] = leaving;
    assert!(matches!(
        plan(&failing),
        Planned::Own(FailoverAction::Failover { candidates, .. }) if candidates == ["db-r"]
    ));
    // Fenced and failed over: the stuck pod does not hold up its replacement.
    fence(&mut failing.cluster.members[0]);
    failing.cluster.members[1].role = Some(Role::Primary);
    assert_eq!(plan(&failing), Planned::Core(Action::CreateReplica));
}

/// A planned switchover: on a healthy cluster the primary goes first; then the named
/// replica is promoted when it is as advanced as the best, never at the cost of a commit.
#[test]
fn a_planned_switchover_stops_the_primary_then_prefers_the_named_replica() {
    let mut failing = healthy(3);
    failing.switchover_to = Some("db-b".into());
    assert_eq!(
        plan(&failing),
        deletes("db-p", FailReason::PlannedSwitchover)
    );
    // Not while a member is unready, nor to a pod that is not a ready replica.
    failing.cluster.members[1].ready = false;
    assert!(matches!(plan(&failing), Planned::Core(Action::Wait(_))));
    failing.cluster.members[1].ready = true;
    failing.switchover_to = Some("db-x".into());
    assert_eq!(plan(&failing), Planned::Core(Action::Steady));

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

/// `member` as a failover leaves it labelled `fenced`: no role step 04 knows, fenced here.
fn fence(member: &mut Seen) {
    member.role = None;
    member.more.fenced = true;
}
