//! The sandbox under load: 10,000 objects and 100 concurrent watches; every watcher sees every
//! event, in order.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test api scale:: -- --nocapture`
//! (prints the timings). Sizes are chosen to finish in seconds in a debug build on 2 cores:
//! 10,000 creates, then 1,000 updates fanned out to 100 watchers (100,000 deliveries), plus one
//! watch from RV 0 that receives all 10,000 objects as synthetic ADDED events.

use std::time::{Duration, Instant};

use serde_json::json;
use test_support::http_client::{sandbox_and_http_with, Http};

const OBJECTS: usize = 10_000;
const UPDATES: usize = 1_000;
const WATCHERS: usize = 100;
const WRITERS: usize = 4;
const SECRETS: &str = "/api/v1/namespaces/default/secrets";

/// The `"resourceVersion":"N"` of an event line, without parsing the whole JSON.
fn resource_version(line: &str) -> u64 {
    let key = "\"resourceVersion\":\"";
    let start = line
        .find(key)
        .map(|i| i + key.len())
        .expect("resourceVersion in event");
    let end = line[start..].find('"').expect("closing quote") + start;
    line[start..end].parse().expect("numeric RV")
}

/// Run `count` requests spread over `WRITERS` connections; `body(i)` builds request i.
async fn write_all(
    http: &Http,
    count: usize,
    make: fn(&Http, usize) -> (String, serde_json::Value, bool),
) {
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let http = http.clone();
        writers.push(tokio::spawn(async move {
            let mut connection = http.connect().await;
            for i in (writer..count).step_by(WRITERS) {
                let (path, body, create) = make(&http, i);
                let answer = if create {
                    connection.post(&path, &body).await
                } else {
                    connection.merge_patch(&path, &body).await
                };
                assert!(answer.status.is_success(), "{}", answer.text());
            }
        }));
    }
    for writer in writers {
        writer.await.expect("writer");
    }
}

/// 10,000 objects, 100 watches from the list's RV, 1,000 updates by 4 writers: every watcher
/// receives all 1,000 MODIFIED events with strictly increasing resourceVersions; a watch from
/// RV 0 receives all 10,000 objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_watcher_sees_every_event_in_order() {
    let (sandbox, http) =
        sandbox_and_http_with(|options| options.watch_queue_capacity = OBJECTS + 10).await;

    let started = Instant::now();
    write_all(&http, OBJECTS, |_, i| {
        (
            SECRETS.to_string(),
            json!({"metadata": {"name": format!("s{i}")}}),
            true,
        )
    })
    .await;
    let created = started.elapsed();
    let list = http.get(SECRETS).await.json();
    assert_eq!(list["items"].as_array().map(Vec::len), Some(OBJECTS));
    let list_rv = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list RV")
        .to_string();

    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let mut stream = http
            .stream(&format!("{SECRETS}?watch=true&resourceVersion={list_rv}"))
            .await;
        assert_eq!(stream.status, 200);
        watchers.push(tokio::spawn(async move {
            let mut last = 0u64;
            for _ in 0..UPDATES {
                let line = stream
                    .next_line(Duration::from_secs(60))
                    .await
                    .expect("watch open");
                assert!(line.starts_with("{\"type\":\"MODIFIED\""), "{line}");
                let rv = resource_version(&line);
                assert!(rv > last, "out of order: {rv} after {last}");
                last = rv;
            }
            last
        }));
    }
    let mut everything = http
        .stream(&format!("{SECRETS}?watch=true&resourceVersion=0"))
        .await;

    let updating = Instant::now();
    write_all(&http, UPDATES, |_, i| {
        (
            format!("{SECRETS}/s{}", i * 7 % OBJECTS),
            json!({"metadata": {"labels": {"round": i.to_string()}}}),
            false,
        )
    })
    .await;
    let final_rv: u64 = sandbox.resource_version().parse().expect("numeric");
    for watcher in watchers {
        assert_eq!(
            watcher.await.expect("watcher"),
            final_rv,
            "ended on the last write"
        );
    }
    let delivered = updating.elapsed();

    let mut names = std::collections::HashSet::new();
    for _ in 0..OBJECTS {
        let line = everything
            .next_line(Duration::from_secs(30))
            .await
            .expect("event");
        assert!(
            line.starts_with("{\"type\":\"ADDED\""),
            "{}",
            &line[..line.len().min(300)]
        );
        names.insert(
            line.split("\"name\":\"")
                .nth(1)
                .map(|r| r[..r.find('"').unwrap_or(0)].to_string()),
        );
    }
    assert_eq!(names.len(), OBJECTS, "every object exactly once");
    eprintln!(
        "{OBJECTS} creates in {created:?}; {UPDATES} updates x {WATCHERS} watchers = {} deliveries in {delivered:?}; total {:?}",
        UPDATES * WATCHERS,
        started.elapsed()
    );
}
