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

use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::api::{PostgresCluster, PostgresClusterStatus};
use crate::client::{Client, ClientError, Patch};
use crate::controller::cluster::{describe_status, validate_spec, TaskEnd, Wanted};
use crate::controller::pods::Pod;
use crate::controller::{ClusterInbox, ClusterWorker};
use crate::events::{rfc3339, EventRecorder, EventType};
use crate::exec::exec;
use crate::story::Reporter;
use crate::watch::Store;

use super::conditions::{next_status, PHASE_FAILED, PHASE_RUNNING};
use super::manifests::{self, Credentials, Role, POSTGRES_CONTAINER, ROLE_LABEL};
use super::plan::{
    most_advanced, next_action, version_change, Action, Delays, DeleteReason, Member, Observed,
    Phase, Position, VersionChange,
};

/// Tuning for the stage-04 tasks. `Default` is what a real operator should use.
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// Time between two rounds when nothing happens (pod events wake the task sooner).
    pub reconcile_interval: Duration,
    pub delays: Delays,
    /// How long to wait for the pod watch to show an action's effect before planning anyway.
    pub expectation_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            reconcile_interval: Duration::from_secs(8),
            delays: Delays::default(),
            expectation_timeout: Duration::from_secs(30),
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
}

/// The task body: set up, then loop until the cluster is deleted or the operator stops.
async fn run(
    worker: PostgresWorker,
    cluster: PostgresCluster,
    inbox: ClusterInbox,
    stop: CancellationToken,
) -> TaskEnd {
    let ClusterInbox { mut wanted, nudged } = inbox;
    let interval = worker
        .options
        .reconcile_interval
        .max(Duration::from_millis(1));
    let mut task = Task {
        key: cluster.key(),
        cluster,
        worker,
        unready_since: HashMap::new(),
        expecting: None,
        last_members_line: String::new(),
        owned_checked: None,
    };
    task.introduce();
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // Unlike stage 03, the first round is now: there is work to do.
    task.reconcile().await;
    loop {
        tokio::select! {
            () = stop.cancelled() => {
                task.say("cluster task stopped: the operator is shutting down");
                return TaskEnd::Stopped;
            }
            changed = wanted.changed() => {
                if changed.is_err() {
                    task.say("cluster task stopped: the controller let go of it");
                    return TaskEnd::Stopped;
                }
                let latest = wanted.borrow_and_update().clone();
                match latest {
                    Wanted::Object(newer) => {
                        task.take(*newer);
                        task.reconcile().await;
                    }
                    Wanted::Deleted => {
                        task.say("cluster is deleted by the user; the garbage collector deletes its pods, Services, Secret and ConfigMap (they carry its ownerReference)");
                        return TaskEnd::Deleted;
                    }
                }
            }
            () = nudged.notified() => task.reconcile().await,
            _ = tick.tick() => {
                // Re-check the owned objects on the timer only: a burst of pod events must not
                // turn into a burst of GETs.
                task.owned_checked = None;
                task.reconcile().await;
            }
        }
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
        let pods = self.snapshot();
        let waiting_for_watch = self.still_expecting(&pods);
        let members = self.observe(&pods);
        let status = self.status();
        let observed = Observed {
            members,
            recorded_primary: status.primary.clone(),
            has_run: matches!(
                status.phase.as_deref(),
                Some(PHASE_RUNNING) | Some(PHASE_FAILED)
            ),
            size: usize::try_from(self.cluster.spec.size).unwrap_or(0),
            wanted_version: self.cluster.spec.version.clone(),
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

        let next = next_status(
            &self.cluster,
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
                    self.say("No backup to recover from (stage 05 adds backups): the cluster is Failed. Its data is gone; delete and re-create it to start empty");
                    self.event(EventType::Warning, "AllMembersLost", "every member of the running cluster is gone and there is no backup; phase Failed").await;
                }
                None
            }
        }
    }

    /// POST one pod; its name comes back from `generateName`.
    async fn create_pod(&mut self, role: Role, version: Option<&str>) -> Option<String> {
        let path = format!("/api/v1/namespaces/{}/pods", self.namespace());
        let mut cluster = self.cluster.clone();
        if let Some(version) = version {
            cluster.spec.version = version.to_string();
        }
        let body = manifests::pod(&cluster, role);
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
            let credentials = Credentials::generate()?;
            self.create_owned(
                "secrets",
                &manifests::credentials_secret(&self.cluster, &credentials),
                &secret_name,
            )
            .await?;
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
        _ => "Service",
    }
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
