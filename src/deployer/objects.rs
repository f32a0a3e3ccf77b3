//! Support: skip it on first read — the Kubernetes objects a Deployer owns (one Deployment per
//! version, one Service for both) and the few calls the task makes on them, each over step 01's
//! `Client`; what `mod.rs` decides is the lesson, this is how it is sent.
//!
//! WORKSHOP.md, "Your own operator: the Deployer".

use serde_json::{json, Value};

use super::api::{Deployer, DeploymentSpec, API_VERSION, KIND};
use crate::client::{Client, ClientError, Patch};

/// Every object of a Deployer carries it: how its Deployments and Service find their pods.
pub const DEPLOYER_LABEL: &str = "workshop.example.com/deployer";
/// A version's pods carry it too, so each Deployment's selector takes its own pods only.
pub const VERSION_LABEL: &str = "workshop.example.com/version";

/// `<name>-<version>`: the demo's names, `nginx-1.7.7`.
pub fn deployment_name(deployment: &DeploymentSpec, version: &str) -> String {
    format!("{}-{version}", deployment.name)
}

fn deployments_path(namespace: &str) -> String {
    format!("/apis/apps/v1/namespaces/{namespace}/deployments")
}

/// The pods' labels: the spec's, and ours (the Service selects the spec's and the Deployer's).
fn pod_labels(deployer: &Deployer, deployment: &DeploymentSpec, version: &str) -> Value {
    let mut labels = json!(deployment.labels);
    labels[DEPLOYER_LABEL] = json!(deployer.metadata.name);
    labels[VERSION_LABEL] = json!(version);
    labels
}

/// Owned by the Deployer: deleting it deletes its Deployments and Service (garbage collection).
fn owner(deployer: &Deployer) -> Value {
    json!([{
        "apiVersion": API_VERSION, "kind": KIND, "name": deployer.metadata.name,
        "uid": deployer.metadata.uid, "controller": true, "blockOwnerDeletion": true,
    }])
}

/// The Deployment of one version, `image:version` with `replicas` pods.
pub fn deployment(
    deployer: &Deployer,
    spec: &DeploymentSpec,
    version: &str,
    replicas: i64,
) -> Value {
    let labels = pod_labels(deployer, spec, version);
    let selector = json!({DEPLOYER_LABEL: deployer.metadata.name, VERSION_LABEL: version});
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": deployment_name(spec, version),
            "labels": labels,
            "ownerReferences": owner(deployer),
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": spec.name,
                    "image": format!("{}:{version}", spec.image),
                    "ports": [{"containerPort": 80}],
                }]},
            },
        },
    })
}

/// One Service for both versions: it selects the spec's labels and the Deployer's, not the
/// version, so traffic splits by replica count.
pub fn service(deployer: &Deployer, spec: &DeploymentSpec) -> Value {
    let mut selector = json!(spec.labels);
    selector[DEPLOYER_LABEL] = json!(deployer.metadata.name);
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": spec.name, "ownerReferences": owner(deployer)},
        "spec": {"selector": selector, "ports": [{"port": 80, "targetPort": 80}]},
    })
}

/// Create `object` in `collection`; one already there (409) is fine.
async fn create(client: &Client, collection: &str, object: &Value) -> Result<(), ClientError> {
    match client.create::<_, Value>(collection, object).await {
        Err(error) if error.status_code() != Some(409) => Err(error),
        _ => Ok(()),
    }
}

pub async fn create_service(
    client: &Client,
    namespace: &str,
    service: &Value,
) -> Result<(), ClientError> {
    create(
        client,
        &format!("/api/v1/namespaces/{namespace}/services"),
        service,
    )
    .await
}

/// Create the Deployment, or scale it to its `spec.replicas` if it is there.
pub async fn apply_deployment(
    client: &Client,
    namespace: &str,
    deployment: &Value,
) -> Result<(), ClientError> {
    let collection = deployments_path(namespace);
    match client.create::<_, Value>(&collection, deployment).await {
        Err(error) if error.status_code() == Some(409) => {
            let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
            scale(
                client,
                namespace,
                name,
                deployment["spec"]["replicas"].as_i64().unwrap_or(0),
            )
            .await
        }
        answer => answer.map(|_| ()),
    }
}

pub async fn scale(
    client: &Client,
    namespace: &str,
    name: &str,
    replicas: i64,
) -> Result<(), ClientError> {
    let path = format!("{}/{name}", deployments_path(namespace));
    let patch = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    client.patch::<Value>(&path, &patch).await.map(|_| ())
}

/// Delete a Deployment; one already gone (404) is fine.
pub async fn delete(client: &Client, namespace: &str, name: &str) -> Result<(), ClientError> {
    let path = format!("{}/{name}", deployments_path(namespace));
    match client.delete::<Value>(&path).await {
        Err(error) if error.status_code() != Some(404) => Err(error),
        _ => Ok(()),
    }
}

/// `(spec.replicas, status.availableReplicas)` of a Deployment, `None` when it is not there.
pub async fn replicas(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<(i64, i64)>, ClientError> {
    let path = format!("{}/{name}", deployments_path(namespace));
    match client.get::<Value>(&path).await {
        Ok(found) => {
            let count = |field: &Value| field.as_i64().unwrap_or(0);
            Ok(Some((
                count(&found["spec"]["replicas"]),
                count(&found["status"]["availableReplicas"]),
            )))
        }
        Err(error) if error.status_code() == Some(404) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Merge-patch the whole status: its `null`s remove what went away.
pub async fn write_status(client: &Client, deployer: &Deployer) -> Result<Deployer, ClientError> {
    let path = format!(
        "{}/{}/status",
        super::api::collection_path(&deployer.metadata.namespace),
        deployer.metadata.name
    );
    let patch = Patch::Merge(json!({"status": deployer.status}));
    client.patch(&path, &patch).await
}
