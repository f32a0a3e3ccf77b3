//! Our CustomResourceDefinition as data: names, the structural schema every field of a
//! `PostgresCluster` is checked against, the status and scale subresources, and kubectl's printer
//! columns. WORKSHOP.md, step 01. `kube/crd.yaml` is the same object as YAML;
//! `tests/crd/manifest.rs` proves they agree.

use serde_json::{json, Value};

use crate::api::{
    CRD_NAME, GROUP, KIND, LIST_KIND, MAX_SIZE, PLURAL, SHORT_NAME, SINGULAR, VERSION,
};

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
                    { "name": "Phase", "type": "string", "description": "Creating, Running, Recovering or Failed.", "jsonPath": ".status.phase" },
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
                    "replication": replication_schema(),
                },
            },
            "status": {
                "type": "object",
                "description": "What the operator last saw; written by the operator only.",
                "properties": {
                    "phase": {
                        "type": "string",
                        "description": "Where the cluster is in its life: Creating, Running, Recovering (step 05: restoring a backup) or Failed.",
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
                    "switchover": {
                        "type": "string",
                        "description": "The value of the workshop.example.com/switchover-to annotation last acted on: the pod it named became the primary. `kubectl annotate pgc NAME workshop.example.com/switchover-to=POD` asks for a planned switchover to the ready replica POD.",
                    },
                    "synchronous": {
                        "type": "object",
                        "description": "The synchronous standbys last set on the primary: its synchronous_standby_names is ANY number (standbys). Absent: asynchronous.",
                        "properties": {
                            "primary": {"type": "string", "description": "The primary they were set on."},
                            "number": {"type": "integer", "description": "How many of the standbys have each commit before it returns."},
                            "standbys": {"type": "array", "items": {"type": "string"}, "description": "The standbys' pod names."},
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

/// `spec.replication`: synchronous replication, opt-in (CloudNativePG's
/// `.spec.postgresql.synchronous`, cut down to `number` and `dataDurability`).
fn replication_schema() -> Value {
    json!({
        "type": "object",
        "description": "How the replicas follow the primary. Absent: asynchronous streaming, where a failover may lose the last commits.",
        "properties": {
            "synchronous": {
                "type": "object",
                "description": "Synchronous replication: a commit returns once `number` standbys have it (synchronous_standby_names = ANY number (...), kept up to date as members come and go).",
                "required": ["number"],
                "properties": {
                    "number": {
                        "type": "integer",
                        "minimum": 1,
                        "description": "How many standbys must have each commit: at least 1, less than spec.size.",
                    },
                    "dataDurability": {
                        "type": "string",
                        "enum": ["required", "preferred"],
                        "default": "required",
                        "description": "required: commits wait for enough standbys (no acknowledged commit lost; writes stop while too few run), and a failover that could lose a commit is refused. preferred: commits go on with fewer standbys or none, and a failover may lose the last commits.",
                    },
                },
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
