//! Real kubectl against the sandbox: discovery, the CRD, the workshop's example cluster through
//! create/get/apply/replace/patch/scale/delete, validation errors, and `get -w`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test kubectl checklist::`.

use std::time::Duration;

use test_support::http_client::{pod, Http};
use test_support::{Kubectl, CRD_FIXTURE, EXAMPLE_FIXTURE, POD_FIXTURE};

const CLUSTER: &str = "example-postgresql-cluster";

/// `kubectl apply` of the CRD, and `kubectl wait` until it is Established.
async fn apply_crd(kubectl: &Kubectl) {
    kubectl
        .ok_saying(
            &["apply", "-f", CRD_FIXTURE],
            "customresourcedefinition.apiextensions.k8s.io/postgresclusters.workshop.example.com created",
        )
        .await;
    let crd = "crd/postgresclusters.workshop.example.com";
    let wait = ["wait", "--for=condition=Established", crd, "--timeout=10s"];
    kubectl.ok(&wait).await;
}

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

    apply_crd(&kubectl).await;
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
    apply_crd(&kubectl).await;
    let created = "postgrescluster.workshop.example.com/example-postgresql-cluster created";
    kubectl
        .ok_saying(&["create", "-f", EXAMPLE_FIXTURE], created)
        .await;

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

    let json = kubectl.json(&["get", "pgc", CLUSTER]).await;
    assert_eq!(json["kind"], "PostgresCluster");
    assert_eq!(json["spec"]["size"], 3);
    assert_eq!(json["metadata"]["generation"], 1);

    let paused = r#"{"spec":{"paused":true}}"#;
    let merge = ["patch", "pgc", CLUSTER, "--type=merge", "-p", paused];
    for (args, printed) in [
        (&["replace", "-f", EXAMPLE_FIXTURE][..], "replaced"),
        (&["apply", "-f", EXAMPLE_FIXTURE][..], "configured"),
        (&["apply", "-f", EXAMPLE_FIXTURE][..], "unchanged"),
        (&merge[..], "patched"),
        // A no-op patch keeps the resourceVersion.
        (&merge[..], "patched (no change)"),
        (
            &["scale", "pgc/example-postgresql-cluster", "--replicas=5"][..],
            "scaled",
        ),
    ] {
        kubectl.ok_saying(args, printed).await;
    }
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

    kubectl
        .ok_saying(
            &["delete", "-f", EXAMPLE_FIXTURE],
            "\"example-postgresql-cluster\" deleted",
        )
        .await;
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
    kubectl
        .fails_saying(
            &["create", "-f", bad],
            "The PostgresCluster \"bad-size\" is invalid: spec.size",
        )
        .await;

    kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;
    let paused = r#"{"spec":{"paused":true}}"#;
    kubectl
        .fails_saying(
            &["patch", "pgc", CLUSTER, "-p", paused],
            "application/strategic-merge-patch+json is not supported",
        )
        .await;
    kubectl
        .fails_saying(
            &["get", "pgc", "nope"],
            "Error from server (NotFound): postgresclusters.workshop.example.com \"nope\" not found",
        )
        .await;
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
    let mut watch = kubectl.watch(&["get", "pods", "-w"]);
    let http = Http::new(&sandbox.url());
    // Wait until kubectl's watch is open, so the pod's ADDED is a live event.
    test_support::until_watch_opened(&sandbox, "pods").await;
    http.create(
        "/api/v1/namespaces/default/pods",
        &pod("web", serde_json::json!({})),
    )
    .await;

    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("web") && l.contains("Running"))
    {
        seen.push(watch.next_line().await);
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
}

/// The rest of kubectl's everyday commands on built-in kinds: `create namespace` and
/// `create secret` (protobuf bodies), `apply` of a pod twice and with a changed label
/// (strategic merge), `get all`, `logs`, `describe` (events by field selector), `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everyday_commands_on_built_in_kinds() {
    let (sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    kubectl
        .ok_saying(&["create", "namespace", "demo"], "namespace/demo created")
        .await;
    let secret = "--from-literal=password=hunter2";
    let create = ["create", "secret", "generic", "creds", secret, "-n", "demo"];
    kubectl.ok_saying(&create, "secret/creds created").await;
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

    let apply = ["apply", "-f", POD_FIXTURE];
    kubectl.ok_saying(&apply, "pod/web created").await;
    kubectl.ok_saying(&apply, "pod/web unchanged").await;
    let relabelled = std::fs::read_to_string(POD_FIXTURE)
        .expect("fixture")
        .replace("app: web", "app: web2");
    let applied = kubectl.ok_manifest("apply", &relabelled).await;
    assert!(applied.contains("pod/web configured"), "{applied}");
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

    kubectl
        .ok_saying(&["delete", "pod", "web"], "pod \"web\" deleted")
        .await;
    kubectl
        .ok_saying(
            &["delete", "namespace", "demo"],
            "namespace \"demo\" deleted",
        )
        .await;
    // The namespace took its secret.
    kubectl
        .fails_saying(&["get", "secret", "creds", "-n", "demo"], "NotFound")
        .await;
}

/// kubectl over HTTPS with the sandbox's CA and bearer token; a wrong token is Unauthorized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_over_tls_with_a_bearer_token() {
    let (sandbox, dir) = test_support::start_tls_sandbox(Default::default()).await;
    let ca = dir.path().join("ca.crt");
    let token = sandbox.token().expect("a token in TLS mode");
    let kubectl = Kubectl::new(&sandbox.url()).with_ca_and_token(&ca, &token);
    let namespaces = kubectl.ok(&["get", "namespaces"]).await;
    assert!(namespaces.contains("kube-system"), "{namespaces}");

    let wrong = Kubectl::new(&sandbox.url()).with_ca_and_token(&ca, "wrong");
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
    kubectl
        .ok_saying(
            &["apply", "--server-side", "-f", EXAMPLE_FIXTURE],
            "serverside-applied",
        )
        .await;
    let resize = r#"[{"op":"replace","path":"/spec/size","value":2}]"#;
    kubectl
        .ok_saying(
            &["patch", "pgc", CLUSTER, "--type=json", "-p", resize],
            "patched",
        )
        .await;
    let described = kubectl.ok(&["describe", "pgc", CLUSTER]).await;
    assert!(
        described.contains("Size:") && described.contains("Events:"),
        "{described}"
    );

    let mut watch = kubectl.watch(&["get", "pgc", CLUSTER, "-w"]);
    let header = watch.next_line().await;
    assert!(header.starts_with("NAME"), "{header}");
    let first = watch.next_line().await;
    assert!(first.contains(" 2 "), "{first}");
    test_support::until_watch_opened(&sandbox, "postgresclusters").await;
    Http::new(&sandbox.url())
        .merge_patch(
            "/apis/workshop.example.com/v1/namespaces/default/postgresclusters/example-postgresql-cluster",
            &serde_json::json!({"spec": {"size": 7}}),
        )
        .await;
    let changed = watch.next_line().await;
    assert!(changed.contains(" 7 "), "{changed}");
}
