//! The sandbox's API server, one test binary: what it does to objects and watches as
//! kube-apiserver would, malformed and hostile requests, a seeded fuzzer, and load. Requests go
//! through `test_support::http_client`, exact to the byte. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test api watch::`.

mod fuzz;
mod hostile;
mod objects;
mod robustness;
mod scale;
mod watch;
