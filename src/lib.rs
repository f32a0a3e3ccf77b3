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
//! | [`client`] | the HTTP client: JSON verbs, typed errors, retries, the raw watch stream | Set-up ("Talking to the API server") |
//! | [`status`] | the Kubernetes `Status` error body | Set-up ("When the server says no") |
//! | [`api`] | our resource's names, REST paths and typed `PostgresCluster` | Step 01 |
//! | [`crd`] | the CustomResourceDefinition, built in Rust, and registering it | Step 01 |
//! | [`watch`] | bytes → lines → typed events, and list-then-watch that never loses its place | Step 02 |
//! | [`story`] | what the operator says: the workshop's log lines, and the `Reporter` that tags each with its cluster | Steps 02 and 03 |
//! | [`controller`] | one task per cluster, its own channel, and a reconcile timer | Step 03 |
//! | [`postgres`] | a Postgres cluster for real: the objects a cluster owns, the `psql` commands run in its pods | Step 04 |
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
pub mod client;
pub mod config;
pub mod controller;
pub mod crd;
pub mod postgres;
pub mod process;
pub mod status;
pub mod story;
pub mod watch;
