//! Step 06: backups and disaster recovery, as a layer over step 05's ([`Backups`] holds a
//! [`Failover`] and calls its hooks first). Stage 06 is stage 05's one call with this layer in
//! place of `Failover`; nothing of step 04 or 05 names it.
//!
//! WORKSHOP.md, step 06. The lesson, in WORKSHOP.md's order:
//!
//! | file | what it holds |
//! |---|---|
//! | `mod.rs` | the layer: which `ClusterLayer` hooks it fills, each after step 05's, and what it keeps per cluster |
//! | `plan.rs` | the decisions: a seed that restores in place of the disaster, members started before `spec.backup` replaced, and when a base backup is due |
//! | `restore.rs` | a seed restored from a backup, followed to its promotion; `status.restore` |
//! | `base_backups.rs` | the base backups' rounds: start a backup pod when due, collect its report |
//! | `scripts.rs` | the shell: `archive_command`, `restore_command`, the backup and restore scripts |
//!
//! Support, to skip on first read: `api.rs` (step 06's own fields: `spec.backup`,
//! `spec.bootstrap`, the backup-now annotation, `status.lastBackup`, `backupRequested` and
//! `restore`), `manifests.rs` (the claim, the archive settings, the backup pod, the restore init
//! container), `conditions.rs` (phase Recovering or Failed, and the conditions), `figures.rs`
//! (the last backup's age and the archiver's failures, for `/metrics`), `termination.rs` (what a
//! finished container reports) and `source_credentials.rs` (the passwords of the cluster a new
//! one is bootstrapped from).
//!
//! A cluster without `spec.backup` or `spec.bootstrap` runs exactly as in stage 05.

pub mod api;
pub mod base_backups;
pub mod conditions;
pub mod figures;
pub mod manifests;
pub mod plan;
pub mod restore;
pub mod scripts;
pub mod source_credentials;
pub mod termination;

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use tokio::time::Instant;

use crate::api::{PostgresCluster, PostgresClusterSpec, PostgresClusterStatus};
use crate::controller::pods::Pod;
use crate::events::EventType;
use crate::failover::{self, Failover, FailoverFlags, FailoverState, WithFailover};
use crate::metrics::Family;
use crate::postgres::manifests::{Credentials, Role, ROLE_LABEL};
use crate::postgres::plan::{Action, Observed};
use crate::postgres::{ClusterLayer, OwnedError, Planned, PostgresTask};

use api::{BackupStatus, BackupsSpec};
use manifests::{PodBackups, BACKUP_ROLE};
use plan::{plan_restore, BackupAction, RestoreObserved};

/// The backup layer, over step 05's failover: stage 06's operator is
/// `run_postgres_binary::<Backups>(..)`.
#[derive(Clone, Debug, Default)]
pub struct Backups {
    pub failover: Failover,
}

/// What the layer keeps per cluster.
#[derive(Debug)]
pub struct BackupState {
    /// Step 05's, whose hooks this layer calls first.
    failover: FailoverState,
    /// `status.lastBackup`, `backupRequested` and `restore` as this round leaves them: read at
    /// the start of the round, changed by what it does, written with the round's status.
    status: BackupStatus,
    /// When the last backup pod failed (the next is tried after a pause).
    backup_failed_at: Option<Instant>,
    /// This round's view for the restore rules.
    restore_observed: RestoreObserved,
}

impl WithFailover for Backups {
    fn failover(state: &BackupState) -> &FailoverState {
        &state.failover
    }

    fn failover_mut(state: &mut BackupState) -> &mut FailoverState {
        &mut state.failover
    }
}

impl ClusterLayer for Backups {
    type State = BackupState;
    type Action = BackupAction;
    type Flags = FailoverFlags;

    fn from_flags(flags: FailoverFlags) -> Self {
        Backups {
            failover: flags.into(),
        }
    }

    fn new_state(&self) -> BackupState {
        BackupState {
            failover: self.failover.new_state(),
            status: BackupStatus::default(),
            backup_failed_at: None,
            restore_observed: RestoreObserved::default(),
        }
    }

    fn validate(spec: &PostgresClusterSpec) -> Result<(), String> {
        failover::validate(spec)
    }

    /// Backup pods carry the role label `backup`: they are not members.
    fn is_own_pod(pod: &Pod) -> bool {
        pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(BACKUP_ROLE)
    }

    /// A cluster restored from another's backups has that cluster's roles and passwords (they
    /// live in the database): its Secret must hold the same ones.
    async fn credentials(task: &PostgresTask<Self>) -> Result<Option<Credentials>, OwnedError> {
        match restore::bootstrap_source(task.cluster()) {
            Some(_) => source_credentials::source_credentials(task).await.map(Some),
            None => Ok(None),
        }
    }

    /// The claim `<name>-backups`, when `spec.backup` asks for it.
    async fn ensure_owned(task: &PostgresTask<Self>) -> Result<(), OwnedError> {
        let cluster = task.cluster();
        let Some(spec) = BackupsSpec::read(&cluster.spec).backup else {
            return Ok(());
        };
        let claim = manifests::backup_claim_name(&cluster.metadata.name);
        let path = format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims/{claim}",
            task.namespace()
        );
        if !task.exists(&path).await? {
            let body = manifests::backup_claim(cluster, &spec.storage_size);
            task.create_owned("persistentvolumeclaims", &body, &claim)
                .await?;
        }
        Ok(())
    }

    /// Step 05's pod, and every member archives its WAL when `spec.backup` is set.
    fn dress_pod(
        task: &PostgresTask<Self>,
        cluster: &PostgresCluster,
        role: Role,
        pod: &mut Value,
    ) {
        failover::dress_pod(task, cluster, role, pod);
        let backups = PodBackups {
            archive: BackupsSpec::read(&cluster.spec).backup.is_some(),
            restore: None,
        };
        manifests::dress_member(pod, cluster, role, &backups);
    }

    async fn observe(
        task: &mut PostgresTask<Self>,
        pods: &[Arc<Pod>],
        observed: &mut Observed,
        planning: bool,
    ) {
        failover::observe::observe(task, pods, observed, planning).await;
        restore::observe(task, pods, observed).await;
    }

    fn plan(
        task: &PostgresTask<Self>,
        observed: &Observed,
        action: Action,
    ) -> Planned<BackupAction> {
        let step = failover::plan(task, action);
        plan_restore(&task.layer.restore_observed, observed, step)
    }

    async fn act(
        task: &mut PostgresTask<Self>,
        action: &BackupAction,
        image_version: Option<&str>,
    ) -> Option<String> {
        match action {
            BackupAction::Restore { from } => {
                restore::restore_seed(task, from, image_version).await
            }
            BackupAction::RestoreFailed { pod, reason } => {
                restore::restore_failed(task, pod, reason).await;
                None
            }
            BackupAction::ReplaceToArchive { pod } => {
                // `archive_mode` is read when the server starts: a member started before
                // `spec.backup` archives nothing until it is replaced by one that has it.
                let line = format!(
                    "Replacing {pod}: it started before spec.backup, so it does not archive its WAL"
                );
                task.say(&line);
                if task.delete_pod(pod).await {
                    task.event(EventType::Normal, "MemberNotArchiving", &line)
                        .await;
                }
                None
            }
            BackupAction::StayFailed => {
                restore::stay_failed(task);
                None
            }
            BackupAction::Failover(action) => task.act_failover(action).await,
        }
    }

    async fn after_round(
        task: &mut PostgresTask<Self>,
        own_pods: &[Arc<Pod>],
        observed: &Observed,
        primary: Option<&str>,
        steady: bool,
    ) {
        failover::after_round(task, observed, primary).await;
        if BackupsSpec::read(&task.cluster().spec).backup.is_some() {
            base_backups::round(task, own_pods, observed, steady).await;
        }
    }

    fn status(
        task: &PostgresTask<Self>,
        planned: &Planned<BackupAction>,
        status: &mut PostgresClusterStatus,
        now: &str,
    ) {
        let own = match planned {
            Planned::Own(BackupAction::Failover(action)) => Some(action),
            _ => None,
        };
        failover::status(task, own, status, now);
        task.layer.status.write(status);
        conditions::phase_and_conditions(status, &task.status(), planned, now);
    }

    fn stats_sql() -> String {
        format!("{}{}", failover::figures::STATS_SQL, figures::STATS_SQL)
    }

    fn figures(
        clusters: &[Arc<PostgresCluster>],
        answers: &[Option<Option<String>>],
        now: SystemTime,
    ) -> Vec<Family> {
        let mut families = failover::figures::figures(clusters, answers);
        families.extend(figures::figures(clusters, answers, now));
        families
    }
}
