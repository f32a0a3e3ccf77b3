//! `kube/crd.yaml` and `postgres_cluster_crd()` in `src/crd/schema.rs` are the same object, so
//! `kubectl apply -f kube/crd.yaml` and stage 01 register the same thing.
//!
//! No YAML crate: kubectl converts the file to JSON offline (`patch --local` with an empty patch
//! prints the file's object unchanged, without asking any server).

use postgres_operator::crd::postgres_cluster_crd;

/// kubectl's JSON of kube/crd.yaml equals the CRD built in Rust, field for field.
#[test]
fn kube_crd_yaml_matches_the_crd_built_in_rust() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/kube/crd.yaml");
    let output = test_support::kubectl_offline(&[
        "patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f", manifest,
    ]);
    let from_yaml: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let from_rust = postgres_cluster_crd();
    if from_yaml != from_rust {
        panic!(
            "kube/crd.yaml and src/crd/schema.rs differ.\nYAML: {}\nRust: {}",
            serde_json::to_string_pretty(&from_yaml).unwrap(),
            serde_json::to_string_pretty(&from_rust).unwrap()
        );
    }
}
