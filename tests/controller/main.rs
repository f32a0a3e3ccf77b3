//! The controller (`src/controller/`), one test binary: routing and cluster tasks with in-memory
//! pods under paused time, the same over real HTTP against the sandbox, and pod call errors.
//! WORKSHOP.md, step 03. (Stage 03 run as a binary is in `tests/stages/`.)
//!
//! Run one part: `cargo test --test controller cluster_tasks::`.

mod support;

mod against_sandbox;
mod cluster_tasks;
mod pod_errors;
