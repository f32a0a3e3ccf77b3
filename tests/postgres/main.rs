//! The stage-04 pod manifests (`src/postgres/manifests.rs`), one test binary: the shell they
//! hold, run on this machine, and a replicated cluster built from them by hand on real
//! PostgreSQL. WORKSHOP.md, step 04.
//!
//! Run one part: `cargo test --test postgres scripts::`.

mod manifests;
mod scripts;
