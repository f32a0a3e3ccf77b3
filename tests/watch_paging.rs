//! The list is read in pages of 500 (`limit`, then `continue`), as client-go's reflector does; a
//! relist pages too and still reports what changed; an expired continue token starts a fresh list.
//!
//! WORKSHOP.md, step 02 ("Listing in pages"). Against the sandbox, and a scripted server for the
//! expired token.

mod watch_support;

use std::time::Duration;

use bytes::Bytes;
use postgres_operator::api::object_path;
use postgres_operator::client::{Client, Patch};
use postgres_operator::crd;
use postgres_operator::watch::{RelistReason, WatchNotice};
use sandbox::{Sandbox, SandboxOptions};
use watch_support::*;

const WITHIN: Duration = Duration::from_secs(20);
/// More than two pages of 500.
const OBJECTS: usize = 1_200;

async fn sandbox_with_clusters(count: usize) -> (Sandbox, Client) {
    let sandbox = Sandbox::start(
        SandboxOptions::default(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("sandbox starts");
    let client = plain_client(&sandbox.url());
    crd::register(&client).await.expect("CRD registered");
    crd::wait_established(&client, WITHIN)
        .await
        .expect("CRD established");
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..8 {
        let client = client.clone();
        writers.spawn(async move {
            for index in (writer..count).step_by(8) {
                create_cluster(&client, &format!("pg-{index:04}"), 1).await;
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.expect("a writer task panicked");
    }
    (sandbox, client)
}

/// The list requests the sandbox answered, oldest first (watches and writes left out).
fn list_requests(sandbox: &Sandbox) -> Vec<String> {
    sandbox
        .requests()
        .into_iter()
        .filter(|r| r.verb == "list" && r.resource == "postgresclusters")
        .map(|r| r.path)
        .collect()
}

/// 1,200 objects arrive as 1,200 ADDED events, listed in three requests: `limit=500`, then two
/// following `continue`; the watch starts from the list's resourceVersion.
#[tokio::test]
async fn a_large_collection_is_listed_in_pages_of_500() {
    let (sandbox, client) = sandbox_with_clusters(OBJECTS).await;
    let resource_version = sandbox.resource_version();
    let mut running = start_watch(client, test_options());
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..OBJECTS {
        let event = running.next_event(WITHIN).await;
        assert_eq!(event.type_name(), "ADDED");
        names.insert(event.object().key());
    }
    assert_eq!(names.len(), OBJECTS, "each object exactly once");
    let listed = running
        .notice(WITHIN, "listed", |n| {
            matches!(n, WatchNotice::Listed { .. })
        })
        .await;
    assert_eq!(
        listed,
        WatchNotice::Listed {
            resource_version: resource_version.clone(),
            count: OBJECTS
        }
    );
    running
        .notice(WITHIN, "watching", |n| {
            matches!(n, WatchNotice::Watching { resource_version: rv } if *rv == resource_version)
        })
        .await;

    let lists = list_requests(&sandbox);
    assert_eq!(lists.len(), 3, "three pages: {lists:#?}");
    assert!(lists.iter().all(|path| path.contains("limit=500")));
    assert!(!lists[0].contains("continue="), "{}", lists[0]);
    assert!(lists[1..].iter().all(|path| path.contains("continue=")));
    assert_ne!(lists[1], lists[2], "each page has its own continue token");
    running.stop().await;
}

/// After a 410, the relist reads all three pages again and reports only what changed while the
/// watch was down: a delete on the first page, an update on the last, a create.
#[tokio::test]
async fn a_paged_relist_reports_only_the_changes() {
    let (sandbox, client) = sandbox_with_clusters(OBJECTS).await;
    let mut running = start_watch(client.clone(), test_options());
    for _ in 0..OBJECTS {
        running.next_event(WITHIN).await;
    }
    running.until_watching(WITHIN).await;

    // While the watch is down ...
    sandbox.faults().fail_next(
        2,
        "watch=true",
        sandbox::InjectedFault::Status {
            code: 500,
            reason: "InternalError".into(),
            retry_after_seconds: None,
        },
    );
    sandbox.faults().end_all_watches_now();
    let _: serde_json::Value = client
        .delete(&object_path("default", "pg-0003"))
        .await
        .expect("delete pg-0003");
    let _: serde_json::Value = client
        .patch(
            &object_path("default", "pg-1100"),
            &Patch::Merge(serde_json::json!({"spec": {"size": 5}})),
        )
        .await
        .expect("resize pg-1100");
    create_cluster(&client, "pg-9999", 4).await;
    // ... its resourceVersion is compacted away: the next watch gets 410 and relists.
    sandbox.faults().compact_history();
    let lists_before = list_requests(&sandbox).len();

    let mut changes = running.next_summaries(3, WITHIN).await;
    changes.sort();
    assert_eq!(
        changes,
        vec![
            "ADDED default/pg-9999 size=4",
            "DELETED default/pg-0003 size=1",
            "MODIFIED default/pg-1100 size=5",
        ]
    );
    let relisted = running
        .notice(WITHIN, "relisted", |n| {
            matches!(n, WatchNotice::Relisted { .. })
        })
        .await;
    let WatchNotice::Relisted {
        why: RelistReason::Expired { .. },
        added: 1,
        modified: 1,
        deleted: 1,
        ..
    } = relisted
    else {
        panic!("expected an Expired relist with 1 added, 1 modified, 1 deleted: {relisted:?}")
    };
    let relist_pages = &list_requests(&sandbox)[lists_before..];
    assert_eq!(relist_pages.len(), 3, "{relist_pages:#?}");
    assert!(relist_pages[1].contains("continue="));
    assert!(
        running.no_event_for(Duration::from_millis(300)).await,
        "nothing handed over twice"
    );
    running.stop().await;
}

/// A continue token that expired between pages (410 Expired on the `continue` request) starts a
/// fresh list from the first page, at the new resourceVersion; no object is handed over twice
/// and the watch is not failed for it.
#[tokio::test]
async fn an_expired_continue_token_starts_a_fresh_list() {
    let expired = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.","reason":"Expired","code":410}"#;
    let page = |rv: &str, token: &str, items: &[serde_json::Value]| {
        serde_json::json!({
            "apiVersion": "workshop.example.com/v1", "kind": "PostgresClusterList",
            "metadata": {"resourceVersion": rv, "continue": token}, "items": items
        })
        .to_string()
    };
    // Two first-page requests look alike: the server tells them apart by counting.
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let first_page = page("10", "page-2-of-rv-10", &[object("a", "uid-a", "5", 1)]);
    let fresh_first_page = page("20", "page-2-of-rv-20", &[object("a", "uid-a", "15", 3)]);
    let fresh_last_page = page("20", "", &[object("b", "uid-b", "16", 2)]);
    let server = ScriptedServer::start(move |_, path| {
        let json = |code: u16, body: &str| Reply::Json {
            code,
            body: body.to_string(),
        };
        if path.contains("watch=true") {
            return Reply::Chunks {
                chunks: Vec::<Bytes>::new(),
                hold_open: true,
            };
        }
        if !path.contains("limit=500") {
            return json(400, "unpaged list");
        }
        if path.contains("continue=page-2-of-rv-10") {
            return json(410, expired);
        }
        if path.contains("continue=page-2-of-rv-20") {
            return json(200, &fresh_last_page);
        }
        match calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => json(200, &first_page),
            _ => json(200, &fresh_first_page),
        }
    })
    .await;

    let mut running = start_watch(plain_client(&server.url), test_options());
    let mut events = running.next_summaries(2, WITHIN).await;
    events.sort();
    assert_eq!(
        events,
        vec!["ADDED default/a size=3", "ADDED default/b size=2"],
        "the fresh list's state, each object once"
    );
    running
        .notice(
            WITHIN,
            "watching from 20",
            |n| matches!(n, WatchNotice::Watching { resource_version } if resource_version == "20"),
        )
        .await;
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Listed { resource_version, count: 2 } if resource_version == "20")),
        1
    );
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Retrying { .. })),
        0,
        "an expired continue token is not a failure"
    );
    assert!(
        running.no_event_for(Duration::from_millis(300)).await,
        "nothing handed over twice"
    );
    let paths = server.paths();
    let lists: Vec<&String> = paths.iter().filter(|p| !p.contains("watch=true")).collect();
    assert_eq!(lists.len(), 4, "{lists:#?}");
    assert!(lists[1].contains("continue=page-2-of-rv-10"));
    assert!(
        !lists[2].contains("continue="),
        "a fresh list: {}",
        lists[2]
    );
    assert!(lists[3].contains("continue=page-2-of-rv-20"));
    running.stop().await;
}
