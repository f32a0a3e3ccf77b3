//! `kube/crd.yaml` and `postgres_cluster_crd()` in `src/crd/schema.rs` are the same object, so
//! `kubectl apply -f kube/crd.yaml` and stage 01 register the same thing.
//!
//! No YAML crate: kubectl converts the file to JSON offline (`patch --local` with an empty patch
//! prints the file's object unchanged, without asking any server).

use std::path::Path;
use std::process::Command;

use postgres_operator::crd::postgres_cluster_crd;

/// On this machine `/usr/bin/kubectl` is a dispatcher that first asks a server for `/version`;
/// the bundled kubectl it dispatches to never does.
fn kubectl() -> Command {
    let bundled = "/usr/lib/google-cloud-sdk/bin/kubectl.1.32";
    let mut command = Command::new(if Path::new(bundled).exists() {
        bundled
    } else {
        "kubectl"
    });
    command.env("KUBECONFIG", "/dev/null");
    command
}

/// kubectl's JSON of kube/crd.yaml equals the CRD built in Rust, field for field.
#[test]
fn kube_crd_yaml_matches_the_crd_built_in_rust() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/kube/crd.yaml");
    let cache = tempfile::tempdir().unwrap();
    let output = kubectl()
        .args([
            "patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f", manifest,
        ])
        .arg("--cache-dir")
        .arg(cache.path())
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let from_yaml: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let from_rust = postgres_cluster_crd();
    if from_yaml != from_rust {
        panic!(
            "kube/crd.yaml and src/crd/schema.rs differ.\nYAML: {}\nRust: {}",
            serde_json::to_string_pretty(&from_yaml).unwrap(),
            serde_json::to_string_pretty(&from_rust).unwrap()
        );
    }
}
