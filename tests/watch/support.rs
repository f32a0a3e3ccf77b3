//! Helpers for the watch tests: run `list_then_watch` against a server and read what the consumer
//! gets, with deadlines instead of sleeps; plus byte-level scripts for the shared `ScriptedServer`.
//!
//! WORKSHOP.md, step 02 ("Testing against faults").

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use postgres_operator::api::{collection_path, object_path, PostgresCluster};
use postgres_operator::client::{Client, Patch};
use postgres_operator::watch::backoff::BackoffPolicy;
use postgres_operator::watch::{
    list_then_watch, Event, RelistReason, WatchNotice, WatchOptions, Watcher,
};
use sandbox::{InjectedFault, RequestRecord, Sandbox, SandboxOptions};
use test_support::scripted_server;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a watch test waits for any one event or notice.
pub const WITHIN: Duration = Duration::from_secs(10);

/// Short timers for tests: watches of 5 s, a quick backoff.
pub fn test_options() -> WatchOptions {
    WatchOptions {
        watch_timeout_min: Duration::from_secs(5),
        watch_timeout_max: Duration::from_secs(5),
        idle_margin: Duration::from_secs(2),
        backoff: BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            ..BackoffPolicy::default()
        },
        ..WatchOptions::default()
    }
}

/// What a relist reported: a `WatchNotice::Relisted`, unpacked.
#[derive(Debug)]
pub struct Relist {
    pub why: RelistReason,
    pub resource_version: String,
    /// (added, modified, deleted): the changes it found and handed over as events.
    pub changes: (usize, usize, usize),
}

/// A running watch over `default/postgresclusters`, with everything it hands over recorded.
pub struct Running {
    pub watcher: Watcher<PostgresCluster>,
    stop: CancellationToken,
    /// Every notice seen so far, in order (read while waiting for events too).
    pub notices: Vec<WatchNotice>,
    /// Events read while looking for a notice, not yet taken by `next_event`.
    pending: VecDeque<Event<PostgresCluster>>,
}

/// A watch with [`test_options`] against a scripted server.
pub fn watch_scripted(server: &ScriptedServer) -> Running {
    start_watch(test_support::plain_client(&server.url), test_options())
}

pub fn start_watch(client: Client, options: WatchOptions) -> Running {
    let stop = CancellationToken::new();
    let watcher = list_then_watch::<PostgresCluster>(
        client,
        collection_path("default"),
        options,
        stop.clone(),
    );
    Running {
        watcher,
        stop,
        notices: Vec::new(),
        pending: VecDeque::new(),
    }
}

/// `ADDED default/a size=3`: an event in one comparable line.
pub fn summary(event: &Event<PostgresCluster>) -> String {
    let object = event.object().expect("a change, not a notice");
    format!(
        "{} {} size={}",
        event.type_name(),
        object.key(),
        object.spec.size
    )
}

impl Running {
    fn record(&mut self, event: Event<PostgresCluster>) {
        match event {
            Event::Notice(notice) => self.notices.push(notice),
            change => self.pending.push_back(change),
        }
    }

    /// Take in whatever has arrived, without waiting.
    fn drain(&mut self) {
        while let Ok(item) = self.watcher.events.try_recv() {
            self.record(item);
        }
    }

    /// Read one item, or None when `deadline` passes.
    async fn read_until(&mut self, deadline: Instant) -> Option<()> {
        let item = tokio::time::timeout_at(deadline, self.watcher.events.recv())
            .await
            .ok()?
            .expect("the watch task is running");
        self.record(item);
        Some(())
    }

    /// The next event, or panic after `within`.
    pub async fn next_event(&mut self, within: Duration) -> Event<PostgresCluster> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(event) = self.pending.pop_front() {
                return event;
            }
            if self.read_until(deadline).await.is_none() {
                panic!("no event within {within:?}; notices: {:#?}", self.notices);
            }
        }
    }

    /// Assert that the next event (within [`WITHIN`]) is `expected`, as its [`summary`] reads.
    pub async fn expect_event(&mut self, expected: &str) {
        assert_eq!(summary(&self.next_event(WITHIN).await), expected);
    }

    /// Assert that the next events (each within [`WITHIN`]) are `expected`, in this order.
    pub async fn expect_events(&mut self, expected: &[&str]) {
        assert_eq!(self.next_summaries(expected.len(), WITHIN).await, expected);
    }

    /// Assert that the next events are `expected` (written sorted), in any order: what a relist
    /// hands over comes in the order of its diff, not of the changes.
    pub async fn expect_events_in_any_order(&mut self, expected: &[&str]) {
        let mut events = self.next_summaries(expected.len(), WITHIN).await;
        events.sort();
        assert_eq!(events, expected);
    }

    /// The changes [`delete_resize_create`] made while the watch was down, as the relist hands
    /// them over (in any order): `gone`, of size `gone_size`, deleted; `resized` at size 5; `new`.
    pub async fn expect_deleted_resized_created(
        &mut self,
        (gone, gone_size): (&str, i64),
        resized: &str,
        new: &str,
    ) {
        let added = format!("ADDED default/{new} size=4");
        let deleted = format!("DELETED default/{gone} size={gone_size}");
        let modified = format!("MODIFIED default/{resized} size=5");
        self.expect_events_in_any_order(&[&added, &deleted, &modified])
            .await;
    }

    /// The next `count` events as summaries.
    pub async fn next_summaries(&mut self, count: usize, within: Duration) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..count {
            out.push(summary(&self.next_event(within).await));
        }
        out
    }

    /// Events already received, without waiting.
    pub fn take_available_events(&mut self) -> Vec<Event<PostgresCluster>> {
        self.drain();
        self.pending.drain(..).collect()
    }

    /// True if no event arrives for `quiet` (notices may).
    pub async fn no_event_for(&mut self, quiet: Duration) -> bool {
        let deadline = Instant::now() + quiet;
        while self.pending.is_empty() {
            if self.read_until(deadline).await.is_none() {
                return true;
            }
        }
        false
    }

    /// Assert that no event arrives for 300 ms: all that was due has come, none of it twice.
    pub async fn assert_nothing_twice(&mut self) {
        assert!(
            self.no_event_for(Duration::from_millis(300)).await,
            "nothing handed over twice"
        );
    }

    /// Wait for a notice matching `wanted` (earlier ones included), or panic after `within`.
    pub async fn notice(
        &mut self,
        within: Duration,
        what: &str,
        wanted: impl Fn(&WatchNotice) -> bool,
    ) -> WatchNotice {
        self.drain();
        let deadline = Instant::now() + within;
        let mut checked = 0;
        loop {
            if let Some(found) = self.notices[checked..].iter().find(|n| wanted(n)) {
                return found.clone();
            }
            checked = self.notices.len();
            if self.read_until(deadline).await.is_none() {
                panic!(
                    "no notice '{what}' within {within:?}; seen: {:#?}",
                    self.notices
                );
            }
        }
    }

    /// Wait until the first watch is open (after the list), so a fault injected next hits a
    /// live watch rather than the list.
    pub async fn until_watching(&mut self, within: Duration) {
        self.notice(within, "watching", |n| {
            matches!(n, WatchNotice::Watching { .. })
        })
        .await;
    }

    /// Wait for a watch opened from `resource_version`.
    pub async fn watching_from(&mut self, within: Duration, resource_version: &str) {
        let what = format!("watching from {resource_version}");
        self.notice(within, &what, |n| {
            matches!(n, WatchNotice::Watching { resource_version: rv } if rv == resource_version)
        })
        .await;
    }

    /// Wait for a retry whose error mentions `part`.
    pub async fn retrying_with(&mut self, within: Duration, part: &str) -> WatchNotice {
        let what = format!("retrying after {part}");
        self.notice(
            within,
            &what,
            |n| matches!(n, WatchNotice::Retrying { error, .. } if error.contains(part)),
        )
        .await
    }

    /// Wait for the (first) relist and return what it reported.
    pub async fn relisted(&mut self, within: Duration) -> Relist {
        let notice = self
            .notice(within, "relisted", |n| {
                matches!(n, WatchNotice::Relisted { .. })
            })
            .await;
        let WatchNotice::Relisted {
            why,
            resource_version,
            added,
            modified,
            deleted,
        } = notice
        else {
            unreachable!("matched above")
        };
        Relist {
            why,
            resource_version,
            changes: (added, modified, deleted),
        }
    }

    /// How many retries so far had an error mentioning `part`.
    pub fn retries_with(&mut self, part: &str) -> usize {
        self.count_notices(
            |n| matches!(n, WatchNotice::Retrying { error, .. } if error.contains(part)),
        )
    }

    /// Wait for the (first) list and return its notice.
    pub async fn listed(&mut self, within: Duration) -> WatchNotice {
        self.notice(within, "listed", |n| {
            matches!(n, WatchNotice::Listed { .. })
        })
        .await
    }

    pub fn count_notices(&mut self, wanted: impl Fn(&WatchNotice) -> bool) -> usize {
        self.drain();
        self.notices.iter().filter(|n| wanted(n)).count()
    }

    /// Send the shutdown signal and wait for the task to end (within 5 s).
    pub async fn stop(mut self) {
        self.stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), &mut self.watcher.task)
            .await
            .expect("the watch task stops promptly on shutdown")
            .expect("the watch task did not panic");
    }
}

/// A sandbox with the CRD registered, a client for it, and a watch over its clusters with
/// `options` that has listed and opened its first watch, so a fault injected next hits a live
/// watch rather than the list.
pub async fn watching_a_sandbox(options: WatchOptions) -> (Sandbox, Client, Running) {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let mut running = start_watch(client.clone(), options);
    running.until_watching(WITHIN).await;
    (sandbox, client, running)
}

/// A Status answer the sandbox gives instead of serving a request (see [`fail_next_watches`]).
pub fn injected(code: u16, reason: &str, retry_after_seconds: Option<u32>) -> InjectedFault {
    InjectedFault::Status {
        code,
        reason: reason.into(),
        retry_after_seconds,
    }
}

/// An outage of the watch: the next `times` watch requests get `fault`, and the open watches
/// end now, so the watch's next request is the first of them.
pub fn fail_next_watches(sandbox: &Sandbox, times: usize, fault: InjectedFault) {
    sandbox.faults().fail_next(times, "watch=true", fault);
    sandbox.faults().end_all_watches_now();
}

/// The sandbox's requests for PostgresClusters with this verb (`list`, `watch`), oldest first.
pub fn cluster_requests(sandbox: &Sandbox, verb: &str) -> Vec<RequestRecord> {
    sandbox
        .requests()
        .into_iter()
        .filter(|r| r.verb == verb && r.resource == "postgresclusters")
        .collect()
}

/// What changes while a watch is down, for the relist to report: `gone` is deleted, `resized`
/// grows to size 5, and `new` is created with size 4.
pub async fn delete_resize_create(client: &Client, gone: &str, resized: &str, new: &str) {
    let _: serde_json::Value = client
        .delete(&object_path("default", gone))
        .await
        .expect("delete");
    let _: serde_json::Value = client
        .patch(
            &object_path("default", resized),
            &Patch::Merge(serde_json::json!({"spec": {"size": 5}})),
        )
        .await
        .expect("resize");
    create_cluster(client, new, 4).await;
}

/// Create `default/name` with `size`, through the library's client.
pub async fn create_cluster(client: &Client, name: &str, size: i64) -> PostgresCluster {
    client
        .create(&collection_path("default"), &cluster_json(name, size))
        .await
        .expect("create PostgresCluster")
}

pub fn cluster_json(name: &str, size: i64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": name, "annotations": {"note": "café 日本"}},
        "spec": {"size": size, "version": "16"}
    })
}

// ---------------------------------------------------------------------------------------------
// Byte-level scripts for the shared `ScriptedServer` (test-support): a test decides every chunk.
// ---------------------------------------------------------------------------------------------

pub use test_support::ScriptedServer;

/// What one request gets.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A complete JSON body with Content-Length.
    Json { code: u16, body: String },
    /// Chunked transfer: each element is one HTTP chunk; then the terminating chunk, unless
    /// `hold_open` (then the connection stays silent until the server is dropped).
    Chunks { chunks: Vec<Bytes>, hold_open: bool },
    /// Read the request and never answer (a hung server or proxy).
    Silent,
}

impl Reply {
    /// 200 with a list body (see [`list_body`]).
    pub fn list(rv: &str, items: &[serde_json::Value]) -> Reply {
        Reply::Json {
            code: 200,
            body: list_body(rv, items),
        }
    }

    /// A watch that sends `text` in one chunk and then stays open and silent.
    pub fn open_with(text: impl Into<Bytes>) -> Reply {
        Reply::Chunks {
            chunks: vec![text.into()],
            hold_open: true,
        }
    }

    /// A watch that sends nothing and stays open: a quiet one.
    pub fn quiet() -> Reply {
        Reply::Chunks {
            chunks: vec![],
            hold_open: true,
        }
    }

    /// A watch that ends at once, without a byte.
    pub fn ended() -> Reply {
        Reply::Chunks {
            chunks: vec![],
            hold_open: false,
        }
    }

    /// A watch that sends `text` in one chunk and then ends.
    pub fn once(text: impl Into<Bytes>) -> Reply {
        Reply::Chunks {
            chunks: vec![text.into()],
            hold_open: false,
        }
    }

    /// `text` cut into chunks of `size` bytes (the last one shorter), then the end of the
    /// stream, or silence if `hold_open`.
    pub fn in_chunks(text: &str, size: usize, hold_open: bool) -> Reply {
        let chunks = text
            .as_bytes()
            .chunks(size)
            .map(Bytes::copy_from_slice)
            .collect();
        Reply::Chunks { chunks, hold_open }
    }

    /// A whole JSON body with this code (a Status, usually).
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Json {
            code,
            body: body.to_string(),
        }
    }
}

/// True if the path is a watch request (`watch=true`), not a list.
pub fn is_watch(path: &str) -> bool {
    path.contains("watch=true")
}

/// A [`scripted_server`] for one watch's life: the first list gets `first_list`, every later
/// list `relist`, the first watch (the second request) `first_watch`, and every later watch
/// stays open and quiet.
pub async fn lists_and_a_watch(
    first_list: Reply,
    relist: Reply,
    first_watch: Reply,
) -> ScriptedServer {
    scripted_server(move |index, path| match (index, is_watch(path)) {
        (0, false) => first_list.clone(),
        (_, false) => relist.clone(),
        (1, true) => first_watch.clone(),
        _ => Reply::quiet(),
    })
    .await
}

/// A Kubernetes Failure Status as JSON text, as the API server writes it.
pub fn status_json(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    })
    .to_string()
}

/// An in-stream `ERROR` event line carrying `status` (a Status as JSON text).
pub fn error_line(status: &str) -> String {
    format!("{{\"type\":\"ERROR\",\"object\":{status}}}\n")
}

/// A [`ScriptedServer`] where `script(index, path)` decides the answer to the index-th request
/// (from 0). Every answer closes its connection, so each request arrives on a new one.
pub async fn scripted_server(
    script: impl Fn(usize, &str) -> Reply + Send + Sync + 'static,
) -> ScriptedServer {
    ScriptedServer::http(move |request, index| {
        let mut response = match script(index, &request.path) {
            Reply::Json { code, body } => scripted_server::raw(code, "application/json", &body),
            Reply::Chunks { chunks, hold_open } => scripted_server::chunked(chunks, hold_open),
            Reply::Silent => return scripted_server::never(),
        };
        response.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
        scripted_server::ready(response)
    })
    .await
}

/// A list body: `items` as JSON objects, current at `rv`.
pub fn list_body(rv: &str, items: &[serde_json::Value]) -> String {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresClusterList",
        "metadata": {"resourceVersion": rv}, "items": items
    })
    .to_string()
}

/// One page of a paged list: `continue` is `token` (empty on the last page), with the server's
/// `remainingItemCount` when given.
pub fn list_page(
    rv: &str,
    token: &str,
    remaining: Option<usize>,
    items: &[serde_json::Value],
) -> String {
    let mut metadata = serde_json::json!({"resourceVersion": rv, "continue": token});
    if let Some(remaining) = remaining {
        metadata["remainingItemCount"] = serde_json::json!(remaining);
    }
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresClusterList",
        "metadata": metadata, "items": items
    })
    .to_string()
}

/// A PostgresCluster as the server would send it.
pub fn object(name: &str, uid: &str, rv: &str, size: i64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv,
                     "labels": {"team": "cafe"}, "annotations": {"note": "café — 日本"}},
        "spec": {"size": size, "version": "16"}
    })
}

/// One watch line, `{"type":..,"object":..}\n`, `type` first as the API server writes it.
pub fn event_line(event_type: &str, object: &serde_json::Value) -> String {
    format!("{{\"type\":\"{event_type}\",\"object\":{object}}}\n")
}
