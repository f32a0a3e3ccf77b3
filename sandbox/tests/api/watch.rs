//! Watch semantics of the sandbox, as kube-apiserver has them: resume from a resourceVersion,
//! synthetic ADDED for RV 0, in-stream 410 Expired, bookmarks, timeouts, selectors, finalizers,
//! and the faults a watch client must survive.
//!
//! WORKSHOP.md, step 02 and "Set-up: the sandbox". Run: `cargo test -p sandbox --test api watch::`.

use std::time::Duration;

use sandbox::InjectedFault;
use serde_json::json;
use test_support::http_client::{
    cluster, pod, sandbox_and_http, sandbox_and_http_with, sandbox_with_crd, Http, Stream,
};

const PODS: &str = "/api/v1/namespaces/default/pods";
const SECRETS: &str = "/api/v1/namespaces/default/secrets";
/// A watch on `collection`, `query` after `watch=true` (`&timeoutSeconds=1`).
async fn watch_of(http: &Http, collection: &str, query: &str) -> Stream {
    http.stream(&format!("{collection}?watch=true{query}"))
        .await
}

/// The same from `resource_version` on.
async fn watch_from(http: &Http, collection: &str, resource_version: &str, query: &str) -> Stream {
    watch_of(
        http,
        collection,
        &format!("{query}&resourceVersion={resource_version}"),
    )
    .await
}

const WAIT: Duration = Duration::from_secs(5);

fn rv(value: &serde_json::Value) -> String {
    value["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .to_string()
}

/// A watch from a list's resourceVersion sees only what changed after it: no replay.
#[tokio::test]
async fn resuming_from_a_resource_version_replays_nothing_older() {
    let (_sandbox, http) = sandbox_and_http().await;
    http.create_named(SECRETS, "a").await;
    http.create_named(SECRETS, "b").await;
    let list = http.get(SECRETS).await.json();
    assert_eq!(list["kind"], "SecretList");
    assert_eq!(list["items"].as_array().map(Vec::len), Some(2));
    let list_rv = rv(&list);
    http.create_named(SECRETS, "c").await;

    let mut watch = watch_from(&http, SECRETS, &list_rv, "").await;
    assert_eq!(watch.status, 200);
    let first = watch.next_event_of("ADDED", WAIT).await;
    assert_eq!(first["object"]["metadata"]["name"], "c");
    assert_eq!(first["object"]["kind"], "Secret", "events carry kind");
    assert!(
        watch.is_silent_for(Duration::from_millis(200)).await,
        "a and b are not replayed"
    );
}

/// RV unset or "0": one synthetic ADDED per existing object, then live events.
#[tokio::test]
async fn resource_version_zero_starts_with_synthetic_added_events() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let path = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
    http.post(path, &cluster("one", 1)).await;
    http.post(path, &cluster("two", 2)).await;
    let mut watch = http
        .stream(&format!("{path}?watch=1&resourceVersion=0"))
        .await;
    let names: Vec<String> = [
        watch.next_event(WAIT).await.expect("first"),
        watch.next_event(WAIT).await.expect("second"),
    ]
    .iter()
    .map(|e| {
        assert_eq!(e["type"], "ADDED");
        e["object"]["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    })
    .collect();
    assert_eq!(names, ["one", "two"]);
    http.merge_patch(&format!("{path}/one"), &json!({"spec": {"size": 4}}))
        .await;
    let live = watch.next_event_of("MODIFIED", WAIT).await;
    assert_eq!(live["object"]["spec"]["size"], 4);
    assert_eq!(live["object"]["metadata"]["generation"], 2);
}

/// After compaction an old RV gets HTTP 200, then one ERROR event with a 410 Expired Status,
/// then the end of the stream.
#[tokio::test]
async fn compacted_history_gives_an_in_stream_410_expired() {
    let (sandbox, http) = sandbox_and_http().await;
    let old_rv = sandbox.resource_version();
    http.create_named(SECRETS, "a").await;
    sandbox.faults().compact_history();

    let mut watch = watch_from(&http, SECRETS, &old_rv, "").await;
    assert_eq!(watch.status, 200);
    let error = watch.next_event_of("ERROR", WAIT).await;
    assert_eq!(error["object"]["kind"], "Status");
    assert_eq!(error["object"]["code"], 410);
    assert_eq!(error["object"]["reason"], "Expired");
    let message = error["object"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with(&format!("too old resource version: {old_rv} (")),
        "{message}"
    );
    assert_eq!(
        watch.next_line(WAIT).await,
        None,
        "the stream ends after the error"
    );

    // The current RV is still fine to watch from.
    let current = sandbox.resource_version();
    let mut watch = watch_from(&http, SECRETS, &current, "").await;
    http.create_named(SECRETS, "b").await;
    let event = watch.next_event(WAIT).await.expect("live event");
    assert_eq!(event["object"]["metadata"]["name"], "b");
}

/// The history window is bounded: an RV that fell out of it is Expired too.
#[tokio::test]
async fn an_rv_older_than_the_history_window_expires() {
    let (sandbox, http) = sandbox_and_http_with(|options| options.history_window = 5).await;
    let start = sandbox.resource_version();
    for i in 0..10 {
        http.post(SECRETS, &json!({"metadata": {"name": format!("s{i}")}}))
            .await;
    }
    let mut watch = watch_from(&http, SECRETS, &start, "").await;
    let error = watch.next_event(WAIT).await.expect("ERROR");
    assert_eq!(error["object"]["reason"], "Expired");
}

/// allowWatchBookmarks=true: BOOKMARK events carrying only kind, apiVersion and the current RV.
#[tokio::test]
async fn bookmarks_arrive_with_the_current_resource_version() {
    let (sandbox, http) =
        sandbox_and_http_with(|options| options.bookmark_interval = Duration::from_millis(50))
            .await;
    http.create_named(SECRETS, "s").await;
    let current = sandbox.resource_version();
    let mut watch = watch_from(&http, SECRETS, &current, "&allowWatchBookmarks=true").await;
    let bookmark = watch.next_event_of("BOOKMARK", WAIT).await;
    assert_eq!(bookmark["object"]["kind"], "Secret");
    assert_eq!(bookmark["object"]["apiVersion"], "v1");
    assert_eq!(
        bookmark["object"]["metadata"]["resourceVersion"],
        current.as_str()
    );

    // Without the parameter there are none.
    let mut quiet = watch_from(&http, SECRETS, &current, "").await;
    assert!(quiet.is_silent_for(Duration::from_millis(300)).await);
}

/// timeoutSeconds ends the stream cleanly (no error event, a proper end of the chunked body).
#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    let (sandbox, http) = sandbox_and_http().await;
    let current = sandbox.resource_version();
    let started = std::time::Instant::now();
    let mut watch = watch_from(&http, PODS, &current, "&timeoutSeconds=1").await;
    assert_eq!(watch.next_line(Duration::from_secs(5)).await, None);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "ended too early"
    );
}

/// Label and field selectors filter a watch; a pod relabelled out of the selector arrives as
/// DELETED, one relabelled into it as ADDED (kube-apiserver does the same).
#[tokio::test]
async fn selectors_filter_and_leaving_the_selector_is_a_delete() {
    let (sandbox, http) = sandbox_and_http().await;
    let current = sandbox.resource_version();
    let mut by_label = watch_from(&http, PODS, &current, "&labelSelector=app%3Ddb").await;
    let mut by_name = watch_from(
        &http,
        PODS,
        &current,
        "&fieldSelector=metadata.name%3Dother",
    )
    .await;
    http.post(PODS, &pod("db-0", json!({"app": "db"}))).await;
    http.post(PODS, &pod("other", json!({"app": "web"}))).await;

    let added = by_label.next_event(WAIT).await.expect("ADDED");
    assert_eq!(
        (
            added["type"].as_str(),
            added["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("db-0"))
    );
    let named = by_name.next_event(WAIT).await.expect("ADDED");
    assert_eq!(named["object"]["metadata"]["name"], "other");

    // Skip the kubelet's Running update of db-0, then relabel it.
    by_label.next_event_of("MODIFIED", WAIT).await;
    let patched = http
        .merge_patch(
            &format!("{PODS}/db-0"),
            &json!({"metadata": {"labels": {"app": "gone"}}}),
        )
        .await;
    let gone = by_label.next_event_of("DELETED", WAIT).await;
    assert_eq!(
        gone["object"]["metadata"]["labels"]["app"], "db",
        "last matching state"
    );
    assert_eq!(
        gone["object"]["metadata"]["resourceVersion"],
        patched.json()["metadata"]["resourceVersion"]
    );

    http.merge_patch(
        &format!("{PODS}/other"),
        &json!({"metadata": {"labels": {"app": "db"}}}),
    )
    .await;
    let joined = by_label.next_event(WAIT).await.expect("ADDED");
    assert_eq!(
        (
            joined["type"].as_str(),
            joined["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("other"))
    );
}

/// DELETE of an object with finalizers: MODIFIED with deletionTimestamp; the DELETED event only
/// when an update empties the finalizers, carrying the last state with a new RV.
#[tokio::test]
async fn deleted_arrives_only_after_finalizers_are_cleared() {
    let (sandbox, http) = sandbox_with_crd().await;
    let path = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
    let mut body = cluster("held", 1);
    body["metadata"]["finalizers"] = json!(["workshop.example.com/cleanup"]);
    http.post(path, &body).await;
    let current = sandbox.resource_version();
    let mut watch = http
        .stream(&format!("{path}?watch=true&resourceVersion={current}"))
        .await;

    let deleted = http.delete(&format!("{path}/held")).await;
    assert_eq!(deleted.status, 200);
    assert!(deleted.json()["metadata"]["deletionTimestamp"].is_string());
    let marked = watch.next_event_of("MODIFIED", WAIT).await;
    assert!(marked["object"]["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(
        http.get(&format!("{path}/held")).await.status,
        200,
        "still there"
    );

    let more = http
        .merge_patch(&format!("{path}/held"), &json!({"metadata": {"finalizers": ["a.example.com/x", "workshop.example.com/cleanup"]}}))
        .await;
    assert_eq!(
        more.status,
        422,
        "no new finalizers once deleting: {}",
        more.text()
    );
    http.clear_finalizers(&format!("{path}/held")).await;
    let gone = watch.next_event_of("DELETED", WAIT).await;
    assert_ne!(
        gone["object"]["metadata"]["resourceVersion"],
        marked["object"]["metadata"]["resourceVersion"]
    );
    assert_eq!(http.get(&format!("{path}/held")).await.status, 404);
}

/// `kubectl get -w` asks for Tables: each event's object is a Table with one row.
#[tokio::test]
async fn table_watches_send_one_row_tables() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let path = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
    http.post(path, &cluster("db1", 3)).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
    let mut watch = http
        .stream_accept(&format!("{path}?watch=true&resourceVersion=0"), accept)
        .await;
    let event = watch.next_event_of("ADDED", WAIT).await;
    let table = &event["object"];
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["columnDefinitions"][0]["name"], "Name");
    assert_eq!(table["rows"][0]["cells"][0], "db1");
    assert_eq!(table["rows"][0]["cells"][1], 3);
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

/// Faults: end after N events, split output into 1-byte chunks, stall, end all watches now.
#[tokio::test]
async fn watch_faults_cut_split_stall_and_end_streams() {
    let (sandbox, http) = sandbox_and_http().await;
    for name in ["a", "b", "c"] {
        http.post(
            SECRETS,
            &json!({"metadata": {"name": name}, "stringData": {"k": "é"}}),
        )
        .await;
    }
    let faults = sandbox.faults();

    faults.end_watches_after_events(Some(2));
    let mut cut = watch_of(&http, SECRETS, "").await;
    assert!(cut.next_event(WAIT).await.is_some());
    assert!(cut.next_event(WAIT).await.is_some());
    assert_eq!(cut.next_line(WAIT).await, None, "ended after two events");
    faults.end_watches_after_events(None);

    faults.watch_chunk_size(Some(1));
    let mut split = watch_of(&http, SECRETS, "").await;
    let line = split
        .next_line(WAIT)
        .await
        .expect("a whole line, reassembled");
    assert!(line.contains("\"name\":\"a\""), "{line}");
    assert_eq!(split.frames, line.len() + 1, "one frame per byte");
    faults.watch_chunk_size(None);

    faults.watch_events_per_chunk(Some(3));
    let mut grouped = watch_of(&http, SECRETS, "").await;
    for _ in 0..3 {
        assert!(grouped.next_line(WAIT).await.is_some());
    }
    assert_eq!(grouped.frames, 1, "three events in one chunk");
    faults.watch_events_per_chunk(None);

    faults.stall_watches(true);
    let mut stalled = watch_of(&http, SECRETS, "").await;
    assert_eq!(stalled.status, 200);
    assert!(
        stalled.is_silent_for(Duration::from_millis(300)).await,
        "headers, then nothing"
    );
    faults.stall_watches(false);

    let current = sandbox.resource_version();
    let mut open = watch_from(&http, SECRETS, &current, "").await;
    faults.end_all_watches_now();
    assert_eq!(open.next_line(WAIT).await, None);
    drop(stalled);
}

/// fail_next answers matching requests with the injected fault, then goes back to normal.
#[tokio::test]
async fn injected_failures_have_proper_bodies_and_headers() {
    let (sandbox, http) = sandbox_and_http().await;
    let faults = sandbox.faults();
    faults.fail_next(
        1,
        "watch=true",
        InjectedFault::Status {
            code: 429,
            reason: "TooManyRequests".into(),
            retry_after_seconds: Some(3),
        },
    );
    let answer = http.get(&format!("{PODS}?watch=true")).await;
    assert_eq!(answer.status, 429);
    let logged = sandbox.requests().pop().expect("logged");
    assert_eq!(
        (logged.verb.as_str(), logged.resource.as_str(), logged.code),
        ("watch", "pods", 429)
    );
    assert_eq!(answer.header("retry-after").as_deref(), Some("3"));
    let status = answer.json();
    assert_eq!(status["reason"], "TooManyRequests");
    assert_eq!(status["details"]["retryAfterSeconds"], 3);

    faults.fail_next(
        1,
        "/pods",
        InjectedFault::Status {
            code: 410,
            reason: String::new(),
            retry_after_seconds: None,
        },
    );
    let gone = http.get(PODS).await;
    assert_eq!(
        (gone.status.as_u16(), gone.json()["reason"].as_str()),
        (410, Some("Expired"))
    );

    faults.fail_next(
        1,
        "/pods",
        InjectedFault::NonJson {
            code: 502,
            body: "<html>bad gateway</html>".into(),
        },
    );
    let html = http.get(PODS).await;
    assert_eq!(html.status, 502);
    assert_eq!(html.text(), "<html>bad gateway</html>");

    faults.fail_next(1, "/pods", InjectedFault::EmptyOk);
    let empty = http.get(PODS).await;
    assert_eq!(empty.status, 200);
    assert!(empty.body.is_empty());

    assert_eq!(
        http.get(PODS).await.json()["kind"],
        "PodList",
        "back to normal"
    );
}

/// A watcher that stops reading is ended instead of blocking writers (its queue is bounded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_behind_is_ended_not_waited_for() {
    let (sandbox, http) = sandbox_and_http_with(|options| options.watch_queue_capacity = 8).await;
    let current = sandbox.resource_version();
    let mut slow = watch_from(&http, SECRETS, &current, "").await;
    // ~24 MB of events: more than the socket buffers and the queues hold while nobody reads.
    let big = "x".repeat(200_000);
    let mut connection = http.connect().await;
    let started = std::time::Instant::now();
    for i in 0..120 {
        let answer = connection
            .post(
                SECRETS,
                &json!({"metadata": {"name": format!("s{i}"), "annotations": {"big": big}}}),
            )
            .await;
        assert_eq!(answer.status, 201);
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "writers were not blocked"
    );
    let mut received = 0;
    while slow.next_line(Duration::from_secs(10)).await.is_some() {
        received += 1;
    }
    assert!(
        received < 200,
        "the slow watcher was ended early (got {received} events)"
    );
}

/// go_offline: connections drop and the port refuses connections for the downtime, then the
/// same address serves again with the same objects and resourceVersion.
#[tokio::test]
async fn going_offline_drops_connections_then_serves_the_same_store() {
    let (sandbox, http) = sandbox_and_http().await;
    http.create_named(SECRETS, "kept").await;
    let before = sandbox.resource_version();
    let mut watch = watch_from(&http, SECRETS, &before, "").await;

    // The refusal must be seen while it lasts: 2 s, so that a poll a busy machine delays still
    // falls inside it.
    sandbox.faults().go_offline(Duration::from_secs(2));
    assert!(watch.ends_within(WAIT).await, "the open watch is cut");
    test_support::eventually(WAIT, "the port to refuse connections", || async {
        tokio::net::TcpStream::connect(sandbox.addr())
            .await
            .is_err()
            .then_some(())
    })
    .await;
    test_support::eventually(WAIT, "the port to listen again", || async {
        tokio::net::TcpStream::connect(sandbox.addr())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    assert_eq!(sandbox.resource_version(), before);
    assert_eq!(http.get(&format!("{SECRETS}/kept")).await.status, 200);
}

/// A watch from a resourceVersion the store has not reached (say, from before a restart) is
/// refused with 504 "Too large resource version", so the client relists.
#[tokio::test]
async fn a_resource_version_from_the_future_is_refused() {
    let (_sandbox, http) = sandbox_and_http().await;
    let answer = http
        .get(&format!("{PODS}?watch=true&resourceVersion=999999"))
        .await;
    assert_eq!(answer.status, 504);
    let status = answer.json();
    assert_eq!(status["reason"], "Timeout");
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
}

/// Streaming lists (`sendInitialEvents=true`): ADDED for every object, then a BOOKMARK
/// annotated `k8s.io/initial-events-end`, then live events.
#[tokio::test]
async fn send_initial_events_ends_with_an_annotated_bookmark() {
    let (sandbox, http) = sandbox_and_http().await;
    http.create_named(SECRETS, "a").await;
    let at = sandbox.resource_version();
    let mut watch = watch_of(
        &http,
        SECRETS,
        "&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    )
    .await;
    assert_eq!(
        watch.next_event(WAIT).await.expect("ADDED")["type"],
        "ADDED"
    );
    let end = watch.next_event_of("BOOKMARK", WAIT).await;
    assert_eq!(
        end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    assert_eq!(end["object"]["metadata"]["resourceVersion"], at.as_str());
}
