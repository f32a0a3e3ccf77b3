//! Acting on the plan's one action: pods created and deleted, each with its story line and
//! Event. WORKSHOP.md, step 04 ("The reconcile loop").

use super::*;
use lines::delete_story;

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
                if self.delete_pod(pod).await {
                    self.event(event_type, event_reason, &line).await;
                }
                None
            }
            Action::Disaster => {
                if self.status().phase.as_deref() != Some(PHASE_FAILED) {
                    self.say(
                        "All Postgres pods are dead. Trying to recover from a previous backup",
                    );
                    self.say("No backup to recover from (spec.backup, stage 06): the cluster is Failed. Its data is gone; delete and re-create it to start empty");
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
}
