//! PersistentVolumeClaims and their volumes (`sandbox/src/storage.rs`), one test binary: binding,
//! protection and garbage collection with real kubectl, and a PostgreSQL database that outlives
//! its pod on a claim. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test storage claims::`.

mod claims;
mod postgres;
