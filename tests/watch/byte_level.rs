//! list_then_watch over real HTTP against a server that controls every byte: how events are cut
//! into chunks, lines without `\n`, old-style `Gone`, bare Status lines and garbage.
//!
//! WORKSHOP.md, step 02 ("Chunks are not events" and "The state machine that never loses its place").

use std::time::Duration;

use postgres_operator::watch::{RelistReason, ResumeReason, WatchNotice};
use test_support::plain_client;

use crate::support::*;

/// A server whose every list is empty at `rv`, whose first watch gets `first_watch`, and whose
/// later watches stay open and quiet.
async fn empty_list_then(rv: &str, first_watch: Reply) -> ScriptedServer {
    let list = Reply::list(rv, &[]);
    lists_and_a_watch(list.clone(), list, first_watch).await
}

/// What kube-apiserver sends when a watch's resourceVersion was compacted away: an ERROR event
/// with 410 and this reason.
fn expired_line(reason: &str, current: u32) -> String {
    error_line(&status_json(
        410,
        reason,
        &format!("too old resource version: 10 ({current})"),
    ))
}

/// Events split into 1-byte HTTP chunks (inside `é` and `日本` too) arrive whole, and the next
/// watch starts from the last event's resourceVersion.
#[tokio::test]
async fn one_byte_chunks_over_http_yield_whole_events() {
    let stream = [
        event_line("ADDED", &object("a", "uid-a", "11", 3)),
        event_line("MODIFIED", &object("a", "uid-a", "12", 5)),
        event_line("ADDED", &object("b-日本", "uid-b", "13", 1)),
    ]
    .concat();
    let server = empty_list_then("10", Reply::in_chunks(&stream, 1, false)).await;
    let mut running = watch_scripted(&server);
    running
        .expect_events(&[
            "ADDED default/a size=3",
            "MODIFIED default/a size=5",
            "ADDED default/b-日本 size=1",
        ])
        .await;
    running
        .notice(WITHIN, "resumed at 13", |n| {
            matches!(n, WatchNotice::Resumed { resource_version, why: ResumeReason::EndOfStream { events: 3 } } if resource_version == "13")
        })
        .await;
    running.watching_from(WITHIN, "13").await;
    let paths = server.paths();
    assert!(paths[1].contains("resourceVersion=10"), "{paths:?}");
    assert!(paths[1].contains("allowWatchBookmarks=true") && paths[1].contains("timeoutSeconds=5"));
    assert!(!paths[1].contains("pretty"), "never pretty=true on a watch");
    assert!(paths[2].contains("resourceVersion=13"), "{paths:?}");
    assert_eq!(
        paths.iter().filter(|p| !is_watch(p)).count(),
        1,
        "no relist: {paths:?}"
    );
    running.stop().await;
}

/// Hundreds of events in one HTTP chunk all come out, in order.
#[tokio::test]
async fn many_events_in_one_chunk_all_arrive_in_order() {
    let stream: String = (0..300)
        .map(|i| {
            event_line(
                "MODIFIED",
                &object("a", "uid-a", &(100 + i).to_string(), i % 9 + 1),
            )
        })
        .collect();
    let server = empty_list_then("99", Reply::open_with(stream)).await;
    let mut running = watch_scripted(&server);
    for i in 0..300 {
        let event = running.next_event(WITHIN).await;
        assert_eq!(
            event.object().unwrap().metadata.resource_version,
            (100 + i).to_string()
        );
    }
    running.stop().await;
}

/// A 5 MB event, in 16 KB chunks, is delivered whole with the default 16 MiB limit.
#[tokio::test]
async fn a_five_megabyte_event_is_delivered() {
    let mut big = object("big", "uid-big", "11", 3);
    big["metadata"]["annotations"]["blob"] = serde_json::Value::String("日本é".repeat(700_000));
    let line = event_line("ADDED", &big);
    assert!(line.len() > 5_000_000);
    let server = empty_list_then("10", Reply::in_chunks(&line, 16 * 1024, true)).await;
    let mut running = watch_scripted(&server);
    let event = running.next_event(WITHIN).await;
    assert_eq!(summary(&event), "ADDED default/big size=3");
    running.stop().await;
}

/// A server that closes right after the last event, without its `\n`, still delivers it, and the
/// watch resumes from it.
#[tokio::test]
async fn the_last_line_without_a_newline_is_delivered() {
    let mut stream = event_line("ADDED", &object("a", "uid-a", "11", 3));
    stream.push_str(event_line("ADDED", &object("b", "uid-b", "12", 2)).trim_end());
    let server = empty_list_then("10", Reply::in_chunks(&stream, 100, false)).await;
    let mut running = watch_scripted(&server);
    running
        .expect_events(&["ADDED default/a size=3", "ADDED default/b size=2"])
        .await;
    running.watching_from(WITHIN, "12").await;
    running.stop().await;
}

/// An in-stream ERROR with the pre-1.18 reason `Gone` relists, and the consumer is told what
/// changed while away: Modified for a moved object, Added for a new one, Deleted for a gone one.
#[tokio::test]
async fn in_stream_gone_relists_and_hands_over_the_difference() {
    let gone = error_line(&status_json(
        410,
        "Gone",
        "too old resource version: 11 (40)",
    ));
    let first = [
        event_line("ADDED", &object("a", "uid-a", "11", 3)),
        event_line("ADDED", &object("c", "uid-c", "12", 1)),
        gone,
    ]
    .concat();
    let server = lists_and_a_watch(
        Reply::list("10", &[]),
        Reply::list(
            "40",
            &[object("a", "uid-a", "30", 5), object("b", "uid-b", "31", 2)],
        ),
        Reply::open_with(first),
    )
    .await;
    let mut running = watch_scripted(&server);
    running
        .expect_events(&["ADDED default/a size=3", "ADDED default/c size=1"])
        .await;
    let first_after = summary(&running.next_event(WITHIN).await);
    assert!(
        running
            .notices
            .iter()
            .any(|n| matches!(n, WatchNotice::Relisted { .. })),
        "the Relisted notice arrives before the events it explains"
    );
    let mut after = running.next_summaries(2, WITHIN).await;
    after.push(first_after);
    after.sort();
    assert_eq!(
        after,
        vec![
            "ADDED default/b size=2",
            "DELETED default/c size=1",
            "MODIFIED default/a size=5"
        ]
    );
    let relist = running.relisted(WITHIN).await;
    let RelistReason::Expired { status } = &relist.why else {
        panic!("expected a relist for Expired, got {relist:?}")
    };
    assert_eq!((status.reason.as_str(), status.code), ("Gone", 410));
    assert_eq!(
        (relist.resource_version.as_str(), relist.changes),
        ("40", (1, 1, 1))
    );
    running.watching_from(WITHIN, "40").await;
    assert!(
        !server
            .paths()
            .iter()
            .any(|p| is_watch(p) && p.contains("resourceVersion=12")),
        "the stale RV is never reused"
    );
    running.stop().await;
}

/// A bare Status line (no `type`) that says 410 is treated like an in-stream 410: relist.
#[tokio::test]
async fn a_bare_status_line_saying_410_relists() {
    let bare = status_json(410, "Expired", "expired");
    let server = scripted_server(move |index, path| match (index, is_watch(path)) {
        (_, false) => Reply::list(&format!("{}", 10 + index), &[]),
        (1, true) => Reply::open_with(format!("{bare}\n")),
        _ => Reply::quiet(),
    })
    .await;
    let mut running = watch_scripted(&server);
    let relist = running.relisted(WITHIN).await;
    assert!(
        matches!(relist.why, RelistReason::Expired { .. }),
        "relisted after a bare Status: {relist:?}"
    );
    running.stop().await;
}

/// A line that does not decode means we missed a change: relist (not fatal, unlike the original).
#[tokio::test]
async fn an_undecodable_line_relists_instead_of_dying() {
    let stream = format!(
        "{}{{\"type\":\"ADDED\",\"object\":{{\"metadata\":{{\"name\":\"x\"}}}}}}\n",
        event_line("ADDED", &object("a", "uid-a", "11", 3))
    );
    let server = lists_and_a_watch(
        Reply::list("10", &[]),
        Reply::list("20", &[object("a", "uid-a", "11", 3)]),
        Reply::open_with(stream),
    )
    .await;
    let mut running = watch_scripted(&server);
    running.expect_event("ADDED default/a size=3").await;
    let relist = running.relisted(WITHIN).await;
    let RelistReason::Undecodable { error } = &relist.why else {
        panic!("expected an Undecodable relist, got {relist:?}")
    };
    assert!(error.contains("missing field `spec`"), "{error}");
    assert_eq!(
        relist.changes,
        (0, 0, 0),
        "a is unchanged: no duplicate event"
    );
    running.assert_nothing_twice().await;
    running.stop().await;
}

/// HTTP 410 with a Status body at watch start relists, too.
#[tokio::test]
async fn http_410_at_watch_start_relists() {
    let expired = status_json(410, "Expired", "too old resource version: 10 (20)");
    let server = lists_and_a_watch(
        Reply::list("10", &[]),
        Reply::list("20", &[object("n", "uid-n", "19", 4)]),
        Reply::status(410, &expired),
    )
    .await;
    let mut running = watch_scripted(&server);
    running.expect_event("ADDED default/n size=4").await;
    running
        .notice(WITHIN, "relisted", |n| matches!(n, WatchNotice::Relisted { why: RelistReason::Expired { status }, .. } if status.reason == "Expired"))
        .await;
    running.stop().await;
}

/// 200 with an empty body, over and over: the watch backs off instead of spinning.
#[tokio::test]
async fn empty_200_bodies_back_off_instead_of_busy_looping() {
    let server = scripted_server(move |_, path| match is_watch(path) {
        false => Reply::list("10", &[]),
        true => Reply::ended(),
    })
    .await;
    let mut running = watch_scripted(&server);
    running.retrying_with(WITHIN, "ended at once").await;
    tokio::time::sleep(Duration::from_secs(2)).await; // the measurement window, not synchronisation
    let watches = server.paths().iter().filter(|p| is_watch(p)).count();
    // Backoff 100 ms, 200, 400, 800, 1000 (±20 %): about 6 attempts in 2 s; a busy loop makes thousands.
    assert!(
        (3..=9).contains(&watches),
        "{watches} watch requests in ~2 s"
    );
    assert_eq!(
        server.paths().iter().filter(|p| !is_watch(p)).count(),
        1,
        "no relist"
    );
    running.stop().await;
}

/// A server that answers every watch with an in-stream 410 at once, even from the RV it just
/// listed: relisting does not help, so the loop backs off between rounds instead of hammering.
#[tokio::test]
async fn an_in_stream_410_at_once_every_time_backs_off() {
    let expired = expired_line("Expired", 20);
    let server = scripted_server(move |_, path| match is_watch(path) {
        false => Reply::list("10", &[]),
        true => Reply::once(expired.clone()),
    })
    .await;
    let mut running = watch_scripted(&server);
    running
        .retrying_with(WITHIN, "fresh list expired at once")
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await; // the measurement window, not synchronisation
    let lists = server.paths().iter().filter(|p| !is_watch(p)).count();
    // Backoff 100 ms, 200, 400, 800, 1000 (±20 %): about 6 rounds in 2 s; a hot loop makes hundreds.
    assert!((3..=10).contains(&lists), "{lists} lists in ~2 s");
    running.stop().await;
}

/// A server asking for an absurd wait (`retryAfterSeconds` of days) is obeyed only up to the
/// backoff's own maximum: a bad proxy or server cannot park the operator for good.
#[tokio::test]
async fn a_huge_retry_after_is_capped_at_the_backoff_maximum() {
    let too_long = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"busy","reason":"InternalError","details":{"retryAfterSeconds":4000000000},"code":500}"#;
    let added = event_line("ADDED", &object("later", "uid-l", "11", 2));
    let server = scripted_server(move |index, path| match (index, is_watch(path)) {
        (_, false) => Reply::list("10", &[]),
        (1, true) => Reply::status(500, too_long),
        _ => Reply::open_with(added.clone()),
    })
    .await;
    let options = test_options();
    let longest = options.backoff.max.mul_f64(1.0 + options.backoff.jitter);
    let mut running = start_watch(plain_client(&server.url), options);
    running
        .notice(
            WITHIN,
            "retrying",
            |n| matches!(n, WatchNotice::Retrying { after, .. } if *after <= longest),
        )
        .await;
    running.expect_event("ADDED default/later size=2").await;
    running.stop().await;
}

/// A relist that finds a name deleted and re-created while away (new uid) hands over DELETED for
/// the old object before ADDED for the new one; an object whose RV did not move is not repeated.
#[tokio::test]
async fn a_relist_reports_a_recreated_name_as_deleted_then_added_and_skips_unchanged() {
    let server = lists_and_a_watch(
        Reply::list(
            "10",
            &[object("a", "uid-a", "5", 3), object("b", "uid-b", "6", 1)],
        ),
        Reply::list(
            "30",
            &[object("a", "uid-a2", "25", 7), object("b", "uid-b", "6", 1)],
        ),
        Reply::once(expired_line("Expired", 30)),
    )
    .await;
    let mut running = watch_scripted(&server);
    running
        .expect_events(&["ADDED default/a size=3", "ADDED default/b size=1"])
        .await;
    let gone = running.next_event(WITHIN).await;
    let reborn = running.next_event(WITHIN).await;
    assert_eq!(
        (summary(&gone), gone.object().unwrap().metadata.uid.as_str()),
        ("DELETED default/a size=3".to_string(), "uid-a")
    );
    assert_eq!(
        (
            summary(&reborn),
            reborn.object().unwrap().metadata.uid.as_str()
        ),
        ("ADDED default/a size=7".to_string(), "uid-a2")
    );
    let relist = running.relisted(WITHIN).await;
    assert_eq!(relist.changes, (1, 0, 1), "{relist:?}");
    running.watching_from(WITHIN, "30").await;
    assert!(
        running.take_available_events().is_empty(),
        "b did not change: nothing more"
    );
    running.stop().await;
}

/// The consumer drops its receiver while the list hangs (no answer at all): the watch task ends
/// at once, not when the client's request timeout finally fires.
#[tokio::test]
async fn dropping_the_receiver_during_a_hung_list_ends_the_task_promptly() {
    let server = scripted_server(|_, _| Reply::Silent).await;
    let running = watch_scripted(&server);
    let deadline = tokio::time::Instant::now() + WITHIN;
    while server.paths().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "no list request");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let postgres_operator::watch::Watcher { events, task, .. } = running.watcher;
    drop(events);
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the watch task ends promptly once its consumer is gone")
        .expect("no panic");
}

/// A BOOKMARK with an empty resourceVersion (a broken server) does not reset the RV: an empty RV
/// would ask for every object again as ADDED. The next watch starts from the last event's RV.
#[tokio::test]
async fn a_bookmark_without_a_resource_version_keeps_the_last_one() {
    let first = [
        event_line("ADDED", &object("a", "uid-a", "11", 3)),
        r#"{"type":"BOOKMARK","object":{"kind":"PostgresCluster","apiVersion":"workshop.example.com/v1","metadata":{"resourceVersion":""}}}"#.to_string(),
        "\n".to_string(),
    ]
    .concat();
    let server = empty_list_then("10", Reply::once(first)).await;
    let mut running = watch_scripted(&server);
    running.expect_event("ADDED default/a size=3").await;
    let resumed = running
        .notice(WITHIN, "resumed", |n| {
            matches!(n, WatchNotice::Resumed { .. })
        })
        .await;
    assert!(
        matches!(&resumed, WatchNotice::Resumed { resource_version, .. } if resource_version == "11"),
        "{resumed:?}"
    );
    running.stop().await;
}

/// A list without `metadata.resourceVersion` is retried rather than watched from RV "", which
/// would replay every listed object as a second ADDED.
#[tokio::test]
async fn a_list_without_a_resource_version_is_retried() {
    let server = scripted_server(move |index, path| match (index, is_watch(path)) {
        (0, false) => Reply::list("", &[object("a", "uid-a", "5", 3)]),
        (_, false) => Reply::list("10", &[object("a", "uid-a", "5", 3)]),
        _ => Reply::quiet(),
    })
    .await;
    let mut running = watch_scripted(&server);
    running.expect_event("ADDED default/a size=3").await;
    running.watching_from(WITHIN, "10").await;
    assert_eq!(running.retries_with("resourceVersion"), 1);
    assert!(
        server
            .paths()
            .iter()
            .all(|p| !p.contains("resourceVersion=&")),
        "never a watch from RV \"\": {:?}",
        server.paths()
    );
    running.stop().await;
}
