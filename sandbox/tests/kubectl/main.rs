//! Real kubectl against the sandbox, one test binary: the checklist of what the workshop types
//! (kubectl-needs.md), and what a learner types next. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test kubectl more::`.

mod checklist;
mod more;
