//! The Deployer (`src/deployer/`, WORKSHOP.md "Your own operator: the Deployer") against the
//! in-process sandbox, driven with the real kubectl as a learner would: the demo's rollout step
//! by step, a rollback when the canary's pods fail readiness, and each bad input refused with a
//! condition and nothing created.

use std::time::Duration;

use postgres_operator::controller::ControllerOptions;
use postgres_operator::deployer::run_deployer;
use postgres_operator::story::{LogLine, Reporter};
use sandbox::{Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::{eventually, plain_client, start_sandbox_with, Kubectl};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const WITHIN: Duration = Duration::from_secs(30);

/// A sandbox whose pods start after 200 ms, the Deployer running on it, and kubectl.
struct Running {
    sandbox: Sandbox,
    kubectl: Kubectl,
    stop: CancellationToken,
    operator: JoinHandle<()>,
    lines: mpsc::UnboundedReceiver<LogLine>,
}

async fn start() -> Running {
    let options = SandboxOptions {
        kubelet_delay: Duration::from_millis(200),
        ..SandboxOptions::default()
    };
    start_on(start_sandbox_with(options).await)
}

/// The Deployer running on `sandbox`, and kubectl.
fn start_on(sandbox: Sandbox) -> Running {
    let kubectl = Kubectl::new(&sandbox.url());
    let client = plain_client(&sandbox.url());
    let (reporter, lines) = Reporter::channel();
    let stop = CancellationToken::new();
    let options = ControllerOptions {
        reconcile_interval: Duration::from_millis(200),
        ..ControllerOptions::default()
    };
    let operator = tokio::spawn({
        let stop = stop.clone();
        async move {
            run_deployer(client, options, reporter, stop)
                .await
                .expect("the Deployer starts");
        }
    });
    Running {
        sandbox,
        kubectl,
        stop,
        operator,
        lines,
    }
}

impl Running {
    async fn stop(self) -> Vec<String> {
        self.stop.cancel();
        let _ = self.operator.await;
        let mut lines = self.lines;
        let mut said = Vec::new();
        while let Ok(line) = lines.try_recv() {
            said.push(line.to_string());
        }
        drop(self.sandbox);
        said
    }

    /// `spec.replicas` and `status.availableReplicas` of a Deployment, None when it is absent.
    async fn replicas(&self, name: &str) -> Option<(i64, i64)> {
        let found = self
            .kubectl
            .get_json(&["get", "deployment", name, "-o", "json"])
            .await?;
        let count = |v: &Value| v.as_i64().unwrap_or(0);
        Some((
            count(&found["spec"]["replicas"]),
            count(&found["status"]["availableReplicas"]),
        ))
    }

    async fn deployer(&self, name: &str) -> Option<Value> {
        self.kubectl
            .get_json(&["get", "dep", name, "-o", "json"])
            .await
    }

    async fn condition(&self, name: &str, type_: &str) -> Option<Value> {
        let deployer = self.deployer(name).await?;
        deployer["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == type_)
            .cloned()
    }
}

/// The demo's manifest, with sleeps of a second and the given version and deadline.
fn manifest(version: &str, deadline: u64) -> String {
    format!(
        r#"apiVersion: workshop.example.com/v1
kind: Deployer
metadata: {{name: nginx}}
spec:
  type: canary
  deployment: {{name: nginx, namespace: default, image: nginx, version: "{version}",
               labels: {{app: nginx, operator: deployer}}, replicas: 10}}
  steps: [{{percent: 10, sleep: 1}}, {{percent: 30, sleep: 1}}, {{percent: 60, sleep: 1}}, {{percent: 100}}]
  deadlineSeconds: {deadline}
"#
    )
}

async fn set_version(kubectl: &Kubectl, version: &str) {
    let patch = format!(r#"{{"spec":{{"deployment":{{"version":"{version}"}}}}}}"#);
    kubectl
        .ok(&["patch", "dep", "nginx", "--type", "merge", "-p", &patch])
        .await;
}

/// The demo's transcript: the first version runs all 10; on 1.7.8 the steps trade replicas
/// 1/9, 3/7, 6/4, 10/0, `kubectl describe` shows the Progress lines, and the old Deployment is
/// deleted at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_rollout_walks_its_steps_and_deletes_the_old_version() {
    let running = start().await;
    let kubectl = &running.kubectl;
    kubectl
        .create_when_served(&manifest("1.7.7", 20), WITHIN)
        .await;
    eventually(WITHIN, "nginx-1.7.7 with 10 available", || async {
        (running.replicas("nginx-1.7.7").await == Some((10, 10))).then_some(())
    })
    .await;
    kubectl
        .ok_saying(
            &["get", "service", "nginx", "-o", "json"],
            "\"operator\": \"deployer\"",
        )
        .await;

    set_version(kubectl, "1.7.8").await;
    // Each step, in order, as `kubectl get deploy` shows the two trading replicas.
    let mut seen_describe = false;
    for (new, old) in [(1, 9), (3, 7), (6, 4)] {
        eventually(WITHIN, &format!("{new} new / {old} old"), || async {
            let pair = (
                running.replicas("nginx-1.7.8").await?,
                running.replicas("nginx-1.7.7").await?,
            );
            (pair.0 .0 == new && pair.1 .0 == old).then_some(())
        })
        .await;
        if new == 6 {
            let described = eventually(WITHIN, "describe to show step 3's wait", || async {
                let out = kubectl.ok(&["describe", "dep", "nginx"]).await;
                out.contains("till next step").then_some(out)
            })
            .await;
            for line in [
                "Percentage:  60% has been deployed",
                "Step:        no. 3",
                "Wait:",
            ] {
                assert!(described.contains(line), "no {line:?} in:\n{described}");
            }
            seen_describe = true;
        }
    }
    assert!(seen_describe);
    eventually(
        WITHIN,
        "nginx-1.7.8 with all 10 and nginx-1.7.7 deleted",
        || async {
            let done = running.replicas("nginx-1.7.8").await == Some((10, 10))
                && running.replicas("nginx-1.7.7").await.is_none();
            done.then_some(())
        },
    )
    .await;
    let deployer = running.deployer("nginx").await.expect("the Deployer");
    assert_eq!(deployer["status"]["currentVersion"], "1.7.8");
    assert_eq!(
        deployer["status"]["progress"]["percentage"],
        "100% has been deployed"
    );
    let described = kubectl.ok(&["describe", "dep", "nginx"]).await;
    assert!(
        described.contains("RolledOut"),
        "no RolledOut event:\n{described}"
    );
    let said = running.stop().await;
    for line in [
        "[default/nginx] first version 1.7.7: nginx-1.7.7 with 10 replicas",
        "[default/nginx] rolling out 1.7.8 over 1.7.7 in 4 steps",
        "[default/nginx] step 1 of 4: 1 new (nginx-1.7.8), 9 old (nginx-1.7.7)",
        "[default/nginx] step 4 of 4: 10 new (nginx-1.7.8), 0 old (nginx-1.7.7)",
        "[default/nginx] 1.7.8 rolled out: 10 replicas; deleted nginx-1.7.7",
    ] {
        assert!(
            said.iter().any(|s| s == line),
            "never said {line:?}: {said:#?}"
        );
    }
}

/// A canary whose pods never pass readiness (the sandbox's fault door on `nginx:1.7.9`)
/// is rolled back within its deadline + 2 s: the old version back at 10, the new Deployment
/// deleted, a `RolledBack` condition and a Warning Event saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_fails_readiness_is_rolled_back_within_its_deadline() {
    rolled_back_within_its_deadline(start().await).await;
}

/// The same with pods run by the process runtime (the `sandbox` binary's default where
/// PostgreSQL and bubblewrap are found): nginx runs nothing there, and the fault holds all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_fails_readiness_is_rolled_back_with_pods_as_processes() {
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    rolled_back_within_its_deadline(start_on(sandbox)).await;
}

async fn rolled_back_within_its_deadline(running: Running) {
    const DEADLINE: u64 = 3;
    let kubectl = &running.kubectl;
    kubectl
        .create_when_served(&manifest("1.7.7", DEADLINE), WITHIN)
        .await;
    eventually(WITHIN, "nginx-1.7.7 with 10 available", || async {
        (running.replicas("nginx-1.7.7").await == Some((10, 10))).then_some(())
    })
    .await;
    // The fault door, as a learner sends it (tests elsewhere call `Faults::fail_readiness`).
    let door = "/sandbox/faults/images/fail-readiness?image=nginx:1.7.9";
    kubectl
        .ok_saying(
            &["create", "--raw", door, "-f", "/dev/null"],
            "pods of image nginx:1.7.9 fail readiness",
        )
        .await;
    let changed = Instant::now();
    set_version(kubectl, "1.7.9").await;
    let rolled_back = eventually(WITHIN, "the RolledBack condition", || async {
        running.condition("nginx", "RolledBack").await
    })
    .await;
    let took = changed.elapsed();
    println!("rollback: {:.1}s from the version change to the RolledBack condition (deadline {DEADLINE}s)", took.as_secs_f64());
    assert!(took <= Duration::from_secs(DEADLINE + 2), "took {took:?}");
    assert_eq!(rolled_back["reason"], "CanaryNotAvailable");
    let message = rolled_back["message"].as_str().unwrap_or_default();
    assert!(message.contains("rolled back 1.7.9 to 1.7.7"), "{message}");
    eventually(WITHIN, "nginx-1.7.7 at 10, nginx-1.7.9 gone", || async {
        let back = running.replicas("nginx-1.7.7").await.map(|r| r.0) == Some(10)
            && running.replicas("nginx-1.7.9").await.is_none();
        back.then_some(())
    })
    .await;
    let described = kubectl.ok(&["describe", "dep", "nginx"]).await;
    assert!(
        described.contains("Warning  CanaryNotAvailable"),
        "no Warning event:\n{described}"
    );
    // Rolled back, not retried: the version stays refused until the spec names another.
    assert_eq!(
        running.deployer("nginx").await.expect("it")["status"]["rolledBackVersion"],
        "1.7.9"
    );
    running.stop().await;
}

/// Each bad input is a `Valid=False` condition naming it, and nothing is created: steps that do
/// not increase, a percent over 100, no `deployment`; and a version change during a rollout is
/// held (no Deployment for it) with its own reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_condition_and_nothing_is_half_rolled() {
    let running = start().await;
    let kubectl = &running.kubectl;
    let bad = [
        ("steps", "{type: canary, deployment: {name: a, image: nginx, version: '1', replicas: 2}, steps: [{percent: 50}, {percent: 20}]}", "StepsNotIncreasing"),
        ("percent", "{type: canary, deployment: {name: b, image: nginx, version: '1', replicas: 2}, steps: [{percent: 150}]}", "PercentOutOfRange"),
        ("missing", "{type: canary, steps: [{percent: 100}]}", "MissingDeployment"),
    ];
    for (name, spec, reason) in bad {
        let manifest = format!("apiVersion: workshop.example.com/v1\nkind: Deployer\nmetadata: {{name: {name}}}\nspec: {spec}\n");
        kubectl.create_when_served(&manifest, WITHIN).await;
        let valid = eventually(WITHIN, &format!("{name}'s Valid condition"), || async {
            running.condition(name, "Valid").await
        })
        .await;
        assert_eq!(
            (valid["status"].as_str(), valid["reason"].as_str()),
            (Some("False"), Some(reason)),
            "{valid}"
        );
        println!("{name}: {}", valid["message"]);
    }
    let deployments = kubectl.json(&["get", "deployments"]).await;
    assert_eq!(
        deployments["items"],
        serde_json::json!([]),
        "nothing is created for a bad spec"
    );

    // A rollout held at step 1 by a canary that never gets ready, then a third version.
    let mut slow = manifest("1.7.7", 600);
    slow = slow.replace("sleep: 1}", "sleep: 600}");
    kubectl.ok_manifest("create", &slow).await;
    eventually(WITHIN, "nginx-1.7.7 with 10 available", || async {
        (running.replicas("nginx-1.7.7").await == Some((10, 10))).then_some(())
    })
    .await;
    set_version(kubectl, "1.7.8").await;
    eventually(WITHIN, "step 1 sleeping", || async {
        let deployer = running.deployer("nginx").await?;
        let wait = deployer["status"]["progress"]["wait"].as_str()?.to_string();
        wait.ends_with("till next step").then_some(())
    })
    .await;
    set_version(kubectl, "1.7.9").await;
    let valid = eventually(WITHIN, "the held version's condition", || async {
        let valid = running.condition("nginx", "Valid").await?;
        (valid["status"] == "False").then_some(valid)
    })
    .await;
    assert_eq!(valid["reason"], "VersionChangedDuringRollout");
    assert_eq!(
        running.replicas("nginx-1.7.9").await,
        None,
        "no Deployment for the held version"
    );
    assert_eq!(running.replicas("nginx-1.7.8").await.map(|r| r.0), Some(1));
    running.stop().await;
}

/// A canary that loses its pods during a step's sleep (readiness fails on the running ones) is
/// rolled back with reason `LostAvailability`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_loses_its_pods_during_a_sleep_is_rolled_back() {
    let running = start().await;
    let kubectl = &running.kubectl;
    let slow = manifest("1.7.7", 600).replace("sleep: 1}", "sleep: 600}");
    kubectl.create_when_served(&slow, WITHIN).await;
    eventually(WITHIN, "nginx-1.7.7 with 10 available", || async {
        (running.replicas("nginx-1.7.7").await == Some((10, 10))).then_some(())
    })
    .await;
    set_version(kubectl, "1.7.8").await;
    eventually(WITHIN, "step 1 sleeping", || async {
        let deployer = running.deployer("nginx").await?;
        let wait = deployer["status"]["progress"]["wait"].as_str()?.to_string();
        wait.ends_with("till next step").then_some(())
    })
    .await;
    let marked = running.sandbox.faults().fail_readiness("nginx:1.7.8", true);
    assert_eq!(marked.len(), 1, "step 1's one canary pod: {marked:?}");
    let rolled_back = eventually(WITHIN, "the RolledBack condition", || async {
        running.condition("nginx", "RolledBack").await
    })
    .await;
    assert_eq!(rolled_back["reason"], "LostAvailability");
    eventually(
        WITHIN,
        "nginx-1.7.7 back at 10, nginx-1.7.8 gone",
        || async {
            let back = running.replicas("nginx-1.7.7").await.map(|r| r.0) == Some(10)
                && running.replicas("nginx-1.7.8").await.is_none();
            back.then_some(())
        },
    )
    .await;
    running.stop().await;
}

/// `spec.paused`: a version change made while paused starts nothing; unpaused, the rollout starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployer_starts_no_rollout_until_unpaused() {
    let running = start().await;
    let kubectl = &running.kubectl;
    kubectl
        .create_when_served(&manifest("1.7.7", 20), WITHIN)
        .await;
    eventually(WITHIN, "nginx-1.7.7 with 10 available", || async {
        (running.replicas("nginx-1.7.7").await == Some((10, 10))).then_some(())
    })
    .await;
    let both = r#"{"spec":{"paused":true,"deployment":{"version":"1.7.8"}}}"#;
    kubectl
        .ok(&["patch", "dep", "nginx", "--type", "merge", "-p", both])
        .await;
    // The round that saw the change wrote "paused": it decided, and it created nothing.
    eventually(WITHIN, "the paused wait", || async {
        let deployer = running.deployer("nginx").await?;
        (deployer["status"]["progress"]["wait"] == "paused").then_some(())
    })
    .await;
    assert_eq!(running.replicas("nginx-1.7.8").await, None);
    assert_eq!(running.replicas("nginx-1.7.7").await.map(|r| r.0), Some(10));
    let unpause = r#"{"spec":{"paused":false}}"#;
    kubectl
        .ok(&["patch", "dep", "nginx", "--type", "merge", "-p", unpause])
        .await;
    eventually(WITHIN, "the rollout to start", || async {
        running.replicas("nginx-1.7.8").await.map(|_| ())
    })
    .await;
    running.stop().await;
}

/// `kube/deployer/rbac.yaml` is enough: the `deployer` binary, run with that service account's
/// token against a sandbox that enforces RBAC, registers its CRD, rolls a version out and rolls
/// one back, and not one of its requests is refused (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rbac_grants_every_request_the_deployer_makes() {
    let options = SandboxOptions {
        kubelet_delay: Duration::from_millis(200),
        ..SandboxOptions::default()
    };
    let (sandbox, credentials) = test_support::start_tls_sandbox(options).await;
    let ca = credentials.path().join("ca.crt");
    let admin = sandbox.token().expect("a TLS sandbox has an admin token");
    let kubectl = Kubectl::new(&sandbox.url()).with_ca_and_token(&ca, &admin);
    let rbac = concat!(env!("CARGO_MANIFEST_DIR"), "/kube/deployer/rbac.yaml");
    kubectl.ok(&["apply", "-f", rbac]).await;
    let token = kubectl
        .ok(&["create", "token", "deployer", "--duration=24h"])
        .await;
    let token_file = credentials.path().join("deployer-token");
    std::fs::write(&token_file, token.trim()).expect("token written");
    let mut deployer = tokio::process::Command::new(env!("CARGO_BIN_EXE_deployer"));
    deployer
        .args(["--server", &sandbox.url(), "--namespace", "default"])
        .arg("--certificate-authority")
        .arg(&ca)
        .arg("--token-file")
        .arg(&token_file)
        .args(["--reconcile-interval", "0.2"])
        .env("KUBECONFIG", "/dev/null")
        .env_remove("KUBE_SERVER")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = deployer.spawn().expect("the deployer starts");

    let replicas = |name: &'static str| {
        let kubectl = &kubectl;
        async move {
            let found = kubectl
                .get_json(&["get", "deployment", name, "-o", "json"])
                .await?;
            Some(found["spec"]["replicas"].as_i64().unwrap_or(0))
        }
    };
    kubectl
        .create_when_served(&manifest("1.7.7", 3), WITHIN)
        .await;
    let user = "system:serviceaccount:default:deployer";
    let failed = || {
        let failed: Vec<String> = sandbox
            .requests()
            .into_iter()
            .filter(|r| r.user == user && r.code >= 400)
            .map(|r| {
                format!(
                    "{} {} {} {}/{}",
                    r.code, r.verb, r.resource, r.subresource, r.name
                )
            })
            .collect();
        failed
    };
    if test_support::within(WITHIN, || async { replicas("nginx-1.7.7").await })
        .await
        .is_none()
    {
        panic!(
            "no nginx-1.7.7; the deployer's failed requests: {:#?}",
            failed()
        );
    }
    set_version(&kubectl, "1.7.8").await;
    eventually(WITHIN, "1.7.8 rolled out, 1.7.7 deleted", || async {
        let done =
            replicas("nginx-1.7.8").await == Some(10) && replicas("nginx-1.7.7").await.is_none();
        done.then_some(())
    })
    .await;
    sandbox.faults().fail_readiness("nginx:1.7.9", true);
    set_version(&kubectl, "1.7.9").await;
    eventually(WITHIN, "1.7.9 rolled back", || async {
        let deployer = kubectl
            .get_json(&["get", "dep", "nginx", "-o", "json"])
            .await?;
        (deployer["status"]["rolledBackVersion"] == "1.7.9").then_some(())
    })
    .await;
    let _ = child.start_kill();
    let _ = child.wait().await;

    let requests: Vec<_> = sandbox
        .requests()
        .into_iter()
        .filter(|r| r.user == user)
        .collect();
    let refused: Vec<String> = requests
        .iter()
        .filter(|r| r.code == 403)
        .map(|r| format!("{} {} {}/{}", r.verb, r.resource, r.subresource, r.name))
        .collect();
    println!("the deployer made {} requests as {user}", requests.len());
    assert!(
        refused.is_empty(),
        "refused by kube/deployer/rbac.yaml: {refused:#?}"
    );
    for (verb, resource) in [
        ("create", "customresourcedefinitions"),
        ("watch", "deployers"),
        ("patch", "deployers"),
        ("create", "deployments"),
        ("delete", "deployments"),
        ("create", "events"),
    ] {
        assert!(
            requests
                .iter()
                .any(|r| r.verb == verb && r.resource == resource),
            "the deployer never made a {verb} of {resource}"
        );
    }
}

/// A registration the API server refuses names the Deployer's CRD, in the error and in its hint
/// (not step 01's PostgresCluster): a 403 on the POST from `run_deployer`, then a 403 on the GET
/// of the wait for Established.
#[tokio::test]
async fn a_refused_registration_names_the_deployers_crd() {
    use postgres_operator::crd::{self, CrdError};
    use postgres_operator::deployer::CRD_NAME;
    use test_support::scripted_server::{ready, status, ScriptedServer};

    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "GET" => ready(status(404, "NotFound", "not found")),
        _ => ready(status(403, "Forbidden", "cannot create")),
    })
    .await;
    let (reporter, _lines) = Reporter::channel();
    let options = ControllerOptions::default();
    let error = run_deployer(
        plain_client(&server.url),
        options,
        reporter,
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, CrdError::Create(..)), "{error:?}");
    assert!(
        error
            .to_string()
            .starts_with("creating CustomResourceDefinition deployers.workshop.example.com: POST "),
        "{error}"
    );
    let hint = error.hint().expect("a hint for 403");
    let mut said = vec![error.to_string(), hint.clone()];
    assert_eq!(
        hint,
        "the type deployers.workshop.example.com is not registered and this account may not \
         create customresourcedefinitions.apiextensions.k8s.io: have the type registered once by \
         someone who may (`kubectl apply -f` its CRD manifest), or grant create in a ClusterRole \
         (see its operator's RBAC manifest)"
    );

    let server = ScriptedServer::always(|| status(403, "Forbidden", "cannot get")).await;
    let client = plain_client(&server.url);
    let error = crd::wait_crd_established(&client, CRD_NAME, WITHIN)
        .await
        .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "waiting for CustomResourceDefinition deployers.workshop.example.com to be Established: "
        ),
        "{error}"
    );
    let hint = error.hint().expect("a hint for 403");
    assert!(
        hint.contains("may not get customresourcedefinitions"),
        "{hint}"
    );
    said.extend([error.to_string(), hint]);
    for said in said {
        assert!(!said.contains("postgres"), "{said}");
        assert!(!said.contains("PostgresCluster"), "{said}");
    }
}
