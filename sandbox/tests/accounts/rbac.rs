//! Service accounts, their tokens and RBAC, driven with the real kubectl: `kubectl create
//! token` hands out a token; a client presenting it is that service account, refused in
//! kube-apiserver's words until a Role and RoleBinding (or ClusterRole and
//! ClusterRoleBinding) applied with `kubectl apply` grant the request; `kubectl auth can-i
//! --as` answers truthfully; the sandbox's own kubectl is never restricted.
//!
//! Run: `cargo test -p sandbox --test accounts rbac::`.

use serde_json::{json, Value};
use test_support::http_client::{cluster, Http};
use test_support::Kubectl;

/// `kubectl apply -f` of a manifest given as text.
async fn apply(kubectl: &Kubectl, manifest: &str) {
    kubectl.ok_manifest("apply", manifest).await;
}

/// The demo: a sandbox, the admin's kubectl, kubectl as service account `app` of namespace
/// `demo`, its token, and the directory holding the cluster CA.
struct Demo {
    sandbox: sandbox::Sandbox,
    admin: Kubectl,
    app: Kubectl,
    token: String,
    /// Kept for as long as `app` runs: it reads the CA from here.
    _ca_dir: tempfile::TempDir,
}

/// A sandbox with namespace `demo`, service account `app` in it, and kubectl as that
/// account. kubectl sends a bearer token only over HTTPS, so it speaks TLS to the sandbox's
/// plain-HTTP port, trusting the CA from `kube-root-ca.crt`, as an in-cluster client would.
async fn demo() -> Demo {
    let sandbox = test_support::start_sandbox().await;
    let admin = Kubectl::new(&sandbox.url());
    admin.ok(&["create", "namespace", "demo"]).await;
    admin
        .ok(&["create", "serviceaccount", "app", "-n", "demo"])
        .await;
    let token = admin
        .ok(&["create", "token", "app", "-n", "demo"])
        .await
        .trim()
        .to_string();
    let ca = admin
        .ok(&[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ])
        .await;
    let ca_dir = tempfile::tempdir().expect("tempdir");
    let ca_file = ca_dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca).expect("write the CA");
    let https = sandbox.url().replace("http://", "https://");
    let app = Kubectl::new(&https).with_ca_and_token(&ca_file, &token);
    Demo {
        sandbox,
        admin,
        app,
        token,
        _ca_dir: ca_dir,
    }
}

const USER: &str = "system:serviceaccount:demo:app";
/// Service account `app` as a RoleBinding's subject, its namespace given or (as the binding's)
/// left out.
const APP: &str = "{kind: ServiceAccount, name: app, namespace: demo}";
const APP_BY_NAME: &str = "{kind: ServiceAccount, name: app}";

impl Demo {
    /// The admin applies Role `name` with `rules` (YAML list items) in namespace demo, and a
    /// RoleBinding of the same name granting it to `subject`.
    async fn grant(&self, name: &str, rules: &str, subject: &str) {
        let manifest = format!(
            "apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: {name}, namespace: demo}}
rules:{rules}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {name}, namespace: demo}}
subjects: [{subject}]
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: {name}}}
"
        );
        apply(&self.admin, &manifest).await;
    }

    /// The admin runs pod `p` (nginx) in namespace demo.
    async fn admin_runs_pod_p(&self) {
        let run = ["run", "p", "--image", "nginx", "-n", "demo"];
        self.admin.ok(&run).await;
    }

    /// A plain HTTP client to the sandbox presenting bearer `token`.
    fn http_with_token(&self, token: &str) -> Http {
        let mut http = Http::new(&self.sandbox.url());
        http.token = Some(token.to_string());
        http
    }
}

/// The token is JWT-shaped with kube's claims, and names the service account.
#[tokio::test]
async fn kubectl_create_token_prints_a_jwt_shaped_token() {
    let demo = demo().await;
    let parts: Vec<&str> = demo.token.split('.').collect();
    assert_eq!(parts.len(), 3, "{}", demo.token);
    use base64::Engine;
    let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(parts[1])
        .expect("base64url claims");
    let claims: Value = serde_json::from_slice(&claims).expect("JSON claims");
    assert_eq!(claims["sub"], USER);
    assert_eq!(claims["kubernetes.io"]["namespace"], "demo");
    assert_eq!(claims["kubernetes.io"]["serviceaccount"]["name"], "app");
    let lifetime = claims["exp"].as_u64().unwrap_or(0) - claims["iat"].as_u64().unwrap_or(0);
    assert_eq!(lifetime, 3600, "the default expirationSeconds");
    for (args, refusal) in [
        (
            &["create", "token", "app", "-n", "demo", "--duration", "5m"][..],
            "may not specify a duration less than 10 minutes",
        ),
        (
            &["create", "token", "nobody", "-n", "demo"][..],
            "serviceaccounts \"nobody\" not found",
        ),
    ] {
        demo.admin.fails_saying(args, refusal).await;
    }
}

/// Forbidden with kube's exact message until a Role and RoleBinding are applied; the admin's
/// kubectl meanwhile can do anything.
#[tokio::test]
async fn a_service_account_is_forbidden_until_a_role_binding_grants_it() {
    let demo = demo().await;
    let refused = demo.app.run(&["get", "pods", "-n", "demo"]).await;
    assert!(!refused.success);
    assert_eq!(
        refused.stderr.trim(),
        format!("Error from server (Forbidden): pods is forbidden: User \"{USER}\" cannot list resource \"pods\" in API group \"\" in the namespace \"demo\"")
    );
    demo.grant(
        "pod-reader",
        r#"
- apiGroups: [""]
  resources: [pods, pods/log]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [allowed]
  verbs: [get]
"#,
        APP_BY_NAME,
    )
    .await;
    let listed = demo.app.ok(&["get", "pods", "-n", "demo"]).await;
    assert!(listed.is_empty(), "{listed}");
    // The Role is in demo only.
    demo.app
        .fails_saying(
            &["get", "pods", "-n", "default"],
            "in the namespace \"default\"",
        )
        .await;
    // Verbs not granted.
    let forbidden = format!("pods is forbidden: User \"{USER}\" cannot create resource \"pods\" in API group \"\" in the namespace \"demo\"");
    let run = ["run", "p", "--image", "nginx", "-n", "demo"];
    demo.app.fails_saying(&run, &forbidden).await;
    // resourceNames: one secret yes, another no (with its name in the message).
    for name in ["allowed", "other"] {
        let secret = [
            "create",
            "secret",
            "generic",
            name,
            "--from-literal=a=b",
            "-n",
            "demo",
        ];
        demo.admin.ok(&secret).await;
    }
    demo.app
        .ok(&["get", "secret", "allowed", "-n", "demo"])
        .await;
    let other = demo
        .app
        .run(&["get", "secret", "other", "-n", "demo"])
        .await;
    assert_eq!(
        other.stderr.trim(),
        format!("Error from server (Forbidden): secrets \"other\" is forbidden: User \"{USER}\" cannot get resource \"secrets\" in API group \"\" in the namespace \"demo\"")
    );
    // The admin is never restricted.
    demo.admin_runs_pod_p().await;
    // Subresources: pods/log is granted, pods/exec is not.
    demo.app.ok(&["logs", "p", "-n", "demo"]).await;
    let forbidden = format!("pods \"p\" is forbidden: User \"{USER}\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"demo\"");
    let exec = ["exec", "p", "-n", "demo", "--", "true"];
    demo.app.fails_saying(&exec, &forbidden).await;
    // Every request of the service account is logged as its user.
    let logged: Vec<_> = demo
        .sandbox
        .requests()
        .into_iter()
        .filter(|r| r.user == USER)
        .collect();
    assert!(logged.iter().any(|r| r.code == 403 && r.resource == "pods"));
    assert!(logged.iter().all(|r| r.pod.is_empty()));
    assert!(demo
        .sandbox
        .requests()
        .iter()
        .any(|r| r.user == "system:admin" && r.verb == "create" && r.resource == "pods"));
}

/// A WebSocket exec needs `get` and, as in Kubernetes >= 1.35, `create` on pods/exec.
#[tokio::test]
async fn websocket_exec_needs_get_and_create() {
    let demo = demo().await;
    demo.admin_runs_pod_p().await;
    demo.grant(
        "exec-get-only",
        r#"
- {apiGroups: [""], resources: [pods/exec], verbs: [get]}
"#,
        APP,
    )
    .await;
    let http = demo.http_with_token(&demo.token);
    let upgrade = http
        .get_with_headers(
            "/api/v1/namespaces/demo/pods/p/exec?command=true&stdout=true",
            &[
                ("Connection", "Upgrade"),
                ("Upgrade", "websocket"),
                ("Sec-WebSocket-Version", "13"),
                ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
                ("Sec-WebSocket-Protocol", "v5.channel.k8s.io"),
            ],
        )
        .await;
    upgrade.assert_refused(403, &format!("pods \"p\" is forbidden: User \"{USER}\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"demo\""));
    assert_eq!(
        upgrade.json()["details"],
        json!({"name": "p", "kind": "pods"})
    );
}

/// A ClusterRole bound by a RoleBinding grants in that namespace; by a ClusterRoleBinding, at
/// the cluster scope; Group subjects match the service account's groups.
#[tokio::test]
async fn cluster_roles_cluster_role_bindings_and_groups() {
    let demo = demo().await;
    let crds = demo.app.run(&["get", "crd"]).await;
    assert_eq!(
        crds.stderr.trim(),
        format!("Error from server (Forbidden): customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"{USER}\" cannot list resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\" at the cluster scope")
    );
    apply(
        &demo.admin,
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: configmap-reader}
rules:
- {apiGroups: [""], resources: [configmaps], verbs: [list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: cm, namespace: demo}
subjects: [{kind: ServiceAccount, name: app, namespace: demo}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: configmap-reader}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: crd-reader}
rules:
- {apiGroups: [apiextensions.k8s.io], resources: [customresourcedefinitions], verbs: [get, list]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: demo-accounts-read-crds}
subjects: [{kind: Group, name: "system:serviceaccounts:demo", apiGroup: rbac.authorization.k8s.io}]
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: crd-reader}
"#,
    )
    .await;
    let configmaps = demo
        .app
        .ok(&["get", "configmaps", "-n", "demo", "-o", "name"])
        .await;
    assert!(
        configmaps.contains("configmap/kube-root-ca.crt"),
        "{configmaps}"
    );
    let elsewhere = demo.app.run(&["get", "configmaps", "-n", "default"]).await;
    assert!(
        !elsewhere.success,
        "a RoleBinding grants in its namespace only"
    );
    demo.app.ok(&["get", "crd"]).await;
}

/// `kubectl auth can-i --as` answers for the impersonated account, yes and no, and `--list`
/// lists its rules.
#[tokio::test]
async fn auth_can_i_tells_the_truth() {
    let demo = demo().await;
    let can_i = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", USER, "-n", "demo"]);
        all.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let ask = |args: Vec<String>| {
        let admin = &demo.admin;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            admin.run(&args).await.stdout.trim().to_string()
        }
    };
    assert_eq!(ask(can_i(&["list", "pods"])).await, "no");
    assert_eq!(
        ask(can_i(&["create", "pods", "--subresource", "exec"])).await,
        "no"
    );
    demo.grant(
        "operator",
        r#"
- {apiGroups: [""], resources: [pods], verbs: [list, watch]}
- {apiGroups: [""], resources: [pods/exec], verbs: [create]}
"#,
        APP,
    )
    .await;
    assert_eq!(ask(can_i(&["list", "pods"])).await, "yes");
    assert_eq!(ask(can_i(&["delete", "pods"])).await, "no");
    assert_eq!(
        ask(can_i(&["create", "pods", "--subresource", "exec"])).await,
        "yes"
    );
    // The learner's own kubectl may do anything.
    assert_eq!(
        demo.admin
            .ok(&["auth", "can-i", "delete", "nodes"])
            .await
            .trim(),
        "yes"
    );
    let listed = demo
        .admin
        .ok(&["auth", "can-i", "--list", "--as", USER, "-n", "demo"])
        .await;
    let line = |resource: &str| {
        listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(resource))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
    };
    assert_eq!(
        line("pods").as_deref(),
        Some("pods [] [] [list watch]"),
        "{listed}"
    );
    assert_eq!(
        line("pods/exec").as_deref(),
        Some("pods/exec [] [] [create]"),
        "{listed}"
    );
    assert!(
        line("selfsubjectaccessreviews.authorization.k8s.io").is_some(),
        "{listed}"
    );
    assert!(!listed.contains("secrets"), "{listed}");
}

/// Deleting the service account, or the pod a token is bound to, makes the token 401.
#[tokio::test]
async fn tokens_die_with_their_service_account_or_pod() {
    let demo = demo().await;
    demo.admin_runs_pod_p().await;
    let bound = demo
        .admin
        .ok(&[
            "create",
            "token",
            "app",
            "-n",
            "demo",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "p",
        ])
        .await;
    let bound = demo.http_with_token(bound.trim());
    let unbound = demo.http_with_token(&demo.token);
    // /api is discovery: every authenticated user may read it.
    assert_eq!(bound.get("/api").await.status, 200);
    assert_eq!(unbound.get("/api").await.status, 200);
    let logged = demo.sandbox.requests();
    assert!(
        logged.iter().any(|r| r.user == USER && r.pod == "p"),
        "the bound pod is logged"
    );
    demo.admin.ok(&["delete", "pod", "p", "-n", "demo"]).await;
    bound.get("/api").await.assert_reason(401, "Unauthorized");
    assert_eq!(
        unbound.get("/api").await.status,
        200,
        "unbound token lives on"
    );
    demo.admin
        .ok(&["delete", "serviceaccount", "app", "-n", "demo"])
        .await;
    assert_eq!(unbound.get("/api").await.status, 401);
    // A new account of the same name is another account: the old token stays dead.
    demo.admin
        .ok(&["create", "serviceaccount", "app", "-n", "demo"])
        .await;
    assert_eq!(unbound.get("/api").await.status, 401);
}

/// Only the admin may impersonate; anyone else gets kube's 403 for the `impersonate` verb.
#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let demo = demo().await;
    demo.app
        .fails_saying(
            &["get", "pods", "--as", "alice"],
            "Error from server (Forbidden)",
        )
        .await;
    let as_app = demo.http_with_token(&demo.token);
    let answer = as_app
        .get_with_headers("/api/v1/pods", &[("Impersonate-User", "alice")])
        .await;
    answer.assert_refused(403, &format!("users \"alice\" is forbidden: User \"{USER}\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"));
    assert_eq!(
        answer.json()["details"],
        json!({"name": "alice", "kind": "users"})
    );
    let admin_as = Http::new(&demo.sandbox.url());
    let answer = admin_as
        .get_with_headers(
            "/api/v1/namespaces/demo/pods",
            &[("Impersonate-User", "alice"), ("Impersonate-Group", "devs")],
        )
        .await;
    answer.assert_refused(403, "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"demo\"");
    assert!(demo.sandbox.requests().iter().any(|r| r.user == "alice"));
}

/// A `blockOwnerDeletion` owner reference needs `update` on the owner's `finalizers`
/// (OwnerReferencesPermissionEnforcement), as `kube/rbac.yaml` grants for postgresclusters.
#[tokio::test]
async fn block_owner_deletion_needs_update_on_the_owners_finalizers() {
    let demo = demo().await;
    let http = Http::new(&demo.sandbox.url());
    http.install_crd().await;
    let created = http
        .create(
            "/apis/workshop.example.com/v1/namespaces/demo/postgresclusters",
            &cluster("db", 1),
        )
        .await;
    let uid = created.json()["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    demo.grant(
        "cm-writer",
        r#"
- {apiGroups: [""], resources: [configmaps], verbs: [create]}
"#,
        APP_BY_NAME,
    )
    .await;
    let as_app = demo.http_with_token(&demo.token);
    let owned = |name: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "ownerReferences": [{
                   "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
                   "name": "db", "uid": uid, "controller": true, "blockOwnerDeletion": true}]}})
    };
    let refused = as_app
        .post("/api/v1/namespaces/demo/configmaps", &owned("c1"))
        .await;
    refused.assert_refused(403, &format!("configmaps \"c1\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: User \"{USER}\" cannot update resource \"postgresclusters/finalizers\" in API group \"workshop.example.com\" in the namespace \"demo\""));
    demo.grant(
        "finalizers",
        r#"
- {apiGroups: [workshop.example.com], resources: [postgresclusters/finalizers], verbs: [update]}
"#,
        APP_BY_NAME,
    )
    .await;
    as_app
        .create("/api/v1/namespaces/demo/configmaps", &owned("c1"))
        .await;
}

/// Garbage tokens, oversized impersonation headers and malformed RBAC objects get answers,
/// never a crash: the sandbox keeps serving.
#[tokio::test]
async fn hostile_credentials_and_rbac_objects_never_break_the_sandbox() {
    let demo = demo().await;
    for garbage in [
        "garbage",
        "a.b.c",
        "....",
        &format!("{}x", demo.token),
        &"x".repeat(8000),
    ] {
        let http = demo.http_with_token(garbage);
        assert_eq!(http.get("/api/v1/pods").await.status, 401, "{garbage:?}");
    }
    let http = Http::new(&demo.sandbox.url());
    let huge = "u".repeat(5000);
    let answer = http
        .get_with_headers("/api", &[("Impersonate-User", &huge)])
        .await;
    assert_eq!(answer.status, 400);
    let groups_only = http
        .get_with_headers("/api", &[("Impersonate-Group", "g")])
        .await;
    assert_eq!(groups_only.status, 400);
    for malformed in [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "odd"}, "rules": [{"verbs": "get", "resources": 7}, 3, null]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "odd"}, "subjects": [7, {"kind": "ServiceAccount"}],
               "roleRef": {"kind": "Role", "name": "odd"}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "odd2"}, "subjects": {"kind": "Group"}, "roleRef": "x"}),
    ] {
        let plural = if malformed["kind"] == "Role" {
            "roles"
        } else {
            "rolebindings"
        };
        let stored = http
            .post(
                &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/demo/{plural}"),
                &malformed,
            )
            .await;
        assert!(stored.status.as_u16() < 500, "{}", stored.text());
    }
    let as_app = demo.http_with_token(&demo.token);
    assert_eq!(as_app.get("/api/v1/namespaces/demo/pods").await.status, 403);
    assert_eq!(http.get("/api/v1/namespaces/demo/pods").await.status, 200);
}
