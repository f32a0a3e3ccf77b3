//! The objects a cluster owns besides its pods — Secret, ConfigMap, Services — created when they
//! are missing, each with an ownerReference so the garbage collector removes them with the
//! cluster. WORKSHOP.md, step 04 ("The objects a cluster owns").

use super::*;

impl Task {
    /// Create the Secret, ConfigMap and Services the pods need, those that do not exist. The
    /// Secret's passwords are made once: a Secret that exists is never rewritten, or every
    /// running pod's password would stop matching.
    pub(super) async fn ensure_owned(&self) -> Result<(), OwnedError> {
        let namespace = self.namespace().to_string();
        let name = self.cluster.metadata.name.clone();
        let secret_name = manifests::credentials_secret_name(&name);
        if !self
            .exists(&format!(
                "/api/v1/namespaces/{namespace}/secrets/{secret_name}"
            ))
            .await?
        {
            let credentials = match self
                .bootstrap_source()
                .filter(|_| self.worker.options.backups)
            {
                // A cluster restored from another's backups has that cluster's roles and
                // passwords (they live in the database): its Secret must hold the same ones.
                Some(_) => self.source_credentials().await?,
                None => Credentials::generate()?,
            };
            self.create_owned(
                "secrets",
                &manifests::credentials_secret(&self.cluster, &credentials),
                &secret_name,
            )
            .await?;
        }
        if let Some(spec) = self
            .cluster
            .spec
            .backup
            .as_ref()
            .filter(|_| self.worker.options.backups)
        {
            let claim = backup::backup_claim_name(&name);
            if !self
                .exists(&format!(
                    "/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"
                ))
                .await?
            {
                self.create_owned(
                    "persistentvolumeclaims",
                    &backup::backup_claim(&self.cluster, &spec.storage_size),
                    &claim,
                )
                .await?;
            }
        }
        let config_map = manifests::init_config_map_name(&name);
        if !self
            .exists(&format!(
                "/api/v1/namespaces/{namespace}/configmaps/{config_map}"
            ))
            .await?
        {
            self.create_owned(
                "configmaps",
                &manifests::init_scripts(&self.cluster),
                &config_map,
            )
            .await?;
        }
        for (service, body) in [
            (
                manifests::primary_service_name(&name),
                manifests::primary_service(&self.cluster),
            ),
            (
                manifests::replicas_service_name(&name),
                manifests::replicas_service(&self.cluster),
            ),
        ] {
            if !self
                .exists(&format!(
                    "/api/v1/namespaces/{namespace}/services/{service}"
                ))
                .await?
            {
                self.create_owned("services", &body, &service).await?;
            }
        }
        Ok(())
    }

    /// The source cluster's passwords (`spec.bootstrap.fromBackup.cluster`'s Secret).
    pub(super) async fn source_credentials(&self) -> Result<Credentials, OwnedError> {
        let source = self
            .cluster
            .spec
            .bootstrap
            .as_ref()
            .and_then(|b| b.from_backup.as_ref())
            .map(|f| f.cluster.clone())
            .unwrap_or_default();
        let path = format!(
            "/api/v1/namespaces/{}/secrets/{}",
            self.namespace(),
            manifests::credentials_secret_name(&source)
        );
        let secret: serde_json::Value = self.worker.client.get(&path).await?;
        let key = |key: &str| -> Result<crate::config::SecretString, OwnedError> {
            let encoded = secret["data"][key].as_str().unwrap_or_default();
            let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded)
                .map_err(|_| OwnedError::SourceSecret {
                    path: path.clone(),
                    key: key.to_string(),
                })?;
            String::from_utf8(bytes)
                .map(crate::config::SecretString::new)
                .map_err(|_| OwnedError::SourceSecret {
                    path: path.clone(),
                    key: key.to_string(),
                })
        };
        Ok(Credentials {
            superuser_password: key(manifests::SUPERUSER_PASSWORD_KEY)?,
            replication_password: key(manifests::REPLICATION_PASSWORD_KEY)?,
        })
    }

    /// Is the cluster still there, the same one, and not being deleted? After `kubectl delete
    /// pgc` the garbage collector may remove the pods before this task hears of the deletion,
    /// which looks exactly like the loss of every member: without this check a restore would
    /// start for a cluster that is going (its seed then outlives it, owned by nothing). A list
    /// by name rather than a GET: the Role grants `list` and `watch` on postgresclusters only.
    /// Unsure (the list failed): not now, the next round asks again.
    pub(super) async fn still_wanted(&self) -> bool {
        let path = format!(
            "{}?fieldSelector=metadata.name%3D{}",
            crate::api::collection_path(self.namespace()),
            self.cluster.metadata.name
        );
        match self.worker.client.get::<serde_json::Value>(&path).await {
            Ok(list) => list["items"]
                .as_array()
                .and_then(|items| items.first())
                .is_some_and(|cluster| {
                    cluster["metadata"]["uid"] == self.cluster.metadata.uid.as_str()
                        && cluster["metadata"]["deletionTimestamp"].is_null()
                }),
            Err(_) => false,
        }
    }

    pub(super) async fn exists(&self, path: &str) -> Result<bool, ClientError> {
        match self.worker.client.get::<serde_json::Value>(path).await {
            Ok(_) => Ok(true),
            Err(error) if error.status_code() == Some(404) => Ok(false),
            Err(error) => Err(error),
        }
    }

    pub(super) async fn create_owned(
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
