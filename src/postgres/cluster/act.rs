//! Acting on the plan's one action: pods created and deleted, a failover (ask each ready replica
//! how far it got through `pods/exec`, promote the most advanced, relabel it), each with its
//! story line and Event. WORKSHOP.md, step 04 ("The reconcile loop").

use super::*;

impl<L: ClusterLayer> PostgresTask<L> {
    /// Carry out one action. Returns the pod that is primary after it, if the action made one.
    pub(super) async fn act(
        &mut self,
        action: &Action,
        observed: &Observed,
        image_version: Option<&str>,
    ) -> Option<String> {
        match action {
            Action::Steady | Action::Wait(_) => None,
            Action::CreateSeed => {
                self.say("Launching seed Postgres node");
                let name = self.create_member(Role::Primary, image_version).await?;
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
                let name = self.create_member(Role::Replica, image_version).await?;
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
                // A primary fenced for being unready may be hung (every process stopped): it
                // would never act on SIGINT, and the failover waits for it to stop (up to the stop
                // timeout), so a 60 s grace period would be that much more without writes. A short one: the
                // kubelet's SIGKILL then ends even a stopped process. What it had not streamed
                // is lost either way; a healthy but slow primary is not fenced (unready first).
                let grace = (*reason == DeleteReason::FencePrimary).then_some(FENCE_GRACE_SECONDS);
                if self.delete_pod_within(pod, grace).await {
                    self.event(event_type, event_reason, &line).await;
                }
                None
            }
            Action::FailoverRefused(why) => {
                // Said once: the round repeats it every tick until enough standbys answer.
                let said = self
                    .status()
                    .condition("Progressing")
                    .is_some_and(|c| c.reason == "FailoverRefused" && &c.message == why);
                if !said {
                    self.say(format!("Not failing over: {why}"));
                    self.event(EventType::Warning, "FailoverRefused", why).await;
                }
                None
            }
            Action::Failover {
                lost,
                candidates,
                fence,
            } => {
                if let Some(pod) = fence {
                    if !self.fence_first(pod, observed).await {
                        return None;
                    }
                }
                if !self.fence_the_leaving(observed).await {
                    return None;
                }
                // The annotation, acted on or not: the failover a switchover began prefers it.
                let annotations = &self.cluster.metadata.annotations;
                let prefer = annotations.get(SWITCHOVER_ANNOTATION).cloned();
                let promoted = self
                    .fail_over(observed, lost.as_deref(), candidates, prefer.as_deref())
                    .await?;
                // An old primary that stopped closed its replication connections, and the
                // standbys reconnect by themselves; one fenced without a stop did not.
                if fence.is_some() || leaving_unstopped(observed).next().is_some() {
                    self.restart_wal_receivers(observed, &promoted).await;
                }
                Some(promoted)
            }
            Action::Disaster => {
                if self.status().phase.as_deref() != Some(PHASE_FAILED) {
                    self.say(
                        "All Postgres pods are dead. Trying to recover from a previous backup",
                    );
                    self.say("No backup to recover from (spec.backup, stage 05): the cluster is Failed. Its data is gone; delete and re-create it to start empty");
                    self.event(EventType::Warning, "AllMembersLost", "every member of the running cluster is gone and there is no backup; phase Failed").await;
                }
                None
            }
        }
    }

    /// A member pod as this task creates it: `manifests::pod` for the spec (with `version` in
    /// place of spec.version when given), dressed by the layer.
    pub fn member_pod(&self, role: Role, version: Option<&str>) -> serde_json::Value {
        let cluster = self.at_version(version);
        let mut pod = manifests::pod(&cluster, role);
        L::dress_pod(self, &cluster, role, &mut pod);
        pod
    }

    /// The cluster, with `version` in place of spec.version when given.
    pub fn at_version(&self, version: Option<&str>) -> PostgresCluster {
        let mut cluster = self.cluster.clone();
        if let Some(version) = version {
            cluster.spec.version = version.to_string();
        }
        cluster
    }

    /// POST one member pod; its name comes back from `generateName`.
    async fn create_member(&mut self, role: Role, version: Option<&str>) -> Option<String> {
        let body = self.member_pod(role, version);
        self.create_pod(role, &body).await
    }

    /// POST `body`, a pod for `role`; its name. The task then waits for the pod watch to show
    /// it before planning again. A failure is said, and the next round tries again.
    pub async fn create_pod(&mut self, role: Role, body: &serde_json::Value) -> Option<String> {
        let path = format!("/api/v1/namespaces/{}/pods", self.namespace());
        match self.worker.client.create::<_, Pod>(&path, body).await {
            Ok(pod) => {
                self.expect(Expect::Appears(pod.metadata.name.clone()));
                Some(pod.metadata.name)
            }
            Err(error) => {
                self.say(format!(
                    "could not create a {} pod: {error}; trying again next round",
                    role.label_value()
                ));
                self.fail_round();
                None
            }
        }
    }

    /// DELETE a pod (gone already is fine); the task then waits for the watch to show it leave.
    pub async fn delete_pod(&mut self, name: &str) -> bool {
        self.delete_pod_within(name, None).await
    }

    /// DELETE a pod with `grace` seconds for its processes to stop in place of its own
    /// `terminationGracePeriodSeconds` (`kubectl delete --grace-period`).
    async fn delete_pod_within(&mut self, name: &str, grace: Option<u32>) -> bool {
        let mut path = format!("/api/v1/namespaces/{}/pods/{name}", self.namespace());
        if let Some(seconds) = grace {
            path.push_str(&format!("?gracePeriodSeconds={seconds}"));
        }
        match self.worker.client.delete::<serde_json::Value>(&path).await {
            // 404: gone already, which is what we wanted.
            Ok(_) => {}
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => {
                self.say(format!(
                    "could not delete pod {name}: {error}; trying again next round"
                ));
                self.fail_round();
                return false;
            }
        }
        self.expect(Expect::Leaves(name.to_string()));
        true
    }

    /// An old primary still terminating when the failover goes on has not stopped within
    /// `stop_timeout`: its node is lost, and the pod stays Terminating until the node is
    /// confirmed gone. Relabelled `fenced`, no Service selects it, whatever its readiness.
    /// False: the relabel failed, and the failover waits for the next round.
    async fn fence_the_leaving(&mut self, observed: &Observed) -> bool {
        for member in leaving_unstopped(observed) {
            self.say(format!(
                "Fencing {}: deleted {}s ago and still not stopped (its node may be lost); relabelling it {} so that no Service sends it clients, then promoting a replica",
                member.name,
                member.terminating_for.as_secs(),
                Role::Fenced.label_value()
            ));
            match self.relabel(&member.name, Role::Fenced).await {
                // Gone meanwhile: fenced by the best means there is.
                Ok(_) => {}
                Err(error) if error.status_code() == Some(404) => {}
                Err(error) => {
                    self.fail_round();
                    self.say(format!(
                        "fencing {} failed: {error}; not promoting until it is fenced",
                        member.name
                    ));
                    return false;
                }
            }
            self.event(
                EventType::Warning,
                "Fenced",
                &format!(
                    "{} did not stop when deleted; relabelled fenced",
                    member.name
                ),
            )
            .await;
        }
        true
    }

    /// Fence the lost primary `pod` before a promotion that does not wait for it to stop
    /// (synchronous `required`, see `plan::fencing_first_is_safe`): relabelled `fenced`, so
    /// that no Service selects it, then deleted with a short grace period, which the kubelet of
    /// a hung pod ends with SIGKILL (a lost node's never confirms it). False: the relabel
    /// failed, and nothing is promoted this round.
    async fn fence_first(&mut self, pod: &str, observed: &Observed) -> bool {
        let why = observed
            .members
            .iter()
            .find(|m| m.name == pod)
            .map_or(String::from("lost"), lost_because);
        let line = format!(
            "Member lost: {pod} (the primary, {why}); fencing it (relabelled {}, so that no Service selects it; its deletion asked) and promoting a standby without waiting for it to stop: with synchronous replication required, no standby follows it, so it cannot acknowledge a commit",
            Role::Fenced.label_value()
        );
        self.say(line.clone());
        match self.relabel(pod, Role::Fenced).await {
            Ok(()) => {}
            // Gone meanwhile: fenced by the best means there is.
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => {
                self.fail_round();
                self.say(format!(
                    "fencing {pod} failed: {error}; not promoting until it is fenced"
                ));
                return false;
            }
        }
        // A failed DELETE is said; rule 2 deletes a pod left fenced at a later round.
        if self.delete_pod_within(pod, Some(FENCE_GRACE_SECONDS)).await {
            self.event(EventType::Warning, "PrimaryLost", &line).await;
        }
        true
    }

    /// After a failover away from a primary that did not stop: restart the WAL receiver of every
    /// other running replica, so that each connects to `promoted` through the Service. One may
    /// hold a connection to the old primary (frozen, or cut off) that will never answer; left
    /// so, it streams nothing until the not-streaming delay replaces it with a fresh clone.
    /// A failure is said; that delay remains the remedy.
    async fn restart_wal_receivers(&mut self, observed: &Observed, promoted: &str) {
        let others: Vec<&str> = observed
            .members
            .iter()
            .filter(|m| m.role == Some(Role::Replica) && m.phase == Phase::Running)
            .map(|m| m.name.as_str())
            .filter(|name| *name != promoted)
            .collect();
        if others.is_empty() {
            return;
        }
        self.say(format!(
            "Restarting the WAL receivers of [{}]: each may still wait on the old primary, which will not answer; a new one finds {promoted} through the Service",
            others.join(", ")
        ));
        let argv = manifests::restart_wal_receiver_argv();
        let (client, namespace) = (&self.worker.client, self.namespace());
        let asked = others
            .iter()
            .map(|pod| psql_in_pod(client, namespace, pod, &argv));
        let answers = futures_util::future::join_all(asked).await;
        for (pod, answer) in others.iter().zip(answers) {
            if let Err(error) = answer {
                self.say(format!(
                    "could not restart the WAL receiver of {pod}: {error}"
                ));
            }
        }
    }

    /// Set `pod`'s role label (a merge patch leaves its other labels alone).
    async fn relabel(&self, pod: &str, role: Role) -> Result<(), ClientError> {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let patch = Patch::Merge(manifests::role_patch(role));
        self.worker
            .client
            .patch::<serde_json::Value>(&path, &patch)
            .await
            .map(|_| ())
    }

    /// Ask each candidate how far it got, promote the most advanced, label it primary.
    pub(super) async fn fail_over(
        &mut self,
        observed: &Observed,
        lost: Option<&str>,
        candidates: &[String],
        prefer: Option<&str>,
    ) -> Option<String> {
        self.say(format!(
            "Primary lost: {}; choosing among the ready replicas [{}]",
            lost.unwrap_or("<none recorded>"),
            candidates.join(", ")
        ));
        // Asked side by side: each answer is one `pods/exec` round trip, and no write is taken
        // until the promotion. The answers come back in the candidates' order.
        let asked = candidates.iter().map(|pod| self.position(pod));
        let answers = futures_util::future::join_all(asked).await;
        let mut positions = Vec::new();
        for (pod, answer) in candidates.iter().zip(answers) {
            match answer {
                Ok(position) => positions.push(position),
                Err(error) => self.say(format!("cannot ask {pod} for its WAL position: {error}")),
            }
        }
        let chosen = choose(&positions, prefer)?.clone();
        if let Some(wanted) = prefer.filter(|wanted| *wanted != chosen.pod) {
            if candidates.iter().any(|c| c == wanted) {
                self.say(format!("Switchover: {wanted} lacks WAL that {} has; promoting {} instead, so that nothing is lost", chosen.pod, chosen.pod));
            }
        }
        self.say(format!(
            "Promoting {} to primary (WAL received up to {}, replayed up to {})",
            chosen.pod,
            lsn_text(chosen.received),
            lsn_text(chosen.replayed)
        ));
        if chosen.in_recovery {
            self.prepare_synchronous(observed, &chosen.pod).await;
            match self.psql(&chosen.pod, manifests::PROMOTE_SQL).await {
                Ok(out) if out.trim() == "t" => {}
                Ok(out) => {
                    self.say(format!("promoting {} did not finish within its wait (pg_promote said {out:?}); trying again next round", chosen.pod));
                    self.fail_round();
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
                    self.fail_round();
                    return None;
                }
            }
        }
        // The label is what the `<name>-primary` Service selects: relabelled, the Service sends
        // clients (and the other replicas, which stream from it) to the new primary.
        if let Err(error) = self.relabel(&chosen.pod, Role::Primary).await {
            self.say(format!(
                "labelling {} primary failed: {error}; trying again next round",
                chosen.pod
            ));
            self.fail_round();
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

    /// How far `pod` got: whether it is still a standby, and the WAL it received and replayed.
    async fn position(&self, pod: &str) -> Result<Position, String> {
        let sql = "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()";
        let out = self.psql(pod, sql).await?;
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
    pub async fn psql(&self, pod: &str, sql: &str) -> Result<String, String> {
        psql_in_pod(
            &self.worker.client,
            self.namespace(),
            pod,
            &manifests::psql_argv(sql),
        )
        .await
    }
}

/// Members labelled primary, deleted, whose processes have not stopped.
fn leaving_unstopped(observed: &Observed) -> impl Iterator<Item = &Member> {
    observed
        .members
        .iter()
        .filter(|m| m.role == Some(Role::Primary) && m.phase == Phase::Terminating && !m.stopped)
}

/// How long a fenced primary gets to stop before the kubelet kills it (see `act`).
pub(super) const FENCE_GRACE_SECONDS: u32 = 5;

/// The story line, Event type and reason for deleting `pod`.
pub(super) fn delete_story(
    pod: &str,
    reason: DeleteReason,
    member: Option<&Member>,
    observed: &Observed,
) -> (String, EventType, &'static str) {
    let unready = member.map_or(0, |m| m.unready_for.as_secs());
    let fenced = member.is_some_and(|m| m.role == Some(Role::Fenced));
    match reason {
        DeleteReason::FencePrimary if fenced => (
            format!("Deleting {pod}: a failover fenced it (relabelled {}) and did not delete it", Role::Fenced.label_value()),
            EventType::Warning,
            "PrimaryLost",
        ),
        DeleteReason::SecondPrimary => (
            format!("Deleting {pod}: a second pod labelled primary (keeping {})", observed.recorded_primary.as_deref().unwrap_or("the older one")),
            EventType::Warning,
            "SecondPrimary",
        ),
        DeleteReason::FencePrimary => (
            format!("Member lost: {pod} (the primary, {}); deleting it before promoting a replica", member.map_or(String::from("lost"), lost_because)),
            EventType::Warning,
            "PrimaryLost",
        ),
        DeleteReason::MemberLost => (
            format!("Member lost: {pod} (unready for {unready}s); replacing it"),
            EventType::Warning,
            "MemberLost",
        ),
        DeleteReason::NotStreaming => (
            format!("Replica {pod} is Ready but has not streamed from the primary {} for {}s (an old timeline it cannot leave, or a primary that is gone); replacing it with a fresh clone", observed.recorded_primary.as_deref().unwrap_or("?"), member.map_or(0, |m| m.not_streaming_for.as_secs())),
            EventType::Warning,
            "ReplicaNotStreaming",
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
        DeleteReason::PlannedSwitchover => (
            format!("Switching over to {}: stopping the primary {pod} cleanly (it ships its last WAL to every replica), then promoting it", observed.switchover_to.as_deref().unwrap_or("the named replica")),
            EventType::Normal,
            "Switchover",
        ),
        DeleteReason::Switchover => (
            format!("Upgrading: every replica runs {}; switching over from the primary {pod}", observed.wanted_version),
            EventType::Normal,
            "Switchover",
        ),
    }
}

/// Why a primary counts as lost, for a story line: its [`Down`] evidence, or how long it has
/// been unready.
fn lost_because(member: &Member) -> String {
    match member.down {
        Some(down) => down.describe().to_string(),
        None => format!("unready for {}s", member.unready_for.as_secs()),
    }
}

/// `0/3000148`, as Postgres prints an LSN.
pub(super) fn lsn_text(lsn: u64) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}
