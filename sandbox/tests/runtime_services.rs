//! Services under the process runtime, with real kubectl and real PostgreSQL: a Service's
//! ClusterIP is a loopback address that forwards to its ready pod, its Endpoints list the pod,
//! and once the pod is gone the Endpoints are empty and the ClusterIP refuses connections.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap (`.ci/install-test-deps`).
//! Run: `cargo test -p sandbox --test runtime_services`.

mod common;

use std::time::Duration;

use common::eventually;
use common::runtime::{create, psql, start, wait_ready};

const MANIFESTS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: pg, labels: {app: db}}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: postgres
    image: postgres:16.4
    env:
    - {name: POSTGRES_PASSWORD, value: superuser-secret}
    ports:
    - {name: pg, containerPort: 5432}
    readinessProbe:
      exec: {command: [pg_isready, -h, 127.0.0.1, -p, "5432", -U, postgres]}
      periodSeconds: 1
      timeoutSeconds: 10
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  selector: {app: db}
  ports:
  - {name: postgres, port: 5432, targetPort: pg}
"#;

/// psql through the ClusterIP reads a row from the pod behind it; `kubectl get endpoints`
/// shows the pod's IP and resolved port; after the pod is deleted the Endpoints have no
/// addresses and a connection to the ClusterIP is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ip_forwards_to_the_ready_pod_and_refuses_without_one() {
    let (_sandbox, kubectl, runtime) = start().await;
    create(&kubectl, MANIFESTS).await;
    let pod = wait_ready(&kubectl, "pg").await;
    let pod_ip = pod["status"]["podIP"]
        .as_str()
        .expect("a pod IP")
        .to_string();
    let service: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "service", "db", "-o", "json"]).await)
            .expect("service JSON");
    let cluster_ip = service["spec"]["clusterIP"]
        .as_str()
        .expect("a ClusterIP")
        .to_string();
    let octets: Vec<u8> = cluster_ip
        .split('.')
        .map(|o| o.parse().expect("an IPv4 address"))
        .collect();
    assert_eq!(octets[0], 127, "{cluster_ip}");
    assert!(
        octets[2] >= 192,
        "ClusterIP above the pods' range: {cluster_ip}"
    );
    assert_ne!(cluster_ip, pod_ip);

    psql(
        &runtime,
        &pod_ip,
        "CREATE TABLE t (v text); INSERT INTO t VALUES ('through the service')",
    )
    .await
    .expect("write on the pod");
    let read = eventually(
        Duration::from_secs(30),
        "psql through the ClusterIP",
        || async { psql(&runtime, &cluster_ip, "SELECT v FROM t").await.ok() },
    )
    .await;
    assert_eq!(read, "through the service");

    let endpoints: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["get", "endpoints", "db", "-o", "json"]).await)
            .expect("endpoints JSON");
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["ip"],
        pod_ip.as_str()
    );
    assert_eq!(
        endpoints["subsets"][0]["addresses"][0]["targetRef"]["name"],
        "pg"
    );
    assert_eq!(endpoints["subsets"][0]["ports"][0]["port"], 5432);
    assert_eq!(endpoints["subsets"][0]["ports"][0]["name"], "postgres");

    kubectl.ok(&["delete", "pod", "pg", "--wait=false"]).await;
    eventually(
        Duration::from_secs(60),
        "Endpoints without addresses",
        || async {
            let out = kubectl.run(&["get", "endpoints", "db", "-o", "json"]).await;
            let endpoints: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
            let empty = endpoints["subsets"]
                .as_array()
                .is_none_or(|s| s.iter().all(|s| s["addresses"].is_null()));
            empty.then_some(())
        },
    )
    .await;
    let target = format!("{cluster_ip}:5432");
    let refused = eventually(
        Duration::from_secs(30),
        "the ClusterIP refusing",
        || async {
            match tokio::net::TcpStream::connect(&target).await {
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => Some(error),
                _ => None,
            }
        },
    )
    .await;
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}
