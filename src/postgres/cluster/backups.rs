//! Step 05 inside the task: restoring a seed from a backup (disaster recovery, or a bootstrap from
//! another cluster's backups), following the restore to its promotion, and the base backups'
//! rounds. Acts only when the operator runs stage 05 (`PostgresOptions::backups`) and the spec
//! asks for it. WORKSHOP.md, step 05.

use super::*;

impl Task {
    /// Stage 05 acts for this cluster: the operator runs stage 05 and the spec asks for backups
    /// or a bootstrap from them.
    pub(super) fn backups_enabled(&self) -> bool {
        self.worker.options.backups
            && (self.cluster.spec.backup.is_some() || self.bootstrap_source().is_some())
    }

    /// `spec.bootstrap.fromBackup`, as a restore source.
    pub(super) fn bootstrap_source(&self) -> Option<RestoreSource> {
        let from = self.cluster.spec.bootstrap.as_ref()?.from_backup.as_ref()?;
        Some(RestoreSource {
            claim: backup::backup_claim_name(&from.cluster),
            own: false,
            target_time: from.target_time.clone(),
        })
    }

    /// What a seed would restore from now: after the cluster ran, its own claim if a base
    /// backup completed; before, the bootstrap source. Restoring a cluster that ran from the
    /// bootstrap source would silently drop every write made since.
    pub(super) fn restore_source(&self, has_run: bool) -> Option<RestoreSource> {
        if !self.worker.options.backups {
            return None;
        }
        if has_run {
            let backed_up =
                self.cluster.spec.backup.is_some() && self.stage05.last_backup.is_some();
            return backed_up.then(|| RestoreSource {
                claim: backup::backup_claim_name(&self.cluster.metadata.name),
                own: true,
                target_time: None,
            });
        }
        self.bootstrap_source()
    }

    /// The member pods' stage-05 parts: archiving when `spec.backup` is set.
    pub(super) fn pod_backups(&self, restore: Option<RestoreSource>) -> PodBackups {
        PodBackups {
            archive: self.worker.options.backups && self.cluster.spec.backup.is_some(),
            restore,
        }
    }

    /// Create the seed that restores from `from`, and record the restore as under way.
    pub(super) async fn restore_seed(
        &mut self,
        from: &str,
        version: Option<&str>,
    ) -> Option<String> {
        let has_run = from == backup::backup_claim_name(&self.cluster.metadata.name);
        if has_run && !self.still_wanted().await {
            return None;
        }
        let source = self.restore_source(has_run)?;
        if has_run {
            self.say("All Postgres pods are dead. Trying to recover from a previous backup");
        }
        let newest = self
            .stage05
            .last_backup
            .as_ref()
            .filter(|_| has_run)
            .map_or("the newest base backup".to_string(), |b| {
                format!("base backup {} (LSN {})", b.name, b.lsn)
            });
        self.say(format!(
            "Launching seed Postgres node restoring {newest} from {from}{}",
            source
                .target_time
                .as_ref()
                .map_or(String::new(), |t| format!(", replaying WAL up to {t}"))
        ));
        let name = self
            .create_pod_with(Role::Primary, version, self.pod_backups(Some(source)))
            .await?;
        self.say(format!(
            "Launching seed Postgres node {name}: restoring, then replaying the archived WAL"
        ));
        self.event(
            EventType::Normal,
            "Restoring",
            &format!("created the seed {name}, restoring {newest} from {from}"),
        )
        .await;
        self.stage05.restore = Some(RestoreStatus {
            source: from.to_string(),
            pod: name.clone(),
            state: RESTORE_RESTORING.into(),
            message: String::new(),
        });
        Some(name)
    }

    /// While a seed restores: has it failed (its `restore` init container, or its server during
    /// recovery, exited with an error)? Has it been promoted? The first marks the member for the
    /// plan; the second records the restore as done, with the WAL position it reached.
    pub(super) async fn follow_restore(&mut self, members: &mut [Member]) {
        let Some(restore) = self
            .stage05
            .restore
            .clone()
            .filter(|r| r.state == RESTORE_RESTORING)
        else {
            return;
        };
        let Some(member) = members.iter_mut().find(|m| m.name == restore.pod) else {
            return;
        };
        if member.phase == Phase::Running && member.ready {
            // Ready is not promoted: a server in archive recovery accepts read-only queries
            // once consistent. pg_is_in_recovery() says when it is a primary.
            let Ok(out) = self.psql(&member.name, manifests::IS_IN_RECOVERY_SQL).await else {
                return;
            };
            if manifests::parse_bool(&out) != Ok(false) {
                return;
            }
            let lsn = self
                .psql(&member.name, manifests::CURRENT_WAL_LSN_SQL)
                .await
                .map(|out| out.trim().to_string())
                .unwrap_or_default();
            self.say(format!(
                "Restored: {} replayed the archived WAL up to {lsn} and was promoted; it is the primary",
                member.name
            ));
            self.event(
                EventType::Normal,
                "Restored",
                &format!(
                    "{} restored from {} and promoted at WAL position {lsn}",
                    member.name, restore.source
                ),
            )
            .await;
            self.stage05.restore = Some(RestoreStatus {
                state: RESTORE_RESTORED.into(),
                message: format!("promoted at WAL position {lsn}"),
                ..restore
            });
            return;
        }
        if member.phase == Phase::Terminating {
            return;
        }
        member.failure = self.restore_failure(&member.name).await;
    }

    /// Why the restoring seed `pod` failed, if it did: the `restore` init container exited
    /// non-zero, or the postgres container stopped during recovery. The reason is the
    /// container's termination message: what the script wrote to /dev/termination-log, or
    /// (`terminationMessagePolicy: FallbackToLogsOnError`) the kubelet's copy of its last log
    /// lines, so no `pods/log` request is needed.
    pub(super) async fn restore_failure(&self, pod: &str) -> Option<String> {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let pod_json = self
            .worker
            .client
            .get::<serde_json::Value>(&path)
            .await
            .ok()?;
        let statuses = [
            ("initContainerStatuses", backup::RESTORE_CONTAINER),
            ("containerStatuses", POSTGRES_CONTAINER),
        ];
        for (list, container) in statuses {
            let status = pod_json["status"][list]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["name"] == container))?
                .clone();
            // A failed instance is `state` until the kubelet restarts it, `lastState` after.
            let failed = [
                &status["state"]["terminated"],
                &status["lastState"]["terminated"],
            ]
            .into_iter()
            .find(|t| t["exitCode"].as_i64().is_some_and(|c| c != 0));
            let Some(terminated) = failed else {
                continue;
            };
            let reason = last_line(terminated["message"].as_str().unwrap_or_default())
                .unwrap_or("(no termination message, and nothing in its log)");
            let exit = terminated["exitCode"].as_i64().unwrap_or_default();
            return Some(format!(
                "container {container} exited with {exit}: {reason}"
            ));
        }
        None
    }

    /// One backup step: collect a finished backup pod, or start one when due.
    pub(super) async fn backup_round(
        &mut self,
        pods: &[Pod],
        observed: &Observed,
        members_steady: bool,
    ) {
        let Some(spec) = self.cluster.spec.backup.clone() else {
            return;
        };
        let requested_value = self
            .cluster
            .metadata
            .annotations
            .get(BACKUP_NOW_ANNOTATION)
            .cloned();
        let requested =
            requested_value.is_some() && requested_value != self.stage05.backup_requested;
        let now = std::time::SystemTime::now();
        let since_last = self
            .stage05
            .last_backup
            .as_ref()
            .and_then(|b| backup::parse_utc(&b.time))
            .map(|time| now.duration_since(time).unwrap_or_default());
        let backup_observed = BackupObserved {
            pods: pods
                .iter()
                .map(|pod| BackupPod {
                    name: pod.metadata.name.clone(),
                    phase: match pod.phase() {
                        _ if pod.is_terminating() => Phase::Terminating,
                        "Succeeded" | "Failed" => Phase::Done,
                        "Running" => Phase::Running,
                        _ => Phase::Pending,
                    },
                })
                .collect(),
            since_last,
            interval: Duration::from_secs(
                u64::try_from(spec.interval_minutes.max(1)).unwrap_or(60) * 60,
            ),
            requested,
            since_failure: self.backup_failed_at.map(|at| at.elapsed()),
            replica_ready: observed
                .members
                .iter()
                .any(|m| m.role == Some(Role::Replica) && m.ready),
        };
        match next_backup(&backup_observed, members_steady) {
            BackupStep::Idle | BackupStep::Running(_) => {}
            BackupStep::Collect(pod) => {
                let succeeded = pods
                    .iter()
                    .any(|p| p.metadata.name == pod && p.phase() == "Succeeded");
                self.collect_backup(&pod, succeeded).await;
            }
            BackupStep::Start { from } => {
                let name = &self.cluster.metadata.name;
                let host = match from {
                    BackupSource::Replicas => manifests::replicas_service_name(name),
                    BackupSource::Primary => manifests::primary_service_name(name),
                };
                let why = if requested {
                    "asked for by the backup-now annotation"
                } else if since_last.is_none() {
                    "the first"
                } else {
                    "due"
                };
                let path = format!("/api/v1/namespaces/{}/pods", self.namespace());
                let body = backup::backup_pod(&self.cluster, &host, spec.keep);
                match self.worker.client.create::<_, Pod>(&path, &body).await {
                    Ok(pod) => {
                        self.say(format!(
                            "Backing up: {} takes a base backup ({why}) from {host}",
                            pod.metadata.name
                        ));
                        if requested {
                            self.stage05.backup_requested = requested_value;
                        }
                    }
                    Err(error) => self.say(format!(
                        "could not create a backup pod: {error}; trying again next round"
                    )),
                }
            }
        }
    }

    /// Read a finished backup pod's report, record it (status, Event, a story line), delete it.
    /// The report is the container's termination message: its result line on success, or
    /// (`FallbackToLogsOnError`) the end of its log when it failed without writing one.
    pub(super) async fn collect_backup(&mut self, pod: &str, succeeded: bool) {
        let path = format!("/api/v1/namespaces/{}/pods/{pod}", self.namespace());
        let text = match self.worker.client.get::<serde_json::Value>(&path).await {
            Ok(json) => json["status"]["containerStatuses"]
                .as_array()
                .and_then(|all| all.iter().find(|c| c["name"] == backup::BACKUP_CONTAINER))
                .and_then(|c| c["state"]["terminated"]["message"].as_str())
                .unwrap_or_default()
                .to_string(),
            Err(error) => format!("(could not read the pod: {error})"),
        };
        match BackupReport::parse(&text).ok().filter(|_| succeeded) {
            Some(report) => {
                self.backup_failed_at = None;
                let line = format!(
                    "Backup {} complete: {} bytes, starts at WAL position {}",
                    report.name, report.bytes, report.lsn
                );
                self.say(line.clone());
                self.event(EventType::Normal, "BackupCompleted", &line)
                    .await;
                self.stage05.last_backup = Some(LastBackup {
                    name: report.name,
                    time: report.time,
                    lsn: report.lsn,
                    bytes: report.bytes,
                });
            }
            None => {
                self.backup_failed_at = Some(Instant::now());
                let why = last_line(&text).unwrap_or("(no termination message)");
                let line = format!("Backup by {pod} failed: {why}");
                self.say(format!(
                    "{line}; trying again in {}s",
                    crate::postgres::plan::BACKUP_RETRY_AFTER.as_secs()
                ));
                self.event(EventType::Warning, "BackupFailed", &line).await;
            }
        }
        self.delete_pod(pod).await;
    }
}

/// Stage 05's backup pods carry the role label `backup`: they are not members.
pub(super) fn is_backup_pod(pod: &Pod) -> bool {
    pod.metadata.labels.get(ROLE_LABEL).map(String::as_str) == Some(backup::BACKUP_ROLE)
}

pub(super) fn from_display() -> String {
    "the backups".to_string()
}

/// The last non-empty line of a termination message: under `FallbackToLogsOnError` it can be
/// up to 80 log lines, of which the last says what went wrong.
pub(super) fn last_line(message: &str) -> Option<&str> {
    message
        .lines()
        .map(str::trim)
        .rev()
        .find(|line| !line.is_empty())
}
