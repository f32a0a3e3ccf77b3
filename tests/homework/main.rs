//! Step 03's homework, checked (WORKSHOP.md, step 03, "Try it yourself"). One check, two uses:
//!
//! - `check_my_homework` checks *your* working copy: the stage 03 cargo built from it runs
//!   against a sandbox whose pods are real PostgreSQL servers (the process runtime), and the check
//!   says what is missing. Ignored by a plain `cargo test`, since an unchanged copy fails it; run
//!   it with `cargo test --test homework -- --ignored`.
//! - `step03_homework_solution_launches_grows_and_shrinks_the_pods` keeps the worked solution
//!   (`tests/homework/step03-solution.patch`, a change to `src/controller/cluster.rs`, the one
//!   file the homework names) tested: it applies the patch to a copy of this checkout, builds that
//!   copy's stage 03, and runs the same check. When the code around the homework changes, the
//!   patch no longer applies and this test says so.
//!
//! A test binary of its own, so that its build of the copy never runs beside the timed tests of
//! the other binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres_operator::api::{object_path, ObjectList, PostgresCluster};
use postgres_operator::client::{Client, Patch};
use postgres_operator::controller::pods::{label_selector, pod_labels, Pod};
use sandbox::SandboxOptions;
use test_support::{
    create_cluster, operator_command, plain_client, register_crd, start_process_sandbox, within,
    Kubectl,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const CLUSTER: &str = "homework";

/// The homework in your working copy, checked: `cargo test --test homework -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "checks your homework; an unchanged copy fails it: cargo test --test homework -- --ignored"]
async fn check_my_homework() {
    match check_homework(env!("CARGO_BIN_EXE_stage03")).await {
        Ok(done) => println!("{done}"),
        Err(missing) => panic!("\n\nThe homework is not done yet.\n\n{missing}\n"),
    }
}

/// The homework's worked solution, applied as WORKSHOP.md says, launches the seed, grows the
/// cluster one pod per tick to its size, each pod a real PostgreSQL server, and shrinks it when
/// the size goes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step03_homework_solution_launches_grows_and_shrinks_the_pods() {
    let copy = tempfile::tempdir().expect("a folder for the copy");
    let copy_path = copy.path().to_path_buf();
    let stage03 = tokio::task::spawn_blocking(move || build_solution(&copy_path))
        .await
        .expect("the build ran");
    let stage03 = stage03.to_str().expect("a UTF-8 path").to_string();
    if let Err(missing) = check_homework(&stage03).await {
        panic!("the worked solution does not pass the homework's check:\n{missing}");
    }
}

/// Run `stage03` against a sandbox of real PostgreSQL pods, create a cluster of 3, then resize
/// it to 1: Ok says what was seen, Err what is missing, with where in the code it goes.
async fn check_homework(stage03: &str) -> Result<String, String> {
    let sandbox = start_process_sandbox(SandboxOptions::default()).await;
    let client = plain_client(&sandbox.url());
    register_crd(&client).await;
    let kubectl = Kubectl::new(&sandbox.url());
    let mut operator = operator_command(stage03, &sandbox.url())
        .args(["--reconcile-interval", "0.5"])
        .spawn()
        .map_err(|error| format!("{stage03} did not start: {error}"))?;
    let said = Arc::new(Mutex::new(Vec::new()));
    if let Some(stdout) = operator.stdout.take() {
        let said = Arc::clone(&said);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                said.lock().unwrap_or_else(|e| e.into_inner()).push(line);
            }
        });
    }
    let outcome = launch_grow_and_shrink(&client, &kubectl, &said).await;
    let _ = operator.kill().await;
    sandbox.shutdown().await;
    outcome
}

async fn launch_grow_and_shrink(
    client: &Client,
    kubectl: &Kubectl,
    said: &Mutex<Vec<String>>,
) -> Result<String, String> {
    let cluster = create_cluster(client, "default", CLUSTER, 3).await;
    let stage03_said = |part: &str| {
        let said = said.lock().unwrap_or_else(|e| e.into_inner());
        said.iter().any(|line| line.contains(part))
    };

    // 1. The seed: any pod at all, in the cluster's namespace.
    let first = within(Duration::from_secs(10), || async {
        let pods = all_pods(client).await;
        (!pods.is_empty()).then_some(pods)
    })
    .await;
    let Some(pods) = first else {
        let placeholder = if stage03_said("PLACEHOLDER: disaster recovery!") {
            " Stage 03 still says `PLACEHOLDER: disaster recovery!`."
        } else {
            ""
        };
        return Err(format!(
            "Missing: the seed pod. No pod appeared within 10 s of creating cluster `{CLUSTER}` (size 3).{placeholder}\n\
             Where `ClusterTask::reconcile` (src/controller/cluster.rs) finds no member running, make a `pods::Pod` \
             and create it with `self.pods.create_pod(namespace, &pod)`."
        ));
    };

    // 2. Each pod as the text asks.
    let problems: Vec<String> = pods
        .iter()
        .flat_map(|pod| pod_problems(pod, &cluster))
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "Missing, in the pods stage 03 made:\n- {}",
            problems.join("\n- ")
        ));
    }

    // 3. Real PostgreSQL in it, and 4. the cluster grown to its size, one pod per tick.
    let size = 3;
    let grown = within(Duration::from_secs(60), || async {
        let running = running_pods(client, &cluster).await;
        (running.len() == size).then_some(running)
    })
    .await;
    let Some(grown) = grown else {
        let running = running_pods(client, &cluster).await;
        let placeholder = if stage03_said("PLACEHOLDER: resize") {
            " Stage 03 still says `PLACEHOLDER: resize ...`."
        } else {
            ""
        };
        return Err(format!(
            "Missing: growing the cluster to `spec.size`. After 60 s, {} of its {size} pods run: {running:?}.{placeholder}\n\
             Where `ClusterTask::reconcile` finds fewer members running than `spec.size`, create one pod a tick, \
             named so that it collides with no pod that still exists.",
            running.len()
        ));
    };
    for pod in &grown {
        postgres_runs(kubectl, pod).await?;
    }
    let problems: Vec<String> = all_pods(client)
        .await
        .iter()
        .flat_map(|pod| pod_problems(pod, &cluster))
        .collect();
    if !problems.is_empty() {
        return Err(format!(
            "Missing, in the pods:\n- {}",
            problems.join("\n- ")
        ));
    }

    // 5. Shrunk when the size goes down.
    let _: serde_json::Value = client
        .patch(
            &object_path("default", CLUSTER),
            &Patch::Merge(serde_json::json!({"spec": {"size": 1}})),
        )
        .await
        .map_err(|error| format!("the resize to 1 failed: {error}"))?;
    let shrunk = within(Duration::from_secs(30), || async {
        (running_pods(client, &cluster).await.len() == 1).then_some(())
    })
    .await;
    if shrunk.is_none() {
        return Err(format!(
            "Missing: shrinking the cluster. 30 s after its size went from 3 to 1, these still run: {:?}.\n\
             Where `ClusterTask::reconcile` finds more members running than `spec.size`, delete one a tick \
             (`self.pods.delete_pod(namespace, name)`).",
            running_pods(client, &cluster).await
        ));
    }
    Ok(format!(
        "The homework is done: stage 03 launched the seed, grew cluster `{CLUSTER}` to {size} pods \
         ({}), each a PostgreSQL server accepting connections, and shrank it to 1.",
        grown.join(", ")
    ))
}

/// What pod `pod` lacks of what the homework asks, each with why it matters.
fn pod_problems(pod: &Pod, cluster: &PostgresCluster) -> Vec<String> {
    let name = &pod.metadata.name;
    let mut problems = Vec::new();
    let labelled = pod_labels(CLUSTER)
        .iter()
        .all(|(key, value)| pod.metadata.labels.get(key) == Some(value));
    if !labelled {
        problems.push(format!(
            "pod `{name}` lacks the labels `pods::pod_labels(&self.cluster.metadata.name)` in its `metadata.labels`: \
             the task lists its pods by them ({}), so it never counts this one",
            label_selector(CLUSTER)
        ));
    }
    if !pod.is_owned_by(&cluster.metadata.uid) {
        problems.push(format!(
            "pod `{name}` has no ownerReference to the cluster, `pods::owner_reference(&self.cluster)` in its \
             `metadata.owner_references`: the task counts only pods whose ownerReference carries the cluster's uid, \
             and deleting the cluster would leave the pod behind"
        ));
    }
    let image = format!("postgres:{}", cluster.spec.version);
    match pod.spec.containers.as_slice() {
        [container] if container.name == "postgres" && container.image == image => {
            let password = container
                .env
                .iter()
                .any(|var| var.name == "POSTGRES_PASSWORD" && !var.value.is_empty());
            if !password {
                problems.push(format!(
                    "pod `{name}`: its container's `env` has no `pods::EnvVar` `POSTGRES_PASSWORD` with a value: \
                     the postgres image refuses to initialise a database without one, so Postgres never starts"
                ));
            }
        }
        containers => problems.push(format!(
            "pod `{name}` should have one `pods::Container` named `postgres` with the image `{image}` \
             (`postgres:<spec.version>`); it has {:?}",
            containers
                .iter()
                .map(|c| format!("{} ({})", c.name, c.image))
                .collect::<Vec<_>>()
        )),
    }
    problems
}

/// Every pod in the namespace, whoever made it.
async fn all_pods(client: &Client) -> Vec<Pod> {
    let list: Result<ObjectList<Pod>, _> = client.get("/api/v1/namespaces/default/pods").await;
    list.map(|list| list.items).unwrap_or_default()
}

/// The cluster's member pods that are Running and not on their way out, by name.
async fn running_pods(client: &Client, cluster: &PostgresCluster) -> Vec<String> {
    let mut names: Vec<String> = all_pods(client)
        .await
        .into_iter()
        .filter(|pod| pod.is_owned_by(&cluster.metadata.uid))
        .filter(|pod| pod.phase() == "Running" && !pod.is_terminating())
        .map(|pod| pod.metadata.name)
        .collect();
    names.sort();
    names
}

/// PostgreSQL in pod `name` has initialised its database and listens on the pod's address.
async fn postgres_runs(kubectl: &Kubectl, name: &str) -> Result<(), String> {
    let ready = within(Duration::from_secs(60), || async {
        let logs = kubectl.try_run(&["logs", name]).await.ok()?;
        // The entrypoint's first server, for initdb, listens on a socket only; the real one on
        // the pod's IP.
        let up = logs.stdout.contains("listening on IPv4 address")
            && logs.stdout.contains("ready to accept connections");
        up.then_some(())
    })
    .await;
    if ready.is_some() {
        return Ok(());
    }
    let logs = kubectl
        .try_run(&["logs", name])
        .await
        .map(|logs| logs.stdout + &logs.stderr)
        .unwrap_or_else(|why| why);
    let tail: Vec<&str> = logs.lines().rev().take(15).collect();
    Err(format!(
        "Missing: PostgreSQL in pod `{name}`. It runs, but its server never said it was ready to accept \
         connections within 60 s. The last lines of its log:\n{}",
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    ))
}

/// Copy `from` into `to`, leaving out build output and git's own files.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let (source, target) = (entry.path(), to.join(&name));
        if entry.file_type()?.is_dir() {
            copy_tree(&source, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

/// This checkout with the worked solution applied, and stage 03 built from it: the binary's path.
fn build_solution(copy: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_tree(repo, copy).expect("a copy of the checkout");
    let patch = repo.join("tests/homework/step03-solution.patch");
    let applied = Command::new("git")
        .args(["apply", "--verbose"])
        .arg(&patch)
        .current_dir(copy)
        .output()
        .expect("git runs");
    assert!(
        applied.status.success(),
        "the worked solution no longer applies to src/controller/cluster.rs: change the homework's text in WORKSHOP.md step 03 and the patch together\n{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    // A target folder of its own beside ours: the copy is another package to cargo, and this one
    // stays built between runs, so only the patched crate compiles again.
    let target = repo.join("target/homework");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--offline", "--locked", "--bin", "stage03"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(copy)
        .output()
        .expect("cargo runs");
    assert!(
        built.status.success(),
        "the worked solution does not build:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    target.join("debug/stage03")
}

/// The check names what a pod lacks: a pod made as the text says has nothing missing; one
/// without its labels, ownerReference or password is told each, by the name the text uses.
#[test]
fn the_check_names_what_a_pod_lacks() {
    use postgres_operator::api::ObjectMeta;
    use postgres_operator::controller::pods::{owner_reference, Container, EnvVar, PodSpec};
    let mut cluster = PostgresCluster::new("default", CLUSTER, test_support::cluster_spec(3));
    cluster.metadata.uid = "uid-1".into();
    let complete = Pod {
        metadata: ObjectMeta {
            name: format!("{CLUSTER}-0"),
            namespace: "default".into(),
            labels: pod_labels(CLUSTER),
            owner_references: vec![owner_reference(&cluster)],
            ..ObjectMeta::default()
        },
        spec: PodSpec {
            containers: vec![Container {
                name: "postgres".into(),
                image: format!("postgres:{}", cluster.spec.version),
                args: Vec::new(),
                env: vec![EnvVar {
                    name: "POSTGRES_PASSWORD".into(),
                    value: "workshop".into(),
                }],
            }],
        },
        ..Pod::default()
    };
    assert_eq!(pod_problems(&complete, &cluster), Vec::<String>::new());

    let mut bare = complete.clone();
    bare.metadata.labels.clear();
    bare.metadata.owner_references.clear();
    bare.spec.containers[0].env.clear();
    let problems = pod_problems(&bare, &cluster).join("\n");
    for named in ["pod_labels", "owner_reference", "POSTGRES_PASSWORD"] {
        assert!(
            problems.contains(named),
            "{named} not named in:\n{problems}"
        );
    }
}
