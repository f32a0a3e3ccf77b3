//! Who a request is and what it may do (`sandbox/src/authn.rs`, `rbac.rs`, `tokens.rs`), one test binary: service accounts and their tokens,
//! RBAC driven with real kubectl, the token volume pods get, and credentials nobody can compute
//! from others. WORKSHOP.md, "Set-up: the sandbox".
//!
//! Run one part: `cargo test -p sandbox --test accounts rbac::`.

mod credentials;
mod pods;
mod rbac;
