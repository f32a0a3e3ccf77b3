//! The watch stream: N events over M PostgresClusters, built once, in memory, before the first
//! client connects, so a run measures the client and not the server.
//!
//! Event `i` (0-based) is about object `pg-{i % M}`, carries resourceVersion `i + 2` (the list
//! is at "1"), and is ADDED for the first M events, MODIFIED after that; each round over the M
//! objects raises their generation. The objects look like what a real API server sends for a
//! cluster the operator manages: kubectl's last-applied annotation on two in three of them,
//! managedFields for the applier and for the operator's status writes, two or three conditions. They
//! weigh 1.5 to 2.5 KB, about 2.1 KB on average: the size that dominates a real watch's cost.

use std::fmt::Write as _;

use bytes::Bytes;

pub const GROUP: &str = "workshop.example.com";
pub const VERSION: &str = "v1";
pub const KIND: &str = "PostgresCluster";
pub const PLURAL: &str = "postgresclusters";
pub const NAMESPACE: &str = "default";
/// The resourceVersion of the (always empty) list; the events follow it.
pub const LIST_RESOURCE_VERSION: u64 = 1;

/// Every event, one JSON document per line, and where each one starts.
pub struct Stream {
    pub bytes: Bytes,
    /// `starts[i]` is where event `i` begins; `starts[events]` is the length of `bytes`.
    starts: Vec<usize>,
}

impl Stream {
    pub fn generate(events: usize, objects: usize) -> Stream {
        let mut out = String::with_capacity(events * 2200);
        let mut starts = Vec::with_capacity(events + 1);
        for i in 0..events {
            starts.push(out.len());
            let kind = if i < objects { "ADDED" } else { "MODIFIED" };
            write!(out, r#"{{"type":"{kind}","object":"#).unwrap();
            write_object(&mut out, i as u64, objects as u64);
            out.push_str("}\n");
        }
        starts.push(out.len());
        let stream = Stream {
            bytes: Bytes::from(out),
            starts,
        };
        stream.spot_check();
        stream
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    /// The events after resourceVersion `rv`: event `i` has `i + 2`, so they start at `rv - 1`.
    pub fn after(&self, rv: u64) -> Bytes {
        let first = (rv.saturating_sub(1) as usize).min(self.len());
        self.bytes.slice(self.starts[first]..)
    }

    /// A few lines, spread over the stream, must be JSON: a typo in a template would otherwise
    /// show up as a client's decode error.
    fn spot_check(&self) {
        let step = (self.len() / 50).max(1);
        for i in (0..self.len()).step_by(step) {
            let line = &self.bytes[self.starts[i]..self.starts[i + 1] - 1];
            if let Err(error) = serde_json::from_slice::<serde_json::Value>(line) {
                panic!("event {i} is not JSON: {error}");
            }
        }
    }
}

/// Deterministic noise from a number (the "xorshift-multiply" finaliser of MurmurHash3).
fn noise(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A version-4-shaped UID that stays the same for an object across its events.
fn uid(object: u64) -> String {
    let a = noise(object.wrapping_add(1));
    let b = noise(a);
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        b >> 52,
        b & 0xffff_ffff_ffff
    )
}

/// RFC 3339 time `seconds` after 2025-03-01T00:00:00Z, wrapping within March.
fn time(seconds: u64) -> String {
    let s = seconds % (31 * 86_400);
    format!(
        "2025-03-{:02}T{:02}:{:02}:{:02}Z",
        1 + s / 86_400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

/// JSON string literal of `s`, quotes included.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Event `i`'s object, keys in the order kube-apiserver writes them.
fn write_object(out: &mut String, i: u64, objects: u64) {
    let k = i % objects;
    let generation = i / objects + 1;
    let rv = i + 2;
    let r = noise(i ^ 0x5eed);
    let name = format!("pg-{k}");
    let size = 1 + k % 5;
    let version = ["13.14", "14.11", "15.6", "16.4", "17.2"][(k % 5) as usize];
    let paused = r % 37 == 0;
    let created = time(k * 41);
    let changed = time(86_400 + i * 2);
    let by_kubectl = k % 3 != 0;
    let team = format!("team-{:02}", k % 13);
    let tier = ["gold", "silver", "bronze"][(k % 3) as usize];
    let labels = format!(
        r#"{{"app.kubernetes.io/name":"postgres","app.kubernetes.io/instance":"{name}","team":"{team}","tier":"{tier}"}}"#
    );

    write!(
        out,
        r#"{{"apiVersion":"{GROUP}/{VERSION}","kind":"{KIND}","metadata":{{"name":"{name}","namespace":"{NAMESPACE}","uid":"{}","resourceVersion":"{rv}","generation":{generation},"creationTimestamp":"{created}","labels":{labels},"annotations":{{"#,
        uid(k)
    )
    .unwrap();
    if by_kubectl {
        // What `kubectl apply` leaves behind: the applied manifest, as a string of JSON.
        let applied = format!(
            r#"{{"apiVersion":"{GROUP}/{VERSION}","kind":"{KIND}","metadata":{{"annotations":{{"workshop.example.com/owner":"{team}"}},"labels":{labels},"name":"{name}","namespace":"{NAMESPACE}"}},"spec":{{"paused":false,"size":{size},"version":"{version}"}}}}"#
        );
        write!(
            out,
            r#""kubectl.kubernetes.io/last-applied-configuration":{},"#,
            quoted(&(applied + "\n"))
        )
        .unwrap();
    }
    write!(
        out,
        r#""workshop.example.com/owner":"{team}"}},"finalizers":["workshop.example.com/cleanup"],"managedFields":["#
    )
    .unwrap();
    let (manager, applied_field) = if by_kubectl {
        (
            "kubectl-client-side-apply",
            r#""f:kubectl.kubernetes.io/last-applied-configuration":{},"#,
        )
    } else {
        ("provisioner", "")
    };
    write!(
        out,
        r#"{{"manager":"{manager}","operation":"Update","apiVersion":"{GROUP}/{VERSION}","time":"{created}","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:annotations":{{".":{{}},{applied_field}"f:workshop.example.com/owner":{{}}}},"f:labels":{{".":{{}},"f:app.kubernetes.io/instance":{{}},"f:app.kubernetes.io/name":{{}},"f:team":{{}},"f:tier":{{}}}}}},"f:spec":{{".":{{}},"f:paused":{{}},"f:size":{{}},"f:version":{{}}}}}}}},"#
    )
    .unwrap();
    write!(
        out,
        r#"{{"manager":"postgres-operator","operation":"Update","apiVersion":"{GROUP}/{VERSION}","time":"{changed}","fieldsType":"FieldsV1","fieldsV1":{{"f:status":{{".":{{}},"f:conditions":{{}},"f:observedGeneration":{{}},"f:phase":{{}},"f:primary":{{}},"f:readyInstances":{{}},"f:size":{{}}}}}},"subresource":"status"}}]}},"#
    )
    .unwrap();
    write!(
        out,
        r#""spec":{{"size":{size},"version":"{version}","paused":{paused}}},"#
    )
    .unwrap();

    let phase = if paused {
        "Paused"
    } else if generation == 1 {
        "Creating"
    } else {
        ["Running", "Running", "Running", "Running", "Scaling"][(r >> 8) as usize % 5]
    };
    let ready = if phase == "Running" {
        size
    } else {
        (r >> 16) % (size + 1)
    };
    let all_ready = ready == size;
    // Messages of varying length spread the objects' sizes, as real status messages do.
    let detail = " a replica in sync;".repeat((r >> 24) as usize % 6);
    write!(
        out,
        r#""status":{{"phase":"{phase}","primary":"{name}-0","size":{size},"readyInstances":{ready},"observedGeneration":{generation},"conditions":["#
    )
    .unwrap();
    write!(
        out,
        r#"{{"type":"Available","status":"{}","reason":"{}","message":"{ready} of {size} members ready:{detail}","lastTransitionTime":"{changed}"}},"#,
        if ready > 0 { "True" } else { "False" },
        if ready > 0 { "PrimaryReady" } else { "NoPrimary" },
    )
    .unwrap();
    write!(
        out,
        r#"{{"type":"Progressing","status":"{}","reason":"{}","message":"phase {phase}","lastTransitionTime":"{changed}"}}"#,
        if all_ready { "False" } else { "True" },
        if all_ready { "UpToDate" } else { "Reconciling" },
    )
    .unwrap();
    // One in three has failed over at some point and still says so.
    if r % 3 == 0 {
        write!(
            out,
            r#",{{"type":"Degraded","status":"False","reason":"FailedOver","message":"{name}-1 took over from a failed primary at {created}","lastTransitionTime":"{changed}"}}"#
        )
        .unwrap();
    }
    out.push_str("]}}");
}
