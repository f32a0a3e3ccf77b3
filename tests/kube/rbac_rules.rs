//! Every rule in `kube/rbac.yaml` is needed: take any one away and the operator fails with a
//! 403 that names it. For each rule of each Role and ClusterRole in the file, a namespace of its
//! own gets the operator's ServiceAccount and the file's roles and bindings holding every rule
//! but that one; the stage binary that `kube/deployment.yaml`'s `command:` names runs as a host
//! process authenticated with that account's token (TLS to the sandbox, RBAC enforced, as a pod
//! would be), and admin kubectl drives it through a cluster's life — create (size 2, with
//! `spec.backup` for stage 06's claim), lose the
//! primary (failover through `pods/exec`), scale to 1 — until the operator's output shows
//! `cannot VERB resource "RES"` for the missing rule. A rule whose case reaches the end of the
//! scenario without that 403 fails the test: the rule is not needed, or the scenario misses the
//! call that needs it. A control case with every rule completes the scenario with no 403 at all.
//!
//! The rules are read from kube/rbac.yaml at run time (kubectl turns the YAML into JSON), so a
//! rule added there is tested too. The case without the CustomResourceDefinition `create` rule
//! runs first and alone (only a missing CRD needs that call); the control case and the others
//! then run three at a time, each in its own namespace with its own ClusterRoles and bindings.
//!
//! tests/kube/rbac.rs proves the other direction (every request the operator makes is granted).
//! Needs PostgreSQL, bubblewrap and kubectl: without them the test fails and says what is missing.
//! `cargo test -p postgres-operator --test kube rbac_rules:: -- --nocapture` prints the table of
//! rule → the 403 line the operator printed, and the total time (about 20 s).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sandbox::SandboxOptions;
use serde_json::{json, Value};
use test_support::{cluster, Kubectl};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::Semaphore;

const CLUSTER: &str = "db";
/// Generous: up to three cases run real Postgres on two cores at once.
const DEADLINE: Duration = Duration::from_secs(180);
/// Cases at a time: each runs an operator and up to three Postgres processes.
const CONCURRENT_CASES: usize = 3;

// ---------------------------------------------------------------------------------------------
// What kube/ says
// ---------------------------------------------------------------------------------------------

/// The roles and bindings of kube/rbac.yaml, and what kube/deployment.yaml runs, as whom.
struct Manifests {
    /// Every Role and ClusterRole, as the file has them.
    roles: Vec<Value>,
    /// Every RoleBinding and ClusterRoleBinding whose subjects name the service account.
    bindings: Vec<Value>,
    service_account: String,
    /// `stage06` from `command: ["/stage06"]`.
    stage: String,
}

/// One rule of one role: which role (its index in `Manifests::roles`) and which entry.
#[derive(Clone)]
struct Rule {
    /// 1, 2, ...: its place in the file, counted over all roles.
    number: usize,
    role: usize,
    index: usize,
    kind: String,
    role_name: String,
    rule: Value,
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|item| item.as_str().map(String::from))
        .collect()
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_default()
}

/// kube/rbac.yaml and kube/deployment.yaml as JSON: kubectl converts them (client-side dry run,
/// no YAML crate), so a rule another change adds is read here too.
async fn read_manifests(kubectl: &Kubectl) -> Manifests {
    let kube = concat!(env!("CARGO_MANIFEST_DIR"), "/kube");
    let rbac = format!("{kube}/rbac.yaml");
    let deployment = format!("{kube}/deployment.yaml");
    let out = kubectl
        .ok(&[
            "create",
            "--dry-run=client",
            "-o",
            "json",
            "-f",
            &rbac,
            "-f",
            &deployment,
        ])
        .await;
    // One JSON document per object (or a List, depending on kubectl's version).
    let printed: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .expect("kubectl prints JSON objects");
    let objects: Vec<Value> = printed
        .into_iter()
        .flat_map(|object| match object["kind"].as_str() {
            Some("List") => object["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![object],
        })
        .collect();
    let of_kind = |kinds: &[&str]| -> Vec<Value> {
        objects
            .iter()
            .filter(|o| kinds.contains(&text(&o["kind"])))
            .cloned()
            .collect()
    };
    let deployments = of_kind(&["Deployment"]);
    assert_eq!(
        deployments.len(),
        1,
        "one Deployment in kube/deployment.yaml"
    );
    let pod = &deployments[0]["spec"]["template"]["spec"];
    let service_account = text(&pod["serviceAccountName"]).to_string();
    assert!(
        !service_account.is_empty(),
        "the Deployment names its service account"
    );
    let command = strings(&pod["containers"][0]["command"]);
    let stage = command
        .first()
        .and_then(|path| path.rsplit('/').next())
        .filter(|name| name.starts_with("stage"))
        .unwrap_or_else(|| panic!("the Deployment's command {command:?} names no stage binary"))
        .to_string();
    let bindings = of_kind(&["RoleBinding", "ClusterRoleBinding"])
        .into_iter()
        .filter(|binding| {
            binding["subjects"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["kind"] == "ServiceAccount" && s["name"] == service_account.as_str())
        })
        .collect();
    Manifests {
        roles: of_kind(&["Role", "ClusterRole"]),
        bindings,
        service_account,
        stage,
    }
}

impl Manifests {
    fn rules(&self) -> Vec<Rule> {
        let mut rules = Vec::new();
        for (role, object) in self.roles.iter().enumerate() {
            for (index, rule) in object["rules"].as_array().into_iter().flatten().enumerate() {
                rules.push(Rule {
                    number: rules.len() + 1,
                    role,
                    index,
                    kind: text(&object["kind"]).to_string(),
                    role_name: text(&object["metadata"]["name"]).to_string(),
                    rule: rule.clone(),
                });
            }
        }
        rules
    }

    /// The file's roles and bindings for the service account of `namespace`, without `removed`:
    /// Roles and RoleBindings in the namespace, cluster-scoped ones renamed per namespace so
    /// that cases running side by side do not share them.
    fn objects_for(&self, namespace: &str, removed: Option<&Rule>) -> Value {
        let cluster_name = |name: &str| format!("{name}-{namespace}");
        let mut items = vec![json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": self.service_account, "namespace": namespace},
        })];
        for (index, role) in self.roles.iter().enumerate() {
            let name = text(&role["metadata"]["name"]);
            let rules: Vec<Value> = role["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .filter(|(i, _)| removed.is_none_or(|r| (r.role, r.index) != (index, *i)))
                .map(|(_, rule)| rule.clone())
                .collect();
            let metadata = match text(&role["kind"]) {
                "ClusterRole" => json!({"name": cluster_name(name)}),
                _ => json!({"name": name, "namespace": namespace}),
            };
            items.push(json!({
                "apiVersion": role["apiVersion"],
                "kind": role["kind"],
                "metadata": metadata,
                "rules": rules,
            }));
        }
        for binding in &self.bindings {
            let name = text(&binding["metadata"]["name"]);
            let mut role_ref = binding["roleRef"].clone();
            if role_ref["kind"] == "ClusterRole" {
                role_ref["name"] = json!(cluster_name(text(&role_ref["name"])));
            }
            let metadata = match text(&binding["kind"]) {
                "ClusterRoleBinding" => json!({"name": cluster_name(name)}),
                _ => json!({"name": name, "namespace": namespace}),
            };
            items.push(json!({
                "apiVersion": binding["apiVersion"],
                "kind": binding["kind"],
                "metadata": metadata,
                "roleRef": role_ref,
                "subjects": [{
                    "kind": "ServiceAccount",
                    "name": self.service_account,
                    "namespace": namespace,
                }],
            }));
        }
        json!({"apiVersion": "v1", "kind": "List", "items": items})
    }
}

impl Rule {
    /// `ClusterRole postgres-operator #1: apiextensions.k8s.io customresourcedefinitions [get] names [...]`.
    fn describe(&self) -> String {
        let groups: Vec<String> = strings(&self.rule["apiGroups"])
            .into_iter()
            .map(|g| if g.is_empty() { "core".into() } else { g })
            .collect();
        let mut line = format!(
            "{} {} #{}: {} {} [{}]",
            self.kind,
            self.role_name,
            self.index + 1,
            groups.join(","),
            strings(&self.rule["resources"]).join(","),
            strings(&self.rule["verbs"]).join(", ")
        );
        let names = strings(&self.rule["resourceNames"]);
        if !names.is_empty() {
            line.push_str(&format!(" names [{}]", names.join(", ")));
        }
        line
    }

    /// Whether the rule grants creating CustomResourceDefinitions: refused only while the CRD
    /// does not exist yet, so its case runs before any other creates it.
    fn creates_crds(&self) -> bool {
        strings(&self.rule["resources"]).contains(&"customresourcedefinitions".to_string())
            && strings(&self.rule["verbs"]).contains(&"create".to_string())
    }

    /// The 403 that names this rule, for `user`: kube-apiserver's RBAC message `User "U" cannot
    /// VERB resource "RES" in API group "G"` with any verb, resource and group of the rule; for
    /// a `finalizers` rule, the OwnerReferencesPermissionEnforcement admission's message.
    fn names_it(&self, user: &str, line: &str) -> bool {
        let verbs = strings(&self.rule["verbs"]);
        let resources = strings(&self.rule["resources"]);
        let groups = strings(&self.rule["apiGroups"]);
        let admission = resources.iter().any(|r| r.ends_with("/finalizers"));
        if admission && !line.contains("cannot set blockOwnerDeletion") {
            return false;
        }
        verbs.iter().any(|verb| {
            resources.iter().any(|resource| {
                groups.iter().any(|group| {
                    line.contains(&format!(
                        "User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\""
                    ))
                })
            })
        })
    }
}

// ---------------------------------------------------------------------------------------------
// One case: a namespace, an operator, the scenario
// ---------------------------------------------------------------------------------------------

/// The operator process and everything it printed (stdout and stderr, line by line).
struct Operator {
    child: tokio::process::Child,
    output: Arc<Mutex<Vec<String>>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
}

fn collect_lines(
    stream: impl AsyncRead + Unpin + Send + 'static,
    output: &Arc<Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    let output = Arc::clone(output);
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            output.lock().expect("output lock").push(line);
        }
    })
}

impl Operator {
    fn lines(&self) -> Vec<String> {
        self.output.lock().expect("output lock").clone()
    }

    /// The last lines, for a failure message.
    fn tail(&self) -> String {
        let lines = self.lines();
        let start = lines.len().saturating_sub(40);
        lines[start..].join("\n")
    }
}

/// Why a case stopped before the end of the scenario.
enum Stopped {
    /// The operator printed a 403 naming the rule: the line.
    Forbidden(String),
    /// The operator exited without printing it.
    Exited(String),
    /// A step did not happen in time.
    TimedOut(String),
    /// The cluster is not what the step should have made it.
    Wrong(String),
}

/// Keeps an eye on one case's operator: its output, and what counts as the expected 403 (none
/// for the control case).
struct Observer {
    operator: Operator,
    user: String,
    removed: Option<Rule>,
}

impl Observer {
    /// Has the operator printed the expected 403? Also whether it is still running.
    async fn check(&mut self) -> Result<(), Stopped> {
        let seen = |observer: &Observer| -> Option<String> {
            let removed = observer.removed.as_ref()?;
            observer
                .operator
                .lines()
                .into_iter()
                .find(|line| removed.names_it(&observer.user, line))
        };
        if let Some(line) = seen(self) {
            return Err(Stopped::Forbidden(line));
        }
        if let Ok(Some(status)) = self.operator.child.try_wait() {
            // Its last lines may still be in the pipes: read them to the end first.
            for reader in self.operator.readers.drain(..) {
                let _ = reader.await;
            }
            if let Some(line) = seen(self) {
                return Err(Stopped::Forbidden(line));
            }
            return Err(Stopped::Exited(format!("the operator exited ({status})")));
        }
        Ok(())
    }

    /// Poll `check` every 200 ms until it returns `Some`, stopping as soon as the operator
    /// printed the expected 403 or exited, or after DEADLINE naming `what`.
    async fn until<T, F, Fut>(&mut self, what: &str, mut check: F) -> Result<T, Stopped>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let end = tokio::time::Instant::now() + DEADLINE;
        loop {
            self.check().await?;
            if let Some(value) = check().await {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= end {
                return Err(Stopped::TimedOut(format!(
                    "timed out after {DEADLINE:?} waiting for {what}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// The scenario that reaches every call of stage 06, driven with admin `kubectl` in the case's
/// namespace: the CRD registered, the Lease taken, a cluster of two created (Secret, ConfigMap,
/// Services, pods, status, Events), its primary deleted (WAL positions and promotion through
/// `pods/exec`, the role label patched, a replacement created), then scaled to one (a pod
/// deleted). Stops at the first sign of the expected 403.
async fn scenario(
    kubectl: &Kubectl,
    observer: &mut Observer,
    cluster_file: &str,
) -> Result<(), Stopped> {
    observer
        .until(
            "kubectl to create the cluster (the CRD established)",
            || async {
                kubectl
                    .run(&["create", "-f", cluster_file])
                    .await
                    .success
                    .then_some(())
            },
        )
        .await?;
    let primary = observer
        .until("2 ready members, one primary", || {
            cluster::healthy(kubectl, CLUSTER, 2)
        })
        .await?;
    kubectl
        .ok(&["delete", "pod", &primary, "--wait=false"])
        .await;
    let promoted = observer
        .until("a new ready primary", || async {
            cluster::members(kubectl, CLUSTER)
                .await
                .into_iter()
                .find(|p| p.role == "primary" && p.name != primary && p.ready)
                .map(|p| p.name)
        })
        .await?;
    let after_failover = observer
        .until("2 ready members after the failover", || {
            cluster::healthy(kubectl, CLUSTER, 2)
        })
        .await?;
    if after_failover != promoted {
        return Err(Stopped::Wrong(format!(
            "{promoted} was promoted, but {after_failover} is the primary"
        )));
    }
    kubectl.ok(&["scale", "pgc", CLUSTER, "--replicas=1"]).await;
    let after_scale = observer
        .until("1 ready member after scaling down", || {
            cluster::healthy(kubectl, CLUSTER, 1)
        })
        .await?;
    if after_scale != promoted {
        return Err(Stopped::Wrong(format!(
            "scaling down left {after_scale} as the primary, not {promoted}"
        )));
    }
    Ok(())
}

/// What one case found.
struct Finding {
    /// The rule removed; `None` for the control case.
    rule: Option<Rule>,
    namespace: String,
    user: String,
    outcome: Result<String, String>,
    took: Duration,
}

/// Set up the namespace, its service account and the rules but `removed`, start the stage
/// binary as that account, and run the scenario until the 403 or the end.
async fn run_case(
    server: String,
    stage_binary: PathBuf,
    manifests: Arc<Manifests>,
    removed: Option<Rule>,
) -> Finding {
    let started = Instant::now();
    let namespace = removed.as_ref().map_or("all-rules".to_string(), |rule| {
        format!("rule-{}", rule.number)
    });
    let user = format!(
        "system:serviceaccount:{namespace}:{}",
        manifests.service_account
    );
    let kubectl = Kubectl::new(&server).with_flags(&["--namespace", &namespace]);
    let dir = tempfile::tempdir().expect("temp dir");
    kubectl.ok(&["create", "namespace", &namespace]).await;
    let rbac_file = dir.path().join("rbac.json");
    let objects = manifests.objects_for(&namespace, removed.as_ref());
    std::fs::write(&rbac_file, objects.to_string()).expect("rbac.json written");
    kubectl
        .ok(&["create", "-f", rbac_file.to_str().expect("utf-8 path")])
        .await;

    // The credentials a pod of the Deployment would have mounted: a token for the service
    // account (long-lived: a case may wait minutes) and the cluster's CA.
    let token = kubectl
        .ok(&[
            "create",
            "token",
            &manifests.service_account,
            "--duration=24h",
        ])
        .await;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token.trim()).expect("token written");
    let ca = test_support::eventually(DEADLINE, "the kube-root-ca.crt ConfigMap", || async {
        let out = kubectl
            .run(&[
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-o",
                "jsonpath={.data.ca\\.crt}",
            ])
            .await;
        (out.success && out.stdout.contains("BEGIN CERTIFICATE")).then_some(out.stdout)
    })
    .await;
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca).expect("CA written");

    // The sandbox speaks TLS on its plain port too, as a cluster's API server would to a pod.
    let https = server.replacen("http://", "https://", 1);
    let mut command = tokio::process::Command::new(&stage_binary);
    command
        .arg("--server")
        .arg(&https)
        .arg("--certificate-authority")
        .arg(&ca_file)
        .arg("--token-file")
        .arg(&token_file)
        .args(["--namespace", &namespace])
        .args(["--reconcile-interval", "1", "--failover-after", "2"])
        .args(["--member-lost-after", "30"])
        .env("RUST_LOG", "info")
        .env("HOSTNAME", format!("operator-{namespace}"))
        .env_remove("KUBE_SERVER")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("KUBECONFIG", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = command
        .spawn()
        .unwrap_or_else(|error| panic!("{} does not start: {error}", stage_binary.display()));
    let output = Arc::new(Mutex::new(Vec::new()));
    let readers = vec![
        collect_lines(child.stdout.take().expect("stdout piped"), &output),
        collect_lines(child.stderr.take().expect("stderr piped"), &output),
    ];
    let mut observer = Observer {
        operator: Operator {
            child,
            output,
            readers,
        },
        user: user.clone(),
        removed: removed.clone(),
    };

    let cluster_file = dir.path().join("cluster.json");
    let manifest = json!({
        "apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster",
        "metadata": {"name": CLUSTER},
        // With backups, so stage 06 makes its stage-06 calls (the claim `<name>-backups`, the
        // backup pod's status); stages 04 and 05 ignore the field.
        "spec": {"size": 2, "version": "16",
                 "backup": {"storageSize": "64Mi", "intervalMinutes": 60, "keep": 1}},
    });
    std::fs::write(&cluster_file, manifest.to_string()).expect("cluster manifest written");
    let result = scenario(
        &kubectl,
        &mut observer,
        cluster_file.to_str().expect("utf-8 path"),
    )
    .await;
    let outcome = match (&removed, result) {
        (Some(_), Err(Stopped::Forbidden(line))) => Ok(line),
        (None, Ok(())) => {
            let forbidden: Vec<String> = observer
                .operator
                .lines()
                .into_iter()
                .filter(|line| line.contains("is forbidden"))
                .collect();
            if forbidden.is_empty() {
                Ok("(none: the scenario completed)".to_string())
            } else {
                Err(format!(
                    "the operator printed 403s with every rule:\n{}",
                    forbidden.join("\n")
                ))
            }
        }
        (Some(_), Ok(())) => Err(format!(
            "the scenario completed without a 403 naming this rule: either {} does not \
             need it, or the scenario misses the call that does (extend `scenario` in this file).\n\
             The operator's last lines:\n{}",
            manifests.stage,
            observer.operator.tail()
        )),
        (None, Err(Stopped::Forbidden(line))) => Err(format!("the control case saw {line}")),
        (_, Err(Stopped::Exited(why) | Stopped::TimedOut(why) | Stopped::Wrong(why))) => {
            Err(format!(
                "{why}, without a 403 naming the rule.\nThe operator's last lines:\n{}",
                observer.operator.tail()
            ))
        }
    };

    // Stop the operator and the cluster's Postgres processes, so the next cases get the cores.
    let _ = observer.operator.child.start_kill();
    let _ = observer.operator.child.wait().await;
    let _ = kubectl
        .run(&["delete", "pgc,pods", "--all", "--wait=false"])
        .await;
    Finding {
        rule: removed,
        namespace,
        user,
        outcome,
        took: started.elapsed(),
    }
}

/// Remove any one rule of kube/rbac.yaml and the stage binary kube/deployment.yaml runs fails
/// with a 403 naming that rule's verb and resource; with all of them it runs the scenario clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_in_kube_rbac_is_needed() {
    let started = Instant::now();
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let server = sandbox.url();
    let admin = Kubectl::new(&server);
    let manifests = Arc::new(read_manifests(&admin).await);
    let rules = manifests.rules();
    assert!(!rules.is_empty(), "kube/rbac.yaml has no rules");
    let stage_binary = Path::new(env!("CARGO_BIN_EXE_stage04")).with_file_name(&manifests.stage);
    assert!(
        stage_binary.exists(),
        "kube/deployment.yaml runs /{}, but {} was not built",
        manifests.stage,
        stage_binary.display()
    );
    println!(
        "{} rules in kube/rbac.yaml; running {} as {}",
        rules.len(),
        manifests.stage,
        manifests.service_account
    );

    let mut findings = Vec::new();
    // Refused only while the CRD does not exist: alone, before any other case creates it.
    let (first, rest): (Vec<Rule>, Vec<Rule>) = rules.into_iter().partition(Rule::creates_crds);
    for rule in first {
        let finding = run_case(
            server.clone(),
            stage_binary.clone(),
            Arc::clone(&manifests),
            Some(rule),
        )
        .await;
        findings.push(finding);
    }
    let slots = Arc::new(Semaphore::new(CONCURRENT_CASES));
    let mut cases = tokio::task::JoinSet::new();
    for removed in std::iter::once(None).chain(rest.into_iter().map(Some)) {
        let slots = Arc::clone(&slots);
        let (server, stage_binary, manifests) =
            (server.clone(), stage_binary.clone(), Arc::clone(&manifests));
        cases.spawn(async move {
            let _slot = slots.acquire_owned().await.expect("semaphore open");
            run_case(server, stage_binary, manifests, removed).await
        });
    }
    while let Some(finding) = cases.join_next().await {
        findings.push(finding.expect("a case panicked"));
    }
    // The control case first, then the rules in the file's order.
    findings.sort_by_key(|f| f.rule.as_ref().map(|r| r.number));

    println!("\nrule of kube/rbac.yaml removed → the 403 the operator printed:");
    for finding in &findings {
        let rule = finding
            .rule
            .as_ref()
            .map_or("(none: every rule)".to_string(), Rule::describe);
        let seen = match &finding.outcome {
            Ok(line) => line.clone(),
            Err(_) => "FAILED".to_string(),
        };
        println!(
            "  {rule}  [{}, {:.0?}]\n      {seen}",
            finding.namespace, finding.took
        );
    }
    println!("total {:.0?}", started.elapsed());

    // The request log agrees: a 403 for each case with a rule removed, none for the control.
    let log = sandbox.requests();
    let failures: Vec<String> = findings
        .iter()
        .filter_map(|finding| {
            let refused = log
                .iter()
                .filter(|r| r.user == finding.user && r.code == 403)
                .count();
            let what = finding
                .rule
                .as_ref()
                .map_or("the control case (every rule)".to_string(), Rule::describe);
            match (&finding.outcome, &finding.rule, refused) {
                (Err(why), _, _) => Some(format!("{what}: {why}")),
                (Ok(_), None, n) if n > 0 => {
                    Some(format!("{what}: {n} requests refused with 403 in the log"))
                }
                (Ok(_), Some(_), 0) => Some(format!(
                    "{what}: the operator printed a 403 the request log does not have"
                )),
                _ => None,
            }
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
