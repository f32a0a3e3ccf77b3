//! The deployment manifests in `kube/`, one test binary: what kustomize renders, RBAC that grants
//! exactly what the operator uses (no rule too many, none missing), the operator's image running
//! in the sandbox, and the README's deploy commands run verbatim. Needs PostgreSQL, bubblewrap
//! and kubectl (`.ci/install-test-deps`).
//!
//! Run one part: `cargo test --test kube rbac::`.

mod deploy;
mod manifests;
mod operator_image;
mod rbac;
mod rbac_rules;
