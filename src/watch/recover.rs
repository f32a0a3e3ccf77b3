//! What the watch does when a request fails or ends early: wait (a growing, jittered back-off,
//! at least what the server asked), and resume from the same resourceVersion or list again.
//! Support: a learner may skip it on first read — `mod.rs` is the path when nothing goes wrong;
//! this file is each way off it, the module docs' table in code, and the relist's diff against
//! what the consumer was told (`compare`, `relisted`).
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place").

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::notice::relist_reason;
use super::pages::PageError;
use super::{
    key_of, Event, ListWatch, Phase, RelistReason, ResumeReason, WatchEnd, WatchNotice,
    WatchedObject,
};
use crate::client::ClientError;
use crate::status::Status;

/// How the watch that ended began: what `recover` weighs besides how it ended.
pub(super) struct Ended {
    /// The resourceVersion it started from.
    pub started_from: String,
    /// It ended within a second having delivered nothing.
    pub at_once: bool,
}

/// What a list found that the consumer has not been told.
pub(super) struct Found<T> {
    /// `Added` and `Modified` events, in list order.
    pub changes: Vec<Event<T>>,
    /// Objects listed.
    pub listed: usize,
    pub added: usize,
    pub modified: usize,
}

impl<T: WatchedObject> ListWatch<T> {
    /// One page of a list, compared with `known`: what the consumer already has is marked as seen
    /// by this list, new objects go into `found` as `Added`, moved ones as `Modified`.
    pub(super) fn compare(&self, page: Vec<T>, found: &mut Found<T>) {
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
    pub(super) async fn relisted(
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

    /// Wait out a backoff delay after `error`, and at least `at_least` (the server's
    /// `retryAfterSeconds`) up to the backoff's maximum. None: the consumer left meanwhile.
    pub(super) async fn back_off(&mut self, error: String, at_least: Duration) -> Option<()> {
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

    /// A list came back without a resourceVersion: a watch from RV "" would start with a
    /// synthetic ADDED for every object, all of which this list hands over already. Every real
    /// API server sets it; back off and list again.
    pub(super) async fn list_without_resource_version(
        &mut self,
        why: Option<RelistReason>,
    ) -> Option<Phase> {
        let error = "the list carried no metadata.resourceVersion to watch from";
        self.back_off(error.into(), Duration::ZERO).await?;
        Some(Phase::Listing { why })
    }

    /// A list request failed: list again, as `why` says.
    /// `handed_over`: Some when a first list broke off after handing over that many objects.
    pub(super) async fn list_failed(
        &mut self,
        error: PageError,
        why: Option<RelistReason>,
        handed_over: Option<usize>,
    ) -> Option<Phase> {
        // A first list that fails after handing over a page leaves what it handed over handed
        // over (and in `known`); the relist that finishes it compares against that, so no object
        // is added twice and one gone meanwhile comes out as `Deleted`.
        let why = match handed_over {
            Some(handed_over) => Some(RelistReason::FirstListBrokeOff {
                handed_over,
                error: error.to_string(),
            }),
            None => why,
        };
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

    /// A watch ended other than cleanly: resume from `resource_version` after a pause, or
    /// relist, as `end` says (the module docs' table).
    pub(super) async fn recover(
        &mut self,
        end: WatchEnd,
        resource_version: String,
        ended: Ended,
    ) -> Option<Phase> {
        match end {
            WatchEnd::ConsumerGone => None,
            WatchEnd::Ended => {
                self.back_off(
                    "the watch ended at once without events".into(),
                    Duration::ZERO,
                )
                .await?;
                Some(Phase::Watching { resource_version })
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
                        let fresh_from_list = self.listed_resource_version.as_deref()
                            == Some(ended.started_from.as_str());
                        if ended.at_once && fresh_from_list {
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
                        if ended.at_once {
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
}

/// How a watch request that the server refused before its stream started ends. Some servers
/// refuse a stale RV that way (HTTP 410 or 504), not in-stream; a 404 can only come this way.
/// Proxies may send no Status body.
pub(super) fn refused(error: ClientError) -> WatchEnd {
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
    match relist_reason(Box::new(status)) {
        Ok(why) => WatchEnd::LostPlace(why),
        Err(_) => WatchEnd::Failed(error),
    }
}

/// How long the server asked us to wait (429/503 `Retry-After` in the Status details), if it did.
fn retry_after(error: &ClientError) -> Duration {
    error
        .api_status()
        .and_then(Status::retry_after)
        .unwrap_or_default()
}
