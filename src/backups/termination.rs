//! Support: skip it on first read — reading what a finished container reports. A backup pod's
//! script and a restore's write their result (or their error) to `/dev/termination-log`, which
//! the kubelet copies into the container's `state.terminated.message`
//! (`terminationMessagePolicy: FallbackToLogsOnError`: the end of its log when it wrote
//! nothing), so the operator reads it from the pod's status, with no `pods/log` request.
//!
//! WORKSHOP.md, step 06 ("What goes where": base backups).

use crate::postgres::manifests::POSTGRES_CONTAINER;
use crate::postgres::PostgresTask;

use super::manifests::RESTORE_CONTAINER;
use super::Backups;

/// Why the restoring seed `pod` failed, if it did: the `restore` init container exited
/// non-zero, or the postgres container stopped during recovery. The reason is the container's
/// termination message: what the script wrote to /dev/termination-log, or
/// (`terminationMessagePolicy: FallbackToLogsOnError`) the kubelet's copy of its last log
/// lines, so no `pods/log` request is needed.
pub(super) async fn restore_failure(task: &PostgresTask<Backups>, pod: &str) -> Option<String> {
    let path = format!("/api/v1/namespaces/{}/pods/{pod}", task.namespace());
    let pod_json = task.client().get::<serde_json::Value>(&path).await.ok()?;
    let statuses = [
        ("initContainerStatuses", RESTORE_CONTAINER),
        ("containerStatuses", POSTGRES_CONTAINER),
    ];
    for (list, container) in statuses {
        let status = pod_json["status"][list]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == container))?
            .clone();
        // A failed instance is `state` until the kubelet restarts it, `lastState` after.
        let failed = [
            &status["state"]["terminated"],
            &status["lastState"]["terminated"],
        ]
        .into_iter()
        .find(|t| t["exitCode"].as_i64().is_some_and(|c| c != 0));
        let Some(terminated) = failed else {
            continue;
        };
        let reason = last_line(terminated["message"].as_str().unwrap_or_default())
            .unwrap_or("(no termination message, and nothing in its log)");
        let exit = terminated["exitCode"].as_i64().unwrap_or_default();
        return Some(format!(
            "container {container} exited with {exit}: {reason}"
        ));
    }
    None
}

/// The last non-empty line of a termination message: under `FallbackToLogsOnError` it can be
/// up to 80 log lines, of which the last says what went wrong.
pub(super) fn last_line(message: &str) -> Option<&str> {
    message
        .lines()
        .map(str::trim)
        .rev()
        .find(|line| !line.is_empty())
}
