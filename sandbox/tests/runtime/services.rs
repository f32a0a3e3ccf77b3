//! Services under the process runtime, with real kubectl and real PostgreSQL: a Service's
//! ClusterIP is a loopback address that forwards to its ready pod, its Endpoints list the pod,
//! and once the pod is gone the Endpoints are empty and the ClusterIP refuses connections.
//! Inside pods, Services are names (each pod's /etc/hosts, kept current) and environment
//! variables, as a replica's init container running `pg_basebackup -h <cluster>-primary` needs.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Needs PostgreSQL and bubblewrap (`.ci/install-test-deps`).
//! Run: `cargo test -p sandbox --test runtime services::`.

use std::time::Duration;

use test_support::eventually;
use test_support::runtime::{
    create, running_trusting_postgres, start, wait_ready, write_then_read,
};
use test_support::Kubectl;

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

/// psql through the ClusterIP reads a row from the pod behind it; `kubectl get endpoints` and
/// `kubectl get endpointslices` show the pod's IP and resolved port; after the pod is deleted
/// neither lists it and a connection to the ClusterIP is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ip_forwards_to_the_ready_pod_and_refuses_without_one() {
    let (_sandbox, kubectl, runtime) = start().await;
    create(&kubectl, MANIFESTS).await;
    let pod_ip = test_support::pod_ip(&wait_ready(&kubectl, "pg").await);
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

    write_then_read(
        &runtime,
        (
            &pod_ip,
            "CREATE TABLE t (v text); INSERT INTO t VALUES ('through the service')",
        ),
        (&cluster_ip, "SELECT v FROM t"),
        "through the service",
    )
    .await;

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

    let slices: serde_json::Value = serde_json::from_str(
        &kubectl
            .ok(&[
                "get",
                "endpointslices",
                "-l",
                "kubernetes.io/service-name=db",
                "-o",
                "json",
            ])
            .await,
    )
    .expect("endpointslices JSON");
    let slice = &slices["items"][0];
    assert_eq!(
        slices["items"].as_array().map(Vec::len),
        Some(1),
        "{slices}"
    );
    assert_eq!(slice["addressType"], "IPv4");
    assert_eq!(slice["endpoints"][0]["addresses"][0], pod_ip.as_str());
    assert_eq!(slice["endpoints"][0]["conditions"]["ready"], true);
    assert_eq!(slice["endpoints"][0]["targetRef"]["name"], "pg");
    assert_eq!(slice["ports"][0]["port"], 5432);
    assert_eq!(slice["ports"][0]["name"], "postgres");
    let slice_name = slice["metadata"]["name"].as_str().expect("a slice name");
    assert!(slice_name.starts_with("db-"), "{slice_name}");
    let table = kubectl.ok(&["get", "endpointslices"]).await;
    let header = test_support::table_row(&table, 0);
    assert_eq!(header, ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]);
    let row: Vec<&str> = table
        .lines()
        .find(|line| line.starts_with(slice_name))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row[1..4], ["IPv4", "5432", pod_ip.as_str()], "{table}");

    kubectl.ok(&["delete", "pod", "pg", "--wait=false"]).await;
    eventually(
        Duration::from_secs(60),
        "Endpoints and EndpointSlice without addresses",
        || async {
            let out = kubectl.run(&["get", "endpoints", "db", "-o", "json"]).await;
            let endpoints: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
            let empty = endpoints["subsets"]
                .as_array()
                .is_none_or(|s| s.iter().all(|s| s["addresses"].is_null()));
            let out = kubectl
                .run(&["get", "endpointslices", slice_name, "-o", "json"])
                .await;
            let slice: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
            let no_endpoints = slice["endpoints"].as_array().is_some_and(Vec::is_empty);
            (empty && no_endpoints).then_some(())
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

/// The client pod of the next test: its init container must resolve `pg-primary` at once (the
/// Service was created just before the pod), then waits for it to answer and asks who answered;
/// its shell prints the environment it started with and stays up for `kubectl exec`.
const CLIENT: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: client}
spec:
  initContainers:
  - name: ask-primary
    image: postgres:15
    command:
    - sh
    - -c
    - |
      getent hosts pg-primary || { echo "pg-primary does not resolve"; exit 1; }
      until pg_isready -q -h pg-primary -U postgres; do sleep 0.2; done
      echo "answered by $(psql -h pg-primary -U postgres -Atc 'select inet_server_addr()')"
  containers:
  - name: shell
    image: postgres:15
    command: [sh, -c, 'env; trap "exit 0" TERM; while true; do sleep 1; done']
    env: [{name: PG_PRIMARY_SERVICE_PORT_POSTGRES, value: explicit}]
"#;

/// `inet_server_addr()` of whoever answers psql at `host`, asked from inside pod `client`.
async fn server_address_seen_from_client(kubectl: &Kubectl, host: &str) -> Option<String> {
    let out = kubectl
        .run(&[
            "exec",
            "client",
            "--",
            "psql",
            "-h",
            host,
            "-U",
            "postgres",
            "-Atc",
            "select inet_server_addr()",
        ])
        .await;
    out.success.then(|| out.stdout.trim().to_string())
}

/// What `getent hosts NAME` answers inside pod `client` (the first address), if anything.
async fn resolved_in_client(kubectl: &Kubectl, name: &str) -> Option<String> {
    let out = kubectl
        .run(&["exec", "client", "--", "getent", "hosts", name])
        .await;
    out.stdout
        .split_whitespace()
        .next()
        .map(str::to_string)
        .filter(|_| out.success)
}

/// The operator's replica flow: a Service created, then at once a pod whose init container
/// resolves its name and connects through it with pg_isready and psql; the pod's environment
/// has `PG_PRIMARY_SERVICE_HOST`/`_PORT` (its own `env` winning); after a "failover" (the
/// selector's label moved to another pod) the same name reaches the new primary; a headless
/// Service created later appears in the running pod's /etc/hosts as its ready pods' IPs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_reach_services_by_name_and_follow_a_failover() {
    let (_sandbox, kubectl, _runtime) = start().await;
    let first = running_trusting_postgres(&kubectl, "pg-a").await;
    let second = running_trusting_postgres(&kubectl, "pg-b").await;
    kubectl
        .ok(&["label", "pod", "pg-a", "pg-b", "cluster=c"])
        .await;
    kubectl.ok(&["label", "pod", "pg-a", "role=primary"]).await;
    create(
        &kubectl,
        r#"
apiVersion: v1
kind: Service
metadata: {name: pg-primary}
spec:
  selector: {cluster: c, role: primary}
  ports:
  - {name: postgres, port: 5432}
"#,
    )
    .await;
    create(&kubectl, CLIENT).await;
    wait_ready(&kubectl, "client").await;
    let service: serde_json::Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "service", "pg-primary", "-o", "json"])
            .await,
    )
    .expect("service JSON");
    let cluster_ip = service["spec"]["clusterIP"].as_str().expect("a ClusterIP");

    let init_log = kubectl.ok(&["logs", "client", "-c", "ask-primary"]).await;
    assert!(
        init_log.starts_with(&format!("{cluster_ip} ")),
        "resolved at once: {init_log}"
    );
    assert!(
        init_log.contains(&format!("answered by {first}")),
        "{init_log}"
    );
    for name in [
        "pg-primary",
        "pg-primary.default",
        "pg-primary.default.svc",
        "pg-primary.default.svc.cluster.local",
    ] {
        assert_eq!(
            resolved_in_client(&kubectl, name).await.as_deref(),
            Some(cluster_ip),
            "{name}"
        );
    }
    // The environment the container started with (what `kubectl exec` gets is computed anew).
    let environment = eventually(
        Duration::from_secs(30),
        "the shell's environment in its log",
        || async {
            let log = kubectl.ok(&["logs", "client", "-c", "shell"]).await;
            log.contains("PG_PRIMARY_SERVICE_HOST=").then_some(log)
        },
    )
    .await;
    assert!(
        environment.contains(&format!("PG_PRIMARY_SERVICE_HOST={cluster_ip}\n")),
        "{environment}"
    );
    assert!(
        environment.contains("PG_PRIMARY_SERVICE_PORT=5432\n"),
        "{environment}"
    );
    assert!(
        environment.contains("PG_PRIMARY_SERVICE_PORT_POSTGRES=explicit\n"),
        "the pod's own env wins: {environment}"
    );

    // Failover: the old primary loses the label, the new one gains it.
    kubectl.ok(&["label", "pod", "pg-a", "role-"]).await;
    kubectl.ok(&["label", "pod", "pg-b", "role=primary"]).await;
    eventually(
        Duration::from_secs(30),
        "pg-primary answered by the new primary",
        || async {
            let seen = server_address_seen_from_client(&kubectl, "pg-primary").await?;
            (seen == second).then_some(())
        },
    )
    .await;
    assert_eq!(
        resolved_in_client(&kubectl, "pg-primary").await.as_deref(),
        Some(cluster_ip)
    );

    create(
        &kubectl,
        r#"
apiVersion: v1
kind: Service
metadata: {name: pg-pods}
spec:
  clusterIP: None
  selector: {cluster: c}
  ports:
  - {port: 5432}
"#,
    )
    .await;
    let headless = eventually(
        Duration::from_secs(30),
        "pg-pods in the client's /etc/hosts",
        || resolved_in_client(&kubectl, "pg-pods.default.svc.cluster.local"),
    )
    .await;
    assert!(
        headless == first || headless == second,
        "a headless name is a pod's IP: {headless}"
    );
}

/// A Service's endpoints follow a change in the store at once, not at the runtime's next
/// resync: with a sync period of an hour, relabelling a running pod into a Service's selector
/// puts its address in the Endpoints within seconds (a failover relabels the promoted pod so).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_follow_a_relabel_without_waiting_for_the_sync_period() {
    let mut runtime = test_support::process_runtime();
    runtime.sync_period = Duration::from_secs(3600);
    let sandbox =
        test_support::start_process_sandbox_on(sandbox::SandboxOptions::default(), runtime).await;
    let kubectl = Kubectl::new(&sandbox.url());
    create(
        &kubectl,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: waiting, labels: {app: elsewhere}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: busybox, command: [sleep, "1000"]}
---
apiVersion: v1
kind: Service
metadata: {name: chosen}
spec:
  selector: {app: chosen}
  ports:
  - {port: 80}
"#,
    )
    .await;
    let pod_ip = test_support::pod_ip(&wait_ready(&kubectl, "waiting").await);
    let addresses = || async {
        kubectl
            .ok(&[
                "get",
                "endpoints",
                "chosen",
                "-o",
                "jsonpath={.subsets[*].addresses[*].ip}",
            ])
            .await
    };
    assert_eq!(addresses().await, "", "nothing selected yet");
    kubectl
        .ok(&["label", "pod", "waiting", "app=chosen", "--overwrite"])
        .await;
    eventually(
        Duration::from_secs(10),
        "the pod in the Endpoints",
        || async { (addresses().await == pod_ip).then_some(()) },
    )
    .await;
}
