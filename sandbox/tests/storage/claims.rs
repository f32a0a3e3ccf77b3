//! PersistentVolumeClaims with real kubectl: a claim is bound to a volume the sandbox provisions
//! as a directory, printed with kubectl's columns; a claim in use stays Terminating until its
//! pod goes, then claim, volume and directory go together; a claim owned by another object goes
//! with it; bad claims get kube's errors and events, and pods wait for their claims.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The tests that look at directories use the process
//! runtime (PostgreSQL and bubblewrap installed; without them they fail saying what to
//! install); the others use the simulated kubelet, with which claims bind but nothing is on disk.
//! Run: `cargo test -p sandbox --test storage claims::`.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;
use test_support::runtime::{create, start, wait_ready};
use test_support::{eventually, start_sandbox, Kubectl};

const CLAIM: &str = r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
"#;

/// `kubectl apply -f` of a manifest given as text; the whole output, failed or not.
async fn apply(kubectl: &Kubectl, manifest: &str) -> test_support::KubectlOutput {
    kubectl.run_manifest("apply", manifest).await
}

async fn object(kubectl: &Kubectl, kind: &str, name: &str) -> Option<Value> {
    let out = kubectl.run(&["get", kind, name, "-o", "json"]).await;
    out.success
        .then(|| serde_json::from_str(&out.stdout).ok())
        .flatten()
}

/// Wait (20 s at most) until claim `claim` and volume `volume` are both gone.
async fn wait_gone(kubectl: &Kubectl, claim: &str, volume: &str) {
    eventually(
        Duration::from_secs(20),
        &format!("claim {claim} and volume {volume} gone"),
        || async {
            let claim_gone = object(kubectl, "pvc", claim).await.is_none();
            let volume_gone = object(kubectl, "pv", volume).await.is_none();
            (claim_gone && volume_gone).then_some(())
        },
    )
    .await;
}

async fn wait_bound(kubectl: &Kubectl, name: &str) -> Value {
    eventually(
        Duration::from_secs(20),
        &format!("claim {name} Bound"),
        || async {
            let claim = object(kubectl, "pvc", name).await?;
            (claim["status"]["phase"] == "Bound").then_some(claim)
        },
    )
    .await
}

/// The whitespace-separated words of the line of `output` that starts with `first`.
fn words_of_line(output: &str, first: &str) -> Vec<String> {
    let line = output
        .lines()
        .find(|l| l.starts_with(first))
        .unwrap_or_else(|| panic!("no line starting with {first:?} in:\n{output}"));
    line.split_whitespace().map(String::from).collect()
}

/// Events about `name`, as `reason: message` lines.
async fn events_about(kubectl: &Kubectl, name: &str) -> String {
    let out = kubectl
        .ok(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={name}"),
            "-o",
            "json",
        ])
        .await;
    let events: Value = serde_json::from_str(&out).expect("events JSON");
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            format!(
                "{}: {}\n",
                e["reason"].as_str().unwrap_or_default(),
                e["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// A claim applied with kubectl is Bound to `pvc-<uid>`, a directory under the data directory,
/// and `kubectl get pvc,pv,sc` prints kubectl 1.32's columns with the default class marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applied_claim_is_bound_to_a_provisioned_directory() {
    let (_sandbox, kubectl, runtime) = start().await;
    let out = apply(&kubectl, CLAIM).await;
    assert!(out.success, "{out:?}");
    let claim = wait_bound(&kubectl, "data").await;
    let uid = claim["metadata"]["uid"].as_str().expect("uid");
    let volume_name = format!("pvc-{uid}");
    assert_eq!(claim["spec"]["volumeName"], volume_name.as_str());
    assert_eq!(claim["spec"]["storageClassName"], "standard");
    assert_eq!(claim["status"]["capacity"]["storage"], "1Gi");
    assert_eq!(
        claim["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    assert_eq!(
        claim["metadata"]["finalizers"][0],
        "kubernetes.io/pvc-protection"
    );
    let volume = eventually(Duration::from_secs(10), "volume Bound", || async {
        let volume = object(&kubectl, "pv", &volume_name).await?;
        (volume["status"]["phase"] == "Bound").then_some(volume)
    })
    .await;
    assert_eq!(volume["spec"]["claimRef"]["uid"], uid);
    assert_eq!(volume["spec"]["persistentVolumeReclaimPolicy"], "Delete");
    let dir = runtime
        .data_dir()
        .join("persistentvolumes")
        .join(&volume_name);
    assert_eq!(
        volume["spec"]["hostPath"]["path"]
            .as_str()
            .map(PathBuf::from),
        Some(dir.clone())
    );
    assert!(dir.is_dir(), "{} exists", dir.display());

    let table = kubectl.ok(&["get", "pvc,pv,sc"]).await;
    let volume_row = format!("persistentvolume/{volume_name}");
    // Each kind's header (told apart by its second column), then the words of our object's row
    // from the given column on.
    let kinds: [(&[&str], &str, usize, &[&str]); 3] = [
        (
            &[
                "NAME",
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS",
                "MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE",
            ],
            "persistentvolumeclaim/data",
            1,
            &["Bound", &volume_name, "1Gi", "RWO", "standard", "<unset>"],
        ),
        (
            &[
                "NAME",
                "CAPACITY",
                "ACCESS",
                "MODES",
                "RECLAIM",
                "POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE",
            ],
            &volume_row,
            1,
            &[
                "1Gi",
                "RWO",
                "Delete",
                "Bound",
                "default/data",
                "standard",
                "<unset>",
            ],
        ),
        (
            &[
                "NAME",
                "PROVISIONER",
                "RECLAIMPOLICY",
                "VOLUMEBINDINGMODE",
                "ALLOWVOLUMEEXPANSION",
                "AGE",
            ],
            "storageclass.storage.k8s.io/standard",
            0,
            &[
                "storageclass.storage.k8s.io/standard",
                "(default)",
                "sandbox.workshop/hostpath",
                "Delete",
                "Immediate",
                "false",
            ],
        ),
    ];
    for (header, row, from, words) in kinds {
        let found: Vec<&str> = table
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .find(|columns| columns.len() > 1 && columns[..2] == header[..2])
            .unwrap_or_default();
        assert_eq!(found, header, "{table}");
        let columns = words_of_line(&table, row);
        assert_eq!(&columns[from..from + words.len()], words, "{table}");
    }
}

/// pvc-protection: a claim deleted while a pod uses it stays Terminating, with its data; once
/// the pod is gone the claim, its volume and the volume's directory all go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_in_use_waits_for_its_pod_then_goes_with_its_volume() {
    let (_sandbox, kubectl, runtime) = start().await;
    create(&kubectl, CLAIM).await;
    create(
        &kubectl,
        r#"apiVersion: v1
kind: Pod
metadata: {name: writer}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: writer
    image: busybox
    command: [sh, -c, "echo kept > /data/file && touch /tmp/ready && exec sleep 600"]
    readinessProbe: {exec: {command: [cat, /tmp/ready]}, periodSeconds: 1}
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#,
    )
    .await;
    wait_ready(&kubectl, "writer").await;
    let claim = object(&kubectl, "pvc", "data").await.expect("claim");
    let volume_name = claim["spec"]["volumeName"]
        .as_str()
        .expect("bound")
        .to_string();
    let dir = runtime
        .data_dir()
        .join("persistentvolumes")
        .join(&volume_name);
    assert_eq!(
        std::fs::read_to_string(dir.join("file")).ok().as_deref(),
        Some("kept\n"),
        "the pod wrote into the volume's directory"
    );

    kubectl.ok(&["delete", "pvc", "data", "--wait=false"]).await;
    let listed = kubectl.ok(&["get", "pvc", "data"]).await;
    assert_eq!(words_of_line(&listed, "data")[1], "Terminating", "{listed}");
    assert!(
        dir.join("file").exists(),
        "the data stays while the pod runs"
    );

    kubectl.ok(&["delete", "pod", "writer"]).await;
    wait_gone(&kubectl, "data", &volume_name).await;
    eventually(
        Duration::from_secs(20),
        "the volume's directory gone",
        || async { (!dir.exists()).then_some(()) },
    )
    .await;
    assert!(
        !runtime
            .data_dir()
            .join("claims")
            .join("default")
            .join("data")
            .exists(),
        "the claim's binding went with it"
    );
}

/// Garbage collection: a claim whose ownerReference names a deleted owner goes, and its
/// volume with it (simulated kubelet: nothing on disk).
#[tokio::test]
async fn a_claim_owned_by_another_object_goes_with_it() {
    let sandbox = start_sandbox().await;
    let kubectl = Kubectl::new(&sandbox.url());
    kubectl.ok(&["create", "configmap", "owner"]).await;
    let owner = object(&kubectl, "configmap", "owner").await.expect("owner");
    let uid = owner["metadata"]["uid"].as_str().expect("uid");
    let out = apply(
        &kubectl,
        &format!(
            r#"apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: owned
  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: owner, uid: {uid}}}]
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 100Mi}}}}
"#
        ),
    )
    .await;
    assert!(out.success, "{out:?}");
    let claim = wait_bound(&kubectl, "owned").await;
    let volume_name = claim["spec"]["volumeName"]
        .as_str()
        .expect("bound")
        .to_string();
    kubectl.ok(&["delete", "configmap", "owner"]).await;
    wait_gone(&kubectl, "owned", &volume_name).await;
}

/// Bad claims get kube's answers and the sandbox goes on: a garbage quantity is refused, an
/// unknown class and a missing volume leave the claim Pending with an event, and a pod naming a
/// missing claim waits (FailedScheduling) until the claim exists and is bound.
#[tokio::test]
async fn bad_claims_get_clear_errors_and_pods_wait_for_their_claims() {
    let sandbox = start_sandbox().await;
    let kubectl = Kubectl::new(&sandbox.url());
    for (manifest, refusal) in [
        (
            CLAIM.replace("1Gi", "lots"),
            "quantities must match the regular expression",
        ),
        (
            CLAIM.replace("[ReadWriteOnce]", "[]"),
            "spec.accessModes: Required value",
        ),
    ] {
        kubectl
            .fails_saying_manifest("apply", &manifest, refusal)
            .await;
    }

    let unknown_class = CLAIM
        .replace("name: data", "name: fast")
        .replace("spec:\n", "spec:\n  storageClassName: fast\n");
    assert!(apply(&kubectl, &unknown_class).await.success);
    let missing_volume = CLAIM
        .replace("name: data", "name: pinned")
        .replace("spec:\n", "spec:\n  volumeName: no-such-volume\n");
    assert!(apply(&kubectl, &missing_volume).await.success);
    eventually(
        Duration::from_secs(10),
        "events for both claims",
        || async {
            let fast = events_about(&kubectl, "fast").await;
            let pinned = events_about(&kubectl, "pinned").await;
            (fast.contains("ProvisioningFailed: storageclass.storage.k8s.io \"fast\" not found")
                && pinned
                    .contains("FailedBinding: volume \"no-such-volume\" requested and not found"))
            .then_some(())
        },
    )
    .await;
    for name in ["fast", "pinned"] {
        let claim = object(&kubectl, "pvc", name).await.expect("claim");
        assert_eq!(claim["status"]["phase"], "Pending", "{name}");
    }

    let out = apply(
        &kubectl,
        r#"apiVersion: v1
kind: Pod
metadata: {name: waiting}
spec:
  containers: [{name: main, image: busybox}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#,
    )
    .await;
    assert!(out.success, "{out:?}");
    let pod = eventually(Duration::from_secs(10), "the pod unschedulable", || async {
        let pod = object(&kubectl, "pod", "waiting").await?;
        let scheduled = pod["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "PodScheduled")?
            .clone();
        (scheduled["status"] == "False").then_some(pod)
    })
    .await;
    assert_eq!(pod["status"]["phase"], "Pending");
    let events = events_about(&kubectl, "waiting").await;
    assert!(
        events.contains(
            "FailedScheduling: 0/1 nodes are available: persistentvolumeclaim \"data\" not found."
        ),
        "{events}"
    );

    assert!(apply(&kubectl, CLAIM).await.success);
    eventually(Duration::from_secs(10), "the pod Running", || async {
        let pod = object(&kubectl, "pod", "waiting").await?;
        (pod["status"]["phase"] == "Running").then_some(())
    })
    .await;
    wait_bound(&kubectl, "data").await;
}

/// A PersistentVolume of the user's own.
fn static_volume(name: &str, path: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Delete
  hostPath: {{path: "{path}"}}
"#
    )
}

/// No pod writes outside the data dir: with pods running as processes, a PersistentVolume
/// whose hostPath (or local path) lies outside `<data dir>/persistentvolumes` — written so, by
/// `..`, or through a symbolic link planted inside — is refused at admission with kube's
/// Forbidden wording; one inside is accepted, and its path cannot be changed afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_outside_the_data_dir_are_refused() {
    let (_sandbox, kubectl, runtime) = start().await;
    let root = runtime
        .data_dir()
        .canonicalize()
        .expect("the data dir exists")
        .join("persistentvolumes");
    std::fs::create_dir_all(&root).expect("the volume directory");
    std::os::unix::fs::symlink("/etc", root.join("planted")).expect("a link out");
    let outside = [
        "/etc".to_string(),
        "/tmp/not-yet-there".to_string(),
        runtime.data_dir().display().to_string(),
        format!("{}/../bin", root.display()),
        format!("{}/planted/cron.d", root.display()),
        "relative/path".to_string(),
    ];
    for path in &outside {
        let out = apply(&kubectl, &static_volume("escape", path)).await;
        assert!(!out.success, "{path} accepted: {out:?}");
        assert!(
            out.stderr.contains(&format!(
                "persistentvolumes \"escape\" is forbidden: spec.hostPath.path {path:?}"
            )) && out.stderr.contains(&root.display().to_string()),
            "{path}: {}",
            out.stderr
        );
        println!("{path}: {}", out.stderr.trim());
    }
    assert!(
        object(&kubectl, "pv", "escape").await.is_none(),
        "nothing was stored"
    );
    assert!(
        std::fs::read_dir("/etc").is_ok(),
        "and /etc is still there, of course"
    );

    let inside = root.join("static-1");
    let out = apply(
        &kubectl,
        &static_volume("mine", &inside.display().to_string()),
    )
    .await;
    assert!(out.success, "{out:?}");
    let moved = kubectl
        .run(&[
            "patch",
            "pv",
            "mine",
            "--type=merge",
            "-p",
            r#"{"spec":{"hostPath":{"path":"/etc"}}}"#,
        ])
        .await;
    assert!(!moved.success, "{moved:?}");
    assert!(
        moved
            .stderr
            .contains("spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation"),
        "{}",
        moved.stderr
    );
}
