//! Support: skip it on first read — the shapes of step 05's own fields; the layer reads them
//! through these functions.
//!
//! Step 05's own fields of a `PostgresCluster`: `spec.replication` (synchronous replication),
//! the switchover annotation, and what the layer records of them in `status.synchronous` and
//! `status.switchover`.
//!
//! WORKSHOP.md, step 05 ("Synchronous replication", "A planned switchover"). Step 02's
//! `src/api.rs` carries these fields untyped (`more`); this file gives them their types, each
//! accessor naming its field once, through step 04's `field` and `set_field`.

use serde::{Deserialize, Serialize};

use crate::api::{PostgresClusterSpec, PostgresClusterStatus};
use crate::postgres::api::{field, set_field};

/// Asks for a planned switchover to the replica it names: `kubectl annotate pgc NAME
/// workshop.example.com/switchover-to=POD`. Acted on once per value (`status.switchover`).
pub const SWITCHOVER_ANNOTATION: &str = "workshop.example.com/switchover-to";

/// `spec.replication`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// Absent: a commit returns once the primary has it (PostgreSQL's default, asynchronous).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synchronous: Option<SynchronousSpec>,
}

/// `spec.replication.synchronous`: a commit returns once `number` standbys have it too.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SynchronousSpec {
    /// How many standbys must have each commit: at least 1, less than `spec.size`.
    pub number: i64,
    #[serde(default)]
    pub data_durability: DataDurability,
}

/// What to do when fewer than `number` standbys can answer (the CRD allows these two only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum DataDurability {
    /// Commits wait until enough standbys have them: no acknowledged commit is ever lost to a
    /// failover, and writes stop while too few standbys run.
    #[default]
    Required,
    /// Commits go on with fewer standbys, or none (asynchronous): writes never stop, and a
    /// failover then may lose the last commits.
    Preferred,
}

impl std::fmt::Display for DataDurability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DataDurability::Required => "required",
            DataDurability::Preferred => "preferred",
        })
    }
}

impl ReplicationSpec {
    /// `spec.replication`, or why it cannot be read.
    pub fn read(spec: &PostgresClusterSpec) -> Result<ReplicationSpec, SpecError> {
        let replication = field(&spec.more, "replication")
            .map_err(|error| SpecError::Replication(error.to_string()))?;
        Ok(replication.unwrap_or_default())
    }

    /// `spec.replication.synchronous` of a spec [`validate_spec`] accepted; `None`: asynchronous.
    pub fn synchronous(spec: &PostgresClusterSpec) -> Option<SynchronousSpec> {
        ReplicationSpec::read(spec).ok()?.synchronous
    }

    /// Put this in `spec.replication` (`None`: asynchronous, the field removed).
    pub fn write(replication: Option<&ReplicationSpec>, spec: &mut PostgresClusterSpec) {
        set_field(&mut spec.more, "replication", replication);
    }
}

/// Why stage 05 does not act on a spec that passed step 04's checks: its own on
/// `spec.replication`.
/// The CRD's schema enforces the same rules on the server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Not of the shape the CRD declares (a CRD older than this operator, or someone else's).
    #[error("spec.replication: {0}")]
    Replication(String),
    #[error("spec.replication.synchronous.number must be at least 1 and less than spec.size ({size}), so that enough standbys exist to acknowledge each commit; got {number}")]
    SynchronousNumber { number: i64, size: i64 },
}

/// Synchronous replication's checks, after step 04's (`postgres::api::validate_spec`): at least one
/// standby, and fewer than `spec.size` (the primary is not its own standby).
pub fn validate_spec(spec: &PostgresClusterSpec) -> Result<(), SpecError> {
    if let Some(synchronous) = ReplicationSpec::read(spec)?.synchronous {
        if synchronous.number < 1 || synchronous.number >= spec.size {
            return Err(SpecError::SynchronousNumber {
                number: synchronous.number,
                size: spec.size,
            });
        }
    }
    Ok(())
}

/// `status.synchronous`: the primary's `synchronous_standby_names` is `ANY number (standbys)`,
/// so every commit acknowledged since was on at least `number` of `standbys`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SynchronousStatus {
    /// The primary it was set on.
    pub primary: String,
    pub number: i64,
    /// The standbys' pod names (their `application_name`).
    #[serde(default)]
    pub standbys: Vec<String>,
}

impl SynchronousStatus {
    /// `status.synchronous`: the standbys last set on the primary; `None`: asynchronous. Only
    /// this operator writes it, so one of another shape is read as absent.
    pub fn read(status: &PostgresClusterStatus) -> Option<SynchronousStatus> {
        field(&status.more, "synchronous").ok().flatten()
    }

    pub fn write(set: Option<&SynchronousStatus>, status: &mut PostgresClusterStatus) {
        set_field(&mut status.more, "synchronous", set);
    }
}

/// `status.switchover`: the [`SWITCHOVER_ANNOTATION`] value last acted on: recorded when its
/// primary was deleted, or once the pod it names is primary. The failover prefers that pod, but
/// promotes a more advanced replica if the named one lacks WAL.
pub fn switchover(status: &PostgresClusterStatus) -> Option<String> {
    field(&status.more, "switchover").ok().flatten()
}

pub fn set_switchover(pod: Option<&String>, status: &mut PostgresClusterStatus) {
    set_field(&mut status.more, "switchover", pod);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synchronous(size: i64, number: i64) -> PostgresClusterSpec {
        let mut spec = PostgresClusterSpec::new(size, "16");
        let replication = ReplicationSpec {
            synchronous: Some(SynchronousSpec {
                number,
                data_durability: DataDurability::Required,
            }),
        };
        ReplicationSpec::write(Some(&replication), &mut spec);
        spec
    }

    /// A task refuses a synchronous `number` below 1 or not below `spec.size`, naming the rule;
    /// step 02's checks are step 04's, made before this.
    #[test]
    fn synchronous_replication_needs_one_to_size_less_one_standbys() {
        assert_eq!(validate_spec(&synchronous(3, 1)), Ok(()));
        assert_eq!(validate_spec(&synchronous(3, 2)), Ok(()));
        assert_eq!(validate_spec(&PostgresClusterSpec::new(1, "16")), Ok(()));
        for (size, number) in [(3, 0), (3, 3), (1, 1), (2, -1)] {
            assert_eq!(
                validate_spec(&synchronous(size, number)),
                Err(SpecError::SynchronousNumber { number, size })
            );
        }
        assert_eq!(
            validate_spec(&synchronous(3, 3)).unwrap_err().to_string(),
            "spec.replication.synchronous.number must be at least 1 and less than spec.size (3), so that enough standbys exist to acknowledge each commit; got 3"
        );
    }

    /// A `spec.replication` of another shape is refused by name, not taken for asynchronous.
    #[test]
    fn a_replication_of_another_shape_is_refused() {
        let mut spec = PostgresClusterSpec::new(3, "16");
        spec.more.insert(
            "replication".into(),
            serde_json::json!({"synchronous": {"number": "one"}}),
        );
        let error = validate_spec(&spec).unwrap_err();
        assert!(matches!(error, SpecError::Replication(_)), "{error:?}");
        assert!(
            error.to_string().starts_with("spec.replication: "),
            "{error}"
        );
    }

    /// Step 05's status fields go in and out of step 02's status under their API names.
    #[test]
    fn the_status_fields_use_their_api_names() {
        let mut status = PostgresClusterStatus::default();
        let set = SynchronousStatus {
            primary: "db-a".into(),
            number: 1,
            standbys: vec!["db-b".into()],
        };
        SynchronousStatus::write(Some(&set), &mut status);
        set_switchover(Some(&"db-a".to_string()), &mut status);
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({
                "switchover": "db-a",
                "synchronous": {"primary": "db-a", "number": 1, "standbys": ["db-b"]},
            })
        );
        assert_eq!(SynchronousStatus::read(&status), Some(set));
        assert_eq!(switchover(&status).as_deref(), Some("db-a"));
        SynchronousStatus::write(None, &mut status);
        set_switchover(None, &mut status);
        assert_eq!(status, PostgresClusterStatus::default());
    }
}
