//! A Postgres operator, hand-rolled over the Kubernetes REST API: the 2017 "Building a Kubernetes
//! Operator" workshop (itself cut down from CoreOS etcd-operator), rewritten in Rust.
//!
//! # Module map
//!
//! Each module names the WORKSHOP.md section that explains it. Read them in this order:
//!
//! | module | what it holds | WORKSHOP.md |
//! |---|---|---|
//! | [`config`] | where the API server is and how to authenticate: one file per source (flags, in-cluster, kubeconfig) | Set-up |
//! | [`client`] | the HTTP client: one request (`mod.rs` opens with it) and the JSON verbs; retries and reading the answer (`answer.rs`) (a watch's byte stream is step 02's `watch/frame.rs`, `pods/exec`'s upgrade step 04's `exec.rs`); its errors, token and TLS in files of their own | Set-up ("Talking to the API server") |
//! | [`status`] | the Kubernetes `Status` error body | Set-up ("When the server says no") |
//! | [`crd`] | the CustomResourceDefinition (data: `kube/crd.yaml`, compiled in) and the names it holds; registering it (stage 01) in `mod.rs`; how the server's differs (`compare.rs`) | Step 01 |
//! | [`crd_check`] | what every later stage does first: the type created if absent, never changed | Step 02 (explained in step 01) |
//! | [`api`] | the typed `PostgresCluster` (spec, status; the later steps' fields carried untyped in `more`), object metadata and lists, and the REST paths to our objects | Step 02 |
//! | [`watch`] | the byte stream of a watch (`Client::stream`) → lines → typed events, list-then-watch that never loses its place, and the `Store` it keeps | Step 02 (the store: step 04) |
//! | [`story`] | what the operator says: the workshop's log lines, and the `Reporter` that tags each with its cluster | Steps 02 and 03 |
//! | [`controller`] | one task per cluster, its own channel, and a reconcile timer | Step 03 |
//! | [`postgres`] | step 04, a Postgres cluster for real: its own fields of the spec and status (`api.rs`), what a cluster owns, the plan, the cluster task that acts (and the seam a later step plugs into), synchronous replication, status, each cluster's figures | Step 04 |
//! | [`exec`] | `pods/exec`: a command in a pod over a WebSocket (`channel.k8s.io` streams, the exit Status) | Step 04 ("Inside step 04: one `pods/exec`, byte by byte") |
//! | [`leader`] | one operator acts at a time: leader election on a `coordination.k8s.io` Lease, as client-go does it | Step 04 ("Inside step 04: one operator at a time") |
//! | [`events`] | Kubernetes Events about a cluster, what `kubectl describe pgc` shows | Step 04 |
//! | [`metrics`] | what a user watches: `/metrics` in the Prometheus text format, `/healthz` and `/readyz` for the probes, and their server | Step 04 ("Inside step 04: watching the operator") |
//! | [`backups`] | step 05, a layer over step 04's cluster task: its own fields of the spec and status (`api.rs`), WAL archiving, base backups, and restoring a seed from them | Step 05 |
//! | [`process`] | what every binary does alike: logging, the stop token, connecting, duration flags, the error exit | Set-up |
//!
//! The binaries in `stages/` are the workshop's steps; each is a short `main` over this library.
//! `src/bin/` holds the rest: `tour` (`cargo run`: the whole workshop on a sandbox it starts as a
//! child process) and `watch-bench` (list-then-watch throughput).
//!
//! The sandbox API server is the other crate of this workspace, `sandbox/` (its own module map is
//! in `sandbox/src/lib.rs`). This library never depends on it: the tests do, as a
//! dev-dependency, and the tour runs its binary.

pub mod api;
pub mod backups;
pub mod client;
pub mod config;
pub mod controller;
pub mod crd;
pub mod crd_check;
pub mod events;
pub mod exec;
pub mod leader;
pub mod metrics;
pub mod postgres;
pub mod process;
pub mod status;
pub mod story;
pub mod watch;
