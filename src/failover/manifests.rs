//! What a member pod needs for failover, added to step 04's pod (`ClusterLayer::dress_pod`):
//! the crash guard (a start script), replication timeouts that notice a lost peer in seconds,
//! and the readiness agent (`agent.rs`) that answers the probes with one query, no process
//! started.
//!
//! WORKSHOP.md, step 05 ("The crash guard", "Probes that cost nothing").

use serde_json::{json, Value};

use crate::api::PostgresCluster;
use crate::postgres::manifests::{
    from_secret, Role, POSTGRES_CONTAINER, POSTGRES_PORT, SUPERUSER_PASSWORD_KEY,
};

use super::agent::{AGENT_BINARY, AGENT_DIR, AGENT_PORT, IMAGE_BINARY, LIVE_PATH, READY_PATH};

/// The container that runs the readiness agent, and the init container that copies it in.
pub const READY_CONTAINER: &str = "ready";
pub const AGENT_INSTALL_CONTAINER: &str = "agent";
/// The operator's image, which holds `pg-ready` (`--agent-image`).
pub const DEFAULT_AGENT_IMAGE: &str = "postgres-operator:latest";

/// The postgres container's command: the official entrypoint, started in recovery when this
/// server was a primary that did not stop cleanly. Its arguments (`args`, the image's CMD:
/// `postgres -c ...`) are passed on.
///
/// The kubelet restarts a container whose process died (a SIGKILL, an out-of-memory kill, a
/// backend's crash with `restart_after_crash=off`) in place, on the same emptyDir, its first
/// crash at once. The operator may be failing over at that moment: it fences the old primary
/// and promotes a standby without waiting for the old one to stop
/// (`plan::fencing_first_is_safe`). Started as a primary again, the old server would take
/// writes beside the new one until the fence's delete stops it. So only the operator makes a
/// primary. A standby has `standby.signal` and a restore (step 06) `recovery.signal`; otherwise
/// the control file says how the server last stopped: `shut down` after a clean stop, and still
/// `in production` for a primary that did not stop cleanly (a fresh base backup's copy says so
/// too, which is why the signal files are asked first). That one starts as a standby of
/// nothing (`standby.signal`, `primary_conninfo` empty): it replays all of its own WAL, answers
/// read-only queries, and waits for the operator, which promotes it in place when no other
/// member took over and deletes it when one did. (Patroni starts a crashed leader read-only too, and promotes it only
/// while it still holds the leader key.) `LC_ALL=C`: pg_controldata's words are translated.
// ANCHOR: crash_guard
const START_SCRIPT: &str = r#"set -eu
if [ -s "$PGDATA/PG_VERSION" ] && [ ! -e "$PGDATA/standby.signal" ] && [ ! -e "$PGDATA/recovery.signal" ] \
  && LC_ALL=C pg_controldata "$PGDATA" | grep -q '^Database cluster state: *in production$'; then
  echo "postgres: this primary did not stop cleanly; starting it in recovery until the operator promotes it or replaces it"
  touch "$PGDATA/standby.signal"
  exec docker-entrypoint.sh "$@" -c primary_conninfo=
fi
exec docker-entrypoint.sh "$@"
"#;
// ANCHOR_END: crash_guard

/// Step 04's member pod of `cluster` in `role`, dressed for failover.
pub fn member_pod(cluster: &PostgresCluster, role: Role, agent_image: &str) -> Value {
    let mut pod = crate::postgres::manifests::pod(cluster, role);
    dress(&mut pod, cluster, agent_image);
    pod
}

/// Dress step 04's member `pod` of `cluster` for failover; `agent_image`: where the agent
/// comes from.
pub fn dress(pod: &mut Value, cluster: &PostgresCluster, agent_image: &str) {
    let image = format!("postgres:{}", cluster.spec.version);
    let spec = &mut pod["spec"];
    if let Some(containers) = spec["containers"].as_array_mut() {
        if let Some(postgres) = containers
            .iter_mut()
            .find(|c| c["name"] == POSTGRES_CONTAINER)
        {
            dress_postgres(postgres);
        }
        containers.push(ready_container(cluster, &image));
    }
    // The agent's copy first, then (a replica's) the clone: init containers run in order.
    if let Some(init) = spec["initContainers"].as_array_mut() {
        init.insert(0, agent_install_container(agent_image));
    }
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        // The readiness agent's binary, copied in by the `agent` init container.
        volumes.push(json!({"name": "agent", "emptyDir": {}}));
    }
}

/// The postgres container, started through the crash guard, with shorter replication
/// timeouts, and probed through the agent.
fn dress_postgres(container: &mut Value) {
    // `command` replaces the image's ENTRYPOINT with START_SCRIPT, which ends in it (the word
    // after the script is the shell's $0); `args` (the CMD) is passed on.
    container["command"] = json!(["sh", "-c", START_SCRIPT, "start"]);
    // Why each value, and what it cost before: WORKSHOP.md, "Design notes: the server's
    // settings". restart_after_crash=off: a crashed backend makes the postmaster exit, and the
    // container restarts through START_SCRIPT, in recovery, like any other crash. The others
    // notice a lost peer in seconds, not a minute.
    if let Some(args) = container["args"].as_array_mut() {
        for setting in [
            "restart_after_crash=off",
            "wal_retrieve_retry_interval=200ms",
            "wal_sender_timeout=5s",
            "wal_receiver_timeout=5s",
        ] {
            args.extend([json!("-c"), json!(setting)]);
        }
    }
    // Ready decides which pods the Services send traffic to, and it is the detector of a hung
    // primary (TCP still accepts, only a query notices). Asked of the `ready` container's agent,
    // which keeps one psql session open: one HTTP request and one `SELECT` a probe. Two misses
    // 2 s apart, each given up after 0.8 s: a hung primary is unready 2.8 to 4.8 s after it stops.
    // ANCHOR: readiness_probe
    container["readinessProbe"] = json!({
        "httpGet": {"path": READY_PATH, "port": AGENT_PORT},
        "periodSeconds": 2,
        "timeoutSeconds": 1,
        "failureThreshold": 2,
    });
    // ANCHOR_END: readiness_probe
    // The agent's `/livez`: alive while its session answers, or else while `pg_isready` finds
    // the postmaster at all (a replica replaying WAL rejects connections and is alive). Only
    // "no postmaster" for 2 × 30 s restarts the container.
    // ANCHOR: liveness_probe
    container["livenessProbe"] = json!({
        "httpGet": {"path": LIVE_PATH, "port": AGENT_PORT},
        "periodSeconds": 30,
        "timeoutSeconds": 5,
        "failureThreshold": 2,
    });
    // ANCHOR_END: liveness_probe
}

/// The init container that copies the readiness agent out of the operator's image (which has
/// no shell, so the binary copies itself) into the `agent` emptyDir.
fn agent_install_container(agent_image: &str) -> Value {
    json!({
        "name": AGENT_INSTALL_CONTAINER,
        "image": agent_image,
        // A `:latest` tag would otherwise be pulled on every pod start: the operator's own
        // image, loaded into the cluster (`kind load docker-image`) or pushed, is enough.
        "imagePullPolicy": "IfNotPresent",
        "command": [IMAGE_BINARY, "install", AGENT_BINARY],
        "volumeMounts": [{"name": "agent", "mountPath": AGENT_DIR}],
    })
}

/// The readiness agent (`agent.rs`), in the postgres image for its `psql`. It reaches the
/// server at `localhost`: inside a pod that is the server's own TCP port, which the
/// entrypoint's temporary init server does not listen on, so a seed running initdb is not
/// Ready. The kubelet probes it on the pod IP.
fn ready_container(cluster: &PostgresCluster, image: &str) -> Value {
    json!({
        "name": READY_CONTAINER,
        "image": image,
        // `$(POD_IP)` is expanded by the kubelet from the env below.
        "command": [AGENT_BINARY, "serve", "--listen", format!("$(POD_IP):{AGENT_PORT}")],
        "ports": [{"name": "ready", "containerPort": AGENT_PORT, "protocol": "TCP"}],
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PGHOST", "value": "localhost"},
            {"name": "PGPORT", "value": POSTGRES_PORT.to_string()},
            {"name": "PGUSER", "value": "postgres"},
            {"name": "PGDATABASE", "value": "postgres"},
            from_secret(cluster, "PGPASSWORD", SUPERUSER_PASSWORD_KEY),
        ],
        "volumeMounts": [{"name": "agent", "mountPath": AGENT_DIR, "readOnly": true}],
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::failover::agent::DEFAULT_DEADLINE;
    use crate::postgres::manifests::tests::cluster;
    use crate::postgres::manifests::{ALIVE_CHECK, STARTED_CHECK};

    fn env<'a>(container: &'a Value, name: &str) -> &'a Value {
        container["env"]
            .as_array()
            .and_then(|env| env.iter().find(|e| e["name"] == name))
            .unwrap_or_else(|| panic!("env {name} in {container}"))
    }

    /// The agent's init container, as both roles have it first.
    fn agent_install() -> Value {
        json!({
            "name": "agent",
            "image": "postgres-operator:latest",
            "imagePullPolicy": "IfNotPresent",
            "command": ["/pg-ready", "install", "/agent/pg-ready"],
            "volumeMounts": [{"name": "agent", "mountPath": "/agent"}],
        })
    }

    /// Step 04's primary pod (its own tests hold the image's contract), dressed: started through
    /// the crash guard with `restart_after_crash=off`, the agent's copy its only init container,
    /// and the agent's volume.
    #[test]
    fn a_primary_starts_through_the_crash_guard_with_the_agent() {
        let pod = member_pod(&cluster(), Role::Primary, DEFAULT_AGENT_IMAGE);
        assert_eq!(pod["spec"]["initContainers"], json!([agent_install()]));
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["name"], "postgres");
        // The image's docker-entrypoint.sh must run, or nothing initialises PGDATA: the start
        // script ends in it, with the arguments.
        assert_eq!(
            container["command"],
            json!(["sh", "-c", START_SCRIPT, "start"])
        );
        assert!(START_SCRIPT
            .trim_end()
            .ends_with(r#"exec docker-entrypoint.sh "$@""#));
        assert_eq!(container["args"][0], "postgres");
        // A crashed backend ends the postmaster, so the container restarts through the guard.
        let args = container["args"].as_array().expect("args");
        assert!(args
            .windows(2)
            .any(|pair| pair == [json!("-c"), json!("restart_after_crash=off")]));
        assert_eq!(
            pod["spec"]["volumes"][2],
            json!({"name": "agent", "emptyDir": {}})
        );
    }

    /// Readiness asks the agent beside postgres, which asks the server over TCP at localhost
    /// (not the Unix socket the entrypoint's temporary init server listens on); startup and
    /// liveness (the agent's `/livez`, pg_isready behind it) accept "rejecting connections"
    /// (exit 1) as alive, so WAL replay is never killed.
    #[test]
    fn probes_do_not_kill_a_replica_replaying_wal() {
        let pod = member_pod(&cluster(), Role::Replica, DEFAULT_AGENT_IMAGE);
        // The agent's copy first, then the clone: init containers run in order.
        let init = &pod["spec"]["initContainers"];
        assert_eq!(init[0], agent_install());
        assert_eq!(init[1]["name"], "clone");
        assert_eq!(init.as_array().map(Vec::len), Some(2));
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            container["readinessProbe"]["httpGet"],
            json!({"path": "/readyz", "port": 8008})
        );
        assert_eq!(container["readinessProbe"]["exec"], Value::Null);
        // Under the kubelet's timeout, the agent's deadline: its 503 says why.
        assert!(
            Duration::from_secs(
                container["readinessProbe"]["timeoutSeconds"]
                    .as_u64()
                    .unwrap_or(1)
            ) > DEFAULT_DEADLINE
        );
        let ready = &pod["spec"]["containers"][1];
        assert_eq!(ready["name"], READY_CONTAINER);
        assert_eq!(ready["image"], "postgres:16.4", "the agent runs psql");
        assert_eq!(
            ready["command"],
            json!(["/agent/pg-ready", "serve", "--listen", "$(POD_IP):8008"])
        );
        assert_eq!(
            env(ready, "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"],
            "status.podIP"
        );
        assert_eq!(env(ready, "PGHOST")["value"], "localhost");
        assert_eq!(
            env(ready, "PGPASSWORD")["valueFrom"]["secretKeyRef"],
            json!({"name": "db-credentials", "key": "superuser-password"})
        );
        assert_eq!(
            ready["volumeMounts"],
            json!([{"name": "agent", "mountPath": "/agent", "readOnly": true}])
        );
        let startup = &container["startupProbe"];
        assert_eq!(
            startup["exec"]["command"],
            json!(["sh", "-c", STARTED_CHECK])
        );
        // Longer than pg_isready's own 3 s connect timeout.
        assert!(startup["timeoutSeconds"].as_u64() > Some(3));
        assert!(ALIVE_CHECK.contains("-h 127.0.0.1") && ALIVE_CHECK.ends_with("[ $? -le 1 ]"));
        // A running member's liveness asks the agent, as readiness does: no process started.
        let liveness = &container["livenessProbe"];
        assert_eq!(liveness["httpGet"], json!({"path": "/livez", "port": 8008}));
        assert_eq!(liveness["exec"], Value::Null);
        // Longer than the agent's answer can take: its session's deadline, then pg_isready -t 2.
        assert!(liveness["timeoutSeconds"].as_u64() > Some(3));
        let budget = |probe: &str| {
            container[probe]["periodSeconds"].as_u64().unwrap_or(10)
                * container[probe]["failureThreshold"].as_u64().unwrap_or(3)
        };
        assert!(budget("startupProbe") >= 600, "10 minutes to start");
        assert!(budget("livenessProbe") >= 60, "a minute of silence");
    }
}
