//! An API server restarted empty or restored from a backup is *behind* the watch: its
//! resourceVersions start again from low numbers, and the type may be missing until its CRD is
//! installed again. The watch must relist (and report what vanished as DELETED) rather than
//! retry from its old resourceVersion until the new server's counter passes it and then resume
//! silently with a ghost object.
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place"). The byte-level cases run against the scripted
//! server in `support.rs`; the restart runs against two sandboxes on the same address.

use postgres_operator::api::object_path;
use postgres_operator::client::{Client, Patch};
use postgres_operator::watch::{RelistReason, WatchNotice};
use sandbox::{Sandbox, SandboxOptions};
use test_support::plain_client;

use crate::support::*;

/// What kube-apiserver sends for a watch from a resourceVersion it has not reached
/// (`storage.NewTooLargeResourceVersionError`, reason Timeout, retry after 1 s).
const TOO_LARGE: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Too large resource version: 11, current: 3","reason":"Timeout","details":{"causes":[{"reason":"ResourceVersionTooLarge","message":"Too large resource version"}],"retryAfterSeconds":1},"code":504}"#;

/// What kube-apiserver sends for a collection whose type it does not serve.
const NOT_FOUND: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}"#;

/// Before: `a` and `ghost`, current at RV 11. The watch from 11 is refused with `refusal` (as
/// the HTTP status of the watch request, or as HTTP 200 and one `ERROR` event, which is what the
/// watch cache sends); the server now holds only `a`, current at RV 3. The consumer must get
/// DELETED for the ghost, and the next watch must start from 3, never from 11 again.
async fn the_ghost_is_deleted_after(refusal: Reply) -> Box<postgres_operator::status::Status> {
    let server = lists_and_a_watch(
        Reply::list(
            "11",
            &[
                object("a", "uid-a", "2", 1),
                object("ghost", "uid-g", "11", 3),
            ],
        ),
        Reply::list("3", &[object("a", "uid-a", "2", 1)]),
        refusal,
    )
    .await;
    let mut running = watch_scripted(&server);
    running
        .expect_events(&["ADDED default/a size=1", "ADDED default/ghost size=3"])
        .await;
    running.expect_event("DELETED default/ghost size=3").await;
    let relist = running.relisted(WITHIN).await;
    assert_eq!(
        (relist.resource_version.as_str(), relist.changes),
        ("3", (0, 0, 1)),
        "only the ghost changed"
    );
    running.watching_from(WITHIN, "3").await;
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Retrying { .. })),
        1,
        "one backoff before the relist, none after"
    );
    let watched_from_old = server
        .paths()
        .iter()
        .filter(|p| is_watch(p) && p.contains("resourceVersion=11"))
        .count();
    assert_eq!(
        watched_from_old, 1,
        "the old resourceVersion is never retried"
    );
    running.stop().await;
    match relist.why {
        RelistReason::AheadOfServer { status } | RelistReason::CollectionNotFound { status } => {
            status
        }
        other => panic!("relisted for the wrong reason: {other:?}"),
    }
}

/// HTTP 504 "Too large resource version" at watch start: back off, relist, DELETED for the ghost.
#[tokio::test]
async fn http_504_too_large_resource_version_relists() {
    let status = the_ghost_is_deleted_after(Reply::status(504, TOO_LARGE)).await;
    assert_eq!((status.code, status.reason.as_str()), (504, "Timeout"));
}

/// The same 504 as an in-stream ERROR event, as kube-apiserver's watch cache sends it after
/// waiting 3 s for the resourceVersion: relist, DELETED for the ghost.
#[tokio::test]
async fn in_stream_504_too_large_resource_version_relists() {
    let status = the_ghost_is_deleted_after(Reply::once(error_line(TOO_LARGE))).await;
    assert!(status.message.starts_with("Too large resource version"));
}

/// A server before 1.18.6 gave no cause type, only the Timeout's message: still recognised.
#[tokio::test]
async fn a_too_large_resource_version_without_a_cause_type_relists() {
    let without_cause = status_json(504, "Timeout", "Too large resource version: 11, current: 3");
    let status = the_ghost_is_deleted_after(Reply::once(error_line(&without_cause))).await;
    assert_eq!(status.code, 504);
}

/// A 404 for the collection at watch start means its type is gone: relist (the list then says
/// what is left), never watch on from the old resourceVersion.
#[tokio::test]
async fn http_404_for_the_collection_relists() {
    let status = the_ghost_is_deleted_after(Reply::status(404, NOT_FOUND)).await;
    assert_eq!(status.reason, "NotFound");
}

/// A 504 that is not about resourceVersions (a slow request) is retried from the same
/// resourceVersion, without a relist.
#[tokio::test]
async fn an_unrelated_504_is_retried_without_a_relist() {
    let timeout = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: request did not complete within the allotted timeout","reason":"Timeout","details":{},"code":504}"#;
    let list = Reply::list("11", &[]);
    let server = lists_and_a_watch(list.clone(), list, Reply::status(504, timeout)).await;
    let mut running = watch_scripted(&server);
    running.retrying_with(WITHIN, "504").await;
    running.watching_from(WITHIN, "11").await;
    assert_eq!(
        server.paths().iter().filter(|p| !is_watch(p)).count(),
        1,
        "no relist"
    );
    running.stop().await;
}

async fn start_sandbox(options: SandboxOptions) -> (Sandbox, Client) {
    let sandbox = test_support::start_sandbox_with(options).await;
    let client = plain_client(&sandbox.url());
    (sandbox, client)
}

fn revision(sandbox: &Sandbox) -> u64 {
    // Only a test may read the sandbox's counter as a number; clients compare RVs for equality.
    sandbox.resource_version().parse().expect("a number")
}

/// Issue 11, point 9: run a watch, create a cluster, restart the API server empty on the same
/// address and install the CRD again a moment later. The watch gets 404s, relists once the type is
/// back, and hands over DELETED for the ghost — even though the new server's resourceVersion has
/// by then passed the old one, so a watch from it would have been accepted and the ghost kept.
#[tokio::test]
async fn a_restarted_server_without_the_cluster_yields_deleted_not_a_ghost() {
    let (first, client) = start_sandbox(SandboxOptions::default()).await;
    test_support::register_crd(&client).await;
    create_cluster(&client, "ghost", 3).await;
    // A few writes, so the old resourceVersion is well ahead of a fresh server's.
    for size in 4..7 {
        let _: serde_json::Value = client
            .patch(
                &object_path("default", "ghost"),
                &Patch::Merge(serde_json::json!({"spec": {"size": size}})),
            )
            .await
            .expect("patch");
    }
    let mut running = start_watch(client, test_options());
    running.expect_event("ADDED default/ghost size=6").await;
    running.until_watching(WITHIN).await;
    let old_version = first.resource_version();
    let addr = first.addr();
    first.shutdown().await;
    running.retrying_with(WITHIN, "cannot connect").await;
    let restarted_at = running.count_notices(|_| true);

    let (second, client) = start_sandbox(SandboxOptions {
        listen: addr,
        ..SandboxOptions::default()
    })
    .await;
    // Wait until the watch has met the missing type, then move the new server's counter past the
    // old resourceVersion, then install the CRD again.
    // "(404 NotFound: ..." or "NotFound (404): ...": a bare "404" also matches the
    // server's port in a "cannot connect" error (127.0.0.1:40441).
    running.retrying_with(WITHIN, "(404").await;
    let old: u64 = old_version.parse().expect("a number");
    let mut filler = 0;
    while revision(&second) <= old {
        filler += 1;
        let _: serde_json::Value = client
            .create(
                "/api/v1/namespaces/default/secrets",
                &serde_json::json!({"metadata": {"name": format!("filler-{filler}")}}),
            )
            .await
            .expect("create a secret");
    }
    test_support::register_crd(&client).await;

    running.expect_event("DELETED default/ghost size=6").await;
    let relist = running.relisted(WITHIN).await;
    assert!(
        matches!(relist.why, RelistReason::CollectionNotFound { .. }) && relist.changes.2 == 1,
        "expected a relist for the 404 with one deletion, got {relist:?}"
    );
    running
        .watching_from(WITHIN, &relist.resource_version)
        .await;
    let since_restart = &running.notices[restarted_at..];
    assert!(
        !since_restart.iter().any(
            |n| matches!(n, WatchNotice::Watching { resource_version } if *resource_version == old_version)
        ),
        "never watching again from the old resourceVersion {old_version}: {since_restart:#?}"
    );
    let accepted_old_watch = second.requests().iter().any(|r| {
        r.verb == "watch"
            && r.code == 200
            && r.path.contains(&format!("resourceVersion={old_version}&"))
    });
    assert!(
        !accepted_old_watch,
        "the new server never served a watch from {old_version}"
    );
    running.stop().await;
    second.shutdown().await;
}
