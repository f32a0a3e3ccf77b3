//! The names and shapes of our custom resource, `PostgresCluster`, and the REST paths that reach it.
//!
//! WORKSHOP.md, step 01. Everything that must agree between the CRD we register, the URLs we call and
//! the objects we decode lives here, so a typo cannot make two of them disagree.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The API group our CustomResourceDefinition adds (the 2017 workshop's TPR used `lukeb0nd.com`).
pub const GROUP: &str = "workshop.example.com";
/// The one version we serve and store.
pub const VERSION: &str = "v1";
/// `apiVersion` as it appears in every object of ours.
pub const API_VERSION: &str = "workshop.example.com/v1";
pub const KIND: &str = "PostgresCluster";
pub const LIST_KIND: &str = "PostgresClusterList";
/// The plural is the URL segment: `/apis/workshop.example.com/v1/namespaces/NS/postgresclusters`.
pub const PLURAL: &str = "postgresclusters";
pub const SINGULAR: &str = "postgrescluster";
pub const SHORT_NAME: &str = "pgc";
/// A CRD's name must be `<plural>.<group>`; the API server rejects anything else.
pub const CRD_NAME: &str = "postgresclusters.workshop.example.com";

/// `/apis/workshop.example.com/v1`: what discovery serves once the CRD is established.
pub fn group_version_path() -> String {
    format!("/apis/{GROUP}/{VERSION}")
}

/// The namespaced collection: list (GET), watch (GET `?watch=true`) and create (POST) go here.
pub fn collection_path(namespace: &str) -> String {
    format!("/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}")
}

/// One object: get, replace (PUT), patch and delete.
pub fn object_path(namespace: &str, name: &str) -> String {
    format!("{}/{name}", collection_path(namespace))
}

/// The CRD object itself, cluster-scoped under apiextensions.k8s.io.
pub fn crd_path() -> String {
    format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
}

/// The fields of `metadata` an operator needs; everything else the server sends is ignored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
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
    pub uid: String,
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

/// A collection as a list returns it (`PostgresClusterList`, `PodList`, ...): the items, and the
/// resourceVersion they are current at, which is where a watch of the same collection starts.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "T: DeserializeOwned")]
pub struct ObjectList<T> {
    #[serde(default)]
    pub metadata: ListMeta,
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
}

/// The `metadata` of a list. (`continue` and `remainingItemCount` matter only to paged lists.)
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListMeta {
    #[serde(default)]
    pub resource_version: String,
}

/// What the user asks for. The schema in `crd.rs` enforces the same rules on the server side.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresClusterSpec {
    /// Number of Postgres pods, at least 1.
    pub size: i64,
    /// The postgres image tag, for example "16.4".
    pub version: String,
    /// A paused cluster is left alone by the reconcile loop.
    #[serde(default)]
    pub paused: bool,
}

/// What the operator last observed. Written through the `/status` subresource only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresClusterStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<serde_json::Value>,
}

/// One `PostgresCluster` object as the API server returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PostgresCluster {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: PostgresClusterSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PostgresClusterStatus>,
}

impl PostgresCluster {
    /// A new object to create (a POST body): the server fills in uid, resourceVersion and the rest.
    pub fn new(namespace: &str, name: &str, spec: PostgresClusterSpec) -> PostgresCluster {
        PostgresCluster {
            api_version: API_VERSION.to_string(),
            kind: KIND.to_string(),
            metadata: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
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

impl std::fmt::Display for PostgresClusterSpec {
    /// `{size: 3, version: 9.6.3, paused: false}` — the workshop's log shape, without Go's format verbs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{size: {}, version: {}, paused: {}}}",
            self.size, self.version, self.paused
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let spec = PostgresClusterSpec {
            size: 3,
            version: "9.6.3".into(),
            paused: false,
        };
        assert_eq!(spec.to_string(), "{size: 3, version: 9.6.3, paused: false}");
    }

    #[test]
    fn a_new_cluster_serializes_as_a_create_body() {
        let spec = PostgresClusterSpec {
            size: 3,
            version: "9.6.3".into(),
            paused: false,
        };
        let body = serde_json::to_value(PostgresCluster::new("default", "db", spec)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "apiVersion": "workshop.example.com/v1",
                "kind": "PostgresCluster",
                "metadata": {"name": "db", "namespace": "default"},
                "spec": {"size": 3, "version": "9.6.3", "paused": false},
            })
        );
    }
}
