//! The whole step-04 operator in one call: stage 03's (check the CRD, watch the clusters, one task
//! per cluster), plus a watch of the clusters' pods whose store the tasks read and whose events
//! wake the task of the pod's cluster. `stages/stage04.rs` and the tour run exactly this.
//!
//! WORKSHOP.md, step 04 ("Watching the pods too").
//!
//! ```text
//! run_postgres_operator ── check the CRD (step 01's, created if absent)
//!      ├── pod watch (label app.kubernetes.io/name=postgres) ──▶ Store<Pod> ── read by every task
//!      │        └── each pod event ── Wakers::wake("namespace/<its cluster label>") ──┐
//!      │   (wait until its first list is in: a task planning from an empty store      │
//!      │    would take a running cluster for a new one)                               │
//!      └── cluster watch ─events─▶ Controller::run                                    │
//!                                     └── one PostgresWorker task per cluster ◀───────┘
//! ```

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::cluster::{ClusterLayer, PostgresOptions, PostgresWorker, Wakers};
use super::figures::ClusterFigures;
use crate::api::{collection_path, PostgresCluster};
use crate::client::Client;
use crate::controller::pods::{pods_path, Pod, APP_LABEL, APP_LABEL_VALUE, CLUSTER_LABEL};
use crate::controller::{Controller, ControllerOptions, ControllerStopped};
use crate::crd::CrdError;
use crate::story::Reporter;
use crate::watch::{list_then_watch, Event, WatchNotice};

/// Run the stage-04 operator, with `layer` over each cluster's round (`()`: none), on the
/// client's namespace until `shutdown` is cancelled.
pub async fn run_postgres_operator<L: ClusterLayer>(
    client: Client,
    options: PostgresOptions,
    layer: L,
    reporter: Reporter,
    shutdown: CancellationToken,
) -> Result<ControllerStopped, CrdError> {
    // Every request counted, and `/healthz` checking the watches and loops, while this runs.
    let client = client.observed_by(options.metrics.request_observer());
    let _acting = options.metrics.acting();
    let stopped_early = ControllerStopped::default();
    tokio::select! {
        registered = crate::crd_check::check_and_tell(&client, &reporter) => registered?,
        () = shutdown.cancelled() => return Ok(stopped_early),
    }

    // Our pods only: the label every pod we create carries. The tasks still check the
    // ownerReference's uid, since anyone can copy a label.
    let stop_watches = shutdown.child_token();
    let pod_watcher = list_then_watch::<Pod>(
        client.clone(),
        pods_path(
            client.namespace(),
            &format!("{APP_LABEL}={APP_LABEL_VALUE}"),
        ),
        options.watch.clone(),
        stop_watches.clone(),
    );
    let pods = pod_watcher.store.clone();
    let wakers = Wakers::default();
    let (synced_sender, mut synced) = tokio::sync::watch::channel(false);
    let pod_events = options.metrics.observe_watch("pods", pod_watcher.events);
    let pod_forwarder = tokio::spawn(forward_pod_events(
        pod_events,
        wakers.clone(),
        synced_sender,
    ));
    reporter.report_operator("Watching the clusters' pods...");
    // client-go's WaitForCacheSync: plan nothing until the store holds every pod that exists.
    tokio::select! {
        // `.is_ok()` inside: the guard `wait_for` returns must not live across an await.
        synced = async { synced.wait_for(|synced| *synced).await.is_ok() } => {
            if !synced {
                tracing::warn!("the pod watch ended before its first list");
            }
        }
        () = shutdown.cancelled() => {
            stop_watches.cancel();
            let _ = pod_forwarder.await;
            return Ok(stopped_early);
        }
    }

    reporter.report_operator("Finding existing clusters...");
    let cluster_watcher = list_then_watch::<PostgresCluster>(
        client.clone(),
        collection_path(client.namespace()),
        options.watch.clone(),
        stop_watches.clone(),
    );
    let figures = ClusterFigures::<L>::new(client.clone(), cluster_watcher.store.clone());
    options.metrics.scrape_also(Arc::new(figures));
    let cluster_events = options
        .metrics
        .observe_watch("postgresclusters", cluster_watcher.events);
    let controller_options = ControllerOptions {
        reconcile_interval: options.reconcile_interval,
        ..ControllerOptions::default()
    };
    let worker = PostgresWorker::new(client, pods, wakers, reporter.clone(), options, layer);
    let controller = Controller::with_worker(worker, controller_options, reporter);
    let stopped = controller.run(cluster_events, shutdown).await;
    stop_watches.cancel();
    let _ = cluster_watcher.task.await;
    let _ = pod_watcher.task.await;
    let _ = pod_forwarder.await;
    Ok(stopped)
}

/// Wake the task of each pod event's cluster; say when the first list is in.
async fn forward_pod_events(
    mut events: mpsc::Receiver<Event<Pod>>,
    wakers: Wakers,
    synced: tokio::sync::watch::Sender<bool>,
) {
    while let Some(event) = events.recv().await {
        match event {
            // The first list is complete once the watch starts from its resourceVersion.
            Event::Notice(WatchNotice::Watching { .. }) => {
                synced.send_replace(true);
            }
            Event::Notice(_) => {}
            // ANCHOR: pod_events
            // Never waits: a task that is not there (not started yet, or ended) is not woken.
            Event::Added(pod) | Event::Modified(pod) | Event::Deleted(pod) => {
                if let Some(cluster) = pod.metadata.labels.get(CLUSTER_LABEL) {
                    wakers.wake(&format!("{}/{cluster}", pod.metadata.namespace));
                }
            } // ANCHOR_END: pod_events
        }
    }
}
