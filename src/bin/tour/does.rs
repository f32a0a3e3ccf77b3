//! What an act does, once its caption is printed: one write to the API server (what a learner
//! would do with kubectl), an operator started or stopped, or the tour's SQL on the primary.

use std::sync::Arc;

use postgres_operator::api::{collection_path, PostgresCluster};
use postgres_operator::backups::api::BACKUP_NOW_ANNOTATION;
use postgres_operator::backups::Backups;
use postgres_operator::client::Patch;
use postgres_operator::controller::pods::{pods_path, CLUSTER_LABEL};
use postgres_operator::controller::{run_operator, ControllerOptions};
use postgres_operator::crd;
use postgres_operator::metrics::{serve, HealthBounds};
use postgres_operator::postgres::{run_postgres_operator, PostgresOptions};
use postgres_operator::story::Reporter;

use crate::example::EXAMPLE_NAME;
use crate::scene::{Operator, Scene, Stage};
use crate::sql::Sql;
use crate::status::{last_backup_name, pod_with_address};
use crate::story::Story;
use crate::{failed, TourEnd};

pub enum Does {
    Nothing,
    /// Stop if the namespace does not exist: before anything is written in it.
    CheckNamespace,
    /// `kubectl apply -f kube/crd.yaml`, and print what it did.
    RegisterCrd,
    /// Stop if the example object exists already: the tour touches only what it created.
    RefuseExistingExample,
    /// `stages/stage03.rs`'s operator.
    StartStep03Operator,
    /// `stages/stage06.rs`'s: step 05's, acting on `spec.backup` too.
    StartStep06Operator,
    /// Create the example object as this function builds it for a namespace.
    Create(fn(&str) -> PostgresCluster),
    /// A merge patch of `spec.size`.
    Resize(i64),
    /// A patch of the scale subresource, as `kubectl scale` sends.
    Scale(i64),
    DeleteExample,
    DeletePrimaryPod,
    /// The backup-now annotation, with the value the caption showed.
    AskForBackup,
    /// Remember `status.lastBackup`, to tell the next one from it.
    NoteLastBackup,
    /// Every pod of the example at once.
    DeleteEveryPod,
    /// SQL on the primary, as the act's caption showed it.
    Sql(Sql),
    /// Stop the running operator as SIGTERM would, and wait for it.
    StopOperator,
}

impl Does {
    /// Settle what the caption shows before it is printed: where the SQL goes (the primary
    /// Service's address), and the backup-now annotation's value.
    pub async fn get_ready(&self, scene: &mut Scene) -> Result<(), TourEnd> {
        match self {
            Does::Sql(_) => {
                let Stage::Sandbox { sql: Some(route) } = &scene.stage else {
                    return Err(failed(
                        "no Postgres runs on this stage to take the tour's SQL",
                    ));
                };
                scene.sql = Some(route.target(&scene.client, &scene.primary).await?);
            }
            // Any new value asks for a backup: a timestamp, as `$(date +%s)` would give.
            Does::AskForBackup => {
                scene.backup_request = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs())
                    .to_string();
            }
            _ => {}
        }
        Ok(())
    }

    /// The writes whose answer a later report times: the scene's clock starts just before them.
    pub fn starts_clock(&self) -> bool {
        matches!(
            self,
            Does::Create(_)
                | Does::DeletePrimaryPod
                | Does::AskForBackup
                | Does::DeleteEveryPod
                | Does::Sql(Sql::SwitchWal)
        )
    }

    pub async fn run(&self, scene: &mut Scene) -> Result<(), TourEnd> {
        let client = &scene.client;
        let namespace = client.namespace();
        let cluster_path = scene.cluster_path();
        match self {
            Does::Nothing => {}
            Does::CheckNamespace => check_namespace(scene).await?,
            Does::RegisterCrd => println!("{}", crd::ensure(client).await.map_err(failed)?),
            Does::RefuseExistingExample => {
                if client.get::<serde_json::Value>(&cluster_path).await.is_ok() {
                    return Err(TourEnd::Failed {
                        message: format!(
                            "PostgresCluster {} already exists; the tour will not touch it",
                            scene.key()
                        ),
                        hint: Some("delete it, or pick another namespace with --namespace".into()),
                    });
                }
            }
            Does::StartStep03Operator | Does::StartStep06Operator => start_operator(self, scene),
            Does::Create(example) => {
                let _: PostgresCluster = client
                    .create(&collection_path(namespace), &example(namespace))
                    .await
                    .map_err(failed)?;
                scene.created_example = true;
            }
            Does::Resize(size) => {
                let resize = Patch::Merge(serde_json::json!({"spec": {"size": size}}));
                let _: PostgresCluster =
                    client.patch(&cluster_path, &resize).await.map_err(failed)?;
            }
            Does::Scale(replicas) => {
                let scale = Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}}));
                let _: serde_json::Value = client
                    .patch(&format!("{cluster_path}/scale"), &scale)
                    .await
                    .map_err(failed)?;
            }
            Does::DeleteExample => {
                let _: serde_json::Value = client.delete(&cluster_path).await.map_err(failed)?;
                scene.created_example = false;
            }
            Does::DeletePrimaryPod => {
                let primary = &scene.primary;
                let _: serde_json::Value = client
                    .delete(&format!("/api/v1/namespaces/{namespace}/pods/{primary}"))
                    .await
                    .map_err(failed)?;
            }
            Does::AskForBackup => {
                let annotate = Patch::Merge(serde_json::json!({
                    "metadata": {"annotations": {BACKUP_NOW_ANNOTATION: scene.backup_request}}
                }));
                let _: PostgresCluster = client
                    .patch(&cluster_path, &annotate)
                    .await
                    .map_err(failed)?;
            }
            Does::NoteLastBackup => {
                scene.backup_before = last_backup_name(client, &cluster_path).await;
            }
            Does::DeleteEveryPod => delete_every_pod(scene).await?,
            Does::Sql(sql) => run_sql(sql, scene).await?,
            Does::StopOperator => stop_operator(scene).await?,
        }
        Ok(())
    }
}

/// The namespace must exist before anything is written in it. A 404 says it does not; any other
/// answer (a 403 for a user who may not read namespaces) lets the tour go on and find out.
async fn check_namespace(scene: &Scene) -> Result<(), TourEnd> {
    let namespace = scene.client.namespace();
    match scene
        .client
        .get::<serde_json::Value>(&format!("/api/v1/namespaces/{namespace}"))
        .await
    {
        Err(error) if error.status_code() == Some(404) => Err(TourEnd::Failed {
            message: format!("namespace {namespace:?} does not exist on this API server"),
            hint: Some(format!(
                "create it (`kubectl create namespace {namespace}`), or pick another with --namespace"
            )),
        }),
        _ => Ok(()),
    }
}

/// Where the tour's step-06 operator serves `/metrics`: the stages' default address.
const METRICS_ADDRESS: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// The operator the stage runs, on a stop token of its own and a story of its own.
fn start_operator(which: &Does, scene: &mut Scene) {
    let (reporter, lines) = Reporter::channel();
    let stop = scene.stop_operators.child_token();
    let client = scene.client.clone();
    let task = match which {
        Does::StartStep06Operator => {
            let options = PostgresOptions {
                reconcile_interval: scene.reconcile_interval,
                ..PostgresOptions::default()
            };
            // What stages/stage06.rs serves: /metrics, /healthz and /readyz. Port 8080 as the
            // stage's default, or any free one when another operator holds it.
            let metrics = Arc::clone(&options.metrics);
            let bounds = HealthBounds::for_operator(options.reconcile_interval, &options.watch);
            let serving = stop.clone();
            // What stages/stage06.rs runs: stage 05's operator with the backup layer.
            let operator =
                run_postgres_operator(client, options, Backups::default(), reporter, stop.clone());
            tokio::spawn(async move {
                let mut served = serve(
                    METRICS_ADDRESS,
                    Arc::clone(&metrics),
                    bounds,
                    serving.clone(),
                )
                .await;
                if served.is_err() {
                    served = serve(([127, 0, 0, 1], 0).into(), metrics, bounds, serving).await;
                }
                match served {
                    Ok(server) => println!(
                        "   While it runs: curl http://{}/metrics   (members, primary, replication lag; /healthz, /readyz)",
                        server.address
                    ),
                    Err(error) => println!("   (no /metrics this time: {error})"),
                }
                operator.await.map_err(|error| error.to_string())
            })
        }
        _ => {
            let options = ControllerOptions {
                reconcile_interval: scene.reconcile_interval,
                ..ControllerOptions::default()
            };
            let operator = run_operator(client, options, reporter, stop.clone());
            tokio::spawn(async move { operator.await.map_err(|error| error.to_string()) })
        }
    };
    scene.operator = Some(Operator { stop, task });
    scene.story = Story::new(lines);
}

/// Stop the operator as SIGTERM would and wait for it (step 03's and step 06's curtains), then
/// print the story lines it told while stopping; the report says how many cluster tasks it
/// stopped.
async fn stop_operator(scene: &mut Scene) -> Result<(), TourEnd> {
    let Some(operator) = scene.operator.take() else {
        return Err(failed("no operator is running to stop"));
    };
    operator.stop.cancel();
    let stopped = operator
        .task
        .await
        .map_err(|error| failed(format!("the operator task failed: {error}")))?
        .map_err(failed)?;
    scene.story.rest();
    scene.tasks_stopped = stopped.tasks_stopped;
    Ok(())
}

/// `kubectl delete pods -l ...`: list the example's pods, delete each, say so.
async fn delete_every_pod(scene: &Scene) -> Result<(), TourEnd> {
    let client = &scene.client;
    let namespace = client.namespace();
    let selector = format!("{CLUSTER_LABEL}={EXAMPLE_NAME}");
    let pods: serde_json::Value = client
        .get(&pods_path(namespace, &selector))
        .await
        .map_err(failed)?;
    let names: Vec<&str> = pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pod| pod["metadata"]["name"].as_str())
        .collect();
    for name in names {
        let deleted = client
            .delete::<serde_json::Value>(&format!("/api/v1/namespaces/{namespace}/pods/{name}"))
            .await;
        match deleted {
            Ok(_) => println!("pod \"{name}\" deleted"),
            // 404: gone already (a finished backup pod the operator collected meanwhile).
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => return Err(failed(error)),
        }
    }
    Ok(())
}

/// Run `sql` where [`Does::get_ready`] aimed it, printing the operator's lines meanwhile; then
/// say who answered a write, check the notes read back, or keep the segment switched to.
async fn run_sql(sql: &Sql, scene: &mut Scene) -> Result<(), TourEnd> {
    let Some(target) = &scene.sql else {
        return Err(failed("the tour's SQL has nowhere to go"));
    };
    let client = &scene.client;
    let text = sql.text();
    match sql {
        Sql::CreateTableAndWrite(_) | Sql::Write(_) => {
            let answer = scene
                .story
                .while_printing(target.run(client, &text))
                .await?;
            let server = pod_with_address(client, answer.trim()).await;
            println!("   written: answered by {} ({server})", answer.trim());
        }
        Sql::ReadRows(expected) => {
            let answer = scene
                .story
                .while_printing(target.run_until_answered(client, &text))
                .await?;
            // `-qAt`: one `note|address` line per row.
            let rows: Vec<(&str, &str)> = answer
                .lines()
                .filter(|line| !line.is_empty())
                .map(|line| line.split_once('|').unwrap_or((line, "")))
                .collect();
            let notes: Vec<&str> = rows.iter().map(|(note, _)| *note).collect();
            let address = rows.first().map_or("", |(_, address)| *address);
            let server = pod_with_address(client, address).await;
            let quoted: Vec<String> = notes.iter().map(|note| format!("{note:?}")).collect();
            println!(
                "   read back: {}, answered by {address} ({server})",
                quoted.join(", ")
            );
            if notes != *expected {
                return Err(failed(format!(
                    "the rows read back are {notes:?}, not {expected:?}"
                )));
            }
        }
        Sql::SwitchWal => {
            let segment = scene
                .story
                .while_printing(target.run(client, &text))
                .await?;
            scene.segment = segment.trim().to_string();
        }
    }
    Ok(())
}
