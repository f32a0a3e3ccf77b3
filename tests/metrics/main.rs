//! The operator's `/metrics`, `/healthz` and `/readyz` (`src/metrics/`), one test binary: the
//! endpoints against the sandbox, and the figures of a real PostgreSQL cluster read by a strict
//! Prometheus text parser. WORKSHOP.md, "Inside step 04: watching the operator".
//!
//! Run one part: `cargo test --test metrics endpoints::`.

mod endpoints;
mod postgres;
mod support;
