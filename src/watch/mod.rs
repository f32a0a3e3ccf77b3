//! Step 02: list, then watch — a change stream that never loses its place.
//!
//! WORKSHOP.md, step 02. Layers, each testable alone:
//!
//! | file | turns | into |
//! |---|---|---|
//! | `frame.rs` | a watch request | its body's bytes as they arrive (`Client::stream`), then one JSON document per line |
//! | `event.rs` | a line | an [`Event`] (ADDED/MODIFIED/DELETED, its object in an `Arc`), or a BOOKMARK/ERROR for this loop |
//! | `pages.rs` | a collection | its objects, 500 per list request (`limit`/`continue`) |
//! | this file | a Kubernetes collection | a lossless stream of [`Event`]s for the consumer |
//!
//! plus, as support: `recover.rs`, each way off the clean path (back off, resume, relist);
//! `undecodable.rs`, the slow path for a line that is not a plain event; `options.rs`, the knobs
//! and what was measured to set them; `backoff.rs`, the pure retry timer; `notice.rs`, the notices
//! among the events (and which errors mean a relist); and `store.rs`, the `Arc` of each object the
//! consumer was last handed.
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
//! tune it is in `options.rs`.

pub mod backoff;
pub mod event;
pub mod frame;
pub mod notice;
mod options;
pub mod pages;
mod recover;
pub mod store;
mod undecodable;

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{HasMetadata, ObjectMeta, Text};
use crate::client::{Client, ClientError};
use crate::status::Status;

use backoff::{Backoff, Xorshift};
pub use event::Event;
use event::{decode_line, Line};
use frame::{ByteStream, FrameError, LineFramer};
use notice::relist_reason;
pub use notice::{RelistReason, ResumeReason, WatchNotice};
pub use options::{WatchOptions, EVENT_BUFFER};
use pages::{encode_query_value, query_separator, Pager, PAGE_SIZE};
use recover::{refused, Ended, Found};
use store::Known;
pub use store::Store;

/// What a watched type must offer: decodable, and carrying standard object metadata. Every such
/// type is one: `PostgresCluster` gets its `HasMetadata` in `api.rs`.
pub trait WatchedObject: HasMetadata + DeserializeOwned + Send + Sync + 'static {}

impl<T: HasMetadata + DeserializeOwned + Send + Sync + 'static> WatchedObject for T {}

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
    /// Counts lists started, to mark the `known` entries each one saw.
    list_number: u64,
    /// The resourceVersion of the last successful list.
    listed_resource_version: Option<String>,
    /// The last list attempt broke off on an expired continue token.
    continue_expired: bool,
}

fn key_of(meta: &ObjectMeta) -> Text {
    format!("{}/{}", meta.namespace, meta.name).into()
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
            Event::Added(object) | Event::Modified(object) => {
                let known = Known {
                    object: Arc::clone(object),
                    seen_by_list: self.list_number,
                };
                self.known.lock().insert(key_of(object.metadata()), known);
            }
            Event::Deleted(object) => {
                self.known.lock().remove(&key_of(object.metadata()));
            }
            Event::Notice(_) => {}
        }
        self.events.send(event).await.ok()
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
        // ANCHOR: path
        loop {
            let page = match pager.next_page::<T>(&self.client).await {
                Ok(Some(page)) => page,
                Ok(None) => break,
                Err(error) => {
                    // How many objects a first list had handed over before it broke off.
                    let handed_over =
                        (why.is_none() && !resource_version.is_empty()).then_some(found.added);
                    return self.list_failed(error, why, handed_over).await;
                }
            };
            if resource_version.is_empty() {
                resource_version = page.metadata.resource_version;
                if resource_version.is_empty() {
                    return self.list_without_resource_version(why).await;
                }
                if why.is_none() {
                    let (items, remaining) = (page.items.len(), page.metadata.remaining_item_count);
                    let path = &self.collection_path;
                    let listed = WatchNotice::listed(&resource_version, items, remaining, path);
                    self.notify(listed).await?;
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

    /// Watching: one watch request, then decide where to go from how it ended. A clean end is
    /// the normal path: watch again from where this one stopped. Every other end is `recover`'s.
    async fn watch(&mut self, mut resource_version: String) -> Option<Phase> {
        let started = Instant::now();
        let started_from = resource_version.clone();
        let mut delivered = 0usize;
        let end = self.watch_once(&mut resource_version, &mut delivered).await;
        // A server that accepts and closes at once must not be hammered (client-go, kube-rs).
        let ended_at_once = delivered == 0 && started.elapsed() < Duration::from_secs(1);
        match end {
            WatchEnd::ConsumerGone => None,
            WatchEnd::Ended if !ended_at_once => {
                let why = ResumeReason::EndOfStream { events: delivered };
                tracing::info!(path = %self.collection_path, %resource_version, %why, "watch resumed");
                self.resume(resource_version, why).await
            }
            end => {
                let ended = Ended {
                    started_from,
                    at_once: ended_at_once,
                };
                self.recover(end, resource_version, ended).await
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
            Err(error) => return refused(error),
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
            let bytes = match chunk {
                Err(_elapsed) => return WatchEnd::Idle(idle_limit),
                Ok(None) => break,
                Ok(Some(Err(error))) => return WatchEnd::Failed(error),
                Ok(Some(Ok(bytes))) => bytes,
            };
            let lines = match framer.cut(bytes) {
                Ok(lines) => lines,
                Err(FrameError::EventTooLarge { limit }) => {
                    tracing::warn!(path = %self.collection_path, limit, "watch event too large; will relist");
                    return WatchEnd::LostPlace(RelistReason::EventTooLarge { limit });
                }
            };
            for line in lines {
                if let Err(end) = self.handle_line(&line, resource_version, delivered).await {
                    return end;
                }
            }
        }
        // A server may close right after its last event, without the final `\n`.
        while let Some(line) = framer.finish() {
            if let Err(end) = self.handle_line(&line, resource_version, delivered).await {
                return end;
            }
        }
        WatchEnd::Ended
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
    // ANCHOR_END: path
}

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
