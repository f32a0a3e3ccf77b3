//! Step 02: list, then watch — a change stream that never loses its place.
//!
//! WORKSHOP.md, step 02. Layers, each testable alone:
//!
//! | file | turns | into |
//! |---|---|---|
//! | `stream.rs` | a watch request | its body's bytes as they arrive (`Client::stream`) |
//! | `frame.rs` | HTTP body chunks (split anywhere) | one JSON document per line |
//! | `event.rs` | a line | an [`Event`] (ADDED/MODIFIED/DELETED, its object in an `Arc`), or a BOOKMARK/ERROR for this loop |
//! | `pages.rs` | a collection | its objects, 500 per list request (`limit`/`continue`) |
//! | this file | a Kubernetes collection | a lossless stream of [`Event`]s for the consumer |
//!
//! plus `backoff.rs`, the pure retry timer, `notice.rs`, the notices among the events (and which
//! errors mean a relist), and `store.rs`, the `Arc` of each object the consumer was last handed.
//!
//! # The state machine
//!
//! `ListWatch::run` is a loop over two states; every transition is logged and most are
//! also told to the consumer as a [`WatchNotice`]:
//!
//! - **Listing** — we have no usable resourceVersion. GET the collection, page by page; its
//!   `metadata.resourceVersion` is the point the watch starts from. The first time, each page's
//!   objects are handed over as `Added` as soon as that page is in. A relist compares the items
//!   with what the consumer was last told and hands over the difference once the last page is in:
//!   `Added` for new objects, `Modified` when the resourceVersion moved, `Deleted` (with the last
//!   state the consumer saw) for objects that are gone. → **Watching(rv)**. A failed list →
//!   backoff → **Listing** (an expired `continue` token: at once, backing off only when it expires
//!   twice in a row); a first list that fails after handing over a page is finished by a
//!   relist (reason `FirstListBrokeOff`), so nothing is added twice.
//! - **Watching(rv)** — GET `?watch=true&resourceVersion=rv&allowWatchBookmarks=true&timeoutSeconds=T`.
//!   Every event and BOOKMARK moves `rv`. How the watch ends decides the next state:
//!   - clean end of stream (the server's `timeoutSeconds`, a load balancer) → **Watching(rv)**,
//!     no relist, no duplicates;
//!   - no bytes for `T` + a margin: the connection is presumed dead → **Watching(rv)**;
//!   - 410 (in-stream `ERROR` with reason Expired/Gone, or HTTP 410): `rv` fell out of the
//!     server's history → **Listing**;
//!   - 504 "Too large resource version" (in-stream or HTTP): `rv` is ahead of the server, which
//!     was restarted or restored from a backup; and 404: the collection itself is gone (its CRD
//!     deleted, or a new server without it) → backoff → **Listing**, whose diff reports what
//!     vanished as `Deleted`. Watching on from `rv` would wait for a future that never comes, or,
//!     once the new server's counter passes `rv`, resume silently with a ghost in `known`;
//!   - an oversize event or a line that does not decode: we missed a change → **Listing**;
//!   - anything else (refused, 5xx, 401/403, broken connection) → backoff → **Watching(rv)**.
//!
//!   A watch that ends within a second having delivered nothing counts as a failure too, so a
//!   server that closes at once is not hammered; so does a 410 at once for the very RV the last
//!   list returned (relisting cannot help there). A 410 for an RV held a while relists at once.
//!
//! # What the consumer receives
//!
//! One ordered channel of [`Event`]s: the changes, `Added`/`Modified`/`Deleted` with the object
//! in an `Arc`, and between them `Event::Notice`s that say what the watch is doing (listed,
//! watching, resumed, relisted, retrying). One channel, so a notice always arrives before the
//! events it explains ("relisted because 410" comes before the DELETED it found), which two
//! channels cannot promise. It is lossless: when the consumer is slow the watch waits
//! (backpressure) rather than drop anything.
//!
//! One type the whole way: a watch line is decoded into its `Event` (`event.rs`), the store keeps
//! a clone of its `Arc`, and the same value goes down the channel. Nothing is decoded twice.
//!
//! The 2017 workshop had an event channel and a separate error channel; an error channel nobody
//! drained blocked the watch, and the order between the two was lost.
//!
//! # What it costs, and where it simplifies
//!
//! To diff after a relist, the loop keeps the last state of every object it handed over (as
//! client-go's informer store does): memory grows with the collection, not with the stream. What
//! it keeps is the `Arc` it handed over, so the store and the consumer share one copy. The
//! list is read in pages of 500 (`pages.rs`), so the JSON held while listing is one page, however
//! large the collection; a `continue` token that expired halfway starts the list afresh. The first
//! list holds one page of typed objects besides; a relist holds the objects that changed until its
//! last page is in, so that a relist that fails halfway hands over nothing. What was measured to
//! tune it is at the end of this file.

pub mod backoff;
pub mod event;
pub mod frame;
pub mod notice;
pub mod pages;
pub mod store;
pub mod stream;

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{HasMetadata, ObjectMeta};
use crate::client::{Client, ClientError};
use crate::status::Status;

use backoff::{Backoff, BackoffPolicy, Xorshift};
pub use event::Event;
use event::{decode_line, Line};
use frame::{FrameError, LineFramer, DEFAULT_MAX_EVENT_BYTES};
use notice::relist_reason;
pub use notice::{RelistReason, ResumeReason, WatchNotice};
use pages::{encode_query_value, query_separator, PageError, Pager, PAGE_SIZE};
use store::Known;
pub use store::Store;
use stream::ByteStream;

/// What a watched type must offer: decodable, and carrying standard object metadata. Every such
/// type is one: `PostgresCluster` gets its `HasMetadata` in `api.rs`.
pub trait WatchedObject: HasMetadata + DeserializeOwned + Send + Sync + 'static {}

impl<T: HasMetadata + DeserializeOwned + Send + Sync + 'static> WatchedObject for T {}

/// Tuning. `Default` is what a real operator should use; tests shorten the times.
#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// `timeoutSeconds` is picked at random in this window for each watch, as client-go does, so
    /// many operators restarted together do not all reconnect in the same second.
    pub watch_timeout_min: Duration,
    pub watch_timeout_max: Duration,
    /// A watch that sends no byte for its timeout plus this margin is presumed dead.
    pub idle_margin: Duration,
    /// Longest single event accepted (see `frame.rs`).
    pub max_event_bytes: usize,
    pub backoff: BackoffPolicy,
    /// Events buffered between the watch and a slow consumer (see [`EVENT_BUFFER`]).
    pub event_buffer: usize,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            watch_timeout_min: Duration::from_secs(290),
            watch_timeout_max: Duration::from_secs(340),
            idle_margin: Duration::from_secs(30),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            backoff: BackoffPolicy::default(),
            event_buffer: EVENT_BUFFER,
        }
    }
}

/// A running list-then-watch: the receiving end and the task that feeds it.
pub struct Watcher<T> {
    /// Dropping it stops the watch.
    pub events: mpsc::Receiver<Event<T>>,
    /// Ends when `shutdown` is cancelled or `events` is dropped.
    pub task: JoinHandle<()>,
    /// Every object the consumer has been handed, as last handed over: read it instead of
    /// keeping a copy of your own (see `store.rs`).
    pub store: Store<T>,
}

/// Start listing and watching `collection_path` (e.g. [`crate::api::collection_path`]) in a task.
///
/// ```no_run
/// # async fn example(client: postgres_operator::client::Client) {
/// use postgres_operator::api::{collection_path, PostgresCluster};
/// use postgres_operator::watch::{list_then_watch, Event, WatchOptions};
/// let mut watcher = list_then_watch::<PostgresCluster>(
///     client,
///     collection_path("default"),
///     WatchOptions::default(),
///     postgres_operator::process::cancel_on_signal(),
/// );
/// while let Some(event) = watcher.events.recv().await {
///     match &event {
///         Event::Added(cluster) | Event::Modified(cluster) | Event::Deleted(cluster) => {
///             println!("{} {}", event.type_name(), cluster.key())
///         }
///         Event::Notice(notice) => println!("{notice:?}"),
///     }
/// }
/// # }
/// ```
pub fn list_then_watch<T: WatchedObject>(
    client: Client,
    collection_path: String,
    options: WatchOptions,
    shutdown: CancellationToken,
) -> Watcher<T> {
    let (sender, events) = mpsc::channel(options.event_buffer.max(1));
    let store = Store::new();
    let list_watch = ListWatch {
        client,
        collection_path,
        backoff: Backoff::new(options.backoff.clone()),
        random: Xorshift::seed_from_process(),
        options,
        events: sender,
        known: store.clone(),
        key: String::new(),
        list_number: 0,
        listed_resource_version: None,
        continue_expired: false,
    };
    Watcher {
        events,
        task: tokio::spawn(list_watch.run(shutdown)),
        store,
    }
}

/// The two states of the loop (see the module docs).
enum Phase {
    /// `why` is None for the first list, Some for every relist.
    Listing {
        why: Option<RelistReason>,
    },
    Watching {
        resource_version: String,
    },
}

/// How one watch request ended.
enum WatchEnd {
    /// Clean end of stream.
    Ended,
    /// No bytes within the idle timeout.
    Idle(Duration),
    /// Our resourceVersion or the collection is unusable, or we missed an event: relist.
    LostPlace(RelistReason),
    /// The request or the connection failed; try again from the same resourceVersion.
    Failed(ClientError),
    /// The server sent an ERROR event that a relist does not cure.
    ServerError(Box<Status>),
    /// The consumer dropped its receiver.
    ConsumerGone,
}

/// What a list found that the consumer has not been told.
struct Found<T> {
    /// `Added` and `Modified` events, in list order.
    changes: Vec<Event<T>>,
    /// Objects listed.
    listed: usize,
    added: usize,
    modified: usize,
}

/// The loop's state that survives across phases.
struct ListWatch<T> {
    client: Client,
    collection_path: String,
    options: WatchOptions,
    backoff: Backoff,
    random: Xorshift,
    events: mpsc::Sender<Event<T>>,
    /// What the consumer has been told, by `namespace/name`: the state a relist is compared with,
    /// and what a [`Store`] reads.
    known: Store<T>,
    /// Scratch space for `namespace/name` (see `remember`).
    key: String,
    /// Counts lists started, to mark the `known` entries each one saw.
    list_number: u64,
    /// The resourceVersion of the last successful list.
    listed_resource_version: Option<String>,
    /// The last list attempt broke off on an expired continue token.
    continue_expired: bool,
}

fn key_of(meta: &ObjectMeta) -> String {
    format!("{}/{}", meta.namespace, meta.name)
}

impl<T: WatchedObject> ListWatch<T> {
    /// The loop behind [`list_then_watch`]: it hands events to `events` and keeps `known`
    /// current. Returns when `shutdown` is cancelled or the receiver is dropped; it never gives
    /// up on its own.
    async fn run(mut self, shutdown: CancellationToken) {
        // A list or a watch request can hang until the client's request timeout (30 s); noticing
        // the consumer leave must not wait for it.
        let consumer = self.events.clone();
        let mut phase = Phase::Listing { why: None };
        loop {
            let step = async {
                match phase {
                    Phase::Listing { why } => self.list(why).await,
                    Phase::Watching { resource_version } => self.watch(resource_version).await,
                }
            };
            phase = tokio::select! {
                next = step => match next {
                    Some(next) => next,
                    None => return, // the consumer is gone
                },
                () = shutdown.cancelled() => {
                    tracing::info!(path = %self.collection_path, "watch stopped on shutdown");
                    return;
                }
                () = consumer.closed() => return,
            };
        }
    }

    /// Tell the consumer what the watch is doing. None: the consumer is gone.
    async fn notify(&self, notice: WatchNotice) -> Option<()> {
        self.events.send(Event::Notice(notice)).await.ok()
    }

    /// The watch ended with its place kept: tell the consumer why, and watch again from there.
    async fn resume(&self, resource_version: String, why: ResumeReason) -> Option<Phase> {
        self.notify(WatchNotice::Resumed {
            resource_version: resource_version.clone(),
            why,
        })
        .await?;
        Some(Phase::Watching { resource_version })
    }

    /// Hand one change to the consumer, remembering what it now believes: the store keeps a clone
    /// of the event's `Arc`, written before the send so a reader woken by the event finds it.
    /// None: consumer gone.
    async fn deliver(&mut self, event: Event<T>) -> Option<()> {
        match &event {
            Event::Added(object) | Event::Modified(object) => self.remember(object),
            Event::Deleted(object) => {
                self.known.lock().remove(&key_of(object.metadata()));
            }
            Event::Notice(_) => {}
        }
        self.events.send(event).await.ok()
    }

    /// Store `object` as the consumer's latest state of it. Every change passes here, so the
    /// common case, an update of a known object, builds no key (see the tuning notes below).
    fn remember(&mut self, object: &Arc<T>) {
        let meta = object.metadata();
        self.key.clear();
        self.key.push_str(&meta.namespace);
        self.key.push('/');
        self.key.push_str(&meta.name);
        let mut entries = self.known.lock();
        let known = Known {
            object: Arc::clone(object),
            seen_by_list: self.list_number,
        };
        match entries.get_mut(self.key.as_str()) {
            Some(entry) => *entry = known,
            None => {
                entries.insert(self.key.clone(), known);
            }
        }
    }

    /// Wait out a backoff delay after `error`, and at least `at_least` (the server's
    /// `retryAfterSeconds`) up to the backoff's maximum. None: the consumer left meanwhile.
    async fn back_off(&mut self, error: String, at_least: Duration) -> Option<()> {
        // Honour the server's wish, but a proxy or server asking for days must not park the
        // operator for good: never wait longer than our own longest backoff.
        let at_least = at_least.min(self.options.backoff.max);
        let delay = self.backoff.next_delay(Instant::now()).max(at_least);
        tracing::warn!(path = %self.collection_path, %error, retry_in_ms = delay.as_millis() as u64, "watch: retrying after failure");
        self.notify(WatchNotice::Retrying {
            after: delay,
            error,
        })
        .await?;
        tokio::select! {
            () = tokio::time::sleep(delay) => Some(()),
            () = self.events.closed() => None,
        }
    }

    /// Listing: read the collection page by page, compare each object with `known` (what the
    /// consumer was last told), hand over the difference, then Watching. The first list (`why`
    /// None) tells `Listed` from its first page and hands each page over as soon as it is in, so
    /// what is held is one page, not the collection, and the first event does not wait for the
    /// last page. A relist holds what changed until its last page is in, so that one that fails
    /// halfway hands over nothing; then it tells `Relisted`, with the counts, before the changes.
    async fn list(&mut self, why: Option<RelistReason>) -> Option<Phase> {
        self.list_number += 1;
        let mut pager = Pager::new(&self.collection_path, PAGE_SIZE);
        let mut found = Found {
            changes: Vec::new(),
            listed: 0,
            added: 0,
            modified: 0,
        };
        // The list's snapshot, from its first page: where the watch will start. Empty until then.
        let mut resource_version = String::new();
        loop {
            let page = match pager.next_page::<T>(&self.client).await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(error) => {
                    // A first list that fails after handing over a page leaves what it handed
                    // over handed over (and in `known`); the relist that finishes it compares
                    // against that, so no object is added twice and one gone meanwhile comes out
                    // as `Deleted`.
                    let why = match why {
                        None if !resource_version.is_empty() => {
                            Some(RelistReason::FirstListBrokeOff {
                                handed_over: found.added,
                                error: error.to_string(),
                            })
                        }
                        why => why,
                    };
                    return self.list_failed(error, why).await;
                }
            };
            if resource_version.is_empty() {
                resource_version = page.metadata.resource_version;
                if resource_version.is_empty() {
                    // A watch from RV "" would start with a synthetic ADDED for every object, all
                    // of which this list hands over already. Every real API server sets it.
                    let error = "the list carried no metadata.resourceVersion to watch from";
                    self.back_off(error.into(), Duration::ZERO).await?;
                    return Some(Phase::Listing { why });
                }
                if why.is_none() {
                    // Kubernetes calls `remainingItemCount` an estimate of the collection's size,
                    // and sets it only on a paged list without selectors that has more pages (API
                    // servers since 1.15).
                    let remaining = page.metadata.remaining_item_count;
                    let remaining =
                        remaining.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
                    let count = page.items.len().saturating_add(remaining);
                    tracing::info!(path = %self.collection_path, %resource_version, count, "listed first page");
                    self.notify(WatchNotice::Listed {
                        resource_version: resource_version.clone(),
                        count,
                    })
                    .await?;
                }
            }
            if why.is_some() {
                self.compare(page.items, &mut found);
                continue;
            }
            // `known` is empty on a first list: every object is new to the consumer, and there
            // is nothing to compare it with.
            for object in page.items {
                found.listed += 1;
                found.added += 1;
                self.deliver(Event::Added(Arc::new(object))).await?;
            }
        }
        self.listed_resource_version = Some(resource_version.clone());
        self.continue_expired = false;
        match why {
            None => {
                tracing::info!(path = %self.collection_path, %resource_version, handed_over = found.added, "first list complete");
            }
            Some(why) => self.relisted(why, &resource_version, found).await?,
        }
        Some(Phase::Watching { resource_version })
    }

    /// One page of a list, compared with `known`: what the consumer already has is marked as seen
    /// by this list, new objects go into `found` as `Added`, moved ones as `Modified`.
    fn compare(&self, page: Vec<T>, found: &mut Found<T>) {
        let mut entries = self.known.lock();
        for object in page {
            found.listed += 1;
            match entries.get_mut(&key_of(object.metadata())) {
                Some(known) if known.object.metadata().uid == object.metadata().uid => {
                    known.seen_by_list = self.list_number;
                    // Kubernetes: an object's resourceVersion changes on every write to it, so an
                    // equal one means the consumer already has this state.
                    if known.object.metadata().resource_version
                        != object.metadata().resource_version
                    {
                        found.modified += 1;
                        found.changes.push(Event::Modified(Arc::new(object)));
                    }
                }
                // New, or a new uid under a known name: the old one is left unmarked, so
                // `relisted` reports it deleted first.
                _ => {
                    found.added += 1;
                    found.changes.push(Event::Added(Arc::new(object)));
                }
            }
        }
    }

    /// A relist is complete. What vanished while we were away is only visible now (no page had
    /// it, or had a new uid under its name): tell `Relisted`, then hand over the last state the
    /// consumer was given of each vanished object (the stored `Arc` itself) as `Deleted`, then
    /// the changes.
    async fn relisted(
        &mut self,
        why: RelistReason,
        resource_version: &str,
        found: Found<T>,
    ) -> Option<()> {
        let vanished: Vec<Arc<T>> = self
            .known
            .lock()
            .values()
            .filter(|known| known.seen_by_list != self.list_number)
            .map(|known| Arc::clone(&known.object))
            .collect();
        let (added, modified, deleted) = (found.added, found.modified, vanished.len());
        tracing::warn!(path = %self.collection_path, %resource_version, %why, count = found.listed, added, modified, deleted, "relisted");
        self.notify(WatchNotice::Relisted {
            why,
            resource_version: resource_version.to_string(),
            added,
            modified,
            deleted,
        })
        .await?;
        for object in vanished {
            self.deliver(Event::Deleted(object)).await?;
        }
        for change in found.changes {
            self.deliver(change).await?;
        }
        Some(())
    }

    /// A list request failed: list again, as `why` says.
    async fn list_failed(&mut self, error: PageError, why: Option<RelistReason>) -> Option<Phase> {
        let expired = matches!(error, PageError::ContinueExpired { .. });
        let expired_again = std::mem::replace(&mut self.continue_expired, expired);
        match error {
            // The snapshot our pages came from was compacted away while we read them: the rest
            // cannot be had consistently. List afresh at once (client-go does one unpaged list
            // here; paging again keeps memory bounded). Twice in a row: back off first, the pages
            // are outliving the server's history.
            PageError::ContinueExpired { status } => {
                tracing::warn!(path = %self.collection_path, %status, "continue token expired; listing again from the start");
                if expired_again {
                    let error = format!("continue token expired again: {status}");
                    self.back_off(error, Duration::ZERO).await?;
                }
            }
            // 404 right after the CRD turned Established happens briefly; 5xx, refused, 403: all
            // the same here, try again later.
            PageError::Failed(error) => {
                self.back_off(error.to_string(), retry_after(&error))
                    .await?;
            }
        }
        Some(Phase::Listing { why })
    }

    /// Watching: one watch request, then decide where to go from how it ended.
    async fn watch(&mut self, mut resource_version: String) -> Option<Phase> {
        let started = Instant::now();
        let started_from = resource_version.clone();
        let mut delivered = 0usize;
        let end = self.watch_once(&mut resource_version, &mut delivered).await;
        // A server that accepts and closes at once must not be hammered (client-go, kube-rs).
        let ended_at_once = delivered == 0 && started.elapsed() < Duration::from_secs(1);
        match end {
            WatchEnd::ConsumerGone => None,
            WatchEnd::Ended if ended_at_once => {
                self.back_off(
                    "the watch ended at once without events".into(),
                    Duration::ZERO,
                )
                .await?;
                Some(Phase::Watching { resource_version })
            }
            WatchEnd::Ended => {
                let why = ResumeReason::EndOfStream { events: delivered };
                tracing::info!(path = %self.collection_path, %resource_version, %why, "watch resumed");
                self.resume(resource_version, why).await
            }
            WatchEnd::Idle(silent_for) => {
                let why = ResumeReason::Idle { silent_for };
                tracing::warn!(path = %self.collection_path, %resource_version, %why, "watch resumed");
                self.resume(resource_version, why).await
            }
            WatchEnd::LostPlace(why) => {
                match &why {
                    // Compaction expires an RV we have held for a while: relist at once. But a 410
                    // at once for the RV the last list just gave us means relisting gets the same
                    // answer (a server or proxy that expires every watch): back off, or we would
                    // hammer it.
                    RelistReason::Expired { status } => {
                        let fresh_from_list =
                            self.listed_resource_version.as_deref() == Some(started_from.as_str());
                        if ended_at_once && fresh_from_list {
                            self.back_off(
                                format!("watch from a fresh list expired at once: {status}"),
                                Duration::ZERO,
                            )
                            .await?;
                        }
                    }
                    // A server that just came back: its CRD may not be registered yet, or its
                    // watch cache may not have caught up. client-go also backs off before this
                    // relist; the list itself is a consistent read, never from our stale RV.
                    RelistReason::AheadOfServer { status }
                    | RelistReason::CollectionNotFound { status } => {
                        self.back_off(why.to_string(), status.retry_after().unwrap_or_default())
                            .await?;
                    }
                    RelistReason::EventTooLarge { .. } | RelistReason::Undecodable { .. } => {
                        if ended_at_once {
                            self.back_off(why.to_string(), Duration::ZERO).await?;
                        }
                    }
                    // Only a first list that broke off gives this reason, never a watch.
                    RelistReason::FirstListBrokeOff { .. } => {}
                }
                Some(Phase::Listing { why: Some(why) })
            }
            WatchEnd::Failed(error) => {
                let at_least = retry_after(&error);
                self.back_off(error.to_string(), at_least).await?;
                Some(Phase::Watching { resource_version })
            }
            WatchEnd::ServerError(status) => {
                let at_least = status.retry_after().unwrap_or_default();
                self.back_off(format!("watch error event: {status}"), at_least)
                    .await?;
                Some(Phase::Watching { resource_version })
            }
        }
    }

    /// Open one watch from `resource_version` and follow it to its end, advancing the RV and
    /// counting what was delivered as it goes.
    async fn watch_once(
        &mut self,
        resource_version: &mut String,
        delivered: &mut usize,
    ) -> WatchEnd {
        let timeout = self
            .random
            .between(
                self.options.watch_timeout_min,
                self.options.watch_timeout_max,
            )
            .as_secs()
            .max(1);
        // Never `pretty=true`: it turns the one-line-per-event stream into multi-line JSON.
        let path = format!(
            "{}{}watch=true&resourceVersion={}&allowWatchBookmarks=true&timeoutSeconds={timeout}",
            self.collection_path,
            query_separator(&self.collection_path),
            encode_query_value(resource_version)
        );
        let mut stream: ByteStream = match self.client.stream(&path).await {
            Ok(stream) => stream,
            // Some servers refuse a stale RV before the stream starts (HTTP 410 or 504), not
            // in-stream; a 404 can only come this way. Proxies may send no Status body.
            Err(error) => {
                let status = match (error.api_status(), error.status_code()) {
                    (Some(status), _) => status.clone(),
                    (None, Some(code)) => {
                        let reason = http::StatusCode::from_u16(code)
                            .ok()
                            .and_then(|code| code.canonical_reason())
                            .unwrap_or_default();
                        Status::failure(code, reason, error.to_string())
                    }
                    (None, None) => return WatchEnd::Failed(error),
                };
                return match relist_reason(Box::new(status)) {
                    Ok(why) => WatchEnd::LostPlace(why),
                    Err(_) => WatchEnd::Failed(error),
                };
            }
        };
        tracing::debug!(path = %self.collection_path, %resource_version, timeout, "watching");
        let watching = WatchNotice::Watching {
            resource_version: resource_version.clone(),
        };
        if self.notify(watching).await.is_none() {
            return WatchEnd::ConsumerGone;
        }

        let idle_limit = Duration::from_secs(timeout) + self.options.idle_margin;
        let mut framer = LineFramer::new(self.options.max_event_bytes);
        loop {
            let chunk = tokio::select! {
                chunk = tokio::time::timeout(idle_limit, stream.next_chunk()) => chunk,
                () = self.events.closed() => return WatchEnd::ConsumerGone,
            };
            let at_end = match chunk {
                Err(_elapsed) => return WatchEnd::Idle(idle_limit),
                Ok(None) => true,
                Ok(Some(Err(error))) => return WatchEnd::Failed(error),
                Ok(Some(Ok(bytes))) => {
                    if let Err(FrameError::EventTooLarge { limit }) = framer.push_bytes(bytes) {
                        tracing::warn!(path = %self.collection_path, limit, "watch event too large; will relist");
                        return WatchEnd::LostPlace(RelistReason::EventTooLarge { limit });
                    }
                    false
                }
            };
            loop {
                let line = if at_end {
                    framer.finish()
                } else {
                    framer.next_line()
                };
                let Some(line) = line else { break };
                if let Err(end) = self.handle_line(&line, resource_version, delivered).await {
                    return end;
                }
            }
            if at_end {
                return WatchEnd::Ended;
            }
        }
    }

    /// One line of the watch: advance the RV and hand the event over.
    async fn handle_line(
        &mut self,
        line: &[u8],
        resource_version: &mut String,
        delivered: &mut usize,
    ) -> Result<(), WatchEnd> {
        let event = match decode_line::<T>(line) {
            Ok(Line::Event(event)) => event,
            Ok(Line::Bookmark {
                resource_version: bookmark,
            }) => {
                // Only the RV is meaningful in a bookmark: we are up to date as of it. Never take
                // an empty one: a watch from RV "" would replay every object as ADDED.
                if !bookmark.is_empty() {
                    *resource_version = bookmark;
                }
                *delivered += 1;
                return Ok(());
            }
            Ok(Line::Error(status)) => {
                return Err(match relist_reason(Box::new(status)) {
                    Ok(why) => WatchEnd::LostPlace(why),
                    Err(status) => WatchEnd::ServerError(status),
                })
            }
            Err(error) => {
                tracing::warn!(path = %self.collection_path, %error, "undecodable watch event; will relist");
                let error = error.to_string();
                return Err(WatchEnd::LostPlace(RelistReason::Undecodable { error }));
            }
        };
        // Counted only for lines that move the RV: an ERROR is no progress, and a watch whose
        // only line is an immediate 410 must count as "ended at once" (see `watch`).
        *delivered += 1;
        if let Some(object) = event.object() {
            let object_version = &object.metadata().resource_version;
            if !object_version.is_empty() {
                resource_version.clone_from(object_version);
            }
        }
        self.deliver(event).await.ok_or(WatchEnd::ConsumerGone)
    }
}

/// How long the server asked us to wait (429/503 `Retry-After` in the Status details), if it did.
fn retry_after(error: &ClientError) -> Duration {
    error
        .api_status()
        .and_then(Status::retry_after)
        .unwrap_or_default()
}

// Tuning notes: what was measured to set the knobs above (watch-bench and benches/peers, a
// shared 2-core machine, 1,000 objects of ~2.1 KB).

/// [`WatchOptions::event_buffer`]'s default. Every event held is a whole typed object: 16 cost no
/// throughput against 256 and kept ~1.5 MB less resident, since a tokio task runs up to 128
/// steps before it yields.
pub const EVENT_BUFFER: usize = 16;

// `ListWatch::key`: every change looks its object up in the store by `namespace/name`; building
// that key into one reused `String` makes an update of a known object (most of a stream)
// allocate no key. Only a new object's key is allocated, once, as the map's own.
//
// The store keeps the `Arc` of each event (see `store.rs`), not the object's JSON as it once did
// (cut out of the watch line by its `{"type":"ADDED","object":` prefix, decoded again on every
// read and for a relist's `Deleted`). Measured on benches/peers' stream (200,000 events about
// 1,000 objects, ~2.1 KB each), JSON store → `Arc` store:
// - instructions per event (callgrind, 20,000 events, 16 KB chunks): 63,376 → 58,160 (−8 %);
// - events/s, the two builds interleaved on one feed on a loaded machine: 94.5k/56.3k/53.3k →
//   87.1k/60.1k/54.7k (16 KB chunks); 777/856/665 → 732/1072/1143 (1-byte chunks): no loss
//   beyond the noise;
// - resident memory: +0.7 KB per stored object (3.65 → 4.32 KB), 9.5 → 10.0 MB at 1,000 objects:
//   a typed object is an allocation per string and map, where the JSON was one buffer.

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_match_the_api_server() {
        let event: Event<u8> = Event::Deleted(Arc::new(1));
        assert_eq!(event.type_name(), "DELETED");
        assert_eq!(event.object(), Some(&1));
    }

    #[test]
    fn reasons_read_well_in_a_log_line() {
        let status = Status::failure(410, "Expired", "too old resource version: 1 (5)");
        assert_eq!(
            RelistReason::Expired {
                status: Box::new(status)
            }
            .to_string(),
            "resourceVersion too old (410 Expired: too old resource version: 1 (5))"
        );
        assert_eq!(
            ResumeReason::EndOfStream { events: 3 }.to_string(),
            "the server ended the watch after 3 events"
        );
    }

    #[test]
    fn odd_resource_versions_are_escaped_in_the_query() {
        assert_eq!(encode_query_value("12345"), "12345");
        assert_eq!(encode_query_value("a&b=c"), "a%26b%3Dc");
    }
}
