//! The operator's lines, printed as they come while the tour waits: for one line, for a state of
//! the cluster, or for its own SQL. Every wait has a deadline, so a broken operator fails the
//! tour instead of hanging it.

use std::future::Future;
use std::time::Duration;

use postgres_operator::story::LogLine;
use tokio::sync::mpsc;

use crate::{failed, TourEnd};

/// What a check of [`Story::until_state`] answers: `Some` once the state is there, and maybe a
/// note to print on the way.
pub trait Checked {
    type Found;
    fn found_and_note(self) -> (Option<Self::Found>, Option<String>);
}

/// A check with nothing to note.
impl<T> Checked for Option<T> {
    type Found = T;
    fn found_and_note(self) -> (Option<T>, Option<String>) {
        (self, None)
    }
}

/// A check that says what changed while it waits (the phases of a restore).
impl<T> Checked for (Option<T>, Option<String>) {
    type Found = T;
    fn found_and_note(self) -> (Option<T>, Option<String>) {
        self
    }
}

/// The operator's lines, printed as they come.
pub struct Story {
    lines: mpsc::UnboundedReceiver<LogLine>,
}

impl Story {
    pub fn new(lines: mpsc::UnboundedReceiver<LogLine>) -> Story {
        Story { lines }
    }

    /// No operator is running: a story that has ended.
    pub fn ended() -> Story {
        let (_, lines) = mpsc::unbounded_channel();
        Story { lines }
    }

    /// Print lines until one (of `cluster`, if given) contains `needle`. The operator reacts in
    /// milliseconds; the deadline is there so a broken operator fails the tour instead of
    /// hanging it.
    pub async fn until(
        &mut self,
        cluster: Option<&str>,
        needle: &str,
        deadline: Duration,
    ) -> Result<(), TourEnd> {
        let wait = async {
            while let Some(log) = self.lines.recv().await {
                println!("{log}");
                if cluster.is_none_or(|c| log.is_about(c)) && log.line.contains(needle) {
                    return true;
                }
            }
            false
        };
        match tokio::time::timeout(deadline, wait).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(failed(format!(
                "the operator stopped before saying {needle:?}"
            ))),
            Err(_) => Err(failed(format!(
                "the operator did not say {needle:?} within {} s",
                deadline.as_secs()
            ))),
        }
    }

    /// Print lines until `check` finds what it looks for (it is asked every 250 ms): for an act
    /// whose end is a state of the cluster rather than one line of the operator's. A check may
    /// also return a note to print (a status field that changed): after each check, the lines
    /// the operator has said so far are printed before its note or the tour's next caption. The
    /// operator says a line before it writes the status that goes with it, so the story keeps
    /// the order things happened in.
    pub async fn until_state<F, Fut>(
        &mut self,
        what: &str,
        deadline: Duration,
        mut check: F,
    ) -> Result<<Fut::Output as Checked>::Found, TourEnd>
    where
        F: FnMut() -> Fut,
        Fut: Future,
        Fut::Output: Checked,
    {
        let wait = async {
            let mut poll = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    log = self.lines.recv() => match log {
                        Some(log) => println!("{log}"),
                        None => return None,
                    },
                    _ = poll.tick() => {
                        let (found, note) = check().await.found_and_note();
                        while let Ok(log) = self.lines.try_recv() {
                            println!("{log}");
                        }
                        if let Some(note) = note {
                            println!("{note}");
                        }
                        if found.is_some() {
                            return found;
                        }
                    }
                }
            }
        };
        match tokio::time::timeout(deadline, wait).await {
            Ok(Some(found)) => Ok(found),
            Ok(None) => Err(failed(format!("the operator stopped before {what}"))),
            Err(_) => Err(failed(format!("no {what} within {} s", deadline.as_secs()))),
        }
    }

    /// Print lines while `work` runs; its answer, or its error as the tour's.
    pub async fn while_printing(
        &mut self,
        work: impl Future<Output = Result<String, String>>,
    ) -> Result<String, TourEnd> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                outcome = &mut work => return outcome.map_err(|error| failed(format!("psql: {error}"))),
                Some(log) = self.lines.recv() => println!("{log}"),
            }
        }
    }

    /// Print whatever is left once the operator has stopped.
    pub fn rest(&mut self) {
        while let Ok(log) = self.lines.try_recv() {
            println!("{log}");
        }
    }
}
