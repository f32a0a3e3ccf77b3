//! Support: skip it on first read — how a Deployer's status is built from what its task
//! remembers: `kubectl describe`'s Progress (percentage, step, wait) and the conditions `Valid`,
//! `Progressing` and `RolledBack`; written as one merge patch, only when it changed.
//!
//! WORKSHOP.md, "Your own operator: the Deployer".

use tokio::time::Instant;

use super::api::{Progress, RolloutStatus, Step};
use super::plan::{self, split, Phase};
use super::{objects, DeployerTask};
use crate::api::Condition;
use crate::events::rfc3339;

impl DeployerTask {
    /// The status from what the task remembers; written only when it changed.
    pub(super) async fn write_status(&mut self) {
        let now = Instant::now();
        let steps = plan::steps(&self.deployer.spec.steps);
        let mut next = self.deployer.status.clone();
        next.current_version = self.current.clone();
        next.rolled_back_version = self.rolled_back.clone();
        next.rollout = self.rollout.as_ref().map(|r| RolloutStatus {
            from: r.from.clone(),
            to: r.to.clone(),
            step: r.step + 1,
        });
        next.progress = Some(self.progress(&steps, now));
        let (valid, reason, message) = match &self.refused {
            Some((reason, message)) => ("False", *reason, message.clone()),
            None => (
                "True",
                "SpecAccepted",
                "the spec passed every check".to_string(),
            ),
        };
        let progressing = match (&self.rollout, &self.last_rollback) {
            (Some(r), _) => (
                "True",
                "RollingOut",
                format!(
                    "{} over {}: step {} of {}",
                    r.to,
                    r.from,
                    r.step + 1,
                    steps.len()
                ),
            ),
            (None, Some((reason, message))) => ("False", *reason, message.clone()),
            (None, None) => (
                "False",
                "Complete",
                format!(
                    "{} runs every replica",
                    self.current.clone().unwrap_or_default()
                ),
            ),
        };
        let mut conditions = vec![condition(
            &next.conditions,
            "Valid",
            valid,
            reason,
            &message,
        )];
        let (status, reason, message) = progressing;
        conditions.push(condition(
            &next.conditions,
            "Progressing",
            status,
            reason,
            &message,
        ));
        if let Some((reason, message)) = &self.last_rollback {
            conditions.push(condition(
                &next.conditions,
                "RolledBack",
                "True",
                reason,
                message,
            ));
        }
        next.conditions = conditions;
        if next == self.deployer.status {
            return;
        }
        self.deployer.status = next;
        match objects::write_status(&self.client, &self.deployer).await {
            Ok(written) => self.deployer.status = written.status,
            Err(error) => tracing::warn!(%error, "could not write the Deployer's status"),
        }
    }

    /// `kubectl describe`'s Progress: `60% has been deployed`, `no. 3`, `30s till next step`.
    fn progress(&self, steps: &[Step], now: Instant) -> Progress {
        let paused = self.deployer.spec.paused;
        let Some(rollout) = &self.rollout else {
            let done = if self.last_rollback.is_some() {
                "0% (rolled back)"
            } else {
                "100% has been deployed"
            };
            let wait = if paused { "paused" } else { "none" };
            return Progress {
                percentage: done.into(),
                step: "done".into(),
                wait: wait.into(),
            };
        };
        let percent = steps[rollout.step].percent;
        let wait = match rollout.phase {
            _ if paused => "paused".to_string(),
            Phase::Sleeping { until } => {
                format!(
                    "{}s till next step",
                    until.saturating_duration_since(now).as_secs_f64().ceil()
                )
            }
            Phase::Scaling { .. } => {
                let (new, _) = self
                    .deployer
                    .spec
                    .deployment
                    .as_ref()
                    .map_or((0, 0), |d| split(d.replicas, percent));
                format!("for {new} new pods to be available")
            }
        };
        Progress {
            percentage: format!("{percent}% has been deployed"),
            step: format!("no. {}", rollout.step + 1),
            wait,
        }
    }
}

/// A condition, keeping its `lastTransitionTime` while its status stays the same.
fn condition(
    old: &[Condition],
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> Condition {
    let since = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone());
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since.unwrap_or_else(|| rfc3339(std::time::SystemTime::now())),
        observed_generation: None,
    }
}
