//! The controller's routing and each cluster task's loop, with an in-memory `PodApi` and paused
//! tokio time: timers, floods and full channels, without a network. WORKSHOP.md step 03.
//! (`against_sandbox.rs` runs the same story over real HTTP.)

use std::time::Duration;

use postgres_operator::api::PostgresCluster;
use postgres_operator::controller::{
    Controller, ControllerOptions, ControllerStopped, PlaceholderTask,
};
use postgres_operator::story::LogLine;
use postgres_operator::watch::Event;
use tokio::sync::mpsc;

use crate::support::{cluster, every, owned_pod, resized, start, FakePods, Transcript};

const NS: &str = "default";
const DB: &str = "default/db";
const SECOND: Duration = Duration::from_secs(1);

fn added(cluster: &PostgresCluster) -> Event<PostgresCluster> {
    Event::Added(cluster.clone().into())
}

fn modified(cluster: &PostgresCluster) -> Event<PostgresCluster> {
    Event::Modified(cluster.clone().into())
}

fn deleted(cluster: &PostgresCluster) -> Event<PostgresCluster> {
    Event::Deleted(cluster.clone().into())
}

/// Stage 03's controller over in-memory pods, fed events by hand, and the story it tells.
struct Run {
    controller: Controller<PlaceholderTask<FakePods>>,
    story: Transcript,
}

impl Run {
    /// The controller over `pods` with `options`, handed `events` at once: `handle_event` is
    /// synchronous, so on this single-threaded runtime no task runs in between.
    fn start(pods: FakePods, options: ControllerOptions, events: &[Event<PostgresCluster>]) -> Run {
        let (controller, story) = start(pods, options);
        let mut run = Run { controller, story };
        run.send(events);
        run
    }

    /// [`Run::start`] with no pods and the default options.
    fn of(events: &[Event<PostgresCluster>]) -> Run {
        Run::start(FakePods::default(), ControllerOptions::default(), events)
    }

    fn send(&mut self, events: &[Event<PostgresCluster>]) {
        for event in events {
            self.controller.handle_event(event.clone());
        }
    }

    /// Each of `lines` about `cluster`, in turn, each within a second (of paused time): the last.
    async fn says(&mut self, cluster: &str, lines: &[&str]) -> LogLine {
        let mut last = None;
        for line in lines {
            last = Some(self.story.wait_for(cluster, line, SECOND).await);
        }
        last.expect("a line to wait for")
    }

    fn keys(&self) -> Vec<String> {
        self.controller.cluster_keys()
    }

    async fn stop(self) -> ControllerStopped {
        self.controller.shutdown().await
    }
}

/// Creating a cluster runs setup: the workshop's three create lines, spec and status printed plainly.
#[tokio::test(start_paused = true)]
async fn added_cluster_is_created_with_the_workshop_lines() {
    let mut run = Run::of(&[added(&cluster(NS, "db", 3))]);
    assert_eq!(run.keys(), vec![DB.to_string()]);

    run.says(DB, &["Start cluster"]).await;
    let texts: Vec<&str> = run.story.seen.iter().map(|l| l.line.as_str()).collect();
    assert_eq!(
        texts,
        [
            "creating cluster with Spec {size: 3, version: 16, paused: false}, Status <none>",
            "PLACEHOLDER: Launch seed Postgres node!",
            "PLACEHOLDER: Start cluster!",
        ]
    );
    run.stop().await;
}

/// With no pods at all, each tick reports them all dead and asks for disaster recovery, every 8 s.
#[tokio::test(start_paused = true)]
async fn reconcile_tick_with_no_pods_calls_for_disaster_recovery() {
    let started = tokio::time::Instant::now();
    let mut run = Run::of(&[added(&cluster(NS, "db", 3))]);
    run.story
        .wait_for(DB, "Running: [], pending: []", Duration::from_secs(9))
        .await;
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(8),
        "first tick one interval after setup"
    );
    let recovery = [
        "Trying to recover from a previous backup",
        "PLACEHOLDER: disaster recovery!",
    ];
    run.says(DB, &recovery).await;
    run.stop().await;
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
    let mut run = Run::start(pods, every(Duration::from_secs(2)), &[added(&db)]);
    let line = run
        .story
        .wait_for(DB, "Running:", Duration::from_secs(3))
        .await;
    assert_eq!(line.line, "Running: [db-0000, db-0001], pending: [db-0002]");
    run.stop().await;
}

/// A paused cluster is not reconciled: no pod list is made while paused.
#[tokio::test(start_paused = true)]
async fn paused_cluster_skips_reconcile() {
    let mut db = cluster(NS, "db", 3);
    db.spec.paused = true;
    let pods = FakePods::default();
    let run = Run::start(pods.clone(), every(SECOND), &[added(&db)]);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(*pods.lists.lock().unwrap(), 0);
    run.stop().await;
}

/// A changed spec is logged as "spec update: from .. to .."; an unchanged one (a status or label
/// write) is ignored.
#[tokio::test(start_paused = true)]
async fn spec_update_is_logged_and_unchanged_specs_are_ignored() {
    let db = cluster(NS, "db", 3);
    let mut run = Run::of(&[added(&db)]);
    run.says(DB, &["Start cluster"]).await;

    let mut relabelled = db.clone();
    relabelled.metadata.resource_version = "42".into();
    run.send(&[modified(&relabelled), modified(&resized(&db, 5))]);
    let line = run.says(DB, &["spec update"]).await;
    assert_eq!(
        line.line,
        "spec update: from {size: 3, version: 16, paused: false} to {size: 5, version: 16, paused: false}"
    );
    assert_eq!(run.story.count(|l| l.line.starts_with("spec update")), 1);
    run.stop().await;
}

/// The original's bug 6: a timer re-armed on every event never fired under a steady event stream.
/// Here spec updates arrive every second for 30 s and the 8 s tick still fires at 8, 16 and 24 s.
#[tokio::test(start_paused = true)]
async fn flood_of_events_does_not_delay_the_reconcile_tick() {
    let db = cluster(NS, "db", 3);
    let (events, event_receiver) = mpsc::channel(16);
    let (controller, mut story) = start(FakePods::default(), ControllerOptions::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(event_receiver, stop.clone()));

    let started = tokio::time::Instant::now();
    events.send(added(&db)).await.unwrap();
    for second in 1..=30 {
        tokio::time::sleep(SECOND).await;
        let update = modified(&resized(&db, 3 + second % 2));
        events.send(update).await.unwrap();
    }
    let updates = story.count(|l| l.line.starts_with("spec update"));
    let ticks = story.count(|l| l.line.starts_with("Running:"));
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
    // Sizes stop at 7 (the CRD's maximum, which the task checks too): the minor version counts.
    let mut events = vec![added(&db)];
    events.extend((1..=10_000).map(|minor| {
        let mut newer = db.clone();
        newer.spec.version = format!("16.{minor}");
        modified(&newer)
    }));
    // Every update lands while the task is busy elsewhere: it cannot run in between.
    let mut run = Run::of(&events);
    let line = run.says(DB, &["spec update"]).await;
    assert_eq!(
        line.line,
        "spec update: from {size: 3, version: 16, paused: false} to {size: 3, version: 16.10000, paused: false}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(run.story.count(|l| l.line.starts_with("spec update")), 1);
    run.stop().await;
}

/// Delete: the task logs it, deletes the pods it owns (not others'), ends, and the controller
/// forgets the cluster, so a later Modified for that name is treated as unknown.
#[tokio::test(start_paused = true)]
async fn deleted_cluster_cleans_up_ends_and_is_forgotten() {
    let (db, other) = (cluster(NS, "db", 3), cluster(NS, "other", 1));
    let pods = FakePods::default();
    pods.pods.lock().unwrap().extend([
        owned_pod(&db, "db-0000", "Running"),
        owned_pod(&other, "other-0000", "Running"),
    ]);
    let options = ControllerOptions::default();
    let mut run = Run::start(pods.clone(), options, &[added(&db), deleted(&db)]);
    assert!(run.keys().is_empty(), "forgotten at once");

    let ending = ["cluster is deleted by the user", "cluster task ended"];
    run.says(DB, &ending).await;
    assert_eq!(*pods.deleted.lock().unwrap(), ["db-0000"]);

    run.send(&[modified(&db)]);
    run.says(DB, &["did not know; adopting it"]).await;
    run.stop().await;
}

/// The original crashed on MODIFIED/DELETED for a cluster it did not know (bug 4). Modified adopts
/// it (a task starts), Deleted is logged and ignored.
#[tokio::test(start_paused = true)]
async fn events_for_unknown_clusters_are_adopted_or_ignored() {
    let ghost = deleted(&cluster(NS, "ghost", 3));
    let mut run = Run::of(&[ghost, modified(&cluster(NS, "stray", 2))]);
    assert_eq!(run.keys(), vec!["default/stray".to_string()]);

    run.says("default/ghost", &["did not know; nothing to do"])
        .await;
    let adopted = [
        "did not know; adopting it",
        "creating cluster with Spec {size: 2",
    ];
    run.says("default/stray", &adopted).await;
    run.stop().await;
}

/// The original's bug 5: a failed setup left a channel nobody read, which filled and panicked.
/// Here the task waits, unchanged updates are taken in silently, and a fixed spec sets it up.
#[tokio::test(start_paused = true)]
async fn failed_setup_waits_and_a_fixed_spec_starts_the_cluster() {
    let broken = cluster(NS, "db", 0);
    let mut run = Run::of(&[added(&broken)]);
    let failed = run.says(DB, &["setup failed"]).await;
    assert!(
        failed
            .line
            .contains("spec.size must be between 1 and 7, got 0"),
        "{}",
        failed.line
    );

    run.send(&vec![modified(&broken); 500]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(run.story.count(|l| l.line.contains("setup failed")), 1);

    run.send(&[modified(&resized(&broken, 3))]);
    run.says(DB, &["creating cluster with Spec {size: 3"]).await;
    run.stop().await;
}

/// A fix that arrives before the task has even run its (failing) setup is not lost: the task
/// waits for a corrected spec instead of ending, so no send can fall into a closing channel.
#[tokio::test(start_paused = true)]
async fn a_fix_sent_while_setup_is_failing_still_starts_the_cluster() {
    let broken = cluster(NS, "db", 0);
    // Synchronous, on one thread: the task sets up only after both events are in its channel.
    let fixed = resized(&broken, 3);
    let mut run = Run::of(&[added(&broken), modified(&fixed)]);
    run.says(DB, &["creating cluster with Spec {size: 3"]).await;
    run.stop().await;
}

/// Two clusters each keep their own task: resizing and deleting one leaves the other ticking.
#[tokio::test(start_paused = true)]
async fn two_clusters_live_independently() {
    let (a, b) = (cluster(NS, "a", 3), cluster("prod", "b", 1));
    let events = [added(&a), added(&b), modified(&resized(&a, 5))];
    let mut run = Run::start(FakePods::default(), every(Duration::from_secs(2)), &events);
    run.says("default/a", &["spec update"]).await;
    run.send(&[deleted(&a)]);
    run.says("default/a", &["cluster task ended"]).await;
    assert_eq!(run.keys(), vec!["prod/b".to_string()]);

    run.story.seen.clear();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let story = &mut run.story;
    assert!(story.count(|l| l.is_about("prod/b") && l.line.starts_with("Running:")) >= 2);
    let seen = &story.seen;
    assert!(
        seen.iter().all(|l| !l.is_about("default/a")),
        "a is gone: {seen:?}"
    );
    assert!(seen
        .iter()
        .all(|l| !(l.is_about("prod/b") && l.line.starts_with("spec update"))));
    run.stop().await;
}

/// Shutdown tells every task to stop and waits for all of them, well inside the grace period.
#[tokio::test]
async fn shutdown_ends_every_cluster_task() {
    let (events, event_receiver) = mpsc::channel(16);
    let (controller, mut story) = start(FakePods::default(), ControllerOptions::default());
    let stop = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(controller.run(event_receiver, stop.clone()));
    for name in ["a", "b", "c"] {
        events.send(added(&cluster(NS, name, 1))).await.unwrap();
        let key = format!("default/{name}");
        story
            .wait_for(&key, "Start cluster", Duration::from_secs(5))
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
    assert!(asked.elapsed() < SECOND);
    assert_eq!(
        story.count(|l| l.line.contains("operator is shutting down")),
        3
    );
}

/// Added for a known cluster (a watch restarted from scratch announces everything so) is an
/// update, not a second task; a new uid under the same name (re-created while away) replaces it.
#[tokio::test(start_paused = true)]
async fn relisted_cluster_is_updated_and_a_new_uid_replaces_the_task() {
    let db = cluster(NS, "db", 3);
    let mut run = Run::of(&[added(&db), added(&resized(&db, 4))]);
    run.says(DB, &["spec update"]).await;
    assert_eq!(
        run.story.count(|l| l.line.starts_with("creating cluster")),
        1
    );

    let mut reborn = resized(&db, 2);
    reborn.metadata.uid = "uid-new".into();
    run.send(&[added(&reborn)]);
    let replaced = [
        "re-created under the same name",
        "cluster is deleted by the user",
        "creating cluster with Spec {size: 2",
    ];
    run.says(DB, &replaced).await;
    assert_eq!(run.keys(), vec![DB.to_string()]);
    run.stop().await;
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
    let mut run = Run::of(&[added(&db)]);
    let line = run.says(DB, &["adopting"]).await;
    assert_eq!(
        line.line,
        "adopting running cluster with Spec {size: 3, version: 16, paused: false}, Status {phase: Running, size: 3}"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    let seeds = run
        .story
        .count(|l| l.line.contains("PLACEHOLDER: Launch seed"));
    assert_eq!(seeds, 0);
    run.stop().await;
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
    let options = ControllerOptions::default();
    let mut run = Run::start(pods.clone(), options, &[added(&old)]);
    run.says(DB, &["creating cluster with Spec {size: 3"]).await;
    run.send(&[deleted(&old), added(&new)]);
    let handed_over = ["cluster task ended", "creating cluster with Spec {size: 2"];
    run.says(DB, &handed_over).await;
    assert_eq!(*pods.deleted.lock().unwrap(), ["db-old"]);
    assert_eq!(run.keys(), vec![DB.to_string()]);
    run.stop().await;
}

/// A zero reconcile interval (a library caller's mistake) does not panic the cluster task: tokio
/// intervals refuse a zero period, so the task uses the smallest one it allows instead.
#[tokio::test(start_paused = true)]
async fn a_zero_reconcile_interval_does_not_panic_the_task() {
    let db = cluster(NS, "db", 1);
    let mut run = Run::start(FakePods::default(), every(Duration::ZERO), &[added(&db)]);
    run.says(DB, &["Running: [], pending: []"]).await;
    let stopped = run.stop().await;
    assert_eq!(stopped.tasks_stopped, 1, "the task was alive to be stopped");
}
