//! One `PostgresCluster`'s task in stage 04: observe, decide one action, act, write status —
//! on every tick, every spec change, and every change to one of the cluster's pods.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop"). Where stage 03's task said `PLACEHOLDER`, this
//! one acts: it creates the Secret, ConfigMap and Services the pods need, launches the seed,
//! grows and shrinks the cluster one replica at a time, replaces lost members, fails over, and
//! tells the story in log lines, Events and `status`.
//!
//! ```text
//!   pod watch ──▶ Store<Pod> ◀─── observe ──▶ plan::next_action ──▶ act ──▶ status (if changed)
//!       │                            ▲                                 │
//!       └── nudge (pod changed) ─────┤                                 └─▶ Event, story line
//!   cluster watch ── spec change ────┤
//!   timer ───────────────────────────┘
//! ```
//!
//! The pods are read from the pod watch's [`Store`], not listed on every round: the watch keeps
//! it current, and a pod event wakes this task (a "nudge"). One catch, the one client-go's
//! ReplicaSet controller calls *expectations*: right after we create or delete a pod, the store
//! may not show it yet, and a round planned from that stale view would create a second pod.
//! So after each action the task waits until the store shows its effect (or a timeout passes).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::{describe_status, validate_spec};
use crate::api::{
    LastBackup, PostgresCluster, PostgresClusterStatus, RestoreStatus, BACKUP_NOW_ANNOTATION,
};
use crate::client::{Client, ClientError, Patch};
use crate::controller::cluster::{run_task_loop, ClusterReconciler, TaskEnd};
use crate::controller::pods::Pod;
use crate::controller::{ClusterInbox, ClusterWorker};
use crate::events::{rfc3339, EventRecorder, EventType};
use crate::exec::exec;
use crate::story::Reporter;
use crate::watch::Store;

use super::backup::{self, BackupReport, PodBackups, RestoreSource};
use super::conditions::{
    next_status, PHASE_FAILED, PHASE_RECOVERING, PHASE_RUNNING, RESTORE_FAILED, RESTORE_RESTORED,
    RESTORE_RESTORING,
};
use super::manifests::{self, Credentials, Role, POSTGRES_CONTAINER, ROLE_LABEL};
use super::plan::{
    most_advanced, next_action, next_backup, version_change, Action, BackupObserved, BackupPod,
    BackupSource, BackupStep, Delays, DeleteReason, Member, Observed, Phase, Position,
    VersionChange,
};

/// Tuning for the stage-04 tasks. `Default` is what a real operator should use.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Time between two rounds when nothing happens (pod events wake the task sooner).
    pub reconcile_interval: Duration,
    pub delays: Delays,
    /// How long to wait for the pod watch to show an action's effect before planning anyway.
    pub expectation_timeout: Duration,
    /// Stage 05: act on `spec.backup` and `spec.bootstrap` (stage 04 ignores them).
    pub backups: bool,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            reconcile_interval: Duration::from_secs(8),
            delays: Delays::default(),
            expectation_timeout: Duration::from_secs(30),
            backups: false,
        }
    }
}

/// Stage 04's [`ClusterWorker`]: what every cluster task shares.
#[derive(Clone)]
pub struct PostgresWorker {
    client: Client,
    pods: Store<Pod>,
    reporter: Reporter,
    events: EventRecorder,
    options: PostgresOptions,
}

impl PostgresWorker {
    pub fn new(
        client: Client,
        pods: Store<Pod>,
        reporter: Reporter,
        options: PostgresOptions,
    ) -> PostgresWorker {
        PostgresWorker {
            events: EventRecorder::new(client.clone()),
            client,
            pods,
            reporter,
            options,
        }
    }
}

impl ClusterWorker for PostgresWorker {
    fn run_cluster(
        &self,
        cluster: PostgresCluster,
        inbox: ClusterInbox,
        stop: CancellationToken,
    ) -> impl Future<Output = TaskEnd> + Send + 'static {
        run(self.clone(), cluster, inbox, stop)
    }
}

/// Why the cluster's Secret, ConfigMap or Services could not be made.
#[derive(Debug, thiserror::Error)]
enum OwnedError {
    #[error(transparent)]
    Api(#[from] ClientError),
    #[error("making the cluster's passwords: {0}")]
    Passwords(#[from] manifests::CredentialsError),
    /// Stage 05: a cluster bootstrapped from another's backups takes that cluster's passwords.
    #[error("{path}: key {key} is missing or not base64 text; the source cluster's Secret is needed to log in to its restored database")]
    SourceSecret { path: String, key: String },
}

/// What the task waits to see in the pod store after acting.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// A pod we created.
    Appears(String),
    /// A pod we deleted: terminating or gone.
    Leaves(String),
    /// A pod we relabelled.
    Labelled(String, Role),
}

struct Task {
    worker: PostgresWorker,
    cluster: PostgresCluster,
    key: String,
    /// When this task first saw each pod Running but not Ready.
    unready_since: HashMap<String, Instant>,
    expecting: Option<(Expect, Instant)>,
    /// The last "Running: [...], pending: [...]" line, said again only when it changes.
    last_members_line: String,
    /// When the Secret, ConfigMap and Services were last checked.
    owned_checked: Option<Instant>,
    /// Stage 05: when the last backup pod failed (the next is tried after a pause).
    backup_failed_at: Option<Instant>,
    /// Stage 05: what this round changed in `status.lastBackup`, `backupRequested`, `restore`;
    /// folded into the status written at the end of the round.
    stage05: Stage05Status,
}

/// Stage 05's part of the status, as this round leaves it.
#[derive(Clone, Debug, Default)]
struct Stage05Status {
    last_backup: Option<LastBackup>,
    backup_requested: Option<String>,
    restore: Option<RestoreStatus>,
}

/// The task body: set up, then loop until the cluster is deleted or the operator stops.
async fn run(
    worker: PostgresWorker,
    cluster: PostgresCluster,
    inbox: ClusterInbox,
    stop: CancellationToken,
) -> TaskEnd {
    let ClusterInbox { mut wanted, nudged } = inbox;
    let interval = worker.options.reconcile_interval;
    let mut task = Task {
        key: cluster.key(),
        cluster,
        worker,
        unready_since: HashMap::new(),
        expecting: None,
        last_members_line: String::new(),
        owned_checked: None,
        backup_failed_at: None,
        stage05: Stage05Status::default(),
    };
    task.introduce();
    // Unlike stage 03, the first round is now: there is work to do.
    task.reconcile().await;
    run_task_loop(&mut task, &mut wanted, &nudged, interval, &stop).await
}

/// Stage 04's reconciler for the loop every step shares (`controller::cluster::run_task_loop`).
impl ClusterReconciler for Task {
    fn say(&self, line: &str) {
        Task::say(self, line);
    }

    /// A changed spec is acted on at once.
    fn take(&mut self, newer: PostgresCluster) -> bool {
        Task::take(self, newer);
        true
    }

    async fn reconcile(&mut self) {
        Task::reconcile(self).await;
    }

    /// Re-check the owned objects on the timer only: a burst of pod events must not turn into
    /// a burst of GETs.
    async fn tick(&mut self) {
        self.owned_checked = None;
        Task::reconcile(self).await;
    }

    async fn deleted(&mut self) {
        Task::say(self, "cluster is deleted by the user; the garbage collector deletes its pods, Services, Secret and ConfigMap (they carry its ownerReference)");
    }
}

impl Task {
    fn say(&self, line: impl Into<String>) {
        self.worker.reporter.report(&self.key, line);
    }

    fn namespace(&self) -> &str {
        &self.cluster.metadata.namespace
    }

    fn status(&self) -> PostgresClusterStatus {
        self.cluster.status.clone().unwrap_or_default()
    }

    /// The workshop's first line about a cluster: created, or adopted from an earlier run.
    fn introduce(&self) {
        let status = self.cluster.status.as_ref();
        let verb = match status.and_then(|s| s.phase.as_deref()) {
            // `status` is written by an operator only: a phase means an earlier run of this
            // operator got the cluster going. Take it over; never seed it a second time.
            Some(_) => "adopting running cluster",
            None => "creating cluster",
        };
        self.say(format!(
            "{verb} with Spec {}, Status {}",
            self.cluster.spec,
            describe_status(status)
        ));
    }

    /// A newer object from the watch: our own status writes come back this way too, so only a
    /// changed spec is news.
    fn take(&mut self, newer: PostgresCluster) {
        if newer.spec != self.cluster.spec {
            match validate_spec(&newer.spec) {
                Ok(()) => self.say(format!(
                    "spec update: from {} to {}",
                    self.cluster.spec, newer.spec
                )),
                Err(error) => {
                    self.say(format!(
                        "ignoring spec update to {}: {error}; keeping {}",
                        newer.spec, self.cluster.spec
                    ));
                    // Keep the old spec, take the rest (metadata, status).
                    let spec = self.cluster.spec.clone();
                    self.cluster = newer;
                    self.cluster.spec = spec;
                    return;
                }
            }
        }
        self.cluster = newer;
    }

    /// One round. Never fails: what goes wrong is said, and the next round tries again.
    async fn reconcile(&mut self) {
        if let Err(error) = validate_spec(&self.cluster.spec) {
            tracing::debug!(%error, "spec invalid; not acting");
            return;
        }
        if self.owned_checked.is_none() {
            match self.ensure_owned().await {
                Ok(()) => self.owned_checked = Some(Instant::now()),
                Err(error) => {
                    self.say(format!(
                        "could not create the cluster's objects: {error}; trying again next round"
                    ));
                    return;
                }
            }
        }
        // One snapshot of the store for the whole round: the watch keeps writing to it, and an
        // expectation checked against a later read than the plan's could pass while the plan
        // still misses the pod (and creates a second one).
        let all_pods = self.snapshot();
        let waiting_for_watch = self.still_expecting(&all_pods);
        let (backup_pods, pods): (Vec<Pod>, Vec<Pod>) =
            all_pods.into_iter().partition(is_backup_pod);
        let mut members = self.observe(&pods);
        let status = self.status();
        self.stage05 = Stage05Status {
            last_backup: status.last_backup.clone(),
            backup_requested: status.backup_requested.clone(),
            restore: status.restore.clone(),
        };
        if self.backups_enabled() {
            self.follow_restore(&mut members).await;
        }
        let restore = self.stage05.restore.clone();
        let own_claim = backup::backup_claim_name(&self.cluster.metadata.name);
        let has_run = match status.phase.as_deref() {
            Some(PHASE_RUNNING) | Some(PHASE_FAILED) => true,
            // Recovering from a disaster (its own claim), not bootstrapping from another's.
            Some(PHASE_RECOVERING) => restore.as_ref().is_some_and(|r| r.source == own_claim),
            _ => false,
        };
        let observed = Observed {
            members,
            recorded_primary: status.primary.clone(),
            has_run,
            size: usize::try_from(self.cluster.spec.size).unwrap_or(0),
            wanted_version: self.cluster.spec.version.clone(),
            restore_from: self.restore_source(has_run).map(|source| source.claim),
            restoring: restore
                .as_ref()
                .is_some_and(|r| r.state == RESTORE_RESTORING),
            restore_failed: restore.as_ref().is_some_and(|r| r.state == RESTORE_FAILED),
        };
        self.say_members(&observed);

        let primary_now = observed
            .members
            .iter()
            .find(|m| m.role == Some(Role::Primary) && m.phase != Phase::Terminating)
            .map(|m| m.name.clone());
        let running_version = primary_now
            .as_ref()
            .and_then(|p| observed.members.iter().find(|m| &m.name == p))
            .map(|m| m.version.clone())
            .or(status.current_version.clone());
        let version = version_change(
            running_version.as_deref(),
            &self.cluster.spec.version,
            observed.size,
        );

        let action = if self.cluster.spec.paused {
            Action::Wait("the cluster is paused (spec.paused)".into())
        } else if let Some(waiting) = waiting_for_watch {
            Action::Wait(waiting)
        } else {
            next_action(&observed, &self.worker.options.delays)
        };
        // New pods run the spec's version, unless a change to it is refused: then the version the
        // cluster runs, or a replica of another major would be cloned from this primary's data.
        let image_version = match version {
            VersionChange::None | VersionChange::Minor => None,
            _ => running_version.clone(),
        };
        let primary_after = self
            .act(&action, &observed, image_version.as_deref())
            .await
            .or(primary_now);
        if self.backups_enabled() && !self.cluster.spec.paused {
            let members_steady = action == Action::Steady;
            self.backup_round(&backup_pods, &observed, members_steady)
                .await;
        }

        // Stage 05's fields as this round left them, carried into the status by next_status.
        let mut base = self.cluster.clone();
        let mut previous = self.status();
        previous.last_backup = self.stage05.last_backup.clone();
        previous.backup_requested = self.stage05.backup_requested.clone();
        previous.restore = self.stage05.restore.clone();
        base.status = Some(previous);
        let next = next_status(
            &base,
            &observed,
            primary_after.as_deref(),
            &action,
            &version,
            &rfc3339(std::time::SystemTime::now()),
        );
        self.write_status(next).await;
    }

    /// The cluster's pods in the store now: in its namespace and owned by its uid.
    fn snapshot(&self) -> Vec<Pod> {
        let namespace = &self.cluster.metadata.namespace;
        let uid = &self.cluster.metadata.uid;
        self.worker
            .pods
            .list(|pod: &Pod| &pod.metadata.namespace == namespace && pod.is_owned_by(uid))
    }

    /// The cluster's pods, reduced to what the plan reads.
    fn observe(&mut self, pods: &[Pod]) -> Vec<Member> {
        let now = Instant::now();
        self.unready_since
            .retain(|name, _| pods.iter().any(|p| &p.metadata.name == name));
        pods.iter()
            .map(|pod| {
                let phase = if pod.is_terminating() {
                    Phase::Terminating
                } else {
                    match pod.phase() {
                        "Running" => Phase::Running,
                        "Succeeded" | "Failed" => Phase::Done,
                        // Unknown: the node stopped reporting. It may still run; treat it as a
                        // running pod that is not ready, which the delays then judge.
                        "Unknown" => Phase::Running,
                        _ => Phase::Pending,
                    }
                };
                let ready = phase == Phase::Running && pod.is_ready();
                let unready_for = if phase == Phase::Running && !ready {
                    let since = *self
                        .unready_since
                        .entry(pod.metadata.name.clone())
                        .or_insert(now);
                    now - since
                } else {
                    self.unready_since.remove(&pod.metadata.name);
                    Duration::ZERO
                };
                Member {
                    name: pod.metadata.name.clone(),
                    role: match pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) {
                        Some("primary") => Some(Role::Primary),
                        Some("replica") => Some(Role::Replica),
                        _ => None,
                    },
                    phase,
                    ready,
                    unready_for,
                    version: image_tag(pod),
                    created: pod.metadata.creation_timestamp.clone().unwrap_or_default(),
                    failure: None,
                }
            })
            .collect()
    }

    /// `Running: [db-x (primary), db-y], pending: [db-z]`, when it changed since last said.
    fn say_members(&mut self, observed: &Observed) {
        let mut running = Vec::new();
        let mut pending = Vec::new();
        let mut members: Vec<&Member> = observed.members.iter().collect();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        for member in members {
            let mut name = member.name.clone();
            if member.role == Some(Role::Primary) {
                name.push_str(" (primary)");
            }
            match (member.phase, member.ready) {
                (Phase::Running, true) => running.push(name),
                (Phase::Terminating, _) => pending.push(format!("{name} terminating")),
                (Phase::Done, _) => pending.push(format!("{name} failed")),
                _ => pending.push(name),
            }
        }
        let line = format!(
            "Running: [{}], pending: [{}]",
            running.join(", "),
            pending.join(", ")
        );
        if line != self.last_members_line {
            self.say(line.clone());
            self.last_members_line = line;
        }
    }

    /// Whether the store shows the last action's effect yet; `Some(why)` while it does not.
    fn still_expecting(&mut self, pods: &[Pod]) -> Option<String> {
        let (expect, until) = self.expecting.clone()?;
        let find = |name: &str| pods.iter().find(|pod| pod.metadata.name == name);
        let seen = match &expect {
            Expect::Appears(name) => find(name).is_some(),
            Expect::Leaves(name) => find(name).is_none_or(|pod| pod.is_terminating()),
            Expect::Labelled(name, role) => find(name).is_none_or(|pod| {
                pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(role.label_value())
            }),
        };
        if seen || Instant::now() >= until {
            if !seen {
                tracing::warn!(
                    ?expect,
                    "the pod watch never showed the last action; planning anyway"
                );
            }
            self.expecting = None;
            return None;
        }
        Some(format!("waiting for the pod watch to show {expect:?}"))
    }

    fn expect(&mut self, expect: Expect) {
        let until = Instant::now() + self.worker.options.expectation_timeout;
        self.expecting = Some((expect, until));
    }

    /// Carry out one action. Returns the pod that is primary after it, if the action made one.
    async fn act(
        &mut self,
        action: &Action,
        observed: &Observed,
        image_version: Option<&str>,
    ) -> Option<String> {
        match action {
            Action::Steady | Action::Wait(_) => None,
            Action::CreateSeed => {
                self.say("Launching seed Postgres node");
                let name = self.create_pod(Role::Primary, image_version).await?;
                self.say(format!("Launching seed Postgres node {name}"));
                self.event(
                    EventType::Normal,
                    "SeedCreated",
                    &format!("created the seed primary {name}"),
                )
                .await;
                Some(name)
            }
            Action::CreateReplica => {
                let count = observed
                    .members
                    .iter()
                    .filter(|m| m.phase != Phase::Terminating)
                    .count();
                let name = self.create_pod(Role::Replica, image_version).await?;
                self.say(format!(
                    "Adding replica {name} ({} of {})",
                    count + 1,
                    observed.size
                ));
                self.event(
                    EventType::Normal,
                    "ReplicaCreated",
                    &format!("created replica {name}, cloning the primary"),
                )
                .await;
                None
            }
            Action::Delete { pod, reason } => {
                let member = observed.members.iter().find(|m| &m.name == pod);
                let (line, event_type, event_reason) = delete_story(pod, *reason, member, observed);
                self.say(line.clone());
                if self.delete_pod(pod).await {
                    self.event(event_type, event_reason, &line).await;
                }
                None
            }
            Action::Failover { lost, candidates } => {
                self.fail_over(lost.as_deref(), candidates).await
            }
            Action::Disaster => {
                if self.status().phase.as_deref() != Some(PHASE_FAILED) {
                    self.say(
                        "All Postgres pods are dead. Trying to recover from a previous backup",
                    );
                    let failed_restore = self
                        .stage05
                        .restore
                        .as_ref()
                        .filter(|r| r.state == RESTORE_FAILED);
                    if let Some(failed) = failed_restore {
                        self.say(format!("The restore from {} failed ({}): the cluster is Failed. The backups are untouched; fix or remove the file named, then delete and re-create the cluster", failed.source, failed.message));
                    } else {
                        self.say("No backup to recover from (spec.backup, stage 05): the cluster is Failed. Its data is gone; delete and re-create it to start empty");
                        self.event(EventType::Warning, "AllMembersLost", "every member of the running cluster is gone and there is no backup; phase Failed").await;
                    }
                }
                None
            }
            Action::Restore { from } => self.restore_seed(from, image_version).await,
            Action::RestoreFailed { pod, reason } => {
                let source = self
                    .stage05
                    .restore
                    .as_ref()
                    .map_or(from_display(), |r| r.source.clone());
                self.say(format!(
                    "Restore failed: {reason}; deleting {pod}. The cluster is Failed; the backups in {source} are untouched"
                ));
                self.delete_pod(pod).await;
                self.stage05.restore = Some(RestoreStatus {
                    source,
                    pod: pod.clone(),
                    state: RESTORE_FAILED.into(),
                    message: reason.clone(),
                });
                self.event(
                    EventType::Warning,
                    "RestoreFailed",
                    &format!("restoring {pod} failed: {reason}"),
                )
                .await;
                None
            }
        }
    }

    // ---------------------------------------------------------------------------------------
    // Stage 05: backups and restores
    // ---------------------------------------------------------------------------------------

    /// Stage 05 acts for this cluster: the operator runs stage 05 and the spec asks for backups
    /// or a bootstrap from them.
    fn backups_enabled(&self) -> bool {
        self.worker.options.backups
            && (self.cluster.spec.backup.is_some() || self.bootstrap_source().is_some())
    }

    /// `spec.bootstrap.fromBackup`, as a restore source.
    fn bootstrap_source(&self) -> Option<RestoreSource> {
        let from = self.cluster.spec.bootstrap.as_ref()?.from_backup.as_ref()?;
        Some(RestoreSource {
            claim: backup::backup_claim_name(&from.cluster),
            own: false,
            target_time: from.target_time.clone(),
        })
    }

    /// What a seed would restore from now: after the cluster ran, its own claim if a base
    /// backup completed; before, the bootstrap source. Restoring a cluster that ran from the
    /// bootstrap source would silently drop every write made since.
    fn restore_source(&self, has_run: bool) -> Option<RestoreSource> {
        if !self.worker.options.backups {
            return None;
        }
        if has_run {
            let backed_up =
                self.cluster.spec.backup.is_some() && self.stage05.last_backup.is_some();
            return backed_up.then(|| RestoreSource {
                claim: backup::backup_claim_name(&self.cluster.metadata.name),
                own: true,
                target_time: None,
            });
        }
        self.bootstrap_source()
    }

    /// The member pods' stage-05 parts: archiving when `spec.backup` is set.
    fn pod_backups(&self, restore: Option<RestoreSource>) -> PodBackups {
        PodBackups {
            archive: self.worker.options.backups && self.cluster.spec.backup.is_some(),
            restore,
        }
    }

    /// Create the seed that restores from `from`, and record the restore as under way.
    async fn restore_seed(&mut self, from: &str, version: Option<&str>) -> Option<String> {
        let has_run = from == backup::backup_claim_name(&self.cluster.metadata.name);
        if has_run && !self.still_wanted().await {
            return None;
        }
        let source = self.restore_source(has_run)?;
        if has_run {
            self.say("All Postgres pods are dead. Trying to recover from a previous backup");
        }
        let newest = self
            .stage05
            .last_backup
            .as_ref()
            .filter(|_| has_run)
            .map_or("the newest base backup".to_string(), |b| {
                format!("base backup {} (LSN {})", b.name, b.lsn)
            });
        self.say(format!(
            "Launching seed Postgres node restoring {newest} from {from}{}",
            source
                .target_time
                .as_ref()
                .map_or(String::new(), |t| format!(", replaying WAL up to {t}"))
        ));
        let name = self
            .create_pod_with(Role::Primary, version, self.pod_backups(Some(source)))
            .await?;
        self.say(format!(
            "Launching seed Postgres node {name}: restoring, then replaying the archived WAL"
        ));
        self.event(
            EventType::Normal,
            "Restoring",
            &format!("created the seed {name}, restoring {newest} from {from}"),
        )
        .await;
        self.stage05.restore = Some(RestoreStatus {
            source: from.to_string(),
            pod: name.clone(),
            state: RESTORE_RESTORING.into(),
            message: String::new(),
        });
        Some(name)
    }

    /// While a seed restores: has it failed (its `restore` init container, or its server during
    /// recovery, exited with an error)? Has it been promoted? The first marks the member for the
    /// plan; the second records the restore as done, with the WAL position it reached.
    async fn follow_restore(&mut self, members: &mut [Member]) {
        let Some(restore) = self
            .stage05
            .restore
            .clone()
            .filter(|r| r.state == RESTORE_RESTORING)
        else {
            return;
        };
        let Some(member) = members.iter_mut().find(|m| m.name == restore.pod) else {
            return;
        };
        if member.phase == Phase::Running && member.ready {
            // Ready is not promoted: a server in archive recovery accepts read-only queries
            // once consistent. pg_is_in_recovery() says when it is a primary.
            let Ok(out) = self.psql(&member.name, manifests::IS_IN_RECOVERY_SQL).await else {
                return;
            };
            if manifests::parse_bool(&out) != Ok(false) {
                return;
            }
            let lsn = self
                .psql(&member.name, manifests::CURRENT_WAL_LSN_SQL)
                .await
                .map(|out| out.trim().to_string())
                .unwrap_or_default();
            self.say(format!(
                "Restored: {} replayed the archived WAL up to {lsn} and was promoted; it is the primary",
                member.name
            ));
            self.event(
                EventType::Normal,
                "Restored",
                &format!(
                    "{} restored from {} and promoted at WAL position {lsn}",
                    member.name, restore.source
                ),
            )
            .await;
            self.stage05.restore = Some(RestoreStatus {
                state: RESTORE_RESTORED.into(),
                message: format!("promoted at WAL position {lsn}"),
                ..restore
            });
            return;
        }
        if member.phase == Phase::Terminating {
            return;
        }
        member.failure = self.restore_failure(&member.name).await;
    }

    /// Why the restoring seed `pod` failed, if it did: the `restore` init container exited
    /// non-zero, or the postgres container stopped during recovery. The reason is the
    /// container's termination message: what the script wrote to /dev/termination-log, or
    /// (`terminationMessagePolicy: FallbackToLogsOnError`) the kubelet's copy of its last log
    /// lines, so no `pods/log` request is needed.
    async fn restore_failure(&self, pod: &str) -> Option<String> {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let pod_json = self
            .worker
            .client
            .get::<serde_json::Value>(&path)
            .await
            .ok()?;
        let statuses = [
            ("initContainerStatuses", backup::RESTORE_CONTAINER),
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

    /// One backup step: collect a finished backup pod, or start one when due.
    async fn backup_round(&mut self, pods: &[Pod], observed: &Observed, members_steady: bool) {
        let Some(spec) = self.cluster.spec.backup.clone() else {
            return;
        };
        let requested_value = self
            .cluster
            .metadata
            .annotations
            .get(BACKUP_NOW_ANNOTATION)
            .cloned();
        let requested =
            requested_value.is_some() && requested_value != self.stage05.backup_requested;
        let now = std::time::SystemTime::now();
        let since_last = self
            .stage05
            .last_backup
            .as_ref()
            .and_then(|b| backup::parse_utc(&b.time))
            .map(|time| now.duration_since(time).unwrap_or_default());
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
            since_failure: self.backup_failed_at.map(|at| at.elapsed()),
            replica_ready: observed
                .members
                .iter()
                .any(|m| m.role == Some(Role::Replica) && m.ready),
        };
        match next_backup(&backup_observed, members_steady) {
            BackupStep::Idle | BackupStep::Running(_) => {}
            BackupStep::Collect(pod) => {
                let succeeded = pods
                    .iter()
                    .any(|p| p.metadata.name == pod && p.phase() == "Succeeded");
                self.collect_backup(&pod, succeeded).await;
            }
            BackupStep::Start { from } => {
                let name = &self.cluster.metadata.name;
                let host = match from {
                    BackupSource::Replicas => manifests::replicas_service_name(name),
                    BackupSource::Primary => manifests::primary_service_name(name),
                };
                let why = if requested {
                    "asked for by the backup-now annotation"
                } else if since_last.is_none() {
                    "the first"
                } else {
                    "due"
                };
                let path = format!("/api/v1/namespaces/{}/pods", self.namespace());
                let body = backup::backup_pod(&self.cluster, &host, spec.keep);
                match self.worker.client.create::<_, Pod>(&path, &body).await {
                    Ok(pod) => {
                        self.say(format!(
                            "Backing up: {} takes a base backup ({why}) from {host}",
                            pod.metadata.name
                        ));
                        if requested {
                            self.stage05.backup_requested = requested_value;
                        }
                    }
                    Err(error) => self.say(format!(
                        "could not create a backup pod: {error}; trying again next round"
                    )),
                }
            }
        }
    }

    /// Read a finished backup pod's report, record it (status, Event, a story line), delete it.
    /// The report is the container's termination message: its result line on success, or
    /// (`FallbackToLogsOnError`) the end of its log when it failed without writing one.
    async fn collect_backup(&mut self, pod: &str, succeeded: bool) {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let text = match self.worker.client.get::<serde_json::Value>(&path).await {
            Ok(json) => json["status"]["containerStatuses"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["name"] == backup::BACKUP_CONTAINER))
                .and_then(|c| c["state"]["terminated"]["message"].as_str())
                .unwrap_or_default()
                .to_string(),
            Err(error) => format!("(could not read the pod: {error})"),
        };
        match BackupReport::parse(&text).ok().filter(|_| succeeded) {
            Some(report) => {
                self.backup_failed_at = None;
                let line = format!(
                    "Backup {} complete: {} bytes, starts at WAL position {}",
                    report.name, report.bytes, report.lsn
                );
                self.say(line.clone());
                self.event(EventType::Normal, "BackupCompleted", &line)
                    .await;
                self.stage05.last_backup = Some(LastBackup {
                    name: report.name,
                    time: report.time,
                    lsn: report.lsn,
                    bytes: report.bytes,
                });
            }
            None => {
                self.backup_failed_at = Some(Instant::now());
                let why = last_line(&text).unwrap_or("(no termination message)");
                let line = format!("Backup by {pod} failed: {why}");
                self.say(format!(
                    "{line}; trying again in {}s",
                    super::plan::BACKUP_RETRY_AFTER.as_secs()
                ));
                self.event(EventType::Warning, "BackupFailed", &line).await;
            }
        }
        self.delete_pod(pod).await;
    }

    /// POST one pod; its name comes back from `generateName`.
    async fn create_pod(&mut self, role: Role, version: Option<&str>) -> Option<String> {
        let backups = self.pod_backups(None);
        self.create_pod_with(role, version, backups).await
    }

    async fn create_pod_with(
        &mut self,
        role: Role,
        version: Option<&str>,
        backups: PodBackups,
    ) -> Option<String> {
        let path = format!("/api/v1/namespaces/{}/pods", self.namespace());
        let mut cluster = self.cluster.clone();
        if let Some(version) = version {
            cluster.spec.version = version.to_string();
        }
        let body = backup::member_pod(&cluster, role, &backups);
        match self.worker.client.create::<_, Pod>(&path, &body).await {
            Ok(pod) => {
                self.expect(Expect::Appears(pod.metadata.name.clone()));
                Some(pod.metadata.name)
            }
            Err(error) => {
                self.say(format!(
                    "could not create a {} pod: {error}; trying again next round",
                    role.label_value()
                ));
                None
            }
        }
    }

    async fn delete_pod(&mut self, name: &str) -> bool {
        let path = format!("/api/v1/namespaces/{}/pods/{name}", self.namespace());
        match self.worker.client.delete::<serde_json::Value>(&path).await {
            // 404: gone already, which is what we wanted.
            Ok(_) => {}
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => {
                self.say(format!(
                    "could not delete pod {name}: {error}; trying again next round"
                ));
                return false;
            }
        }
        self.expect(Expect::Leaves(name.to_string()));
        true
    }

    /// Ask each candidate how far it got, promote the most advanced, label it primary.
    async fn fail_over(&mut self, lost: Option<&str>, candidates: &[String]) -> Option<String> {
        self.say(format!(
            "Primary lost: {}; choosing among the ready replicas [{}]",
            lost.unwrap_or("<none recorded>"),
            candidates.join(", ")
        ));
        let mut positions = Vec::new();
        for pod in candidates {
            match self.position(pod).await {
                Ok(position) => positions.push(position),
                Err(error) => self.say(format!("cannot ask {pod} for its WAL position: {error}")),
            }
        }
        let chosen = most_advanced(&positions)?.clone();
        self.say(format!(
            "Promoting {} to primary (WAL received up to {}, replayed up to {})",
            chosen.pod,
            lsn_text(chosen.received),
            lsn_text(chosen.replayed)
        ));
        if chosen.in_recovery {
            match self.psql(&chosen.pod, manifests::PROMOTE_SQL).await {
                Ok(out) if out.trim() == "t" => {}
                Ok(out) => {
                    self.say(format!("promoting {} did not finish within its wait (pg_promote said {out:?}); trying again next round", chosen.pod));
                    return None;
                }
                Err(error) => {
                    self.say(format!(
                        "promoting {} failed: {error}; trying again next round",
                        chosen.pod
                    ));
                    self.event(
                        EventType::Warning,
                        "PromotionFailed",
                        &format!("promoting {} failed: {error}", chosen.pod),
                    )
                    .await;
                    return None;
                }
            }
        }
        // The label is what the `<name>-primary` Service selects: relabelled, the Service sends
        // clients (and the other replicas, which stream from it) to the new primary.
        let path = format!(
            "/api/v1/namespaces/{}/pods/{}",
            self.namespace(),
            chosen.pod
        );
        let patch = Patch::Merge(manifests::role_patch(Role::Primary));
        if let Err(error) = self
            .worker
            .client
            .patch::<serde_json::Value>(&path, &patch)
            .await
        {
            self.say(format!(
                "labelling {} primary failed: {error}; trying again next round",
                chosen.pod
            ));
            return None;
        }
        self.expect(Expect::Labelled(chosen.pod.clone(), Role::Primary));
        self.event(
            EventType::Normal,
            "Promoted",
            &format!(
                "promoted {} to primary in place of {}",
                chosen.pod,
                lost.unwrap_or("the lost primary")
            ),
        )
        .await;
        Some(chosen.pod)
    }

    async fn position(&self, pod: &str) -> Result<Position, String> {
        let out = self
            .psql(
                pod,
                "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()",
            )
            .await?;
        let (in_recovery, lsns) = out
            .trim()
            .split_once('|')
            .ok_or_else(|| format!("unexpected psql output {out:?}"))?;
        let in_recovery = manifests::parse_bool(in_recovery).map_err(|e| e.to_string())?;
        let lsns = manifests::ReplicaLsns::parse(lsns).map_err(|e| e.to_string())?;
        Ok(Position {
            pod: pod.to_string(),
            in_recovery,
            received: lsns.received.unwrap_or(0),
            replayed: lsns.replayed.unwrap_or(0),
        })
    }

    /// Run one SQL statement in `pod`'s postgres container; its stdout.
    async fn psql(&self, pod: &str, sql: &str) -> Result<String, String> {
        psql_in_pod(
            &self.worker.client,
            self.namespace(),
            pod,
            &manifests::psql_argv(sql),
        )
        .await
    }

    /// Create the Secret, ConfigMap and Services the pods need, those that do not exist. The
    /// Secret's passwords are made once: a Secret that exists is never rewritten, or every
    /// running pod's password would stop matching.
    async fn ensure_owned(&self) -> Result<(), OwnedError> {
        let namespace = self.namespace().to_string();
        let name = self.cluster.metadata.name.clone();
        let secret_name = manifests::credentials_secret_name(&name);
        if !self
            .exists(&format!(
                "/api/v1/namespaces/{namespace}/secrets/{secret_name}"
            ))
            .await?
        {
            let credentials = match self
                .bootstrap_source()
                .filter(|_| self.worker.options.backups)
            {
                // A cluster restored from another's backups has that cluster's roles and
                // passwords (they live in the database): its Secret must hold the same ones.
                Some(_) => self.source_credentials().await?,
                None => Credentials::generate()?,
            };
            self.create_owned(
                "secrets",
                &manifests::credentials_secret(&self.cluster, &credentials),
                &secret_name,
            )
            .await?;
        }
        if let Some(spec) = self
            .cluster
            .spec
            .backup
            .as_ref()
            .filter(|_| self.worker.options.backups)
        {
            let claim = backup::backup_claim_name(&name);
            if !self
                .exists(&format!(
                    "/api/v1/namespaces/{namespace}/persistentvolumeclaims/{claim}"
                ))
                .await?
            {
                self.create_owned(
                    "persistentvolumeclaims",
                    &backup::backup_claim(&self.cluster, &spec.storage_size),
                    &claim,
                )
                .await?;
            }
        }
        let config_map = manifests::init_config_map_name(&name);
        if !self
            .exists(&format!(
                "/api/v1/namespaces/{namespace}/configmaps/{config_map}"
            ))
            .await?
        {
            self.create_owned(
                "configmaps",
                &manifests::init_scripts(&self.cluster),
                &config_map,
            )
            .await?;
        }
        for (service, body) in [
            (
                manifests::primary_service_name(&name),
                manifests::primary_service(&self.cluster),
            ),
            (
                manifests::replicas_service_name(&name),
                manifests::replicas_service(&self.cluster),
            ),
        ] {
            if !self
                .exists(&format!(
                    "/api/v1/namespaces/{namespace}/services/{service}"
                ))
                .await?
            {
                self.create_owned("services", &body, &service).await?;
            }
        }
        Ok(())
    }

    /// The source cluster's passwords (`spec.bootstrap.fromBackup.cluster`'s Secret).
    async fn source_credentials(&self) -> Result<Credentials, OwnedError> {
        let source = self
            .cluster
            .spec
            .bootstrap
            .as_ref()
            .and_then(|b| b.from_backup.as_ref())
            .map(|f| f.cluster.clone())
            .unwrap_or_default();
        let path = format!(
            "/api/v1/namespaces/{}/secrets/{}",
            self.namespace(),
            manifests::credentials_secret_name(&source)
        );
        let secret: serde_json::Value = self.worker.client.get(&path).await?;
        let key = |key: &str| -> Result<crate::config::SecretString, OwnedError> {
            let encoded = secret["data"][key].as_str().unwrap_or_default();
            let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, encoded)
                .map_err(|_| OwnedError::SourceSecret {
                    path: path.clone(),
                    key: key.to_string(),
                })?;
            String::from_utf8(bytes)
                .map(crate::config::SecretString::new)
                .map_err(|_| OwnedError::SourceSecret {
                    path: path.clone(),
                    key: key.to_string(),
                })
        };
        Ok(Credentials {
            superuser_password: key(manifests::SUPERUSER_PASSWORD_KEY)?,
            replication_password: key(manifests::REPLICATION_PASSWORD_KEY)?,
        })
    }

    /// Is the cluster still there, the same one, and not being deleted? After `kubectl delete
    /// pgc` the garbage collector may remove the pods before this task hears of the deletion,
    /// which looks exactly like the loss of every member: without this check a restore would
    /// start for a cluster that is going (its seed then outlives it, owned by nothing). A list
    /// by name rather than a GET: the Role grants `list` and `watch` on postgresclusters only.
    /// Unsure (the list failed): not now, the next round asks again.
    async fn still_wanted(&self) -> bool {
        let path = format!(
            "{}?fieldSelector=metadata.name%3D{}",
            crate::api::collection_path(self.namespace()),
            self.cluster.metadata.name
        );
        match self.worker.client.get::<serde_json::Value>(&path).await {
            Ok(list) => list["items"]
                .as_array()
                .and_then(|items| items.first())
                .is_some_and(|cluster| {
                    cluster["metadata"]["uid"] == self.cluster.metadata.uid.as_str()
                        && cluster["metadata"]["deletionTimestamp"].is_null()
                }),
            Err(_) => false,
        }
    }

    async fn exists(&self, path: &str) -> Result<bool, ClientError> {
        match self.worker.client.get::<serde_json::Value>(path).await {
            Ok(_) => Ok(true),
            Err(error) if error.status_code() == Some(404) => Ok(false),
            Err(error) => Err(error),
        }
    }

    async fn create_owned(
        &self,
        plural: &str,
        body: &serde_json::Value,
        name: &str,
    ) -> Result<(), ClientError> {
        let path = format!("/api/v1/namespaces/{}/{plural}", self.namespace());
        match self
            .worker
            .client
            .create::<_, serde_json::Value>(&path, body)
            .await
        {
            Ok(_) => {
                self.say(format!("created {} {name}", kind_of(plural)));
                Ok(())
            }
            // 409: created meanwhile (by an earlier round whose answer we lost): fine.
            Err(error) if error.status_code() == Some(409) => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn event(&self, kind: EventType, reason: &str, message: &str) {
        self.worker
            .events
            .record(&self.cluster, kind, reason, message)
            .await;
    }

    /// Merge-patch `/status` when it changed. Our own write comes back as a watch event; keeping
    /// the answer here means the next round compares with what we wrote.
    async fn write_status(&mut self, next: PostgresClusterStatus) {
        if self.cluster.status.as_ref() == Some(&next) {
            return;
        }
        let path = format!(
            "{}/status",
            crate::api::object_path(self.namespace(), &self.cluster.metadata.name)
        );
        let patch = Patch::Merge(serde_json::json!({ "status": next }));
        match self
            .worker
            .client
            .patch::<PostgresCluster>(&path, &patch)
            .await
        {
            Ok(updated) => self.cluster.status = updated.status,
            // A cluster deleted meanwhile: its Deleted event ends this task shortly.
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => tracing::warn!(%error, "could not write the cluster's status"),
        }
    }
}

/// Run `argv` (a `psql` command line, see [`manifests::psql_argv`]) in `pod`'s postgres
/// container through `pods/exec`, as `kubectl exec` would: its stdout, or psql's stderr when it
/// exits non-zero.
pub async fn psql_in_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    argv: &[String],
) -> Result<String, String> {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let output = exec(
        client,
        namespace,
        pod,
        Some(POSTGRES_CONTAINER),
        &argv,
        None,
    )
    .await
    .map_err(|e| e.to_string())?;
    if output.exit_code != 0 {
        return Err(format!(
            "psql exited with {}: {}",
            output.exit_code,
            output.stderr_text().trim()
        ));
    }
    Ok(output.stdout_text())
}

/// The story line, Event type and reason for deleting `pod`.
fn delete_story(
    pod: &str,
    reason: DeleteReason,
    member: Option<&Member>,
    observed: &Observed,
) -> (String, EventType, &'static str) {
    let unready = member.map_or(0, |m| m.unready_for.as_secs());
    match reason {
        DeleteReason::SecondPrimary => (
            format!("Deleting {pod}: a second pod labelled primary (keeping {})", observed.recorded_primary.as_deref().unwrap_or("the older one")),
            EventType::Warning,
            "SecondPrimary",
        ),
        DeleteReason::FencePrimary => (
            format!("Member lost: {pod} (the primary, unready for {unready}s); deleting it before promoting a replica"),
            EventType::Warning,
            "PrimaryLost",
        ),
        DeleteReason::MemberLost => (
            format!("Member lost: {pod} (unready for {unready}s); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::MemberDead => (
            format!("Member lost: {pod} (its pod failed); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::ScaleDown => (
            format!("Removing replica {pod} (scaling down to {})", observed.size),
            EventType::Normal,
            "ReplicaRemoved",
        ),
        DeleteReason::Upgrade => (
            format!("Upgrading: replacing replica {pod} (runs {}, spec.version is {})", member.map_or("?", |m| m.version.as_str()), observed.wanted_version),
            EventType::Normal,
            "Upgrading",
        ),
        DeleteReason::Switchover => (
            format!("Upgrading: every replica runs {}; switching over from the primary {pod}", observed.wanted_version),
            EventType::Normal,
            "Switchover",
        ),
    }
}

fn kind_of(plural: &str) -> &'static str {
    match plural {
        "secrets" => "Secret",
        "configmaps" => "ConfigMap",
        "persistentvolumeclaims" => "PersistentVolumeClaim",
        _ => "Service",
    }
}

/// Stage 05's backup pods carry the role label `backup`: they are not members.
fn is_backup_pod(pod: &Pod) -> bool {
    pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(backup::BACKUP_ROLE)
}

fn from_display() -> String {
    "the backups".to_string()
}

/// The tag of the pod's postgres container image: `postgres:16.4` → `16.4`.
fn image_tag(pod: &Pod) -> String {
    let image = pod
        .spec
        .containers
        .iter()
        .find(|c| c.name == POSTGRES_CONTAINER)
        .or(pod.spec.containers.first())
        .map_or("", |c| c.image.as_str());
    // A registry with a port (`host:5000/postgres`) has a ':' before the last '/'.
    let name_and_tag = image.rsplit('/').next().unwrap_or(image);
    name_and_tag
        .split_once(':')
        .map_or(String::new(), |(_, tag)| tag.to_string())
}

/// `0/3000148`, as Postgres prints an LSN.
fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// The last non-empty line of a termination message: under `FallbackToLogsOnError` it can be
/// up to 80 log lines, of which the last says what went wrong.
fn last_line(message: &str) -> Option<&str> {
    message
        .lines()
        .map(str::trim)
        .rev()
        .find(|line| !line.is_empty())
}
