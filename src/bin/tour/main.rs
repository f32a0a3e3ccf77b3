//! The one-command tour: `cargo run`. It plays the whole workshop at once — register the type,
//! watch, run the step-03 operator on a cluster, then the step-05 operator (step 04's plus
//! backups) for real: a seed primary and its replicas, a row written through the primary Service,
//! the primary deleted, a failover, the row read back; then a base backup, a second row archived,
//! every pod deleted at once, and the cluster restored from its backups with both rows — and
//! prints what the operators say at each step.
//!
//! WORKSHOP.md, "The whole workshop in one command". Nothing to install beyond the Rust
//! toolchain: with no flags the tour starts the sandbox API server (the `sandbox` binary, built
//! first when run through `cargo run`) as a child process on 127.0.0.1, and stops it at the end.
//! Two programs talking HTTP, as an operator and kube-apiserver are: the operator crate never
//! links the sandbox. Where PostgreSQL and bubblewrap are installed the sandbox runs the pods as
//! real PostgreSQL servers; elsewhere they are simulated, the tour says so, and skips what needs
//! a real server (the SQL, the promotion, the backup and the restore).
//!
//! ```text
//! cargo run                                  # the tour on a sandbox of its own
//! cargo run -- --sandbox-runtime simulated   # the same with simulated pods (no PostgreSQL needed)
//! cargo run -- --reconcile-interval 8        # the original's 8 s timer (default here: 2 s)
//! kubectl proxy --port 8001                  # or a real cluster, through kubectl proxy (own terminal):
//! cargo run -- --server http://127.0.0.1:8001 --namespace default
//! cargo run -- --real-cluster                # or whatever cluster kubectl would use
//! ```
//!
//! On a real cluster the tour says first what it will do, then does only that: it registers the
//! CRD if missing (and leaves it), creates `example-postgresql-cluster` in the namespace, resizes
//! it, and deletes it again — also when stopped with Ctrl-C half-way, and then says what it
//! removed. It refuses to start if an object of that name already exists, or if the namespace
//! does not. Steps 04 and 05, whose operator starts pods, play on the tour's own sandbox only.
//!
//! The operators it runs are the ones the stages run: [`run_operator`] (`stages/stage03.rs`) and
//! [`run_postgres_operator`] with `backups` on (`stages/stage05.rs`). The tour waits for the
//! operator's own lines, or polls the cluster's status, after each act (with a deadline) rather
//! than sleeping. `cargo run -- --help` lists the flags.

mod example;
mod sandbox;
mod sql;
mod status;
mod story;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use postgres_operator::api::{
    collection_path, object_path, PostgresCluster, BACKUP_NOW_ANNOTATION, CRD_NAME,
};
use postgres_operator::client::{Client, Patch};
use postgres_operator::config::{Config, ConfigArgs, CONNECTION_ORDER_HELP};
use postgres_operator::controller::pods::{pods_path, CLUSTER_LABEL};
use postgres_operator::controller::{run_operator, ControllerOptions, ControllerStopped};
use postgres_operator::crd::{self, DEFAULT_ESTABLISHED_TIMEOUT};
use postgres_operator::postgres::backup::{backup_claim_name, ARCHIVE_TIMEOUT_SECONDS};
use postgres_operator::postgres::manifests::primary_service_name;
use postgres_operator::postgres::{run_postgres_operator, PostgresOptions};
use postgres_operator::process::{
    cancel_on_signal, connect, exit_error, init_logging, parse_seconds,
};
use postgres_operator::story::Reporter;
use tokio_util::sync::CancellationToken;

use crate::example::{
    example_cluster, example_cluster_with_backups, BACKUP_KEEP, BACKUP_STORAGE_SIZE, EXAMPLE_NAME,
    EXAMPLE_SIZE, GROWN_SIZE, RESIZED_SIZE,
};
use crate::sandbox::{PodRuntime, SandboxProcess};
use crate::sql::SqlRoute;
use crate::status::{
    last_backup_name, new_last_backup, new_primary, pod_with_address, ready_members,
    restored_primary, PhaseLog,
};
use crate::story::Story;

/// How long one act may take before the tour gives up on the operator's reply.
const ACT_DEADLINE: Duration = Duration::from_secs(15);
/// How long a step-04 act may take: real pods run initdb or copy the primary with
/// pg_basebackup, on a machine that may be busy with other work.
const POD_ACT_DEADLINE: Duration = Duration::from_secs(180);
/// The table the tour writes its rows to, and the rows: one before the failover, one after the
/// base backup (so only the archived WAL can bring it back).
const TOUR_TABLE: &str = "tour";
const TOUR_NOTE: &str = "written before the failover";
const SECOND_NOTE: &str = "written after the base backup";

/// tour: the whole workshop in one command (`cargo run`). Registers the PostgresCluster type,
/// runs the step-03 operator on a cluster, then the step-05 operator (step 04's plus backups):
/// creates a Postgres cluster with backups, grows it, writes a row through its primary Service,
/// deletes the primary pod, watches the failover and reads the row back; takes a base backup,
/// writes and archives a second row, deletes every pod and reads both rows back from the restored
/// cluster. Prints what the operators say at each step. With no flags it runs on a sandbox API
/// server of its own; with --server or --real-cluster on a real one (steps 01-03 only), where it
/// removes what it created.
#[derive(Parser)]
#[command(after_help = format!("{CONNECTION_ORDER_HELP}\n\n{EXAMPLES}"))]
struct TourFlags {
    /// Use the cluster the connection flags, in-cluster or kubeconfig point at, instead of a
    /// sandbox of its own (--server implies it)
    #[arg(long)]
    real_cluster: bool,
    /// The operator's reconcile timer, in seconds (2 here, so the tour shows a tick without a long
    /// wait; the original's is 8)
    #[arg(long, value_name = "SECS", default_value = "2", value_parser = parse_seconds, allow_negative_numbers = true)]
    reconcile_interval: Duration,
    /// What runs the pods of the tour's own sandbox: `processes` (real PostgreSQL; needs
    /// PostgreSQL and bubblewrap) or `simulated` (a status only). Default: the sandbox's choice,
    /// processes where they can run
    #[arg(long, value_name = "KIND", value_parser = ["processes", "simulated"], conflicts_with_all = ["real_cluster", "server"])]
    sandbox_runtime: Option<String>,
    #[command(flatten)]
    connection: ConfigArgs,
}

const EXAMPLES: &str = "\
Examples:
  tour                                        # on a sandbox of its own: nothing to set up
  tour --sandbox-runtime simulated            # the same, with pods that only get a status
  tour --server http://127.0.0.1:8001         # a real cluster, through kubectl proxy
  tour --real-cluster --namespace scratch     # whatever cluster kubectl would use

Exit status: 0 the tour ran or was stopped by SIGTERM/Ctrl-C, 1 something failed (the message says
what), 2 bad flags";

fn main() -> ExitCode {
    let flags = TourFlags::parse();
    // The tour's story is on stdout; keep stderr to warnings unless RUST_LOG asks for more.
    // Set before the runtime starts any thread: the environment is not thread-safe to change.
    if std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    init_logging();
    match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime.block_on(tour(flags)),
        Err(error) => exit_error(&format!("starting the tokio runtime: {error}"), None),
    }
}

async fn tour(flags: TourFlags) -> ExitCode {
    let started = Instant::now();
    let shutdown = cancel_on_signal();

    // The stage: a sandbox of our own, unless told to use a real API server.
    let (client, sandbox) = if flags.real_cluster || flags.connection.server.is_some() {
        match connect(&flags.connection).await {
            Ok(client) => (client, None),
            Err(exit) => return exit,
        }
    } else {
        let sandbox = match SandboxProcess::start(flags.sandbox_runtime.as_deref()).await {
            Ok(sandbox) => sandbox,
            Err(error) => return exit_error(&format!("starting the sandbox: {error}"), None),
        };
        let client = match Config::from_url(&sandbox.url).map(Client::new) {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => return exit_error(&error, None),
            Err(error) => return exit_error(&error, None),
        };
        (client, Some(sandbox))
    };

    let namespace = client.namespace().to_string();
    match &sandbox {
        Some(sandbox) => {
            println!(
                "== The stage: a sandbox API server at {} (no cluster needed)",
                sandbox.url
            );
            // The sandbox's own banner says what runs its pods.
            println!("   {}", sandbox.runtime.banner());
        }
        None => {
            println!(
                "== The stage: the API server at {}, namespace {namespace}. This tour will:",
                client.server()
            );
            println!("   - register the CustomResourceDefinition {CRD_NAME} if it is missing, or update it if its schema is older (and leave it),");
            println!("   - create the PostgresCluster {namespace}/{EXAMPLE_NAME}, resize it, and delete it.");
            println!(
                "   Nothing else is created: the step-03 operator only reports what it would do."
            );
            println!("   Steps 04 and 05 (their operator starts pods) play on the tour's own sandbox only: `cargo run` with no flags.");
        }
    }

    let created_example = Arc::new(AtomicBool::new(false));
    // The operators stop on Ctrl-C/SIGTERM, or at their curtain: child tokens.
    let stop_operators = shutdown.child_token();
    let runtime = sandbox.as_ref().map(|sandbox| &sandbox.runtime);
    let outcome = tokio::select! {
        outcome = play(&client, &flags, runtime, created_example.clone(), stop_operators) => outcome,
        () = shutdown.cancelled() => Err(TourEnd::Interrupted),
    };
    // A signal also stops the operator (a child token), and `play` may see that first and call it
    // a failure: whichever branch won, a stop asked for is a stop.
    let outcome = match outcome {
        Err(TourEnd::Failed { .. }) if shutdown.is_cancelled() => Err(TourEnd::Interrupted),
        other => other,
    };

    // Stopped half-way (a signal, a failed act): leave no example object behind, and say so.
    if outcome.is_err() {
        clean_up(&client, created_example.load(Ordering::SeqCst)).await;
    }
    if let Some(sandbox) = sandbox {
        sandbox.stop().await;
    }
    match outcome {
        Ok(()) => {
            println!(
                "The tour took {:.1} s. That was the workshop; now read WORKSHOP.md.",
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        // SIGTERM is Kubernetes' normal stop, Ctrl-C a person's: a clean stop either way.
        Err(TourEnd::Interrupted) => ExitCode::SUCCESS,
        Err(TourEnd::Failed { message, hint }) => exit_error(&message, hint),
    }
}

enum TourEnd {
    Failed {
        message: String,
        hint: Option<String>,
    },
    Interrupted,
}

/// Stop an operator task as SIGTERM would and wait for it (step 03's and step 05's curtains),
/// then print the story lines it told while stopping: how many cluster tasks it stopped.
async fn stop_and_wait<E: std::fmt::Display>(
    stop: &CancellationToken,
    operator: tokio::task::JoinHandle<Result<ControllerStopped, E>>,
    story: &mut Story,
) -> Result<usize, TourEnd> {
    stop.cancel();
    let stopped = operator
        .await
        .map_err(|error| failed(format!("the operator task failed: {error}")))?
        .map_err(failed)?;
    story.rest().await;
    Ok(stopped.tasks_stopped)
}

/// For `.map_err(failed)?`: the error's own message says which step failed.
fn failed(error: impl std::fmt::Display) -> TourEnd {
    TourEnd::Failed {
        message: error.to_string(),
        hint: None,
    }
}

/// After a stop half-way: delete the example object if the tour created it, and tell what was
/// removed and what was left (the CRD stays, as announced).
async fn clean_up(client: &Client, created_example: bool) {
    let key = format!("{}/{EXAMPLE_NAME}", client.namespace());
    if !created_example {
        println!(
            "== Stopped half-way: the tour had created no PostgresCluster; nothing to clean up"
        );
        return;
    }
    let path = object_path(client.namespace(), EXAMPLE_NAME);
    match client.delete::<serde_json::Value>(&path).await {
        Ok(_) => println!(
            "== Stopped half-way: deleted the PostgresCluster {key} the tour had created"
        ),
        Err(error) => eprintln!(
            "error: stopped half-way, but could not delete the PostgresCluster {key} the tour created: {error}\n\
             hint: delete it yourself: kubectl delete pgc {EXAMPLE_NAME} -n {}",
            client.namespace()
        ),
    }
}

/// The namespace must exist before anything is written in it. A 404 says it does not; any other
/// answer (a 403 for a user who may not read namespaces) lets the tour go on and find out.
async fn check_namespace(client: &Client) -> Result<(), TourEnd> {
    let namespace = client.namespace();
    match client
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

/// The workshop, act by act.
async fn play(
    client: &Client,
    flags: &TourFlags,
    runtime: Option<&PodRuntime>,
    created_example: Arc<AtomicBool>,
    stop_operators: CancellationToken,
) -> Result<(), TourEnd> {
    let namespace = client.namespace().to_string();
    let key = format!("{namespace}/{EXAMPLE_NAME}");
    check_namespace(client).await?;

    println!("== Step 01: kubectl apply -f kube/crd.yaml   (register the PostgresCluster type)");
    println!("{}", crd::ensure(client).await.map_err(failed)?);
    crd::wait_established(client, DEFAULT_ESTABLISHED_TIMEOUT)
        .await
        .map_err(failed)?;
    println!("CustomResourceDefinition is Established");

    let existing = client
        .get::<serde_json::Value>(&object_path(&namespace, EXAMPLE_NAME))
        .await;
    if existing.is_ok() {
        return Err(TourEnd::Failed {
            message: format!("PostgresCluster {key} already exists; the tour will not touch it"),
            hint: Some("delete it, or pick another namespace with --namespace".to_string()),
        });
    }

    println!("== Step 02: cargo run --bin stage02   (list the clusters, then watch from the list's resourceVersion)");
    let (reporter, lines) = Reporter::channel();
    let stop_operator = stop_operators.child_token();
    let options = ControllerOptions {
        reconcile_interval: flags.reconcile_interval,
        ..ControllerOptions::default()
    };
    let operator = tokio::spawn(run_operator(
        client.clone(),
        options,
        reporter,
        stop_operator.clone(),
    ));
    let mut story = Story { lines };
    story.until(None, "Starting at watchVersion").await?;
    println!(
        "== Step 03: cargo run --bin stage03   (the operator: one task per cluster, each reconciling every {} s)",
        flags.reconcile_interval.as_secs_f64()
    );

    println!("== Act 1: kubectl create -f kube/example-postgres-cluster.yaml");
    let example = example_cluster(&namespace);
    let _: PostgresCluster = client
        .create(&collection_path(&namespace), &example)
        .await
        .map_err(failed)?;
    created_example.store(true, Ordering::SeqCst);
    story
        .until(Some(&key), "PLACEHOLDER: Start cluster!")
        .await?;

    println!(
        "== Interlude: the reconcile timer fires every {} s, whatever else happens",
        flags.reconcile_interval.as_secs_f64()
    );
    // A tick can be up to one interval away.
    story
        .until_within(
            Some(&key),
            "PLACEHOLDER: disaster recovery!",
            flags.reconcile_interval + ACT_DEADLINE,
        )
        .await?;

    println!(
        "== Act 2: kubectl patch pgc {EXAMPLE_NAME} --type merge -p '{{\"spec\":{{\"size\":{RESIZED_SIZE}}}}}'"
    );
    let resize = Patch::Merge(serde_json::json!({"spec": {"size": RESIZED_SIZE}}));
    let _: PostgresCluster = client
        .patch(&object_path(&namespace, EXAMPLE_NAME), &resize)
        .await
        .map_err(failed)?;
    story.until(Some(&key), "spec update").await?;

    println!("== Act 3: kubectl delete pgc {EXAMPLE_NAME}");
    let _: serde_json::Value = client
        .delete(&object_path(&namespace, EXAMPLE_NAME))
        .await
        .map_err(failed)?;
    created_example.store(false, Ordering::SeqCst);
    story.until(Some(&key), "cluster task ended").await?;

    println!(
        "{}",
        match runtime {
            Some(_) => "== Curtain for step 03: stopping its operator, as SIGTERM would",
            None => "== Curtain: stopping the operator, as SIGTERM would",
        }
    );
    let tasks_stopped = stop_and_wait(&stop_operator, operator, &mut story).await?;
    print!("operator stopped ({tasks_stopped} cluster tasks left to stop)");
    match runtime {
        Some(runtime) => {
            println!();
            play_steps_04_and_05(client, flags, runtime, created_example, stop_operators).await
        }
        None => {
            println!(
                ". Steps 04 and 05 start pods: try them on the tour's own sandbox (`cargo run`)."
            );
            Ok(())
        }
    }
}

/// Steps 04 and 05 on the tour's own sandbox: the operator that acts. Create (with backups),
/// grow, write a row through the primary Service, lose the primary, fail over, read the row
/// back; then a base backup, a second row archived, every pod lost, the restore, both rows read
/// back; delete.
async fn play_steps_04_and_05(
    client: &Client,
    flags: &TourFlags,
    runtime: &PodRuntime,
    created_example: Arc<AtomicBool>,
    stop_operators: CancellationToken,
) -> Result<(), TourEnd> {
    let namespace = client.namespace().to_string();
    let key = format!("{namespace}/{EXAMPLE_NAME}");
    println!("== Steps 04 and 05: cargo run --bin stage05   (the homework, for real: a seed, replicas, Services, failover; then backups and disaster recovery. Stage 05's operator is stage 04's plus backups)");
    let sql = SqlRoute::for_runtime(runtime).await;
    match &sql {
        None => println!(
            "   The pods are simulated: the operator acts all the same, but no Postgres runs in them, so the SQL acts are skipped, the failover stops at its first question to Postgres, and a backup pod never finishes (nothing runs pg_basebackup)."
        ),
        Some(SqlRoute::HostPsql(psql)) => println!(
            "   The pods are real PostgreSQL servers; the tour's SQL goes through the primary Service with this host's {}.",
            psql.display()
        ),
        Some(SqlRoute::Exec) => println!(
            "   The pods are real PostgreSQL servers; this host has no psql, so the tour's SQL goes through pods/exec into the primary pod (not through its Service)."
        ),
    }

    let (reporter, lines) = Reporter::channel();
    let options = PostgresOptions {
        reconcile_interval: flags.reconcile_interval,
        // What stages/stage05.rs turns on: act on spec.backup.
        backups: true,
        ..PostgresOptions::default()
    };
    let stop_operator = stop_operators.child_token();
    let operator = tokio::spawn(run_postgres_operator(
        client.clone(),
        options,
        reporter,
        stop_operator.clone(),
    ));
    let mut story = Story { lines };
    story.until(None, "Starting at watchVersion").await?;
    let cluster_path = object_path(&namespace, EXAMPLE_NAME);

    println!("== Act 4: kubectl create -f kube/example-postgres-cluster.yaml, with spec.backup {{storageSize: {BACKUP_STORAGE_SIZE}, keep: {BACKUP_KEEP}}} added   (size {EXAMPLE_SIZE}: a seed primary, then replicas cloned from it one at a time; every member archives its WAL to the claim {})", backup_claim_name(EXAMPLE_NAME));
    let created = Instant::now();
    let _: PostgresCluster = client
        .create(
            &collection_path(&namespace),
            &example_cluster_with_backups(&namespace),
        )
        .await
        .map_err(failed)?;
    created_example.store(true, Ordering::SeqCst);
    let path = cluster_path.as_str();
    let primary = story
        .until_state(&format!("{EXAMPLE_SIZE} ready members"), || {
            ready_members(client, path, EXAMPLE_SIZE)
        })
        .await?;
    println!(
        "== {EXAMPLE_SIZE} of {EXAMPLE_SIZE} members ready, {primary} the primary, {:.1} s after the create",
        created.elapsed().as_secs_f64()
    );

    println!("== Act 5: kubectl scale pgc {EXAMPLE_NAME} --replicas {GROWN_SIZE}   (through the scale subresource)");
    let scale = Patch::Merge(serde_json::json!({"spec": {"replicas": GROWN_SIZE}}));
    let _: serde_json::Value = client
        .patch(&format!("{cluster_path}/scale"), &scale)
        .await
        .map_err(failed)?;
    story
        .until_state(&format!("{GROWN_SIZE} ready members"), || {
            ready_members(client, path, GROWN_SIZE)
        })
        .await?;
    println!("== {GROWN_SIZE} of {GROWN_SIZE} members ready");

    let service = primary_service_name(EXAMPLE_NAME);
    let write = format!(
        "CREATE TABLE {TOUR_TABLE} (note text); INSERT INTO {TOUR_TABLE} VALUES ('{TOUR_NOTE}') RETURNING inet_server_addr()"
    );
    match &sql {
        None => println!(
            "== Act 6: (skipped: write a row through the Service {service}; the pods are simulated, no Postgres answers)"
        ),
        Some(route) => {
            write_row(client, &mut story, route, &primary, 6, &write).await?;
        }
    }

    println!("== Act 7: kubectl delete pod {primary}   (lose the primary: the operator waits until it has stopped, then promotes the most advanced replica)");
    let deleted = Instant::now();
    let _: serde_json::Value = client
        .delete(&format!("/api/v1/namespaces/{namespace}/pods/{primary}"))
        .await
        .map_err(failed)?;
    match &sql {
        None => {
            story
                .until_within(Some(&key), "cannot ask", POD_ACT_DEADLINE)
                .await?;
            println!("== The failover stops here: a simulated pod runs no Postgres to ask for its WAL position or to promote. With PostgreSQL and bubblewrap installed, a replica is promoted at this point.");
            println!("== Act 8: (skipped: read the row back through the Service; the pods are simulated)");
            println!("== Acts 9 to 12: (skipped: step 05's base backup, a second row archived, every pod deleted and the cluster restored with both rows; the pods are simulated, no Postgres runs pg_basebackup, archives its WAL or replays it)");
        }
        Some(route) => {
            let old = primary.as_str();
            let promoted = story
                .until_state("a new primary, ready", || new_primary(client, path, old))
                .await?;
            println!(
                "== {promoted} is the new primary, ready {:.1} s after the delete",
                deleted.elapsed().as_secs_f64()
            );
            read_rows(client, &mut story, route, &promoted, 8, &[TOUR_NOTE]).await?;
            play_disaster_recovery(client, &mut story, route, &promoted).await?;
        }
    }

    println!("== Act 13: kubectl delete pgc {EXAMPLE_NAME}   (the garbage collector deletes what it owns)");
    let _: serde_json::Value = client.delete(&cluster_path).await.map_err(failed)?;
    created_example.store(false, Ordering::SeqCst);
    story
        .until(Some(&key), "cluster is deleted by the user")
        .await?;

    println!("== Curtain: stopping the step-05 operator, as SIGTERM would");
    let tasks_stopped = stop_and_wait(&stop_operator, operator, &mut story).await?;
    println!("operator stopped ({tasks_stopped} cluster tasks left to stop)");
    Ok(())
}

/// Step 05's acts, on real PostgreSQL, with `primary` the primary after the failover: a base
/// backup on request, a second row written and its WAL segment archived, every pod deleted at
/// once, the cluster restored from the backup and the archive, both rows read back, the replicas
/// cloned again.
async fn play_disaster_recovery(
    client: &Client,
    story: &mut Story,
    route: &SqlRoute,
    primary: &str,
) -> Result<(), TourEnd> {
    let namespace = client.namespace().to_string();
    let key = format!("{namespace}/{EXAMPLE_NAME}");
    let cluster_path = object_path(&namespace, EXAMPLE_NAME);
    let path = cluster_path.as_str();
    let claim = backup_claim_name(EXAMPLE_NAME);
    println!("== Step 05: backups and disaster recovery   (the example's spec.backup: every WAL segment the primary finishes goes to the claim {claim}, base backups too)");

    // Any new value asks for a backup: a timestamp, as `$(date +%s)` would give.
    let requested = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
        .to_string();
    println!("== Act 9: kubectl annotate pgc {EXAMPLE_NAME} {BACKUP_NOW_ANNOTATION}={requested} --overwrite   (a base backup now, by a backup pod, from a replica where one is ready: since the failover the cluster writes on a new timeline)");
    let asked = Instant::now();
    let annotate = Patch::Merge(serde_json::json!({
        "metadata": {"annotations": {BACKUP_NOW_ANNOTATION: requested}}
    }));
    let _: PostgresCluster = client.patch(path, &annotate).await.map_err(failed)?;
    // One backup pod at a time: one already running (the first, taken once the cluster was
    // steady) finishes, and is recorded, before the operator starts the one asked for.
    story
        .until_within(
            Some(&key),
            "asked for by the backup-now annotation",
            POD_ACT_DEADLINE,
        )
        .await?;
    let before = last_backup_name(client, path).await;
    let backup = story
        .until_state("a new status.lastBackup", || {
            new_last_backup(client, path, before.as_deref())
        })
        .await?;
    println!(
        "== status.lastBackup: {} ({:.1} MB, from WAL position {}), {:.1} s after the annotation",
        backup.name,
        backup.bytes as f64 / 1e6,
        backup.lsn,
        asked.elapsed().as_secs_f64()
    );

    let write =
        format!("INSERT INTO {TOUR_TABLE} VALUES ('{SECOND_NOTE}') RETURNING inet_server_addr()");
    write_row(client, story, route, primary, 10, &write).await?;
    let target = route.target(client, primary).await?;
    let switch = "SELECT pg_walfile_name(pg_switch_wal())";
    println!("   The row is in a WAL segment the primary has not finished; only finished segments are archived. archive_timeout finishes one within {ARCHIVE_TIMEOUT_SECONDS} s, and a disaster before then loses what it holds. pg_switch_wal() finishes it now:");
    println!("   {}", target.command_line(switch));
    let switched = Instant::now();
    let segment = story.while_printing(target.run(client, switch)).await?;
    let segment = segment.trim().to_string();
    let archived = "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver";
    story
        .until_state(&format!("{segment} archived"), || async {
            let last = target.run(client, archived).await.ok()?;
            // Segment names sort as their positions: timeline, then log and segment numbers.
            (last.trim() >= segment.as_str()).then_some(())
        })
        .await?;
    println!(
        "   {segment} archived to {claim} {:.1} s after the switch (pg_stat_archiver.last_archived_wal)",
        switched.elapsed().as_secs_f64()
    );

    let selector = format!("{CLUSTER_LABEL}={EXAMPLE_NAME}");
    println!("== Act 11: kubectl delete pods -l {selector}   (every pod at once: no replica is left to promote; the operator restores the newest base backup and replays the archived WAL)");
    let lost = Instant::now();
    let pods: serde_json::Value = client
        .get(&pods_path(&namespace, &selector))
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
    let phases = PhaseLog::default();
    let (restored, reached) = story
        .until_state_noting("a restored primary, ready", || {
            restored_primary(client, path, &phases)
        })
        .await?;
    println!(
        "== Restored in {:.1} s: {restored} is the primary, {reached}",
        lost.elapsed().as_secs_f64()
    );

    read_rows(
        client,
        story,
        route,
        &restored,
        12,
        &[TOUR_NOTE, SECOND_NOTE],
    )
    .await?;
    story
        .until_state(&format!("{GROWN_SIZE} ready members"), || {
            ready_members(client, path, GROWN_SIZE)
        })
        .await?;
    println!(
        "== {GROWN_SIZE} of {GROWN_SIZE} members ready again, {:.1} s after the delete: the replicas cloned from the restored primary",
        lost.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Act `act`: run `write` (which returns `inet_server_addr()`) on the primary.
async fn write_row(
    client: &Client,
    story: &mut Story,
    route: &SqlRoute,
    primary: &str,
    act: u32,
    write: &str,
) -> Result<(), TourEnd> {
    let target = route.target(client, primary).await?;
    println!("== Act {act}: {}", target.command_line(write));
    let answer = story.while_printing(target.run(client, write)).await?;
    let server = pod_with_address(client, answer.trim()).await;
    println!("   written: answered by {} ({server})", answer.trim());
    Ok(())
}

/// Act `act`: read the tour's rows back from the primary, `primary`; they must be `expected`, in
/// the order written.
async fn read_rows(
    client: &Client,
    story: &mut Story,
    route: &SqlRoute,
    primary: &str,
    act: u32,
    expected: &[&str],
) -> Result<(), TourEnd> {
    let read = format!("SELECT note, inet_server_addr() FROM {TOUR_TABLE}");
    let target = route.target(client, primary).await?;
    println!("== Act {act}: {}", target.command_line(&read));
    let answer = story
        .while_printing(target.run_until_answered(client, &read))
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
    if notes != expected {
        return Err(failed(format!(
            "the rows read back are {notes:?}, not {expected:?}"
        )));
    }
    Ok(())
}
