//! The workshop as a learner meets it, one test binary: WORKSHOP.md's references and transcripts
//! agree with the code, every binary's `--help`, the one-command tour, and each crate's module
//! graph read top-down. WORKSHOP.md, "Introduction".
//!
//! Run one part: `cargo test --test workshop transcripts::`.

mod binaries_help;
mod claims;
mod module_graph;
mod references;
mod tour;
mod transcripts;
