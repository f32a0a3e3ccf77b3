//! `pods/exec` (`src/exec.rs`), one test binary: against hostile fake servers, and against the
//! sandbox with real PostgreSQL pods. WORKSHOP.md, "Inside step 04: one `pods/exec`, byte by byte".
//!
//! Run one part: `cargo test --test exec hostile::`.

mod against_sandbox;
mod hostile;
