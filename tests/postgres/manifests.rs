//! The stage-04 manifests make a replicated PostgreSQL cluster on a real runtime, with no
//! operator: the test does by hand, step by step, what the reconcile loop will do. It POSTs the
//! objects `postgres::manifests` builds with the operator's `Client` to a sandbox whose pods are
//! real PostgreSQL processes (the installed PostgreSQL behind a stand-in for the official image's
//! docker-entrypoint.sh, in bubblewrap jails), talks to Postgres with `kubectl exec` and the
//! module's `psql` commands, and fails over by hand.
//!
//! WORKSHOP.md, step 04. Needs PostgreSQL and bubblewrap (and kubectl): without them the test
//! fails and says what is missing; it never silently passes.
//! Run: `cargo test -p postgres-operator --test postgres manifests:: -- --nocapture` (the timings
//! are printed, not asserted).

use std::time::{Duration, Instant};

use postgres_operator::api::{collection_path, PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::{Client, Patch};
use postgres_operator::failover::manifests::{member_pod as pod, DEFAULT_AGENT_IMAGE};
use postgres_operator::postgres::manifests::{
    credentials_secret, init_scripts, primary_service, primary_service_name, psql_argv,
    replicas_service, replicas_service_name, role_patch, Credentials, ReplicaLsns, Role,
    CURRENT_WAL_LSN_SQL, IS_IN_RECOVERY_SQL, POSTGRES_CONTAINER, PROMOTE_SQL, REPLICA_LSNS_SQL,
    ROLE_LABEL,
};
use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::Kubectl;

const NAMESPACE: &str = "default";
const CLUSTER: &str = "pg";
/// Starting PostgreSQL is seconds; a base backup of an empty cluster too. Generous, because
/// the machine may be busy compiling.
const START_DEADLINE: Duration = Duration::from_secs(180);

/// Does a libpq conninfo string set `key` to `value`? pg_basebackup quotes a value holding
/// anything but letters, digits, `_` and `.` (`host='pg-primary'`, `host=127.0.0.9`).
fn conninfo_has(conninfo: &str, key: &str, value: &str) -> bool {
    conninfo
        .split_whitespace()
        .any(|pair| pair == format!("{key}={value}") || pair == format!("{key}='{value}'"))
}

/// One sandbox with the process runtime, the operator's client and kubectl for it.
struct Cluster {
    sandbox: Sandbox,
    client: Client,
    kubectl: Kubectl,
}

impl Cluster {
    async fn start() -> Cluster {
        let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
        let client = test_support::plain_client(&sandbox.url());
        test_support::register_crd(&client).await;
        let kubectl = Kubectl::new(&sandbox.url());
        Cluster {
            sandbox,
            client,
            kubectl,
        }
    }

    async fn create(&self, resource: &str, body: &Value) -> Value {
        self.client
            .create(&format!("/api/v1/namespaces/{NAMESPACE}/{resource}"), body)
            .await
            .unwrap_or_else(|e| panic!("creating {resource}: {e}\n{body}"))
    }

    async fn get(&self, resource: &str, name: &str) -> Option<Value> {
        self.client
            .get(&format!("/api/v1/namespaces/{NAMESPACE}/{resource}/{name}"))
            .await
            .ok()
    }

    /// POST a pod and wait until it is Ready: (its name, its IP, seconds from POST to Ready).
    async fn create_ready_pod(&self, body: &Value) -> (String, String, Duration) {
        let started = Instant::now();
        let created = self.create("pods", body).await;
        let name = created["metadata"]["name"]
            .as_str()
            .expect("the server named the pod from generateName")
            .to_string();
        let ready = self.wait_ready(&name).await;
        let ip = test_support::pod_ip(&ready);
        (name, ip, started.elapsed())
    }

    async fn wait_ready(&self, name: &str) -> Value {
        self.eventually(START_DEADLINE, &format!("pod {name} Ready"), || async {
            let pod = self.get("pods", name).await?;
            test_support::pod_is_ready(&pod).then_some(pod)
        })
        .await
    }

    /// [`test_support::eventually`], whose failure also prints what each pod of the cluster
    /// says about itself: logs (the previous instance's too), container statuses, Events.
    async fn eventually<T, F, Fut>(&self, deadline: Duration, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        if let Some(value) = test_support::within(deadline, check).await {
            return value;
        }
        panic!(
            "timed out after {deadline:?} waiting for {what}\n{}",
            test_support::cluster::report(&self.kubectl, CLUSTER).await
        );
    }

    /// `kubectl exec POD -c postgres -- psql ...`: stdout trimmed, or stderr.
    async fn psql(&self, pod: &str, sql: &str) -> Result<String, String> {
        let argv = psql_argv(sql);
        let mut args = vec!["exec", pod, "-c", POSTGRES_CONTAINER, "--"];
        args.extend(argv.iter().map(String::as_str));
        let out = self.kubectl.run(&args).await;
        if out.success {
            Ok(out.stdout.trim().to_string())
        } else {
            Err(format!("{:?}: {}{}", out.code, out.stdout, out.stderr))
        }
    }

    /// [`Cluster::psql`], required to succeed; a failure prints what the pod says about itself
    /// (an exec refused with "container not found" means its container ended: the log says why).
    async fn psql_ok(&self, pod: &str, sql: &str) -> String {
        match self.psql(pod, sql).await {
            Ok(rows) => rows,
            Err(error) => panic!(
                "psql {sql:?} in {pod}: {error}\n{}",
                self.kubectl.pod_report(NAMESPACE, pod).await
            ),
        }
    }

    /// Wait until the primary Service's one ready address is `ip`.
    async fn until_primary_service_is(&self, ip: &str, what: &str) {
        self.eventually(Duration::from_secs(30), what, || async {
            (self.endpoint_ips(&primary_service_name(CLUSTER)).await == [ip]).then_some(())
        })
        .await;
    }

    /// The ready addresses of a Service's Endpoints, sorted.
    async fn endpoint_ips(&self, service: &str) -> Vec<String> {
        let Some(endpoints) = self.get("endpoints", service).await else {
            return Vec::new();
        };
        let mut ips: Vec<String> = endpoints["subsets"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|subset| subset["addresses"].as_array().into_iter().flatten())
            .filter_map(|address| address["ip"].as_str().map(String::from))
            .collect();
        ips.sort();
        ips
    }
}

/// Seed, two `pg_basebackup -R` replicas, a row replicated to both; then the primary is deleted,
/// the most advanced replica promoted and relabelled, and the other replica follows the new
/// primary through the `<name>-primary` Service: a row written after the failover reaches it.
/// Deleting the cluster then collects every object it owns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_make_a_replicated_cluster_that_survives_a_failover() {
    let cluster = Cluster::start().await;
    let runtime_major = test_support::process_runtime()
        .tools
        .postgres_major()
        .to_string();
    let owner: PostgresCluster = cluster
        .client
        .create(
            &collection_path(NAMESPACE),
            &PostgresCluster::new(
                NAMESPACE,
                CLUSTER,
                // The sandbox runs the installed PostgreSQL for every tag; asking for its own
                // major version keeps its VersionMismatch warning out of the events.
                PostgresClusterSpec::new(3, &runtime_major),
            ),
        )
        .await
        .expect("cluster created");

    // The objects every pod needs first: a pod whose Secret or ConfigMap is missing waits in
    // CreateContainerConfigError / ContainerCreating.
    let credentials = Credentials::generate().expect("random passwords");
    cluster
        .create("secrets", &credentials_secret(&owner, &credentials))
        .await;
    cluster.create("configmaps", &init_scripts(&owner)).await;
    cluster.create("services", &primary_service(&owner)).await;
    cluster.create("services", &replicas_service(&owner)).await;

    // The seed: initdb, the init script, then a primary.
    let (primary, primary_ip, seed_time) = cluster
        .create_ready_pod(&pod(&owner, Role::Primary, DEFAULT_AGENT_IMAGE))
        .await;
    eprintln!("primary {primary}: created → Ready in {seed_time:.1?}");
    assert!(primary.starts_with("pg-") && primary.len() > "pg-".len());
    assert_eq!(cluster.psql_ok(&primary, IS_IN_RECOVERY_SQL).await, "f");
    assert_eq!(
        cluster
            .psql_ok(
                &primary,
                "SELECT rolreplication AND rolcanlogin FROM pg_roles WHERE rolname = 'replicator'"
            )
            .await,
        "t",
        "the init script made the replication role"
    );
    cluster
        .until_primary_service_is(
            &primary_ip,
            "the primary in the primary Service's endpoints",
        )
        .await;

    // Replicas clone from the `pg-primary` Service by name. Where the name does not resolve in
    // a pod (see the report below), this test alone points them at the Service's ClusterIP,
    // which still follows the primary label: the manifests keep the name.
    let resolves = cluster
        .kubectl
        .run(&[
            "exec",
            &primary,
            "-c",
            POSTGRES_CONTAINER,
            "--",
            "getent",
            "hosts",
            &primary_service_name(CLUSTER),
        ])
        .await;
    let mut replica_body = pod(&owner, Role::Replica, DEFAULT_AGENT_IMAGE);
    let mut primary_host = primary_service_name(CLUSTER);
    if !resolves.success {
        let service = cluster
            .get("services", &primary_service_name(CLUSTER))
            .await
            .expect("the primary Service");
        let cluster_ip = service["spec"]["clusterIP"]
            .as_str()
            .expect("a ClusterIP")
            .to_string();
        eprintln!(
            "SANDBOX: `getent hosts {}` fails inside a pod ({:?}: {}); a real cluster's DNS resolves \
             a Service name. Using the Service's ClusterIP {cluster_ip} for the clone instead.",
            primary_service_name(CLUSTER),
            resolves.code,
            resolves.stderr.trim()
        );
        for variable in replica_body["spec"]["initContainers"][0]["env"]
            .as_array_mut()
            .expect("env")
        {
            if variable["name"] == "PRIMARY_HOST" {
                variable["value"] = Value::from(cluster_ip.clone());
            }
        }
        primary_host = cluster_ip;
    }

    // Two replicas at once: each waits for the primary, copies it, and starts as a hot standby.
    let (first, second) = tokio::join!(
        cluster.create_ready_pod(&replica_body),
        cluster.create_ready_pod(&replica_body)
    );
    let replicas = [first.0.clone(), second.0.clone()];
    eprintln!(
        "replicas {}, {}: created → Ready in {:.1?}, {:.1?} (cloned concurrently)",
        first.0, second.0, first.2, second.2
    );
    for replica in &replicas {
        let pod = cluster.get("pods", replica).await.expect("the replica");
        assert_eq!(
            pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
            "{replica}'s clone finished"
        );
        assert_eq!(cluster.psql_ok(replica, IS_IN_RECOVERY_SQL).await, "t");
        // pg_basebackup -R wrote where to stream from: the Service, not a pod.
        let conninfo = cluster.psql_ok(replica, "SHOW primary_conninfo").await;
        assert!(
            conninfo_has(&conninfo, "host", &primary_host)
                && conninfo_has(&conninfo, "user", "replicator")
                && conninfo_has(&conninfo, "application_name", replica),
            "{conninfo}"
        );
    }
    // The primary streams to both, each under its pod's name (application_name from -d).
    let mut expected_streams = replicas.to_vec();
    expected_streams.sort();
    cluster
        .eventually(
            Duration::from_secs(30),
            "two streaming replicas",
            || async {
                let streams = cluster
                    .psql(
                        &primary,
                        "SELECT string_agg(application_name, ',' ORDER BY application_name) \
                 FROM pg_stat_replication WHERE state = 'streaming'",
                    )
                    .await
                    .ok()?;
                (streams == expected_streams.join(",")).then_some(())
            },
        )
        .await;
    let mut replica_ips = vec![first.1.clone(), second.1.clone()];
    replica_ips.sort();
    cluster
        .eventually(
            Duration::from_secs(30),
            "both replicas in the replicas Service's endpoints",
            || async {
                (cluster.endpoint_ips(&replicas_service_name(CLUSTER)).await == replica_ips)
                    .then_some(())
            },
        )
        .await;

    // A row written on the primary is read on both replicas.
    cluster
        .psql_ok(
            &primary,
            "CREATE TABLE notes (text text); INSERT INTO notes VALUES ('before the failover')",
        )
        .await;
    let written_at = cluster.psql_ok(&primary, CURRENT_WAL_LSN_SQL).await;
    let written_at =
        postgres_operator::postgres::manifests::parse_lsn(&written_at).expect("an LSN");
    for replica in &replicas {
        cluster
            .eventually(
                Duration::from_secs(30),
                &format!("the row on {replica}"),
                || async {
                    let rows = cluster.psql(replica, "SELECT text FROM notes").await.ok()?;
                    (rows == "before the failover").then_some(())
                },
            )
            .await;
        let lsns = ReplicaLsns::parse(&cluster.psql_ok(replica, REPLICA_LSNS_SQL).await)
            .expect("two LSNs");
        assert!(
            lsns.replayed >= Some(written_at),
            "{replica} replayed past the write"
        );
    }

    // Failover. The primary goes first: its shutdown checkpoint reaches both replicas, so they
    // stop at the same LSN and the one not promoted can follow the new timeline. (Promoting
    // first and stopping the old primary after would stream that checkpoint to the follower
    // only, past the point where the new timeline forks, and it could not follow.)
    let failover = Instant::now();
    let _: Value = cluster
        .client
        .delete(&format!("/api/v1/namespaces/{NAMESPACE}/pods/{primary}"))
        .await
        .expect("primary deleted");
    cluster
        .eventually(Duration::from_secs(90), "the old primary gone", || async {
            cluster.get("pods", &primary).await.is_none().then_some(())
        })
        .await;
    let stopped = failover.elapsed();
    // The most advanced replica (received, then replayed; the name breaks a tie).
    let mut positions = Vec::new();
    for replica in &replicas {
        let lsns = ReplicaLsns::parse(&cluster.psql_ok(replica, REPLICA_LSNS_SQL).await)
            .expect("two LSNs");
        positions.push((lsns, replica.clone()));
    }
    positions.sort();
    eprintln!("replica positions after the primary stopped: {positions:?}");
    let (_, promoted) = positions.last().expect("two replicas").clone();
    let follower = replicas
        .iter()
        .find(|r| **r != promoted)
        .expect("the other replica")
        .clone();
    assert_eq!(cluster.psql_ok(&promoted, PROMOTE_SQL).await, "t");
    assert_eq!(cluster.psql_ok(&promoted, IS_IN_RECOVERY_SQL).await, "f");
    let relabelled: Value = cluster
        .client
        .patch(
            &format!("/api/v1/namespaces/{NAMESPACE}/pods/{promoted}"),
            &Patch::Merge(role_patch(Role::Primary.label_value())),
        )
        .await
        .expect("relabelled");
    assert_eq!(relabelled["metadata"]["labels"][ROLE_LABEL], "primary");
    let promoted_ip = test_support::pod_ip(&relabelled);
    cluster
        .until_primary_service_is(&promoted_ip, "the promoted pod behind the primary Service")
        .await;
    eprintln!(
        "failover: old primary gone after {stopped:.1?}, {promoted} promoted and behind {} after {:.1?}",
        primary_service_name(CLUSTER),
        failover.elapsed()
    );

    // The new primary has the old data and takes writes; the follower reconnects to the
    // Service on its own (primary_conninfo names it), follows timeline 2 and gets the new row.
    assert_eq!(
        cluster.psql_ok(&promoted, "SELECT text FROM notes").await,
        "before the failover"
    );
    cluster
        .psql_ok(&promoted, "INSERT INTO notes VALUES ('after the failover')")
        .await;
    let followed = Instant::now();
    cluster
        .eventually(
            Duration::from_secs(90),
            &format!("the post-failover row on {follower}"),
            || async {
                let rows = cluster
                    .psql(
                        &follower,
                        "SELECT string_agg(text, ',' ORDER BY text) FROM notes",
                    )
                    .await
                    .ok()?;
                (rows == "after the failover,before the failover").then_some(())
            },
        )
        .await;
    eprintln!(
        "{follower} had the row written on {promoted} {:.1?} after the write",
        followed.elapsed()
    );
    assert_eq!(cluster.psql_ok(&follower, IS_IN_RECOVERY_SQL).await, "t");
    assert_eq!(
        cluster
            .psql_ok(
                &follower,
                "SELECT status || ' timeline ' || received_tli FROM pg_stat_wal_receiver"
            )
            .await,
        "streaming timeline 2"
    );
    assert_eq!(
        cluster
            .psql_ok(
                &promoted,
                "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'"
            )
            .await,
        follower
    );

    // Every object carries the cluster as its owner: deleting the cluster collects them all.
    let _: Value = cluster
        .client
        .delete(&postgres_operator::api::object_path(NAMESPACE, CLUSTER))
        .await
        .expect("cluster deleted");
    cluster
        .eventually(
            Duration::from_secs(90),
            "every owned object collected",
            || async {
                let mut left = Vec::new();
                for (resource, name) in [
                    ("secrets", format!("{CLUSTER}-credentials")),
                    ("configmaps", format!("{CLUSTER}-init")),
                    ("services", primary_service_name(CLUSTER)),
                    ("services", replicas_service_name(CLUSTER)),
                    ("pods", promoted.clone()),
                    ("pods", follower.clone()),
                ] {
                    if cluster.get(resource, &name).await.is_some() {
                        left.push(name);
                    }
                }
                left.is_empty().then_some(())
            },
        )
        .await;
    cluster.sandbox.shutdown().await;
}
