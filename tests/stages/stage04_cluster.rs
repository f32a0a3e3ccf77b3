//! Stages 04 and 05 end to end: the operator runs real PostgreSQL clusters on the sandbox's
//! process runtime, driven by real kubectl — create, scale, lose a replica, shrink, restart the
//! operator, refuse a major downgrade, lose the primary, delete. Stage 04 waits when the primary
//! is lost; stage 05 (the failover layer) promotes a replica.
//!
//! WORKSHOP.md, steps 04 and 05. Needs PostgreSQL, bubblewrap and kubectl: without them the test fails
//! and says what is missing. The timings (create → 3 ready, primary deleted → new primary ready)
//! are printed, not asserted: `cargo test --test stages stage04_cluster:: -- --nocapture`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use postgres_operator::client::Client;
use postgres_operator::postgres::{run_postgres_operator, ClusterLayer};
use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::cluster::{self, Member};
use test_support::Kubectl;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const CLUSTER: &str = "db";
/// Generous: the machine may be compiling other tests meanwhile.
const DEADLINE: Duration = Duration::from_secs(240);

/// The operator running in this process, and the story lines it told.
struct Operator {
    stop: CancellationToken,
    task: JoinHandle<()>,
    lines: test_support::Story,
}

impl Operator {
    fn start<L: ClusterLayer>(client: &Client, layer: L) -> Operator {
        // Every timer round checks the owned objects again: its Secret GET marks a round below.
        let options = postgres_operator::postgres::PostgresOptions {
            owned_recheck: Duration::ZERO,
            ..test_support::quick_postgres_options()
        };
        let (reporter, lines) = test_support::Story::record();
        let stop = CancellationToken::new();
        let running = run_postgres_operator(client.clone(), options, layer, reporter, stop.clone());
        let task = tokio::spawn(async move {
            running.await.expect("the operator starts");
        });
        Operator { stop, task, lines }
    }

    fn said(&self, part: &str) -> bool {
        self.lines.said(part)
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the operator stops cleanly");
    }
}

struct World {
    sandbox: Sandbox,
    kubectl: Kubectl,
}

impl World {
    async fn cluster(&self) -> Value {
        self.kubectl.json(&["get", "pgc", CLUSTER]).await
    }

    async fn pods(&self) -> Vec<Member> {
        cluster::members(&self.kubectl, CLUSTER).await
    }

    /// Delete one replica pod, without waiting for it to go; its name.
    async fn delete_a_replica(&self) -> String {
        let replica = self
            .pods()
            .await
            .into_iter()
            .find(|p| p.role == "replica")
            .expect("a replica")
            .name;
        self.kubectl
            .ok(&["delete", "pod", &replica, "--wait=false"])
            .await;
        replica
    }

    /// Wait until the cluster has exactly `size` pods, all Ready, one of them primary, and the
    /// status says so; returns the primary's name.
    async fn wait_healthy(&self, size: usize) -> String {
        cluster::wait_healthy(&self.kubectl, CLUSTER, size, DEADLINE).await
    }

    async fn psql(&self, pod: &str, sql: &str) -> String {
        cluster::psql(&self.kubectl, pod, sql).await
    }
}

/// Stage 04, the whole homework: create 3, scale to 5, lose a replica, shrink to 2, restart the
/// operator, refuse a major downgrade, lose the primary (it waits, and says step 05 fails over),
/// lose every member, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage04_runs_the_homework_on_a_real_postgres_cluster() {
    the_homework(|client| Operator::start(client, ()), false).await;
}

/// Stage 05, the same, but losing the primary promotes a replica, and a row written before is
/// on it and on every replica after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage05_runs_it_through_a_failover() {
    the_homework(
        |client| Operator::start(client, test_support::quick_failover()),
        true,
    )
    .await;
}

async fn the_homework(start: impl Fn(&Client) -> Operator, fails_over: bool) {
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let client = test_support::plain_client(&sandbox.url());
    let world = World {
        kubectl: Kubectl::new(&sandbox.url()),
        sandbox,
    };
    let operator = start(&client);

    // Create: one primary, two replicas, the Services and the Secret.
    let started = Instant::now();
    let manifest = format!(
        "{{\"apiVersion\":\"workshop.example.com/v1\",\"kind\":\"PostgresCluster\",\
         \"metadata\":{{\"name\":\"{CLUSTER}\"}},\"spec\":{{\"size\":3,\"version\":\"16\"}}}}"
    );
    // The CRD is ensured by the operator as it starts: wait for kubectl to accept the kind.
    world.kubectl.create_when_served(&manifest, DEADLINE).await;
    let primary = world.wait_healthy(3).await;
    println!(
        "create → 3 ready members: {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        operator.said("Launching seed Postgres node"),
        "the seed line"
    );
    for object in [
        "service/db-primary",
        "service/db-replicas",
        "secret/db-credentials",
        "configmap/db-init",
    ] {
        world.kubectl.ok(&["get", object]).await;
    }
    let status = world.cluster().await["status"].clone();
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["size"], 3);
    let columns = world.kubectl.ok(&["get", "pgc", CLUSTER]).await;
    assert!(columns.contains(&primary), "PRIMARY column: {columns}");

    world
        .psql(
            &primary,
            "CREATE TABLE kept (note text); INSERT INTO kept VALUES ('written before')",
        )
        .await;

    // Scale with kubectl through the scale subresource.
    world
        .kubectl
        .ok(&["scale", "pgc", CLUSTER, "--replicas=5"])
        .await;
    world.wait_healthy(5).await;

    // Lose a replica: a new one, with a new name, takes its place.
    let before: BTreeSet<String> = world.pods().await.into_iter().map(|p| p.name).collect();
    let replica = world.delete_a_replica().await;
    world.wait_healthy(5).await;
    let after: BTreeSet<String> = world.pods().await.into_iter().map(|p| p.name).collect();
    assert!(!after.contains(&replica), "the deleted replica is gone");
    assert_eq!(after.difference(&before).count(), 1, "exactly one new pod");

    // Shrink to 2: the primary survives.
    world
        .kubectl
        .ok(&["scale", "pgc", CLUSTER, "--replicas=2"])
        .await;
    assert_eq!(
        world.wait_healthy(2).await,
        primary,
        "the primary is never removed"
    );

    let mut primary = primary;
    if fails_over {
        primary = lose_the_primary(&world, &operator, &primary).await;
    }

    // Restart the operator: it adopts the cluster, makes no pod and no new primary.
    let pods_before: BTreeSet<String> = world.pods().await.into_iter().map(|p| p.name).collect();
    operator.stop().await;
    let operator = start(&client);
    test_support::eventually(
        DEADLINE,
        "the new operator to adopt the cluster",
        || async { operator.said("adopting running cluster").then_some(()) },
    )
    .await;
    // Three timer rounds after adopting: each one checks the Secret (a GET in the request log;
    // `owned_recheck` is zero here).
    let secret_checks = |world: &World| {
        world
            .sandbox
            .requests()
            .iter()
            .filter(|r| r.verb == "get" && r.resource == "secrets")
            .count()
    };
    let checks_at_adoption = secret_checks(&world);
    test_support::eventually(DEADLINE, "three more reconcile rounds", || async {
        (secret_checks(&world) >= checks_at_adoption + 3).then_some(())
    })
    .await;
    let pods_after: BTreeSet<String> = world.pods().await.into_iter().map(|p| p.name).collect();
    assert_eq!(
        pods_before, pods_after,
        "adopting creates and deletes nothing"
    );
    assert_eq!(world.cluster().await["status"]["primary"], primary.as_str());

    // A major downgrade is refused with a condition; nothing is replaced.
    world
        .kubectl
        .ok(&[
            "patch",
            "pgc",
            CLUSTER,
            "--type=merge",
            "-p",
            r#"{"spec":{"version":"15"}}"#,
        ])
        .await;
    let degraded = test_support::eventually(DEADLINE, "the Degraded condition", || async {
        let status = world.cluster().await["status"].clone();
        status["conditions"].as_array().and_then(|c| {
            c.iter()
                .find(|c| c["type"] == "Degraded" && c["reason"] == "MajorVersionChangeRefused")
                .cloned()
        })
    })
    .await;
    assert_eq!(degraded["status"], "True");
    let pods_now: BTreeSet<String> = world.pods().await.into_iter().map(|p| p.name).collect();
    assert_eq!(
        pods_before, pods_now,
        "nothing replaced for a refused change"
    );
    let described = world.kubectl.ok(&["describe", "pgc", CLUSTER]).await;
    let told = if fails_over {
        "Promoted"
    } else {
        "ReplicaCreated"
    };
    assert!(
        described.contains(told),
        "Events tell the story: {described}"
    );

    // A replica lost while the change is refused is replaced on the version the cluster runs.
    world.delete_a_replica().await;
    world.wait_healthy(2).await;
    let images = world
        .kubectl
        .ok(&[
            "get",
            "pods",
            "-l",
            "workshop.example.com/cluster=db",
            "-o",
            "jsonpath={.items[*].spec.containers[0].image}",
        ])
        .await;
    assert!(
        images
            .split_whitespace()
            .all(|image| image == "postgres:16"),
        "no pod of another major: {images}"
    );

    // Stage 04 loses its primary last: nothing promotes a replica, it says so and waits.
    if !fails_over {
        world
            .kubectl
            .ok(&["delete", "pod", &primary, "--wait=false"])
            .await;
        let waiting = "is gone; promoting a replica in its place is step 05's failover";
        test_support::eventually(DEADLINE, "the wait for step 05", || async {
            let status = world.cluster().await["status"].clone();
            let said = status["conditions"].as_array().is_some_and(|c| {
                c.iter().any(|c| {
                    c["type"] == "Progressing"
                        && c["message"].as_str().is_some_and(|m| m.contains(waiting))
                })
            });
            said.then_some(())
        })
        .await;
        let pods = world.pods().await;
        assert!(
            pods.iter().all(|p| p.role != "primary"),
            "no replica promoted: {pods:?}"
        );
    }

    // Every member lost at once: a disaster, phase Failed, and no silent re-seed.
    cluster::delete_every_pod(&world.kubectl, CLUSTER).await;
    cluster::wait_phase(&world.kubectl, CLUSTER, "Failed", DEADLINE).await;
    assert!(operator.said("All Postgres pods are dead"));
    let described = world.kubectl.ok(&["describe", "pgc", CLUSTER]).await;
    assert!(
        described.contains("AllMembersLost"),
        "a Warning event: {described}"
    );
    let secret_gets = secret_checks(&world);
    test_support::eventually(DEADLINE, "two more reconcile rounds", || async {
        (secret_checks(&world) >= secret_gets + 2).then_some(())
    })
    .await;
    assert!(world.pods().await.is_empty(), "no empty database re-seeded");

    // Delete: every owned object is collected.
    world.kubectl.ok(&["delete", "pgc", CLUSTER]).await;
    test_support::eventually(DEADLINE, "every owned object collected", || async {
        let left = world
            .kubectl
            .ok(&["get", "pods,services,secrets,configmaps", "-o", "name"])
            .await;
        let ours: Vec<&str> = left.lines().filter(|l| l.contains("/db-")).collect();
        ours.is_empty().then_some(())
    })
    .await;
    operator.stop().await;
}

/// Stage 05: lose the primary; a replica is promoted, and the row written before is there and
/// on every replica after. The new primary.
async fn lose_the_primary(world: &World, operator: &Operator, primary: &str) -> String {
    let lost_at = Instant::now();
    world
        .kubectl
        .ok(&["delete", "pod", primary, "--wait=false"])
        .await;
    let new_primary = test_support::eventually(DEADLINE, "a new primary", || async {
        let pods = world.pods().await;
        pods.iter()
            .find(|p| p.role == "primary" && p.name != primary && p.ready)
            .map(|p| p.name.clone())
    })
    .await;
    println!(
        "primary deleted → new primary ready: {:.1} s",
        lost_at.elapsed().as_secs_f64()
    );
    assert!(operator.said(&format!("Promoting {new_primary} to primary")));
    assert_eq!(
        world.psql(&new_primary, "SELECT note FROM kept").await,
        "written before"
    );
    assert_eq!(
        world.psql(&new_primary, "SELECT pg_is_in_recovery()").await,
        "f"
    );
    world.wait_healthy(2).await;
    world
        .psql(&new_primary, "INSERT INTO kept VALUES ('written after')")
        .await;
    for Member {
        name: pod, role, ..
    } in world.pods().await
    {
        if role == "replica" {
            assert_eq!(world.psql(&pod, "SELECT pg_is_in_recovery()").await, "t");
            let rows = test_support::eventually(
                DEADLINE,
                "the replica to follow the new primary",
                || async {
                    let rows = world.psql(&pod, "SELECT count(*) FROM kept").await;
                    (rows == "2").then_some(rows)
                },
            )
            .await;
            assert_eq!(rows, "2");
        }
    }

    new_primary
}
