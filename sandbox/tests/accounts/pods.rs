//! Pods and their service accounts, as kube-apiserver's admission and the kubelet do it: every
//! namespace has a `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap; a pod gets
//! the projected `kube-api-access-*` volume mounted at
//! /var/run/secrets/kubernetes.io/serviceaccount in every container; a pod naming a missing
//! service account is refused. With the process runtime the volume holds a token bound to
//! the pod, the CA and the namespace, and a process in the pod reaches the API over HTTPS on
//! the very port the learner's kubectl speaks plain HTTP to.
//!
//! Run: `cargo test -p sandbox --test accounts pods::`.

use std::time::Duration;

use serde_json::{json, Value};
use test_support::http_client::{sandbox_and_http, Http};
use test_support::{eventually, Kubectl};

const MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn pod(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// New and initial namespaces hold `default` and `kube-root-ca.crt`; a pod gets the
/// kube-api-access volume in every container, or none with automountServiceAccountToken:
/// false; a missing service account is refused in kube's words.
#[tokio::test]
async fn pods_get_the_service_account_volume_by_admission() {
    let (sandbox, http) = sandbox_and_http().await;
    let kubectl = Kubectl::new(&sandbox.url());
    kubectl.ok(&["create", "namespace", "fresh"]).await;
    for namespace in ["default", "kube-system", "fresh"] {
        let account = http
            .get(&format!(
                "/api/v1/namespaces/{namespace}/serviceaccounts/default"
            ))
            .await;
        assert_eq!(account.status, 200, "{namespace}");
        let ca = http
            .get(&format!(
                "/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt"
            ))
            .await;
        assert!(
            ca.json()["data"]["ca.crt"]
                .as_str()
                .is_some_and(|pem| pem.starts_with("-----BEGIN CERTIFICATE-----")),
            "{}",
            ca.text()
        );
    }
    let two = pod(
        "two",
        json!({"containers": [{"name": "a", "image": "nginx"}, {"name": "b", "image": "nginx"}]}),
    );
    let created = http.create("/api/v1/namespaces/fresh/pods", &two).await;
    let spec = &created.json()["spec"];
    assert_eq!(spec["serviceAccountName"], "default");
    let volume = &spec["volumes"][0];
    let name = volume["name"].as_str().unwrap_or_default();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    assert_eq!(
        volume["projected"]["sources"],
        json!([
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
        ])
    );
    for container in spec["containers"].as_array().into_iter().flatten() {
        assert_eq!(
            container["volumeMounts"],
            json!([{"name": name, "readOnly": true, "mountPath": MOUNT}])
        );
    }
    let opted_out = pod(
        "quiet",
        json!({"automountServiceAccountToken": false, "containers": [{"name": "a", "image": "nginx"}]}),
    );
    let created = http.post("/api/v1/namespaces/fresh/pods", &opted_out).await;
    assert_eq!(created.status, 201);
    assert!(
        created.json()["spec"]["volumes"].is_null(),
        "{}",
        created.text()
    );
    let orphan = pod(
        "orphan",
        json!({"serviceAccountName": "ghost", "containers": [{"name": "a", "image": "nginx"}]}),
    );
    let refused = http.post("/api/v1/namespaces/fresh/pods", &orphan).await;
    refused.assert_refused(403, "pods \"orphan\" is forbidden: error looking up service account fresh/ghost: serviceaccount \"ghost\" not found");
}

/// A client that speaks TLS to the plain-HTTP sandbox's port, trusting the CA from
/// `kube-root-ca.crt`, is served over HTTPS; the certificate names what in-cluster clients use.
#[tokio::test]
async fn the_plain_port_also_speaks_tls_with_the_cluster_ca() {
    let (sandbox, http) = sandbox_and_http().await;
    let ca = http
        .get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
        .await
        .json()["data"]["ca.crt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let https = sandbox.url().replace("http://", "https://");
    let secure = Http::with_tls(&https, ca.as_bytes(), None);
    let answer = secure.get("/api/v1/namespaces").await;
    assert_eq!(answer.status, 200, "no token on a plain sandbox: the admin");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca).expect("write CA");
    // kubectl speaks HTTPS only with credentials (else it prompts for a password): the
    // default service account's token, checked against the certificate's in-cluster name.
    let token = Kubectl::new(&sandbox.url())
        .ok(&["create", "token", "default"])
        .await
        .trim()
        .to_string();
    let kubectl = Kubectl::new(&https).with_flags(&[
        "--certificate-authority",
        ca_file.to_str().expect("utf-8"),
        "--tls-server-name",
        "kubernetes.default.svc",
        "--token",
        &token,
    ]);
    let api = kubectl.ok(&["get", "--raw", "/api"]).await;
    assert!(api.contains("\"versions\":[\"v1\"]"), "{api}");
    assert_eq!(
        kubectl
            .run(&["auth", "can-i", "list", "pods"])
            .await
            .stdout
            .trim(),
        "no"
    );
}

/// On a `--tls-dir` sandbox, the admin token is unrestricted and a service-account token is
/// held to RBAC; `kubectl auth whoami` with that token names the service account.
#[tokio::test]
async fn a_tls_sandbox_tells_the_admin_token_from_service_account_tokens() {
    let (sandbox, dir) = test_support::start_tls_sandbox(Default::default()).await;
    let ca = dir.path().join("ca.crt");
    let admin_token = sandbox.token().expect("an admin token");
    let flags = |token: &str| {
        vec![
            "--certificate-authority".to_string(),
            ca.to_string_lossy().into_owned(),
            "--token".to_string(),
            token.to_string(),
        ]
    };
    let admin_flags = flags(&admin_token);
    let admin = Kubectl::new(&sandbox.url())
        .with_flags(&admin_flags.iter().map(String::as_str).collect::<Vec<_>>());
    let token = admin
        .ok(&["create", "token", "default"])
        .await
        .trim()
        .to_string();
    let app_flags = flags(&token);
    let app = Kubectl::new(&sandbox.url())
        .with_flags(&app_flags.iter().map(String::as_str).collect::<Vec<_>>());
    let refused = app.run(&["get", "secrets"]).await;
    assert_eq!(
        refused.stderr.trim(),
        "Error from server (Forbidden): secrets is forbidden: User \"system:serviceaccount:default:default\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\""
    );
    assert_eq!(
        app.run(&["auth", "can-i", "list", "secrets"])
            .await
            .stdout
            .trim(),
        "no"
    );
    assert_eq!(
        admin.ok(&["auth", "can-i", "list", "secrets"]).await.trim(),
        "yes"
    );
    // `kubectl auth whoami` names the token's user and groups, as kube-apiserver does.
    let me = app.ok(&["auth", "whoami"]).await;
    assert_eq!(
        test_support::table_row(&me, 1),
        ["Username", "system:serviceaccount:default:default"],
        "{me}"
    );
    assert_eq!(
        test_support::table_row(&me, 2),
        [
            "Groups",
            "[system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated]"
        ],
        "{me}"
    );
}

/// With the process runtime a pod's files are there: its namespace, and a token with which a
/// process in the pod (curl, over TLS with the mounted CA) is its service account.
#[tokio::test]
async fn a_process_in_a_pod_reads_its_namespace_and_calls_the_api_with_its_token() {
    let (sandbox, kubectl, _runtime) = test_support::runtime::start().await;
    assert!(
        std::path::Path::new("/usr/bin/curl").exists(),
        "this test runs curl inside a pod: install curl"
    );
    let port = sandbox.addr().port();
    test_support::runtime::create(
        &kubectl,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: caller}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: busybox
    command:
    - sh
    - -c
    - |
      cat {MOUNT}/namespace; echo
      curl -sS --cacert {MOUNT}/ca.crt -H "Authorization: Bearer $(cat {MOUNT}/token)" https://127.0.0.1:{port}/api/v1/namespaces/default/secrets
      echo; echo done
"#
        ),
    )
    .await;
    let logs = eventually(Duration::from_secs(60), "the pod's output", || async {
        let out = kubectl.run(&["logs", "caller"]).await;
        out.stdout.contains("done").then_some(out.stdout)
    })
    .await;
    assert!(logs.starts_with("default\n"), "{logs}");
    assert!(
        logs.contains("secrets is forbidden: User \\\"system:serviceaccount:default:default\\\" cannot list resource \\\"secrets\\\""),
        "{logs}"
    );
    let from_pod = sandbox
        .requests()
        .into_iter()
        .find(|r| r.resource == "secrets" && r.code == 403)
        .expect("the pod's request is logged");
    assert_eq!(from_pod.user, "system:serviceaccount:default:default");
    assert_eq!(from_pod.pod, "caller");
}
