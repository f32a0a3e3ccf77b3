//! The objects beside a cluster's pods: the Secret with its two passwords, the ConfigMap with
//! the seed's first-start script, and the two Services. Support: a learner may skip it on first
//! read — they are created once, when missing, and left alone; the lesson is the pods.
//!
//! WORKSHOP.md, step 04 ("The objects a cluster owns").

use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::{json, Value};

use super::{
    Role, INIT_SCRIPT_KEY, PORT_NAME, POSTGRES_PORT, REPLICATION_PASSWORD_KEY, ROLE_LABEL,
    SUPERUSER_PASSWORD_KEY,
};
use crate::api::PostgresCluster;
use crate::config::SecretString;
use crate::controller::pods::{owner_reference, pod_labels, CLUSTER_LABEL};

/// `<name>-credentials`
pub fn credentials_secret_name(cluster_name: &str) -> String {
    format!("{cluster_name}-credentials")
}

/// `<name>-init`
pub fn init_config_map_name(cluster_name: &str) -> String {
    format!("{cluster_name}-init")
}

/// `<name>-primary`: also the host replicas clone from and stream from.
pub fn primary_service_name(cluster_name: &str) -> String {
    format!("{cluster_name}-primary")
}

/// `<name>-replicas`
pub fn replicas_service_name(cluster_name: &str) -> String {
    format!("{cluster_name}-replicas")
}

/// The seed's first-start script. The entrypoint sources it after initdb, with a temporary
/// server listening on the Unix socket only, and never again once PGDATA holds a database.
const INIT_SCRIPT: &str = r#"# Made by the postgres operator: the replication role and its pg_hba.conf line.
: "${REPLICATION_PASSWORD:?is not set: it comes from the cluster's credentials Secret}"
# psql's :'pw' quotes the password as an SQL literal, whatever characters it holds.
# password_encryption is set here because PG 13 still defaults to md5, which the scram-sha-256
# line below would then refuse.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres --no-password --no-psqlrc \
  --set pw="$REPLICATION_PASSWORD" <<'SQL'
SET password_encryption = 'scram-sha-256';
CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw';
SQL
# The entrypoint's own `host all all all ...` line does not cover replication connections: the
# database keyword `all` does not match `replication`. pg_basebackup copies this file, so every
# replica, and so every replica promoted later, has the line too.
echo "host replication replicator all scram-sha-256" >> "$PGDATA/pg_hba.conf"
"#;

/// The two passwords of a cluster. `Debug` prints them redacted.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub superuser_password: SecretString,
    pub replication_password: SecretString,
}

/// Where random bytes come from on Linux; never blocks once the kernel's pool is initialised.
pub const RANDOM_SOURCE: &str = "/dev/urandom";
/// 24 random bytes: 192 bits, 32 characters of base64url.
const PASSWORD_BYTES: usize = 24;

/// Making the passwords failed.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("reading random bytes from {path}: {source}")]
    ReadRandom {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Credentials {
    /// Two fresh random passwords from [`RANDOM_SOURCE`].
    pub fn generate() -> Result<Credentials, CredentialsError> {
        Credentials::generate_from(Path::new(RANDOM_SOURCE))
    }

    /// Two fresh random passwords, reading random bytes from `random_source`.
    pub fn generate_from(random_source: &Path) -> Result<Credentials, CredentialsError> {
        Ok(Credentials {
            superuser_password: random_password(random_source)?,
            replication_password: random_password(random_source)?,
        })
    }
}

/// base64url without padding: letters, digits, `-` and `_`, so the password needs no quoting in
/// a libpq conninfo string (`primary_conninfo`), a shell or a URL.
fn random_password(random_source: &Path) -> Result<SecretString, CredentialsError> {
    let failed = |source| CredentialsError::ReadRandom {
        path: random_source.to_path_buf(),
        source,
    };
    let mut bytes = [0u8; PASSWORD_BYTES];
    std::fs::File::open(random_source)
        .and_then(|mut file| file.read_exact(&mut bytes))
        .map_err(failed)?;
    Ok(SecretString::new(
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes),
    ))
}

/// `metadata` of an object owned by `cluster`.
fn owned_metadata(cluster: &PostgresCluster, name: &str) -> Value {
    json!({
        "name": name,
        "namespace": cluster.metadata.namespace,
        "labels": pod_labels(&cluster.metadata.name),
        "ownerReferences": [owner_reference(cluster)],
    })
}

/// Secret `<name>-credentials`. Create it once and never replace it: `POSTGRES_PASSWORD` and the
/// replication password only take effect when the seed runs initdb, so new values later would
/// lock everyone out.
pub fn credentials_secret(cluster: &PostgresCluster, credentials: &Credentials) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": owned_metadata(cluster, &credentials_secret_name(&cluster.metadata.name)),
        "type": "Opaque",
        // stringData is write-only: the API server base64-encodes it into `data`.
        "stringData": {
            SUPERUSER_PASSWORD_KEY: credentials.superuser_password.expose(),
            REPLICATION_PASSWORD_KEY: credentials.replication_password.expose(),
        },
    })
}

/// Service `<name>-primary`: the pod labelled `role: primary`. Clients write through it and
/// replicas stream from it.
pub fn primary_service(cluster: &PostgresCluster) -> Value {
    service(
        cluster,
        &primary_service_name(&cluster.metadata.name),
        Role::Primary,
    )
}

/// Service `<name>-replicas`: every pod labelled `role: replica`, for read-only queries.
pub fn replicas_service(cluster: &PostgresCluster) -> Value {
    service(
        cluster,
        &replicas_service_name(&cluster.metadata.name),
        Role::Replica,
    )
}

fn service(cluster: &PostgresCluster, name: &str, role: Role) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": owned_metadata(cluster, name),
        "spec": {
            // Endpoints list only pods that match every label here and are Ready, so an
            // unready primary drops out of `<name>-primary` by itself.
            "selector": {
                CLUSTER_LABEL: cluster.metadata.name,
                ROLE_LABEL: role.label_value(),
            },
            "ports": [{
                "name": PORT_NAME,
                "protocol": "TCP",
                "port": POSTGRES_PORT,
                // By name: the container port called `postgres`, whatever its number.
                "targetPort": PORT_NAME,
            }],
        },
    })
}

/// ConfigMap `<name>-init`, mounted at `/docker-entrypoint-initdb.d`: creates the `replicator`
/// role and allows it to replicate. Only the seed ever runs it (the entrypoint runs init scripts
/// on an empty PGDATA only; a replica's PGDATA is a copy).
pub fn init_scripts(cluster: &PostgresCluster) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": owned_metadata(cluster, &init_config_map_name(&cluster.metadata.name)),
        "data": {INIT_SCRIPT_KEY: INIT_SCRIPT},
    })
}
