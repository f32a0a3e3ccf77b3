//! The `sandbox` program and its source, one test binary: the binary's flags, banner, request log
//! and shutdown; state that survives a restart with `--data-dir`; and the layer table its files
//! keep. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test program restart::`.

mod binary;
mod module_layers;
mod restart;
