//! The PostgresCluster CRD (`src/crd/`), one test binary: kubectl reads `kube/crd.yaml` as
//! the operator does, registration against scripted servers, `crd::ensure` and `crd_check::check` against the
//! sandbox and odder servers, and what the schema gives a kubectl user. WORKSHOP.md, step 01.
//!
//! Run one part: `cargo test --test crd check::`.

mod support;

mod check;
mod ensure;
mod manifest;
mod registration;
mod schema;
