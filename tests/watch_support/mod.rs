//! Helpers for the watch tests: run `list_then_watch` against a server and read what the consumer
//! gets, with deadlines instead of sleeps; plus byte-level scripts for the shared `ScriptedServer`.
//!
//! WORKSHOP.md, step 02 ("Testing against faults").
#![allow(dead_code)] // each test file uses a different part

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;
use postgres_operator::api::{collection_path, PostgresCluster};
use postgres_operator::client::Client;
use postgres_operator::watch::backoff::BackoffPolicy;
use postgres_operator::watch::{list_then_watch, Event, WatchNotice, WatchOptions, Watcher};
use test_support::scripted_server;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// A running watch over `default/postgresclusters`, with everything it hands over recorded.
pub struct Running {
    pub watcher: Watcher<PostgresCluster>,
    stop: CancellationToken,
    /// Every notice seen so far, in order (read while waiting for events too).
    pub notices: Vec<WatchNotice>,
    /// Events read while looking for a notice, not yet taken by `next_event`.
    pending: VecDeque<Event<PostgresCluster>>,
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
