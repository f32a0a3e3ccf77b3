//! The watch's knobs (`WatchOptions`) and what was measured to set them. Support: a learner may
//! skip it on first read — the defaults are what a real operator should use, and tests shorten
//! the times.
//!
//! WORKSHOP.md, step 02 ("The long poll, byte by byte": the watch's timeout; "Chunks are not
//! events": the longest event), and "How fast is it, end to end?" (the tuning notes).

use std::time::Duration;

use super::backoff::BackoffPolicy;
use super::frame::DEFAULT_MAX_EVENT_BYTES;

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

// Tuning notes: what was measured to set the knobs above (watch-bench and benches/peers, a
// shared 2-core machine, 1,000 objects of ~2.1 KB).

/// [`WatchOptions::event_buffer`]'s default. Every event held is a whole typed object: 16 cost no
/// throughput against 256 and kept ~1.5 MB less resident, since a tokio task runs up to 128
/// steps before it yields.
pub const EVENT_BUFFER: usize = 16;

// `ListWatch::deliver` writes each change into the store under a `namespace/name` key built
// afresh. It once built the key into one reused `String`, so that an update of a known object
// allocated no key; dropping that, and reading lines through `LineFramer::cut`, measured
// `watch-bench --replay 200000`, eight runs of each build interleaved on a loaded machine:
// median 109.9k events/s before, 108.0k after (−1.6 %, within the runs' spread of 48k–131k);
// max RSS 1,040.6 → 1,041.0 MB. Over HTTP, benches/peers' `bench.sh` (200,000 events, 16 KB
// chunks, both builds in one run, six watches each): median 78.9k → 82.9k events/s (kube-rs's
// watcher 64.6k), max RSS 10.1 → 10.3 MB.
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
