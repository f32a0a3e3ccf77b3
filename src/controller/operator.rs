//! The whole step-03 operator in one call: check the type (step 01's, created if absent), list then watch it (step
//! 02), and route every event to a cluster task (step 03). `stages/stage03.rs` and the tour
//! (`src/bin/tour/does.rs`) both run exactly this.
//!
//! WORKSHOP.md, step 03 ("Putting it together").
//!
//! ```text
//! run_operator ── crd_check::check_and_tell (created if absent, never changed; told first)
//!      │
//!      ├── list_then_watch ─events─▶ Controller::run: notices ("Watch version: 4566", ...) and
//!      │                                events ("PostgresCluster event: ADDED ..") are told, and
//!      │                                each event is routed to its cluster's task
//!      └── shutdown (one CancellationToken): the watch and the controller both stop on it
//! ```

use tokio_util::sync::CancellationToken;

use super::{Controller, ControllerOptions, ControllerStopped};
use crate::api::{collection_path, PostgresCluster};
use crate::client::Client;
use crate::crd::CrdError;
use crate::crd_check;
use crate::story::Reporter;
use crate::watch::{list_then_watch, WatchOptions};

/// Run the operator on the client's namespace until `shutdown` is cancelled. Every story line —
/// step 02's and each cluster's — goes to `reporter`. Returns once every cluster task has stopped.
/// The watch never gives up on its own (it backs off and retries), so the only errors are at start.
pub async fn run_operator(
    client: Client,
    options: ControllerOptions,
    reporter: Reporter,
    shutdown: CancellationToken,
) -> Result<ControllerStopped, CrdError> {
    // A stop during start-up (the CRD wait can take 30 s) must be as clean as one later on.
    tokio::select! {
        registered = crd_check::check_and_tell(&client, &reporter) => registered?,
        () = shutdown.cancelled() => {
            return Ok(ControllerStopped::default())
        }
    }

    reporter.report_operator("Finding existing clusters...");
    // The watch stops on our shutdown, or when we stop, whichever comes first: a child token.
    let stop_watch = shutdown.child_token();
    let watcher = list_then_watch::<PostgresCluster>(
        client.clone(),
        collection_path(client.namespace()),
        WatchOptions::default(),
        stop_watch.clone(),
    );

    // ANCHOR: run_operator
    let controller = Controller::new(client, options, reporter);
    // The watch's events go straight to the controller, which tells step 02's lines as it routes
    // them. It ends on `shutdown`, or when the watch task is gone (its channel closes).
    let stopped = controller.run(watcher.events, shutdown).await;
    stop_watch.cancel();
    // ANCHOR_END: run_operator
    // Ends promptly once told to stop.
    let _ = watcher.task.await;
    Ok(stopped)
}
