//! A Postgres operator, hand-rolled over the Kubernetes REST API: the 2017 "Building a Kubernetes
//! Operator" workshop (itself cut down from CoreOS etcd-operator), rewritten in Rust.
//!
//! # Module map
//!
//! In WORKSHOP.md's order, one step at a time. Each step's **lesson** is what a learner reads in
//! one sitting; its **support** may be skipped on first read, and each support file says so in
//! its first lines. WORKSHOP.md lists both, file by file, at the top of each step.
//!
//! | step | lesson | support |
//! |---|---|---|
//! | 01 | [`crd`] (`mod.rs`: register the CRD, wait for Established, discovery), [`client`] (`mod.rs`: one request, then the JSON verbs) | `crd/compare.rs`, `crd/error.rs`; the rest of [`client`] (its handle, answers and retries, errors, token, TLS); [`config`] (where the API server is: flags, in-cluster, kubeconfig); [`status`] (the `Status` error body); [`process`] (logging, signals, the error exit) |
//! | 02 | [`api`] (the typed `PostgresCluster`, metadata, lists, paths), [`watch`] (`mod.rs`: list, then watch from the list's resourceVersion; `frame.rs`: the socket's bytes → lines; `event.rs`: a line → an `Event`) | `api/spec.rs`; the rest of [`watch`] (recovery, options, pages, back-off, notices, the store, undecodable lines); [`crd_check`] (every later stage's read-only CRD check); [`story`] (the log lines); [`resource`] (what the story and the controller need of a kind) |
//! | 03 | [`controller`] (`operator.rs`, `mod.rs`: one task per cluster with its own channel; `cluster.rs`: the task's loop and a reconcile timer) | `controller/pods.rs`, `worker.rs` (the seam step 04 plugs into), `shutdown.rs` |
//! | 04 | [`postgres`] (the operator plus a pod watch, the round, the plan, the actions, the pods, the status) | [`postgres`]'s own fields, owned objects, the layer seam, figures; [`exec`] (`pods/exec` over a WebSocket); [`events`] (Kubernetes Events); [`leader`] (one operator acts at a time); [`metrics`] (`/metrics`, `/healthz`, `/readyz`) |
//! | 05 | [`failover`] (a layer over step 04's round: what it observes, its rules, its actions, what a member pod gets) | its fields, the fence, streaming checks, synchronous replication, its status, its figures, the readiness agent |
//! | 06 | [`backups`] (a layer over step 05's: its plan, the restore, base backups, the shell scripts) | its fields, its objects, its status, its figures, termination messages, a bootstrap source's passwords |
//! | Deployer | [`deployer`] (a second operator on steps 01–03's library: a canary rollout over two Deployments, with rollback) | its kind (`api.rs`), its Kubernetes objects (`objects.rs`), its status (`status.rs`) |
//!
//! The binaries in `stages/` are the workshop's steps; each is a short `main` over this library.
//! `src/bin/` holds the rest: `deployer` (the chapter after step 06), `tour` (`cargo run`: the whole workshop on a sandbox it starts as a
//! child process), `watch-bench` (list-then-watch throughput) and `pg-ready` (the readiness
//! agent every member pod copies out of the operator's image, [`failover::agent`]).
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
pub mod deployer;
pub mod events;
pub mod exec;
pub mod failover;
pub mod leader;
pub mod metrics;
pub mod postgres;
pub mod process;
pub mod resource;
pub mod status;
pub mod story;
pub mod watch;
