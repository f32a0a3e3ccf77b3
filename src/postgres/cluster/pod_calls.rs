//! Support: skip it on first read — the pod requests a round makes: POST a pod, DELETE one (404:
//! gone already is fine), and, for a later step, merge-patch its role label. A failed POST or
//! DELETE is said; a done one is recorded as what the task expects the pod watch to show next
//! (`expectations.rs`).
//!
//! WORKSHOP.md, step 04 ("The reconcile loop").

use super::*;
use crate::client::ClientError;
use crate::leader::{delete_in_term, patch_in_term};

impl<L: ClusterLayer> PostgresTask<L> {
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
    pub async fn delete_pod_within(&mut self, name: &str, grace: Option<u32>) -> bool {
        let path = format!("/api/v1/namespaces/{}/pods/{name}", self.namespace());
        // A leader's deletion is conditional on the pod's version and term (`src/leader/stamp.rs`).
        match delete_in_term(&self.worker.client, &path, grace).await {
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

    /// Set `pod`'s role label to `role` (a merge patch leaves its other labels alone); a
    /// leader's, conditional on the pod's version and term (`src/leader/stamp.rs`).
    pub async fn relabel(&self, pod: &str, role: &str) -> Result<(), ClientError> {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        patch_in_term(&self.worker.client, &path, &manifests::role_patch(role)).await
    }
}
