//! Deployments and ReplicaSets run as kube-controller-manager runs them, checked with the real
//! kubectl against the simulated runtime: create, scale, rolling update within maxSurge and
//! maxUnavailable, rollout status/history/undo, the progress deadline, tables, logs, events
//! and garbage collection.
//!
//! Run: `cargo test -p sandbox --test workloads kubectl::`.

use std::collections::BTreeMap;
use std::time::Duration;

use sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use test_support::http_client::Http;
use test_support::{eventually, Kubectl};
use tokio_util::sync::CancellationToken;

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";
const REPLICA_SETS: &str = "/apis/apps/v1/namespaces/default/replicasets";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// `kubectl apply -f` of a manifest given as text.
async fn apply(kubectl: &Kubectl, manifest: &str) -> String {
    kubectl.ok_manifest("apply", manifest).await
}

fn deployment_yaml(name: &str, replicas: u32, image: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
{extra_spec}  template:
    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: {name}
        image: {image}
"
    )
}

async fn items(http: &Http, path: &str) -> Vec<Value> {
    http.get(path).await.json()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn names(objects: &[Value]) -> Vec<String> {
    objects.iter().map(name_of).collect()
}

/// Pods that are not terminating.
async fn live_pods(http: &Http) -> Vec<Value> {
    items(http, PODS)
        .await
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect()
}

/// What a pod watch saw during a rollout: the most live pods and the fewest ready ones at once.
#[derive(Debug, Default)]
struct Observed {
    max_pods: usize,
    min_ready: usize,
    events: usize,
}

/// Follow the pod events of `watch` (a watch URL) until `stop`, keeping each pod by name (from
/// `pods` on; DELETED removes one), and call `after_each` with them after every event.
async fn follow_pods(
    http: &Http,
    watch: &str,
    mut pods: BTreeMap<String, Value>,
    stop: &CancellationToken,
    mut after_each: impl FnMut(&BTreeMap<String, Value>),
) {
    let mut stream = http.stream(watch).await;
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => break,
            event = stream.next_event(Duration::from_secs(120)) => event,
        };
        let Some(event) = event else { break };
        let pod = &event["object"];
        if event["type"] == "DELETED" {
            pods.remove(&name_of(pod));
        } else {
            pods.insert(name_of(pod), pod.clone());
        }
        after_each(&pods);
    }
}

/// Follow every pod event until `stop`, checking the counts after each one.
fn observe_pods(http: Http, stop: CancellationToken) -> tokio::task::JoinHandle<Observed> {
    tokio::spawn(async move {
        // List, then watch from the list's resourceVersion: the counts start from the whole
        // set of pods, not from the first of the initial ADDED events.
        let list = http.get(PODS).await.json();
        let pods = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|pod| (name_of(pod), pod.clone()))
            .collect();
        let rv = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let watch = format!("{PODS}?watch=true&resourceVersion={rv}");
        let mut observed = Observed {
            min_ready: usize::MAX,
            ..Observed::default()
        };
        follow_pods(&http, &watch, pods, &stop, |pods| {
            observed.events += 1;
            let live: Vec<&Value> = pods
                .values()
                .filter(|pod| pod["metadata"]["deletionTimestamp"].is_null())
                .collect();
            let ready = live
                .iter()
                .filter(|pod| test_support::pod_is_ready(pod))
                .count();
            observed.max_pods = observed.max_pods.max(live.len());
            observed.min_ready = observed.min_ready.min(ready);
        })
        .await;
        observed
    })
}

/// `kubectl rollout status` of Deployment `name`, which must finish within 30 s.
async fn rolled_out(kubectl: &Kubectl, name: &str) {
    let deployment = format!("deploy/{name}");
    kubectl
        .ok(&["rollout", "status", &deployment, "--timeout=30s"])
        .await;
}

/// `kubectl set image` of Deployment `name`'s container `name`, then its rollout to the end.
async fn set_image(kubectl: &Kubectl, name: &str, image: &str) {
    let deployment = format!("deploy/{name}");
    let container = format!("{name}={image}");
    kubectl.ok(&["set", "image", &deployment, &container]).await;
    rolled_out(kubectl, name).await;
}

async fn start(options: SandboxOptions) -> (Sandbox, Http, Kubectl) {
    let sandbox = test_support::start_sandbox_with(options).await;
    let http = Http::new(&sandbox.url());
    let kubectl = Kubectl::new(&sandbox.url());
    (sandbox, http, kubectl)
}

/// `kubectl create deployment` makes a ReplicaSet `<name>-<hash>` and Ready pods
/// `<rs>-<5 chars>` owned down the chain; rollout status returns, scale moves pods both ways,
/// tables, logs and events read as on a cluster, and deleting the deployment takes it all.
#[tokio::test]
async fn a_deployment_makes_a_replica_set_and_ready_pods() {
    let options = SandboxOptions {
        pod_events: true,
        ..SandboxOptions::default()
    };
    let (_sandbox, http, kubectl) = start(options).await;
    kubectl
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
        ])
        .await;
    let status = kubectl
        .ok(&["rollout", "status", "deployment/web", "--timeout=30s"])
        .await;
    assert!(status.contains("successfully rolled out"), "{status}");

    let deployment = http.get(&format!("{DEPLOYMENTS}/web")).await.json();
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(deployment["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(deployment["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let status = &deployment["status"];
    for field in [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ] {
        assert_eq!(status[field], 2, "status.{field} in {status}");
    }
    assert_eq!(
        status["observedGeneration"],
        deployment["metadata"]["generation"]
    );
    let reasons: Vec<(&str, &str)> = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or(""),
                c["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        reasons.contains(&("Available", "MinimumReplicasAvailable")),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&("Progressing", "NewReplicaSetAvailable")),
        "{reasons:?}"
    );

    let replica_sets = items(&http, REPLICA_SETS).await;
    assert_eq!(replica_sets.len(), 1);
    let rs = &replica_sets[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("pod-template-hash label")
        .to_string();
    let rs_name = format!("web-{hash}");
    assert_eq!(rs["metadata"]["name"], rs_name.as_str());
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash.as_str()
    );
    assert_eq!(
        rs["metadata"]["ownerReferences"][0]["uid"],
        deployment["metadata"]["uid"]
    );
    assert_eq!(rs["metadata"]["ownerReferences"][0]["controller"], true);
    let annotations = &rs["metadata"]["annotations"];
    assert_eq!(annotations["deployment.kubernetes.io/revision"], "1");
    assert_eq!(
        annotations["deployment.kubernetes.io/desired-replicas"],
        "2"
    );
    assert_eq!(annotations["deployment.kubernetes.io/max-replicas"], "3");
    assert_eq!(rs["status"]["readyReplicas"], 2);
    assert_eq!(rs["status"]["fullyLabeledReplicas"], 2);

    let pods = live_pods(&http).await;
    assert_eq!(pods.len(), 2);
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().expect("name");
        let suffix = name
            .strip_prefix(&format!("{rs_name}-"))
            .expect("named after the rs");
        assert!(
            suffix.len() == 5
                && suffix
                    .bytes()
                    .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
        assert_eq!(
            pod["metadata"]["labels"]["pod-template-hash"],
            hash.as_str()
        );
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["uid"],
            rs["metadata"]["uid"]
        );
        assert!(test_support::pod_is_ready(pod));
    }

    let table = kubectl.ok(&["get", "deploy,rs,pods"]).await;
    let header_of = |kind: &str| {
        table
            .lines()
            .skip_while(|l| !l.starts_with("NAME"))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .find(|l| table.contains(kind) && !l.is_empty())
            .unwrap_or_default()
    };
    assert!(
        header_of("deployment").starts_with("NAME READY UP-TO-DATE AVAILABLE AGE"),
        "{table}"
    );
    assert!(
        table.contains("NAME                             DESIRED   CURRENT   READY   AGE")
            || table.contains("DESIRED   CURRENT   READY   AGE"),
        "{table}"
    );
    let deploy_row = table
        .lines()
        .find(|l| l.starts_with("deployment.apps/web "))
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "));
    assert_eq!(
        deploy_row.as_deref(),
        Some("deployment.apps/web 2/2 2 2"),
        "{table}"
    );
    let rs_row = table
        .lines()
        .find(|l| l.starts_with(&format!("replicaset.apps/{rs_name} ")))
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" "));
    assert_eq!(
        rs_row,
        Some(format!("replicaset.apps/{rs_name} 2 2 2")),
        "{table}"
    );

    let logs = kubectl.ok(&["logs", "deploy/web"]).await;
    assert!(logs.contains(&format!("pod {rs_name}-")), "{logs}");

    kubectl.ok(&["scale", "deploy/web", "--replicas=3"]).await;
    rolled_out(&kubectl, "web").await;
    assert_eq!(live_pods(&http).await.len(), 3);
    kubectl.ok(&["scale", "deploy/web", "--replicas=1"]).await;
    eventually(Duration::from_secs(10), "one pod left", || {
        let http = http.clone();
        async move { (live_pods(&http).await.len() == 1).then_some(()) }
    })
    .await;
    let replica_sets = items(&http, REPLICA_SETS).await;
    assert_eq!(
        names(&replica_sets),
        std::slice::from_ref(&rs_name),
        "scaling makes no new ReplicaSet"
    );

    let events = kubectl.ok(&["get", "events"]).await;
    for expected in [
        format!("Scaled up replica set {rs_name} from 0 to 2"),
        format!("Scaled up replica set {rs_name} from 2 to 3"),
        format!("Scaled down replica set {rs_name} from 3 to 1"),
        format!("Created pod: {rs_name}-"),
        format!("Deleted pod: {rs_name}-"),
    ] {
        assert!(events.contains(&expected), "no {expected:?} in\n{events}");
    }

    kubectl.ok(&["delete", "deploy", "web"]).await;
    eventually(Duration::from_secs(10), "ReplicaSets and pods gone", || {
        let http = http.clone();
        async move {
            (items(&http, REPLICA_SETS).await.is_empty() && items(&http, PODS).await.is_empty())
                .then_some(())
        }
    })
    .await;
}

/// `kubectl set image` rolls pods over to a second ReplicaSet without ever running more than
/// replicas + maxSurge pods or fewer than replicas - maxUnavailable ready ones; history lists
/// both revisions and `rollout undo` brings revision 1's template back as revision 3.
#[tokio::test]
async fn a_rolling_update_stays_within_surge_and_unavailable_and_undoes() {
    let options = SandboxOptions {
        kubelet_delay: Duration::from_millis(30),
        ..SandboxOptions::default()
    };
    let (_sandbox, http, kubectl) = start(options).await;
    let strategy = "  strategy:\n    rollingUpdate:\n      maxSurge: 1\n      maxUnavailable: 1\n";
    apply(&kubectl, &deployment_yaml("web", 4, "nginx:1.26", strategy)).await;
    rolled_out(&kubectl, "web").await;
    let first_rs = names(&items(&http, REPLICA_SETS).await);

    let stop = CancellationToken::new();
    let watcher = observe_pods(http.clone(), stop.clone());
    test_support::until_watch_opened(&_sandbox, "pods").await;
    set_image(&kubectl, "web", "nginx:1.27").await;
    stop.cancel();
    let observed = watcher.await.expect("watcher task");
    assert!(
        observed.events > 8,
        "the watch saw the rollout: {observed:?}"
    );
    assert!(
        observed.max_pods <= 5,
        "above replicas + maxSurge: {observed:?}"
    );
    assert!(
        observed.min_ready >= 3,
        "below replicas - maxUnavailable: {observed:?}"
    );

    let replica_sets = items(&http, REPLICA_SETS).await;
    assert_eq!(replica_sets.len(), 2, "{:?}", names(&replica_sets));
    let old = replica_sets
        .iter()
        .find(|rs| names(&[(*rs).clone()]) == first_rs)
        .expect("the first ReplicaSet is kept");
    assert_eq!(old["spec"]["replicas"], 0);
    let pods = live_pods(&http).await;
    assert_eq!(pods.len(), 4);
    assert!(pods
        .iter()
        .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.27"));

    let history = kubectl.ok(&["rollout", "history", "deploy/web"]).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");

    kubectl.ok(&["rollout", "undo", "deploy/web"]).await;
    rolled_out(&kubectl, "web").await;
    let pods = live_pods(&http).await;
    assert_eq!(pods.len(), 4);
    assert!(pods
        .iter()
        .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.26"));
    let deployment = http.get(&format!("{DEPLOYMENTS}/web")).await.json();
    assert_eq!(
        deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let revived = http
        .get(&format!("{REPLICA_SETS}/{}", first_rs[0]))
        .await
        .json();
    assert_eq!(
        revived["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    assert_eq!(revived["spec"]["replicas"], 4);
}

/// Pods that never become ready (the kubelet never starts them) make the rollout pass its
/// progressDeadlineSeconds: Progressing turns False with ProgressDeadlineExceeded, and
/// `kubectl rollout status` exits non-zero saying so.
#[tokio::test]
async fn rollout_status_fails_once_the_progress_deadline_passes() {
    let (sandbox, http, kubectl) = start(SandboxOptions::default()).await;
    sandbox
        .faults()
        .set_kubelet_delay(Duration::from_secs(3600));
    apply(
        &kubectl,
        &deployment_yaml("stuck", 1, "nginx:1.27", "  progressDeadlineSeconds: 2\n"),
    )
    .await;
    let out = kubectl
        .run(&["rollout", "status", "deploy/stuck", "--timeout=30s"])
        .await;
    assert!(!out.success, "rollout status succeeded: {out:?}");
    assert!(
        out.stderr
            .contains("deployment \"stuck\" exceeded its progress deadline"),
        "{out:?}"
    );
    let deployment = http.get(&format!("{DEPLOYMENTS}/stuck")).await.json();
    let progressing = deployment["status"]["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .expect("a Progressing condition");
    assert_eq!(progressing["status"], "False");
    assert_eq!(progressing["reason"], "ProgressDeadlineExceeded");
    let available = &deployment["status"]["conditions"][0];
    assert_eq!(available["type"], "Available");
    assert_eq!(deployment["status"]["unavailableReplicas"], 1);
}

/// kube-apiserver's checks: the selector must match the template's labels, maxSurge and
/// maxUnavailable may not both be 0, and an apps/v1 selector never changes.
#[tokio::test]
async fn invalid_deployments_are_refused_in_kube_apiserver_words() {
    let (_sandbox, http, _kubectl) = start(SandboxOptions::default()).await;
    let body = |labels: Value, strategy: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
               "spec": {"selector": {"matchLabels": {"app": "web"}}, "strategy": strategy,
                        "template": {"metadata": {"labels": labels},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    };
    let mismatch = http
        .post(DEPLOYMENTS, &body(json!({"app": "other"}), json!({})))
        .await;
    assert_eq!(mismatch.status, 422);
    assert_eq!(
        mismatch.json()["message"],
        "Deployment.apps \"bad\" is invalid: spec.template.metadata.labels: Invalid value: \
         map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"
    );
    let zero =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}});
    let both_zero = http
        .post(DEPLOYMENTS, &body(json!({"app": "web"}), zero))
        .await;
    both_zero.assert_says(422, "may not be 0 when `maxSurge` is 0");

    let created = http
        .create(DEPLOYMENTS, &body(json!({"app": "web"}), json!({})))
        .await;
    let mut changed = created.json();
    // An unconditional update: the controller has written the deployment since.
    if let Some(metadata) = changed["metadata"].as_object_mut() {
        metadata.remove("resourceVersion");
    }
    changed["spec"]["selector"]["matchLabels"]["tier"] = json!("x");
    changed["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
    let refused = http.put(&format!("{DEPLOYMENTS}/bad"), &changed).await;
    refused.assert_says(422, "field is immutable");
}

/// Recreate: every old pod is gone before a pod of the new template is created.
#[tokio::test]
async fn recreate_stops_old_pods_before_starting_new_ones() {
    let (sandbox, http, kubectl) = start(SandboxOptions::default()).await;
    let strategy = "  strategy:\n    type: Recreate\n";
    apply(&kubectl, &deployment_yaml("db", 2, "nginx:1.26", strategy)).await;
    rolled_out(&kubectl, "db").await;
    let first_hash = live_pods(&http).await[0]["metadata"]["labels"]["pod-template-hash"].clone();

    let stop = CancellationToken::new();
    let watcher = tokio::spawn({
        let http = http.clone();
        let stop = stop.clone();
        async move {
            let mut mixed = false;
            let watch = format!("{PODS}?watch=true");
            follow_pods(&http, &watch, BTreeMap::new(), &stop, |pods| {
                let mut hashes: Vec<&Value> = pods
                    .values()
                    .map(|pod| &pod["metadata"]["labels"]["pod-template-hash"])
                    .collect();
                hashes.dedup();
                mixed |= hashes.len() > 1;
            })
            .await;
            mixed
        }
    });
    test_support::until_watch_opened(&sandbox, "pods").await;
    set_image(&kubectl, "db", "nginx:1.27").await;
    stop.cancel();
    assert!(
        !watcher.await.expect("watcher"),
        "old and new pods existed at once"
    );
    let pods = live_pods(&http).await;
    assert_eq!(pods.len(), 2);
    assert!(pods
        .iter()
        .all(|p| p["metadata"]["labels"]["pod-template-hash"] != first_hash));
}
