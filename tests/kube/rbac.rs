//! `kube/rbac.yaml` grants exactly what stage 06 uses: the operator runs in-process against a
//! sandbox whose pods are real PostgreSQL, through every call it makes (a Lease to create, take
//! and release, a CRD to create, an old
//! one to leave as it is (no `update` on CRDs), a cluster with `spec.backup` to create, its backup claim and a base backup, a
//! lost primary to fail over from through `pods/exec`, a
//! replica to remove), and each of its requests in the sandbox's request log, told apart from kubectl's by the
//! User-Agent, must be granted by the rules `kubectl apply -k kube/` installs for its service
//! account — and each verb those rules grant must have been used.
//!
//! Needs PostgreSQL, bubblewrap and kubectl: without them the test fails and says what is
//! missing. `cargo test --test kube rbac:: -- --nocapture` prints the table of rule → calls.
//!
//! The sandbox has no RBAC of its own (every request is allowed), so this is the check: the
//! request log says what was asked, and the rules are matched here the way kube-apiserver's RBAC
//! authorizer matches them (group, resource[/subresource], verb, and resourceNames against the
//! URL's name; a Role only in its namespace).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use postgres_operator::backups::Backups;
use postgres_operator::client::{Client, USER_AGENT};
use postgres_operator::config::Config;
use postgres_operator::leader::LeaderElection;
use postgres_operator::postgres::run_postgres_operator_when_leading;
use sandbox::{RequestRecord, SandboxOptions};
use serde_json::{json, Value};
use test_support::{cluster, Kubectl};
use tokio_util::sync::CancellationToken;

const CLUSTER: &str = "db";
const CRD_NAME: &str = postgres_operator::api::CRD_NAME;
/// Generous: the machine may be compiling other tests meanwhile.
const DEADLINE: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------------------------
// The rules, as `kubectl apply -k kube/` would install them
// ---------------------------------------------------------------------------------------------

/// Every object `kubectl apply -k kube/` applies, as JSON. kustomize renders the directory
/// offline; `patch --local` with an empty patch turns each rendered YAML document into JSON
/// without asking a server (no YAML crate needed, as in tests/crd/manifest.rs).
fn applied_objects() -> Vec<Value> {
    let rendered =
        test_support::kubectl_offline(&["kustomize", concat!(env!("CARGO_MANIFEST_DIR"), "/kube")]);
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), rendered).expect("rendered manifests written");
    let path = file.path().to_string_lossy().to_string();
    let json = test_support::kubectl_offline(&[
        "patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f", &path,
    ]);
    serde_json::Deserializer::from_slice(&json)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("kubectl prints JSON objects")
}

/// Where the Deployment runs the operator, and as whom.
struct Identity {
    namespace: String,
    service_account: String,
}

/// One rule of a Role (which grants in `namespace` only) or a ClusterRole (`namespace: None`).
#[derive(Clone, Debug)]
struct Grant {
    role: String,
    namespace: Option<String>,
    api_groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    resource_names: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The operator's identity, from the Deployment.
fn identity(objects: &[Value]) -> Identity {
    let deployments: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .collect();
    assert_eq!(deployments.len(), 1, "one Deployment in kube/");
    let deployment = deployments[0];
    let service_account = text(&deployment["spec"]["template"]["spec"]["serviceAccountName"]);
    assert!(
        !service_account.is_empty(),
        "the Deployment names its service account"
    );
    Identity {
        namespace: text(&deployment["metadata"]["namespace"]),
        service_account,
    }
}

/// The rules of every Role and ClusterRole bound to the operator's service account: a
/// RoleBinding binds in its own namespace, a ClusterRoleBinding everywhere.
fn grants(objects: &[Value], who: &Identity) -> Vec<Grant> {
    let binds_us = |binding: &Value| {
        binding["subjects"].as_array().is_some_and(|subjects| {
            subjects.iter().any(|s| {
                s["kind"] == "ServiceAccount"
                    && s["name"] == who.service_account.as_str()
                    && s["namespace"] == who.namespace.as_str()
            })
        })
    };
    let mut bound: BTreeSet<(String, String, Option<String>)> = BTreeSet::new();
    for binding in objects {
        let role_ref = &binding["roleRef"];
        match binding["kind"].as_str() {
            Some("ClusterRoleBinding") if binds_us(binding) => {
                assert_eq!(role_ref["kind"], "ClusterRole", "{binding}");
                bound.insert(("ClusterRole".into(), text(&role_ref["name"]), None));
            }
            Some("RoleBinding") if binds_us(binding) => {
                let namespace = text(&binding["metadata"]["namespace"]);
                // A RoleBinding may also grant a ClusterRole's rules, in its namespace only.
                bound.insert((
                    text(&role_ref["kind"]),
                    text(&role_ref["name"]),
                    Some(namespace),
                ));
            }
            _ => {}
        }
    }
    let mut grants = Vec::new();
    for (kind, name, binding_namespace) in bound {
        let role = objects
            .iter()
            .find(|o| {
                o["kind"] == kind.as_str()
                    && o["metadata"]["name"] == name.as_str()
                    && (kind == "ClusterRole"
                        || o["metadata"]["namespace"].as_str() == binding_namespace.as_deref())
            })
            .unwrap_or_else(|| panic!("{kind} {name} is bound but not in kube/"));
        for rule in role["rules"].as_array().into_iter().flatten() {
            grants.push(Grant {
                role: format!("{kind} {name}"),
                namespace: binding_namespace.clone(),
                api_groups: strings(&rule["apiGroups"]),
                resources: strings(&rule["resources"]),
                verbs: strings(&rule["verbs"]),
                resource_names: strings(&rule["resourceNames"]),
            });
        }
    }
    grants
}

// ---------------------------------------------------------------------------------------------
// What the operator needs
// ---------------------------------------------------------------------------------------------

/// One authorization check the API server makes: RBAC's attributes of a request.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Need {
    group: String,
    /// `pods` or `pods/exec`.
    resource: String,
    verb: String,
    /// Empty for cluster-scoped resources.
    namespace: String,
    /// The URL's object name; empty for list, watch and create.
    name: String,
}

impl Grant {
    /// kube-apiserver's RBAC rule match (`RuleAllows`): `*` matches anything; a rule with
    /// resourceNames matches only requests that name one of them, so never a create or a list.
    fn allows(&self, need: &Need) -> bool {
        let has = |list: &[String], wanted: &str| list.iter().any(|x| x == "*" || x == wanted);
        let in_scope = match &self.namespace {
            Some(namespace) => *namespace == need.namespace,
            None => true,
        };
        in_scope
            && has(&self.api_groups, &need.group)
            && has(&self.resources, &need.resource)
            && has(&self.verbs, &need.verb)
            && (self.resource_names.is_empty() || self.resource_names.contains(&need.name))
    }

    /// `ClusterRole postgres-operator: apiextensions.k8s.io customresourcedefinitions [get] names [...]`.
    fn describe(&self) -> String {
        let groups: Vec<&str> = self
            .api_groups
            .iter()
            .map(|g| if g.is_empty() { "core" } else { g.as_str() })
            .collect();
        let mut line = format!(
            "{}: {} {} [{}]",
            self.role,
            groups.join(","),
            self.resources.join(","),
            self.verbs.join(", ")
        );
        if !self.resource_names.is_empty() {
            line.push_str(&format!(" names [{}]", self.resource_names.join(", ")));
        }
        line
    }
}

/// `apps` from `/apis/apps/v1/...`, `""` from `/api/v1/...`.
fn api_group(path: &str) -> Option<String> {
    let path = path.split('?').next().unwrap_or(path);
    let mut segments = path.trim_start_matches('/').split('/');
    match segments.next()? {
        "api" => Some(String::new()),
        "apis" => segments.next().map(String::from),
        _ => None,
    }
}

/// The request in the log, with its names and query left out: `GET /api/v1/namespaces/{namespace}/pods/{name}/exec`.
fn call_shape(record: &RequestRecord) -> String {
    let path = record.path.split('?').next().unwrap_or(&record.path);
    let mut shape = path.to_string();
    // The namespace first: the Lease `postgres-operator` lives in the namespace of that name.
    if !record.namespace.is_empty() {
        shape = shape.replace(
            &format!("/namespaces/{}/", record.namespace),
            "/namespaces/{namespace}/",
        );
    }
    if !record.name.is_empty() {
        shape = shape.replace(&format!("/{}", record.name), "/{name}");
    }
    let watch = if record.verb == "watch" {
        "?watch=true"
    } else {
        ""
    };
    let upgrade = if record.subresource == "exec" {
        " (WebSocket upgrade)"
    } else {
        ""
    };
    format!("{} {shape}{watch}{upgrade}", record.method)
}

/// What the API server checks for one request. A `pods/exec` GET is a WebSocket upgrade:
/// authorized as `get` (the HTTP method's verb) on every version, and since Kubernetes 1.35 also
/// as `create` (AuthorizePodWebsocketUpgradeCreatePermission), so it needs both.
fn needs_of(record: &RequestRecord, group: &str) -> Vec<Need> {
    let resource = if record.subresource.is_empty() {
        record.resource.clone()
    } else {
        format!("{}/{}", record.resource, record.subresource)
    };
    let need = |verb: &str| Need {
        group: group.to_string(),
        resource: resource.clone(),
        verb: verb.to_string(),
        namespace: record.namespace.clone(),
        name: record.name.clone(),
    };
    if resource == "pods/exec" && record.method == "GET" {
        vec![need("get"), need("create")]
    } else {
        vec![need(&record.verb)]
    }
}

/// Non-resource paths every authenticated client may read (the `system:discovery` and
/// `system:public-info-viewer` ClusterRoles every cluster has): they need no rule of ours.
fn is_discovery(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    path == "/api"
        || path == "/apis"
        || path.starts_with("/api/")
        || path.starts_with("/apis/")
        || path.starts_with("/openapi/")
        || matches!(path, "/version" | "/healthz" | "/livez" | "/readyz")
}

// ---------------------------------------------------------------------------------------------
// The scenario
// ---------------------------------------------------------------------------------------------

/// Wait until the cluster is healthy at `size` members: the primary's name.
async fn healthy(kubectl: &Kubectl, size: usize) -> String {
    cluster::wait_healthy(kubectl, CLUSTER, size, DEADLINE).await
}

/// Whether the CRD on the server has the status subresource stage 04's schema adds.
async fn crd_is_current(kubectl: &Kubectl) -> Option<()> {
    let out = kubectl.run(&["get", "crd", CRD_NAME, "-o", "json"]).await;
    let crd: Value = serde_json::from_str(&out.stdout).ok()?;
    crd["spec"]["versions"][0]["subresources"]["status"]
        .is_object()
        .then_some(())
}

/// The stage-06 operator running in this process, as `stages/stage06.rs` runs it.
struct Operator {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    said: test_support::Story,
}

impl Operator {
    fn start(client: &Client) -> Operator {
        let options = test_support::quick_postgres_options();
        let (reporter, said) = test_support::Story::record();
        let stop = CancellationToken::new();
        // With leader election, as stage06 runs by default: the Lease's get, create and update
        // are requests of the operator too.
        let election = LeaderElection::new(client.namespace());
        let running = run_postgres_operator_when_leading(
            client.clone(),
            options,
            Backups::default(),
            Some(election),
            reporter,
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let led = running.await.expect("the operator leads");
            led.expect("it led before it was stopped")
                .expect("the operator runs");
        });
        Operator { stop, task, said }
    }

    /// `Some(())` once the operator has said a line containing `text`.
    async fn has_said(&self, text: &str) -> Option<()> {
        self.said.said(text).then_some(())
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.expect("the operator stops cleanly");
    }
}

/// Run the stage-06 operator through every call it makes, then match its requests against the
/// rules of kube/: each request is granted, each granted verb was used. Prints rule → calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rbac_grants_exactly_the_requests_stage06_makes() {
    let objects = applied_objects();
    let who = identity(&objects);
    let grants = grants(&objects, &who);
    assert!(!grants.is_empty(), "no rule is bound to the operator");

    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let kubectl = Kubectl::new(&sandbox.url()).with_flags(&["--namespace", &who.namespace]);
    // The operator's namespace, as the Deployment would run it.
    kubectl.ok(&["create", "namespace", &who.namespace]).await;
    let mut config = Config::from_url(&sandbox.url()).expect("URL");
    config.namespace = who.namespace.clone();
    let client = Client::new(config).expect("client");

    // A first run on a cluster without the CRD: the operator creates it.
    let operator = Operator::start(&client);
    test_support::eventually(DEADLINE, "the operator to create the CRD", || {
        crd_is_current(&kubectl)
    })
    .await;
    operator.stop().await;

    // An older CRD in its place (stage 01's, say, without the status and scale subresources):
    // the second run goes on with it as it is — changing the type is stage 01's job, or the
    // administrator's — and the administrator updates it, as the operator's line says.
    kubectl
        .ok(&[
            "patch",
            "crd",
            CRD_NAME,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/versions/0/subresources"}]"#,
        ])
        .await;
    assert_eq!(crd_is_current(&kubectl).await, None, "the CRD is old now");
    let operator = Operator::start(&client);
    test_support::eventually(
        DEADLINE,
        "the operator to find the old CRD and go on",
        || operator.has_said("not as this build defines it"),
    )
    .await;
    assert_eq!(
        crd_is_current(&kubectl).await,
        None,
        "the operator left the old CRD as it was"
    );
    let crd_yaml = Path::new(env!("CARGO_MANIFEST_DIR")).join("kube/crd.yaml");
    kubectl
        .ok(&["apply", "-f", &crd_yaml.to_string_lossy()])
        .await;
    test_support::eventually(DEADLINE, "kubectl apply to update the old CRD", || {
        crd_is_current(&kubectl)
    })
    .await;

    // A cluster of two with backups: seed, Secret, ConfigMap, Services, the backup claim, a
    // replica, status, Events.
    let manifest = json!({
        "apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster",
        "metadata": {"name": CLUSTER},
        "spec": {"size": 2, "version": "16", "backup": {}},
    });
    kubectl
        .create_when_served(&manifest.to_string(), DEADLINE)
        .await;
    let primary = healthy(&kubectl, 2).await;

    // The first base backup: a backup pod created, its result read, the pod deleted.
    test_support::eventually(DEADLINE, "status.lastBackup", || async {
        let status = kubectl.json(&["get", "pgc", CLUSTER]).await["status"].clone();
        status["lastBackup"]["name"].as_str().map(str::to_string)
    })
    .await;

    // Lose the primary: the operator asks the replica its WAL position and promotes it
    // (pods/exec), labels it primary (patch), and creates a replacement replica.
    kubectl
        .ok(&["delete", "pod", &primary, "--wait=false"])
        .await;
    let new_primary = test_support::eventually(DEADLINE, "a new ready primary", || async {
        cluster::members(&kubectl, CLUSTER)
            .await
            .into_iter()
            .find(|p| p.role == "primary" && p.name != primary && p.ready)
            .map(|p| p.name)
    })
    .await;
    assert_eq!(healthy(&kubectl, 2).await, new_primary);

    // Scale to one: the operator deletes the replica, never the primary.
    kubectl.ok(&["scale", "pgc", CLUSTER, "--replicas=1"]).await;
    assert_eq!(healthy(&kubectl, 1).await, new_primary);

    operator.stop().await;

    // The operator's requests, told apart from kubectl's by the User-Agent.
    let log = sandbox.requests();
    let (ours, theirs): (Vec<&RequestRecord>, Vec<&RequestRecord>) = log
        .iter()
        .partition(|r| r.user_agent.starts_with(USER_AGENT));
    assert!(
        theirs.iter().any(|r| r.user_agent.starts_with("kubectl/")),
        "kubectl's requests carry their own User-Agent"
    );
    assert!(!ours.is_empty(), "the operator's requests are in the log");

    let mut needs: BTreeMap<Need, BTreeSet<String>> = BTreeMap::new();
    let mut created: BTreeSet<(String, String)> = BTreeSet::new();
    for record in &ours {
        if record.resource.is_empty() {
            assert!(
                is_discovery(&record.path),
                "the operator asked for {} {}, a non-resource path no rule of kube/rbac.yaml grants",
                record.method,
                record.path
            );
            continue;
        }
        let group = api_group(&record.path)
            .unwrap_or_else(|| panic!("a resource request outside /api and /apis: {record:?}"));
        if !record.namespace.is_empty() {
            // Everything namespaced happens in the namespace the operator runs in, so a Role
            // there is enough.
            assert_eq!(record.namespace, who.namespace, "{record:?}");
        }
        if record.verb == "create" {
            created.insert((group.clone(), record.resource.clone()));
        }
        for need in needs_of(record, &group) {
            needs.entry(need).or_default().insert(call_shape(record));
        }
    }

    // Admission, not a request: each object the operator created with an ownerReference that
    // has blockOwnerDeletion needs `update` on its owner's finalizers wherever the
    // OwnerReferencesPermissionEnforcement plugin is on.
    for (group, resource) in &created {
        if !group.is_empty() || resource == "events" {
            continue;
        }
        let list = kubectl.json(&["get", resource]).await;
        for object in list["items"].as_array().into_iter().flatten() {
            for owner in object["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if owner["kind"] == "PostgresCluster" && owner["blockOwnerDeletion"] == true {
                    let need = Need {
                        group: "workshop.example.com".into(),
                        resource: "postgresclusters/finalizers".into(),
                        verb: "update".into(),
                        namespace: who.namespace.clone(),
                        name: text(&owner["name"]),
                    };
                    needs.entry(need).or_default().insert(format!(
                        "admission of POST {resource} with a blockOwnerDeletion ownerReference"
                    ));
                }
            }
        }
    }

    // The table: each rule and the calls it allows.
    println!("\nkube/rbac.yaml rule → the operator's calls it allows:");
    for grant in &grants {
        println!("  {}", grant.describe());
        let calls: BTreeSet<String> = needs
            .iter()
            .filter(|(need, _)| grant.allows(need))
            .flat_map(|(need, calls)| calls.iter().map(move |c| format!("{:<7} {c}", need.verb)))
            .collect();
        for call in calls {
            println!("      {call}");
        }
    }

    // Every check the API server would make is granted...
    let refused: Vec<String> = needs
        .iter()
        .filter(|(need, _)| !grants.iter().any(|g| g.allows(need)))
        .map(|(need, calls)| format!("{need:?} for {calls:?}"))
        .collect();
    assert!(
        refused.is_empty(),
        "kube/rbac.yaml does not grant:\n{}",
        refused.join("\n")
    );

    // ...a cluster-wide grant is used for cluster-scoped objects only (the namespaced ones belong
    // in the Role, which grants in the operator's namespace and nowhere else)...
    for grant in grants.iter().filter(|g| g.namespace.is_none()) {
        for need in needs.keys().filter(|need| grant.allows(need)) {
            assert!(
                need.namespace.is_empty(),
                "{} grants {need:?} in every namespace; it belongs in the Role",
                grant.describe()
            );
        }
    }

    // ...and every verb granted was needed: no rule is wider than the operator's calls.
    let mut unused = Vec::new();
    for grant in &grants {
        for group in &grant.api_groups {
            for resource in &grant.resources {
                for verb in &grant.verbs {
                    let used = needs.keys().any(|need| {
                        need.group == *group
                            && need.resource == *resource
                            && need.verb == *verb
                            && grant.allows(need)
                    });
                    if !used {
                        let group = if group.is_empty() { "core" } else { group };
                        unused.push(format!("{}: {verb} {group}/{resource}", grant.describe()));
                    }
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "kube/rbac.yaml grants what stage 06 never used:\n{}",
        unused.join("\n")
    );
}

/// The rule matcher behaves as RBAC does: a Role only in its namespace, resourceNames never
/// matching a create, and a subresource distinct from its resource.
#[test]
fn the_rule_matcher_follows_rbac() {
    let grant = |namespace: Option<&str>, resources: &[&str], names: &[&str]| Grant {
        role: "test".into(),
        namespace: namespace.map(String::from),
        api_groups: vec![String::new()],
        resources: resources.iter().map(|r| r.to_string()).collect(),
        verbs: vec!["create".into(), "get".into()],
        resource_names: names.iter().map(|n| n.to_string()).collect(),
    };
    let need = |resource: &str, verb: &str, namespace: &str, name: &str| Need {
        group: String::new(),
        resource: resource.into(),
        verb: verb.into(),
        namespace: namespace.into(),
        name: name.into(),
    };
    let role = grant(Some("ops"), &["pods"], &[]);
    assert!(role.allows(&need("pods", "get", "ops", "a")));
    assert!(!role.allows(&need("pods", "get", "other", "a")));
    assert!(!role.allows(&need("pods/exec", "get", "ops", "a")));
    assert!(!role.allows(&need("pods", "delete", "ops", "a")));
    let named = grant(None, &["secrets"], &["mine"]);
    assert!(named.allows(&need("secrets", "get", "any", "mine")));
    assert!(!named.allows(&need("secrets", "get", "any", "theirs")));
    assert!(!named.allows(&need("secrets", "create", "any", "")));
    assert_eq!(
        api_group("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/x?y=z").as_deref(),
        Some("apiextensions.k8s.io")
    );
    assert_eq!(api_group("/api/v1/namespaces/a/pods").as_deref(), Some(""));
    assert_eq!(api_group("/version"), None);
}
