//! How the controller stops: every cluster task told at once, a grace period for the step each
//! is in, and what is left after it aborted. Support: a learner may skip it on first read — a
//! learner's operator stops with Ctrl-C; this is what makes that prompt and clean in a pod.
//!
//! WORKSHOP.md, step 03 ("Stopping").

use std::time::Duration;

use super::{ClusterWorker, Controller, TaskEnd};

/// How long shutdown waits for cluster tasks to finish their current step before aborting them.
/// Kubernetes sends SIGKILL 30 s after SIGTERM by default; we stay well inside that.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How `Controller::run` ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ControllerStopped {
    /// Tasks that ended on their own once told to stop.
    pub tasks_stopped: usize,
    /// Tasks still busy after the grace period, aborted.
    pub tasks_aborted: usize,
}

impl<W: ClusterWorker> Controller<W> {
    pub(super) fn task_ended(&mut self, ended: Result<(String, TaskEnd), tokio::task::JoinError>) {
        match ended {
            Ok((key, reason)) => tracing::debug!(cluster = %key, ?reason, "cluster task ended"),
            // Its channel is now closed, so `handle_event` starts a new task on the next spec change.
            Err(error) => tracing::error!(%error, "a cluster task panicked"),
        }
    }

    /// Tell every task to stop, wait up to the grace period, abort what is left.
    /// [`Controller::run`] ends with this; call it yourself when driving [`Controller::handle_event`].
    pub async fn shutdown(mut self) -> ControllerStopped {
        self.stop.cancel();
        let mut stopped = ControllerStopped::default();
        let deadline = tokio::time::Instant::now() + self.options.shutdown_grace;
        while !self.tasks.is_empty() {
            match tokio::time::timeout_at(deadline, self.tasks.join_next()).await {
                Ok(Some(Ok((_, TaskEnd::Stopped)))) => stopped.tasks_stopped += 1,
                Ok(Some(ended)) => self.task_ended(ended),
                Ok(None) => break,
                Err(_) => {
                    stopped.tasks_aborted = self.tasks.len();
                    tracing::warn!(
                        tasks = self.tasks.len(),
                        "cluster tasks still busy after the grace period; aborting them"
                    );
                    self.tasks.abort_all();
                    while self.tasks.join_next().await.is_some() {}
                    break;
                }
            }
        }
        stopped
    }
}
