//! Real kubectl against the sandbox: discovery, the CRD, the workshop's example cluster through
//! create/get/apply/replace/patch/scale/delete, validation errors, and `get -w`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test kubectl checklist::`.

use std::time::Duration;

use test_support::http_client::{pod, Http};
use test_support::{Kubectl, CRD_FIXTURE, EXAMPLE_FIXTURE};
use tokio::io::{AsyncBufReadExt, BufReader};

/// `kubectl api-resources` sees the built-in kinds, and PostgresCluster (short name pgc) as
/// soon as its CRD is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_shows_builtins_and_a_new_crd() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let before = kubectl.ok(&["api-resources"]).await;
    assert!(
        before.contains("pods") && before.contains("customresourcedefinitions"),
        "{before}"
    );
    assert!(!before.contains("postgresclusters"), "{before}");

    let out = kubectl.ok(&["apply", "-f", CRD_FIXTURE]).await;
    assert!(out.contains("customresourcedefinition.apiextensions.k8s.io/postgresclusters.workshop.example.com created"), "{out}");
    kubectl
        .ok(&[
            "wait",
            "--for=condition=Established",
            "crd/postgresclusters.workshop.example.com",
            "--timeout=10s",
        ])
        .await;
    let after = kubectl.ok(&["api-resources"]).await;
    let line = after
        .lines()
        .find(|l| l.starts_with("postgresclusters"))
        .unwrap_or_else(|| panic!("no postgresclusters in:\n{after}"));
    assert!(
        line.contains("pgc") && line.contains("workshop.example.com/v1") && line.contains("true"),
        "{line}"
    );
}

/// The workshop's whole kubectl session: create, get (printer columns), get -o json, replace,
/// apply twice (the second is `unchanged`), patch --type=merge, scale, delete -f.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn example_cluster_goes_through_every_kubectl_verb() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    kubectl.ok(&["apply", "-f", CRD_FIXTURE]).await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=Established",
            "crd/postgresclusters.workshop.example.com",
            "--timeout=10s",
        ])
        .await;

    let out = kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;
    assert!(
        out.contains("postgrescluster.workshop.example.com/example-postgresql-cluster created"),
        "{out}"
    );

    let table = kubectl.ok(&["get", "pgc"]).await;
    let header = test_support::table_row(&table, 0);
    assert_eq!(header, test_support::PGC_TABLE_HEADER, "{table}");
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        row.starts_with("example-postgresql-cluster")
            && row.contains(" 3 ")
            && row.contains(" 16 "),
        "{table}"
    );

    let json: serde_json::Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "pgc", "example-postgresql-cluster", "-o", "json"])
            .await,
    )
    .expect("kubectl -o json prints JSON");
    assert_eq!(json["kind"], "PostgresCluster");
    assert_eq!(json["spec"]["size"], 3);
    assert_eq!(json["metadata"]["generation"], 1);

    let out = kubectl.ok(&["replace", "-f", EXAMPLE_FIXTURE]).await;
    assert!(out.contains("replaced"), "{out}");
    let out = kubectl.ok(&["apply", "-f", EXAMPLE_FIXTURE]).await;
    assert!(out.contains("configured"), "{out}");
    let out = kubectl.ok(&["apply", "-f", EXAMPLE_FIXTURE]).await;
    assert!(out.contains("unchanged"), "{out}");

    let out = kubectl
        .ok(&[
            "patch",
            "pgc",
            "example-postgresql-cluster",
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ])
        .await;
    assert!(out.contains("patched"), "{out}");
    let out = kubectl
        .ok(&[
            "patch",
            "pgc",
            "example-postgresql-cluster",
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ])
        .await;
    assert!(
        out.contains("patched (no change)"),
        "a no-op patch keeps the resourceVersion: {out}"
    );

    let out = kubectl
        .ok(&["scale", "pgc/example-postgresql-cluster", "--replicas=5"])
        .await;
    assert!(out.contains("scaled"), "{out}");
    let size = kubectl
        .ok(&[
            "get",
            "pgc",
            "example-postgresql-cluster",
            "-o",
            "jsonpath={.spec.size} {.spec.paused} {.metadata.generation}",
        ])
        .await;
    assert_eq!(
        size, "5 true 3",
        "scale wrote .spec.size and bumped generation"
    );
    // --current-replicas goes through GET /scale then a PUT with no Content-Type.
    kubectl
        .ok(&[
            "scale",
            "pgc/example-postgresql-cluster",
            "--current-replicas=5",
            "--replicas=4",
        ])
        .await;

    let out = kubectl.ok(&["delete", "-f", EXAMPLE_FIXTURE]).await;
    assert!(
        out.contains("\"example-postgresql-cluster\" deleted"),
        "{out}"
    );
    let out = kubectl.ok(&["get", "pgc"]).await;
    assert!(out.is_empty(), "{out}");
}

/// A PostgresCluster with `size: "three"` is refused, and kubectl names the field spec.size;
/// a default (strategic) patch on a custom resource gets a clean 415.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_clusters_and_strategic_patches_are_refused_clearly() {
    let sandbox = test_support::start_sandbox().await;
    Http::new(&sandbox.url()).install_crd().await;
    let kubectl = Kubectl::new(&sandbox.url());
    let bad = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/bad-size-postgrescluster.yaml"
    );
    let out = kubectl.run(&["create", "-f", bad]).await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("The PostgresCluster \"bad-size\" is invalid: spec.size"),
        "{}",
        out.stderr
    );

    kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;
    let out = kubectl
        .run(&[
            "patch",
            "pgc",
            "example-postgresql-cluster",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ])
        .await;
    assert!(!out.success);
    assert!(
        out.stderr
            .contains("application/strategic-merge-patch+json is not supported"),
        "{}",
        out.stderr
    );

    let out = kubectl.run(&["get", "pgc", "nope"]).await;
    assert!(out.stderr.contains("Error from server (NotFound): postgresclusters.workshop.example.com \"nope\" not found"), "{}", out.stderr);
}

/// `kubectl get pods -w` prints a row when a pod is created and another when the simulated
/// kubelet marks it Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_watch_prints_each_change() {
    let sandbox = test_support::start_sandbox_with(sandbox::SandboxOptions {
        kubelet_delay: Duration::from_millis(300),
        ..Default::default()
    })
    .await;
    let kubectl = Kubectl::new(&sandbox.url());
    let mut child = kubectl
        .command(&["get", "pods", "-w"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let http = Http::new(&sandbox.url());
    // Wait until kubectl's watch is open, so the pod's ADDED is a live event.
    test_support::until_watch_opened(&sandbox, "pods").await;
    http.create(
        "/api/v1/namespaces/default/pods",
        &pod("web", serde_json::json!({})),
    )
    .await;

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen
        .iter()
        .any(|l: &String| l.contains("web") && l.contains("Running"))
    {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no Running row; saw {seen:?}"))
            .expect("read kubectl output")
            .expect("kubectl still running");
        seen.push(line);
    }
    assert!(
        seen.iter()
            .any(|l| l.contains("web") && l.contains("Pending")),
        "{seen:?}"
    );
    assert!(
        seen.iter()
            .any(|l| l.contains("web") && l.contains("1/1") && l.contains("Running")),
        "{seen:?}"
    );
    child.kill().await.ok();
}

/// The rest of kubectl's everyday commands on built-in kinds: `create namespace` and
/// `create secret` (protobuf bodies), `apply` of a pod twice and with a changed label
/// (strategic merge), `get all`, `logs`, `describe` (events by field selector), `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everyday_commands_on_built_in_kinds() {
    let (sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    assert!(kubectl
        .ok(&["create", "namespace", "demo"])
        .await
        .contains("namespace/demo created"));
    assert!(kubectl
        .ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=hunter2",
            "-n",
            "demo"
        ])
        .await
        .contains("secret/creds created"));
    let password = kubectl
        .ok(&[
            "get",
            "secret",
            "creds",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.password}",
        ])
        .await;
    assert_eq!(password, "aHVudGVyMg==");

    let pod_file = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/pod.yaml");
    assert!(kubectl
        .ok(&["apply", "-f", pod_file])
        .await
        .contains("pod/web created"));
    assert!(kubectl
        .ok(&["apply", "-f", pod_file])
        .await
        .contains("pod/web unchanged"));
    let relabelled = std::fs::read_to_string(pod_file)
        .expect("fixture")
        .replace("app: web", "app: web2");
    let dir = tempfile::tempdir().expect("tempdir");
    let changed = dir.path().join("pod.yaml");
    std::fs::write(&changed, relabelled).expect("write");
    let changed = changed.to_string_lossy().to_string();
    assert!(kubectl
        .ok(&["apply", "-f", &changed])
        .await
        .contains("pod/web configured"));
    assert_eq!(
        kubectl
            .ok(&["get", "pod", "web", "-o", "jsonpath={.metadata.labels.app}"])
            .await,
        "web2"
    );

    let all = kubectl.ok(&["get", "all"]).await;
    assert!(all.contains("pod/web"), "{all}");
    let log = kubectl.ok(&["logs", "web"]).await;
    assert!(log.contains("no container runs here"), "{log}");

    let http = Http::new(&sandbox.url());
    let uid =
        http.get("/api/v1/namespaces/default/pods/web").await.json()["metadata"]["uid"].clone();
    // describe finds events by involvedObject name, namespace and uid.
    let event = serde_json::json!({
        "metadata": {"name": "web.1"}, "type": "Normal", "reason": "Started",
        "message": "simulated start",
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default", "uid": uid},
        "source": {"component": "sandbox-test"}, "lastTimestamp": "2026-01-01T00:00:00Z"
    });
    assert_eq!(
        http.post("/api/v1/namespaces/default/events", &event)
            .await
            .status,
        201
    );
    let described = kubectl.ok(&["describe", "pod", "web"]).await;
    assert!(described.contains("simulated start"), "{described}");

    assert!(kubectl
        .ok(&["delete", "pod", "web"])
        .await
        .contains("pod \"web\" deleted"));
    assert!(kubectl
        .ok(&["delete", "namespace", "demo"])
        .await
        .contains("namespace \"demo\" deleted"));
    let out = kubectl.run(&["get", "secret", "creds", "-n", "demo"]).await;
    assert!(
        out.stderr.contains("NotFound"),
        "the namespace took its secret: {}",
        out.stderr
    );
}

/// kubectl over HTTPS with the sandbox's CA and bearer token; a wrong token is Unauthorized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_over_tls_with_a_bearer_token() {
    let (sandbox, dir) = test_support::start_tls_sandbox(Default::default()).await;
    let ca = dir.path().join("ca.crt").to_string_lossy().to_string();
    let token = sandbox.token().expect("a token in TLS mode");
    let kubectl = Kubectl::new(&sandbox.url()).with_flags(&[
        "--certificate-authority",
        &ca,
        "--token",
        &token,
    ]);
    let namespaces = kubectl.ok(&["get", "namespaces"]).await;
    assert!(namespaces.contains("kube-system"), "{namespaces}");

    let wrong = Kubectl::new(&sandbox.url()).with_flags(&[
        "--certificate-authority",
        &ca,
        "--token",
        "wrong",
    ]);
    let out = wrong.run(&["get", "namespaces"]).await;
    assert!(!out.success);
    // kubectl words a 401 during discovery as "the server has asked for the client to provide
    // credentials", and a 401 on the request itself as "Unauthorized".
    assert!(
        out.stderr.contains("provide credentials") || out.stderr.contains("Unauthorized"),
        "{}",
        out.stderr
    );
}

/// The rest of kubectl-needs.md's checklist on a custom resource: `apply --server-side`,
/// `patch --type=json`, `describe`, and `get pgc NAME -w` (which throws away the first event of
/// its RV-0 watch, so the server must send the synthetic ADDED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_json_patch_describe_and_watch_one_object() {
    let sandbox = test_support::start_sandbox().await;
    Http::new(&sandbox.url()).install_crd().await;
    let kubectl = Kubectl::new(&sandbox.url());
    let out = kubectl
        .ok(&["apply", "--server-side", "-f", EXAMPLE_FIXTURE])
        .await;
    assert!(out.contains("serverside-applied"), "{out}");
    let out = kubectl
        .ok(&[
            "patch",
            "pgc",
            "example-postgresql-cluster",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/size","value":2}]"#,
        ])
        .await;
    assert!(out.contains("patched"), "{out}");
    let described = kubectl
        .ok(&["describe", "pgc", "example-postgresql-cluster"])
        .await;
    assert!(
        described.contains("Size:") && described.contains("Events:"),
        "{described}"
    );

    let mut child = kubectl
        .command(&["get", "pgc", "example-postgresql-cluster", "-w"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("kubectl starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let header = lines.next_line().await.expect("read").expect("header");
    assert!(header.starts_with("NAME"), "{header}");
    let first = lines.next_line().await.expect("read").expect("row");
    assert!(first.contains(" 2 "), "{first}");
    test_support::until_watch_opened(&sandbox, "postgresclusters").await;
    Http::new(&sandbox.url())
        .merge_patch(
            "/apis/workshop.example.com/v1/namespaces/default/postgresclusters/example-postgresql-cluster",
            &serde_json::json!({"spec": {"size": 7}}),
        )
        .await;
    let changed = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a row for the change")
        .expect("read")
        .expect("row");
    assert!(changed.contains(" 7 "), "{changed}");
    child.kill().await.ok();
}
