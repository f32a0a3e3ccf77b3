//! More of real kubectl against the sandbox, beyond kubectl-needs.md's checklist: what a learner
//! types next (`explain`, `label`/`annotate` and their removal, `get pods -w` while deleting).
//! Each test pins a difference from kube-apiserver found by running kubectl by hand.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test kubectl more::`.

use std::time::Duration;

use test_support::http_client::Http;
use test_support::{Kubectl, EXAMPLE_FIXTURE, POD_FIXTURE};

const CLUSTER: &str = "example-postgresql-cluster";

/// `kubectl explain pgc` lists apiVersion, kind and metadata besides the CRD's own fields, and
/// `explain pgc.metadata.labels` follows the ObjectMeta reference, as kube-apiserver publishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_describes_metadata_of_custom_and_built_in_kinds() {
    let sandbox = test_support::start_sandbox().await;
    Http::new(&sandbox.url()).install_crd().await;
    let kubectl = Kubectl::new(&sandbox.url());

    let top = kubectl.ok(&["explain", "pgc"]).await;
    for field in [
        "apiVersion\t<string>",
        "kind\t<string>",
        "metadata\t<ObjectMeta>",
        "spec\t<Object> -required-",
    ] {
        assert!(top.contains(field), "no {field:?} in:\n{top}");
    }
    let spec = kubectl.ok(&["explain", "pgc.spec"]).await;
    assert!(spec.contains("Number of Postgres pods:"), "{spec}");
    let labels = kubectl.ok(&["explain", "pgc.metadata.labels"]).await;
    assert!(labels.contains("<map[string]string>"), "{labels}");
    let owners = kubectl
        .ok(&["explain", "pgc.metadata.ownerReferences"])
        .await;
    assert!(owners.contains("uid\t<string> -required-"), "{owners}");

    // Built-in kinds: metadata is described, and the description says where the rest is.
    let pod = kubectl.ok(&["explain", "pods"]).await;
    assert!(
        pod.contains("metadata\t<ObjectMeta>") && pod.contains("kubernetes.io/docs/reference"),
        "{pod}"
    );
}

/// `kubectl label pgc NAME tier-` removing the last label leaves no `labels: {}` behind (nor
/// does removing the last annotation), as Go's `omitempty` ObjectMeta does in kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_the_last_label_or_annotation_removes_the_map() {
    let sandbox = test_support::start_sandbox().await;
    Http::new(&sandbox.url()).install_crd().await;
    let kubectl = Kubectl::new(&sandbox.url());
    kubectl.ok(&["create", "-f", EXAMPLE_FIXTURE]).await;

    kubectl
        .ok_saying(&["label", "pgc", CLUSTER, "tier=db"], "labeled")
        .await;
    let shown = kubectl.ok(&["get", "pgc", "--show-labels"]).await;
    assert!(shown.contains("tier=db"), "{shown}");
    kubectl
        .ok(&["annotate", "pgc", CLUSTER, "note=hello"])
        .await;

    kubectl
        .ok_saying(&["label", "pgc", CLUSTER, "tier-"], "unlabeled")
        .await;
    kubectl.ok(&["annotate", "pgc", CLUSTER, "note-"]).await;
    let object = kubectl.json(&["get", "pgc", CLUSTER]).await;
    let metadata = &object["metadata"];
    assert!(metadata.get("labels").is_none(), "{metadata}");
    assert!(metadata.get("annotations").is_none(), "{metadata}");
}

/// `kubectl get pods -w` prints a force-deleted pod as Terminating: the DELETED event's pod
/// carries a deletionTimestamp, as kube-apiserver's always-graceful pod deletion leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_pods_watch_shows_a_deleted_pod_as_terminating() {
    let (sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    kubectl.ok(&["apply", "-f", POD_FIXTURE]).await;
    let http = Http::new(&sandbox.url());
    test_support::eventually(Duration::from_secs(5), "pod Running", || {
        let http = http.clone();
        async move {
            let pod = http.get("/api/v1/namespaces/default/pods/web").await.json();
            (pod["status"]["phase"] == "Running").then_some(())
        }
    })
    .await;

    let mut watch = kubectl.watch(&["get", "pods", "-w"]);
    let header = watch.next_line().await;
    assert!(header.starts_with("NAME"), "{header}");
    let running = watch.next_line().await;
    assert!(running.contains("Running"), "{running}");
    test_support::until_watch_opened(&sandbox, "pods").await;

    kubectl
        .ok_saying(
            &["delete", "pod", "web", "--grace-period=0", "--force"],
            "pod \"web\" force deleted",
        )
        .await;
    let deleted = watch.next_line().await;
    assert!(
        deleted.starts_with("web") && deleted.contains("Terminating"),
        "{deleted}"
    );
}

/// `kubectl auth can-i` gets "yes" for the sandbox's own kubectl (the admin, in
/// system:masters), with no warning, and `--list` shows one rule allowing everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_can_i_says_yes_to_the_admin() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let out = kubectl.run(&["auth", "can-i", "delete", "pods"]).await;
    assert!(out.success, "{out:?}");
    assert_eq!(out.stdout.trim(), "yes");
    assert!(!out.stderr.contains("Warning"), "{}", out.stderr);
    let rules = kubectl.ok(&["auth", "can-i", "--list"]).await;
    assert!(rules.lines().any(|l| l.starts_with("*.*")), "{rules}");
}

/// `kubectl auth whoami` prints the admin's name and groups, as it does against kind (whose
/// admin is `kubernetes-admin` in `kubeadm:cluster-admins`), and `--as` shows the impersonated
/// service account in its three groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_whoami_names_the_user_and_groups() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let me = kubectl.ok(&["auth", "whoami"]).await;
    assert_eq!(
        test_support::table_row(&me, 0),
        ["ATTRIBUTE", "VALUE"],
        "{me}"
    );
    assert_eq!(
        test_support::table_row(&me, 1),
        ["Username", "system:admin"],
        "{me}"
    );
    assert_eq!(
        test_support::table_row(&me, 2),
        ["Groups", "[system:masters", "system:authenticated]"],
        "{me}"
    );
    let json = kubectl.json(&["auth", "whoami", "-o", "json"]).await;
    assert_eq!(json["kind"], "SelfSubjectReview", "{json}");
    let them = kubectl
        .ok(&[
            "auth",
            "whoami",
            "--as",
            "system:serviceaccount:default:default",
        ])
        .await;
    assert!(
        them.contains("system:serviceaccount:default:default")
            && them.contains(
                "[system:serviceaccounts system:serviceaccounts:default system:authenticated]"
            ),
        "{them}"
    );
}

/// `kubectl top` finds the metrics API in discovery; simulated pods run nothing and report
/// zero, a pod that is not there is metrics-server's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_top_reports_zero_for_simulated_pods() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    kubectl.ok(&["run", "web", "--image=nginx:1.27"]).await;
    let row = test_support::eventually(Duration::from_secs(10), "web in kubectl top", || async {
        let top = kubectl.run(&["top", "pod"]).await;
        let row: Vec<String> = test_support::table_row(&top.stdout, 1)
            .into_iter()
            .map(String::from)
            .collect();
        (row.first().map(String::as_str) == Some("web")).then_some(row)
    })
    .await;
    assert_eq!(row, ["web", "0m", "0Mi"]);
    let node = kubectl.ok(&["top", "node"]).await;
    assert_eq!(
        test_support::table_row(&node, 1),
        ["sandbox-node", "0m", "0%", "0Mi", "0%"],
        "{node}"
    );
    kubectl
        .fails_saying(
            &["top", "pod", "gone"],
            "podmetrics.metrics.k8s.io \"default/gone\" not found",
        )
        .await;
}

/// The imperative `kubectl create deployment|service|serviceaccount|role|rolebinding` (protobuf
/// bodies) work, and `get` prints kube-apiserver's columns for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imperative_creates_and_their_get_columns() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    for (args, printed) in [
        (
            &[
                "create",
                "deployment",
                "web",
                "--image=nginx:1.27",
                "--replicas=2",
            ][..],
            "deployment.apps/web created",
        ),
        (
            &["create", "service", "nodeport", "web", "--tcp=80:8080"][..],
            "service/web created",
        ),
        (
            &[
                "create",
                "service",
                "externalname",
                "db",
                "--external-name=db.example.com",
            ][..],
            "service/db created",
        ),
        (
            &["create", "serviceaccount", "postgres-operator"][..],
            "serviceaccount/postgres-operator created",
        ),
        (
            &[
                "create",
                "role",
                "pods-reader",
                "--verb=get,list",
                "--resource=pods",
            ][..],
            "role.rbac.authorization.k8s.io/pods-reader created",
        ),
        (
            &[
                "create",
                "rolebinding",
                "pods-reader",
                "--role=pods-reader",
                "--serviceaccount=default:postgres-operator",
            ][..],
            "rolebinding.rbac.authorization.k8s.io/pods-reader created",
        ),
    ] {
        kubectl.ok_saying(args, printed).await;
    }

    let deployments = kubectl.ok(&["get", "deployments", "-o", "wide"]).await;
    let header = test_support::table_row(&deployments, 0);
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{deployments}"
    );
    // READY counts the pods the Deployment controller has made ready so far, out of 2.
    let web = deployments
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_default();
    assert!(
        web.split_whitespace()
            .nth(1)
            .is_some_and(|ready| ready.ends_with("/2"))
            && web.contains("nginx:1.27"),
        "READY is ready/2 replicas: {deployments}"
    );

    let services = kubectl.ok(&["get", "services"]).await;
    let web = services
        .lines()
        .find(|l| l.starts_with("web "))
        .unwrap_or_else(|| panic!("{services}"));
    assert!(web.contains("NodePort") && web.contains("80:3"), "{web}");
    let db = services
        .lines()
        .find(|l| l.starts_with("db "))
        .unwrap_or_else(|| panic!("{services}"));
    assert!(db.contains("db.example.com"), "{db}");

    let rules = kubectl
        .ok(&[
            "get",
            "role",
            "pods-reader",
            "-o",
            "jsonpath={.rules[0].apiGroups}",
        ])
        .await;
    assert_eq!(
        rules, r#"[""]"#,
        "the core group survives protobuf decoding"
    );
    let binding = kubectl.ok(&["get", "rolebinding", "-o", "wide"]).await;
    assert!(
        binding.contains("Role/pods-reader") && binding.contains("default/postgres-operator"),
        "{binding}"
    );
}

/// With `pod_events` (the `sandbox` binary's setting) `kubectl describe pod` lists the
/// scheduler's and kubelet's Events; `kubectl describe node` has allocatable resources to
/// divide by (no `-9223372036854775808%`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_pod_events_and_node_allocations() {
    let sandbox = test_support::start_sandbox_with(sandbox::SandboxOptions {
        pod_events: true,
        ..Default::default()
    })
    .await;
    let kubectl = Kubectl::new(&sandbox.url());
    kubectl.ok(&["apply", "-f", POD_FIXTURE]).await;
    let events = test_support::eventually(Duration::from_secs(5), "the pod's events", || {
        let kubectl = &kubectl;
        async move {
            let out = kubectl.ok(&["get", "events"]).await;
            out.contains("Started").then_some(out)
        }
    })
    .await;
    assert!(events.contains("pod/web"), "{events}");
    let described = kubectl.ok(&["describe", "pod", "web"]).await;
    assert!(
        described.contains("Successfully assigned default/web to sandbox-node")
            && described.contains("Started container c"),
        "{described}"
    );

    let node = kubectl.ok(&["describe", "node", "sandbox-node"]).await;
    assert!(node.contains("Allocatable:"), "{node}");
    assert!(!node.contains("-9223372036854775808"), "{node}");
}

/// `kubectl apply -k kube/` on an empty sandbox succeeds in one go (the example cluster is not in
/// the kustomization: kubectl maps every kind before sending the first object); applied second,
/// into the operator's namespace, the example is accepted once the CRD is Established. Applying
/// it with the CRD in the same kubectl call would fail with kube-apiserver's words, "ensure CRDs
/// are installed first" — the reason the example comes second. (Before /openapi/v2 was served,
/// kubectl failed the whole apply with "error validating data: the server could not find the
/// requested resource".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_k_on_an_empty_sandbox_works_and_the_example_comes_second() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let kube = concat!(env!("CARGO_MANIFEST_DIR"), "/../kube");
    let example = format!("{kube}/example-postgres-cluster.yaml");
    let crd = format!("{kube}/crd.yaml");

    // The CRD and the example in one call: the kind is unknown until the CRD is Established.
    let together = ["apply", "-f", &crd, "-f", &example];
    let refused = kubectl
        .fails_saying(&together, "no matches for kind \"PostgresCluster\"")
        .await;
    assert!(
        refused.contains("ensure CRDs are installed first"),
        "{refused}"
    );

    kubectl
        .ok_saying(
            &["apply", "-k", kube],
            "deployment.apps/postgres-operator created",
        )
        .await;
    kubectl
        .ok_saying(
            &["-n", "postgres-operator", "apply", "-f", &example],
            "postgrescluster.workshop.example.com/example-postgresql-cluster created",
        )
        .await;
}

/// With an empty cache the /usr/bin/kubectl dispatcher first asks `/version` and, for minor
/// "32", runs its built-in v1.32 client: `kubectl version` shows both sides at 1.32.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubectl_dispatcher_picks_v1_32() {
    let (sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let versions: serde_json::Value =
        serde_json::from_str(&kubectl.ok(&["version", "-o", "json"]).await).expect("JSON");
    assert!(
        versions["clientVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.32.")),
        "{versions}"
    );
    assert_eq!(versions["serverVersion"]["minor"], "32", "{versions}");
    let first = sandbox.requests().into_iter().next().expect("a request");
    assert!(first.path.starts_with("/version"), "{first:?}");
}

/// A pod's spec is fixed once created, except container images: `kubectl apply` of a new
/// image works, renaming a container is Forbidden in kube-apiserver's words, and
/// `kubectl replace --force` (delete, then create) is the way out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_specs_are_immutable_except_images() {
    let (_sandbox, kubectl) = test_support::sandbox_and_kubectl().await;
    let original = std::fs::read_to_string(POD_FIXTURE).expect("fixture");
    let new_image = original.replace("nginx:1.27", "nginx:1.28");
    let renamed = original.replace("name: c\n", "name: d\n");

    kubectl.ok(&["apply", "-f", POD_FIXTURE]).await;
    kubectl.ok(&["label", "pod", "web", "tier=web"]).await;
    let applied = kubectl.ok_manifest("apply", &new_image).await;
    assert!(applied.contains("pod/web configured"), "{applied}");
    kubectl
        .fails_saying_manifest(
            "apply",
            &renamed,
            "The Pod \"web\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`",
        )
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let renamed_file = dir.path().join("renamed.yaml");
    std::fs::write(&renamed_file, &renamed).expect("write");
    let replace = [
        "replace",
        "--force",
        "-f",
        renamed_file.to_str().expect("utf-8"),
    ];
    kubectl.ok_saying(&replace, "pod/web replaced").await;
    assert_eq!(
        kubectl
            .ok(&[
                "get",
                "pod",
                "web",
                "-o",
                "jsonpath={.spec.containers[0].name}"
            ])
            .await,
        "d"
    );
}
