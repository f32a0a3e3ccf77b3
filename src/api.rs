//! Our custom resource as Rust sees it: the typed `PostgresCluster` (its spec and status), the
//! metadata and lists every Kubernetes object shares, and the REST paths that reach our objects.
//!
//! WORKSHOP.md, step 02, where the operator first reads PostgresClusters. The CRD registered in
//! step 01 declares every field of every step; the fields of steps 05 and 06 (synchronous
//! replication, backups) are carried here untyped, in `more`, and typed in those steps' own
//! `api.rs` (`src/failover/api.rs`, `src/backups/api.rs`).
//! The names the CRD itself holds (group, version, the CRD's name) are step 01's, in
//! `crate::crd`; they are re-exported here, so one `use crate::api::...` names all of ours.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::crd::{crd_path, group_version_path, CRD_NAME, GROUP, VERSION};

mod kept;
mod spec;

pub use kept::{InlineStr, StringMap, Text, Uid, Word, LAST_APPLIED_ANNOTATION};
pub use spec::{
    describe_status, validate_spec, PostgresVersion, SpecError, VersionError, MAX_SIZE,
    OLDEST_MAJOR,
};

/// `apiVersion` as it appears in every object of ours.
pub const API_VERSION: &str = "workshop.example.com/v1";
pub const KIND: &str = "PostgresCluster";
/// The plural is the URL segment: `/apis/workshop.example.com/v1/namespaces/NS/postgresclusters`.
pub const PLURAL: &str = "postgresclusters";

/// The namespaced collection: list (GET), watch (GET `?watch=true`) and create (POST) go here.
pub fn collection_path(namespace: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")
}

/// One object: get, replace (PUT), patch and delete.
pub fn object_path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", collection_path(namespace))
}

/// The fields of `metadata` an operator needs; everything else the server sends is ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "Word::is_empty")]
    pub namespace: Word,
    #[serde(default, skip_serializing_if = "Uid::is_empty")]
    pub uid: Uid,
    /// Opaque: compare for equality only, never parse or order it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    /// Bumped by the server on spec changes only (not status, not metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Free-form notes on the object; steps 05 and 06 read requests here (a switchover, a backup).
    #[serde(default, skip_serializing_if = "StringMap::is_empty")]
    pub annotations: StringMap,
    /// Kept so that a type written back whole (a `PUT`, as the leader's Lease is) keeps them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Who owns this object; the garbage collector deletes it once every owner is gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// One entry of `metadata.ownerReferences`. The `uid` is what counts: an owner deleted and
/// re-created under the same name is a different owner.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: Uid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_owner_deletion: Option<bool>,
}

/// Anything carrying standard object metadata. The watch keys what it has seen by the
/// `namespace/name` it reads through this.
pub trait HasMetadata {
    fn metadata(&self) -> &ObjectMeta;
}

/// A collection as a list returns it (`PostgresClusterList`, `PodList`, ...), or one page of it
/// (`crate::watch::pages`): the items, and the resourceVersion they are current at, which is where
/// a watch of the same collection starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
pub struct ObjectList<T> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
}

/// The `metadata` of a list.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    /// The snapshot the whole list belongs to. Every page of one list carries the same.
    #[serde(default)]
    pub resource_version: String,
    /// Only on a page with more after it. Opaque: send it back as it came.
    #[serde(default, rename = "continue")]
    pub continue_token: String,
    /// How many objects the pages after this one hold. An estimate (Kubernetes promises neither
    /// that it is set nor that it is exact): absent on the last page, with a label or field
    /// selector, and from servers before 1.15.
    #[serde(default)]
    pub remaining_item_count: Option<u64>,
}

/// What the user asks for. The schema in `kube/crd.yaml` enforces the same rules on the server side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "kept::SpecFields")]
pub struct PostgresClusterSpec {
    /// Number of Postgres pods, 1 to 7: one primary, the rest streaming replicas.
    pub size: i64,
    /// The postgres image tag, for example "16" or "16.4" (see [`PostgresVersion`]).
    pub version: String,
    /// A paused cluster is left alone by the reconcile loop.
    #[serde(default)]
    pub paused: bool,
    /// The fields later steps read (step 05: `replication`; step 06: `backup`, `bootstrap`), as
    /// the server sent them: the CRD of step 01 declares them all, and this step carries them
    /// without knowing their shape. Each later step decodes its own (`field` in
    /// `src/postgres/api.rs`).
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

/// What the operator last observed. Written through the `/status` subresource only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", from = "kept::StatusFields")]
pub struct PostgresClusterStatus {
    /// `Creating`, `Running` or `Failed` (step 04); `Recovering` (step 05: the primary found in
    /// recovery after a restart, until promoted in place; step 06: restoring a backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Word>,
    /// The pod name of the current primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// How many member pods exist: the scale subresource's `status.replicas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// How many member pods are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_instances: Option<i64>,
    /// The version every member runs (an upgrade is under way while it differs from the spec's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// A label selector string matching the member pods. The scale subresource serves it as
    /// `status.selector`, which `kubectl scale` ignores but a HorizontalPodAutoscaler needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// The `metadata.generation` of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// One per type (`Available`, `Progressing`, `Degraded`): the CRD declares the list a map
    /// keyed by `type`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The fields later steps write (step 05: `switchover`, `synchronous`; step 06:
    /// `lastBackup`, `backupRequested`, `restore`), carried as they are, so that a status
    /// written by one step keeps the others'. Each step reads and writes its own (`field` and
    /// `set_field` in `src/postgres/api.rs`).
    #[serde(flatten)]
    pub more: Map<String, Value>,
}

/// One status condition, in the shape every Kubernetes API uses (`metav1.Condition`), so
/// `kubectl wait --for=condition=Available pgc/NAME` and `kubectl describe` understand it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: Word,
    /// `"True"`, `"False"` or `"Unknown"`: a string, not a bool, because "we do not know" is a state.
    pub status: Word,
    /// One CamelCase word; the CRD schema refuses an empty one, as metav1.Condition does.
    pub reason: Word,
    pub message: String,
    /// RFC 3339. Moves only when `status` flips, not on every write.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// One `PostgresCluster` object as the API server returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresCluster {
    #[serde(default)]
    pub api_version: Word,
    #[serde(default)]
    pub kind: Word,
    /// Without what no step reads (`kept.rs`: labels, finalizers, kubectl's last-applied
    /// annotation): the operator never writes a cluster back whole.
    #[serde(default, deserialize_with = "kept::watched_metadata")]
    pub metadata: ObjectMeta,
    pub spec: PostgresClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PostgresClusterStatus>,
}

impl PostgresCluster {
    /// A new object to create (a POST body): the server fills in uid, resourceVersion and the rest.
    pub fn new(namespace: &str, name: &str, spec: PostgresClusterSpec) -> PostgresCluster {
        PostgresCluster {
            api_version: API_VERSION.into(),
            kind: KIND.into(),
            metadata: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.into(),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }

    /// `namespace/name`: how logs and the controller's map name a cluster.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }
}

impl HasMetadata for PostgresCluster {
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
}

impl PostgresClusterSpec {
    /// `size` members of `version`, with nothing else asked for (no backups, asynchronous).
    pub fn new(size: i64, version: &str) -> PostgresClusterSpec {
        PostgresClusterSpec {
            size,
            version: version.to_string(),
            paused: false,
            more: Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::api::{field, set_field};

    #[test]
    fn paths_follow_the_rest_layout() {
        assert_eq!(
            object_path("default", "db"),
            "/apis/workshop.example.com/v1/namespaces/default/postgresclusters/db"
        );
        assert_eq!(CRD_NAME, format!("{PLURAL}.{GROUP}"));
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn spec_prints_like_the_workshop_log() {
        let spec = PostgresClusterSpec::new(3, "16");
        assert_eq!(spec.to_string(), "{size: 3, version: 16, paused: false}");
    }

    #[test]
    fn a_new_cluster_serializes_as_a_create_body() {
        let spec = PostgresClusterSpec::new(3, "16");
        let body = serde_json::to_value(PostgresCluster::new("default", "db", spec)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "workshop.example.com/v1",
                "kind": "PostgresCluster",
                "metadata": {"name": "db", "namespace": "default"},
                "spec": {"size": 3, "version": "16", "paused": false},
            })
        );
    }

    /// Majors 13 and up, with or without a minor, parse and print back unchanged.
    #[test]
    fn versions_parse_and_print_as_the_image_tag() {
        for tag in ["13", "16", "16.4", "17.0", "99.12", "100"] {
            let version: PostgresVersion = tag.parse().unwrap();
            assert_eq!(version.to_string(), tag);
        }
        assert_eq!(
            "16.4".parse::<PostgresVersion>(),
            Ok(PostgresVersion {
                major: 16,
                minor: Some(4)
            })
        );
        assert!("15.9".parse::<PostgresVersion>().unwrap() < "16".parse().unwrap());
    }

    /// Anything else is refused, and the message names the value and the rule it broke.
    #[test]
    fn versions_that_are_not_tags_or_too_old_are_refused_by_name() {
        for bad in [
            "",
            "abc",
            "16.",
            ".4",
            "16.4.1",
            "v16",
            "16-alpine",
            " 16",
            "016",
            "16.04",
            "+16",
        ] {
            let error = bad.parse::<PostgresVersion>().unwrap_err();
            assert_eq!(
                error,
                VersionError::NotAVersion { value: bad.into() },
                "{bad:?}"
            );
        }
        let error = "9.6".parse::<PostgresVersion>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "\"9.6\" is too old: major version 9 is below 13, the oldest this operator runs"
        );
        assert_eq!(
            "abc".parse::<PostgresVersion>().unwrap_err().to_string(),
            "\"abc\" is not a postgres version: expected MAJOR or MAJOR.MINOR in digits, e.g. \"16\" or \"16.4\""
        );
    }

    /// The status and its conditions use the API's camelCase names, and leave out what is unset.
    #[test]
    fn status_serializes_with_api_names_and_without_unset_fields() {
        let status = PostgresClusterStatus {
            phase: Some("Running".into()),
            primary: Some("db-x7k2p".into()),
            ready_instances: Some(3),
            conditions: vec![Condition {
                type_: "Available".into(),
                status: "True".into(),
                reason: "PrimaryReady".into(),
                message: "the primary accepts connections".into(),
                last_transition_time: "2025-01-02T03:04:05Z".into(),
                observed_generation: None,
            }],
            ..PostgresClusterStatus::default()
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "phase": "Running",
                "primary": "db-x7k2p",
                "readyInstances": 3,
                "conditions": [{
                    "type": "Available", "status": "True", "reason": "PrimaryReady",
                    "message": "the primary accepts connections",
                    "lastTransitionTime": "2025-01-02T03:04:05Z",
                }],
            })
        );
        let back: PostgresClusterStatus = serde_json::from_value(json).unwrap();
        assert_eq!(back, status);
        assert_eq!(
            serde_json::to_value(PostgresClusterStatus::default()).unwrap(),
            serde_json::json!({})
        );
    }

    fn spec(size: i64, version: &str) -> PostgresClusterSpec {
        PostgresClusterSpec::new(size, version)
    }

    /// A task refuses a size outside 1..=7 and a version that is not a tag of major 13 or later,
    /// naming the field and the rule.
    #[test]
    fn setup_rejects_sizes_out_of_range_and_bad_versions() {
        assert_eq!(validate_spec(&spec(3, "16")), Ok(()));
        assert_eq!(validate_spec(&spec(1, "16.4")), Ok(()));
        assert_eq!(validate_spec(&spec(7, "13")), Ok(()));
        for size in [0, 8, -1] {
            assert_eq!(
                validate_spec(&spec(size, "16")),
                Err(SpecError::SizeOutOfRange { size })
            );
        }
        assert_eq!(
            validate_spec(&spec(8, "16")).unwrap_err().to_string(),
            "spec.size must be between 1 and 7, got 8"
        );
        let error = validate_spec(&spec(3, "9.6.3")).unwrap_err();
        assert!(matches!(
            error,
            SpecError::Version(VersionError::NotAVersion { .. })
        ));
        assert_eq!(
            validate_spec(&spec(3, "9.6")).unwrap_err().to_string(),
            "spec.version: \"9.6\" is too old: major version 9 is below 13, the oldest this operator runs"
        );
        assert!(matches!(
            validate_spec(&spec(1, " ")),
            Err(SpecError::Version(VersionError::NotAVersion { .. }))
        ));
    }

    /// The fields of later steps pass through a decode and an encode unchanged (a status written
    /// by one step keeps another's), and the log line prints them as they came.
    #[test]
    fn later_steps_fields_are_carried_through_and_printed() {
        let json = serde_json::json!({
            "size": 3, "version": "16", "paused": false,
            "backup": {"storageSize": "256Mi", "keep": 2},
            "replication": {"synchronous": {"number": 1, "dataDurability": "required"}},
        });
        let spec: PostgresClusterSpec = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), json);
        assert_eq!(
            spec.to_string(),
            "{size: 3, version: 16, paused: false, backup: {keep: 2, storageSize: 256Mi}, \
             replication: {synchronous: {dataDurability: required, number: 1}}}"
        );

        let json = serde_json::json!({
            "phase": "Running",
            "switchover": "db-b",
            "lastBackup": {"name": "base/x", "time": "2026-01-22T10:15:00Z"},
        });
        let mut status: PostgresClusterStatus = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(serde_json::to_value(&status).unwrap(), json);
        assert_eq!(
            field::<String>(&status.more, "switchover").unwrap(),
            Some("db-b".into())
        );
        assert_eq!(field::<String>(&status.more, "restore").unwrap(), None);
        assert!(field::<i64>(&status.more, "switchover").is_err());
        set_field(&mut status.more, "switchover", None::<&String>);
        set_field(&mut status.more, "backupRequested", Some(&"1"));
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({
                "phase": "Running",
                "backupRequested": "1",
                "lastBackup": {"name": "base/x", "time": "2026-01-22T10:15:00Z"},
            })
        );
    }

    /// A missing or empty status prints as the workshop's `<none>`; otherwise only set fields.
    #[test]
    fn status_prints_none_or_its_set_fields() {
        assert_eq!(describe_status(None), "<none>");
        assert_eq!(
            describe_status(Some(&PostgresClusterStatus::default())),
            "<none>"
        );
        let status = PostgresClusterStatus {
            phase: Some("Running".into()),
            size: Some(3),
            ..Default::default()
        };
        assert_eq!(describe_status(Some(&status)), "{phase: Running, size: 3}");
    }
}
