//! Storage: the PersistentVolume controller of kube-controller-manager, with a hostPath
//! provisioner — claims are bound to volumes it provisions as directories under the data
//! directory, volumes are reclaimed when their claim goes, and the `pvc-protection` and
//! `pv-protection` finalizers keep a claim while a pod uses it and a volume while it is bound.
//! Also the scheduler's one storage rule: a pod waits until each claim it names is bound.
//!
//! WORKSHOP.md, "Set-up: the sandbox". One loop, woken by every change of a claim, volume,
//! class or pod, reconciles them all:
//!
//! | what it sees | what it does |
//! |---|---|
//! | a claim with no `storageClassName` | gives it the default class (kube ≥ 1.28's retroactive default) |
//! | an unbound claim naming `volumeName` | binds it to that volume if it exists and is free, else leaves it Pending (event FailedBinding) |
//! | an unbound claim of a class | binds it to a free matching volume of that class, else provisions `pvc-<claim uid>` if the class's provisioner is ours; an unknown class gives ProvisioningFailed |
//! | a claim being deleted | removes `kubernetes.io/pvc-protection` once no running pod uses it |
//! | a new volume | Available; Bound once a claim is bound to it |
//! | a volume whose claim is gone | Released; with reclaim policy Delete its directory is removed and the volume deleted |
//! | a volume being deleted | removes `kubernetes.io/pv-protection` once no claim is bound to it |
//!
//! The default class `standard` (provisioner [`PROVISIONER`]) binds Immediately: a claim is bound
//! as soon as it exists, where kind's default class says WaitForFirstConsumer (bind when a pod
//! is scheduled, so a volume is made on that pod's node). With one node there is no node to
//! choose, and an operator that creates a claim before its pod sees it Bound at once.
//!
//! # Where it simplifies
//!
//! - A volume is a directory: its capacity is recorded, never enforced (a directory has no
//!   quota), and there is no `du`. With the simulated runtime nothing is created on disk: claims
//!   bind to volumes whose directory exists only in their spec.
//! - The node learns where a claim's data lives from a symlink, `claims/<namespace>/<claim>` →
//!   the volume's directory, that this controller writes when it binds (the kubelet would read
//!   the claim and its volume from the API server; see `runtime/claims.rs`).
//! - No volume expansion, snapshots, access-mode enforcement between pods, or Retain recycling.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::builtins::{self, CLAIM_PROTECTION, VOLUME_PROTECTION};
use crate::objects::{self, Committed, FieldValidation, Part, WriteOptions};
use crate::random::Xorshift;
use crate::store::{Filter, Store, StoreState, WatchMessage, WatchStart};
use crate::timefmt;

/// Who provisions the default class's volumes: this controller.
pub(crate) const PROVISIONER: &str = "sandbox.workshop/hostpath";
/// The class every sandbox starts with, marked default.
pub(crate) const DEFAULT_CLASS: &str = "standard";
/// The annotation that makes a StorageClass the default one.
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

const CLAIMS: &str = "/persistentvolumeclaims";
const VOLUMES: &str = "/persistentvolumes";
const CLASSES: &str = "storage.k8s.io/storageclasses";
const PODS: &str = "/pods";

/// Where volumes live on disk: `<data dir>/persistentvolumes/pvc-<uid>`, and the symlinks the
/// node reads, `<data dir>/claims/<namespace>/<claim>`. None with the simulated runtime.
#[derive(Clone, Debug)]
pub(crate) struct VolumeDirs {
    pub(crate) volumes: PathBuf,
    pub(crate) claims: PathBuf,
}

impl VolumeDirs {
    /// The layout under a process runtime's data directory.
    pub(crate) fn under(data_dir: &Path) -> VolumeDirs {
        VolumeDirs {
            volumes: data_dir.join("persistentvolumes"),
            claims: data_dir.join("claims"),
        }
    }
}

/// Store the default StorageClass (before the server answers anyone), then run the controller
/// until `shutdown`.
pub(crate) fn start(
    store: Arc<Store>,
    dirs: Option<VolumeDirs>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let mut random = Xorshift::from_entropy();
    store
        .lock()
        .commit_added(CLASSES, default_class(random.uuid()));
    tokio::spawn(run(store, dirs, random, shutdown))
}

fn default_class(uid: String) -> Value {
    json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": DEFAULT_CLASS, "uid": uid,
                     "creationTimestamp": timefmt::now_rfc3339(),
                     "annotations": {DEFAULT_CLASS_ANNOTATION: "true"}},
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": false
    })
}

/// Watchers on everything the controller reads; any event wakes it.
struct Wakeups {
    receivers: Vec<mpsc::Receiver<WatchMessage>>,
    ids: Vec<u64>,
}

impl Wakeups {
    fn register(state: &mut StoreState, keys: &[&str], namespace: Option<&str>) -> Wakeups {
        let mut wakeups = Wakeups {
            receivers: Vec::new(),
            ids: Vec::new(),
        };
        for key in keys {
            let filter = Filter {
                store_key: key.to_string(),
                namespace: namespace.map(String::from),
                ..Filter::default()
            };
            // Only events from now on: whoever registers has just looked at the current state.
            if let Ok(registration) =
                state.register_watcher(filter, WatchStart::After(state.revision()))
            {
                wakeups.ids.push(registration.id);
                wakeups.receivers.push(registration.receiver);
            }
        }
        wakeups
    }

    /// Wait for the next change; false if a watcher was ended (it fell behind: look again).
    async fn changed(&mut self) -> bool {
        if self.receivers.is_empty() {
            return std::future::pending().await;
        }
        let next =
            futures_util::future::select_all(self.receivers.iter_mut().map(|r| Box::pin(r.recv())));
        let (message, _, _) = next.await;
        let open = message.is_some();
        // Drain what else is queued: one look covers them all.
        for receiver in &mut self.receivers {
            while receiver.try_recv().is_ok() {}
        }
        open
    }

    fn unregister(self, state: &mut StoreState) {
        for id in self.ids {
            state.remove_watcher(id);
        }
    }
}

async fn run(
    store: Arc<Store>,
    dirs: Option<VolumeDirs>,
    mut random: Xorshift,
    shutdown: CancellationToken,
) {
    loop {
        let (removals, mut wakeups) = {
            let mut state = store.lock();
            let removals = reconcile(&mut state, &mut random, dirs.as_ref());
            let wakeups = Wakeups::register(&mut state, &[CLAIMS, VOLUMES, CLASSES, PODS], None);
            (removals, wakeups)
        };
        // Removing a database's files takes a while: never under the store lock.
        let removed_any = !removals.is_empty();
        for removal in removals {
            let result = remove_volume_dir(&removal.path);
            let mut state = store.lock();
            finish_reclaim(&mut state, &mut random, &removal, result);
        }
        if !removed_any {
            tokio::select! {
                _ = wakeups.changed() => {}
                _ = shutdown.cancelled() => {
                    wakeups.unregister(&mut store.lock());
                    return;
                }
            }
        }
        wakeups.unregister(&mut store.lock());
    }
}

/// A Released volume whose directory must go before the volume object does.
struct Removal {
    volume: String,
    uid: String,
    path: PathBuf,
}

/// One look at every claim and volume; returns the directories to remove.
fn reconcile(
    state: &mut StoreState,
    random: &mut Xorshift,
    dirs: Option<&VolumeDirs>,
) -> Vec<Removal> {
    for claim in state.list(CLAIMS, None) {
        if !claim["metadata"]["deletionTimestamp"].is_null() {
            release_claim_if_unused(state, random, &claim);
        } else if claim["status"]["phase"] != "Bound" {
            bind_claim(state, random, dirs, &claim);
        }
    }
    let mut removals = Vec::new();
    for volume in state.list(VOLUMES, None) {
        if let Some(removal) = sync_volume(state, random, dirs, &volume) {
            removals.push(removal);
        }
    }
    removals
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

fn namespace_of(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

/// Store a change to `old` through the API server's own write path (defaults, validation, the
/// finalizer rule that deletes an object once its last finalizer is gone), as a controller's
/// PUT would.
fn update(
    state: &mut StoreState,
    random: &mut Xorshift,
    store_key: &str,
    old: &Arc<Value>,
    new: Value,
    part: Part,
) -> Option<Arc<Value>> {
    let resource = state.registry.find_by_store_key(store_key)?.clone();
    let options = WriteOptions {
        field_validation: FieldValidation::Ignore,
        dry_run: false,
        random,
        duplicate_fields: Vec::new(),
        service_block: None,
        volume_root: None,
        pod_ids_restricted: false,
    };
    let written = objects::prepare_update(&resource, old, new, part, options)
        .and_then(|prepared| objects::commit(state, &resource, prepared));
    match written {
        Ok(Committed::Done(outcome)) => Some(outcome.object),
        Ok(Committed::Stale) => None,
        Err(error) => {
            tracing::warn!(
                name = name_of(old),
                ?error,
                "storage controller: write refused"
            );
            None
        }
    }
}

/// Record a Warning or Normal event about a claim or volume, once per reason and message.
fn event(
    state: &mut StoreState,
    random: &mut Xorshift,
    object: &Value,
    warning: bool,
    reason: &str,
    message: String,
) {
    // Events about cluster-scoped objects (volumes) live in `default`, as kube puts them.
    let namespace = match namespace_of(object) {
        "" => "default",
        namespace => namespace,
    };
    let uid = &object["metadata"]["uid"];
    let seen = state.list("/events", Some(namespace)).iter().any(|e| {
        e["involvedObject"]["uid"] == *uid && e["reason"] == reason && e["message"] == message
    });
    if seen {
        return;
    }
    let mut event = builtins::pod_event(
        object,
        random,
        "persistentvolume-controller",
        reason,
        message,
    );
    event["metadata"]["namespace"] = json!(namespace);
    event["involvedObject"]["kind"] = object["kind"].clone();
    if warning {
        event["type"] = json!("Warning");
    }
    state.commit_added("/events", event);
}

/// Does a pod that has not terminated name this claim in its volumes?
fn claim_in_use(state: &StoreState, namespace: &str, claim: &str) -> bool {
    state.list(PODS, Some(namespace)).iter().any(|pod| {
        let terminated = matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        !terminated && claims_of(pod).any(|c| c == claim)
    })
}

/// The claim names of a pod's `persistentVolumeClaim` volumes.
fn claims_of(pod: &Value) -> impl Iterator<Item = &str> {
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
}

fn without_finalizer(object: &Value, finalizer: &str) -> Value {
    let mut next = object.clone();
    let remaining: Vec<Value> = object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    next["metadata"]["finalizers"] = json!(remaining);
    next
}

fn has_finalizer(object: &Value, finalizer: &str) -> bool {
    object["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|f| f == finalizer))
}

/// pvc-protection: a claim being deleted goes once no pod that may still run uses it.
fn release_claim_if_unused(state: &mut StoreState, random: &mut Xorshift, claim: &Arc<Value>) {
    if !has_finalizer(claim, CLAIM_PROTECTION)
        || claim_in_use(state, namespace_of(claim), name_of(claim))
    {
        return;
    }
    let next = without_finalizer(claim, CLAIM_PROTECTION);
    update(state, random, CLAIMS, claim, next, Part::Main);
}

/// The claim's class: its own, or the default class's name if it names none.
fn class_of(claim: &Value) -> Option<&str> {
    claim["spec"]["storageClassName"].as_str()
}

fn default_class_name(state: &StoreState) -> Option<String> {
    state
        .list(CLASSES, None)
        .iter()
        .find(|c| c["metadata"]["annotations"][DEFAULT_CLASS_ANNOTATION] == "true")
        .map(|c| name_of(c).to_string())
}

fn requested_bytes(claim: &Value) -> f64 {
    claim["spec"]["resources"]["requests"]["storage"]
        .as_str()
        .and_then(builtins::parse_quantity)
        .unwrap_or(0.0)
}

/// Find or make a volume for an unbound claim, and bind the two.
fn bind_claim(
    state: &mut StoreState,
    random: &mut Xorshift,
    dirs: Option<&VolumeDirs>,
    claim: &Arc<Value>,
) {
    let Some(class) = class_of(claim).map(String::from) else {
        // Retroactive default class assignment (kube ≥ 1.28): a claim created without a class,
        // and unbound, gets the default class once there is one.
        if let Some(default) = default_class_name(state) {
            let mut next = (**claim).clone();
            next["spec"]["storageClassName"] = json!(default);
            if let Some(claim) = update(state, random, CLAIMS, claim, next, Part::Main) {
                bind_claim(state, random, dirs, &claim);
            }
        }
        return;
    };
    // Pre-bound: the claim names its volume.
    if let Some(wanted) = claim["spec"]["volumeName"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        match state.get(VOLUMES, "", wanted) {
            Some(volume) if volume_fits(claim, &volume, &class) => {
                bind(state, random, dirs, claim, &volume, false);
            }
            Some(_) => event(
                state,
                random,
                claim,
                true,
                "FailedBinding",
                format!(
                    "volume \"{wanted}\" already bound to a different claim or does not fit it"
                ),
            ),
            None => event(
                state,
                random,
                claim,
                true,
                "FailedBinding",
                format!("volume \"{wanted}\" requested and not found"),
            ),
        }
        return;
    }
    // A free volume that fits, the smallest first (the binder does not waste a big one).
    let mut free: Vec<Arc<Value>> = state
        .list(VOLUMES, None)
        .into_iter()
        .filter(|v| volume_fits(claim, v, &class))
        .collect();
    free.sort_by(|a, b| capacity_of(a).total_cmp(&capacity_of(b)));
    if let Some(volume) = free.first() {
        bind(state, random, dirs, claim, volume, true);
        return;
    }
    if class.is_empty() {
        event(
            state,
            random,
            claim,
            false,
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set".into(),
        );
        return;
    }
    let Some(storage_class) = state.get(CLASSES, "", &class) else {
        event(
            state,
            random,
            claim,
            true,
            "ProvisioningFailed",
            format!("storageclass.storage.k8s.io \"{class}\" not found"),
        );
        return;
    };
    let provisioner = storage_class["provisioner"].as_str().unwrap_or_default();
    if provisioner != PROVISIONER {
        event(
            state,
            random,
            claim,
            false,
            "ExternalProvisioning",
            format!("Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."),
        );
        return;
    }
    if let Some(volume) = provision(state, random, dirs, claim, &storage_class) {
        bind(state, random, dirs, claim, &volume, true);
    }
}

fn capacity_of(volume: &Value) -> f64 {
    volume["spec"]["capacity"]["storage"]
        .as_str()
        .and_then(builtins::parse_quantity)
        .unwrap_or(0.0)
}

/// May `claim` bind to `volume`: free (or reserved for this very claim), not being deleted, of
/// the claim's class, large enough, with every access mode the claim asks for.
fn volume_fits(claim: &Value, volume: &Value, class: &str) -> bool {
    let reference = &volume["spec"]["claimRef"];
    let free = match reference["name"].as_str() {
        None => true,
        Some(name) => {
            name == name_of(claim)
                && reference["namespace"] == claim["metadata"]["namespace"]
                && (reference["uid"].is_null() || reference["uid"] == claim["metadata"]["uid"])
        }
    };
    let modes = volume["spec"]["accessModes"].as_array();
    let has_modes = claim["spec"]["accessModes"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|m| modes.is_some_and(|modes| modes.contains(m)));
    free && volume["metadata"]["deletionTimestamp"].is_null()
        && matches!(
            volume["status"]["phase"].as_str(),
            Some("Available" | "Pending" | "Bound")
        )
        && volume["spec"]["storageClassName"]
            .as_str()
            .unwrap_or_default()
            == class
        && capacity_of(volume) >= requested_bytes(claim)
        && has_modes
}

/// The hostPath provisioner: a directory `pvc-<claim uid>` and a volume describing it.
fn provision(
    state: &mut StoreState,
    random: &mut Xorshift,
    dirs: Option<&VolumeDirs>,
    claim: &Arc<Value>,
    class: &Value,
) -> Option<Arc<Value>> {
    let uid = claim["metadata"]["uid"].as_str().unwrap_or_default();
    let name = format!("pvc-{uid}");
    let path = match dirs {
        Some(dirs) => dirs.volumes.join(&name),
        None => PathBuf::from("/sandbox/simulated/persistentvolumes").join(&name),
    };
    if dirs.is_some() {
        // World-writable, as local-path-provisioner makes them: the pod's user (999 when the
        // sandbox is root) writes here; PostgreSQL wants PGDATA itself 0700, hence a subdirectory.
        let made = std::fs::create_dir_all(&path).and_then(|_| {
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        });
        if let Err(error) = made {
            event(
                state,
                random,
                claim,
                true,
                "ProvisioningFailed",
                format!("failed to provision volume with StorageClass \"{}\": cannot create {}: {error}", name_of(class), path.display()),
            );
            return None;
        }
    }
    let volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name,
                     "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER}},
        "spec": {
            "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
            "accessModes": claim["spec"]["accessModes"],
            "persistentVolumeReclaimPolicy": class["reclaimPolicy"].as_str().unwrap_or("Delete"),
            "storageClassName": name_of(class),
            "volumeMode": "Filesystem",
            "hostPath": {"path": path.to_string_lossy(), "type": "DirectoryOrCreate"},
            "claimRef": claim_reference(claim)
        }
    });
    let resource = state.registry.find_by_store_key(VOLUMES)?.clone();
    let options = WriteOptions {
        field_validation: FieldValidation::Ignore,
        dry_run: false,
        random,
        duplicate_fields: Vec::new(),
        service_block: None,
        volume_root: None,
        pod_ids_restricted: false,
    };
    let created = objects::prepare_create(&resource, None, volume, options)
        .and_then(|prepared| objects::commit(state, &resource, prepared));
    match created {
        Ok(Committed::Done(outcome)) => {
            event(
                state,
                random,
                claim,
                false,
                "ProvisioningSucceeded",
                format!("Successfully provisioned volume {name}"),
            );
            Some(outcome.object)
        }
        Ok(Committed::Stale) => None,
        Err(error) => {
            tracing::warn!(%name, ?error, "storage controller: cannot create the volume");
            None
        }
    }
}

fn claim_reference(claim: &Value) -> Value {
    json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
           "namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"],
           "uid": claim["metadata"]["uid"],
           "resourceVersion": claim["metadata"]["resourceVersion"]})
}

/// Bind both ways: the volume's claimRef and phase, then the claim's volumeName, phase,
/// capacity and access modes, with the annotations kube's binder leaves.
fn bind(
    state: &mut StoreState,
    random: &mut Xorshift,
    dirs: Option<&VolumeDirs>,
    claim: &Arc<Value>,
    volume: &Arc<Value>,
    by_controller: bool,
) {
    let mut volume = volume.clone();
    if volume["spec"]["claimRef"]["uid"] != claim["metadata"]["uid"] {
        let mut next = (*volume).clone();
        next["spec"]["claimRef"] = claim_reference(claim);
        if by_controller && volume["spec"]["claimRef"].is_null() {
            next["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"] = json!("yes");
        }
        let Some(written) = update(state, random, VOLUMES, &volume, next, Part::Main) else {
            return;
        };
        volume = written;
    }
    if volume["status"]["phase"] != "Bound" {
        let mut next = (*volume).clone();
        next["status"] = json!({"phase": "Bound"});
        let Some(written) = update(state, random, VOLUMES, &volume, next, Part::Status) else {
            return;
        };
        volume = written;
    }
    let mut next = (**claim).clone();
    next["spec"]["volumeName"] = volume["metadata"]["name"].clone();
    let annotations = &mut next["metadata"]["annotations"];
    annotations["pv.kubernetes.io/bind-completed"] = json!("yes");
    if by_controller {
        annotations["pv.kubernetes.io/bound-by-controller"] = json!("yes");
    }
    if let Some(provisioner) =
        volume["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"].as_str()
    {
        annotations["volume.kubernetes.io/storage-provisioner"] = json!(provisioner);
        annotations["volume.beta.kubernetes.io/storage-provisioner"] = json!(provisioner);
    }
    let Some(claim) = update(state, random, CLAIMS, claim, next, Part::Main) else {
        return;
    };
    let mut next = (*claim).clone();
    next["status"] = json!({
        "phase": "Bound",
        "accessModes": volume["spec"]["accessModes"],
        "capacity": {"storage": volume["spec"]["capacity"]["storage"]}
    });
    if update(state, random, CLAIMS, &claim, next, Part::Status).is_some() {
        if let Some(dirs) = dirs {
            link_claim(dirs, &claim, &volume);
        }
    }
}

/// The directory a volume's data lives in.
fn path_of(volume: &Value) -> Option<PathBuf> {
    volume["spec"]["hostPath"]["path"]
        .as_str()
        .or(volume["spec"]["local"]["path"].as_str())
        .map(PathBuf::from)
}

/// `claims/<namespace>/<claim>` → the volume's directory, replaced atomically (a new symlink
/// renamed over the old one).
fn link_claim(dirs: &VolumeDirs, claim: &Value, volume: &Value) {
    let Some(target) = path_of(volume) else {
        return;
    };
    let dir = dirs.claims.join(namespace_of(claim));
    let link = dir.join(name_of(claim));
    let temporary = dir.join(format!(".{}.new", name_of(claim)));
    let _ = std::fs::remove_file(&temporary);
    let linked = std::fs::create_dir_all(&dir)
        .and_then(|_| std::os::unix::fs::symlink(&target, &temporary))
        .and_then(|_| std::fs::rename(&temporary, &link));
    if let Err(error) = linked {
        tracing::warn!(link = %link.display(), %error, "storage controller: cannot link the claim to its volume");
    }
}

/// Remove `claims/<namespace>/<claim>` if it still points at this volume.
fn unlink_claim(dirs: &VolumeDirs, volume: &Value) {
    let reference = &volume["spec"]["claimRef"];
    let (Some(namespace), Some(name), Some(target)) = (
        reference["namespace"].as_str(),
        reference["name"].as_str(),
        path_of(volume),
    ) else {
        return;
    };
    let link = dirs.claims.join(namespace).join(name);
    if std::fs::read_link(&link).is_ok_and(|points_to| points_to == target) {
        let _ = std::fs::remove_file(&link);
    }
}

/// A volume's phase from its claim: Available, Bound, Released; reclaim and pv-protection.
fn sync_volume(
    state: &mut StoreState,
    random: &mut Xorshift,
    dirs: Option<&VolumeDirs>,
    volume: &Arc<Value>,
) -> Option<Removal> {
    let reference = &volume["spec"]["claimRef"];
    let claim = reference["name"].as_str().and_then(|name| {
        state.get(
            CLAIMS,
            reference["namespace"].as_str().unwrap_or_default(),
            name,
        )
    });
    let claim_alive = claim
        .as_ref()
        .is_some_and(|c| reference["uid"].is_null() || c["metadata"]["uid"] == reference["uid"]);
    let phase = volume["status"]["phase"].as_str().unwrap_or_default();
    if !volume["metadata"]["deletionTimestamp"].is_null() {
        // pv-protection: a volume still bound to a live claim stays until the claim goes.
        if has_finalizer(volume, VOLUME_PROTECTION) && !(phase == "Bound" && claim_alive) {
            let next = without_finalizer(volume, VOLUME_PROTECTION);
            update(state, random, VOLUMES, volume, next, Part::Main);
        }
        return None;
    }
    let wanted = if reference.is_null() {
        "Available"
    } else if claim_alive {
        // Bound once the binder finished (it sets Bound itself); until then, reserved.
        if phase == "Bound" {
            "Bound"
        } else {
            "Available"
        }
    } else if reference["uid"].is_null() {
        // Reserved by name for a claim that does not exist yet.
        "Available"
    } else {
        "Released"
    };
    let mut volume = volume.clone();
    if phase != wanted && phase != "Failed" {
        let mut next = (*volume).clone();
        next["status"] = json!({"phase": wanted});
        volume = update(state, random, VOLUMES, &volume, next, Part::Status)?;
    }
    let delete = volume["spec"]["persistentVolumeReclaimPolicy"] == "Delete";
    if wanted != "Released" || !delete || phase == "Failed" {
        return None;
    }
    if let Some(dirs) = dirs {
        unlink_claim(dirs, &volume);
    }
    let path = path_of(&volume).filter(|p| dirs.is_some_and(|d| p.starts_with(&d.volumes)));
    let removal = Removal {
        volume: name_of(&volume).to_string(),
        uid: volume["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        path: path.unwrap_or_default(),
    };
    if removal.path.as_os_str().is_empty() {
        // Nothing of ours on disk (the simulated runtime): delete the volume object now.
        finish_reclaim(state, random, &removal, Ok(()));
        return None;
    }
    Some(removal)
}

/// After the directory went (or could not): delete the volume, or mark it Failed.
fn finish_reclaim(
    state: &mut StoreState,
    random: &mut Xorshift,
    removal: &Removal,
    result: std::io::Result<()>,
) {
    let Some(volume) = state.get(VOLUMES, "", &removal.volume) else {
        return;
    };
    if volume["metadata"]["uid"].as_str() != Some(removal.uid.as_str()) {
        return;
    }
    match result {
        Ok(()) => {
            let Some(resource) = state.registry.find_by_store_key(VOLUMES).cloned() else {
                return;
            };
            let deleted = objects::delete(
                state,
                &resource,
                "",
                &removal.volume,
                &objects::DeleteOptions::default(),
                false,
            );
            // The pv-protection finalizer held it: the volume is unbound, so let it go now.
            if let Ok(marked) = deleted {
                if let Some(current) = state.get(VOLUMES, "", name_of(&marked)) {
                    let next = without_finalizer(&current, VOLUME_PROTECTION);
                    update(state, random, VOLUMES, &current, next, Part::Main);
                }
            }
        }
        Err(error) => {
            let message = format!(
                "cannot remove the volume's directory {}: {error}",
                removal.path.display()
            );
            event(
                state,
                random,
                &volume,
                true,
                "VolumeFailedDelete",
                message.clone(),
            );
            let mut next = (*volume).clone();
            next["status"] =
                json!({"phase": "Failed", "reason": "VolumeFailedDelete", "message": message});
            update(state, random, VOLUMES, &volume, next, Part::Status);
        }
    }
}

/// `rm -rf`, then again after making every directory writable: PostgreSQL leaves PGDATA 0700
/// and a file tree a pod made read-only would otherwise stop the removal half way.
fn remove_volume_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) => {
            make_writable(path);
            std::fs::remove_dir_all(path)
        }
    }
}

fn make_writable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    if !metadata.is_dir() {
        return;
    }
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        make_writable(&entry.path());
    }
}

/// Why the scheduler would not place `pod` now, if it would not: a claim it names is missing,
/// being deleted, or not bound yet (kube's messages, `kubectl describe pod` shows them).
pub(crate) fn unschedulable_reason(state: &StoreState, pod: &Value) -> Option<String> {
    let namespace = namespace_of(pod);
    let mut unbound = false;
    for name in claims_of(pod) {
        let Some(claim) = state.get(CLAIMS, namespace, name) else {
            return Some(unschedulable(&format!(
                "persistentvolumeclaim \"{name}\" not found"
            )));
        };
        if !claim["metadata"]["deletionTimestamp"].is_null() {
            return Some(unschedulable(&format!(
                "persistentvolumeclaim \"{name}\" is being deleted"
            )));
        }
        unbound |= claim["status"]["phase"] != "Bound";
    }
    unbound.then(|| unschedulable("pod has unbound immediate PersistentVolumeClaims"))
}

fn unschedulable(why: &str) -> String {
    format!("0/1 nodes are available: {why}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
}

/// What became of a pod waiting for its claims.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Scheduling {
    /// Every claim it names is bound (or it names none): start it.
    Schedulable,
    /// It was deleted while it waited: remove it (it never ran).
    Deleted,
    /// It is gone, replaced, or the sandbox stops.
    Gone,
}

/// The scheduler's wait: until every claim `pod` names is bound. Meanwhile the pod is Pending
/// with `PodScheduled=False` (reason Unschedulable) and one FailedScheduling event.
pub(crate) async fn wait_for_claims(
    store: &Store,
    namespace: &str,
    name: &str,
    uid: &str,
    shutdown: &CancellationToken,
) -> Scheduling {
    let mut random = Xorshift::from_entropy();
    loop {
        let mut wakeups = {
            let mut state = store.lock();
            let Some(pod) = state.get(PODS, namespace, name) else {
                return Scheduling::Gone;
            };
            if pod["metadata"]["uid"].as_str() != Some(uid) {
                return Scheduling::Gone;
            }
            if !pod["metadata"]["deletionTimestamp"].is_null() {
                return Scheduling::Deleted;
            }
            match unschedulable_reason(&state, &pod) {
                None => {
                    mark_scheduled(&mut state, &pod, None);
                    return Scheduling::Schedulable;
                }
                Some(message) => {
                    mark_scheduled(&mut state, &pod, Some(&message));
                    let seen = state.list("/events", Some(namespace)).iter().any(|e| {
                        e["involvedObject"]["uid"] == uid && e["reason"] == "FailedScheduling"
                    });
                    if !seen {
                        let mut event = builtins::pod_event(
                            &pod,
                            &mut random,
                            "default-scheduler",
                            "FailedScheduling",
                            message,
                        );
                        event["type"] = json!("Warning");
                        state.commit_added("/events", event);
                    }
                }
            }
            Wakeups::register(&mut state, &[CLAIMS, PODS], Some(namespace))
        };
        tokio::select! {
            _ = wakeups.changed() => {}
            _ = shutdown.cancelled() => {
                wakeups.unregister(&mut store.lock());
                return Scheduling::Gone;
            }
        }
        wakeups.unregister(&mut store.lock());
    }
}

/// Write the pod's `PodScheduled` condition: False with the reason while it waits, True once
/// its claims are bound.
fn mark_scheduled(state: &mut StoreState, pod: &Value, waiting: Option<&str>) {
    let mut conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let wanted = match waiting {
        Some(message) => json!({"type": "PodScheduled", "status": "False",
                                "reason": "Unschedulable", "message": message}),
        None => json!({"type": "PodScheduled", "status": "True"}),
    };
    let current = conditions.iter().position(|c| c["type"] == "PodScheduled");
    if let Some(at) = current {
        let same = conditions[at]["status"] == wanted["status"]
            && conditions[at]["message"] == wanted["message"];
        if same {
            return;
        }
    }
    let mut condition = wanted;
    condition["lastTransitionTime"] = json!(timefmt::now_rfc3339());
    match current {
        Some(at) => conditions[at] = condition,
        None => conditions.push(condition),
    }
    let mut next = pod.clone();
    next["status"]["conditions"] = json!(conditions);
    state.commit_modified(PODS, next);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Quantities as apimachinery reads them; anything else is not one.
    #[test]
    fn storage_quantities_parse_with_binary_decimal_and_exponent_suffixes() {
        let parse = builtins::parse_quantity;
        assert_eq!(parse("1Gi"), Some(1024.0 * 1024.0 * 1024.0));
        assert_eq!(parse("500M"), Some(500e6));
        assert_eq!(parse("1.5e3"), Some(1500.0));
        assert_eq!(parse("100"), Some(100.0));
        for garbage in ["lots", "", "1GB", "1..5Gi", "Gi", "1-Gi", "1Gi "] {
            assert_eq!(parse(garbage), None, "{garbage:?}");
        }
    }

    /// kube's three reasons a pod waits for its claims, in its words.
    #[test]
    fn a_pod_waits_for_missing_deleted_and_unbound_claims() {
        let store = Store::new(100, 10);
        let mut state = store.lock();
        let pod = json!({"metadata": {"namespace": "default", "name": "db"},
                         "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "pgdata"}}]}});
        let missing = unschedulable_reason(&state, &pod).expect("missing claim");
        assert!(
            missing.starts_with(
                "0/1 nodes are available: persistentvolumeclaim \"pgdata\" not found."
            ),
            "{missing}"
        );
        state.commit_added(CLAIMS, json!({"metadata": {"namespace": "default", "name": "pgdata"}, "status": {"phase": "Pending"}}));
        let unbound = unschedulable_reason(&state, &pod).expect("unbound claim");
        assert!(
            unbound.contains("pod has unbound immediate PersistentVolumeClaims"),
            "{unbound}"
        );
        state.commit_modified(CLAIMS, json!({"metadata": {"namespace": "default", "name": "pgdata"}, "status": {"phase": "Bound"}}));
        assert_eq!(unschedulable_reason(&state, &pod), None);
    }
}
