//! The operator's HTTP client (`src/client/`) and where it finds its server (`src/config/`), one
//! test binary: typed errors, retries, the body cap and connection reuse against scripted
//! servers (plain and TLS), and the configuration sources. WORKSHOP.md, "Set-up".
//!
//! Run one part: `cargo test --test client retries::`.

mod body_limit;
mod config_sources;
mod connection_reuse;
mod errors;
mod retries;
