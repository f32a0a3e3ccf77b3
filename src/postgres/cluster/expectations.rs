//! Expectations, as client-go's ReplicaSet controller calls them: after the task creates, deletes
//! or relabels a pod, it waits until the pod store shows that (or a timeout passes) before it
//! plans again, so that a round planned from a view that lags its own write does not create a
//! second pod. Support: a learner may skip it on first read — it guards the round against the
//! watch's lag; the round's decisions are `plan.rs`'s.
//!
//! WORKSHOP.md, step 04 ("The reconcile loop").

use std::sync::Arc;

use tokio::time::Instant;

use super::{ClusterLayer, PostgresTask};
use crate::controller::pods::Pod;
use crate::postgres::manifests::{Role, ROLE_LABEL};

/// What the task waits to see in the pod store after acting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// A pod we created.
    Appears(String),
    /// A pod we deleted: terminating or gone.
    Leaves(String),
    /// A pod we relabelled.
    Labelled(String, Role),
}

impl<L: ClusterLayer> PostgresTask<L> {
    /// Whether the store shows the last action's effect yet; `Some(why)` while it does not.
    pub(super) fn still_expecting(&mut self, pods: &[Arc<Pod>]) -> Option<String> {
        let (expect, until) = self.expecting.clone()?;
        // ANCHOR: expectations
        let find = |name: &str| pods.iter().find(|pod| pod.metadata.name == name);
        let seen = match &expect {
            Expect::Appears(name) => find(name).is_some(),
            Expect::Leaves(name) => find(name).is_none_or(|pod| pod.is_terminating()),
            Expect::Labelled(name, role) => find(name).is_none_or(|pod| {
                pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(role.label_value())
            }),
        };
        // ANCHOR_END: expectations
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

    /// Wait, before planning again, until the store shows `pod` labelled `role`.
    pub fn expect_labelled(&mut self, pod: &str, role: Role) {
        self.expect(Expect::Labelled(pod.to_string(), role));
    }

    pub(super) fn expect(&mut self, expect: Expect) {
        let until = Instant::now() + self.worker.options.expectation_timeout;
        self.expecting = Some((expect, until));
    }
}
