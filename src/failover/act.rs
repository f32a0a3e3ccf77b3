//! Carrying out step 05's actions: a failover (fence, ask each ready replica how far it got
//! through `pods/exec`, promote the most advanced, relabel it), a promotion in place
//! (`in_place.rs`), its own deletions, each with its story line and Event. WORKSHOP.md, step
//! 05 ("Promote the most advanced").

use crate::events::EventType;
use crate::postgres::manifests::{self, Role};
use crate::postgres::PostgresTask;

use super::api::SWITCHOVER_ANNOTATION;
use super::fence::{from_an_unstopped_primary, FENCE_GRACE_SECONDS};
use super::lines::{delete_story, lsn_text};
use super::plan::{choose, FailReason, Failing, FailoverAction, Position};
use super::WithFailover;

impl<L: WithFailover> PostgresTask<L> {
    /// Carry out one of step 05's actions. Returns the pod that is primary after it, if the
    /// action made one.
    pub async fn act_failover(&mut self, action: &FailoverAction) -> Option<String> {
        // The view the action was planned from (`observe.rs`).
        let failing = self.failover_state().failing.clone()?;
        match action {
            FailoverAction::Delete { pod, reason } => {
                let member = failing.cluster.members.iter().find(|m| &m.name == pod);
                let (line, event_type, event_reason) = delete_story(pod, *reason, member, &failing);
                self.say(line.clone());
                // An unready primary may be hung (every process stopped) and never act on SIGINT;
                // the failover waits for its stop, so a short grace: the kubelet's SIGKILL ends it.
                let grace = (*reason == FailReason::FencePrimary).then_some(FENCE_GRACE_SECONDS);
                if self.delete_pod_within(pod, grace).await {
                    self.event(event_type, event_reason, &line).await;
                }
                None
            }
            FailoverAction::FailoverRefused(why) => {
                // Said once: the round repeats it every tick until enough standbys answer.
                let said = self
                    .status()
                    .condition("Progressing")
                    .is_some_and(|c| c.reason == "FailoverRefused" && &c.message == why);
                if !said {
                    self.say(format!("Not failing over: {why}"));
                    self.event(EventType::Warning, "FailoverRefused", why).await;
                }
                None
            }
            FailoverAction::Failover {
                lost,
                candidates,
                fence,
            } => {
                if let Some(pod) = fence {
                    if !self.fence_first(pod, &failing).await {
                        return None;
                    }
                }
                if !self.fence_the_leaving(&failing).await {
                    return None;
                }
                // The annotation, acted on or not: the failover a switchover began prefers it.
                let annotations = &self.cluster().metadata.annotations;
                let prefer = annotations.get(SWITCHOVER_ANNOTATION).cloned();
                let promoted = self
                    .fail_over(&failing, lost.as_deref(), candidates, prefer.as_deref())
                    .await?;
                if from_an_unstopped_primary(&failing, fence.as_deref()) {
                    self.restart_wal_receivers(&failing, &promoted).await;
                }
                Some(promoted)
            }
            FailoverAction::PromoteInPlace { pod } => self.promote_in_place(pod, &failing).await,
        }
    }

    /// `SELECT pg_promote()` in `pod`; it returns once the promotion is done, or says why not.
    pub(super) async fn promote(&self, pod: &str) -> Result<(), String> {
        match self.psql(pod, manifests::PROMOTE_SQL).await? {
            out if out.trim() == "t" => Ok(()),
            out => Err(format!(
                "it did not finish within its wait (pg_promote said {out:?})"
            )),
        }
    }

    /// Ask each candidate how far it got, promote the most advanced, label it primary.
    async fn fail_over(
        &mut self,
        failing: &Failing,
        lost: Option<&str>,
        candidates: &[String],
        prefer: Option<&str>,
    ) -> Option<String> {
        self.say(format!(
            "Primary lost: {}; choosing among the ready replicas [{}]",
            lost.unwrap_or("<none recorded>"),
            candidates.join(", ")
        ));
        // Asked side by side: each answer is one `pods/exec` round trip, and no write is taken
        // until the promotion. The answers come back in the candidates' order.
        let asked = candidates.iter().map(|pod| self.position(pod));
        let answers = futures_util::future::join_all(asked).await;
        let mut positions = Vec::new();
        for (pod, answer) in candidates.iter().zip(answers) {
            match answer {
                Ok(position) => positions.push(position),
                Err(error) => self.say(format!("cannot ask {pod} for its WAL position: {error}")),
            }
        }
        let chosen = choose(&positions, prefer)?.clone();
        if let Some(wanted) = prefer.filter(|wanted| *wanted != chosen.pod) {
            if candidates.iter().any(|c| c == wanted) {
                self.say(format!("Switchover: {wanted} lacks WAL that {} has; promoting {} instead, so that nothing is lost", chosen.pod, chosen.pod));
            }
        }
        self.say(format!(
            "Promoting {} to primary (WAL received up to {}, replayed up to {})",
            chosen.pod,
            lsn_text(chosen.received),
            lsn_text(chosen.replayed)
        ));
        if chosen.in_recovery {
            self.prepare_synchronous(&failing.cluster, &chosen.pod)
                .await;
            if let Err(why) = self.promote(&chosen.pod).await {
                let line = format!("promoting {} failed: {why}", chosen.pod);
                self.say(format!("{line}; trying again next round"));
                self.event(EventType::Warning, "PromotionFailed", &line)
                    .await;
                self.fail_round();
                return None;
            }
        }
        self.label_primary(&chosen.pod).await?;
        self.event(
            EventType::Normal,
            "Promoted",
            &format!(
                "promoted {} to primary in place of {}",
                chosen.pod,
                lost.unwrap_or("the lost primary")
            ),
        )
        .await;
        Some(chosen.pod)
    }

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
}

impl<L: WithFailover> PostgresTask<L> {
    /// Label `pod` the primary. The label is what the `<name>-primary` Service selects:
    /// relabelled, the Service sends clients (and the other replicas, which stream from it) to
    /// the new primary. `None` (the round failed, said why) when the API server refused.
    pub(super) async fn label_primary(&mut self, pod: &str) -> Option<()> {
        if let Err(error) = self.relabel(pod, Role::Primary.label_value()).await {
            self.say(format!(
                "labelling {pod} primary failed: {error}; trying again next round"
            ));
            self.fail_round();
            return None;
        }
        self.expect_labelled(pod, Role::Primary);
        Some(())
    }
}
