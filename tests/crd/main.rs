//! The PostgresCluster CRD (`src/crd/`), one test binary: the manifest in `kube/crd.yaml` equals
//! the code's, registration against scripted servers, `crd::ensure` and `crd::check` against the
//! sandbox and odder servers, and what the schema gives a kubectl user. WORKSHOP.md, step 01.
//!
//! Run one part: `cargo test --test crd check::`.

mod support;

mod check;
mod ensure;
mod manifest;
mod registration;
mod schema;
