//! Support: skip it on first read — synchronous replication is opt-in; an asynchronous cluster
//! never runs this file.
//!
//! Synchronous replication, opt-in (`spec.replication.synchronous`): the primary's
//! `synchronous_standby_names` kept equal to what the members are, and what it means for
//! `status`. WORKSHOP.md, step 05 ("Synchronous replication").
//!
//! With `ANY n (a, b, ...)` PostgreSQL returns a commit once `n` of the named standbys (matched
//! by `application_name`, which each replica sets to its pod name) have flushed it. The operator
//! sets it with `ALTER SYSTEM` and a reload, through `pods/exec`, only when it changes, and
//! records it in `status.synchronous`: the plan reads it back when the primary is lost, to
//! promote only a standby that holds every acknowledged commit (`plan::Quorum`).

use crate::api::{PostgresCluster, PostgresClusterStatus};
use crate::postgres::cluster::psql_in_pod;
use crate::postgres::conditions::{condition, set_condition};
use crate::postgres::manifests::{self, Role};
use crate::postgres::plan::{Member, Observed, Phase};
use crate::postgres::PostgresTask;

use super::api::{DataDurability, ReplicationSpec, SynchronousSpec, SynchronousStatus};
use super::plan::Quorum;
use super::WithFailover;

/// The condition type this file writes (only when the spec asks for synchronous replication).
pub const SYNCHRONOUS_CONDITION: &str = "SynchronousReplication";

/// What this round leaves in `status.synchronous` and its condition.
#[derive(Clone, Debug)]
pub struct SynchronousRound {
    status: Option<SynchronousStatus>,
    /// The condition's status, reason and message; `None`: no synchronous replication asked
    /// for, the condition is dropped.
    condition: Option<(bool, &'static str, String)>,
}

/// The quorum a failover must respect: with `required`, the standbys last set on the primary.
pub(super) fn quorum(cluster: &PostgresCluster) -> Option<Quorum> {
    let spec = ReplicationSpec::synchronous(&cluster.spec)?;
    if spec.data_durability != DataDurability::Required {
        return None;
    }
    let set = SynchronousStatus::read(cluster.status.as_ref()?)?;
    Some(Quorum {
        number: usize::try_from(set.number).ok()?,
        standbys: set.standbys,
    })
}

/// The standbys and their number wanted now; `None`: asynchronous. `required` names every
/// replica, ready or not (a commit then waits for them, which is the point); with fewer than
/// `number` left it keeps the ones set before, so commits keep waiting rather than turn
/// asynchronous. `preferred` names the ready ones, as many as there are up to `number`, and
/// none at all when none is ready.
pub fn wanted<X>(
    spec: &SynchronousSpec,
    members: &[Member<X>],
    primary: Option<&str>,
    previous: Option<&SynchronousStatus>,
) -> Option<(i64, Vec<String>)> {
    // `members` were observed before this round acted: a replica promoted just now (`primary`)
    // is still among them, labelled replica.
    let replica = |m: &&Member<X>| {
        m.role == Some(Role::Replica)
            && m.phase != Phase::Terminating
            && Some(m.name.as_str()) != primary
    };
    let mut names: Vec<String> = members
        .iter()
        .filter(replica)
        .filter(|m| spec.data_durability == DataDurability::Required || m.ready)
        .map(|m| m.name.clone())
        .collect();
    names.sort();
    let have = i64::try_from(names.len()).unwrap_or(i64::MAX);
    match spec.data_durability {
        DataDurability::Required => {
            if have < spec.number {
                names.extend(previous.into_iter().flat_map(|p| p.standbys.clone()));
                names.sort();
                names.dedup();
            }
            (!names.is_empty()).then_some((spec.number, names))
        }
        DataDurability::Preferred => (have > 0).then_some((spec.number.min(have), names)),
    }
}

/// [`wanted`] as the setting on `primary`; `None`: asynchronous.
fn set_for<X>(
    spec: &SynchronousSpec,
    observed: &Observed<X>,
    primary: &str,
    previous: Option<&SynchronousStatus>,
) -> Option<SynchronousStatus> {
    let (number, standbys) = wanted(spec, &observed.members, Some(primary), previous)?;
    Some(SynchronousStatus {
        primary: primary.to_string(),
        number,
        standbys,
    })
}

/// `ANY 1 ("db-a", "db-b")`, or `''` (asynchronous). Pod names are DNS labels: quoting them
/// as identifiers is all they need, and no `'` can appear to break the SQL string.
pub fn standby_names(set: Option<&SynchronousStatus>) -> String {
    match set {
        Some(set) => {
            let names: Vec<String> = set.standbys.iter().map(|n| format!("\"{n}\"")).collect();
            format!("ANY {} ({})", set.number, names.join(", "))
        }
        None => String::new(),
    }
}

impl<L: WithFailover> PostgresTask<L> {
    /// Keep the primary's `synchronous_standby_names` as the spec and the members want it: one
    /// `ALTER SYSTEM` and a reload when it changes (or the primary did: a promoted replica
    /// carries whatever it cloned), nothing otherwise.
    pub(super) async fn keep_synchronous(
        &mut self,
        observed: &Observed,
        primary: Option<&str>,
    ) -> SynchronousRound {
        let previous = self
            .cluster()
            .status
            .as_ref()
            .and_then(SynchronousStatus::read);
        let spec = ReplicationSpec::synchronous(&self.cluster().spec);
        let ready_primary = primary.filter(|name| {
            observed
                .members
                .iter()
                .any(|m| &m.name == name && m.ready && m.phase == Phase::Running)
        });
        let Some(primary) = ready_primary else {
            // Nothing to set it on: keep what was set, and say so in the condition.
            let why = "no ready primary to set the synchronous standbys on";
            return SynchronousRound {
                status: previous,
                condition: spec.map(|_| (false, "NoReadyPrimary", why.into())),
            };
        };
        let next = spec
            .as_ref()
            .and_then(|spec| set_for(spec, observed, primary, previous.as_ref()));
        let mut round = SynchronousRound {
            status: next.clone(),
            condition: spec.as_ref().map(|spec| match &next {
                Some(set) => {
                    let standbys = set.standbys.join(", ");
                    let how = format!(
                        "a commit returns once {} of [{standbys}] have it ({})",
                        set.number, spec.data_durability
                    );
                    (true, "Quorum", how)
                }
                None => {
                    let why = "dataDurability preferred and no standby is ready: commits are asynchronous until one is";
                    (false, "NoStandbyReady", why.into())
                }
            }),
        };
        // What this task set last counts too: the status it reads may be an older write's,
        // still on its way back through the watch.
        let already_set = matches!(&self.failover_state().synchronous_set, Some((pod, set)) if pod == primary && *set == next);
        if next == previous || already_set {
            return round;
        }
        match self.set_synchronous(primary, next).await {
            Ok(shown) => self.say(format!("Synchronous standbys on {primary}: {shown}")),
            Err(error) => {
                self.fail_round();
                self.say(format!(
                    "could not set synchronous_standby_names on {primary}: {error}; trying again next round"
                ));
                round.status = previous;
                let why = format!("setting synchronous_standby_names on {primary} failed: {error}");
                round.condition = Some((false, "NotApplied", why));
            }
        }
        round
    }

    /// Before promoting `candidate`: give it the standbys it will wait for as primary, so that
    /// its first commit already waits for them. A replica carries the value it cloned, which
    /// can be none at all (the first replica clones a seed that had no standby to name): then
    /// the commits between its promotion and this round's `keep_synchronous` would return
    /// with no standby holding them. ALTER SYSTEM writes a file and no WAL: a standby may run
    /// it. On failure the promotion goes on, and `keep_synchronous` sets it after, as before.
    pub(super) async fn prepare_synchronous<X>(&mut self, observed: &Observed<X>, candidate: &str) {
        let Some(spec) = ReplicationSpec::synchronous(&self.cluster().spec) else {
            return;
        };
        let previous = self
            .cluster()
            .status
            .as_ref()
            .and_then(SynchronousStatus::read);
        let next = set_for(&spec, observed, candidate, previous.as_ref());
        match self.set_synchronous(candidate, next).await {
            Ok(shown) => self.say(format!(
                "Synchronous standbys on {candidate}, before it is promoted: {shown}"
            )),
            Err(error) => self.say(format!("could not set synchronous_standby_names on {candidate} before promoting it: {error}; promoting it, and setting it after")),
        }
    }

    /// `synchronous_standby_names` on `pod`: `ALTER SYSTEM` and a reload, in one exec. The
    /// value set, as a story line shows it.
    async fn set_synchronous(
        &mut self,
        pod: &str,
        next: Option<SynchronousStatus>,
    ) -> Result<String, String> {
        let value = standby_names(next.as_ref());
        let set = format!("ALTER SYSTEM SET synchronous_standby_names = '{value}'");
        // ALTER SYSTEM writes postgresql.auto.conf; the running server reads it on reload.
        // ALTER SYSTEM refuses to run in a transaction block, which one `-c` of two statements
        // would be; psql runs each `-c` on its own (and stops at the first that fails), so one
        // exec carries both.
        let mut argv = manifests::psql_argv(&set);
        argv.extend(["-c".to_string(), "SELECT pg_reload_conf()".to_string()]);
        psql_in_pod(self.client(), self.namespace(), pod, &argv).await?;
        self.failover_state_mut().synchronous_set = Some((pod.to_string(), next));
        if value.is_empty() {
            return Ok("none (asynchronous)".into());
        }
        Ok(value)
    }
}

/// Put this round's synchronous state into the status `next_status` made.
pub(super) fn set_status(
    next: &mut PostgresClusterStatus,
    previous: &PostgresClusterStatus,
    round: SynchronousRound,
    now: &str,
) {
    SynchronousStatus::write(round.status.as_ref(), next);
    next.conditions.retain(|c| c.type_ != SYNCHRONOUS_CONDITION);
    if let Some((status, reason, message)) = round.condition {
        let condition = condition(SYNCHRONOUS_CONDITION, status, reason, message);
        set_condition(next, previous, condition, now);
    }
}

impl Quorum {
    /// Whether promoting the most advanced of `ready` loses no acknowledged commit. Each such
    /// commit reached `number` of the `standbys` (M of them), so it is on at least one of any
    /// M − number + 1 of them: that many must answer. (CloudNativePG's failover quorum.)
    pub fn allows(&self, ready: &[String]) -> Result<(), String> {
        let answering: Vec<&String> = self
            .standbys
            .iter()
            .filter(|name| ready.contains(name))
            .collect();
        let needed = (self.standbys.len() + 1).saturating_sub(self.number).max(1);
        if answering.len() >= needed {
            return Ok(());
        }
        Err(format!(
            "promoting could lose acknowledged commits: each reached {} of the synchronous standbys [{}], and only {} of them [{}] can answer ({needed} needed)",
            self.number,
            self.standbys.join(", "),
            answering.len(),
            answering
                .iter()
                .map(|name| name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(number: i64, data_durability: DataDurability) -> SynchronousSpec {
        SynchronousSpec {
            number,
            data_durability,
        }
    }

    /// `required` names every replica, and keeps the old names while too few are left;
    /// `preferred` names the ready ones and turns asynchronous with none.
    #[test]
    fn the_standbys_follow_the_members() {
        let members: Vec<Member> = vec![
            Member::running("db-p", Role::Primary, true),
            Member::running("db-b", Role::Replica, false),
            Member::running("db-a", Role::Replica, true),
        ];
        let required = spec(1, DataDurability::Required);
        assert_eq!(
            wanted(&required, &members, Some("db-p"), None),
            Some((1, vec!["db-a".into(), "db-b".into()]))
        );
        let preferred = spec(2, DataDurability::Preferred);
        assert_eq!(
            wanted(&preferred, &members, Some("db-p"), None),
            Some((1, vec!["db-a".into()]))
        );
        let alone: Vec<Member> = vec![Member::running("db-p", Role::Primary, true)];
        assert_eq!(wanted(&preferred, &alone, Some("db-p"), None), None);
        let before = SynchronousStatus {
            primary: "db-p".into(),
            number: 1,
            standbys: vec!["db-gone".into()],
        };
        assert_eq!(
            wanted(&required, &alone, Some("db-p"), Some(&before)),
            Some((1, vec!["db-gone".into()]))
        );
        assert_eq!(standby_names(Some(&before)), "ANY 1 (\"db-gone\")");
        assert_eq!(standby_names(None), "");
    }
}
