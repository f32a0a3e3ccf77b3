//! The deployment manifests in `kube/`, one test binary: what kustomize renders, RBAC that grants
//! exactly what the operator uses (no rule too many, none missing), the operator's image running
//! in the sandbox, the README's deploy commands run verbatim, and the Deployment's liveness probe
//! restarting an operator whose watches are wedged (`--ignored`: it waits out the real bound).
//! Needs PostgreSQL, bubblewrap and kubectl (`.ci/install-test-deps`).
//!
//! Run one part: `cargo test --test kube rbac::`.

mod deploy;
mod deployed;
mod manifests;
mod operator_image;
mod rbac;
mod rbac_rules;
mod wedged;
