//! The list is read in pages of 500 (`limit`, then `continue`), as client-go's reflector does; the
//! first list hands each page over as it is read; a relist pages too and still reports what
//! changed; a first list that breaks off halfway (an expired continue token, a failed page) is
//! finished by a relist, with nothing added twice.
//!
//! WORKSHOP.md, step 02 ("Listing in pages"). Against the sandbox, and a scripted server for the
//! expired token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use postgres_operator::api::PostgresCluster;
use postgres_operator::client::Client;
use postgres_operator::story::event_lines;
use postgres_operator::watch::{Event, RelistReason, WatchNotice};
use sandbox::{Sandbox, SandboxOptions};

use crate::support::*;

const WITHIN: Duration = Duration::from_secs(20);
/// More than two pages of 500.
const OBJECTS: usize = 1_200;

async fn sandbox_with_clusters(count: usize) -> (Sandbox, Client) {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
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

/// The paths of the list requests the sandbox answered, oldest first.
fn list_requests(sandbox: &Sandbox) -> Vec<String> {
    let lists = cluster_requests(sandbox, "list");
    lists.into_iter().map(|r| r.path).collect()
}

/// A scripted server whose first list breaks off after its first page: the first list request
/// gets `first_page` (continue token `page-2-of-rv-10`), and the request for the page after it
/// gets `broken`. Every later list gets `fresh_first_page`, then `fresh_last_page` for the page
/// after that. Watches stay open and quiet; a list without `limit=500` is refused.
async fn first_list_breaks_off(
    first_page: String,
    broken: Reply,
    fresh_first_page: String,
    fresh_last_page: String,
) -> ScriptedServer {
    // Two first-page requests look alike: the server tells them apart by counting.
    let first_pages = AtomicUsize::new(0);
    scripted_server(move |_, path| {
        if is_watch(path) {
            Reply::quiet()
        } else if !path.contains("limit=500") {
            Reply::status(400, "unpaged list")
        } else if path.contains("continue=page-2-of-rv-10") {
            broken.clone()
        } else if path.contains("continue=") {
            Reply::status(200, &fresh_last_page)
        } else if first_pages.fetch_add(1, Ordering::SeqCst) == 0 {
            Reply::status(200, &first_page)
        } else {
            Reply::status(200, &fresh_first_page)
        }
    })
    .await
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
        names.insert(event.object().unwrap().key());
    }
    assert_eq!(names.len(), OBJECTS, "each object exactly once");
    let listed = running.listed(WITHIN).await;
    assert_eq!(
        listed,
        WatchNotice::Listed {
            resource_version: resource_version.clone(),
            count: OBJECTS
        }
    );
    running.watching_from(WITHIN, &resource_version).await;

    let lists = list_requests(&sandbox);
    assert_eq!(lists.len(), 3, "three pages: {lists:#?}");
    assert!(lists.iter().all(|path| path.contains("limit=500")));
    assert!(!lists[0].contains("continue="), "{}", lists[0]);
    assert!(lists[1..].iter().all(|path| path.contains("continue=")));
    assert_ne!(lists[1], lists[2], "each page has its own continue token");
    running.stop().await;
}

/// The first list hands each page over as soon as it is read: the first ADDED comes after the
/// `Listed` notice (counting all 1,200 objects, from `remainingItemCount`) while only the first of
/// the three pages has been requested.
#[tokio::test]
async fn the_first_page_is_handed_over_before_the_next_is_read() {
    let (sandbox, client) = sandbox_with_clusters(OBJECTS).await;
    let resource_version = sandbox.resource_version();
    let mut running = start_watch(client, test_options());
    let first = running.next_event(WITHIN).await;
    // Not a race: the watch cannot run more than its 16-item buffer ahead of this consumer, and
    // the first page holds 500 objects, so it is still handing them over.
    let lists_at_first_event = list_requests(&sandbox);
    assert_eq!(first.type_name(), "ADDED");
    assert_eq!(
        lists_at_first_event.len(),
        1,
        "only the first page read: {lists_at_first_event:#?}"
    );
    assert_eq!(
        running.notices,
        vec![WatchNotice::Listed {
            resource_version,
            count: OBJECTS
        }],
        "the Listed notice, alone, before the first event"
    );
    let mut names = std::collections::BTreeSet::from([first.object().unwrap().key()]);
    for _ in 1..OBJECTS {
        let event = running.next_event(WITHIN).await;
        assert_eq!(event.type_name(), "ADDED");
        names.insert(event.object().unwrap().key());
    }
    assert_eq!(names.len(), OBJECTS, "each object exactly once");
    running.until_watching(WITHIN).await;
    assert_eq!(list_requests(&sandbox).len(), 3);
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
    fail_next_watches(&sandbox, 2, injected(500, "InternalError", None));
    delete_resize_create(&client, "pg-0003", "pg-1100", "pg-9999").await;
    // ... its resourceVersion is compacted away: the next watch gets 410 and relists.
    sandbox.faults().compact_history();
    let lists_before = list_requests(&sandbox).len();

    running
        .expect_deleted_resized_created(("pg-0003", 1), "pg-1100", "pg-9999")
        .await;
    let relist = running.relisted(WITHIN).await;
    assert!(
        matches!(relist.why, RelistReason::Expired { .. }) && relist.changes == (1, 1, 1),
        "expected an Expired relist with 1 added, 1 modified, 1 deleted: {relist:?}"
    );
    let relist_pages = &list_requests(&sandbox)[lists_before..];
    assert_eq!(relist_pages.len(), 3, "{relist_pages:#?}");
    assert!(relist_pages[1].contains("continue="));
    running.assert_nothing_twice().await;
    running.stop().await;
}

/// A continue token that expired between pages of the first list (410 Expired on the `continue`
/// request) starts a fresh list from the first page, at the new resourceVersion, reported as a
/// relist: the first page's object, already handed over, comes again only as MODIFIED; no backoff.
#[tokio::test]
async fn an_expired_continue_token_starts_a_fresh_list() {
    let expired = status_json(
        410,
        "Expired",
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
    );
    let server = first_list_breaks_off(
        list_page(
            "10",
            "page-2-of-rv-10",
            None,
            &[object("a", "uid-a", "5", 1)],
        ),
        Reply::status(410, &expired),
        list_page(
            "20",
            "page-2-of-rv-20",
            None,
            &[object("a", "uid-a", "15", 3)],
        ),
        list_page("20", "", None, &[object("b", "uid-b", "16", 2)]),
    )
    .await;

    let mut running = watch_scripted(&server);
    let events = running.next_summaries(3, WITHIN).await;
    assert_eq!(
        events,
        vec![
            "ADDED default/a size=1",
            "MODIFIED default/a size=3",
            "ADDED default/b size=2"
        ],
        "the first page as it came, then what the fresh list found different"
    );
    running.watching_from(WITHIN, "20").await;
    assert_eq!(
        running.notices[0],
        WatchNotice::Listed {
            resource_version: "10".into(),
            count: 1
        },
        "no remainingItemCount: the first page's count"
    );
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Listed { .. })),
        1
    );
    assert_eq!(
        running.count_notices(|n| matches!(
            n,
            WatchNotice::Relisted {
                why: RelistReason::FirstListBrokeOff { handed_over: 1, .. },
                added: 1,
                modified: 1,
                deleted: 0,
                ..
            }
        )),
        1
    );
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Retrying { .. })),
        0,
        "an expired continue token is not a failure"
    );
    running.assert_nothing_twice().await;
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

/// A first list whose second page fails (500) is finished by a relist after a backoff: the first
/// page's objects are not added twice, one gone meanwhile comes out as DELETED, and the story
/// says "Watch version" once and then that the list was redone.
#[tokio::test]
async fn a_first_list_that_fails_halfway_is_finished_by_a_relist() {
    let internal = status_json(500, "InternalError", "etcd leader changed");
    let server = first_list_breaks_off(
        list_page(
            "10",
            "page-2-of-rv-10",
            Some(2),
            &[object("a", "uid-a", "5", 1), object("b", "uid-b", "6", 1)],
        ),
        Reply::status(500, &internal),
        list_page(
            "12",
            "page-2-of-rv-12",
            Some(1),
            &[object("a", "uid-a", "5", 1)],
        ),
        list_page("12", "", None, &[object("c", "uid-c", "11", 2)]),
    )
    .await;

    let mut running = watch_scripted(&server);
    running
        .expect_events(&[
            "ADDED default/a size=1",
            "ADDED default/b size=1",
            "DELETED default/b size=1",
            "ADDED default/c size=2",
        ])
        .await;
    running.watching_from(WITHIN, "12").await;
    running.assert_nothing_twice().await;
    let notices = running.notices.clone();
    assert_eq!(
        notices[0],
        WatchNotice::Listed {
            resource_version: "10".into(),
            count: 4
        },
        "the count is the first page's plus remainingItemCount"
    );
    assert!(
        matches!(notices[1], WatchNotice::Retrying { .. }),
        "{notices:#?}"
    );
    let WatchNotice::Relisted {
        why: RelistReason::FirstListBrokeOff { handed_over: 2, .. },
        added: 1,
        modified: 0,
        deleted: 1,
        ..
    } = &notices[2]
    else {
        panic!("expected the first list finished by a relist: {notices:#?}")
    };
    let mut first_watch = true;
    let story: Vec<String> = notices
        .iter()
        .flat_map(|n| {
            event_lines(
                &Event::<PostgresCluster>::Notice(n.clone()),
                &mut first_watch,
            )
        })
        .collect();
    assert_eq!(
        story
            .iter()
            .filter(|l| l.starts_with("Watch version"))
            .count(),
        1,
        "{story:#?}"
    );
    assert!(
        story.iter().any(|l| l
            .starts_with("Relisted at watchVersion 12 (the first list broke off after 2 objects:")),
        "{story:#?}"
    );
    running.stop().await;
}
