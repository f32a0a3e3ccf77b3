//! Writing `status`: one merge patch of the `/status` subresource, only when it changed, with a
//! field that went away sent as `null`. Support: a learner may skip it on first read — what the
//! status says is `conditions.rs`'s; this is how it is written without waking every watcher for
//! nothing.
//!
//! WORKSHOP.md, step 04 ("Status").

use serde_json::Value;

use super::{ClusterLayer, PostgresTask};
use crate::api::{PostgresCluster, PostgresClusterStatus};
use crate::client::Patch;

impl<L: ClusterLayer> PostgresTask<L> {
    /// Merge-patch `/status` when it changed. Our own write comes back as a watch event; keeping
    /// the answer here means the next round compares with what we wrote.
    pub(super) async fn write_status(&mut self, next: PostgresClusterStatus) {
        if self.cluster.status.as_ref() == Some(&next) {
            return;
        }
        let path = format!(
            "{}/status",
            crate::api::object_path(self.namespace(), &self.cluster.metadata.name)
        );
        let Some(body) = with_removals(self.cluster.status.as_ref(), &next) else {
            // Sent as `null`, the whole status would be removed: better not written.
            tracing::warn!("the next status does not serialize; not written");
            self.fail_round();
            return;
        };
        let patch = Patch::Merge(serde_json::json!({ "status": body }));
        match self
            .worker
            .client
            .patch::<PostgresCluster>(&path, &patch)
            .await
        {
            Ok(updated) => self.cluster.status = updated.status,
            // A cluster deleted meanwhile: its Deleted event ends this task shortly.
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => {
                tracing::warn!(%error, "could not write the cluster's status");
                self.fail_round();
            }
        }
    }
}

/// `next` as the body of a merge patch over `previous`: a field `next` no longer has is sent as
/// `null`. In a JSON merge patch (RFC 7386) a field left out is left as it is on the server, so
/// without this a cleared field (a later step's `status.switchover` once its annotation is removed,
/// or any optional field set back to none) would stay there, differ from `next` at every round,
/// and be written again at every round.
pub(super) fn with_removals(
    previous: Option<&PostgresClusterStatus>,
    next: &PostgresClusterStatus,
) -> Option<Value> {
    fn null_what_went(previous: &Value, next: &mut Value) {
        if let (Value::Object(previous), Value::Object(next)) = (previous, next) {
            for (key, old) in previous {
                match next.get_mut(key) {
                    Some(new) => null_what_went(old, new),
                    None => {
                        next.insert(key.clone(), Value::Null);
                    }
                }
            }
        }
    }
    let mut body = serde_json::to_value(next).ok()?;
    if let Some(previous) = previous.and_then(|p| serde_json::to_value(p).ok()) {
        null_what_went(&previous, &mut body);
    }
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field the next status no longer has is sent as `null`, at any depth, so the merge
    /// patch removes it; what stays is sent as it is.
    #[test]
    fn a_cleared_status_field_is_sent_as_null() {
        let status = |value: Value| -> PostgresClusterStatus {
            serde_json::from_value(value).expect("a status")
        };
        let previous = status(serde_json::json!({
            "phase": "Running", "primary": "db-0", "switchover": "db-1",
            "restore": {"phase": "Done", "target": "latest"},
        }));
        let next = status(serde_json::json!({
            "phase": "Running", "restore": {"phase": "Done"},
        }));
        let body = with_removals(Some(&previous), &next).expect("a status serializes");
        assert_eq!(body["primary"], Value::Null);
        assert_eq!(body["switchover"], Value::Null);
        assert_eq!(
            body["restore"],
            serde_json::json!({"phase": "Done", "target": null})
        );
        assert_eq!(body["phase"], "Running");
        let fresh = with_removals(None, &next).expect("a status serializes");
        assert!(fresh.get("switchover").is_none());
    }
}
