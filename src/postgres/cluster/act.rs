//! Acting on the plan's one action: pods created and deleted, a failover (ask each ready replica
//! how far it got through `pods/exec`, promote the most advanced, relabel it), each with its
//! story line and Event. WORKSHOP.md, step 04 ("The reconcile loop").

use super::*;
use fence::{from_an_unstopped_primary, FENCE_GRACE_SECONDS};
use lines::{delete_story, lsn_text};

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
                // An unready primary may be hung (every process stopped) and never act on SIGINT;
                // the failover waits for its stop, so a short grace: the kubelet's SIGKILL ends it.
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
                if from_an_unstopped_primary(observed, fence.as_deref()) {
                    self.restart_wal_receivers(observed, &promoted).await;
                }
                Some(promoted)
            }
            Action::PromoteInPlace { pod } => self.promote_in_place(pod).await,
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

    /// The primary `pod` was restarted in place and is Ready: ask whether it came back in
    /// recovery (it crashed: the manifests' start script) and if so promote it. Each restart is
    /// asked about once, so an idle cluster asks nothing. Returns `pod` when it promoted it.
    async fn promote_in_place(&mut self, pod: &str) -> Option<String> {
        let restarts = self
            .snapshot()
            .iter()
            .find(|p| p.metadata.name == pod)
            .map(|p| p.restarts(POSTGRES_CONTAINER))?;
        let in_recovery = self
            .psql(pod, manifests::IS_IN_RECOVERY_SQL)
            .await
            .and_then(|out| manifests::parse_bool(&out).map_err(|e| e.to_string()));
        let promoted = match in_recovery {
            // A clean stop and start: it is the primary still.
            Ok(false) => None,
            Ok(true) => {
                self.say(format!("Primary {pod} was restarted in place and came back in recovery; no replica took over, so promoting it where it is"));
                if let Err(why) = self.promote(pod).await {
                    self.say(format!(
                        "promoting {pod} in place failed: {why}; trying again next round"
                    ));
                    self.fail_round();
                    return None;
                }
                let line =
                    format!("promoted {pod} in place: it had crashed and came back in recovery");
                self.event(EventType::Normal, "PromotedInPlace", &line)
                    .await;
                Some(pod.to_string())
            }
            Err(error) => {
                self.say(format!(
                    "cannot tell whether {pod} is in recovery: {error}; asking again next round"
                ));
                self.fail_round();
                return None;
            }
        };
        self.restarts_asked.insert(pod.to_string(), restarts);
        promoted
    }

    /// A member pod as this task creates it: `manifests::pod` for the spec (with `version` in
    /// place of spec.version when given), dressed by the layer.
    pub fn member_pod(&self, role: Role, version: Option<&str>) -> serde_json::Value {
        let cluster = self.at_version(version);
        let mut pod = manifests::pod(&cluster, role, self.agent_image());
        L::dress_pod(self, &cluster, role, &mut pod);
        pod
    }

    /// The image member pods copy their readiness agent from (`--agent-image`).
    pub fn agent_image(&self) -> &str {
        &self.worker.options.agent_image
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
    pub(super) async fn delete_pod_within(&mut self, name: &str, grace: Option<u32>) -> bool {
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

    /// Set `pod`'s role label (a merge patch leaves its other labels alone).
    pub(super) async fn relabel(&self, pod: &str, role: Role) -> Result<(), ClientError> {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let patch = Patch::Merge(manifests::role_patch(role));
        self.worker
            .client
            .patch::<serde_json::Value>(&path, &patch)
            .await
            .map(|_| ())
    }

    /// `SELECT pg_promote()` in `pod`; it returns once the promotion is done, or says why not.
    async fn promote(&self, pod: &str) -> Result<(), String> {
        match self.psql(pod, manifests::PROMOTE_SQL).await? {
            out if out.trim() == "t" => Ok(()),
            out => Err(format!(
                "it did not finish within its wait (pg_promote said {out:?})"
            )),
        }
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
            if let Err(why) = self.promote(&chosen.pod).await {
                let line = format!("promoting {} failed: {why}", chosen.pod);
                self.say(format!("{line}; trying again next round"));
                self.event(EventType::Warning, "PromotionFailed", &line)
                    .await;
                self.fail_round();
                return None;
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
}
