//! What can go wrong registering or checking the type, and what to do about each: the errors
//! and their hints. Support: a learner may skip it on first read — `mod.rs`, `compare.rs` and
//! `crd_check.rs` say where each error comes from; this file words it for the person running
//! the operator.
//!
//! WORKSHOP.md, step 01 ("When it fails").

use std::time::Duration;

use serde_json::Value;

use super::{group_version_path, CRD_NAME, GROUP, VERSION};
use crate::client::ClientError;

/// Which step of registering or checking the type failed; each variant with a client error
/// underneath wraps it as its `source()`.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// GET of the CRD, to see whether it exists and what it says, failed (other than 404).
    #[error("reading CustomResourceDefinition {CRD_NAME}: {0}")]
    Read(#[source] ClientError),
    /// POST of the CRD failed (other than 409: someone created it first, so we read it again).
    #[error("creating CustomResourceDefinition {CRD_NAME}: {0}")]
    Create(#[source] ClientError),
    /// Stage 01's PUT of our schema over an existing CRD failed (other than 409: it changed since
    /// we read it).
    #[error("updating CustomResourceDefinition {CRD_NAME} to our schema: {0}")]
    Update(#[source] ClientError),
    /// Every attempt met a 409: the CRD kept changing between our GET and our write, or a server
    /// answered the POST with 409 and the GET with 404.
    #[error("CustomResourceDefinition {CRD_NAME} kept changing while we wrote it ({attempts} attempts, each a 409); the last answer: {last}")]
    KeptChanging {
        attempts: u32,
        #[source]
        last: ClientError,
    },
    /// The server answered the GET with something that is not a CRD as `apiextensions.k8s.io/v1`
    /// defines it (no `spec`, `versions` not a list, ...).
    #[error("CustomResourceDefinition {CRD_NAME} as the server sent it is not one: {what}")]
    Malformed { what: String },
    /// The CRD exists but does not serve `v1`, the only version this operator reads.
    #[error("CustomResourceDefinition {CRD_NAME} does not serve {VERSION} (it serves: {})", if .served.is_empty() { "nothing".to_string() } else { .served.join(", ") })]
    NotServed { served: Vec<String> },
    /// GET of the CRD failed while waiting for Established.
    #[error("waiting for CustomResourceDefinition {CRD_NAME} to be Established: {0}")]
    WaitEstablished(#[source] ClientError),
    /// The API server refused our names (`NamesAccepted` False: a clash with another CRD).
    #[error("CustomResourceDefinition {CRD_NAME}: names not accepted: {message}")]
    NamesNotAccepted { message: String },
    /// Established did not become True in time.
    #[error("CustomResourceDefinition {CRD_NAME} was not Established after {}s (conditions: {conditions})", .waited.as_secs_f64())]
    NotEstablished {
        waited: Duration,
        conditions: String,
    },
    /// `GET /apis/workshop.example.com/v1` failed.
    #[error("reading discovery for {}: {}", group_version_path(), .0)]
    Discovery(#[source] ClientError),
}

impl CrdError {
    /// The client error underneath, if there is one: the `source()` of each variant that has one.
    pub fn client_error(&self) -> Option<&ClientError> {
        std::error::Error::source(self)?.downcast_ref()
    }

    /// What to do about it, in one sentence, when there is something specific to say.
    pub fn hint(&self) -> Option<String> {
        const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
        let (verb, resource) = match self {
            CrdError::Create(_) => ("create", CRDS),
            CrdError::Update(_) => ("update", CRDS),
            CrdError::Read(_) | CrdError::WaitEstablished(_) => ("get", CRDS),
            CrdError::Discovery(_) => ("get", "the /apis/workshop.example.com/v1 discovery URL"),
            CrdError::KeptChanging { .. } => return Some(format!(
                "something else keeps writing the CRD (another operator, or a `kubectl apply -f kube/crd.yaml` of another version); see `kubectl get crd {CRD_NAME} -o yaml`"
            )),
            CrdError::Malformed { .. } => return Some(format!(
                "is this a Kubernetes API server? See what it sends with `kubectl get crd {CRD_NAME} -o json`"
            )),
            CrdError::NotServed { .. } => return Some(format!(
                "this operator reads {GROUP}/{VERSION}: serve it (`kubectl apply -f kube/crd.yaml`, or `cargo run --bin stage01`), or run the operator release that matches the CRD"
            )),
            CrdError::NamesNotAccepted { .. } => return Some(format!(
                "another CustomResourceDefinition already uses one of our names; see `kubectl get crd {CRD_NAME} -o yaml`"
            )),
            CrdError::NotEstablished { .. } => return Some(format!(
                "the API server has not started serving the resource; see `kubectl describe crd {CRD_NAME}`, or pass a longer --established-timeout"
            )),
        };
        let register_elsewhere = "have the type registered once by someone who may (`kubectl apply -f kube/crd.yaml`, or `cargo run --bin stage01`)";
        match self.client_error()?.status_code()? {
            // RBAC says no: name the exact permission, which is what a ClusterRole grants.
            403 if verb == "create" => Some(format!(
                "the PostgresCluster type is not registered and this account may not {verb} {resource}: {register_elsewhere}, or grant {verb} in a ClusterRole (see kube/rbac.yaml)"
            )),
            403 => Some(format!(
                "the service account may not {verb} {resource}; grant it in a ClusterRole (see kube/rbac.yaml) and apply it"
            )),
            401 => Some(
                "the API server did not accept our credentials: check --token/--token-file, or the service account token".into(),
            ),
            // The server has no such verb for CRDs (a proxy, a mock, a read-only front end).
            404 | 405 | 501 if verb != "get" => Some(format!(
                "this server does not let us {verb} {resource}: {register_elsewhere}"
            )),
            // The server checked our schema and refused it: a CRD of our name whose scope differs
            // cannot be changed in place (scope is immutable), only deleted and created again.
            422 => Some(format!(
                "the API server refused our CRD; if `kubectl get crd {CRD_NAME}` shows one that is not ours, delete it (that deletes every PostgresCluster with it) and run again"
            )),
            _ => None,
        }
    }
}
/// `Established=False (Installing), NamesAccepted=True (NoConflicts)`.
pub(super) fn summarize_conditions(conditions: &[Value]) -> String {
    if conditions.is_empty() {
        return "none yet".into();
    }
    conditions
        .iter()
        .map(|condition| {
            format!(
                "{}={} ({})",
                condition["type"].as_str().unwrap_or("?"),
                condition["status"].as_str().unwrap_or("?"),
                condition["reason"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}
