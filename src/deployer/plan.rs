//! The rollout's rules as pure functions: from what is wanted, where the rollout stands and how
//! many new pods are available, the one thing to do now. No I/O: the task in `mod.rs` observes,
//! calls [`next`], and acts; the tests below walk the demo's rollout without a server.
//!
//! WORKSHOP.md, "Your own operator: the Deployer". The rules, in order:
//! 1. No version runs yet: run the wanted one with every replica (no canary of nothing).
//! 2. The wanted version runs: keep its replica count.
//! 3. A version that was rolled back is not tried again until the spec names another.
//! 4. Another version is wanted: start a rollout, its new Deployment at 0.
//! 5. During a rollout, a step scales new to its percent of the replicas, old to the rest; once
//!    the new pods are available its sleep starts; after the sleep, the next step.
//! 6. New pods not available within the deadline, or lost during the sleep: roll back.
//! 7. The spec's version changed during a rollout: back to `from` is a rollback; anything else
//!    is held, said, and not acted on.

use std::time::Duration;

use tokio::time::Instant;

use super::api::Step;

/// Where a rollout stands, as the task remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rollout {
    pub from: String,
    pub to: String,
    /// 0-based index into [`steps`].
    pub step: usize,
    pub phase: Phase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The step's scale was asked for at `since`: waiting for the new pods to be available.
    Scaling { since: Instant },
    /// The new pods were available: the step's sleep ends at `until`.
    Sleeping { until: Instant },
}

/// What [`next`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Rule 1: run `version` with every replica.
    FirstVersion { version: String },
    /// Rule 2 (and 3): the running version's Deployment at `replicas`; nothing else.
    Steady,
    /// Rule 4: a new Deployment for `to` at 0, then step 1.
    Start { from: String, to: String },
    /// Rule 5: the step's new pods are available: sleep.
    Sleep { until: Instant },
    /// Rule 5: the sleep is over: scale for step `step` (0-based).
    NextStep { step: usize },
    /// The last step's new pods are available: delete the old Deployment.
    Finish,
    /// Rules 6 and 7: old back to every replica, new deleted.
    RollBack { reason: &'static str, why: String },
    /// Rule 7: the spec's version changed mid-rollout; nothing is done until it is set back.
    Hold { wanted: String },
    /// Nothing to do this round.
    Wait,
}

/// The steps a rollout walks: the spec's, ending at 100 % (added when the last is lower).
pub fn steps(spec_steps: &[Step]) -> Vec<Step> {
    let mut steps = spec_steps.to_vec();
    if steps.last().is_none_or(|last| last.percent < 100) {
        steps.push(Step {
            percent: 100,
            sleep: 0,
        });
    }
    steps
}

/// `(new, old)` replicas at `percent`: new rounded up, so 10 % of 3 is one canary pod, not none.
pub fn split(replicas: i64, percent: i64) -> (i64, i64) {
    let new = (replicas * percent + 99) / 100;
    (new, replicas - new)
}

/// What is known this round.
pub struct Seen<'a> {
    /// The spec's version.
    pub wanted: &'a str,
    pub replicas: i64,
    pub steps: &'a [Step],
    pub deadline: Duration,
    /// The version that runs every replica, if any.
    pub current: Option<&'a str>,
    pub rolled_back: Option<&'a str>,
    pub rollout: Option<&'a Rollout>,
    /// The new Deployment's available pods (0 when it is not there).
    pub new_available: i64,
    pub now: Instant,
}

/// The one thing to do now (the rules in the module docs).
pub fn next(seen: &Seen) -> Action {
    let Some(rollout) = seen.rollout else {
        return match seen.current {
            None => Action::FirstVersion {
                version: seen.wanted.to_string(),
            },
            Some(current) if current == seen.wanted => Action::Steady,
            Some(_) if seen.rolled_back == Some(seen.wanted) => Action::Steady,
            Some(current) => Action::Start {
                from: current.to_string(),
                to: seen.wanted.to_string(),
            },
        };
    };
    if seen.wanted == rollout.from {
        let why = format!("spec.deployment.version set back to {}", rollout.from);
        return Action::RollBack {
            reason: "RollbackRequested",
            why,
        };
    }
    if seen.wanted != rollout.to {
        return Action::Hold {
            wanted: seen.wanted.to_string(),
        };
    }
    let (target, _) = split(seen.replicas, seen.steps[rollout.step].percent);
    let last = rollout.step + 1 == seen.steps.len();
    match rollout.phase {
        Phase::Scaling { .. } if seen.new_available >= target && last => Action::Finish,
        Phase::Scaling { .. } if seen.new_available >= target => Action::Sleep {
            until: seen.now + Duration::from_secs(seen.steps[rollout.step].sleep),
        },
        Phase::Scaling { since } if seen.now >= since + seen.deadline => Action::RollBack {
            reason: "CanaryNotAvailable",
            why: format!(
                "{} of {target} new pods of {} available after {}s",
                seen.new_available,
                rollout.to,
                seen.deadline.as_secs()
            ),
        },
        Phase::Sleeping { .. } if seen.new_available < target => Action::RollBack {
            reason: "LostAvailability",
            why: format!(
                "{} of {target} new pods of {} available during step {}",
                seen.new_available,
                rollout.to,
                rollout.step + 1
            ),
        },
        Phase::Sleeping { until } if seen.now >= until => Action::NextStep {
            step: rollout.step + 1,
        },
        _ => Action::Wait,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_steps() -> Vec<Step> {
        let step = |percent, sleep| Step { percent, sleep };
        steps(&[step(10, 60), step(30, 30), step(60, 30), step(100, 0)])
    }

    fn seen<'a>(
        steps: &'a [Step],
        rollout: Option<&'a Rollout>,
        available: i64,
        now: Instant,
    ) -> Seen<'a> {
        Seen {
            wanted: "1.7.8",
            replicas: 10,
            steps,
            deadline: Duration::from_secs(20),
            current: Some("1.7.7"),
            rolled_back: None,
            rollout,
            new_available: available,
            now,
        }
    }

    /// The demo's 1/9, 3/7, 6/4, 10/0; a short last step gets a 100 % step after it.
    #[test]
    fn each_step_splits_the_replicas_rounding_the_canary_up() {
        let splits: Vec<(i64, i64)> = demo_steps().iter().map(|s| split(10, s.percent)).collect();
        assert_eq!(splits, [(1, 9), (3, 7), (6, 4), (10, 0)]);
        assert_eq!(split(3, 10), (1, 2));
        let short = steps(&[Step {
            percent: 50,
            sleep: 5,
        }]);
        assert_eq!(
            short.iter().map(|s| s.percent).collect::<Vec<_>>(),
            [50, 100]
        );
    }

    /// The demo's walk: start, then each step sleeps only once its pods are available, and the
    /// last one finishes.
    #[test]
    fn a_rollout_walks_the_steps_waiting_for_available_pods() {
        let steps = demo_steps();
        let now = Instant::now();
        assert_eq!(
            next(&seen(&steps, None, 0, now)),
            Action::Start {
                from: "1.7.7".into(),
                to: "1.7.8".into()
            }
        );
        let mut rollout = Rollout {
            from: "1.7.7".into(),
            to: "1.7.8".into(),
            step: 0,
            phase: Phase::Scaling { since: now },
        };
        assert_eq!(next(&seen(&steps, Some(&rollout), 0, now)), Action::Wait);
        let until = now + Duration::from_secs(60);
        assert_eq!(
            next(&seen(&steps, Some(&rollout), 1, now)),
            Action::Sleep { until }
        );
        rollout.phase = Phase::Sleeping { until };
        assert_eq!(next(&seen(&steps, Some(&rollout), 1, now)), Action::Wait);
        assert_eq!(
            next(&seen(&steps, Some(&rollout), 1, until)),
            Action::NextStep { step: 1 }
        );
        rollout.step = 3;
        rollout.phase = Phase::Scaling { since: until };
        assert_eq!(
            next(&seen(&steps, Some(&rollout), 10, until)),
            Action::Finish
        );
    }

    /// Not available within the deadline, or lost during a sleep: roll back; the version rolled
    /// back is not started again.
    #[test]
    fn a_canary_that_is_not_available_is_rolled_back() {
        let steps = demo_steps();
        let now = Instant::now();
        let mut rollout = Rollout {
            from: "1.7.7".into(),
            to: "1.7.8".into(),
            step: 1,
            phase: Phase::Scaling { since: now },
        };
        let late = now + Duration::from_secs(20);
        assert!(matches!(
            next(&seen(&steps, Some(&rollout), 2, late)),
            Action::RollBack {
                reason: "CanaryNotAvailable",
                ..
            }
        ));
        rollout.phase = Phase::Sleeping { until: late };
        assert!(matches!(
            next(&seen(&steps, Some(&rollout), 2, now)),
            Action::RollBack {
                reason: "LostAvailability",
                ..
            }
        ));
        let mut after = seen(&steps, None, 0, now);
        after.rolled_back = Some("1.7.8");
        assert_eq!(next(&after), Action::Steady);
    }

    /// A version change mid-rollout is held; back to `from` is a rollback.
    #[test]
    fn a_version_change_during_a_rollout_is_held_or_rolled_back() {
        let steps = demo_steps();
        let now = Instant::now();
        let rollout = Rollout {
            from: "1.7.7".into(),
            to: "1.7.8".into(),
            step: 1,
            phase: Phase::Scaling { since: now },
        };
        let mut changed = seen(&steps, Some(&rollout), 0, now);
        changed.wanted = "1.7.9";
        assert_eq!(
            next(&changed),
            Action::Hold {
                wanted: "1.7.9".into()
            }
        );
        changed.wanted = "1.7.7";
        assert!(matches!(
            next(&changed),
            Action::RollBack {
                reason: "RollbackRequested",
                ..
            }
        ));
    }
}
