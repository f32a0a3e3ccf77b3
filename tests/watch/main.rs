//! The watch (`src/watch/`), one test binary: framing and decoding without a network, then
//! `list_then_watch` over real HTTP against a scripted server that decides every byte and against
//! the sandbox and its fault switches. WORKSHOP.md, step 02 ("Testing against faults" has the
//! table of faults and the test for each).
//!
//! Run one part: `cargo test --test watch relist::` (a module's name filters its tests).

mod support;

mod byte_level;
mod errors;
mod framing;
mod kept;
mod paging;
mod relist;
mod resume;
mod scenario;
mod server_restart;
