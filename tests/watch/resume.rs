//! A watch that ends — cleanly, silently, or because the server went away — continues from where it
//! was, without relisting and without handing anything over twice.
//!
//! WORKSHOP.md, step 02 ("The long poll" and "The state machine that never loses its place"). Runs against the sandbox
//! API server and its fault switches.

use std::time::Duration;

use postgres_operator::api::collection_path;
use postgres_operator::watch::{ResumeReason, WatchNotice};
use sandbox::{Sandbox, SandboxOptions};
use test_support::plain_client;

use crate::support::*;

/// The resourceVersion each watch request of ours asked for, in order.
fn watch_versions(sandbox: &Sandbox) -> Vec<String> {
    cluster_requests(sandbox, "watch")
        .into_iter()
        .map(|r| {
            r.path
                .split(['?', '&'])
                .find_map(|p| p.strip_prefix("resourceVersion="))
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

fn list_count(sandbox: &Sandbox) -> usize {
    cluster_requests(sandbox, "list").len()
}

/// Watches that end after every event are resumed from the last event's resourceVersion: one
/// list in total, each object handed over exactly once.
#[tokio::test]
async fn clean_end_of_stream_resumes_from_the_last_rv_without_relist_or_duplicates() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let existing = create_cluster(&client, "a", 3).await;
    sandbox.faults().end_watches_after_events(Some(1));
    let mut running = start_watch(client.clone(), test_options());
    running.expect_events(&["ADDED default/a size=3"]).await;

    let mut versions = vec![];
    for (name, size) in [("b", 1), ("c", 2), ("d", 4)] {
        let created = create_cluster(&client, name, size).await;
        versions.push(created.metadata.resource_version);
        assert_eq!(
            summary(&running.next_event(WITHIN).await),
            format!("ADDED default/{name} size={size}")
        );
    }
    running.watching_from(WITHIN, &versions[2]).await;
    running.assert_nothing_twice().await;
    assert_eq!(list_count(&sandbox), 1, "a clean end never relists");
    let watched = watch_versions(&sandbox);
    assert!(!watched.contains(&"0".to_string()) && !watched.contains(&String::new()));
    // Each resumed watch starts where the previous event left it, never earlier.
    assert_eq!(&watched[1..4], &versions[..], "{watched:?} vs {versions:?}");
    assert!(existing.metadata.resource_version < versions[0]);
    assert!(
        running.count_notices(|n| matches!(
            n,
            WatchNotice::Resumed {
                why: ResumeReason::EndOfStream { events: 1 },
                ..
            }
        )) >= 3
    );
    running.stop().await;
}

/// BOOKMARKs move the resourceVersion even when none of our objects change.
#[tokio::test]
async fn bookmarks_advance_the_resource_version() {
    let options = SandboxOptions {
        bookmark_interval: Duration::from_millis(100),
        ..SandboxOptions::default()
    };
    let (sandbox, client) = test_support::sandbox_with_crd(options).await;
    let mut running = start_watch(client.clone(), test_options());
    let listed = running.listed(WITHIN).await;
    let WatchNotice::Listed {
        resource_version: listed_rv,
        ..
    } = listed
    else {
        unreachable!()
    };
    // Writes to another resource move the server's RV; only bookmarks can tell our watch.
    for i in 0..3 {
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")},
            "spec": {"containers": [{"name": "c", "image": "postgres:16.4"}]}});
        let _: serde_json::Value = client
            .create("/api/v1/namespaces/default/pods", &pod)
            .await
            .expect("pod");
    }
    assert_ne!(sandbox.resource_version(), listed_rv);
    // Make the watch reconnect, again and again, until it does so from a bookmark's RV: each
    // watch lasts three bookmark intervals, and how soon a bookmark reaches the client is this
    // machine's load, not a fixed wait.
    sandbox
        .faults()
        .end_watches_after(Some(Duration::from_millis(300)));
    sandbox.faults().end_all_watches_now();
    // No event of ours was delivered, so only a bookmark can have moved the RV.
    running
        .notice(WITHIN, "watching from a bookmark RV", |n| {
            matches!(n, WatchNotice::Watching { resource_version } if *resource_version != listed_rv)
        })
        .await;
    sandbox.faults().end_watches_after(None);
    assert!(
        running.no_event_for(Duration::from_millis(200)).await,
        "bookmarks are not events"
    );
    assert_eq!(list_count(&sandbox), 1);
    running.stop().await;
}

/// A watch that sends headers and then nothing is presumed dead after timeoutSeconds + margin and
/// reopened from the same resourceVersion.
#[tokio::test]
async fn a_stalled_watch_is_reopened_after_the_idle_timeout() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    sandbox.faults().stall_watches(true);
    let mut options = test_options();
    options.watch_timeout_min = Duration::from_secs(1);
    options.watch_timeout_max = Duration::from_secs(1);
    options.idle_margin = Duration::from_millis(500);
    let mut running = start_watch(client.clone(), options);
    running
        .notice(WITHIN, "resumed after idle", |n| {
            matches!(
                n,
                WatchNotice::Resumed {
                    why: ResumeReason::Idle { .. },
                    ..
                }
            )
        })
        .await;
    sandbox.faults().stall_watches(false);
    create_cluster(&client, "after-stall", 2).await;
    running
        .expect_event("ADDED default/after-stall size=2")
        .await;
    assert_eq!(list_count(&sandbox), 1, "an idle reconnect does not relist");
    running.stop().await;
}

/// The API server goes away (connection refused) and comes back on the same address: the watch
/// backs off, then lists and delivers.
#[tokio::test]
async fn connection_refused_then_recovery() {
    let (first, _) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let addr = first.addr();
    first.shutdown().await;

    let mut running = start_watch(plain_client(&format!("http://{addr}")), test_options());
    running.retrying_with(WITHIN, "cannot connect").await;

    let options = SandboxOptions {
        listen: addr,
        ..SandboxOptions::default()
    };
    let (second, client) = test_support::sandbox_with_crd(options).await;
    create_cluster(&client, "back", 3).await;
    running.expect_event("ADDED default/back size=3").await;
    running.listed(WITHIN).await;
    assert!(collection_path("default").ends_with("postgresclusters"));
    running.stop().await;
    second.shutdown().await;
}

/// On shutdown the watch task ends promptly, mid-watch.
#[tokio::test]
async fn shutdown_ends_the_watch_task() {
    let (_sandbox, _client, running) = watching_a_sandbox(test_options()).await;
    running.stop().await;
}

/// The watcher's `events` is a plain `Receiver<Event<T>>`, notices among the changes; dropping it
/// stops the watch task.
#[tokio::test]
async fn dropping_the_event_receiver_stops_the_watch() {
    let (_sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    create_cluster(&client, "seen", 2).await;
    let watcher =
        postgres_operator::watch::list_then_watch::<postgres_operator::api::PostgresCluster>(
            client.clone(),
            collection_path("default"),
            test_options(),
            tokio_util::sync::CancellationToken::new(),
        );
    let task_done = watcher.task.abort_handle();
    let mut events = watcher.events;
    let mut next_change = async || loop {
        let event = tokio::time::timeout(WITHIN, events.recv())
            .await
            .expect("an event")
            .expect("open");
        if event.object().is_some() {
            return event;
        }
    };
    let first = next_change().await;
    assert_eq!(summary(&first), "ADDED default/seen size=2");
    create_cluster(&client, "next", 1).await;
    let second = next_change().await;
    assert_eq!(summary(&second), "ADDED default/next size=1");
    drop(events);
    let deadline = tokio::time::Instant::now() + WITHIN;
    while !task_done.is_finished() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the watch task ends once nobody listens"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
