//! Each stage binary (`stages/stageNN.rs`) run as a learner runs it, one test binary: against a
//! sandbox, driven by real kubectl; steps 04 to 06 on real PostgreSQL (`.ci/install-test-deps`).
//!
//! Run one stage: `cargo test --test stages stage02_story:: -- --nocapture`.

mod stage01_register;
mod stage02_story;
mod stage03_controller;
mod stage04_cluster;
mod stage06_backup;
