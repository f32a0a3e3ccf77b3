//! Leader election (`src/leader/`), one test binary: candidates racing in this process, and the
//! stage-04 binary's processes handing the Lease over. WORKSHOP.md, "Inside step 04: one
//! operator at a time".
//!
//! Run one part: `cargo test --test leader stage04::`.

mod election;
mod stage04;
