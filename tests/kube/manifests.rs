//! `kubectl apply -k kube/` installs the operator (the example cluster comes second): kustomize renders the directory offline, and the
//! result holds each kind, the Deployment's hardening, and RBAC in the least-privilege shape: a Role
//! in the operator's namespace, a ClusterRole only for the cluster-scoped CRD. (Which verbs: the
//! rules are checked against the operator's own requests in tests/kube/rbac.rs.)

/// `kubectl kustomize kube/`, rendered once for all the tests here.
fn rendered() -> &'static str {
    static RENDERED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| {
        let kube = concat!(env!("CARGO_MANIFEST_DIR"), "/kube");
        String::from_utf8(test_support::kubectl_offline(&["kustomize", kube])).unwrap()
    })
}

/// Rendering works offline and yields each kind once.
#[test]
fn kustomize_renders_every_kind() {
    let rendered = rendered();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Namespace",
    ] {
        let count = rendered
            .lines()
            .filter(|line| *line == format!("kind: {kind}"))
            .count();
        assert_eq!(count, 1, "kind {kind} in:\n{rendered}");
    }
}

/// Everything namespaced lands in the operator's own namespace (the Role too, so it grants there,
/// where the operator works), and both bindings grant to the service account there (not to one in
/// `default`).
#[test]
fn everything_lands_in_the_operator_namespace_and_the_binding_follows() {
    let rendered = rendered();
    let namespaced = rendered.matches("  namespace: postgres-operator").count();
    // ServiceAccount, Role, RoleBinding and Deployment metadata, plus the two bindings' subjects.
    assert_eq!(namespaced, 6, "in:\n{rendered}");
    assert!(!rendered.contains("namespace: default"), "in:\n{rendered}");
}

/// The Deployment runs as non-root 65532 with a read-only root, no privilege escalation, no
/// capabilities, the runtime's seccomp profile, and the namespace from the downward API.
#[test]
fn the_deployment_is_hardened_and_gets_its_namespace() {
    for expected in [
        "runAsNonRoot: true",
        "runAsUser: 65532",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "- ALL",
        "type: RuntimeDefault",
        "fieldPath: metadata.namespace",
        "--namespace=$(NAMESPACE)",
        "command:\n        - /stage06",
        "replicas: 2",
        "memory: 64Mi",
        "cpu: 10m",
        "serviceAccountName: postgres-operator",
    ] {
        assert!(
            rendered().contains(expected),
            "missing {expected:?} in:\n{}",
            rendered()
        );
    }
}

/// Each operator pod serves /metrics, /healthz and /readyz on its own IP (from the downward
/// API) at the named port `metrics`, which the liveness and readiness probes and the scrape
/// annotations name.
#[test]
fn the_deployment_is_probed_and_scraped_on_its_metrics_port() {
    let rendered = rendered();
    for expected in [
        "--metrics-address=$(POD_IP):8080",
        "fieldPath: status.podIP",
        "- containerPort: 8080\n          name: metrics",
        "livenessProbe:\n          failureThreshold: 3\n          httpGet:\n            path: /healthz\n            port: metrics",
        "readinessProbe:\n          httpGet:\n            path: /readyz\n            port: metrics",
        "prometheus.io/scrape: \"true\"",
        "prometheus.io/port: \"8080\"",
        "prometheus.io/path: /metrics",
    ] {
        assert!(
            rendered.contains(expected),
            "missing {expected:?} in:\n{rendered}"
        );
    }
}

/// The example cluster is applied second (its kind exists only once the CRD is Established), so
/// it is not in the kustomization; it carries the workshop's name and size, and a current major
/// version (the CRD refuses the 2017 workshop's 9.6.3).
#[test]
fn the_example_cluster_has_the_workshop_values_and_comes_second() {
    assert!(!rendered()
        .lines()
        .any(|line| line == "kind: PostgresCluster"));
    let rendered = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/kube/example-postgres-cluster.yaml"
    ))
    .expect("the example is readable");
    assert!(rendered.contains("name: example-postgresql-cluster"));
    assert!(rendered.contains("size: 3"));
    assert!(rendered.contains("version: \"16\""), "in:\n{rendered}");
}
