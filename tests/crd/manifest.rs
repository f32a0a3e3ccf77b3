//! `kube/crd.yaml` is what stage 01 registers (`postgres_cluster_crd()` in `src/crd/mod.rs`
//! compiles it in, as JSON with its `#` comment lines dropped) and what `kubectl apply -f
//! kube/crd.yaml` sends: kubectl must read the file as the same object.
//!
//! No YAML crate: kubectl converts the file to JSON offline (`patch --local` with an empty patch
//! prints the file's object unchanged, without asking any server).

use postgres_operator::crd::postgres_cluster_crd;

/// kubectl's JSON of kube/crd.yaml equals the operator's reading of it, field for field.
#[test]
fn kubectl_reads_kube_crd_yaml_as_the_operator_does() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/kube/crd.yaml");
    let output = test_support::kubectl_offline(&[
        "patch", "--local", "--type", "merge", "-p", "{}", "-o", "json", "-f", manifest,
    ]);
    let from_yaml: serde_json::Value = serde_json::from_slice(&output).unwrap();
    let from_rust = postgres_cluster_crd();
    if from_yaml != from_rust {
        panic!(
            "kubectl and the operator read kube/crd.yaml differently.\nkubectl: {}\noperator: {}",
            serde_json::to_string_pretty(&from_yaml).unwrap(),
            serde_json::to_string_pretty(&from_rust).unwrap()
        );
    }
}
