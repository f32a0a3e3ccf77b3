//! `pods/exec` (`src/exec.rs`), one test binary: against hostile fake servers, and against the
//! sandbox with real PostgreSQL pods. WORKSHOP.md, step 05 ("One `pods/exec`, byte by byte").
//!
//! Run one part: `cargo test --test exec hostile::`.

mod against_sandbox;
mod hostile;
