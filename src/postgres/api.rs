//! Support: skip it on first read — how step 04 reads a spec, and how a later step types its own
//! fields.
//!
//! Step 02's `src/api.rs` carries a later step's fields untyped (`more`); a later step gives them
//! their types (step 05's `src/failover/api.rs`, step 06's `src/backups/api.rs`), and each of its
//! accessors names its field once, through `field` and `set_field` below.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::api::{Condition, PostgresClusterSpec, PostgresClusterStatus};

/// Why a task does not act on a spec.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Basic(#[from] crate::api::SpecError),
    /// The layer's own check (`ClusterLayer::validate`).
    #[error("{0}")]
    Layer(String),
}

/// Step 02's checks: what every step needs of a spec.
pub fn validate_spec(spec: &PostgresClusterSpec) -> Result<(), SpecError> {
    crate::api::validate_spec(spec)?;
    Ok(())
}

impl PostgresClusterStatus {
    /// The condition of this `type` (conditions are a list keyed by type: at most one each).
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// `more[name]` decoded as a `T`: how a later step reads its own field of a spec or status
/// (`field::<ReplicationSpec>(&spec.more, "replication")`). Absent: `None`; there but of
/// another shape: the decoding error, which names what did not fit.
pub fn field<T: DeserializeOwned>(
    more: &Map<String, Value>,
    name: &str,
) -> Result<Option<T>, serde_json::Error> {
    more.get(name).map(T::deserialize).transpose()
}

/// Set `more[name]` to `value`, or remove it (`None`): how a later step writes its own field.
pub fn set_field<T: Serialize>(more: &mut Map<String, Value>, name: &str, value: Option<&T>) {
    // Our own types serialize to JSON without fail (their map keys are strings); a value that
    // did not would be left out rather than written half.
    match value.map(serde_json::to_value) {
        Some(Ok(value)) => {
            more.insert(name.to_string(), value);
        }
        Some(Err(error)) => {
            tracing::warn!(%error, name, "a status or spec field does not serialize; left out");
            more.remove(name);
        }
        None => {
            more.remove(name);
        }
    }
}
