//! The tour's script: every act as a value, in the order they play, and the loop that plays them.
//!
//! An act prints its caption (what a learner would type), does one thing, waits for what shows
//! it worked (a line of the operator's, or a state of the cluster) within a deadline, and
//! reports what it saw. Acts with no caption carry on from the one before. Whether an act plays
//! depends on the stage: steps 04 to 06 on the tour's own sandbox only, the SQL and what needs
//! it only where real PostgreSQL runs the pods (simulated pods get a line saying what is skipped).

use std::time::{Duration, Instant};

use postgres_operator::backups::api::BACKUP_NOW_ANNOTATION;
use postgres_operator::backups::manifests::{backup_claim_name, ARCHIVE_TIMEOUT_SECONDS};
use postgres_operator::controller::pods::CLUSTER_LABEL;
use postgres_operator::crd::DEFAULT_ESTABLISHED_TIMEOUT;
use postgres_operator::postgres::manifests::primary_service_name;

use crate::does::Does;
use crate::example::{
    example_cluster, example_cluster_with_backups, BACKUP_KEEP, BACKUP_STORAGE_SIZE, EXAMPLE_NAME,
    EXAMPLE_SIZE, GROWN_SIZE, RESIZED_SIZE,
};
use crate::scene::{Scene, Stage};
use crate::sql::{Sql, SqlRoute};
use crate::until::Until;
use crate::{TourEnd, ACT_DEADLINE, POD_ACT_DEADLINE};

/// The tour's rows: one before the failover, one after the base backup (so only the archived
/// WAL can bring it back).
const TOUR_NOTE: &str = "written before the failover";
const SECOND_NOTE: &str = "written after the base backup";

/// Play `acts` in order, each to its end, on the scene's stage.
pub async fn play(acts: &[Act], scene: &mut Scene) -> Result<(), TourEnd> {
    for act in acts {
        if !act.plays.on(&scene.stage) {
            continue;
        }
        tracing::debug!(act = act.name, "playing");
        act.does.get_ready(scene).await?;
        if let Some(caption) = act.caption.text(&act.does, scene) {
            println!("{caption}");
        }
        if act.does.starts_clock() {
            scene.clock = Instant::now();
        }
        act.does.run(scene).await?;
        act.until.wait(act.within.duration(scene), scene).await?;
        if let Some(report) = act.report {
            println!("{}", report(scene));
        }
    }
    Ok(())
}

/// The workshop, act by act.
pub const ACTS: &[Act] = &[
    // Step 01: the type.
    Act {
        name: "the namespace exists",
        does: Does::CheckNamespace,
        ..QUIET
    },
    Act {
        name: "step 01: register the CRD",
        caption: Caption::Line("== Step 01: kubectl apply -f kube/crd.yaml   (register the PostgresCluster type)"),
        does: Does::RegisterCrd,
        until: Until::Established,
        within: Deadline::Established,
        report: Some(|_| "CustomResourceDefinition is Established".into()),
        ..QUIET
    },
    Act {
        name: "no example yet",
        does: Does::RefuseExistingExample,
        ..QUIET
    },
    // Steps 02 and 03: the operator that only reports.
    Act {
        name: "step 02: list, then watch",
        caption: Caption::Line("== Step 02: cargo run --bin stage02   (list the clusters, then watch from the list's resourceVersion)"),
        does: Does::StartStep03Operator,
        until: Until::OperatorSays("Starting at watchVersion"),
        ..QUIET
    },
    Act {
        name: "step 03: the operator",
        caption: Caption::Says(|scene| {
            format!(
                "== Step 03: cargo run --bin stage03   (the operator: one task per cluster, each reconciling every {} s)",
                scene.reconcile_interval.as_secs_f64()
            )
        }),
        ..QUIET
    },
    Act {
        name: "act 1: create",
        caption: Caption::Line("== Act 1: kubectl create -f kube/example-postgres-cluster.yaml"),
        does: Does::Create(example_cluster),
        until: Until::ExampleSays("PLACEHOLDER: Start cluster!"),
        ..QUIET
    },
    Act {
        name: "interlude: a reconcile tick",
        caption: Caption::Says(|scene| {
            format!(
                "== Interlude: the reconcile timer fires every {} s, whatever else happens",
                scene.reconcile_interval.as_secs_f64()
            )
        }),
        until: Until::ExampleSays("PLACEHOLDER: disaster recovery!"),
        within: Deadline::Tick,
        ..QUIET
    },
    Act {
        name: "act 2: resize",
        caption: Caption::Says(|_| {
            format!(
                "== Act 2: kubectl patch pgc {EXAMPLE_NAME} --type merge -p '{{\"spec\":{{\"size\":{RESIZED_SIZE}}}}}'"
            )
        }),
        does: Does::Resize(RESIZED_SIZE),
        until: Until::ExampleSays("spec update"),
        ..QUIET
    },
    Act {
        name: "act 3: delete",
        caption: Caption::Says(|_| format!("== Act 3: kubectl delete pgc {EXAMPLE_NAME}")),
        does: Does::DeleteExample,
        until: Until::ExampleSays("cluster task ended"),
        ..QUIET
    },
    curtain("curtain for step 03", Plays::OnSandbox, "== Curtain for step 03: stopping its operator, as SIGTERM would"),
    Act {
        name: "curtain on a real cluster",
        plays: Plays::OnRealCluster,
        caption: Caption::Line("== Curtain: stopping the operator, as SIGTERM would"),
        does: Does::StopOperator,
        report: Some(|scene| {
            format!(
                "operator stopped ({} cluster tasks left to stop). Steps 04 to 06 start pods: try them on the tour's own sandbox (`cargo run`).",
                scene.tasks_stopped
            )
        }),
        ..QUIET
    },
    // Steps 04 to 06: the operator that acts, on the tour's own sandbox.
    Act {
        name: "steps 04 to 06: the operator that acts",
        plays: Plays::OnSandbox,
        caption: Caption::Says(steps_04_and_05),
        does: Does::StartStep06Operator,
        until: Until::OperatorSays("Starting at watchVersion"),
        ..QUIET
    },
    Act {
        name: "act 4: create with backups",
        plays: Plays::OnSandbox,
        caption: Caption::Says(|_| {
            format!(
                "== Act 4: kubectl create -f kube/example-postgres-cluster.yaml, with spec.backup {{storageSize: {BACKUP_STORAGE_SIZE}, keep: {BACKUP_KEEP}}} added   (size {EXAMPLE_SIZE}: a seed primary, then replicas cloned from it one at a time; every member archives its WAL to the claim {})",
                backup_claim_name(EXAMPLE_NAME)
            )
        }),
        does: Does::Create(example_cluster_with_backups),
        until: Until::Ready(EXAMPLE_SIZE),
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "== {EXAMPLE_SIZE} of {EXAMPLE_SIZE} members ready, {} the primary, {:.1} s after the create",
                scene.primary,
                scene.seconds()
            )
        }),
    },
    Act {
        name: "act 5: scale",
        plays: Plays::OnSandbox,
        caption: Caption::Says(|_| {
            format!(
                "== Act 5: kubectl scale pgc {EXAMPLE_NAME} --replicas {GROWN_SIZE}   (through the scale subresource)"
            )
        }),
        does: Does::Scale(GROWN_SIZE),
        until: Until::Ready(GROWN_SIZE),
        within: Deadline::Pods,
        report: Some(|_| format!("== {GROWN_SIZE} of {GROWN_SIZE} members ready")),
    },
    psql("act 6: write a row", "== Act 6: ", Sql::CreateTableAndWrite(TOUR_NOTE)),
    skipped(
        "act 6, skipped",
        Caption::Says(|_| {
            format!(
                "== Act 6: (skipped: write a row through the Service {}; the pods are simulated, no Postgres answers)",
                primary_service_name(EXAMPLE_NAME)
            )
        }),
    ),
    Act {
        name: "act 7: lose the primary",
        plays: Plays::OnSandbox,
        caption: Caption::Says(|scene| {
            format!(
                "== Act 7: kubectl delete pod {}   (lose the primary: the operator waits until it has stopped, then promotes the most advanced replica)",
                scene.primary
            )
        }),
        does: Does::DeletePrimaryPod,
        ..QUIET
    },
    Act {
        name: "the failover",
        plays: Plays::WithPostgres,
        until: Until::NewPrimary,
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "== {} is the new primary, ready {:.1} s after the delete",
                scene.primary,
                scene.seconds()
            )
        }),
        ..QUIET
    },
    Act {
        name: "the failover, on simulated pods",
        plays: Plays::OnSimulatedPods,
        until: Until::ExampleSays("cannot ask"),
        within: Deadline::Pods,
        report: Some(|_| {
            "== The failover stops here: a simulated pod runs no Postgres to ask for its WAL position or to promote. With PostgreSQL and bubblewrap installed, a replica is promoted at this point.".into()
        }),
        ..QUIET
    },
    psql("act 8: read the row back", "== Act 8: ", Sql::ReadRows(&[TOUR_NOTE])),
    skipped(
        "act 8, skipped",
        Caption::Line("== Act 8: (skipped: read the row back through the Service; the pods are simulated)"),
    ),
    // Step 06: backups and disaster recovery, on real PostgreSQL.
    skipped(
        "acts 9 to 12, skipped",
        Caption::Line("== Acts 9 to 12: (skipped: step 06's base backup, a second row archived, every pod deleted and the cluster restored with both rows; the pods are simulated, no Postgres runs pg_basebackup, archives its WAL or replays it)"),
    ),
    Act {
        name: "step 06: backups",
        plays: Plays::WithPostgres,
        caption: Caption::Says(|_| {
            format!(
                "== Step 06: backups and disaster recovery   (the example's spec.backup: every WAL segment the primary finishes goes to the claim {}, base backups too)",
                backup_claim_name(EXAMPLE_NAME)
            )
        }),
        ..QUIET
    },
    Act {
        name: "act 9: ask for a base backup",
        plays: Plays::WithPostgres,
        caption: Caption::Says(|scene| {
            format!(
                "== Act 9: kubectl annotate pgc {EXAMPLE_NAME} {BACKUP_NOW_ANNOTATION}={} --overwrite   (a base backup now, by a backup pod, from a replica where one is ready: since the failover the cluster writes on a new timeline)",
                scene.backup_request
            )
        }),
        does: Does::AskForBackup,
        // One backup pod at a time: one already running (the first, taken once the cluster was
        // steady) finishes, and is recorded, before the operator starts the one asked for.
        until: Until::ExampleSays("asked for by the backup-now annotation"),
        within: Deadline::Pods,
        ..QUIET
    },
    Act {
        name: "the base backup",
        plays: Plays::WithPostgres,
        does: Does::NoteLastBackup,
        until: Until::NewBackup,
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "== status.lastBackup: {} ({:.1} MB, from WAL position {}), {:.1} s after the annotation",
                scene.last_backup.name,
                scene.last_backup.bytes as f64 / 1e6,
                scene.last_backup.lsn,
                scene.seconds()
            )
        }),
        ..QUIET
    },
    psql("act 10: write a second row", "== Act 10: ", Sql::Write(SECOND_NOTE)),
    Act {
        name: "why the switch",
        plays: Plays::WithPostgres,
        caption: Caption::Says(|_| {
            format!(
                "   The row is in a WAL segment the primary has not finished; only finished segments are archived. archive_timeout finishes one within {ARCHIVE_TIMEOUT_SECONDS} s, and a disaster before then loses what it holds. pg_switch_wal() finishes it now:"
            )
        }),
        ..QUIET
    },
    Act {
        name: "switch the WAL segment",
        plays: Plays::WithPostgres,
        caption: Caption::Psql("   "),
        does: Does::Sql(Sql::SwitchWal),
        until: Until::Archived,
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "   {} archived to {} {:.1} s after the switch (pg_stat_archiver.last_archived_wal)",
                scene.segment,
                backup_claim_name(EXAMPLE_NAME),
                scene.seconds()
            )
        }),
    },
    Act {
        name: "act 11: lose every pod",
        plays: Plays::WithPostgres,
        caption: Caption::Says(|_| {
            format!(
                "== Act 11: kubectl delete pods -l {CLUSTER_LABEL}={EXAMPLE_NAME}   (every pod at once: no replica is left to promote; the operator restores the newest base backup and replays the archived WAL)"
            )
        }),
        does: Does::DeleteEveryPod,
        until: Until::Restored,
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "== Restored in {:.1} s: {} is the primary, {}",
                scene.seconds(),
                scene.primary,
                scene.restore_reached
            )
        }),
    },
    psql("act 12: read both rows back", "== Act 12: ", Sql::ReadRows(&[TOUR_NOTE, SECOND_NOTE])),
    Act {
        name: "the replicas again",
        plays: Plays::WithPostgres,
        until: Until::Ready(GROWN_SIZE),
        within: Deadline::Pods,
        report: Some(|scene| {
            format!(
                "== {GROWN_SIZE} of {GROWN_SIZE} members ready again, {:.1} s after the delete: the replicas cloned from the restored primary",
                scene.seconds()
            )
        }),
        ..QUIET
    },
    Act {
        name: "act 13: delete",
        plays: Plays::OnSandbox,
        caption: Caption::Says(|_| {
            format!(
                "== Act 13: kubectl delete pgc {EXAMPLE_NAME}   (the garbage collector deletes what it owns)"
            )
        }),
        does: Does::DeleteExample,
        until: Until::ExampleSays("cluster is deleted by the user"),
        ..QUIET
    },
    curtain("curtain", Plays::OnSandbox, "== Curtain: stopping the step-06 operator, as SIGTERM would"),
];

/// The caption of steps 04 to 06, and what runs the pods.
fn steps_04_and_05(scene: &Scene) -> String {
    let pods = match &scene.stage {
        Stage::Sandbox { sql: Some(SqlRoute::HostPsql(psql)) } => format!(
            "The pods are real PostgreSQL servers; the tour's SQL goes through the primary Service with this host's {}.",
            psql.display()
        ),
        Stage::Sandbox { sql: Some(SqlRoute::Exec) } => "The pods are real PostgreSQL servers; this host has no psql, so the tour's SQL goes through pods/exec into the primary pod (not through its Service).".into(),
        _ => "The pods are simulated: the operator acts all the same, but no Postgres runs in them, so the SQL acts are skipped, the failover stops at its first question to Postgres, and a backup pod never finishes (nothing runs pg_basebackup).".into(),
    };
    format!("== Steps 04 to 06: cargo run --bin stage06   (the homework, for real: a seed, replicas, Services, failover; then backups and disaster recovery. Stage 06's operator is stage 04's plus failover (stage 05) and backups)\n   {pods}")
}

/// Run `sql` through the primary, where real PostgreSQL runs the pods; its caption is the psql
/// command line after `prefix`.
const fn psql(name: &'static str, prefix: &'static str, sql: Sql) -> Act {
    Act {
        name,
        plays: Plays::WithPostgres,
        caption: Caption::Psql(prefix),
        does: Does::Sql(sql),
        ..QUIET
    }
}

/// Where the pods are simulated, a line saying what is skipped in place of an act that needs
/// PostgreSQL.
const fn skipped(name: &'static str, caption: Caption) -> Act {
    Act {
        name,
        plays: Plays::OnSimulatedPods,
        caption,
        ..QUIET
    }
}

/// Stop the operator the stage started, as SIGTERM would, and say how many tasks it stopped.
const fn curtain(name: &'static str, plays: Plays, caption: &'static str) -> Act {
    Act {
        name,
        plays,
        caption: Caption::Line(caption),
        does: Does::StopOperator,
        report: Some(|scene| {
            format!(
                "operator stopped ({} cluster tasks left to stop)",
                scene.tasks_stopped
            )
        }),
        ..QUIET
    }
}

/// One act of the tour.
pub struct Act {
    /// Which act is playing, in the logs (`RUST_LOG=debug`).
    pub name: &'static str,
    pub plays: Plays,
    pub caption: Caption,
    pub does: Does,
    pub until: Until,
    /// How long `until` may take.
    pub within: Deadline,
    /// A line once `until` is there, from what the scene now knows.
    pub report: Option<fn(&Scene) -> String>,
}

/// An act that plays everywhere and does nothing: the defaults the table overrides.
const QUIET: Act = Act {
    name: "",
    plays: Plays::Everywhere,
    caption: Caption::None,
    does: Does::Nothing,
    until: Until::Nothing,
    within: Deadline::Reply,
    report: None,
};

/// The stages an act plays on.
pub enum Plays {
    Everywhere,
    /// Only on an API server the flags named (the tour's writes there are announced first).
    OnRealCluster,
    /// Only on the tour's own sandbox, whatever runs its pods.
    OnSandbox,
    /// Only where the sandbox's pods are real PostgreSQL servers.
    WithPostgres,
    /// Only where they are simulated: a line saying what is skipped.
    OnSimulatedPods,
}

impl Plays {
    fn on(&self, stage: &Stage) -> bool {
        matches!(
            (self, stage),
            (Plays::Everywhere, _)
                | (Plays::OnRealCluster, Stage::RealCluster)
                | (Plays::OnSandbox, Stage::Sandbox { .. })
                | (Plays::WithPostgres, Stage::Sandbox { sql: Some(_) })
                | (Plays::OnSimulatedPods, Stage::Sandbox { sql: None })
        )
    }
}

/// What an act prints first.
pub enum Caption {
    /// Nothing: the act carries on from the one before.
    None,
    /// This line, as it is.
    Line(&'static str),
    /// These lines, from what the scene knows.
    Says(fn(&Scene) -> String),
    /// This, then the `psql` command a learner would type for the act's SQL (no password).
    Psql(&'static str),
}

impl Caption {
    fn text(&self, does: &Does, scene: &Scene) -> Option<String> {
        match (self, does, &scene.sql) {
            (Caption::None, _, _) => None,
            (Caption::Line(line), _, _) => Some(line.to_string()),
            (Caption::Says(says), _, _) => Some(says(scene)),
            (Caption::Psql(prefix), Does::Sql(sql), Some(target)) => {
                Some(format!("{prefix}{}", target.command_line(&sql.text())))
            }
            (Caption::Psql(prefix), _, _) => Some(prefix.to_string()),
        }
    }
}

/// How long an act may wait.
pub enum Deadline {
    /// The operator answers a write in milliseconds: this is for a broken one.
    Reply,
    /// A reconcile tick can be up to one interval away.
    Tick,
    /// Real pods run initdb, copy the primary with pg_basebackup, or restore a backup.
    Pods,
    /// The API server's own, for a new CustomResourceDefinition.
    Established,
}

impl Deadline {
    fn duration(&self, scene: &Scene) -> Duration {
        match self {
            Deadline::Reply => ACT_DEADLINE,
            Deadline::Tick => scene.reconcile_interval + ACT_DEADLINE,
            Deadline::Pods => POD_ACT_DEADLINE,
            Deadline::Established => DEFAULT_ESTABLISHED_TIMEOUT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stages() -> [Stage; 3] {
        [
            Stage::RealCluster,
            Stage::Sandbox { sql: None },
            Stage::Sandbox {
                sql: Some(SqlRoute::Exec),
            },
        ]
    }

    /// On every stage the tour ends at a curtain, having stopped each operator it started.
    #[test]
    fn every_stage_ends_at_a_curtain_with_every_operator_stopped() {
        for stage in stages() {
            let playing: Vec<&Act> = ACTS.iter().filter(|act| act.plays.on(&stage)).collect();
            let mut running = 0;
            for act in &playing {
                match act.does {
                    Does::StartStep03Operator | Does::StartStep06Operator => {
                        assert_eq!(running, 0, "{}: an operator is running already", act.name);
                        running += 1;
                    }
                    Does::StopOperator => {
                        assert_eq!(running, 1, "{}: no operator to stop", act.name);
                        running -= 1;
                    }
                    _ => {}
                }
            }
            assert_eq!(running, 0);
            let last = playing.last().expect("some act plays");
            assert!(matches!(last.does, Does::StopOperator), "{}", last.name);
        }
    }

    /// A wait on pods (initdb, pg_basebackup, a restore) gets their deadline, not the one for
    /// an operator's reply.
    #[test]
    fn waits_on_pods_have_the_pods_deadline() {
        for act in ACTS {
            let on_pods = matches!(
                act.until,
                Until::Ready(_)
                    | Until::NewPrimary
                    | Until::NewBackup
                    | Until::Archived
                    | Until::Restored
            );
            if on_pods {
                assert!(matches!(act.within, Deadline::Pods), "{}", act.name);
            }
        }
    }

    /// The SQL acts play only where Postgres runs, and their captions show the psql command.
    #[test]
    fn sql_acts_need_postgres_and_show_their_command() {
        for act in ACTS {
            let sql = matches!(act.does, Does::Sql(_)) || matches!(act.until, Until::Archived);
            if sql {
                assert!(matches!(act.plays, Plays::WithPostgres), "{}", act.name);
            }
            if matches!(act.does, Does::Sql(_)) {
                assert!(matches!(act.caption, Caption::Psql(_)), "{}", act.name);
            }
        }
    }

    /// Names tell the acts apart in the logs.
    #[test]
    fn act_names_are_unique() {
        let mut names: Vec<&str> = ACTS.iter().map(|act| act.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ACTS.len());
    }
}
