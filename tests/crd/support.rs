//! Shared by the CRD tests: a CRD of our name that someone else wrote.

use postgres_operator::crd::{Registration, CRD_NAME};
use serde_json::{json, Value};

/// The CRD of a server nobody here wrote (the side-by-side benchmark's feed has one like it):
/// our group, names and v1 served, a schema that keeps any field, the status subresource but no
/// scale subresource, no columns.
pub fn foreign_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "postgresclusters.workshop.example.com"},
        "spec": {
            "group": "workshop.example.com",
            "scope": "Namespaced",
            "names": {
                "kind": "PostgresCluster", "listKind": "PostgresClusterList",
                "plural": "postgresclusters", "singular": "postgrescluster", "shortNames": ["pgc"],
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
        },
    })
}

/// What registering our CRD says when the server's copy already matches.
pub fn up_to_date() -> Registration {
    Registration::UpToDate {
        crd: CRD_NAME.into(),
    }
}
