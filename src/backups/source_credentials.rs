//! Support: skip it on first read — the passwords of the cluster a new one is bootstrapped from
//! (`spec.bootstrap.fromBackup`): the roles come with the restored data, so the new cluster's
//! Secret must hold the source's passwords. `mod.rs`'s `credentials` hook asks for them.
//!
//! WORKSHOP.md, step 06 ("What goes where": restore into a new cluster).

use crate::config::SecretString;
use crate::postgres::manifests::{
    self as pg, Credentials, REPLICATION_PASSWORD_KEY, SUPERUSER_PASSWORD_KEY,
};
use crate::postgres::{OwnedError, PostgresTask};

use super::api::BackupsSpec;
use super::Backups;

/// Why the source cluster's passwords could not be taken.
#[derive(Debug, thiserror::Error)]
#[error("{path}: key {key} is missing or not base64 text; the source cluster's Secret is needed to log in to its restored database")]
pub struct SourceSecretError {
    path: String,
    key: String,
}

/// The source cluster's passwords (`spec.bootstrap.fromBackup.cluster`'s Secret).
pub(super) async fn source_credentials(
    task: &PostgresTask<Backups>,
) -> Result<Credentials, OwnedError> {
    let source = BackupsSpec::read(&task.cluster().spec)
        .from_backup()
        .map(|f| f.cluster.clone())
        .unwrap_or_default();
    let path = format!(
        "/api/v1/namespaces/{}/secrets/{}",
        task.namespace(),
        pg::credentials_secret_name(&source)
    );
    let secret: serde_json::Value = task.client().get(&path).await?;
    let key = |key: &str| -> Result<SecretString, OwnedError> {
        let missing = || {
            OwnedError::Layer(Box::new(SourceSecretError {
                path: path.clone(),
                key: key.to_string(),
            }))
        };
        let encoded = secret["data"][key].as_str().unwrap_or_default();
        let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded)
            .map_err(|_| missing())?;
        String::from_utf8(bytes)
            .map(SecretString::new)
            .map_err(|_| missing())
    };
    Ok(Credentials {
        superuser_password: key(SUPERUSER_PASSWORD_KEY)?,
        replication_password: key(REPLICATION_PASSWORD_KEY)?,
    })
}
