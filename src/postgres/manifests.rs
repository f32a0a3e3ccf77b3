//! The objects a `PostgresCluster` owns, as JSON bodies to POST (and, in `sql.rs`, the `psql`
//! commands run inside its pods through `pods/exec`). Pure functions: nothing here talks to the
//! API server.
//!
//! WORKSHOP.md, step 04. For a cluster `db`:
//!
//! ```text
//!   Secret    db-credentials   superuser-password, replication-password (random, made once)
//!   ConfigMap db-init          10-replication.sh: role `replicator` + its pg_hba.conf line
//!   Service   db-primary  ──selects──▶ role=primary   (what clients and replicas connect to)
//!   Service   db-replicas ──selects──▶ role=replica   (read-only traffic)
//!   Pod       db-xxxxx (generateName) role=primary: postgres:<version>, initdb on first start
//!   Pod       db-yyyyy                role=replica: init container `clone` = pg_basebackup -R
//!                                      from db-primary, then the same postgres container
//! ```
//!
//! Everything uses the official `postgres` image through its documented contract (see
//! `docker-entrypoint.sh` in docker-library/postgres): `POSTGRES_PASSWORD` and `PGDATA` in the
//! environment, scripts in `/docker-entrypoint-initdb.d` run once on an empty PGDATA, and the
//! image's postgres user (uid 999) running everything, so no step needs root. Each object carries
//! a controller ownerReference to its cluster: deleting the cluster deletes them all.

use serde_json::{json, Value};

use crate::api::PostgresCluster;
use crate::controller::pods::{owner_reference, pod_labels};

mod names;
mod owned;
mod pieces;
mod sql;

pub use names::*;
pub use owned::{
    credentials_secret, credentials_secret_name, init_config_map_name, init_scripts,
    primary_service, primary_service_name, replicas_service, replicas_service_name, Credentials,
    CredentialsError, RANDOM_SOURCE,
};
pub use pieces::{from_secret, role_patch, shell_probe, STARTED_CHECK};
pub use sql::{
    parse_bool, parse_lsn, psql_argv, restart_wal_receiver_argv, PsqlOutputError, ReplicaLsns,
    CURRENT_WAL_LSN_SQL, IS_IN_RECOVERY_SQL, PROMOTE_SQL, REPLICA_LSNS_SQL,
};

/// A replica's init container: copy the primary, reached through the `<name>-primary` Service,
/// into PGDATA. `-R` writes `standby.signal` and `primary_conninfo` (host = the Service name,
/// password included), so the main container's entrypoint skips initdb and starts a hot
/// standby that streams from whichever pod the Service selects.
const CLONE_SCRIPT: &str = r#"set -eu
# Init containers run again when a pod restarts, and the emptyDir survives that: a database
# already here is this replica's own (a later step may have promoted it since). Keep it.
if [ -s "$PGDATA/PG_VERSION" ]; then
  echo "clone: $PGDATA already holds a database; keeping it"
  exit 0
fi
# Copy into a side directory and rename it at the end, so PGDATA never holds a half-copied
# cluster that the check above would keep.
partial="$PGDATA.partial"
rm -rf "$partial"
until pg_isready -q -h "$PRIMARY_HOST" -p 5432; do
  echo "clone: waiting for $PRIMARY_HOST:5432"
  sleep 2
done
# -c fast: checkpoint now rather than spread over minutes; -X stream: the WAL written during the
# copy comes along on a second connection, so the copy is consistent on its own.
pg_basebackup -h "$PRIMARY_HOST" -p 5432 -U replicator -d "application_name=$POD_NAME" \
  -D "$partial" -R -X stream -c fast
rm -rf "$PGDATA"
mv "$partial" "$PGDATA"
echo "clone: copied $PRIMARY_HOST into $PGDATA"
"#;

/// `pg_isready` exits 0 (accepting connections), 1 (rejecting: starting up, replaying WAL before
/// it is consistent, shutting down), 2 (no response) or 3 (no attempt). 0 and 1 mean the
/// postmaster is there and working, so "alive" is `<= 1`.
pub const ALIVE_CHECK: &str = "pg_isready -q -h 127.0.0.1 -p 5432; [ $? -le 1 ]";

/// Ready: accepting connections (exit 0), over TCP at 127.0.0.1, which the entrypoint's
/// temporary init server does not listen on, so a seed running initdb is not Ready.
const READY_CHECK: &str = "pg_isready -q -h 127.0.0.1 -p 5432";

/// A pod's role in its cluster, the value of [`ROLE_LABEL`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

impl Role {
    pub fn label_value(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }
}

/// The postgres container, the same for both roles: a pod's spec cannot change after it is
/// created, and a replica that becomes the primary keeps its pod.
fn postgres_container(cluster: &PostgresCluster, image: &str) -> Value {
    json!({
        "name": POSTGRES_CONTAINER,
        "image": image,
        // `args` replaces the image's CMD; its ENTRYPOINT, docker-entrypoint.sh, runs them.
        // wal_keep_size (0 by default): WAL kept on the primary, so a replica that fell behind
        // catches up instead of failing with "requested WAL segment has already been removed".
        "args": ["postgres", "-c", "wal_keep_size=512MB"],
        "ports": [{"name": PORT_NAME, "containerPort": POSTGRES_PORT, "protocol": "TCP"}],
        "env": [
            {"name": "PGDATA", "value": PGDATA},
            // Read by initdb on the seed's first start only.
            from_secret(cluster, "POSTGRES_PASSWORD", SUPERUSER_PASSWORD_KEY),
            // Read by the init script, likewise on the seed's first start only.
            from_secret(cluster, "REPLICATION_PASSWORD", REPLICATION_PASSWORD_KEY),
        ],
        "volumeMounts": [
            {"name": "data", "mountPath": DATA_MOUNT},
            {"name": "init", "mountPath": INITDB_DIR, "readOnly": true},
        ],
        // Holds readiness and liveness back until postgres listens on TCP (after initdb on the
        // seed's first start); each probe waits up to 2 s for it. 2 s × 300 = 10 minutes.
        "startupProbe": shell_probe(STARTED_CHECK, 2, 300),
        // Ready decides which pods the Services send traffic to.
        // ANCHOR: readiness_probe
        "readinessProbe": shell_probe(READY_CHECK, 2, 2),
        // ANCHOR_END: readiness_probe
        // Only "no postmaster" for 2 × 30 s restarts the container: a replica replaying WAL
        // rejects connections (exit 1) and is alive.
        // ANCHOR: liveness_probe
        "livenessProbe": shell_probe(ALIVE_CHECK, 30, 2),
        // ANCHOR_END: liveness_probe
    })
}

/// A replica's init container: `pg_basebackup -R` from the `<name>-primary` Service (the
/// script is `CLONE_SCRIPT`, above).
fn clone_container(cluster: &PostgresCluster, image: &str) -> Value {
    json!({
        "name": CLONE_CONTAINER,
        // The same image as the server, so pg_basebackup's major version matches the primary's:
        // a physical copy only works between servers of one major version.
        "image": image,
        // `command` replaces the image's ENTRYPOINT: this container runs no server.
        "command": ["sh", "-c", CLONE_SCRIPT],
        "env": [
            {"name": "PGDATA", "value": PGDATA},
            // The Service, never a pod's address: the Service follows the primary label, so a
            // replica made (or reconnecting) later reaches whichever pod is primary then.
            {"name": "PRIMARY_HOST", "value": primary_service_name(&cluster.metadata.name)},
            // libpq reads PGPASSWORD; -R then writes it into primary_conninfo, which is how the
            // running standby (whose environment has no such variable) logs in.
            from_secret(cluster, "PGPASSWORD", REPLICATION_PASSWORD_KEY),
            // application_name = the pod's name, so pg_stat_replication on the primary says
            // which replica each row is.
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "volumeMounts": [{"name": "data", "mountPath": DATA_MOUNT}],
    })
}

/// A pod of `cluster` in `role`: a primary starts from initdb (the seed), a replica from a copy
/// of the primary. Named by the API server from `generateName: <name>-`: a new pod never
/// reuses a deleted one's name (and so its DNS name or its Service endpoint).
pub fn pod(cluster: &PostgresCluster, role: Role) -> Value {
    let name = &cluster.metadata.name;
    let image = format!("postgres:{}", cluster.spec.version);
    let mut labels = pod_labels(name);
    labels.insert(ROLE_LABEL.to_string(), role.label_value().to_string());
    let mut init = Vec::new();
    // ANCHOR: replica_pod
    if role == Role::Replica {
        init.push(clone_container(cluster, &image));
    }
    // ANCHOR_END: replica_pod
    let spec = json!({
        "securityContext": {
            // The image's postgres user. Running as it from the start means the entrypoint has
            // nothing to chown and no gosu step: no process in the pod is ever root.
            "runAsUser": POSTGRES_UID,
            "runAsGroup": POSTGRES_UID,
            // Volumes are made group-owned by 999, so the user can write to them whatever the
            // volume plugin's defaults.
            "fsGroup": POSTGRES_UID,
            // The kubelet refuses to start a container that would run as uid 0.
            "runAsNonRoot": true,
        },
        // A crashed container restarts in place on the same emptyDir.
        "restartPolicy": "Always",
        // The official image's STOPSIGNAL is SIGINT: a fast shutdown, which disconnects the
        // clients, writes a shutdown checkpoint, and (on a primary) waits until the walsenders
        // have shipped all WAL to the connected replicas, so none is left behind its last
        // write. The kubelet's SIGKILL when the grace period ends skips all of that; 60 s
        // covers a busy server's checkpoint.
        "terminationGracePeriodSeconds": 60,
        "containers": [postgres_container(cluster, &image)],
        "volumes": [
            // Data lives as long as the pod, as in etcd-operator: a lost replica is replaced by
            // a new one cloned from the primary. Container restarts keep it.
            {"name": "data", "emptyDir": {}},
            {"name": "init", "configMap": {"name": init_config_map_name(name)}},
        ],
        "initContainers": init,
    });
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": cluster.metadata.namespace,
            "labels": labels,
            // `kubectl logs` and `kubectl exec` without `-c` pick this container (a later step
            // adds another).
            "annotations": {"kubectl.kubernetes.io/default-container": POSTGRES_CONTAINER},
            "ownerReferences": [owner_reference(cluster)],
        },
        "spec": spec,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;
    use crate::api::PostgresClusterSpec;
    use crate::config::SecretString;
    use crate::controller::pods::{APP_LABEL, CLUSTER_LABEL};

    /// The cluster `prod/db` (uid `uid-db`) of 3 members on 16.4; step 05's pod tests use it too.
    pub(crate) fn cluster() -> PostgresCluster {
        let spec = PostgresClusterSpec::new(3, "16.4");
        let mut cluster = PostgresCluster::new("prod", "db", spec);
        cluster.metadata.uid = "uid-db".into();
        cluster
    }

    fn credentials() -> Credentials {
        Credentials {
            superuser_password: SecretString::new("super"),
            replication_password: SecretString::new("repl"),
        }
    }

    /// Every owned object names its cluster as its controlling owner, by uid, so the garbage
    /// collector deletes it with the cluster.
    fn assert_owned(object: &Value) {
        let owners = object["metadata"]["ownerReferences"]
            .as_array()
            .expect("ownerReferences");
        assert_eq!(owners.len(), 1, "{object}");
        assert_eq!(owners[0]["uid"], "uid-db");
        assert_eq!(owners[0]["kind"], "PostgresCluster");
        assert_eq!(owners[0]["apiVersion"], "workshop.example.com/v1");
        // Only one owner may be the controller; `kubectl describe` shows it as "Controlled By".
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(object["metadata"]["namespace"], "prod");
    }

    fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
        container["env"]
            .as_array()
            .and_then(|env| env.iter().find(|e| e["name"] == name))
            .unwrap_or_else(|| panic!("env {name} in {container}"))
    }

    /// The Secret holds both passwords under the documented keys, owned by the cluster.
    #[test]
    fn credentials_secret_has_both_keys() {
        let secret = credentials_secret(&cluster(), &credentials());
        assert_owned(&secret);
        assert_eq!(secret["kind"], "Secret");
        assert_eq!(secret["metadata"]["name"], "db-credentials");
        assert_eq!(secret["stringData"]["superuser-password"], "super");
        assert_eq!(secret["stringData"]["replication-password"], "repl");
    }

    /// Generated passwords are 32 base64url characters, different each time, and never printed
    /// by `Debug`.
    #[test]
    fn generated_passwords_are_random_and_redacted() {
        let one = Credentials::generate().expect("/dev/urandom is readable");
        let two = Credentials::generate().expect("/dev/urandom is readable");
        let password = one.superuser_password.expose();
        assert_eq!(password.len(), 32);
        assert!(password
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        assert_ne!(password, one.replication_password.expose());
        assert_ne!(password, two.superuser_password.expose());
        assert!(!format!("{one:?}").contains(password));
    }

    /// A random source that cannot be read is an error naming it, not a weak password.
    #[test]
    fn an_unreadable_random_source_is_an_error() {
        let error =
            Credentials::generate_from(Path::new("/nonexistent/random")).expect_err("no such file");
        assert!(error.to_string().contains("/nonexistent/random"), "{error}");
        // A file shorter than the bytes needed is an error too (read_exact).
        let short = std::env::temp_dir().join(format!("short-random-{}", std::process::id()));
        std::fs::write(&short, b"abc").expect("temp file");
        assert!(Credentials::generate_from(&short).is_err());
        let _ = std::fs::remove_file(&short);
    }

    /// The two Services select the cluster's pods by role, on port 5432 named `postgres`.
    #[test]
    fn services_select_by_cluster_and_role() {
        let primary = primary_service(&cluster());
        let replicas = replicas_service(&cluster());
        for (service, name, role) in [
            (&primary, "db-primary", "primary"),
            (&replicas, "db-replicas", "replica"),
        ] {
            assert_owned(service);
            assert_eq!(service["metadata"]["name"], name);
            // Both labels must match: another cluster's primary has the same role label.
            assert_eq!(
                service["spec"]["selector"],
                json!({"workshop.example.com/cluster": "db", "workshop.example.com/role": role})
            );
            assert_eq!(
                service["spec"]["ports"],
                json!([{"name": "postgres", "protocol": "TCP", "port": 5432, "targetPort": "postgres"}])
            );
        }
    }

    /// The init script is a ConfigMap key ending in `.sh` (the entrypoint ignores other
    /// extensions) that creates the replication role and its pg_hba.conf line.
    #[test]
    fn init_scripts_create_the_replication_role() {
        let config_map = init_scripts(&cluster());
        assert_owned(&config_map);
        assert_eq!(config_map["metadata"]["name"], "db-init");
        let script = config_map["data"]["10-replication.sh"]
            .as_str()
            .expect("the script");
        assert!(script.contains("CREATE ROLE replicator WITH REPLICATION LOGIN PASSWORD :'pw'"));
        assert!(script.contains("--set pw=\"$REPLICATION_PASSWORD\""));
        assert!(script.contains(
            "echo \"host replication replicator all scram-sha-256\" >> \"$PGDATA/pg_hba.conf\""
        ));
    }

    /// A primary pod: generateName, the three labels, the image from spec.version, secrets by
    /// reference, PGDATA under the emptyDir, uid 999, the image's own entrypoint, no init
    /// container.
    #[test]
    fn primary_pod_runs_the_official_image_contract() {
        let pod = pod(&cluster(), Role::Primary);
        assert_owned(&pod);
        // The API server appends 5 random characters; `name` must be absent for that.
        assert_eq!(pod["metadata"]["generateName"], "db-");
        assert!(pod["metadata"]["name"].is_null());
        assert_eq!(
            pod["metadata"]["labels"],
            json!({APP_LABEL: "postgres", CLUSTER_LABEL: "db", ROLE_LABEL: "primary"})
        );
        assert_eq!(pod["spec"]["initContainers"], json!([]));
        let security = &pod["spec"]["securityContext"];
        assert_eq!(
            (
                &security["runAsUser"],
                &security["runAsGroup"],
                &security["fsGroup"]
            ),
            (&json!(999), &json!(999), &json!(999))
        );
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["name"], "postgres");
        assert_eq!(container["image"], "postgres:16.4");
        // The image's docker-entrypoint.sh must run, or nothing initialises PGDATA.
        assert_eq!(container["command"], Value::Null);
        assert_eq!(container["args"][0], "postgres");
        assert_eq!(env(container, "PGDATA")["value"], PGDATA);
        assert!(PGDATA.starts_with(&format!("{DATA_MOUNT}/")));
        assert_eq!(
            env(container, "POSTGRES_PASSWORD")["valueFrom"]["secretKeyRef"],
            json!({"name": "db-credentials", "key": "superuser-password"})
        );
        assert_eq!(
            container["volumeMounts"],
            json!([
                {"name": "data", "mountPath": DATA_MOUNT},
                {"name": "init", "mountPath": "/docker-entrypoint-initdb.d", "readOnly": true},
            ])
        );
        assert_eq!(
            pod["spec"]["volumes"],
            json!([
                {"name": "data", "emptyDir": {}},
                {"name": "init", "configMap": {"name": "db-init"}},
            ])
        );
        assert!(pod["spec"]["terminationGracePeriodSeconds"].as_u64() > Some(30));
    }

    /// Readiness asks the server over TCP at 127.0.0.1 (not the Unix socket the entrypoint's
    /// temporary init server listens on); startup and liveness accept "rejecting connections"
    /// (exit 1) as alive, so WAL replay is never killed.
    #[test]
    fn probes_do_not_kill_a_replica_replaying_wal() {
        let pod = pod(&cluster(), Role::Replica);
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            container["readinessProbe"]["exec"]["command"],
            json!(["sh", "-c", READY_CHECK])
        );
        assert!(READY_CHECK.contains("-h 127.0.0.1"));
        for (probe, check) in [
            ("startupProbe", STARTED_CHECK),
            ("livenessProbe", ALIVE_CHECK),
        ] {
            assert_eq!(
                container[probe]["exec"]["command"],
                json!(["sh", "-c", check])
            );
            // Longer than pg_isready's own 3 s connect timeout.
            assert!(container[probe]["timeoutSeconds"].as_u64() > Some(3));
        }
        assert!(ALIVE_CHECK.contains("-h 127.0.0.1") && ALIVE_CHECK.ends_with("[ $? -le 1 ]"));
        let budget = |probe: &str| {
            container[probe]["periodSeconds"].as_u64().unwrap_or(10)
                * container[probe]["failureThreshold"].as_u64().unwrap_or(3)
        };
        assert!(budget("startupProbe") >= 600, "10 minutes to start");
        assert!(budget("livenessProbe") >= 60, "a minute of silence");
    }

    /// A replica clones from the primary Service with pg_basebackup -R in an init container
    /// that uses the replication password, and keeps a PGDATA that already holds a database.
    #[test]
    fn replica_pod_clones_from_the_primary_service() {
        let pod = pod(&cluster(), Role::Replica);
        assert_eq!(pod["metadata"]["labels"][ROLE_LABEL], "replica");
        let clone = &pod["spec"]["initContainers"][0];
        assert_eq!(clone["name"], "clone");
        assert_eq!(clone["image"], "postgres:16.4");
        assert_eq!(env(clone, "PRIMARY_HOST")["value"], "db-primary");
        assert_eq!(
            env(clone, "PGPASSWORD")["valueFrom"]["secretKeyRef"],
            json!({"name": "db-credentials", "key": "replication-password"})
        );
        assert_eq!(env(clone, "PGDATA")["value"], PGDATA);
        let script = clone["command"][2].as_str().expect("the script");
        assert_eq!(clone["command"][0], "sh");
        assert!(script.contains("[ -s \"$PGDATA/PG_VERSION\" ]"));
        assert!(script.contains(
            "pg_basebackup -h \"$PRIMARY_HOST\" -p 5432 -U replicator -d \"application_name=$POD_NAME\""
        ));
        assert!(script.contains("-R -X stream -c fast"));
        // The clone writes into the emptyDir the server then starts from.
        assert_eq!(
            clone["volumeMounts"],
            json!([{"name": "data", "mountPath": DATA_MOUNT}])
        );
        // Same server container as a primary: promotion changes labels, not the spec.
        assert_eq!(
            pod["spec"]["containers"],
            super::pod(&cluster(), Role::Primary)["spec"]["containers"]
        );
    }

    /// The role patch touches one label and nothing else.
    #[test]
    fn role_patch_sets_only_the_role_label() {
        assert_eq!(
            role_patch(Role::Primary.label_value()),
            json!({"metadata": {"labels": {"workshop.example.com/role": "primary"}}})
        );
        assert_eq!(
            role_patch(Role::Replica.label_value())["metadata"]["labels"][ROLE_LABEL],
            "replica"
        );
    }

    /// psql over the local socket as postgres, stopping on errors, printing bare values, the SQL
    /// as one argument (no shell between: nothing in it is interpreted).
    #[test]
    fn psql_argv_runs_one_command_unaligned_and_tuples_only() {
        let argv = psql_argv(PROMOTE_SQL);
        let has = |pair: [&str; 2]| argv.windows(2).any(|w| w == pair);
        assert_eq!(argv.first().map(String::as_str), Some("psql"));
        assert!(has(["-v", "ON_ERROR_STOP=1"]) && has(["-U", "postgres"]));
        assert!(argv
            .iter()
            .any(|a| a.starts_with('-') && a.contains('A') && a.contains('t')));
        assert!(has(["-c", PROMOTE_SQL]) && argv.last().map(String::as_str) == Some(PROMOTE_SQL));
        assert!(!psql_argv(IS_IN_RECOVERY_SQL).contains(&"-h".to_string()));
    }

    /// LSNs are two hex halves of one 64-bit number; anything else is an error.
    #[test]
    fn lsns_parse_as_64_bit_positions() {
        assert_eq!(parse_lsn("0/3000148"), Ok(0x3000148));
        assert_eq!(parse_lsn("16/B374D848\n"), Ok(0x16_B374_D848));
        assert_eq!(parse_lsn("FFFFFFFF/FFFFFFFF"), Ok(u64::MAX));
        // Text order is not WAL order.
        assert!(parse_lsn("0/A").unwrap() > parse_lsn("0/9").unwrap());
        for bad in [
            "",
            "0",
            "0/",
            "/1",
            "x/1",
            "0/123456789",
            "-1/0",
            "+1/0",
            "0/3000148/1",
        ] {
            assert_eq!(
                parse_lsn(bad),
                Err(PsqlOutputError::NotAnLsn { text: bad.into() }),
                "{bad:?}"
            );
        }
    }

    /// A replica's two LSNs parse from psql's `a|b`, NULL (empty) is None, and the most
    /// advanced replica is the greatest.
    #[test]
    fn replica_lsns_order_by_received_then_replayed() {
        let a = ReplicaLsns::parse("0/3000148|0/3000100\n").expect("two LSNs");
        assert_eq!(
            a,
            ReplicaLsns {
                received: Some(0x3000148),
                replayed: Some(0x3000100)
            }
        );
        let b = ReplicaLsns::parse("0/3000148|0/3000148").expect("two LSNs");
        let c = ReplicaLsns::parse("0/2000000|0/3000148").expect("two LSNs");
        let nothing = ReplicaLsns::parse("|").expect("two NULLs");
        assert_eq!(nothing.received, None);
        let mut all = [a, nothing, c, b];
        all.sort();
        assert_eq!(all, [nothing, c, a, b]);
        assert!(matches!(
            ReplicaLsns::parse("0/1"),
            Err(PsqlOutputError::Columns { expected: 2, .. })
        ));
        assert!(ReplicaLsns::parse("0/1|zz").is_err());
        assert_eq!(parse_bool("t\n"), Ok(true));
        assert_eq!(parse_bool("f"), Ok(false));
        assert!(parse_bool("true").is_err());
    }

    /// The WAL receiver's restart feeds psql the `ALTER SYSTEM` that toggles a space at the end
    /// of `primary_conninfo` through `\gexec`, then the reload (a stand-in `psql` on the PATH
    /// keeps what it read; the real statement is run on PostgreSQL by the chaos test).
    #[test]
    fn restarting_the_wal_receiver_alters_primary_conninfo_and_reloads() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().expect("a scratch directory");
        let read = scratch.path().join("read.sql");
        let fake = scratch.path().join("psql");
        let body = format!("#!/bin/sh\ncat > '{}'\n", read.display());
        std::fs::write(&fake, body).expect("psql written");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("psql executable");
        let argv = restart_wal_receiver_argv();
        let path = format!(
            "{}:{}",
            scratch.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let status = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .env("PATH", path)
            .status()
            .expect("sh runs");
        assert!(status.success());
        let sql = std::fs::read_to_string(&read).expect("psql read its input");
        let lines: Vec<&str> = sql.lines().collect();
        assert_eq!(lines.len(), 2, "{sql}");
        assert!(
            lines[0].contains("ALTER SYSTEM SET primary_conninfo = %L")
                && lines[0].ends_with("\\gexec")
        );
        assert_eq!(lines[1], "SELECT pg_reload_conf();");
    }
}
