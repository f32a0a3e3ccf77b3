//! Real kubectl against the sandbox: discovery, the CRD, the workshop's example cluster through
//! create/get/apply/replace/patch/scale/delete, validation errors, and `get -w`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test --test sandbox_kubectl`.

mod common;

use std::time::Duration;

use common::{Http, Kubectl, CRD_FIXTURE, EXAMPLE_FIXTURE};
use tokio::io::{AsyncBufReadExt, BufReader};

/// `kubectl api-resources` sees the built-in kinds, and PostgresCluster (short name pgc) as
/// soon as its CRD is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_resources_shows_builtins_and_a_new_crd() {
    let sandbox = common::start_sandbox().await;
    let kubectl = Kubectl::new(&sandbox.url());
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
    let sandbox = common::start_sandbox().await;
    let kubectl = Kubectl::new(&sandbox.url());
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
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SIZE", "READY", "VERSION", "PHASE", "AGE"],
        "{table}"
    );
    let row = lines.next().unwrap_or_default();
    assert!(
        row.starts_with("example-postgresql-cluster")
            && row.contains(" 3 ")
            && row.contains("9.6.3"),
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
    let sandbox = common::start_sandbox().await;
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
    let sandbox = common::start_sandbox_with(postgres_operator::sandbox::SandboxOptions {
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
    common::eventually(Duration::from_secs(15), "kubectl's watch", || {
        let requests = sandbox.requests();
        async move {
            requests
                .iter()
                .any(|r| r.verb == "watch" && r.resource == "pods")
                .then_some(())
        }
    })
    .await;
    let created = http
        .post(
            "/api/v1/namespaces/default/pods",
            &common::pod("web", serde_json::json!({})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());

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
