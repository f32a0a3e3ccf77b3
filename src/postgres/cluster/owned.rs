//! Support: skip it on first read — the objects beside the pods are created once and left alone;
//! the lesson is the pods.
//!
//! The objects a cluster owns besides its pods — Secret, ConfigMap, Services — created when they
//! are missing, each with an ownerReference so the garbage collector removes them with the
//! cluster. WORKSHOP.md, step 04 ("The objects a cluster owns").

use super::*;
use crate::client::ClientError;
use crate::postgres::manifests::Credentials;

impl<L: ClusterLayer> PostgresTask<L> {
    /// Create the Secret, ConfigMap and Services the pods need, those that do not exist. The
    /// Secret's passwords are made once: a Secret that exists is never rewritten, or every
    /// running pod's password would stop matching.
    pub(super) async fn ensure_owned(&self) -> Result<(), OwnedError> {
        let name = &self.cluster.metadata.name;
        let path = |plural: &str, object: &str| {
            format!("/api/v1/namespaces/{}/{plural}/{object}", self.namespace())
        };
        let secret = manifests::credentials_secret_name(name);
        if !self.exists(&path("secrets", &secret)).await? {
            let credentials = match L::credentials(self).await? {
                Some(credentials) => credentials,
                None => Credentials::generate()?,
            };
            let body = manifests::credentials_secret(&self.cluster, &credentials);
            self.create_owned("secrets", &body, &secret).await?;
        }
        L::ensure_owned(self).await?;
        for (plural, object, body) in [
            (
                "configmaps",
                manifests::init_config_map_name(name),
                manifests::init_scripts(&self.cluster),
            ),
            (
                "services",
                manifests::primary_service_name(name),
                manifests::primary_service(&self.cluster),
            ),
            (
                "services",
                manifests::replicas_service_name(name),
                manifests::replicas_service(&self.cluster),
            ),
        ] {
            if !self.exists(&path(plural, &object)).await? {
                self.create_owned(plural, &body, &object).await?;
            }
        }
        Ok(())
    }

    /// Does the object at `path` exist?
    pub async fn exists(&self, path: &str) -> Result<bool, ClientError> {
        match self.worker.client.get::<serde_json::Value>(path).await {
            Ok(_) => Ok(true),
            Err(error) if error.status_code() == Some(404) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// POST `body` to the namespace's `plural` with its name (it carries the cluster's
    /// ownerReference); "created `<Kind> <name>`" is said. A 409 (it exists) is fine.
    pub async fn create_owned(
        &self,
        plural: &str,
        body: &serde_json::Value,
        name: &str,
    ) -> Result<(), ClientError> {
        let path = format!("/api/v1/namespaces/{}/{plural}", self.namespace());
        match self
            .worker
            .client
            .create::<_, serde_json::Value>(&path, body)
            .await
        {
            Ok(_) => {
                self.say(format!("created {} {name}", kind_of(plural)));
                Ok(())
            }
            // 409: created meanwhile (by an earlier round whose answer we lost): fine.
            Err(error) if error.status_code() == Some(409) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

pub(super) fn kind_of(plural: &str) -> &'static str {
    match plural {
        "secrets" => "Secret",
        "configmaps" => "ConfigMap",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        _ => "Service",
    }
}

/// Why the cluster's Secret, ConfigMap or Services (or a layer's objects) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OwnedError {
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error("making the cluster's passwords: {0}")]
    Passwords(#[from] manifests::CredentialsError),
    /// A layer's reason, kept whole.
    #[error(transparent)]
    Layer(Box<dyn std::error::Error + Send + Sync>),
}
