//! Restoring a seed from a backup — disaster recovery, or a new cluster bootstrapped from
//! another's backups — and following it to its promotion; what that means for `status`.
//! WORKSHOP.md, step 06 ("What goes where": disaster recovery).

use std::sync::Arc;

use crate::api::PostgresCluster;
use crate::controller::pods::Pod;
use crate::events::EventType;
use crate::postgres::conditions::PHASE_FAILED;
use crate::postgres::manifests::{self as pg, Role};
use crate::postgres::plan::{Member, Observed, Phase};
use crate::postgres::PostgresTask;

use super::api::{BackupStatus, BackupsSpec, RestoreStatus};
pub use super::conditions::{
    PHASE_RECOVERING, RESTORE_FAILED, RESTORE_RESTORED, RESTORE_RESTORING,
};
use super::manifests::{self, PodBackups, RestoreSource};
use super::plan::RestoreObserved;
pub use super::source_credentials::SourceSecretError;
use super::termination::restore_failure;
use super::Backups;

/// `spec.bootstrap.fromBackup`, as a restore source.
pub fn bootstrap_source(cluster: &PostgresCluster) -> Option<RestoreSource> {
    let spec = BackupsSpec::read(&cluster.spec);
    let from = spec.from_backup()?;
    Some(RestoreSource {
        claim: manifests::backup_claim_name(&from.cluster),
        own: false,
        target_time: from.target_time.clone(),
    })
}

/// The round's start: take the layer's part of the status, follow a restore under way, and say
/// what the restore rules need.
pub(super) async fn observe(
    task: &mut PostgresTask<Backups>,
    pods: &[Arc<Pod>],
    observed: &mut Observed,
) {
    let status = task.status();
    task.layer.status = BackupStatus::read(&status);
    let spec = BackupsSpec::read(&task.cluster().spec);
    let seed_failure = if spec.backup.is_some() || spec.bootstrap.is_some() {
        follow_restore(task, &observed.members).await
    } else {
        None
    };
    let restore = task.layer.status.restore.clone();
    // Recovering from a disaster (its own claim) is a cluster that ran; bootstrapping from
    // another's is not.
    let own_claim = manifests::backup_claim_name(&task.cluster().metadata.name);
    if status.phase.as_deref() == Some(PHASE_RECOVERING)
        && restore.as_ref().is_some_and(|r| r.source == own_claim)
    {
        observed.has_run = true;
    }
    task.layer.restore_observed = RestoreObserved {
        from: restore_source(task, observed.has_run).map(|source| source.claim),
        restoring: restore
            .as_ref()
            .is_some_and(|r| r.state == RESTORE_RESTORING),
        failed: restore.as_ref().is_some_and(|r| r.state == RESTORE_FAILED),
        seed_failure,
        not_archiving: if spec.backup.is_some() {
            pods.iter()
                .filter(|pod| !pod.is_terminating() && !manifests::archives(pod))
                .map(|pod| pod.metadata.name.clone())
                .collect()
        } else {
            Vec::new()
        },
    };
}

/// What a seed would restore from now: after the cluster ran, its own claim if a base backup
/// completed; before, the bootstrap source. Restoring a cluster that ran from the bootstrap
/// source would silently drop every write made since.
fn restore_source(task: &PostgresTask<Backups>, has_run: bool) -> Option<RestoreSource> {
    let cluster = task.cluster();
    if has_run {
        let backed_up = BackupsSpec::read(&cluster.spec).backup.is_some()
            && task.layer.status.last_backup.is_some();
        return backed_up.then(|| RestoreSource {
            claim: manifests::backup_claim_name(&cluster.metadata.name),
            own: true,
            target_time: None,
        });
    }
    bootstrap_source(cluster)
}

/// Create the seed that restores from `from`, and record the restore as under way.
pub(super) async fn restore_seed(
    task: &mut PostgresTask<Backups>,
    from: &str,
    version: Option<&str>,
) -> Option<String> {
    let has_run = from == manifests::backup_claim_name(&task.cluster().metadata.name);
    if has_run && !still_wanted(task).await {
        return None;
    }
    // ANCHOR: restore
    let source = restore_source(task, has_run)?;
    if has_run {
        task.say("All Postgres pods are dead. Trying to recover from a previous backup");
    }
    let newest = task
        .layer
        .status
        .last_backup
        .as_ref()
        .filter(|_| has_run)
        .map_or("the newest base backup".to_string(), |b| {
            format!("base backup {} (LSN {})", b.name, b.lsn)
        });
    task.say(format!(
        "Launching seed Postgres node restoring {newest} from {from}{}",
        source
            .target_time
            .as_ref()
            .map_or(String::new(), |t| format!(", replaying WAL up to {t}"))
    ));
    let cluster = task.at_version(version);
    let backups = PodBackups {
        archive: BackupsSpec::read(&cluster.spec).backup.is_some(),
        restore: Some(source),
    };
    let body = manifests::member_pod(
        &cluster,
        Role::Primary,
        &backups,
        &task.failover_state().agent_image,
    );
    let name = task.create_pod(Role::Primary, &body).await?;
    task.say(format!(
        "Launching seed Postgres node {name}: restoring, then replaying the archived WAL"
    ));
    task.event(
        EventType::Normal,
        "Restoring",
        &format!("created the seed {name}, restoring {newest} from {from}"),
    )
    .await;
    task.layer.status.restore = Some(RestoreStatus {
        source: from.to_string(),
        pod: name.clone(),
        state: RESTORE_RESTORING.into(),
        message: String::new(),
    });
    Some(name)
}
// ANCHOR_END: restore

/// The restoring seed `pod` failed: delete it, and record the restore as failed.
pub(super) async fn restore_failed(task: &mut PostgresTask<Backups>, pod: &str, reason: &str) {
    let source = task
        .layer
        .status
        .restore
        .as_ref()
        .map_or("the backups".to_string(), |r| r.source.clone());
    task.say(format!(
        "Restore failed: {reason}; deleting {pod}. The cluster is Failed; the backups in {source} are untouched"
    ));
    task.delete_pod(pod).await;
    task.layer.status.restore = Some(RestoreStatus {
        source,
        pod: pod.to_string(),
        state: RESTORE_FAILED.into(),
        message: reason.to_string(),
    });
    task.event(
        EventType::Warning,
        "RestoreFailed",
        &format!("restoring {pod} failed: {reason}"),
    )
    .await;
}

/// Every member is gone after a restore failed: say so once, when the cluster turns Failed.
pub(super) fn stay_failed(task: &PostgresTask<Backups>) {
    if task.status().phase.as_deref() == Some(PHASE_FAILED) {
        return;
    }
    task.say("All Postgres pods are dead. Trying to recover from a previous backup");
    if let Some(failed) = &task.layer.status.restore {
        task.say(format!("The restore from {} failed ({}): the cluster is Failed. The backups are untouched; fix or remove the file named, then delete and re-create the cluster", failed.source, failed.message));
    }
}

/// While a seed restores: has it failed (its `restore` init container, or its server during
/// recovery, exited with an error)? Has it been promoted? The first is returned for the plan
/// (the pod, and why); the second records the restore as done, with the WAL position it
/// reached.
async fn follow_restore(
    task: &mut PostgresTask<Backups>,
    members: &[Member],
) -> Option<(String, String)> {
    let restore = task
        .layer
        .status
        .restore
        .clone()
        .filter(|r| r.state == RESTORE_RESTORING)?;
    let member = members.iter().find(|m| m.name == restore.pod)?;
    if member.phase == Phase::Running && member.ready {
        // Ready is not promoted: a server in archive recovery accepts read-only queries once
        // consistent. pg_is_in_recovery() says when it is a primary.
        let out = task.psql(&member.name, pg::IS_IN_RECOVERY_SQL).await.ok()?;
        if pg::parse_bool(&out) != Ok(false) {
            return None;
        }
        let lsn = task
            .psql(&member.name, pg::CURRENT_WAL_LSN_SQL)
            .await
            .map(|out| out.trim().to_string())
            .unwrap_or_default();
        task.say(format!(
            "Restored: {} replayed the archived WAL up to {lsn} and was promoted; it is the primary",
            member.name
        ));
        task.event(
            EventType::Normal,
            "Restored",
            &format!(
                "{} restored from {} and promoted at WAL position {lsn}",
                member.name, restore.source
            ),
        )
        .await;
        task.layer.status.restore = Some(RestoreStatus {
            state: RESTORE_RESTORED.into(),
            message: format!("promoted at WAL position {lsn}"),
            ..restore
        });
        return None;
    }
    if member.phase == Phase::Terminating {
        return None;
    }
    let why = restore_failure(task, &member.name).await?;
    Some((member.name.clone(), why))
}

/// Is the cluster still there, the same one, and not being deleted? After `kubectl delete pgc`
/// the garbage collector may remove the pods before this task hears of the deletion, which
/// looks exactly like the loss of every member: without this check a restore would start for a
/// cluster that is going (its seed then outlives it, owned by nothing). A list by name rather
/// than a GET: the Role grants `list` and `watch` on postgresclusters only. Unsure (the list
/// failed): not now, the next round asks again.
async fn still_wanted(task: &PostgresTask<Backups>) -> bool {
    let cluster = task.cluster();
    let path = format!(
        "{}?fieldSelector=metadata.name%3D{}",
        crate::api::collection_path(task.namespace()),
        cluster.metadata.name
    );
    match task.client().get::<serde_json::Value>(&path).await {
        Ok(list) => list["items"]
            .as_array()
            .and_then(|items| items.first())
            .is_some_and(|found| {
                found["metadata"]["uid"] == cluster.metadata.uid.as_str()
                    && found["metadata"]["deletionTimestamp"].is_null()
            }),
        Err(_) => false,
    }
}
