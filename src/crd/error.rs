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

/// Which step of registering or checking a CRD failed, and the CRD's name (each variant's `crd`, or
/// its first field); each variant with a client error underneath wraps it as its `source()`.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// GET of the CRD, to see whether it exists and what it says, failed (other than 404).
    #[error("reading CustomResourceDefinition {0}: {1}")]
    Read(String, #[source] ClientError),
    /// POST of the CRD failed (other than 409: someone created it first, so we read it again).
    #[error("creating CustomResourceDefinition {0}: {1}")]
    Create(String, #[source] ClientError),
    /// Stage 01's PUT of our schema over an existing CRD failed (other than 409: it changed since
    /// we read it).
    #[error("updating CustomResourceDefinition {0} to our schema: {1}")]
    Update(String, #[source] ClientError),
    /// Every attempt met a 409: the CRD kept changing between our GET and our write, or a server
    /// answered the POST with 409 and the GET with 404.
    #[error("CustomResourceDefinition {crd} kept changing while we wrote it ({attempts} attempts, each a 409); the last answer: {last}")]
    KeptChanging {
        crd: String,
        attempts: u32,
        #[source]
        last: ClientError,
    },
    /// The server answered the GET with something that is not a CRD as `apiextensions.k8s.io/v1`
    /// defines it (no `spec`, `versions` not a list, ...).
    #[error("CustomResourceDefinition {crd} as the server sent it is not one: {what}")]
    Malformed { crd: String, what: String },
    /// The CRD exists but does not serve `v1`, the only version this operator reads.
    #[error("CustomResourceDefinition {crd} does not serve {VERSION} (it serves: {})", if .served.is_empty() { "nothing".to_string() } else { .served.join(", ") })]
    NotServed { crd: String, served: Vec<String> },
    /// GET of the CRD failed while waiting for Established.
    #[error("waiting for CustomResourceDefinition {0} to be Established: {1}")]
    WaitEstablished(String, #[source] ClientError),
    /// The API server refused our names (`NamesAccepted` False: a clash with another CRD).
    #[error("CustomResourceDefinition {crd}: names not accepted: {message}")]
    NamesNotAccepted { crd: String, message: String },
    /// Established did not become True in time.
    #[error("CustomResourceDefinition {crd} was not Established after {}s (conditions: {conditions})", .waited.as_secs_f64())]
    NotEstablished {
        crd: String,
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

    /// The CRD it is about (`postgresclusters.workshop.example.com` for discovery, ours).
    pub fn crd(&self) -> &str {
        match self {
            CrdError::Read(crd, _)
            | CrdError::Create(crd, _)
            | CrdError::Update(crd, _)
            | CrdError::WaitEstablished(crd, _)
            | CrdError::KeptChanging { crd, .. }
            | CrdError::Malformed { crd, .. }
            | CrdError::NotServed { crd, .. }
            | CrdError::NamesNotAccepted { crd, .. }
            | CrdError::NotEstablished { crd, .. } => crd,
            CrdError::Discovery(_) => CRD_NAME,
        }
    }

    /// What to do about it, in one sentence, when there is something specific to say.
    pub fn hint(&self) -> Option<String> {
        const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
        let crd = self.crd();
        let Wording {
            the_type,
            objects,
            apply,
            register,
            rbac,
        } = wording(crd);
        let (verb, resource) = match self {
            CrdError::Create(..) => ("create", CRDS),
            CrdError::Update(..) => ("update", CRDS),
            CrdError::Read(..) | CrdError::WaitEstablished(..) => ("get", CRDS),
            CrdError::Discovery(_) => ("get", "the /apis/workshop.example.com/v1 discovery URL"),
            CrdError::KeptChanging { .. } => return Some(format!(
                "something else keeps writing the CRD (another operator, or a {apply} of another version); see `kubectl get crd {crd} -o yaml`"
            )),
            CrdError::Malformed { .. } => return Some(format!(
                "is this a Kubernetes API server? See what it sends with `kubectl get crd {crd} -o json`"
            )),
            CrdError::NotServed { .. } => return Some(format!(
                "this operator reads {GROUP}/{VERSION}: serve it (`kubectl apply -f kube/crd.yaml`, or `cargo run --bin stage01`), or run the operator release that matches the CRD"
            )),
            CrdError::NamesNotAccepted { .. } => return Some(format!(
                "another CustomResourceDefinition already uses one of our names; see `kubectl get crd {crd} -o yaml`"
            )),
            // Only the stages have --established-timeout; the Deployer waits the default.
            CrdError::NotEstablished { .. } => return Some(format!(
                "the API server has not started serving the resource; see `kubectl describe crd {crd}`{}",
                if crd == CRD_NAME { ", or pass a longer --established-timeout" } else { "" }
            )),
        };
        let register_elsewhere =
            format!("have the type registered once by someone who may ({register})");
        match self.client_error()?.status_code()? {
            // RBAC says no: name the exact permission, which is what a ClusterRole grants.
            403 if verb == "create" => Some(format!(
                "{the_type} is not registered and this account may not {verb} {resource}: {register_elsewhere}, or grant {verb} in a ClusterRole (see {rbac})"
            )),
            403 => Some(format!(
                "the service account may not {verb} {resource}; grant it in a ClusterRole (see {rbac}) and apply it"
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
                "the API server refused our CRD; if `kubectl get crd {crd}` shows one that is not ours, delete it (that deletes every {objects} with it) and run again"
            )),
            _ => None,
        }
    }
}

/// How a hint speaks of the CRD: ours by its kind and `kube/`'s files; another operator's (the
/// Deployer's) by its name alone, since its files are its operator's to name.
struct Wording {
    the_type: String,
    objects: String,
    apply: &'static str,
    register: &'static str,
    rbac: &'static str,
}

fn wording(crd: &str) -> Wording {
    if crd == CRD_NAME {
        return Wording {
            the_type: "the PostgresCluster type".into(),
            objects: "PostgresCluster".into(),
            apply: "`kubectl apply -f kube/crd.yaml`",
            register: "`kubectl apply -f kube/crd.yaml`, or `cargo run --bin stage01`",
            rbac: "kube/rbac.yaml",
        };
    }
    Wording {
        the_type: format!("the type {crd}"),
        objects: format!("object of the type {crd}"),
        apply: "`kubectl apply`",
        register: "`kubectl apply -f` its CRD manifest",
        rbac: "its operator's RBAC manifest",
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
