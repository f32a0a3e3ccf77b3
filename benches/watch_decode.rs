//! How fast does a watch stream turn into typed events, and how much memory does framing hold?
//!
//! WORKSHOP.md, step 02 ("Decoding an event"). Generates a recorded stream shaped like a real API
//! server's (each object ~2 KB: managedFields, the kubectl last-applied annotation, labels,
//! ownerReferences, status conditions, non-ASCII text), then measures framing + typed decoding
//! into `PostgresCluster` at several chunk sizes, against a baseline of
//! `serde_json::from_slice::<Value>` on the same lines already split. Run it with:
//!
//! ```text
//! cargo bench --bench watch_decode
//! ```
//!
//! Each configuration prints one summary line (median of several timed runs after a warm-up).

use bytes::Bytes;
use postgres_operator::api::PostgresCluster;
use postgres_operator::watch::event::{decode_line, Line};
use postgres_operator::watch::frame::{LineFramer, DEFAULT_MAX_EVENT_BYTES};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const OBJECTS: usize = 400;
const EVENTS: usize = 4000;

/// xorshift64: enough randomness for test data without a dependency.
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn timestamp(seconds: u64) -> String {
    format!(
        "2026-11-22T{:02}:{:02}:{:02}Z",
        (seconds / 3600) % 24,
        (seconds / 60) % 60,
        seconds % 60
    )
}

fn uid(rng: &mut XorShift) -> String {
    let a = rng.next();
    let b = rng.next();
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

fn cluster_object(index: usize, uid: &str, size: u64, rv: u64, at: u64) -> Value {
    let name = format!("example-postgresql-cluster-{index}");
    let last_applied = json!({
        "apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster",
        "metadata": {"annotations": {}, "name": name, "namespace": "default",
                     "labels": {"app": "postgres", "team": "café-日本"}},
        "spec": {"size": size, "version": "9.6.3", "paused": false}
    })
    .to_string()
        + "\n";
    json!({
        "apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster",
        "metadata": {
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "workshop.example.com/description": "Base de données — 日本語のテスト"
            },
            "creationTimestamp": timestamp(at - 600),
            "generation": size,
            "labels": {"app": "postgres", "team": "café-日本", "app.kubernetes.io/managed-by": "postgres-operator"},
            "managedFields": [
                {
                    "apiVersion": "workshop.example.com/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}},
                                                "f:labels": {".": {}, "f:app": {}, "f:team": {}}},
                                 "f:spec": {".": {}, "f:paused": {}, "f:size": {}, "f:version": {}}},
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "time": timestamp(at - 600)
                },
                {
                    "apiVersion": "workshop.example.com/v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {".": {}, "f:conditions": {}, "f:observedGeneration": {}, "f:phase": {},
                                              "f:readyReplicas": {}, "f:size": {}}},
                    "manager": "postgres-operator",
                    "operation": "Update",
                    "subresource": "status",
                    "time": timestamp(at)
                }
            ],
            "name": name,
            "namespace": "default",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "postgres-fleet",
                                 "uid": "5f0c3e8e-1d2a-4c47-9b1a-2a7d8f1e0c11", "controller": false,
                                 "blockOwnerDeletion": true}],
            "resourceVersion": rv.to_string(),
            "uid": uid
        },
        "spec": {"size": size, "version": "9.6.3", "paused": false},
        "status": {
            "conditions": [
                {"lastTransitionTime": timestamp(at), "message": format!("{size} of {size} members ready"),
                 "observedGeneration": size, "reason": "MembersReady", "status": "True", "type": "Ready"},
                {"lastTransitionTime": timestamp(at - 300), "message": "cluster is at the requested size",
                 "observedGeneration": size, "reason": "Reconciled", "status": "False", "type": "Progressing"}
            ],
            "observedGeneration": size,
            "phase": "Running",
            "readyReplicas": size,
            "size": size
        }
    })
}

/// A recorded stream: ADDED for each object, then a random mix of MODIFIED, DELETED (+ re-ADDED)
/// and the occasional BOOKMARK, one JSON document per line as the API server writes it.
fn recorded_stream() -> Vec<u8> {
    let mut rng = XorShift(0x5eed_1234_abcd_ef01);
    let uids: Vec<String> = (0..OBJECTS).map(|_| uid(&mut rng)).collect();
    let mut sizes = vec![3u64; OBJECTS];
    let mut rv = 4566u64;
    let mut at = 36_000u64;
    let mut stream = Vec::new();
    for event_index in 0..EVENTS {
        rv += 1;
        at += 1;
        let (event_type, object) = if event_index < OBJECTS {
            (
                "ADDED",
                cluster_object(event_index, &uids[event_index], 3, rv, at),
            )
        } else if rng.below(50) == 0 {
            let bookmark = json!({"kind": "PostgresCluster", "apiVersion": "workshop.example.com/v1",
                                  "metadata": {"resourceVersion": rv.to_string()}});
            ("BOOKMARK", bookmark)
        } else {
            let index = rng.below(OBJECTS as u64) as usize;
            sizes[index] = 1 + rng.below(7);
            let kind = if rng.below(20) == 0 {
                "DELETED"
            } else {
                "MODIFIED"
            };
            (
                kind,
                cluster_object(index, &uids[index], sizes[index], rv, at),
            )
        };
        // Written by hand, not with json!(): serde_json sorts keys, and the API server always puts
        // `type` before `object` (the decoder's fast path relies on it).
        stream.extend_from_slice(format!("{{\"type\":\"{event_type}\",\"object\":").as_bytes());
        serde_json::to_writer(&mut stream, &object).expect("serialising generated JSON");
        stream.extend_from_slice(b"}\n");
    }
    stream
}

struct Measured {
    events: usize,
    peak_buffered: usize,
    peak_capacity: usize,
}

fn frame_and_decode(stream: &Bytes, chunk_size: usize) -> Measured {
    let mut framer = LineFramer::new(DEFAULT_MAX_EVENT_BYTES);
    let mut events = 0;
    let mut handle = |line: &[u8]| match decode_line::<PostgresCluster>(line) {
        Ok(Line::Event(event)) => {
            std::hint::black_box(&event);
            events += 1;
        }
        Ok(Line::Bookmark { resource_version }) => {
            std::hint::black_box(&resource_version);
            events += 1;
        }
        other => panic!("unexpected decode result: {other:?}"),
    };
    // Chunks as hyper hands them over: `Bytes` that already own their memory.
    for start in (0..stream.len()).step_by(chunk_size) {
        let chunk = stream.slice(start..(start + chunk_size).min(stream.len()));
        framer.push_bytes(chunk).expect("no event is oversize");
        while let Some(line) = framer.next_line() {
            handle(&line);
        }
    }
    while let Some(line) = framer.finish() {
        handle(&line);
    }
    Measured {
        events,
        peak_buffered: framer.peak_buffered_bytes(),
        peak_capacity: framer.peak_capacity(),
    }
}

fn baseline_value(lines: &[&[u8]]) -> usize {
    let mut events = 0;
    for line in lines {
        let value: Value = serde_json::from_slice(line).expect("generated JSON parses");
        std::hint::black_box(&value);
        events += 1;
    }
    events
}

fn median_duration<F: FnMut() -> usize>(runs: usize, mut body: F) -> (Duration, usize) {
    let events = body(); // warm-up
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            std::hint::black_box(body());
            start.elapsed()
        })
        .collect();
    times.sort();
    (times[times.len() / 2], events)
}

fn main() {
    let stream = Bytes::from(recorded_stream());
    let lines: Vec<&[u8]> = stream
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let average = stream.len() / lines.len();
    let largest = lines.iter().map(|l| l.len()).max().unwrap_or(0);
    println!(
        "stream: {} events, {} bytes, average event {} bytes, largest {} bytes",
        lines.len(),
        stream.len(),
        average,
        largest
    );

    let (baseline_time, baseline_events) = median_duration(9, || baseline_value(&lines));
    let baseline_rate = baseline_events as f64 / baseline_time.as_secs_f64();
    println!(
        "baseline serde_json::from_slice::<Value> on pre-split lines: {:>10.0} events/s ({:.1} MB/s)",
        baseline_rate,
        stream.len() as f64 / baseline_time.as_secs_f64() / 1e6
    );

    let (typed_split_time, _) = median_duration(9, || {
        lines
            .iter()
            .map(|line| std::hint::black_box(decode_line::<PostgresCluster>(line).is_ok()) as usize)
            .sum()
    });
    let typed_split_rate = baseline_events as f64 / typed_split_time.as_secs_f64();
    println!(
        "typed decode_line::<PostgresCluster> on pre-split lines:  {:>10.0} events/s  ratio {:.2}x",
        typed_split_rate,
        typed_split_rate / baseline_rate
    );

    for (chunk_size, runs) in [(1usize, 3usize), (64, 7), (16 * 1024, 9), (1024 * 1024, 9)] {
        let mut last = None;
        let (time, events) = median_duration(runs, || {
            let measured = frame_and_decode(&stream, chunk_size);
            let events = measured.events;
            last = Some(measured);
            events
        });
        let measured = last.expect("at least one run");
        assert_eq!(events, lines.len(), "every event came out");
        let rate = events as f64 / time.as_secs_f64();
        println!(
            "chunk {:>8} B: frame+typed decode {:>10.0} events/s ({:>6.1} MB/s)  ratio vs baseline {:.2}x  peak framer buffer {} B (capacity {} B)",
            chunk_size,
            rate,
            stream.len() as f64 / time.as_secs_f64() / 1e6,
            rate / baseline_rate,
            measured.peak_buffered,
            measured.peak_capacity
        );
    }
}
