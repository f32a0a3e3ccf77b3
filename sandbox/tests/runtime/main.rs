//! The process runtime (`sandbox/src/runtime.rs` and `runtime/`), one test binary: pods as real processes in
//! bubblewrap jails, with real PostgreSQL and real kubectl — replication from plain manifests,
//! exec, Services, termination messages, the users pods run as, the data dir they must reach,
//! and how many fit on this machine. Needs PostgreSQL and bubblewrap (`.ci/install-test-deps`):
//! without them each test fails and says what is missing. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test runtime services::`.

mod capacity;
mod data_dir;
mod exec;
mod fault_door;
mod http_probes;
mod image_root;
mod node_faults;
mod pod_users;
mod postgres;
mod services;
mod termination_message;
mod top;
