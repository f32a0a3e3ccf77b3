//! The controller's routing and each cluster task's loop, with an in-memory `PodApi` and paused
//! tokio time: timers, floods and full channels, without a network. WORKSHOP.md step 03.
//! (`controller_against_sandbox.rs` runs the same story over real HTTP.)

mod controller_support;

use std::time::Duration;

use controller_support::{cluster, drain, owned_pod, resized, wait_for_line, FakePods};
use postgres_operator::controller::{Controller, ControllerOptions};
use postgres_operator::story::Reporter;
use postgres_operator::watch::Event;
use tokio::sync::mpsc;

const NS: &str = "default";
const DB: &str = "default/db";

fn options(reconcile_interval: Duration) -> ControllerOptions {
    ControllerOptions {
        reconcile_interval,
        ..Default::default()
    }
}

/// Creating a cluster runs setup: the workshop's three create lines, spec and status printed plainly.
#[tokio::test(start_paused = true)]
async fn added_cluster_is_created_with_the_workshop_lines() {
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(cluster(NS, "db", 3).into()));
    assert_eq!(controller.cluster_keys(), vec![DB.to_string()]);

    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Start cluster",
        Duration::from_secs(1),
    )
    .await;
    let texts: Vec<&str> = seen.iter().map(|l| l.line.as_str()).collect();
    assert_eq!(
        texts,
        [
            "creating cluster with Spec {size: 3, version: 16, paused: false}, Status <none>",
            "PLACEHOLDER: Launch seed Postgres node!",
            "PLACEHOLDER: Start cluster!",
        ]
    );
    controller.shutdown().await;
}

/// With no pods at all, each tick reports them all dead and asks for disaster recovery, every 8 s.
#[tokio::test(start_paused = true)]
async fn reconcile_tick_with_no_pods_calls_for_disaster_recovery() {
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    let started = tokio::time::Instant::now();
    controller.handle_event(Event::Added(cluster(NS, "db", 3).into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Running: [], pending: []",
        Duration::from_secs(9),
    )
    .await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(8),
        "first tick one interval after setup"
    );
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Trying to recover from a previous backup",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "PLACEHOLDER: disaster recovery!",
        Duration::from_secs(1),
    )
    .await;
    controller.shutdown().await;
}

/// Only pods whose ownerReference is this cluster's uid count; running and pending are listed apart.
#[tokio::test(start_paused = true)]
async fn reconcile_counts_only_owned_pods_split_by_phase() {
    let db = cluster(NS, "db", 3);
    let other = cluster(NS, "other", 1);
    let pods = FakePods::default();
    pods.pods.lock().unwrap().extend([
        owned_pod(&db, "db-0001", "Running"),
        owned_pod(&db, "db-0000", "Running"),
        owned_pod(&db, "db-0002", "Pending"),
        // Same labels would not matter: a different owner uid is not ours.
        owned_pod(&other, "other-0000", "Running"),
    ]);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller = Controller::new(pods, options(Duration::from_secs(2)), reporter);
    controller.handle_event(Event::Added(db.into()));
    let mut seen = Vec::new();
    let line = wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Running:",
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(line.line, "Running: [db-0000, db-0001], pending: [db-0002]");
    controller.shutdown().await;
}

/// A paused cluster is not reconciled: no pod list is made while paused.
#[tokio::test(start_paused = true)]
async fn paused_cluster_skips_reconcile() {
    let mut db = cluster(NS, "db", 3);
    db.spec.paused = true;
    let pods = FakePods::default();
    let (reporter, _lines) = Reporter::channel();
    let mut controller = Controller::new(pods.clone(), options(Duration::from_secs(1)), reporter);
    controller.handle_event(Event::Added(db.into()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(*pods.lists.lock().unwrap(), 0);
    controller.shutdown().await;
}

/// A changed spec is logged as "spec update: from .. to .."; an unchanged one (a status or label
/// write) is ignored.
#[tokio::test(start_paused = true)]
async fn spec_update_is_logged_and_unchanged_specs_are_ignored() {
    let db = cluster(NS, "db", 3);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(db.clone().into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Start cluster",
        Duration::from_secs(1),
    )
    .await;

    let mut relabelled = db.clone();
    relabelled.metadata.resource_version = "42".into();
    controller.handle_event(Event::Modified(relabelled.into()));
    controller.handle_event(Event::Modified(resized(&db, 5).into()));
    let line = wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "spec update",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        line.line,
        "spec update: from {size: 3, version: 16, paused: false} to {size: 5, version: 16, paused: false}"
    );
    drain(&mut lines, &mut seen);
    assert_eq!(
        seen.iter()
            .filter(|l| l.line.starts_with("spec update"))
            .count(),
        1
    );
    controller.shutdown().await;
}

/// The original's bug 6: a timer re-armed on every event never fired under a steady event stream.
/// Here spec updates arrive every second for 30 s and the 8 s tick still fires at 8, 16 and 24 s.
#[tokio::test(start_paused = true)]
async fn flood_of_events_does_not_delay_the_reconcile_tick() {
    let db = cluster(NS, "db", 3);
    let (reporter, mut lines) = Reporter::channel();
    let (events, event_receiver) = mpsc::channel(16);
    let controller = Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(event_receiver, stop.clone()));

    let started = tokio::time::Instant::now();
    events.send(Event::Added(db.clone().into())).await.unwrap();
    for second in 1..=30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        events
            .send(Event::Modified(resized(&db, 3 + second % 2).into()))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    drain(&mut lines, &mut seen);
    let updates = seen
        .iter()
        .filter(|l| l.line.starts_with("spec update"))
        .count();
    let ticks = seen
        .iter()
        .filter(|l| l.line.starts_with("Running:"))
        .count();
    assert!(updates >= 29, "the events did arrive: {updates}");
    assert_eq!(
        ticks,
        3,
        "ticks at 8, 16, 24 s despite an event every second (t = {:?})",
        started.elapsed()
    );

    stop.cancel();
    let summary = running.await.unwrap();
    assert_eq!(summary.tasks_stopped, 1);
}

/// A cluster task that is not reading never blocks the controller and nothing panics: 10,000
/// updates sent before the task runs at all collapse into one, the newest.
#[tokio::test(start_paused = true)]
async fn full_channel_never_blocks_and_the_newest_spec_wins() {
    let db = cluster(NS, "db", 3);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(db.clone().into()));
    // handle_event is synchronous: on this single-threaded runtime the task cannot run in between,
    // so every update lands while the task is busy elsewhere.
    // Sizes stop at 7 (the CRD's maximum, which the task checks too): the minor version counts.
    for minor in 1..=10_000 {
        let mut newer = db.clone();
        newer.spec.version = format!("16.{minor}");
        controller.handle_event(Event::Modified(newer.into()));
    }
    let mut seen = Vec::new();
    let line = wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "spec update",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        line.line,
        "spec update: from {size: 3, version: 16, paused: false} to {size: 3, version: 16.10000, paused: false}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    drain(&mut lines, &mut seen);
    assert_eq!(
        seen.iter()
            .filter(|l| l.line.starts_with("spec update"))
            .count(),
        1
    );
    controller.shutdown().await;
}

/// Delete: the task logs it, deletes the pods it owns (not others'), ends, and the controller
/// forgets the cluster, so a later Modified for that name is treated as unknown.
#[tokio::test(start_paused = true)]
async fn deleted_cluster_cleans_up_ends_and_is_forgotten() {
    let db = cluster(NS, "db", 3);
    let other = cluster(NS, "other", 1);
    let pods = FakePods::default();
    pods.pods.lock().unwrap().extend([
        owned_pod(&db, "db-0000", "Running"),
        owned_pod(&other, "other-0000", "Running"),
    ]);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller = Controller::new(pods.clone(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(db.clone().into()));
    controller.handle_event(Event::Deleted(db.clone().into()));
    assert!(controller.cluster_keys().is_empty(), "forgotten at once");

    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "cluster is deleted by the user",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "cluster task ended",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(*pods.deleted.lock().unwrap(), ["db-0000"]);

    controller.handle_event(Event::Modified(db.into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "did not know; adopting it",
        Duration::from_secs(1),
    )
    .await;
    controller.shutdown().await;
}

/// The original crashed on MODIFIED/DELETED for a cluster it did not know (bug 4). Modified adopts
/// it (a task starts), Deleted is logged and ignored.
#[tokio::test(start_paused = true)]
async fn events_for_unknown_clusters_are_adopted_or_ignored() {
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Deleted(cluster(NS, "ghost", 3).into()));
    controller.handle_event(Event::Modified(cluster(NS, "stray", 2).into()));
    assert_eq!(controller.cluster_keys(), vec!["default/stray".to_string()]);

    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        "default/ghost",
        "did not know; nothing to do",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        "default/stray",
        "did not know; adopting it",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        "default/stray",
        "creating cluster with Spec {size: 2",
        Duration::from_secs(1),
    )
    .await;
    controller.shutdown().await;
}

/// The original's bug 5: a failed setup left a channel nobody read, which filled and panicked.
/// Here the task waits, unchanged updates are taken in silently, and a fixed spec sets it up.
#[tokio::test(start_paused = true)]
async fn failed_setup_waits_and_a_fixed_spec_starts_the_cluster() {
    let broken = cluster(NS, "db", 0);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(broken.clone().into()));
    let mut seen = Vec::new();
    let failed = wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "setup failed",
        Duration::from_secs(1),
    )
    .await;
    assert!(
        failed
            .line
            .contains("spec.size must be between 1 and 7, got 0"),
        "{}",
        failed.line
    );

    for _ in 0..500 {
        controller.handle_event(Event::Modified(broken.clone().into()));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    drain(&mut lines, &mut seen);
    assert_eq!(
        seen.iter()
            .filter(|l| l.line.contains("setup failed"))
            .count(),
        1
    );

    controller.handle_event(Event::Modified(resized(&broken, 3).into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "creating cluster with Spec {size: 3",
        Duration::from_secs(1),
    )
    .await;
    controller.shutdown().await;
}

/// A fix that arrives before the task has even run its (failing) setup is not lost: the task
/// waits for a corrected spec instead of ending, so no send can fall into a closing channel.
#[tokio::test(start_paused = true)]
async fn a_fix_sent_while_setup_is_failing_still_starts_the_cluster() {
    let broken = cluster(NS, "db", 0);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    // Synchronous, on one thread: the task sets up only after both events are in its channel.
    controller.handle_event(Event::Added(broken.clone().into()));
    controller.handle_event(Event::Modified(resized(&broken, 3).into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "creating cluster with Spec {size: 3",
        Duration::from_secs(1),
    )
    .await;
    controller.shutdown().await;
}

/// Two clusters each keep their own task: resizing and deleting one leaves the other ticking.
#[tokio::test(start_paused = true)]
async fn two_clusters_live_independently() {
    let a = cluster(NS, "a", 3);
    let b = cluster("prod", "b", 1);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller = Controller::new(
        FakePods::default(),
        options(Duration::from_secs(2)),
        reporter,
    );
    controller.handle_event(Event::Added(a.clone().into()));
    controller.handle_event(Event::Added(b.clone().into()));
    let mut seen = Vec::new();
    controller.handle_event(Event::Modified(resized(&a, 5).into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        "default/a",
        "spec update",
        Duration::from_secs(1),
    )
    .await;
    controller.handle_event(Event::Deleted(a.into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        "default/a",
        "cluster task ended",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(controller.cluster_keys(), vec!["prod/b".to_string()]);

    seen.clear();
    tokio::time::sleep(Duration::from_secs(5)).await;
    drain(&mut lines, &mut seen);
    assert!(
        seen.iter()
            .filter(|l| l.is_about("prod/b") && l.line.starts_with("Running:"))
            .count()
            >= 2
    );
    assert!(
        seen.iter().all(|l| !l.is_about("default/a")),
        "a is gone: {seen:?}"
    );
    assert!(seen
        .iter()
        .all(|l| !(l.is_about("prod/b") && l.line.starts_with("spec update"))));
    controller.shutdown().await;
}

/// Shutdown tells every task to stop and waits for all of them, well inside the grace period.
#[tokio::test]
async fn shutdown_ends_every_cluster_task() {
    let (reporter, mut lines) = Reporter::channel();
    let (events, event_receiver) = mpsc::channel(16);
    let controller = Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(event_receiver, stop.clone()));
    let mut seen = Vec::new();
    for name in ["a", "b", "c"] {
        events
            .send(Event::Added(cluster(NS, name, 1).into()))
            .await
            .unwrap();
        wait_for_line(
            &mut lines,
            &mut seen,
            &format!("default/{name}"),
            "Start cluster",
            Duration::from_secs(5),
        )
        .await;
    }
    let asked = std::time::Instant::now();
    stop.cancel();
    let summary = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary.tasks_stopped, 3);
    assert_eq!(summary.tasks_aborted, 0);
    assert!(asked.elapsed() < Duration::from_secs(1));
    drain(&mut lines, &mut seen);
    assert_eq!(
        seen.iter()
            .filter(|l| l.line.contains("operator is shutting down"))
            .count(),
        3
    );
}

/// Added for a known cluster (a watch restarted from scratch announces everything so) is an
/// update, not a second task; a new uid under the same name (re-created while away) replaces it.
#[tokio::test(start_paused = true)]
async fn relisted_cluster_is_updated_and_a_new_uid_replaces_the_task() {
    let db = cluster(NS, "db", 3);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(db.clone().into()));
    controller.handle_event(Event::Added(resized(&db, 4).into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "spec update",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        seen.iter()
            .filter(|l| l.line.starts_with("creating cluster"))
            .count(),
        1
    );

    let mut reborn = resized(&db, 2);
    reborn.metadata.uid = "uid-new".into();
    controller.handle_event(Event::Added(reborn.into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "re-created under the same name",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "cluster is deleted by the user",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "creating cluster with Spec {size: 2",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(controller.cluster_keys(), vec![DB.to_string()]);
    controller.shutdown().await;
}

/// A cluster whose status says an earlier run got it Running is adopted, not created again.
#[tokio::test(start_paused = true)]
async fn running_cluster_is_adopted_not_created_again() {
    let mut db = cluster(NS, "db", 3);
    db.status = Some(postgres_operator::api::PostgresClusterStatus {
        phase: Some("Running".into()),
        size: Some(3),
        ..Default::default()
    });
    let (reporter, mut lines) = Reporter::channel();
    let mut controller =
        Controller::new(FakePods::default(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(db.into()));
    let mut seen = Vec::new();
    let line = wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "adopting",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(
        line.line,
        "adopting running cluster with Spec {size: 3, version: 16, paused: false}, Status {phase: Running, size: 3}"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    drain(&mut lines, &mut seen);
    assert!(seen
        .iter()
        .all(|l| !l.line.contains("PLACEHOLDER: Launch seed")));
    controller.shutdown().await;
}

/// Deleted and re-created under the same name while the watch was down: the relist hands over
/// DELETED (old uid) then ADDED (new uid). The old task cleans up only its own pods and ends; a
/// new task sets up the new cluster, and its pods are left alone.
#[tokio::test(start_paused = true)]
async fn recreated_cluster_old_task_cleans_its_own_pods_and_a_new_task_starts() {
    let old = cluster(NS, "db", 3);
    let mut new = resized(&old, 2);
    new.metadata.uid = "uid-reborn".into();
    let pods = FakePods::default();
    pods.pods.lock().unwrap().extend([
        owned_pod(&old, "db-old", "Running"),
        owned_pod(&new, "db-new", "Running"),
    ]);
    let (reporter, mut lines) = Reporter::channel();
    let mut controller = Controller::new(pods.clone(), ControllerOptions::default(), reporter);
    controller.handle_event(Event::Added(old.clone().into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "creating cluster with Spec {size: 3",
        Duration::from_secs(1),
    )
    .await;
    controller.handle_event(Event::Deleted(old.into()));
    controller.handle_event(Event::Added(new.into()));
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "cluster task ended",
        Duration::from_secs(1),
    )
    .await;
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "creating cluster with Spec {size: 2",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(*pods.deleted.lock().unwrap(), ["db-old"]);
    assert_eq!(controller.cluster_keys(), vec![DB.to_string()]);
    controller.shutdown().await;
}

/// A zero reconcile interval (a library caller's mistake) does not panic the cluster task: tokio
/// intervals refuse a zero period, so the task uses the smallest one it allows instead.
#[tokio::test(start_paused = true)]
async fn a_zero_reconcile_interval_does_not_panic_the_task() {
    let (reporter, mut lines) = Reporter::channel();
    let mut controller = Controller::new(FakePods::default(), options(Duration::ZERO), reporter);
    controller.handle_event(Event::Added(cluster(NS, "db", 1).into()));
    let mut seen = Vec::new();
    wait_for_line(
        &mut lines,
        &mut seen,
        DB,
        "Running: [], pending: []",
        Duration::from_secs(1),
    )
    .await;
    let stopped = controller.shutdown().await;
    assert_eq!(stopped.tasks_stopped, 1, "the task was alive to be stopped");
}
