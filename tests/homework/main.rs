//! Step 03's homework, done as WORKSHOP.md says, so that the text cannot drift from the code: the
//! worked solution (`tests/homework/step03-solution.patch`, a change to the one file the homework
//! names, `src/controller/cluster.rs`) is applied to a copy of this checkout, stage 03 is built
//! from that copy, and the built binary launches, grows and shrinks a cluster's pods on a sandbox.
//! When the code around the homework changes, the patch no longer applies and this test says so.
//!
//! WORKSHOP.md, step 03 ("Try it yourself"). The sandbox's pods are simulated here: the homework
//! is about creating and deleting pods, not about Postgres (step 04 is). A test binary of its own,
//! so that its build of the copy never runs beside the timed tests of the other binaries.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use postgres_operator::api::{object_path, ObjectList};
use postgres_operator::client::{Client, Patch};
use postgres_operator::controller::pods::{label_selector, pods_path, Pod};
use sandbox::SandboxOptions;
use test_support::{create_cluster, eventually, operator_command, sandbox_with_crd};

const CLUSTER: &str = "homework";

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

/// The cluster's member pods that are Running, by name.
async fn running_pods(client: &Client) -> Vec<String> {
    let path = pods_path("default", &label_selector(CLUSTER));
    let list: ObjectList<Pod> = client.get(&path).await.expect("pods listed");
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|pod| pod.phase() == "Running" && !pod.is_terminating())
        .map(|pod| pod.metadata.name)
        .collect();
    names.sort();
    names
}

/// The homework's solution, applied as WORKSHOP.md says, launches the seed, grows the cluster
/// one pod per tick to its size, and shrinks it when the size goes down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step03_homework_solution_launches_grows_and_shrinks_the_pods() {
    let copy = tempfile::tempdir().expect("a folder for the copy");
    let copy_path = copy.path().to_path_buf();
    let stage03 = tokio::task::spawn_blocking(move || build_solution(&copy_path))
        .await
        .expect("the build ran");

    let (sandbox, client) = sandbox_with_crd(SandboxOptions::default()).await;
    let mut operator = operator_command(stage03.to_str().expect("a UTF-8 path"), &sandbox.url())
        .args(["--reconcile-interval", "0.2"])
        .spawn()
        .expect("the solution's stage03 starts");

    create_cluster(&client, "default", CLUSTER, 3).await;
    let grown = [0, 1, 2].map(|n| format!("{CLUSTER}-{n}"));
    eventually(
        Duration::from_secs(30),
        "the seed and two more pods, Running",
        || async { (running_pods(&client).await == grown).then_some(()) },
    )
    .await;

    let _: serde_json::Value = client
        .patch(
            &object_path("default", CLUSTER),
            &Patch::Merge(serde_json::json!({"spec": {"size": 1}})),
        )
        .await
        .expect("size patched");
    eventually(
        Duration::from_secs(30),
        "the cluster shrunk to its seed",
        || async { (running_pods(&client).await == [format!("{CLUSTER}-0")]).then_some(()) },
    )
    .await;

    operator.kill().await.expect("stage03 stopped");
    sandbox.shutdown().await;
}
