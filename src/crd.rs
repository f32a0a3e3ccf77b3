//! Our CustomResourceDefinition, built in Rust, and the three things stage 01 does with it:
//! register it, wait until the API server serves it, and read back what discovery serves.
//!
//! WORKSHOP.md, step 01. The 2017 workshop registered a ThirdPartyResource (removed in Kubernetes
//! 1.8); today the same idea is a CRD in `apiextensions.k8s.io/v1`, which must carry a structural
//! OpenAPI schema. `kube/crd.yaml` is the same object as YAML; `tests/crd_manifest.rs` proves they
//! agree.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::{
    crd_path, group_version_path, CRD_NAME, GROUP, KIND, LIST_KIND, PLURAL, SHORT_NAME, SINGULAR,
    VERSION,
};
use crate::client::{Client, ClientError};

/// Where CRDs are created (cluster-scoped: no namespace in the path).
pub const CRDS_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// How long stage 01 waits for `Established` unless told otherwise.
pub const DEFAULT_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the CRD is re-read while waiting. Establishing takes well under a second on a
/// healthy API server, so a short interval keeps stage 01 snappy.
pub const ESTABLISHED_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// `postgresclusters.workshop.example.com`: one namespaced resource, version v1, with a
/// structural schema, the status and scale subresources, and kubectl printer columns.
pub fn postgres_cluster_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        // The name must be exactly <plural>.<group>, or the API server refuses the CRD.
        "metadata": { "name": CRD_NAME },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": LIST_KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                // `kubectl get all` does not include custom resources; `kubectl get workshop` will.
                "categories": ["workshop"],
            },
            "versions": [{
                "name": VERSION,
                // Exactly one version is the storage version: the form written to etcd.
                "served": true,
                "storage": true,
                "schema": { "openAPIV3Schema": schema() },
                "subresources": {
                    // With the status subresource, PUT/PATCH on the object ignore .status and
                    // /status ignores everything but .status: users own spec, the operator status.
                    "status": {},
                    // Lets `kubectl scale pgc NAME --replicas=5` (and autoscalers) set spec.size.
                    "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.readyReplicas",
                    },
                },
                "additionalPrinterColumns": [
                    { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
                    { "name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas" },
                    { "name": "Version", "type": "string", "jsonPath": ".spec.version" },
                    { "name": "Phase", "type": "string", "jsonPath": ".status.phase" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
            }],
        },
    })
}

/// The structural schema: every field typed, so the API server validates (422 Invalid, with the
/// field named in `details.causes`) and prunes unknown fields before they reach us.
fn schema() -> Value {
    // Every level has a description: `kubectl explain pgc` (and `pgc.spec.size`) shows them.
    json!({
        "type": "object",
        "description": "A PostgreSQL cluster: one primary and streaming replicas, run by the workshop's operator.",
        "required": ["spec"],
        "properties": {
            "spec": {
                "type": "object",
                "description": "What the user wants: how many members, which PostgreSQL, and whether the operator may act.",
                "required": ["size", "version"],
                "properties": {
                    "size": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "Number of Postgres pods.",
                    },
                    "version": {
                        "type": "string",
                        "description": "The postgres image tag, for example \"16.4\".",
                    },
                    "paused": {
                        "type": "boolean",
                        "description": "A paused cluster is left alone by the operator.",
                    },
                },
            },
            "status": {
                "type": "object",
                "description": "What the operator last saw; written by the operator only.",
                "properties": {
                    "phase": {
                        "type": "string",
                        "description": "Where the cluster is in its life: Creating, Running or Failed.",
                    },
                    "size": {
                        "type": "integer",
                        "description": "How many member pods exist.",
                    },
                    "readyReplicas": {
                        "type": "integer",
                        "description": "How many member pods are ready.",
                    },
                    "observedGeneration": {
                        "type": "integer",
                        "description": "The metadata.generation of the spec this status describes.",
                    },
                    "conditions": {
                        "type": "array",
                        "description": "The latest observations of the cluster's state, one per type.",
                        // A map keyed by type: server-side apply merges conditions by type.
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["type"],
                        "items": {
                            "type": "object",
                            "description": "One condition, as in every Kubernetes status.",
                            "required": ["type", "status"],
                            "properties": {
                                "type": { "type": "string", "description": "The condition's name." },
                                "status": { "type": "string", "description": "True, False or Unknown." },
                                "reason": { "type": "string", "description": "Why, in one CamelCase word." },
                                "message": { "type": "string", "description": "Why, for people." },
                                "lastTransitionTime": {
                                    "type": "string",
                                    "format": "date-time",
                                    "description": "When status last changed.",
                                },
                            },
                        },
                    },
                },
            },
        },
    })
}

/// What `register` found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// 201 Created: we registered it.
    Created,
    /// 409 AlreadyExists: someone (an earlier run, `kubectl apply -f kube/crd.yaml`) already did.
    /// Also a 409 whose reason Kubernetes does not define, once a GET has found the CRD.
    AlreadyExisted,
}

impl std::fmt::Display for Registration {
    /// The workshop's log line for each outcome.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registration::Created => write!(f, "registered CustomResourceDefinition {CRD_NAME}"),
            Registration::AlreadyExisted => {
                write!(f, "CustomResourceDefinition already exists; continuing")
            }
        }
    }
}

/// One resource discovery serves under our group/version.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedResource {
    /// `postgresclusters`, or a subresource such as `postgresclusters/status`.
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub verbs: Vec<String>,
    pub namespaced: bool,
}

/// Which step of stage 01 failed; each variant with a client error underneath wraps it as its
/// `source()`.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// POST of the CRD failed (other than 409 AlreadyExists).
    #[error("registering CustomResourceDefinition {CRD_NAME}: {0}")]
    Register(#[source] ClientError),
    /// The POST got a 409 with a reason we do not know, and the GET that should have found the
    /// existing CRD failed too.
    #[error("registering CustomResourceDefinition {CRD_NAME}: the POST answered {conflict}, and reading the CRD back to confirm it exists failed: {source}")]
    ConfirmExisting {
        /// The POST's 409, with its unknown reason.
        conflict: ClientError,
        #[source]
        source: ClientError,
    },
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
    /// The client error underneath, if there is one.
    pub fn client_error(&self) -> Option<&ClientError> {
        match self {
            CrdError::Register(error)
            | CrdError::WaitEstablished(error)
            | CrdError::Discovery(error)
            | CrdError::ConfirmExisting { source: error, .. } => Some(error),
            _ => None,
        }
    }

    /// What to do about it, in one sentence, when there is something specific to say.
    pub fn hint(&self) -> Option<String> {
        let (verb, resource) = match self {
            CrdError::Register(_) => ("create", "customresourcedefinitions.apiextensions.k8s.io"),
            CrdError::ConfirmExisting { .. } | CrdError::WaitEstablished(_) => {
                ("get", "customresourcedefinitions.apiextensions.k8s.io")
            }
            CrdError::Discovery(_) => ("get", "the /apis/workshop.example.com/v1 discovery URL"),
            CrdError::NamesNotAccepted { .. } => {
                return Some(format!(
                    "another CustomResourceDefinition already uses one of our names; see `kubectl get crd {CRD_NAME} -o yaml`"
                ))
            }
            CrdError::NotEstablished { .. } => {
                return Some(format!(
                    "the API server has not started serving the resource; see `kubectl describe crd {CRD_NAME}`, or pass a longer --established-timeout"
                ))
            }
        };
        match self.client_error()?.status_code()? {
            // RBAC says no: name the exact permission, which is what a ClusterRole grants.
            403 => Some(format!(
                "the service account may not {verb} {resource}; grant it in a ClusterRole (see kube/rbac.yaml) and apply it"
            )),
            401 => Some(
                "the API server did not accept our credentials: check --token/--token-file, or the service account token".into(),
            ),
            _ => None,
        }
    }
}

/// POST the CRD. 409 AlreadyExists is success: the type is there, which is all we need.
pub async fn register(client: &Client) -> Result<Registration, CrdError> {
    match client
        .create::<_, Value>(CRDS_PATH, &postgres_cluster_crd())
        .await
    {
        Ok(_) => Ok(Registration::Created),
        // A real operator might compare and update an outdated schema here; the workshop continues.
        Err(error) if error.reason() == Some("AlreadyExists") => Ok(Registration::AlreadyExisted),
        // A 409 whose reason Kubernetes does not define (an API server we did not write says
        // "Object Already Exists"): client-go goes by the code when the reason is unknown, so it
        // probably exists. "Probably" is not enough to carry on with: a GET confirms it.
        Err(error) if is_conflict_with_unknown_reason(&error) => {
            match client.get::<Value>(&crd_path()).await {
                Ok(_) => Ok(Registration::AlreadyExisted),
                Err(source) => Err(CrdError::ConfirmExisting {
                    conflict: error,
                    source,
                }),
            }
        }
        Err(error) => Err(CrdError::Register(error)),
    }
}

/// 409 with a reason that is not one of Kubernetes' own (or with no Status at all). A 409 with a
/// known reason (`Conflict`: a stale resourceVersion) means what it says.
fn is_conflict_with_unknown_reason(error: &ClientError) -> bool {
    error.status_code() == Some(409)
        && !error
            .api_status()
            .is_some_and(|status| status.has_known_reason())
}

/// Poll the CRD until its `Established` condition is `True`: only then does the API server serve
/// `/apis/workshop.example.com/v1/...`. Bounded by `timeout`.
pub async fn wait_established(client: &Client, timeout: Duration) -> Result<(), CrdError> {
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let mut last_conditions = "no answer yet".to_string();
    loop {
        // Each GET is bounded by what is left of the wait, not by the client's 30 s default.
        let answer = match tokio::time::timeout_at(deadline, client.get::<Value>(&crd_path())).await
        {
            Ok(answer) => answer,
            Err(_) => break,
        };
        match answer {
            Ok(crd) => {
                let conditions = crd["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let condition = |kind: &str| {
                    conditions
                        .iter()
                        .find(|condition| condition["type"].as_str() == Some(kind))
                        .cloned()
                };
                if let Some(established) = condition("Established") {
                    if established["status"].as_str() == Some("True") {
                        return Ok(());
                    }
                }
                if let Some(names) = condition("NamesAccepted") {
                    if names["status"].as_str() == Some("False") {
                        return Err(CrdError::NamesNotAccepted {
                            message: names["message"].as_str().unwrap_or_default().to_string(),
                        });
                    }
                }
                last_conditions = summarize_conditions(&conditions);
                tracing::debug!(conditions = %last_conditions, "CRD not Established yet");
            }
            // Right after the POST, another API server replica may not have it yet: not-yet, not failure.
            Err(error) if error.status_code() == Some(404) => {
                last_conditions = "CRD not found yet".into();
            }
            Err(error) => return Err(CrdError::WaitEstablished(error)),
        }
        if tokio::time::Instant::now() + ESTABLISHED_POLL_INTERVAL > deadline {
            break;
        }
        tokio::time::sleep(ESTABLISHED_POLL_INTERVAL).await;
    }
    Err(CrdError::NotEstablished {
        waited: started.elapsed(),
        conditions: last_conditions,
    })
}

/// `Established=False (Installing), NamesAccepted=True (NoConflicts)`.
fn summarize_conditions(conditions: &[Value]) -> String {
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

/// What discovery serves at `/apis/workshop.example.com/v1` (an `APIResourceList`): the resource
/// and its subresources, with their kinds and verbs.
pub async fn served_resources(client: &Client) -> Result<Vec<ServedResource>, CrdError> {
    #[derive(Deserialize)]
    struct ApiResourceList {
        #[serde(default)]
        resources: Vec<ServedResource>,
    }
    let list: ApiResourceList = client
        .get(&group_version_path())
        .await
        .map_err(CrdError::Discovery)?;
    Ok(list.resources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_is_named_plural_dot_group_and_uses_the_api_constants() {
        let crd = postgres_cluster_crd();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        assert_eq!(crd["spec"]["names"]["plural"], PLURAL);
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "pgc");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(
            version["subresources"]["scale"]["specReplicasPath"],
            ".spec.size"
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["size"]["minimum"], 1);
        assert_eq!(spec["required"], json!(["size", "version"]));
    }

    #[test]
    fn conditions_summarize_on_one_line() {
        let conditions = vec![
            json!({"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"}),
            json!({"type": "Established", "status": "False", "reason": "Installing"}),
        ];
        assert_eq!(
            summarize_conditions(&conditions),
            "NamesAccepted=True (NoConflicts), Established=False (Installing)"
        );
    }
}
