//! Step 04: the homework — a Postgres cluster for real.
//!
//! WORKSHOP.md, step 04. [`manifests`] builds the objects a `PostgresCluster` owns (Secret,
//! ConfigMap, Services, pods) and the `psql` commands the reconcile loop runs in them.

pub mod manifests;
