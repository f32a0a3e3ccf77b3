//! When the watch loses its place (410 in-stream or as HTTP status, an oversize event) it lists
//! again and tells the consumer what changed meanwhile — deletions included.
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place"). Runs against the sandbox.

use std::time::Duration;

use postgres_operator::watch::backoff::BackoffPolicy;
use postgres_operator::watch::{RelistReason, WatchNotice, WatchOptions};
use sandbox::SandboxOptions;

use crate::support::*;

fn slow_backoff() -> WatchOptions {
    WatchOptions {
        backoff: BackoffPolicy {
            initial: Duration::from_millis(300),
            jitter: 0.0,
            ..BackoffPolicy::default()
        },
        ..test_options()
    }
}

/// Changes made while the watch is down — a delete, an update, a create — come out after the
/// in-stream 410 Expired as DELETED (last known state), MODIFIED and ADDED, each exactly once.
#[tokio::test]
async fn deletes_during_an_outage_are_reported_after_the_expired_relist() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    for (name, size) in [("a", 3), ("b", 1), ("c", 2)] {
        create_cluster(&client, name, size).await;
    }
    let mut running = start_watch(client.clone(), slow_backoff());
    running
        .expect_events_in_any_order(&[
            "ADDED default/a size=3",
            "ADDED default/b size=1",
            "ADDED default/c size=2",
        ])
        .await;
    running.until_watching(WITHIN).await;

    // Outage: the next two watch attempts fail (300 ms + 600 ms of backoff), and meanwhile ...
    fail_next_watches(&sandbox, 2, injected(500, "InternalError", None));
    delete_resize_create(&client, "b", "a", "d").await;
    // ... etcd compacts: the old resourceVersion is gone, the next watch gets 410 Expired.
    sandbox.faults().compact_history();

    running
        .expect_deleted_resized_created(("b", 1), "a", "d")
        .await;
    let relist = running.relisted(WITHIN).await;
    let RelistReason::Expired { status } = &relist.why else {
        panic!("expected an Expired relist, got {relist:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert_eq!(relist.changes, (1, 1, 1));
    assert!(running.retries_with("500") >= 2);
    running.assert_nothing_twice().await;
    running.stop().await;
}

/// An HTTP 410 at watch start (not in-stream) relists too, instead of killing the process.
#[tokio::test]
async fn http_410_from_the_api_server_relists() {
    let (sandbox, client, mut running) = watching_a_sandbox(test_options()).await;
    fail_next_watches(&sandbox, 1, injected(410, "Expired", None));
    running
        .notice(WITHIN, "relisted", |n| {
            matches!(n, WatchNotice::Relisted { why: RelistReason::Expired { status }, .. } if status.code == 410)
        })
        .await;
    create_cluster(&client, "after", 2).await;
    running.expect_event("ADDED default/after size=2").await;
    running.stop().await;
}

/// An event over the size limit is dropped, reported, and the object still reaches the consumer
/// through the relist; memory never holds the whole event.
#[tokio::test]
async fn an_oversize_event_relists_and_the_object_arrives_through_the_list() {
    let options = WatchOptions {
        max_event_bytes: 4096,
        ..test_options()
    };
    let (_sandbox, client, mut running) = watching_a_sandbox(options).await;
    let mut body = cluster_json("big", 3);
    body["metadata"]["annotations"]["blob"] = serde_json::Value::String("é".repeat(8000));
    let _: serde_json::Value = client
        .create(&postgres_operator::api::collection_path("default"), &body)
        .await
        .expect("create big");
    running.expect_event("ADDED default/big size=3").await;
    let relist = running.relisted(WITHIN).await;
    assert!(
        matches!(relist.why, RelistReason::EventTooLarge { limit: 4096 }) && relist.changes.0 == 1,
        "{relist:?}"
    );
    running.stop().await;
}

/// Events the sandbox cuts into 1-byte HTTP chunks (UTF-8 annotations included) arrive whole.
#[tokio::test]
async fn one_byte_chunks_from_the_api_server_arrive_whole() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    sandbox.faults().watch_chunk_size(Some(1));
    let mut running = start_watch(client.clone(), test_options());
    running.until_watching(WITHIN).await;
    create_cluster(&client, "tiny-chunks", 3).await;
    let event = running.next_event(WITHIN).await;
    assert_eq!(summary(&event), "ADDED default/tiny-chunks size=3");
    running.stop().await;
}
