//! Support: skip it on first read — a check the probes cannot make, asked of the primary only when
//! the answer may have changed.
//!
//! Replicas that are Ready but follow nothing. The readiness probe asks whether a server
//! answers a query, and a hot standby does whether or not it streams: one left on
//! an old timeline (it received WAL past the point where the promoted replica's timeline forked,
//! so it can never follow it) or still pointing at a primary that is gone stays Ready for ever.
//! The primary knows better: a standby that streams from it has a row in its
//! `pg_stat_replication`, named by the `application_name` the clone set (the pod's name).
//!
//! So the task asks the ready primary which standbys stream from it, and `plan.rs` (rule 2)
//! replaces a Ready replica missing there for longer than `FailoverDelays::not_streaming_after`:
//! deleted, and rule 4 clones a fresh one. One `pods/exec` per ask, and only when the answer may
//! have changed (a new primary, a replica come or gone, one missing at the last ask) or once per
//! `owned_recheck` at most: an idle cluster stays quiet. WORKSHOP.md, step 05 ("Every replica
//! back").

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::postgres::manifests::Role;
use crate::postgres::plan::Phase;
use crate::postgres::PostgresTask;

use super::plan::{Failing, Seen};
use super::WithFailover;

/// The standbys that stream from the primary, or catch up to it (a replica far behind after a
/// long absence is following, only slowly). `startup` and `backup` are not following yet.
pub const STREAMING_SQL: &str =
    "SELECT application_name FROM pg_stat_replication WHERE state IN ('streaming', 'catchup')";

/// How long the ask may take. A primary that hangs (every process stopped) accepts the
/// connection and never answers; the failover that follows must not wait on this round.
const ASK_DEADLINE: Duration = Duration::from_secs(2);

/// What the task remembers between asks.
#[derive(Debug, Default)]
pub struct StreamingWatch {
    /// The primary the times below are about.
    primary: Option<String>,
    /// When each Ready replica was first found missing from the primary's `pg_stat_replication`.
    missing_since: HashMap<String, Instant>,
    /// The last ask: of which primary, about which Ready replicas (sorted), when, and whether
    /// every one of them streamed (`None`: no answer).
    last: Option<(String, Vec<String>, Instant, Option<bool>)>,
}

impl StreamingWatch {
    /// Whether to ask `primary` about `replicas` (its Ready replicas, sorted): after a change,
    /// every round while one is missing, else once per `recheck`. A primary that did not answer
    /// (no `pods/exec` allowed, a hung server) is not asked again every round either.
    fn due(&self, primary: &str, replicas: &[String], recheck: Duration) -> bool {
        match &self.last {
            Some((asked, about, at, all_streamed)) if asked == primary && about == replicas => {
                *all_streamed == Some(false) || at.elapsed() >= recheck
            }
            _ => true,
        }
    }

    /// `primary` did not answer about `replicas`.
    fn no_answer(&mut self, primary: &str, replicas: Vec<String>) {
        self.last = Some((primary.to_string(), replicas, Instant::now(), None));
    }

    /// Take the primary's answer: which of `replicas` stream from it.
    fn take(&mut self, primary: &str, replicas: Vec<String>, streaming: &[String]) {
        if self.primary.as_deref() != Some(primary) {
            self.missing_since.clear();
            self.primary = Some(primary.to_string());
        }
        let now = Instant::now();
        let missing = missing(&replicas, streaming);
        self.missing_since.retain(|name, _| missing.contains(name));
        for name in &missing {
            self.missing_since.entry(name.clone()).or_insert(now);
        }
        let all_streamed = Some(missing.is_empty());
        self.last = Some((primary.to_string(), replicas, now, all_streamed));
    }
}

/// The `replicas` that are not among `streaming`.
fn missing(replicas: &[String], streaming: &[String]) -> Vec<String> {
    replicas
        .iter()
        .filter(|name| !streaming.contains(name))
        .cloned()
        .collect()
}

impl<L: WithFailover> PostgresTask<L> {
    /// Ask the ready primary, when due, which replicas stream from it, and set each Ready
    /// replica's `not_streaming_for`. Nothing is set without a ready primary, or when it does
    /// not answer: a replica is judged only against a primary that says it is missing.
    pub(super) async fn observe_streaming(&mut self, failing: &mut Failing) {
        let observed = &mut failing.cluster;
        let Some(primary) = observed
            .members
            .iter()
            .find(|m| m.role == Some(Role::Primary) && m.ready && m.phase == Phase::Running)
            .map(|m| m.name.clone())
        else {
            return;
        };
        let is_ready_replica =
            |m: &Seen| m.role == Some(Role::Replica) && m.ready && m.phase == Phase::Running;
        let mut replicas: Vec<String> = observed
            .members
            .iter()
            .filter(|m| is_ready_replica(m))
            .map(|m| m.name.clone())
            .collect();
        replicas.sort();
        let recheck = self.options().owned_recheck;
        if self
            .failover_state()
            .streaming
            .due(&primary, &replicas, recheck)
        {
            let asked = tokio::time::timeout(ASK_DEADLINE, self.psql(&primary, STREAMING_SQL));
            let answer = asked
                .await
                .unwrap_or_else(|_| Err("no answer in time".into()));
            match answer {
                Ok(out) => {
                    let streaming: Vec<String> = out
                        .lines()
                        .map(|line| line.trim().to_string())
                        .filter(|line| !line.is_empty())
                        .collect();
                    self.failover_state_mut()
                        .streaming
                        .take(&primary, replicas, &streaming);
                }
                Err(error) => {
                    tracing::debug!(%error, primary, "could not ask the primary who streams");
                    self.failover_state_mut()
                        .streaming
                        .no_answer(&primary, replicas);
                    return;
                }
            }
        }
        let streaming = &self.failover_state().streaming;
        if streaming.primary.as_deref() != Some(primary.as_str()) {
            return;
        }
        let now = Instant::now();
        for member in observed.members.iter_mut().filter(|m| is_ready_replica(m)) {
            if let Some(since) = streaming.missing_since.get(&member.name) {
                member.more.not_streaming_for = now - *since;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// Asked again after a change only (or after the recheck period), every round while one is
    /// missing; a replica missing stays missing from the first time it was, until it streams or
    /// the primary changes.
    #[tokio::test(start_paused = true)]
    async fn the_primary_is_asked_again_only_when_the_answer_may_have_changed() {
        let recheck = Duration::from_secs(300);
        let mut watch = StreamingWatch::default();
        let both = names(&["db-a", "db-b"]);
        assert!(watch.due("db-p", &both, recheck));
        watch.take("db-p", both.clone(), &names(&["db-a", "db-b"]));
        assert!(!watch.due("db-p", &both, recheck));
        assert!(watch.due("db-p", &names(&["db-a"]), recheck));
        assert!(watch.due("db-q", &both, recheck));
        tokio::time::advance(recheck).await;
        assert!(watch.due("db-p", &both, recheck));
        // No answer: not asked again every round, only after a change or the recheck period.
        watch.no_answer("db-p", both.clone());
        assert!(!watch.due("db-p", &both, recheck));
        assert!(watch.due("db-q", &both, recheck));

        watch.take("db-p", both.clone(), &names(&["db-a"]));
        let first = watch.missing_since["db-b"];
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(watch.due("db-p", &both, recheck));
        watch.take("db-p", both.clone(), &names(&["db-a"]));
        assert_eq!(watch.missing_since["db-b"], first);
        // A new primary: missing from the old one says nothing about the new one.
        watch.take("db-q", both.clone(), &names(&["db-a"]));
        assert!(watch.missing_since["db-b"] > first);
        watch.take("db-q", both, &names(&["db-a", "db-b"]));
        assert!(watch.missing_since.is_empty());
    }
}
