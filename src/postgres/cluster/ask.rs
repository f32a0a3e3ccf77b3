//! Asking Postgres in a member through `pods/exec`, as `kubectl exec` would: run `psql`, read its
//! answer, and how far a replica got (its WAL positions). Support: a learner may skip it on first
//! read — the round only needs the answers; how a command reaches a pod is `src/exec.rs`'s.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: one `pods/exec`, byte by byte").

use super::*;

impl<L: ClusterLayer> PostgresTask<L> {
    /// How far `pod` got: whether it is still a standby, and the WAL it received and replayed.
    pub(super) async fn position(&self, pod: &str) -> Result<Position, String> {
        let sql = "SELECT pg_is_in_recovery(), pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn()";
        let out = self.psql(pod, sql).await?;
        let (in_recovery, lsns) = out
            .trim()
            .split_once('|')
            .ok_or_else(|| format!("unexpected psql output {out:?}"))?;
        let in_recovery = manifests::parse_bool(in_recovery).map_err(|e| e.to_string())?;
        let lsns = manifests::ReplicaLsns::parse(lsns).map_err(|e| e.to_string())?;
        Ok(Position {
            pod: pod.to_string(),
            in_recovery,
            received: lsns.received.unwrap_or(0),
            replayed: lsns.replayed.unwrap_or(0),
        })
    }

    /// Run one SQL statement in `pod`'s postgres container; its stdout.
    pub async fn psql(&self, pod: &str, sql: &str) -> Result<String, String> {
        psql_in_pod(
            &self.worker.client,
            self.namespace(),
            pod,
            &manifests::psql_argv(sql),
        )
        .await
    }
}

/// Run `argv` (a `psql` command line, see [`manifests::psql_argv`]) in `pod`'s postgres
/// container through `pods/exec`, as `kubectl exec` would: its stdout, or psql's stderr when it
/// exits non-zero.
pub async fn psql_in_pod(
    client: &Client,
    namespace: &str,
    pod: &str,
    argv: &[String],
) -> Result<String, String> {
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
    if output.exit_code != 0 {
        return Err(format!(
            "psql exited with {}: {}",
            output.exit_code,
            output.stderr_text().trim()
        ));
    }
    Ok(output.stdout_text())
}
