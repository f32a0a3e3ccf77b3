//! Asking Postgres in a member through `pods/exec`, as `kubectl exec` would: run `psql`, read its
//! answer. Support: a learner may skip it on first read — stage 04's rounds ask Postgres
//! nothing; `/metrics` (`figures.rs`) and a later step's layer ask through here, and how a
//! command reaches a pod is `src/exec.rs`'s.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: watching the operator").

use super::*;
use crate::client::Client;
use crate::exec::{exec, ExecLimits};
use crate::leader::{fenced_argv, FENCED_EXIT};
use crate::postgres::manifests::POSTGRES_CONTAINER;

impl<L: ClusterLayer> PostgresTask<L> {
    /// Run one SQL statement in `pod`'s postgres container; its stdout.
    pub async fn psql(&self, pod: &str, sql: &str) -> Result<String, String> {
        psql_in_pod(
            self.client(),
            self.namespace(),
            pod,
            &manifests::psql_argv(sql),
        )
        .await
    }
}

/// Run `argv` (a `psql` command line, see [`manifests::psql_argv`]) in `pod`'s postgres
/// container through `pods/exec`, as `kubectl exec` would: its stdout, or psql's stderr when it
/// exits non-zero. A leader's client runs it behind the member's fence (`src/leader/term.rs`).
pub async fn psql_in_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    argv: &[String],
) -> Result<String, String> {
    // On the data volume: the fence outlives a restart of the container.
    let fenced = client
        .term()
        .map(|term| fenced_argv(term, manifests::DATA_MOUNT, argv));
    let argv = fenced.as_deref().unwrap_or(argv);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let output = exec(
        client,
        namespace,
        pod,
        Some(POSTGRES_CONTAINER),
        &argv,
        None,
        ExecLimits::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    if client.term().is_some() && output.exit_code == FENCED_EXIT {
        return Err(format!(
            "refused by {pod}'s fence: {}",
            output.stderr_text().trim()
        ));
    }
    if output.exit_code != 0 {
        return Err(format!(
            "psql exited with {}: {}",
            output.exit_code,
            output.stderr_text().trim()
        ));
    }
    Ok(output.stdout_text())
}
