//! Support: skip it on first read — the notices only narrate; the changes are the `Event`s of
//! `event.rs`.
//!
//! What the watch tells its consumer besides the events — listed, watching, resumed, relisted,
//! retrying, and why — and which errors mean its place is lost, so that only a relist helps.
//! WORKSHOP.md, step 02 ("What the consumer gets: one ordered channel").

use std::fmt;
use std::time::Duration;

use crate::status::Status;

/// What the watch is doing, for logs and for the curious consumer. Sent on the same lossless
/// channel as the changes, before the events it explains.
#[derive(Clone, Debug, PartialEq)]
pub enum WatchNotice {
    /// The first list's first page is in: the list is current as of `resource_version`, where the
    /// watch will start. Its objects follow as `Added`, page by page as each page is read, so this
    /// comes before the first of them. `count` is what the list is expected to hold: the first
    /// page's objects plus the server's `metadata.remainingItemCount`, an estimate Kubernetes
    /// does not promise to send or to keep exact (without it: the first page's objects alone).
    /// Sent once; if a later page fails, a `Relisted` (`FirstListBrokeOff`) finishes the list.
    Listed {
        resource_version: String,
        count: usize,
    },
    /// A watch request was accepted; changes after `resource_version` will follow.
    Watching { resource_version: String },
    /// The previous watch ended; the next one continues from `resource_version`, with no relist.
    Resumed {
        resource_version: String,
        why: ResumeReason,
    },
    /// The watch lost its place and listed again; the changes found were handed over as events.
    Relisted {
        why: RelistReason,
        resource_version: String,
        added: usize,
        modified: usize,
        deleted: usize,
    },
    /// Something failed; the same step is tried again after `after`.
    Retrying { after: Duration, error: String },
}

impl WatchNotice {
    /// `Listed`, from the first list's first page of `path` (its resourceVersion, its `items`
    /// and its `remainingItemCount`), said in the log too.
    pub(crate) fn listed(
        resource_version: &str,
        items: usize,
        remaining: Option<u64>,
        path: &str,
    ) -> WatchNotice {
        // Kubernetes calls `remainingItemCount` an estimate of the collection's size, and sets
        // it only on a paged list without selectors that has more pages (API servers since 1.15).
        let remaining = remaining.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let count = items.saturating_add(remaining);
        tracing::info!(path, %resource_version, count, "listed first page");
        WatchNotice::Listed {
            resource_version: resource_version.to_string(),
            count,
        }
    }
}

/// Why a watch was reopened from the same resourceVersion.
#[derive(Clone, Debug, PartialEq)]
pub enum ResumeReason {
    /// The server closed the stream cleanly (its `timeoutSeconds`, a restart, a proxy) after
    /// `events` lines (bookmarks included).
    EndOfStream { events: usize },
    /// No byte arrived for this long: the connection was presumed dead.
    Idle { silent_for: Duration },
}

/// Why the watch had to list again.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RelistReason {
    /// 410: our resourceVersion is older than the server's history (etcd compaction).
    #[error("resourceVersion too old ({} {}: {})", .status.code, .status.reason, .status.message)]
    Expired { status: Box<Status> },
    /// 504 "Too large resource version": our resourceVersion is ahead of the server's, so the
    /// server was restarted or restored from a backup (or its watch cache lags behind).
    #[error("resourceVersion ahead of the server, which was restarted or restored ({} {}: {})", .status.code, .status.reason, .status.message)]
    AheadOfServer { status: Box<Status> },
    /// 404 for the collection: its type is gone (CRD deleted, or a new server without it).
    #[error("the collection is gone ({} {}: {})", .status.code, .status.reason, .status.message)]
    CollectionNotFound { status: Box<Status> },
    /// An event was larger than the configured maximum and was dropped.
    #[error("an event exceeded the {limit}-byte limit")]
    EventTooLarge { limit: usize },
    /// A line of the stream could not be decoded, so we do not know what it said.
    #[error("undecodable event: {error}")]
    Undecodable { error: String },
    /// The first list failed after `handed_over` objects had been handed over as `Added` (a later
    /// page failed, or its `continue` token expired): the relist finishes it against them.
    #[error("the first list broke off after {handed_over} objects: {error}")]
    FirstListBrokeOff { handed_over: usize, error: String },
}

impl fmt::Display for ResumeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResumeReason::EndOfStream { events } => {
                write!(f, "the server ended the watch after {events} events")
            }
            ResumeReason::Idle { silent_for } => write!(
                f,
                "no bytes for {}s, connection presumed dead",
                silent_for.as_secs()
            ),
        }
    }
}

/// Does this watch error mean our place is lost, so that only a relist helps? `Err` gives the
/// Status back: any other error is retried from the same resourceVersion.
pub(crate) fn relist_reason(status: Box<Status>) -> Result<RelistReason, Box<Status>> {
    if status.is_expired() {
        // 410: reason Expired (Gone before Kubernetes 1.18). Our RV was compacted away.
        Ok(RelistReason::Expired { status })
    } else if is_resource_version_too_large(&status) {
        Ok(RelistReason::AheadOfServer { status })
    } else if status.code == 404 {
        // Not "the object is gone" (a watch names no object): the collection's type is.
        Ok(RelistReason::CollectionNotFound { status })
    } else {
        Err(status)
    }
}

/// kube-apiserver's 504 for a resourceVersion it has not reached: reason Timeout, cause
/// `ResourceVersionTooLarge`, message "Too large resource version: 8, current: 7". The watch cache
/// sends it in-stream as an ERROR event (after waiting 3 s for the RV), other paths as the HTTP
/// status. Recognised as client-go's `isTooLargeResourceVersionError` does: by the cause, or, from
/// servers before 1.18.6 that set no cause type, by the Timeout's message.
fn is_resource_version_too_large(status: &Status) -> bool {
    const MESSAGE: &str = "Too large resource version";
    let causes = || status.details.iter().flat_map(|details| &details.causes);
    if causes().any(|cause| cause.reason == "ResourceVersionTooLarge") {
        return true;
    }
    let timeout = status.code == 504 || status.reason == "Timeout";
    timeout && (status.message.contains(MESSAGE) || causes().any(|cause| cause.message == MESSAGE))
}
