//! A second operator on steps 01–03's library: the `Deployer`, a canary rollout over two
//! Deployments, with the rollback the 2020 "Intro to Kubernetes operators" demo lacked.
//!
//! WORKSHOP.md, "Your own operator: the Deployer". Read it against stage 03: the same three
//! calls — register the kind (`crd::ensure_crd`, step 01), list then watch it
//! (`list_then_watch`, step 02), one task per object with a timer (`Controller`,
//! `run_task_loop`, step 03) — and what is new is only the task: `DeployerTask`, which observes,
//! asks `plan::next` what to do, does it, and writes the status.

pub mod api;
mod objects;
pub mod plan;
mod status;

use std::future::Future;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{Client, ClientError};
use crate::controller::cluster::{run_task_loop, ClusterReconciler};
use crate::controller::{
    ClusterInbox, ClusterWorker, Controller, ControllerOptions, ControllerStopped, TaskEnd,
};
use crate::crd::{self, CrdError, DEFAULT_ESTABLISHED_TIMEOUT};
use crate::events::{self, EventType};
use crate::story::Reporter;
use crate::watch::{list_then_watch, WatchOptions};
use api::{validate, Deployer, DeploymentSpec, Step, DEFAULT_DEADLINE_SECONDS};
use plan::{next, split, Action, Phase, Rollout, Seen};

/// `deployers.workshop.example.com`: `<plural>.<group>`, as every CRD's name.
pub const CRD_NAME: &str = "deployers.workshop.example.com";

/// The Deployer's CRD, `kube/deployer/crd.yaml`, compiled in as stage 01's is.
pub fn deployer_crd() -> Value {
    crd::from_manifest(include_str!("../../kube/deployer/crd.yaml"))
        .expect("kube/deployer/crd.yaml is JSON with # comment lines")
}

/// The whole operator: stage 03's `run_operator`, for another kind.
// ANCHOR: run_deployer
pub async fn run_deployer(
    client: Client,
    options: ControllerOptions,
    reporter: Reporter,
    shutdown: CancellationToken,
) -> Result<ControllerStopped, CrdError> {
    // Step 01: register our kind and wait until it is served.
    let register = async {
        let registration = crd::ensure_crd(&client, &deployer_crd()).await?;
        crd::wait_crd_established(&client, CRD_NAME, DEFAULT_ESTABLISHED_TIMEOUT).await?;
        Ok::<_, CrdError>(registration)
    };
    tokio::select! {
        registered = register => reporter.report_operator(registered?.to_string()),
        () = shutdown.cancelled() => return Ok(ControllerStopped::default()),
    }
    // Step 02: list, then watch, the Deployers of our namespace.
    let stop_watch = shutdown.child_token();
    let path = api::collection_path(client.namespace());
    let watcher = list_then_watch::<Deployer>(
        client.clone(),
        path,
        WatchOptions::default(),
        stop_watch.clone(),
    );
    // Step 03: one task per Deployer, each with its timer.
    let worker = DeployerWorker {
        client,
        reporter: reporter.clone(),
        interval: options.reconcile_interval,
    };
    let stopped = Controller::with_worker(worker, options, reporter)
        .run(watcher.events, shutdown)
        .await;
    stop_watch.cancel();
    let _ = watcher.task.await;
    Ok(stopped)
}
// ANCHOR_END: run_deployer

/// What every Deployer's task shares; the controller starts one task per Deployer through it.
#[derive(Clone)]
pub struct DeployerWorker {
    client: Client,
    reporter: Reporter,
    interval: Duration,
}

impl ClusterWorker for DeployerWorker {
    type Object = Deployer;
    fn run_cluster(
        &self,
        deployer: Deployer,
        inbox: ClusterInbox<Deployer>,
    ) -> impl Future<Output = TaskEnd> + Send + 'static {
        let status = &deployer.status;
        // After a restart, a rollout in the status goes on from its step, its wait started anew.
        let rollout = status.rollout.as_ref().map(|r| Rollout {
            from: r.from.clone(),
            to: r.to.clone(),
            step: r.step.saturating_sub(1),
            phase: Phase::Scaling {
                since: Instant::now(),
            },
        });
        let mut task = DeployerTask {
            key: format!("{}/{}", deployer.metadata.namespace, deployer.metadata.name),
            current: status.current_version.clone(),
            rolled_back: status.rolled_back_version.clone(),
            deployer,
            client: self.client.clone(),
            reporter: self.reporter.clone(),
            rollout,
            refused: None,
            last_rollback: None,
        };
        let interval = self.interval;
        async move {
            task.reconcile().await;
            run_task_loop(&mut task, inbox, interval).await
        }
    }
}

/// One Deployer's task. What it remembers (the version running, the rollout) is its own, written
/// to the status for `kubectl describe` and a restart, never read back from a watch event.
struct DeployerTask {
    deployer: Deployer,
    key: String,
    client: Client,
    reporter: Reporter,
    current: Option<String>,
    rolled_back: Option<String>,
    rollout: Option<Rollout>,
    /// This round's refusal: a condition `Valid=False` with this reason and message.
    refused: Option<(&'static str, String)>,
    /// The last rollback's reason and message, until the next rollout starts.
    last_rollback: Option<(&'static str, String)>,
}

impl ClusterReconciler<Deployer> for DeployerTask {
    fn say(&self, line: &str) {
        self.reporter.report(&self.key, line);
    }

    /// A changed spec is acted on at once; a status (our own write coming back) waits.
    fn take(&mut self, newer: Deployer) -> bool {
        let changed = newer.spec != self.deployer.spec;
        if changed {
            self.say(&format!(
                "spec update: from {} to {}",
                self.deployer.spec, newer.spec
            ));
        }
        self.deployer = newer;
        changed
    }

    /// One round: check the spec, observe the new version's pods, ask the plan, act, say it in
    /// the status.
    async fn reconcile(&mut self) {
        self.refused = None;
        let namespace = self.deployer.metadata.namespace.clone();
        match validate(&self.deployer.spec, &namespace).cloned() {
            Err(error) => self.refused = Some((error.reason(), error.to_string())),
            Ok(_) if self.deployer.spec.paused => {}
            Ok(spec) => {
                let steps = plan::steps(&self.deployer.spec.steps);
                if let Err(error) = self.round(&spec, &steps).await {
                    self.say(&format!(
                        "round failed: {error}; trying again at the next tick"
                    ));
                }
            }
        }
        self.write_status().await;
    }

    async fn deleted(&mut self) {
        self.say("deployer deleted: its Deployments and Service go with it (ownerReferences)");
    }
}

impl DeployerTask {
    /// A line of the story, and the same as an Event on the Deployer (`kubectl describe`).
    async fn say_and_record(&self, kind: EventType, reason: &str, line: String) {
        self.say(&line);
        events::record(&self.client, &self.deployer, kind, reason, &line).await;
    }

    /// Observe, decide, act.
    async fn round(&mut self, spec: &DeploymentSpec, steps: &[Step]) -> Result<(), ClientError> {
        let namespace = self.deployer.metadata.namespace.clone();
        let new_available = match &self.rollout {
            Some(rollout) => {
                let name = objects::deployment_name(spec, &rollout.to);
                objects::replicas(&self.client, &namespace, &name)
                    .await?
                    .map_or(0, |(_, available)| available)
            }
            None => 0,
        };
        let deadline = self
            .deployer
            .spec
            .deadline_seconds
            .unwrap_or(DEFAULT_DEADLINE_SECONDS);
        let seen = Seen {
            wanted: &spec.version,
            replicas: spec.replicas,
            steps,
            deadline: Duration::from_secs(deadline),
            current: self.current.as_deref(),
            rolled_back: self.rolled_back.as_deref(),
            rollout: self.rollout.as_ref(),
            new_available,
            now: Instant::now(),
        };
        let action = next(&seen);
        self.act(action, spec, steps).await
    }

    async fn act(
        &mut self,
        action: Action,
        spec: &DeploymentSpec,
        steps: &[Step],
    ) -> Result<(), ClientError> {
        let (client, namespace) = (
            &self.client.clone(),
            &self.deployer.metadata.namespace.clone(),
        );
        match action {
            Action::FirstVersion { version } => {
                let deployment = objects::deployment(&self.deployer, spec, &version, spec.replicas);
                objects::apply_deployment(client, namespace, &deployment).await?;
                objects::create_service(client, namespace, &objects::service(&self.deployer, spec))
                    .await?;
                let name = objects::deployment_name(spec, &version);
                let line = format!(
                    "first version {version}: {name} with {} replicas",
                    spec.replicas
                );
                self.current = Some(version);
                self.say_and_record(EventType::Normal, "Deployed", line)
                    .await;
            }
            Action::Steady => {
                let Some(current) = self.current.clone() else {
                    return Ok(());
                };
                let name = objects::deployment_name(spec, &current);
                match objects::replicas(client, namespace, &name).await? {
                    Some((replicas, _)) if replicas == spec.replicas => {}
                    Some(_) => objects::scale(client, namespace, &name, spec.replicas).await?,
                    None => {
                        let deployment =
                            objects::deployment(&self.deployer, spec, &current, spec.replicas);
                        objects::apply_deployment(client, namespace, &deployment).await?;
                    }
                }
            }
            Action::Start { from, to } => {
                let deployment = objects::deployment(&self.deployer, spec, &to, 0);
                objects::apply_deployment(client, namespace, &deployment).await?;
                objects::create_service(client, namespace, &objects::service(&self.deployer, spec))
                    .await?;
                let line = format!("rolling out {to} over {from} in {} steps", steps.len());
                let since = Instant::now();
                self.rollout = Some(Rollout {
                    from,
                    to,
                    step: 0,
                    phase: Phase::Scaling { since },
                });
                self.rolled_back = None;
                self.last_rollback = None;
                self.say_and_record(EventType::Normal, "RolloutStarted", line)
                    .await;
                self.scale_for_step(spec, steps).await?;
            }
            Action::Sleep { until } => {
                if let Some(rollout) = &mut self.rollout {
                    rollout.phase = Phase::Sleeping { until };
                    let (step, sleep) = (rollout.step + 1, steps[rollout.step].sleep);
                    self.say(&format!(
                        "step {step}: the new pods are available; next step in {sleep}s"
                    ));
                }
            }
            Action::NextStep { step } => {
                if let Some(rollout) = &mut self.rollout {
                    rollout.step = step;
                    rollout.phase = Phase::Scaling {
                        since: Instant::now(),
                    };
                }
                self.scale_for_step(spec, steps).await?;
            }
            Action::Finish => {
                let Some(rollout) = self.rollout.take() else {
                    return Ok(());
                };
                let old = objects::deployment_name(spec, &rollout.from);
                objects::delete(client, namespace, &old).await?;
                let line = format!(
                    "{} rolled out: {} replicas; deleted {old}",
                    rollout.to, spec.replicas
                );
                self.current = Some(rollout.to);
                self.say_and_record(EventType::Normal, "RolledOut", line)
                    .await;
            }
            Action::RollBack { reason, why } => {
                let Some(rollout) = self.rollout.take() else {
                    return Ok(());
                };
                let old = objects::deployment_name(spec, &rollout.from);
                objects::scale(client, namespace, &old, spec.replicas).await?;
                objects::delete(
                    client,
                    namespace,
                    &objects::deployment_name(spec, &rollout.to),
                )
                .await?;
                let line = format!("rolled back {} to {}: {why}", rollout.to, rollout.from);
                // A rollback the user asked for is not a version to avoid.
                self.rolled_back = (reason != "RollbackRequested").then_some(rollout.to);
                self.last_rollback = Some((reason, line.clone()));
                self.say_and_record(EventType::Warning, reason, line).await;
            }
            Action::Hold { wanted } => {
                let to = self
                    .rollout
                    .as_ref()
                    .map(|r| (r.to.clone(), r.from.clone()));
                let (to, from) = to.unwrap_or_default();
                let message = format!("spec.deployment.version changed to {wanted} while {to} rolls out; nothing is done until it is {to} again (or {from}, to roll back)");
                self.refused = Some(("VersionChangedDuringRollout", message));
            }
            Action::Wait => {}
        }
        Ok(())
    }

    /// The step's split: new scaled up first, then old down, so serving pods never dip.
    async fn scale_for_step(
        &self,
        spec: &DeploymentSpec,
        steps: &[Step],
    ) -> Result<(), ClientError> {
        let Some(rollout) = &self.rollout else {
            return Ok(());
        };
        let (new, old) = split(spec.replicas, steps[rollout.step].percent);
        let namespace = &self.deployer.metadata.namespace;
        let new_name = objects::deployment_name(spec, &rollout.to);
        objects::scale(&self.client, namespace, &new_name, new).await?;
        let old_name = objects::deployment_name(spec, &rollout.from);
        objects::scale(&self.client, namespace, &old_name, old).await?;
        let (step, count) = (rollout.step + 1, steps.len());
        self.say(&format!(
            "step {step} of {count}: {new} new ({new_name}), {old} old ({old_name})"
        ));
        Ok(())
    }
}
