//! The base backups' rounds: a backup pod started when one is due (or asked for by the
//! backup-now annotation), its report read when it finishes. WORKSHOP.md, step 06 ("What goes
//! where": base backups).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::controller::pods::Pod;
use crate::events::EventType;
use crate::postgres::manifests::{self as pg, Role};
use crate::postgres::plan::{Observed, Phase};
use crate::postgres::PostgresTask;

use super::api::{BackupsSpec, LastBackup, BACKUP_NOW_ANNOTATION};
use super::manifests::{self, BackupReport, BACKUP_CONTAINER};
use super::plan::{
    next_backup, BackupObserved, BackupPod, BackupSource, BackupStep, BACKUP_RETRY_AFTER,
};
use super::termination::last_line;
use super::Backups;

/// One backup step: collect a finished backup pod, or start one when due. `pods`: the
/// cluster's backup pods; `steady`: the members' plan had nothing to do.
pub(super) async fn round(
    task: &mut PostgresTask<Backups>,
    pods: &[Arc<Pod>],
    observed: &Observed,
    steady: bool,
) {
    let Some(spec) = BackupsSpec::read(&task.cluster().spec).backup else {
        return;
    };
    let requested_value = task
        .cluster()
        .metadata
        .annotations
        .get(BACKUP_NOW_ANNOTATION)
        .cloned();
    let requested =
        requested_value.is_some() && requested_value != task.layer.status.backup_requested;
    let since_last = task
        .layer
        .status
        .last_backup
        .as_ref()
        .and_then(|last| last.age(SystemTime::now()));
    let backup_observed = BackupObserved {
        pods: pods
            .iter()
            .map(|pod| BackupPod {
                name: pod.metadata.name.clone(),
                phase: match pod.phase() {
                    _ if pod.is_terminating() => Phase::Terminating,
                    "Succeeded" | "Failed" => Phase::Done,
                    "Running" => Phase::Running,
                    _ => Phase::Pending,
                },
            })
            .collect(),
        since_last,
        interval: Duration::from_secs(
            u64::try_from(spec.interval_minutes.max(1)).unwrap_or(60) * 60,
        ),
        requested,
        since_failure: task.layer.backup_failed_at.map(|at| at.elapsed()),
        replica_ready: observed
            .members
            .iter()
            .any(|m| m.role == Some(Role::Replica) && m.ready),
    };
    match next_backup(&backup_observed, steady) {
        BackupStep::Idle | BackupStep::Running(_) => {}
        BackupStep::Collect(pod) => {
            let succeeded = pods
                .iter()
                .any(|p| p.metadata.name == pod && p.phase() == "Succeeded");
            collect(task, &pod, succeeded).await;
        }
        BackupStep::Start { from } => {
            let name = &task.cluster().metadata.name;
            let host = match from {
                BackupSource::Replicas => pg::replicas_service_name(name),
                BackupSource::Primary => pg::primary_service_name(name),
            };
            let why = if requested {
                "asked for by the backup-now annotation"
            } else if since_last.is_none() {
                "the first"
            } else {
                "due"
            };
            let path = format!("/api/v1/namespaces/{}/pods", task.namespace());
            let body = manifests::backup_pod(task.cluster(), &host, spec.keep);
            match task.client().create::<_, Pod>(&path, &body).await {
                Ok(pod) => {
                    task.say(format!(
                        "Backing up: {} takes a base backup ({why}) from {host}",
                        pod.metadata.name
                    ));
                    if requested {
                        task.layer.status.backup_requested = requested_value;
                    }
                }
                Err(error) => {
                    task.say(format!(
                        "could not create a backup pod: {error}; trying again next round"
                    ));
                    task.fail_round();
                }
            }
        }
    }
}

/// Read a finished backup pod's report, record it (status, Event, a story line), delete it.
/// The report is the container's termination message: its result line on success, or
/// (`FallbackToLogsOnError`) the end of its log when it failed without writing one.
async fn collect(task: &mut PostgresTask<Backups>, pod: &str, succeeded: bool) {
    let path = format!("/api/v1/namespaces/{}/pods/{pod}", task.namespace());
    let text = match task.client().get::<serde_json::Value>(&path).await {
        Ok(json) => json["status"]["containerStatuses"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == BACKUP_CONTAINER))
            .and_then(|c| c["state"]["terminated"]["message"].as_str())
            .unwrap_or_default()
            .to_string(),
        Err(error) => format!("(could not read the pod: {error})"),
    };
    match BackupReport::parse(&text).ok().filter(|_| succeeded) {
        Some(report) => {
            task.layer.backup_failed_at = None;
            let line = format!(
                "Backup {} complete: {} bytes, starts at WAL position {}",
                report.name, report.bytes, report.lsn
            );
            task.say(line.clone());
            task.event(EventType::Normal, "BackupCompleted", &line)
                .await;
            task.layer.status.last_backup = Some(LastBackup {
                name: report.name,
                time: report.time,
                lsn: report.lsn,
                bytes: report.bytes,
            });
        }
        None => {
            task.layer.backup_failed_at = Some(Instant::now());
            let why = last_line(&text).unwrap_or("(no termination message)");
            let line = format!("Backup by {pod} failed: {why}");
            task.say(format!(
                "{line}; trying again in {}s",
                BACKUP_RETRY_AFTER.as_secs()
            ));
            task.event(EventType::Warning, "BackupFailed", &line).await;
        }
    }
    task.delete_pod(pod).await;
}
