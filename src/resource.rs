//! Support: skip it on first read — what steps 02 and 03 need of a kind of object, so that the
//! story lines and the controller serve any kind: `PostgresCluster` (below), and the Deployer's
//! (`src/deployer/api.rs`).
//!
//! WORKSHOP.md, "Your own operator: the Deployer" (what of steps 01–03 carries over).

use crate::api::{PostgresCluster, PostgresClusterSpec, API_VERSION, KIND};
use crate::watch::WatchedObject;

/// A kind an operator watches and runs one task per object of.
pub trait Resource: WatchedObject + Clone {
    /// `PostgresCluster`: the kind in story lines and Events.
    const KIND: &'static str;
    /// `workshop.example.com/v1`.
    const API_VERSION: &'static str;
    /// Who writes its Events (`kubectl describe`'s "From"): `postgres-operator`, `deployer`.
    const OPERATOR: &'static str;
    /// What a task works towards: a change of it is a "spec update"; its `Display` is the story's.
    type Spec: PartialEq + std::fmt::Display + Send + Sync;
    fn spec(&self) -> &Self::Spec;
    /// `namespace/name`: how the controller keys its tasks.
    fn key(&self) -> String {
        let metadata = self.metadata();
        format!("{}/{}", metadata.namespace, metadata.name)
    }
}

impl Resource for PostgresCluster {
    const KIND: &'static str = KIND;
    const API_VERSION: &'static str = API_VERSION;
    const OPERATOR: &'static str = "postgres-operator";
    type Spec = PostgresClusterSpec;
    fn spec(&self) -> &PostgresClusterSpec {
        &self.spec
    }
}
