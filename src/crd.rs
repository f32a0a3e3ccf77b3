//! Our CustomResourceDefinition, built in Rust, and the three things stage 01 does with it:
//! ensure the cluster has it as we define it (create it, or update an older schema), wait until
//! the API server serves it, and read back what discovery serves.
//!
//! WORKSHOP.md, step 01. The 2017 workshop registered a ThirdPartyResource (removed in Kubernetes
//! 1.8); today the same idea is a CRD in `apiextensions.k8s.io/v1`, which must carry a structural
//! OpenAPI schema. `kube/crd.yaml` is the same object as YAML; `tests/crd_manifest.rs` proves they
//! agree.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::{
    crd_path, group_version_path, CRD_NAME, GROUP, KIND, LIST_KIND, MAX_SIZE, PLURAL, SHORT_NAME,
    SINGULAR, VERSION,
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
                    // A HorizontalPodAutoscaler also reads status.selector to find the pods whose
                    // metrics it averages; without labelSelectorPath it refuses the target.
                    "scale": {
                        "specReplicasPath": ".spec.size",
                        "statusReplicasPath": ".status.size",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                // kubectl upper-cases the names; a column whose path is missing prints empty
                // (`<none>` with -o wide), so a cluster shows its SIZE before the operator writes
                // any status.
                "additionalPrinterColumns": [
                    { "name": "Size", "type": "integer", "description": "Pods asked for.", "jsonPath": ".spec.size" },
                    { "name": "Ready", "type": "integer", "description": "Pods ready.", "jsonPath": ".status.readyInstances" },
                    { "name": "Primary", "type": "string", "description": "The primary's pod.", "jsonPath": ".status.primary" },
                    { "name": "Phase", "type": "string", "description": "Creating, Running or Failed.", "jsonPath": ".status.phase" },
                    { "name": "Version", "type": "string", "description": "The postgres image tag asked for.", "jsonPath": ".spec.version" },
                    // Stage 05. A `date` column prints an age ("12m"), like AGE; empty until the
                    // first base backup completes.
                    { "name": "Last Backup", "type": "date", "description": "When the newest base backup completed.", "jsonPath": ".status.lastBackup.time" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
                ],
            }],
        },
    })
}

/// What `spec.version` must look like: a postgres image tag of major 13 or later, with an
/// optional minor, digits without leading zeros. `api::PostgresVersion` parses by the same rule;
/// a unit test below checks that the two agree. (The official image also has tags such as
/// `16-alpine`; the operator runs only the plain ones, whose entrypoint contract it relies on.)
pub const VERSION_PATTERN: &str = r"^(1[3-9]|[2-9][0-9]|[1-9][0-9][0-9]+)(\.(0|[1-9][0-9]*))?$";

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
                        "maximum": MAX_SIZE,
                        "description": "Number of Postgres pods: 1 to 7, one primary and the rest streaming replicas.",
                    },
                    "version": {
                        "type": "string",
                        "pattern": VERSION_PATTERN,
                        "description": "The postgres image tag to run: a major version of 13 or later, optionally with a minor, e.g. \"16\" or \"16.4\".",
                    },
                    "paused": {
                        "type": "boolean",
                        "description": "A paused cluster is left alone by the operator.",
                    },
                    "backup": backup_schema(),
                    "bootstrap": bootstrap_schema(),
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
                    "primary": {
                        "type": "string",
                        "description": "The name of the pod that is the primary.",
                    },
                    "size": {
                        "type": "integer",
                        "description": "How many member pods exist.",
                    },
                    "readyInstances": {
                        "type": "integer",
                        "description": "How many member pods are ready.",
                    },
                    "currentVersion": {
                        "type": "string",
                        "description": "The postgres version the members run.",
                    },
                    "selector": {
                        "type": "string",
                        "description": "The label selector of the member pods, for the scale subresource.",
                    },
                    "observedGeneration": {
                        "type": "integer",
                        "description": "The metadata.generation of the spec this status describes.",
                    },
                    "conditions": condition_list_schema(),
                    "lastBackup": {
                        "type": "object",
                        "description": "The newest base backup that completed (stage 05).",
                        "properties": {
                            "name": {"type": "string", "description": "Its directory under base/ in the claim <name>-backups: completion time and start LSN."},
                            "time": {"type": "string", "format": "date-time", "description": "When it completed."},
                            "lsn": {"type": "string", "description": "The WAL position a restore from it replays from."},
                            "bytes": {"type": "integer", "description": "Its size in the claim."},
                        },
                    },
                    "backupRequested": {
                        "type": "string",
                        "description": "The value of the workshop.example.com/backup-now annotation last acted on.",
                    },
                    "restore": {
                        "type": "object",
                        "description": "The last restore from backups: disaster recovery, or spec.bootstrap.fromBackup (stage 05).",
                        "properties": {
                            "source": {"type": "string", "description": "The claim restored from."},
                            "pod": {"type": "string", "description": "The seed pod that restored."},
                            "state": {"type": "string", "description": "Restoring, Restored or Failed."},
                            "message": {"type": "string", "description": "The WAL position reached, or why the restore failed."},
                        },
                    },
                },
            },
        },
    })
}

/// What `spec.backup.storageSize` must look like: a Kubernetes quantity in bytes with a binary
/// or decimal suffix (`1Gi`, `500Mi`, `2G`). The API server checks the claim's quantity again.
pub const QUANTITY_PATTERN: &str = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$";

/// What `spec.bootstrap.fromBackup.targetTime` must look like: RFC 3339 in UTC, whole seconds
/// (`2026-01-22T10:15:00Z`), the form Kubernetes writes and `backup::parse_utc` reads.
pub const TARGET_TIME_PATTERN: &str = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$";

/// `spec.backup` (stage 05): every field defaulted by the server, so `backup: {}` is enough.
fn backup_schema() -> Value {
    json!({
        "type": "object",
        "description": "Base backups and continuous WAL archiving to the PersistentVolumeClaim <name>-backups (stage 05; stage 04 ignores it).",
        "properties": {
            "storageSize": {
                "type": "string",
                "pattern": QUANTITY_PATTERN,
                "default": "1Gi",
                "description": "The size of the claim <name>-backups, e.g. \"1Gi\". It holds the base backups kept and the WAL archived since the oldest.",
            },
            "intervalMinutes": {
                "type": "integer",
                "minimum": 1,
                "default": 60,
                "description": "Minutes between two base backups. The annotation workshop.example.com/backup-now asks for one at once.",
            },
            "keep": {
                "type": "integer",
                "minimum": 1,
                "maximum": 100,
                "default": 3,
                "description": "How many base backups to keep, the newest; the WAL older than the oldest kept is removed.",
            },
        },
    })
}

/// `spec.bootstrap` (stage 05).
fn bootstrap_schema() -> Value {
    json!({
        "type": "object",
        "description": "How a new cluster's first member starts: empty (initdb), or from another cluster's backups.",
        "properties": {
            "fromBackup": {
                "type": "object",
                "description": "Seed from the newest base backup of another cluster in this namespace and replay its archived WAL (read only: nothing is written to its claim).",
                "required": ["cluster"],
                "properties": {
                    "cluster": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The source cluster's name; its claim <cluster>-backups is read.",
                    },
                    "targetTime": {
                        "type": "string",
                        "pattern": TARGET_TIME_PATTERN,
                        "description": "Stop replaying at this moment (RFC 3339 in UTC, e.g. 2026-01-22T10:15:00Z): the new cluster holds exactly what was committed before it. Absent: everything archived.",
                    },
                },
            },
        },
    })
}

/// `status.conditions` as every Kubernetes API declares it (metav1.Condition, as controller-gen
/// writes it): a list keyed by `type`, each entry with a status, a reason, a message and the time
/// its status last flipped.
fn condition_list_schema() -> Value {
    json!({
        "type": "array",
        "description": "The latest observations of the cluster's state (Available, Progressing, Degraded), one per type.",
        // A map keyed by type: server-side apply merges conditions by type, and the server
        // refuses two entries of one type.
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "description": "One condition, as in every Kubernetes status.",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {
                    "type": "string",
                    "maxLength": 316,
                    "pattern": r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
                    "description": "The condition's name, in CamelCase.",
                },
                "status": {
                    "type": "string",
                    "enum": ["True", "False", "Unknown"],
                    "description": "True, False or Unknown.",
                },
                "reason": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1024,
                    "pattern": r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
                    "description": "Why, in one CamelCase word.",
                },
                "message": {
                    "type": "string",
                    "maxLength": 32768,
                    "description": "Why, for people.",
                },
                "lastTransitionTime": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When status last changed.",
                },
                "observedGeneration": {
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0,
                    "description": "The metadata.generation this condition was set for.",
                },
            },
        },
    })
}

/// What `ensure` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registration {
    /// There was no CRD of our name: we created it (201).
    Created,
    /// The CRD was there with exactly our group, names, scope and versions: nothing was written.
    UpToDate,
    /// The CRD was there with something else in what we own (an older schema, say stage 01's
    /// from before the status and scale subresources): we replaced it with a PUT (200).
    Updated,
}

impl std::fmt::Display for Registration {
    /// The workshop's log line for each outcome.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Registration::Created => write!(f, "CustomResourceDefinition {CRD_NAME} created"),
            Registration::UpToDate => {
                write!(f, "CustomResourceDefinition {CRD_NAME} already up to date")
            }
            Registration::Updated => write!(
                f,
                "CustomResourceDefinition {CRD_NAME} updated: an older schema was replaced"
            ),
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
    /// GET of the CRD, to see whether it exists and what it says, failed (other than 404).
    #[error("reading CustomResourceDefinition {CRD_NAME}: {0}")]
    Read(#[source] ClientError),
    /// POST of the CRD failed (other than 409: someone created it first, so we read it again).
    #[error("creating CustomResourceDefinition {CRD_NAME}: {0}")]
    Create(#[source] ClientError),
    /// PUT of our schema over an existing CRD failed (other than 409: it changed since we read it).
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
            CrdError::Read(error)
            | CrdError::Create(error)
            | CrdError::Update(error)
            | CrdError::WaitEstablished(error)
            | CrdError::Discovery(error)
            | CrdError::KeptChanging { last: error, .. } => Some(error),
            CrdError::NamesNotAccepted { .. } | CrdError::NotEstablished { .. } => None,
        }
    }

    /// What to do about it, in one sentence, when there is something specific to say.
    pub fn hint(&self) -> Option<String> {
        let (verb, resource) = match self {
            CrdError::Create(_) => ("create", "customresourcedefinitions.apiextensions.k8s.io"),
            CrdError::Update(_) => ("update", "customresourcedefinitions.apiextensions.k8s.io"),
            CrdError::Read(_) | CrdError::WaitEstablished(_) => {
                ("get", "customresourcedefinitions.apiextensions.k8s.io")
            }
            CrdError::Discovery(_) => ("get", "the /apis/workshop.example.com/v1 discovery URL"),
            CrdError::KeptChanging { .. } => {
                return Some(format!(
                    "something else keeps writing the CRD (another operator, or a `kubectl apply -f kube/crd.yaml` of another version); see `kubectl get crd {CRD_NAME} -o yaml`"
                ))
            }
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
            // The server checked our schema and refused it: a CRD of our name whose scope differs
            // cannot be changed in place (scope is immutable), only deleted and created again.
            422 => Some(format!(
                "the API server refused our CRD; if `kubectl get crd {CRD_NAME}` shows one that is not ours, delete it (that deletes every PostgresCluster with it) and run again"
            )),
            _ => None,
        }
    }
}

/// How many times `ensure` reads and writes again after a 409 before giving up.
pub const ENSURE_ATTEMPTS: u32 = 5;

/// The parts of a CRD's `spec` that are ours to say: the rest (`conversion`, and whatever a newer
/// API server adds) is defaulted by the server, and we leave it alone.
pub const OWNED_SPEC_FIELDS: [&str; 4] = ["group", "names", "scope", "versions"];

/// Make the cluster's CRD ours: GET it; absent → POST it; present but different in what we own
/// (`OWNED_SPEC_FIELDS`) → PUT ours over it, with the resourceVersion we read so that a write made
/// in between is not overwritten; the same → write nothing.
///
/// A CRD of our name is ours whoever registered it: an older stage's schema, a hand-edited
/// `kube/crd.yaml`, or another program's schema for the same name all get replaced, since one
/// name can have only one schema and the operator cannot work with any other. Objects already
/// stored are kept; the new schema applies to them from their next write.
///
/// 409 on either write means someone else wrote in between (the POST lost a race with another
/// creator, or the PUT's resourceVersion is stale): read again and decide again, at most
/// `ENSURE_ATTEMPTS` times.
pub async fn ensure(client: &Client) -> Result<Registration, CrdError> {
    let ours = postgres_cluster_crd();
    let mut attempt = 1;
    loop {
        let conflict = match client.get::<Value>(&crd_path()).await {
            Err(error) if error.status_code() == Some(404) => {
                match client.create::<_, Value>(CRDS_PATH, &ours).await {
                    Ok(_) => return Ok(Registration::Created),
                    Err(error) if error.status_code() == Some(409) => error,
                    Err(error) => return Err(CrdError::Create(error)),
                }
            }
            Err(error) => return Err(CrdError::Read(error)),
            Ok(current) => {
                let outdated = outdated_fields(&current, &ours);
                if outdated.is_empty() {
                    return Ok(Registration::UpToDate);
                }
                tracing::info!(?outdated, "replacing the CRD's schema with ours");
                match client
                    .replace::<_, Value>(&crd_path(), &replacement(current, &ours))
                    .await
                {
                    Ok(_) => return Ok(Registration::Updated),
                    Err(error) if error.status_code() == Some(409) => error,
                    Err(error) => return Err(CrdError::Update(error)),
                }
            }
        };
        if attempt == ENSURE_ATTEMPTS {
            return Err(CrdError::KeptChanging {
                attempts: attempt,
                last: conflict,
            });
        }
        tracing::debug!(attempt, error = %conflict, "the CRD changed under us; reading it again");
        attempt += 1;
    }
}

/// Step 01's name for [`ensure`], which every stage calls to make sure the type exists.
pub async fn register(client: &Client) -> Result<Registration, CrdError> {
    ensure(client).await
}

/// Which of `OWNED_SPEC_FIELDS` differ between the CRD on the server and ours. Exact JSON
/// equality: the API server stores a CRD's schema as sent (it adds defaults only outside these
/// fields), so any difference is a real one.
pub fn outdated_fields(current: &Value, ours: &Value) -> Vec<&'static str> {
    OWNED_SPEC_FIELDS
        .into_iter()
        .filter(|field| current["spec"][field] != ours["spec"][field])
        .collect()
}

/// The PUT body: the CRD as read (its metadata with the resourceVersion, the spec fields the
/// server defaulted, its status, which a PUT leaves unchanged anyway) with our owned fields in.
fn replacement(current: Value, ours: &Value) -> Value {
    // Indexing a JSON value that is not an object would panic; a server's answer cannot make us.
    let mut current = if current.is_object() {
        current
    } else {
        json!({})
    };
    if !current["spec"].is_object() {
        current["spec"] = json!({});
    }
    for field in OWNED_SPEC_FIELDS {
        current["spec"][field] = ours["spec"][field].clone();
    }
    current
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

    /// The CRD's name, names and version come from `api.rs`; scale and size bounds are in place.
    #[test]
    fn the_crd_is_named_plural_dot_group_and_uses_the_api_constants() {
        let crd = postgres_cluster_crd();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        assert_eq!(crd["spec"]["names"]["plural"], PLURAL);
        assert_eq!(crd["spec"]["names"]["shortNames"][0], "pgc");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(
            version["subresources"]["scale"],
            json!({
                "specReplicasPath": ".spec.size",
                "statusReplicasPath": ".status.size",
                "labelSelectorPath": ".status.selector",
            })
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["size"]["minimum"], 1);
        assert_eq!(spec["properties"]["size"]["maximum"], 7);
        assert_eq!(spec["required"], json!(["size", "version"]));
    }

    /// kubectl's columns, in order, each from the field the issue names.
    #[test]
    fn printer_columns_are_size_ready_primary_phase_version_last_backup_age() {
        let crd = postgres_cluster_crd();
        let columns: Vec<(String, String)> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_uppercase(),
                    c["jsonPath"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected = [
            ("SIZE", ".spec.size"),
            ("READY", ".status.readyInstances"),
            ("PRIMARY", ".status.primary"),
            ("PHASE", ".status.phase"),
            ("VERSION", ".spec.version"),
            ("LAST BACKUP", ".status.lastBackup.time"),
            ("AGE", ".metadata.creationTimestamp"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(name, path)| (name.to_string(), path.to_string()))
            .collect();
        assert_eq!(columns, expected);
    }

    /// Every field of `PostgresClusterStatus`, serialized, is a property of the status schema:
    /// the server would otherwise prune what the operator writes.
    #[test]
    fn the_status_schema_declares_every_status_field() {
        let status = crate::api::PostgresClusterStatus {
            phase: Some("Running".into()),
            primary: Some("p".into()),
            size: Some(1),
            ready_instances: Some(1),
            current_version: Some("16".into()),
            selector: Some("a=b".into()),
            observed_generation: Some(1),
            conditions: vec![crate::api::Condition {
                observed_generation: Some(1),
                ..Default::default()
            }],
            last_backup: Some(crate::api::LastBackup::default()),
            backup_requested: Some("1".into()),
            restore: Some(crate::api::RestoreStatus::default()),
        };
        let status = serde_json::to_value(status).unwrap();
        let crd = postgres_cluster_crd();
        let schema =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        for field in status.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(field).is_some(),
                "status.{field} missing"
            );
        }
        for field in status["conditions"][0].as_object().unwrap().keys() {
            assert!(
                schema["properties"]["conditions"]["items"]["properties"]
                    .get(field)
                    .is_some(),
                "status.conditions[].{field} missing"
            );
        }
    }

    /// Only the fields we own count: a server-filled `conversion` or status is no difference, a
    /// changed schema or short name is.
    #[test]
    fn only_owned_fields_make_a_crd_outdated() {
        let ours = postgres_cluster_crd();
        let mut served = ours.clone();
        served["spec"]["conversion"] = json!({"strategy": "None"});
        served["status"] = json!({"conditions": []});
        served["metadata"]["resourceVersion"] = json!("42");
        assert!(outdated_fields(&served, &ours).is_empty());

        served["spec"]["names"]["shortNames"] = json!(["pg"]);
        served["spec"]["versions"][0]["subresources"] = json!({"status": {}});
        assert_eq!(outdated_fields(&served, &ours), ["names", "versions"]);

        let body = replacement(served, &ours);
        assert!(outdated_fields(&body, &ours).is_empty());
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["spec"]["conversion"]["strategy"], "None");
    }

    /// A malformed answer (no object, or a spec that is not one) becomes a plain body, not a panic.
    #[test]
    fn a_malformed_current_crd_does_not_panic() {
        let ours = postgres_cluster_crd();
        assert_eq!(outdated_fields(&json!("nonsense"), &ours).len(), 4);
        let body = replacement(json!({"spec": 3}), &ours);
        assert!(outdated_fields(&body, &ours).is_empty());
        let body = replacement(json!([1, 2]), &ours);
        assert!(outdated_fields(&body, &ours).is_empty());
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
