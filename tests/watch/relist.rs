//! When the watch loses its place (410 in-stream or as HTTP status, an oversize event) it lists
//! again and tells the consumer what changed meanwhile — deletions included.
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place"). Runs against the sandbox.

use std::time::Duration;

use crate::support::*;
use postgres_operator::api::object_path;
use postgres_operator::client::Patch;
use postgres_operator::watch::backoff::BackoffPolicy;
use postgres_operator::watch::{RelistReason, WatchNotice, WatchOptions};
use sandbox::{InjectedFault, SandboxOptions};

const WITHIN: Duration = Duration::from_secs(10);

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

fn server_error(code: u16, reason: &str) -> InjectedFault {
    InjectedFault::Status {
        code,
        reason: reason.into(),
        retry_after_seconds: None,
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
    let mut initial = running.next_summaries(3, WITHIN).await;
    initial.sort();
    assert_eq!(
        initial,
        vec![
            "ADDED default/a size=3",
            "ADDED default/b size=1",
            "ADDED default/c size=2"
        ]
    );
    running.until_watching(WITHIN).await;

    // Outage: the next two watch attempts fail (300 ms + 600 ms of backoff), and meanwhile ...
    sandbox
        .faults()
        .fail_next(2, "watch=true", server_error(500, "InternalError"));
    sandbox.faults().end_all_watches_now();
    let _: serde_json::Value = client
        .delete(&object_path("default", "b"))
        .await
        .expect("delete b");
    let _: serde_json::Value = client
        .patch(
            &object_path("default", "a"),
            &Patch::Merge(serde_json::json!({"spec": {"size": 5}})),
        )
        .await
        .expect("resize a");
    create_cluster(&client, "d", 4).await;
    // ... etcd compacts: the old resourceVersion is gone, the next watch gets 410 Expired.
    sandbox.faults().compact_history();

    let mut changes = running.next_summaries(3, WITHIN).await;
    changes.sort();
    assert_eq!(
        changes,
        vec![
            "ADDED default/d size=4",
            "DELETED default/b size=1",
            "MODIFIED default/a size=5"
        ]
    );
    let relisted = running
        .notice(WITHIN, "relisted", |n| {
            matches!(n, WatchNotice::Relisted { .. })
        })
        .await;
    let WatchNotice::Relisted {
        why: RelistReason::Expired { status },
        added,
        modified,
        deleted,
        ..
    } = relisted
    else {
        panic!("expected an Expired relist, got {relisted:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
    assert_eq!((added, modified, deleted), (1, 1, 1));
    assert!(
        running.count_notices(
            |n| matches!(n, WatchNotice::Retrying { error, .. } if error.contains("500"))
        ) >= 2
    );
    assert!(
        running.no_event_for(Duration::from_millis(300)).await,
        "nothing handed over twice"
    );
    running.stop().await;
}

/// An HTTP 410 at watch start (not in-stream) relists too, instead of killing the process.
#[tokio::test]
async fn http_410_from_the_api_server_relists() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let mut running = start_watch(client.clone(), test_options());
    running.until_watching(WITHIN).await;
    sandbox
        .faults()
        .fail_next(1, "watch=true", server_error(410, "Expired"));
    sandbox.faults().end_all_watches_now();
    running
        .notice(WITHIN, "relisted", |n| {
            matches!(n, WatchNotice::Relisted { why: RelistReason::Expired { status }, .. } if status.code == 410)
        })
        .await;
    create_cluster(&client, "after", 2).await;
    assert_eq!(
        summary(&running.next_event(WITHIN).await),
        "ADDED default/after size=2"
    );
    running.stop().await;
}

/// An event over the size limit is dropped, reported, and the object still reaches the consumer
/// through the relist; memory never holds the whole event.
#[tokio::test]
async fn an_oversize_event_relists_and_the_object_arrives_through_the_list() {
    let (_sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let options = WatchOptions {
        max_event_bytes: 4096,
        ..test_options()
    };
    let mut running = start_watch(client.clone(), options);
    running.until_watching(WITHIN).await;
    let mut body = cluster_json("big", 3);
    body["metadata"]["annotations"]["blob"] = serde_json::Value::String("é".repeat(8000));
    let _: serde_json::Value = client
        .create(&postgres_operator::api::collection_path("default"), &body)
        .await
        .expect("create big");
    assert_eq!(
        summary(&running.next_event(WITHIN).await),
        "ADDED default/big size=3"
    );
    let relisted = running
        .notice(WITHIN, "relisted", |n| {
            matches!(n, WatchNotice::Relisted { .. })
        })
        .await;
    assert!(
        matches!(
            relisted,
            WatchNotice::Relisted {
                why: RelistReason::EventTooLarge { limit: 4096 },
                added: 1,
                ..
            }
        ),
        "{relisted:?}"
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
