//! A PostgresCluster whose pods are real PostgreSQL, seen and driven through real kubectl as a
//! learner does: its members, whether it is healthy, and SQL through `kubectl exec`.

use std::time::Duration;

use postgres_operator::postgres::manifests::{psql_argv, POSTGRES_CONTAINER};
use serde_json::Value;

use crate::{eventually, live_items, pod_is_ready, Kubectl};

/// A member of a cluster: one of its pods that is not terminating.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub name: String,
    /// The `workshop.example.com/role` label: `primary` or `replica`.
    pub role: String,
    pub ready: bool,
}

/// The members of PostgresCluster `cluster` in kubectl's namespace: its pods that are not
/// terminating. A backup pod carries the cluster's label too, but is no member.
pub async fn members(kubectl: &Kubectl, cluster: &str) -> Vec<Member> {
    let selector = format!("workshop.example.com/cluster={cluster}");
    let list = kubectl.json(&["get", "pods", "-l", &selector]).await;
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    live_items(&list)
        .into_iter()
        .map(|pod| Member {
            name: text(&pod["metadata"]["name"]),
            role: text(&pod["metadata"]["labels"]["workshop.example.com/role"]),
            ready: pod_is_ready(pod),
        })
        .filter(|member| member.role != "backup")
        .collect()
}

/// The primary's name, once `cluster` has exactly `size` members, all ready, one of them the
/// primary, and its status says the same.
pub async fn healthy(kubectl: &Kubectl, cluster: &str, size: usize) -> Option<String> {
    let members = members(kubectl, cluster).await;
    let primaries: Vec<&Member> = members.iter().filter(|m| m.role == "primary").collect();
    let status = kubectl.json(&["get", "pgc", cluster]).await["status"].clone();
    let healthy = members.len() == size
        && members.iter().all(|m| m.ready)
        && primaries.len() == 1
        && status["readyInstances"] == size
        && status["primary"] == primaries[0].name.as_str();
    healthy.then(|| primaries[0].name.clone())
}

/// Wait (`within` at most) until [`healthy`]: the primary's name.
pub async fn wait_healthy(
    kubectl: &Kubectl,
    cluster: &str,
    size: usize,
    within: Duration,
) -> String {
    if let Some(primary) = crate::within(within, || healthy(kubectl, cluster, size)).await {
        return primary;
    }
    panic!(
        "timed out after {within:?} waiting for {cluster}: {size} ready members, one primary\n{}",
        report(kubectl, cluster).await
    );
}

/// What every pod of `cluster` says about itself ([`Kubectl::pod_report`]), for a failure.
pub async fn report(kubectl: &Kubectl, cluster: &str) -> String {
    let selector = format!("workshop.example.com/cluster={cluster}");
    let Some(names) = kubectl
        .try_run(&["get", "pods", "-l", &selector, "-o", "name"])
        .await
        .ok()
        .map(|out| out.stdout)
    else {
        return format!("(the pods of {cluster} cannot be listed)\n");
    };
    let mut report = String::new();
    for name in names.lines().filter_map(|line| line.strip_prefix("pod/")) {
        report.push_str(&kubectl.pod_report(NAMESPACE, name).await);
    }
    report
}

/// The namespace kubectl uses when none is named, where these helpers' clusters live.
const NAMESPACE: &str = "default";

/// Delete every pod of `cluster` at once, without waiting for them to go: the disaster steps 04
/// and 06 both stage.
pub async fn delete_every_pod(kubectl: &Kubectl, cluster: &str) {
    let selector = format!("workshop.example.com/cluster={cluster}");
    kubectl
        .ok(&["delete", "pods", "-l", &selector, "--wait=false"])
        .await;
}

/// Wait (`within` at most) until `cluster`'s `status.phase` is `phase`: the status then.
pub async fn wait_phase(kubectl: &Kubectl, cluster: &str, phase: &str, within: Duration) -> Value {
    eventually(within, &format!("{cluster}: phase {phase}"), || async {
        let status = kubectl.json(&["get", "pgc", cluster]).await["status"].clone();
        (status["phase"] == phase).then_some(status)
    })
    .await
}

/// `psql` running `sql` as the superuser in `pod`'s postgres container, through `kubectl exec`
/// (which must succeed, or the pod's report is printed): the output, trimmed.
pub async fn psql(kubectl: &Kubectl, pod: &str, sql: &str) -> String {
    let argv = psql_argv(sql);
    let mut args = vec!["exec", pod, "-c", POSTGRES_CONTAINER, "--"];
    args.extend(argv.iter().map(String::as_str));
    let out = kubectl.run(&args).await;
    if !out.success {
        panic!(
            "psql {sql:?} in {pod} failed ({:?}): {}{}\n{}",
            out.code,
            out.stdout,
            out.stderr,
            kubectl.pod_report(NAMESPACE, pod).await
        );
    }
    out.stdout.trim().to_string()
}
