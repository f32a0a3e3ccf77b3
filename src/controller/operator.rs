//! The whole step-03 operator in one call: register the type (step 01), list then watch it (step
//! 02), and route every event to a cluster task (step 03). `stages/stage03.rs` and the tour
//! (`src/bin/tour.rs`) both run exactly this.
//!
//! WORKSHOP.md, step 03 ("Putting it together").
//!
//! ```text
//! run_operator ── crd::register, crd::wait_established
//!      │
//!      ├── list_then_watch ──events──▶ narrate ("PostgresCluster event: ADDED ..") ──▶ Controller::run
//!      │                   ──notices─▶ narrate ("Watch version: 4566", ...)
//!      └── shutdown: stop the watch; the controller sees its input end and stops every task
//! ```

use std::future::Future;

use tokio::sync::{mpsc, watch};

use super::{Controller, ControllerOptions, ControllerStopped, Reporter};
use crate::api::{collection_path, PostgresCluster, CRD_NAME};
use crate::client::Client;
use crate::crd::{self, CrdError, Registration, DEFAULT_ESTABLISHED_TIMEOUT};
use crate::watch::{list_then_watch, Event, WatchNotice, WatchOptions};

/// Which step of starting the operator failed.
#[derive(Debug)]
pub enum OperatorError {
    /// Registering the CRD, or waiting for it to be Established (the error says which).
    RegisterResource(CrdError),
}

impl std::fmt::Display for OperatorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OperatorError::RegisterResource(error) => {
                write!(f, "registering the PostgresCluster resource: {error}")
            }
        }
    }
}

impl std::error::Error for OperatorError {}

impl OperatorError {
    /// What to do about it, when the CRD step knows (e.g. RBAC is missing).
    pub fn hint(&self) -> Option<String> {
        match self {
            OperatorError::RegisterResource(error) => error.hint(),
        }
    }
}

/// Run the operator on the client's namespace until `shutdown` resolves. Every story line —
/// step 02's and each cluster's — goes to `reporter`. Returns once every cluster task has stopped.
/// The watch never gives up on its own (it backs off and retries), so the only errors are at start.
pub async fn run_operator(
    client: Client,
    options: ControllerOptions,
    reporter: Reporter,
    shutdown: impl Future<Output = ()>,
) -> Result<ControllerStopped, OperatorError> {
    match crd::register(&client)
        .await
        .map_err(OperatorError::RegisterResource)?
    {
        Registration::Created => {
            reporter.report_operator(format!("registered CustomResourceDefinition {CRD_NAME}"))
        }
        Registration::AlreadyExisted => {
            reporter.report_operator("CustomResourceDefinition already exists; continuing")
        }
    }
    crd::wait_established(&client, DEFAULT_ESTABLISHED_TIMEOUT)
        .await
        .map_err(OperatorError::RegisterResource)?;

    reporter.report_operator("Finding existing clusters...");
    // `list_then_watch` wants a shutdown it can move into its task; ours may borrow, so relay it.
    let (stop_watch, watch_stopped) = watch::channel(false);
    let watcher = list_then_watch::<PostgresCluster>(
        client.clone(),
        collection_path(client.namespace()),
        WatchOptions::default(),
        async move {
            let mut watch_stopped = watch_stopped;
            let _ = watch_stopped.wait_for(|stop| *stop).await;
        },
    );

    let (to_controller, controller_events) = mpsc::channel(1);
    let narrator = tokio::spawn(narrate_and_forward(
        watcher.events,
        watcher.notices,
        to_controller,
        reporter.clone(),
    ));
    let controller = Controller::new(client, options, reporter);
    // Ends on `shutdown`, or if the narrator stops forwarding (the watch task is gone).
    let stopped = controller.run(controller_events, shutdown).await;
    stop_watch.send_replace(true);
    // Both end promptly once the watch is told to stop.
    let _ = watcher.task.await;
    let _ = narrator.await;
    Ok(stopped)
}

/// Tell step 02's story, then hand each event to the controller. Notices first (`biased`): the
/// watch sends a notice before the events it explains.
async fn narrate_and_forward(
    mut events: mpsc::Receiver<Event<PostgresCluster>>,
    mut notices: mpsc::Receiver<WatchNotice>,
    to_controller: mpsc::Sender<Event<PostgresCluster>>,
    reporter: Reporter,
) {
    let mut first_watch = true;
    loop {
        tokio::select! {
            biased;
            Some(notice) = notices.recv() => {
                for line in watch_notice_lines(&notice, &mut first_watch) {
                    reporter.report_operator(line);
                }
            }
            event = events.recv() => {
                let Some(event) = event else { return };
                reporter.report_operator(event_line(&event));
                if to_controller.send(event).await.is_err() {
                    return; // the controller has stopped
                }
            }
        }
    }
}

/// `PostgresCluster event: ADDED default/db {size: 3, version: 9.6.3, paused: false}` (step 02's line).
pub fn event_line(event: &Event<PostgresCluster>) -> String {
    let cluster = event.object();
    format!(
        "PostgresCluster event: {} {} {}",
        event.type_name(),
        cluster.key(),
        cluster.spec
    )
}

/// Step 02's lines for a notice: `Watch version: 4566` and `Controller initialised` after the first
/// list, `Starting at watchVersion 4566` for the first watch, one line per resume/relist/retry.
pub fn watch_notice_lines(notice: &WatchNotice, first_watch: &mut bool) -> Vec<String> {
    match notice {
        WatchNotice::Listed {
            resource_version, ..
        } => vec![
            format!("Watch version: {resource_version}"),
            "Controller initialised".to_string(),
        ],
        WatchNotice::Watching { resource_version } if *first_watch => {
            *first_watch = false;
            vec![format!("Starting at watchVersion {resource_version}")]
        }
        WatchNotice::Watching { .. } => Vec::new(),
        WatchNotice::Resumed {
            resource_version,
            why,
        } => vec![format!(
            "Watch resumed at watchVersion {resource_version}: {why}"
        )],
        WatchNotice::Relisted {
            why,
            resource_version,
            added,
            modified,
            deleted,
        } => vec![format!(
            "Relisted at watchVersion {resource_version} ({why}): {added} added, {modified} modified, {deleted} deleted while away"
        )],
        WatchNotice::Retrying { after, error } => vec![format!(
            "Watch failed, retrying in {:.1}s: {error}",
            after.as_secs_f64()
        )],
    }
}
