//! Support: skip it on first read — small JSON pieces the pods are built from: an env var read
//! from the cluster's Secret, an exec probe, the merge patch that moves a pod's role label.
//!
//! WORKSHOP.md, step 04 ("The objects a cluster owns").

use serde_json::{json, Value};

use super::{credentials_secret_name, ROLE_LABEL};
use crate::api::PostgresCluster;

/// An env var read from one key of the cluster's credentials Secret.
pub fn from_secret(cluster: &PostgresCluster, variable: &str, key: &str) -> Value {
    json!({
        "name": variable,
        "valueFrom": {"secretKeyRef": {
            "name": credentials_secret_name(&cluster.metadata.name),
            "key": key,
        }},
    })
}

/// The startup probe's check: `pg_isready` exiting 0 or 1 (the postmaster is there), asked
/// every 0.1 s for up to 2 s before it gives up, so a postmaster that listens 0.3 s after its
/// container started passes then, not at the next probe (the kubelet asks once per period).
pub const STARTED_CHECK: &str = "i=0; until pg_isready -q -h 127.0.0.1 -p 5432 || [ $? -eq 1 ]; do i=$((i+1)); [ $i -lt 20 ] || exit 1; sleep 0.1; done";

/// An exec probe running `script` with `sh -c`.
pub fn shell_probe(script: &str, period_seconds: u32, failure_threshold: u32) -> Value {
    json!({
        "exec": {"command": ["sh", "-c", script]},
        "periodSeconds": period_seconds,
        // pg_isready gives up after 3 s (its -t default); the kubelet must wait longer than that
        // or a slow answer counts as a failure (exec probe timeouts are enforced since 1.20).
        "timeoutSeconds": 5,
        "failureThreshold": failure_threshold,
    })
}

/// A JSON merge patch (`application/merge-patch+json`) that sets a pod's role label to `role`
/// and leaves its other labels alone: a merge patch merges maps key by key.
pub fn role_patch(role: &str) -> Value {
    json!({"metadata": {"labels": {ROLE_LABEL: role}}})
}
