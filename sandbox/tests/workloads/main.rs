//! Deployments and ReplicaSets (`sandbox/src/workloads.rs`), one test binary: rollouts checked
//! with real kubectl on simulated pods, and a rollout restart of pods that run as processes.
//! WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test workloads kubectl::`.

mod kubectl;
mod processes;
