//! The Deployment controller, step for step as kube's `syncDeployment`: find the ReplicaSet
//! of the current template (or create it), scale it up and the old ones down within
//! maxSurge/maxUnavailable (RollingUpdate) or all old pods first (Recreate), keep
//! revisionHistoryLimit old ReplicaSets, and write the status and conditions
//! `kubectl rollout status` reads.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::template::{equal_ignore_hash, pod_template_hash};
use super::{
    condition, controller_reference, controller_uid, created, int, is_deleting, name, namespace,
    remove_condition, replicas, set_condition, set_count, status_object, uid, Writer, DEPLOYMENTS,
    PODS, REPLICA_SETS,
};
use crate::builtins::{IntOrPercent, POD_TEMPLATE_HASH};
use crate::errors::ApiError;
use crate::objects::Part;
use crate::timefmt;

const COMPONENT: &str = "deployment-controller";
const REVISION: &str = "deployment.kubernetes.io/revision";
const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";
/// Deployment annotations that are not copied to its ReplicaSets.
const NOT_COPIED: [&str; 6] = [
    "kubectl.kubernetes.io/last-applied-configuration",
    REVISION,
    "deployment.kubernetes.io/revision-history",
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    "deprecated.deployment.rollback.to",
];

type ReplicaSet = Arc<Value>;

pub(super) fn sync(writer: &mut Writer<'_>, deployment: &Arc<Value>) -> Result<(), ApiError> {
    if is_deleting(deployment) {
        get_replica_sets(writer, deployment, false)?;
        return sync_status(writer, deployment);
    }
    check_paused_conditions(writer, deployment)?;
    let deployment = current(writer, deployment)?;
    if deployment["spec"]["paused"] == true || is_scaling_event(writer, &deployment)? {
        return sync_scale(writer, &deployment);
    }
    if deployment["spec"]["strategy"]["type"] == "Recreate" {
        rollout_recreate(writer, &deployment)
    } else {
        rollout_rolling(writer, &deployment)
    }
}

/// The deployment as stored now (a step before may have written it).
fn current(writer: &Writer<'_>, deployment: &Value) -> Result<Arc<Value>, ApiError> {
    writer
        .state
        .get(DEPLOYMENTS, namespace(deployment), name(deployment))
        .ok_or_else(|| ApiError::internal("the deployment is gone"))
}

// ---- numbers ----

fn is_rolling(deployment: &Value) -> bool {
    deployment["spec"]["strategy"]["type"] != "Recreate"
}

/// kube's `ResolveFenceposts`: maxSurge rounds up, maxUnavailable down, and both 0 becomes
/// maxUnavailable 1 (validation refuses that, but a rollout must still move).
fn fenceposts(deployment: &Value) -> (i64, i64) {
    let desired = replicas(deployment);
    let rolling = &deployment["spec"]["strategy"]["rollingUpdate"];
    let scaled = |field: &str, round_up: bool| {
        IntOrPercent::parse(&rolling[field]).map_or(0, |v| v.scaled(desired, round_up).max(0))
    };
    let surge = scaled("maxSurge", true);
    let unavailable = scaled("maxUnavailable", false);
    if surge == 0 && unavailable == 0 {
        return (0, 1);
    }
    (surge, unavailable)
}

fn max_surge(deployment: &Value) -> i64 {
    if !is_rolling(deployment) {
        return 0;
    }
    fenceposts(deployment).0
}

fn max_unavailable(deployment: &Value) -> i64 {
    if !is_rolling(deployment) || replicas(deployment) == 0 {
        return 0;
    }
    fenceposts(deployment).1.min(replicas(deployment))
}

fn sum_spec(replica_sets: &[ReplicaSet]) -> i64 {
    replica_sets.iter().map(|rs| replicas(rs)).sum()
}

fn sum_status(replica_sets: &[ReplicaSet], field: &str) -> i64 {
    replica_sets
        .iter()
        .map(|rs| int(&rs["status"][field]))
        .sum()
}

fn active(replica_sets: &[ReplicaSet]) -> Vec<ReplicaSet> {
    replica_sets
        .iter()
        .filter(|rs| replicas(rs) > 0)
        .cloned()
        .collect()
}

fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v str> {
    object["metadata"]["annotations"][key].as_str()
}

fn revision(object: &Value) -> i64 {
    annotation(object, REVISION)
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn has_progress_deadline(deployment: &Value) -> bool {
    // kube's "no deadline" is MaxInt32; the sandbox also accepts it being left out.
    deployment["spec"]["progressDeadlineSeconds"]
        .as_i64()
        .is_some_and(|s| s < i64::from(i32::MAX))
}

fn new_condition(kind: &str, status: &str, reason: &str, message: String) -> Value {
    let now = timefmt::now_rfc3339();
    json!({"type": kind, "status": status, "lastUpdateTime": now, "lastTransitionTime": now,
           "reason": reason, "message": message})
}

// ---- the ReplicaSets of a deployment ----

/// (new, old): the ReplicaSet whose template is the deployment's, and all the others.
fn new_and_old(writer: &Writer<'_>, deployment: &Value) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    let mut old = writer.owned(REPLICA_SETS, deployment);
    let template = &deployment["spec"]["template"];
    // The oldest equal one, as kube's FindNewReplicaSet.
    let new = old
        .iter()
        .position(|rs| equal_ignore_hash(&rs["spec"]["template"], template))
        .map(|at| old.remove(at));
    (new, old)
}

/// kube's `getAllReplicaSetsAndSyncRevision`: the new ReplicaSet (created when `create` and
/// missing) with its revision a step above every old one, and the deployment's revision
/// annotation following it.
fn get_replica_sets(
    writer: &mut Writer<'_>,
    deployment: &Value,
    create: bool,
) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), ApiError> {
    let (new, old) = new_and_old(writer, deployment);
    let new_revision = old.iter().map(|rs| revision(rs)).max().unwrap_or(0) + 1;
    if let Some(existing) = new {
        let min_ready = deployment["spec"]["minReadySeconds"].clone();
        let updated = writer.update(REPLICA_SETS, &existing, Part::Main, |rs| {
            set_new_replica_set_annotations(deployment, rs, new_revision, true);
            rs["spec"]["minReadySeconds"] = min_ready;
        })?;
        if !Arc::ptr_eq(&updated, &existing) {
            return Ok((Some(updated), old));
        }
        let revision_text = annotation(&updated, REVISION)
            .unwrap_or_default()
            .to_string();
        let deployment = writer.update(DEPLOYMENTS, deployment, Part::Main, |d| {
            d["metadata"]["annotations"][REVISION] = json!(revision_text);
        })?;
        if has_progress_deadline(&deployment)
            && condition(&deployment["status"], "Progressing").is_none()
        {
            let message = format!("Found new replica set {:?}", name(&updated));
            writer.update(DEPLOYMENTS, &deployment, Part::Status, |d| {
                let found = new_condition("Progressing", "True", "FoundNewReplicaSet", message);
                set_condition(status_object(d), found);
            })?;
        }
        return Ok((Some(updated), old));
    }
    if !create {
        return Ok((None, old));
    }
    create_replica_set(writer, deployment, old, new_revision)
}

/// A new ReplicaSet `<deployment>-<pod-template-hash>` for the deployment's template.
fn create_replica_set(
    writer: &mut Writer<'_>,
    deployment: &Value,
    old: Vec<ReplicaSet>,
    new_revision: i64,
) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), ApiError> {
    let collisions = deployment["status"]["collisionCount"].as_i64();
    let hash = pod_template_hash(&deployment["spec"]["template"], collisions);
    let rs_name = format!("{}-{hash}", name(deployment));
    let mut template = deployment["spec"]["template"].clone();
    template["metadata"]["labels"][POD_TEMPLATE_HASH] = json!(hash);
    let mut selector = deployment["spec"]["selector"].clone();
    selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
    let mut replica_set = json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": rs_name, "namespace": namespace(deployment),
                     "labels": template["metadata"]["labels"],
                     "ownerReferences": [controller_reference(deployment)]},
        "spec": {"replicas": 0, "selector": selector, "template": template}
    });
    if let Some(seconds) = deployment["spec"]["minReadySeconds"].as_i64() {
        replica_set["spec"]["minReadySeconds"] = json!(seconds);
    }
    let mut all = old.clone();
    all.push(Arc::new(replica_set.clone()));
    let count = new_replica_set_replicas(deployment, &all, 0);
    replica_set["spec"]["replicas"] = json!(count);
    set_new_replica_set_annotations(deployment, &mut replica_set, new_revision, false);

    if let Some(existing) = writer
        .state
        .get(REPLICA_SETS, namespace(deployment), &rs_name)
    {
        // Another template hashed to this name: count the collision, so the next sync
        // hashes with a new count and so a new name.
        let message = format!("replicasets.apps {rs_name:?} already exists");
        if controller_uid(&existing) != Some(uid(deployment))
            || !equal_ignore_hash(
                &existing["spec"]["template"],
                &deployment["spec"]["template"],
            )
        {
            writer.update(DEPLOYMENTS, deployment, Part::Status, |d| {
                status_object(d)["collisionCount"] = json!(collisions.unwrap_or(0) + 1);
            })?;
        }
        return Err(ApiError::internal(message));
    }
    let created = match writer.create(REPLICA_SETS, namespace(deployment), replica_set) {
        Ok(created) => created,
        Err(error) => {
            let message = format!(
                "Failed to create new replica set {rs_name:?}: {}",
                error.status.message
            );
            if has_progress_deadline(deployment) {
                let failed = new_condition(
                    "Progressing",
                    "False",
                    "ReplicaSetCreateError",
                    message.clone(),
                );
                writer.update(DEPLOYMENTS, deployment, Part::Status, |d| {
                    set_condition(status_object(d), failed);
                })?;
            }
            writer.event(deployment, COMPONENT, "Warning", "FailedCreate", message);
            return Err(error);
        }
    };
    if count > 0 {
        let message = format!("Scaled up replica set {rs_name} from 0 to {count}");
        writer.event(
            deployment,
            COMPONENT,
            "Normal",
            "ScalingReplicaSet",
            message,
        );
    }
    let deployment = writer.update(DEPLOYMENTS, deployment, Part::Main, |d| {
        d["metadata"]["annotations"][REVISION] = json!(new_revision.to_string());
    })?;
    if has_progress_deadline(&deployment) {
        let message = format!("Created new replica set {rs_name:?}");
        writer.update(DEPLOYMENTS, &deployment, Part::Status, |d| {
            let created = new_condition("Progressing", "True", "NewReplicaSetCreated", message);
            set_condition(status_object(d), created);
        })?;
    }
    Ok((Some(created), old))
}

/// kube's `SetNewReplicaSetAnnotations`: the deployment's own annotations, the revision
/// (raised, never lowered), and for a new ReplicaSet the replica annotations.
fn set_new_replica_set_annotations(
    deployment: &Value,
    replica_set: &mut Value,
    new_revision: i64,
    exists: bool,
) {
    let annotations = &mut replica_set["metadata"]["annotations"];
    for (key, value) in deployment["metadata"]["annotations"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if !NOT_COPIED.contains(&key.as_str()) {
            annotations[key] = value.clone();
        }
    }
    let current = annotations[REVISION]
        .as_str()
        .and_then(|r| r.parse::<i64>().ok())
        .unwrap_or(0);
    if current < new_revision {
        annotations[REVISION] = json!(new_revision.to_string());
    }
    if !exists {
        set_replica_annotations(deployment, replica_set);
    }
}

fn set_replica_annotations(deployment: &Value, replica_set: &mut Value) {
    let desired = replicas(deployment);
    let annotations = &mut replica_set["metadata"]["annotations"];
    annotations[DESIRED_REPLICAS] = json!(desired.to_string());
    annotations[MAX_REPLICAS] = json!((desired + max_surge(deployment)).to_string());
}

/// kube's `NewRSNewReplicas`: how big the new ReplicaSet may be now.
fn new_replica_set_replicas(deployment: &Value, all: &[ReplicaSet], new_size: i64) -> i64 {
    let desired = replicas(deployment);
    if !is_rolling(deployment) {
        return desired;
    }
    let max_total = desired + max_surge(deployment);
    let current = sum_spec(all);
    if current >= max_total {
        return new_size;
    }
    new_size + (max_total - current).min(desired - new_size)
}

/// Set a ReplicaSet's size and replica annotations, with kube's ScalingReplicaSet event.
fn scale(
    writer: &mut Writer<'_>,
    deployment: &Value,
    replica_set: &ReplicaSet,
    size: i64,
) -> Result<ReplicaSet, ApiError> {
    let before = replicas(replica_set);
    let updated = writer.update(REPLICA_SETS, replica_set, Part::Main, |rs| {
        rs["spec"]["replicas"] = json!(size);
        set_replica_annotations(deployment, rs);
    })?;
    if before != size {
        let direction = if size > before { "up" } else { "down" };
        let message = format!(
            "Scaled {direction} replica set {} from {before} to {size}",
            name(replica_set)
        );
        writer.event(
            deployment,
            COMPONENT,
            "Normal",
            "ScalingReplicaSet",
            message,
        );
    }
    Ok(updated)
}

/// [`scale`] only when the size changes; whether it did.
fn scale_if_needed(
    writer: &mut Writer<'_>,
    deployment: &Value,
    replica_set: &ReplicaSet,
    size: i64,
) -> Result<(bool, ReplicaSet), ApiError> {
    if replicas(replica_set) == size {
        return Ok((false, replica_set.clone()));
    }
    Ok((true, scale(writer, deployment, replica_set, size)?))
}

// ---- scaling without a rollout (paused, or only `replicas` changed) ----

fn is_scaling_event(writer: &mut Writer<'_>, deployment: &Value) -> Result<bool, ApiError> {
    let (new, old) = get_replica_sets(writer, deployment, false)?;
    let all: Vec<ReplicaSet> = old.into_iter().chain(new).collect();
    let desired = replicas(deployment).to_string();
    Ok(active(&all)
        .iter()
        .any(|rs| annotation(rs, DESIRED_REPLICAS).is_some_and(|wanted| wanted != desired)))
}

/// kube's `sync`: scale the ReplicaSets (proportionally while a rollout is under way), clean
/// up old ones when paused, and write the status.
fn sync_scale(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    let (new, old) = get_replica_sets(writer, deployment, false)?;
    let deployment = current(writer, deployment)?;
    scale_proportionally(writer, &deployment, new, old)?;
    let deployment = current(writer, &deployment)?;
    if deployment["spec"]["paused"] == true {
        let (_, old) = new_and_old(writer, &deployment);
        cleanup(writer, &deployment, old)?;
    }
    sync_status(writer, &deployment)
}

fn scale_proportionally(
    writer: &mut Writer<'_>,
    deployment: &Value,
    new: Option<ReplicaSet>,
    mut old: Vec<ReplicaSet>,
) -> Result<(), ApiError> {
    let desired = replicas(deployment);
    // One active ReplicaSet (or none: the newest) takes every replica.
    old.sort_by_key(|rs| std::cmp::Reverse(created(rs)));
    let all_active = active(&old.iter().cloned().chain(new.clone()).collect::<Vec<_>>());
    let only = match all_active.len() {
        0 => new.clone().or_else(|| old.first().cloned()),
        1 => Some(all_active[0].clone()),
        _ => None,
    };
    if let Some(replica_set) = only {
        scale_if_needed(writer, deployment, &replica_set, desired)?;
        return Ok(());
    }
    let saturated = new.as_ref().is_some_and(|rs| {
        annotation(rs, DESIRED_REPLICAS) == Some(desired.to_string().as_str())
            && int(&rs["status"]["availableReplicas"]) == desired
            && replicas(rs) == desired
    });
    if saturated {
        for replica_set in active(&old) {
            scale_if_needed(writer, deployment, &replica_set, 0)?;
        }
        return Ok(());
    }
    if !is_rolling(deployment) {
        return Ok(());
    }
    let mut all = all_active;
    let allowed = if desired > 0 {
        desired + max_surge(deployment)
    } else {
        0
    };
    let to_add = allowed - sum_spec(&all);
    // Bigger first; between equals the newer gains first and the older loses first.
    if to_add > 0 {
        all.sort_by_key(|rs| {
            (
                std::cmp::Reverse(replicas(rs)),
                std::cmp::Reverse(created(rs)),
            )
        });
    } else {
        all.sort_by_key(|rs| (std::cmp::Reverse(replicas(rs)), created(rs)));
    }
    let mut added = 0;
    let mut sizes = Vec::new();
    for replica_set in &all {
        let share = proportion(deployment, replica_set, to_add, added);
        sizes.push(replicas(replica_set) + share);
        added += share;
    }
    if let Some(first) = sizes.first_mut() {
        *first = (*first + to_add - added).max(0);
    }
    for (replica_set, size) in all.iter().zip(sizes) {
        scale(writer, deployment, replica_set, size)?;
    }
    Ok(())
}

/// kube's `GetProportion`: this ReplicaSet's share of `to_add`, by its size against the
/// `max-replicas` it was last scaled for.
fn proportion(deployment: &Value, replica_set: &Value, to_add: i64, added: i64) -> i64 {
    let size = replicas(replica_set);
    if size == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let fraction = if replicas(deployment) == 0 {
        -size
    } else {
        let target = replicas(deployment) + max_surge(deployment);
        let annotated = annotation(replica_set, MAX_REPLICAS)
            .and_then(|m| m.parse::<i64>().ok())
            .unwrap_or_else(|| int(&deployment["status"]["replicas"]));
        if annotated == 0 {
            return 0;
        }
        (size as f64 * target as f64 / annotated as f64).round() as i64 - size
    };
    let allowed = to_add - added;
    if to_add > 0 {
        fraction.min(allowed)
    } else {
        fraction.max(allowed)
    }
}

// ---- rollouts ----

/// RollingUpdate: scale the new ReplicaSet up as far as maxSurge allows, else the old ones
/// down as far as maxUnavailable allows; one step per sync.
fn rollout_rolling(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    let (new, old) = get_replica_sets(writer, deployment, true)?;
    let deployment = current(writer, deployment)?;
    let Some(new) = new else {
        return sync_rollout_status(writer, &deployment);
    };
    let mut all = old.clone();
    all.push(new.clone());
    if scale_new_up(writer, &deployment, &all, &new)? {
        return sync_rollout_status(writer, &deployment);
    }
    if scale_old_down(writer, &deployment, &all, active(&old), &new)? {
        return sync_rollout_status(writer, &deployment);
    }
    if is_complete(&deployment, &deployment["status"]) {
        cleanup(writer, &deployment, old)?;
    }
    sync_rollout_status(writer, &deployment)
}

/// kube's `reconcileNewReplicaSet`.
fn scale_new_up(
    writer: &mut Writer<'_>,
    deployment: &Value,
    all: &[ReplicaSet],
    new: &ReplicaSet,
) -> Result<bool, ApiError> {
    let desired = replicas(deployment);
    if replicas(new) >= desired {
        return Ok(scale_if_needed(writer, deployment, new, desired)?.0);
    }
    let size = new_replica_set_replicas(deployment, all, replicas(new));
    Ok(scale_if_needed(writer, deployment, new, size)?.0)
}

/// kube's `reconcileOldReplicaSets`: never below `replicas - maxUnavailable` available pods,
/// counting the new ReplicaSet's unavailable ones as lost already; unhealthy pods go first.
fn scale_old_down(
    writer: &mut Writer<'_>,
    deployment: &Value,
    all: &[ReplicaSet],
    mut old_active: Vec<ReplicaSet>,
    new: &ReplicaSet,
) -> Result<bool, ApiError> {
    if sum_spec(&old_active) == 0 {
        return Ok(false);
    }
    let min_available = replicas(deployment) - max_unavailable(deployment);
    let new_unavailable = replicas(new) - int(&new["status"]["availableReplicas"]);
    let max_scaled_down = sum_spec(all) - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Ok(false);
    }
    // First the old ReplicaSets' unavailable pods: removing them costs no availability.
    old_active.sort_by_key(|rs| created(rs));
    let mut cleaned = 0;
    for replica_set in old_active.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = replicas(replica_set) - int(&replica_set["status"]["availableReplicas"]);
        if replicas(replica_set) == 0 || unhealthy <= 0 {
            continue;
        }
        let count = (max_scaled_down - cleaned).min(unhealthy);
        let size = replicas(replica_set) - count;
        *replica_set = scale_if_needed(writer, deployment, replica_set, size)?.1;
        cleaned += count;
    }
    // Then available ones, as far as the available count allows.
    let mut all: Vec<ReplicaSet> = old_active.clone();
    all.push(new.clone());
    let available = sum_status(&all, "availableReplicas");
    let mut scaled = 0;
    if available > min_available {
        let total = available - min_available;
        for replica_set in &old_active {
            if scaled >= total {
                break;
            }
            if replicas(replica_set) == 0 {
                continue;
            }
            let count = replicas(replica_set).min(total - scaled);
            scale_if_needed(
                writer,
                deployment,
                replica_set,
                replicas(replica_set) - count,
            )?;
            scaled += count;
        }
    }
    Ok(cleaned + scaled > 0)
}

/// Recreate: every old pod gone (not just terminating) before the new ReplicaSet scales up.
fn rollout_recreate(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    let (new, old) = get_replica_sets(writer, deployment, false)?;
    let deployment = current(writer, deployment)?;
    let mut scaled_down = false;
    for replica_set in active(&old) {
        scaled_down |= scale_if_needed(writer, &deployment, &replica_set, 0)?.0;
    }
    if scaled_down || old_pods_running(writer, new.as_ref(), &old) {
        return sync_rollout_status(writer, &deployment);
    }
    let new = match new {
        Some(new) => new,
        None => match get_replica_sets(writer, &deployment, true)?.0 {
            Some(new) => new,
            None => return sync_rollout_status(writer, &deployment),
        },
    };
    let deployment = current(writer, &deployment)?;
    scale_if_needed(writer, &deployment, &new, replicas(&deployment))?;
    if is_complete(&deployment, &deployment["status"]) {
        cleanup(writer, &deployment, old)?;
    }
    sync_rollout_status(writer, &deployment)
}

/// kube's `oldPodsRunning`: old ReplicaSets still count pods, or any of their pods (even a
/// terminating one) has not finished.
fn old_pods_running(writer: &Writer<'_>, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> bool {
    if sum_status(old, "replicas") > 0 {
        return true;
    }
    let new_uid = new.map(|rs| uid(rs));
    old.iter()
        .filter(|rs| Some(uid(rs)) != new_uid)
        .flat_map(|rs| writer.owned(PODS, rs))
        .any(|pod| {
            !matches!(
                pod["status"]["phase"].as_str(),
                Some("Succeeded" | "Failed")
            )
        })
}

/// kube's `cleanupDeployment`: delete the oldest revisions beyond revisionHistoryLimit, but
/// only ReplicaSets that are empty and settled.
fn cleanup(
    writer: &mut Writer<'_>,
    deployment: &Value,
    old: Vec<ReplicaSet>,
) -> Result<(), ApiError> {
    let Some(limit) = deployment["spec"]["revisionHistoryLimit"].as_i64() else {
        return Ok(());
    };
    let mut cleanable: Vec<ReplicaSet> = old.into_iter().filter(|rs| !is_deleting(rs)).collect();
    let surplus = cleanable.len() as i64 - limit;
    if surplus <= 0 {
        return Ok(());
    }
    cleanable.sort_by_key(|rs| (revision(rs), created(rs)));
    for replica_set in cleanable.iter().take(surplus as usize) {
        let settled = int(&replica_set["status"]["replicas"]) == 0
            && replicas(replica_set) == 0
            && int(&replica_set["metadata"]["generation"])
                <= int(&replica_set["status"]["observedGeneration"]);
        if settled {
            writer.delete(REPLICA_SETS, replica_set)?;
        }
    }
    Ok(())
}

// ---- status ----

/// kube's `checkPausedConditions`: Progressing Unknown while paused, and on resuming.
fn check_paused_conditions(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    if !has_progress_deadline(deployment) {
        return Ok(());
    }
    let progressing = condition(&deployment["status"], "Progressing");
    let reason = progressing.and_then(|c| c["reason"].as_str());
    // A reported lack of progress is not overwritten by a pause.
    if reason == Some("ProgressDeadlineExceeded") {
        return Ok(());
    }
    let paused = deployment["spec"]["paused"] == true;
    let was_paused = reason == Some("DeploymentPaused");
    let change = match (paused, was_paused) {
        (true, false) => ("DeploymentPaused", "Deployment is paused"),
        (false, true) => ("DeploymentResumed", "Deployment is resumed"),
        _ => return Ok(()),
    };
    writer.update(DEPLOYMENTS, deployment, Part::Status, |d| {
        let condition = new_condition("Progressing", "Unknown", change.0, change.1.into());
        set_condition(status_object(d), condition);
    })?;
    Ok(())
}

/// kube's `calculateStatus`: counts from the ReplicaSets' statuses, and Available.
fn calculate_status(deployment: &Value, new: Option<&ReplicaSet>, old: &[ReplicaSet]) -> Value {
    let mut all = old.to_vec();
    all.extend(new.cloned());
    let available = sum_status(&all, "availableReplicas");
    let mut status = json!({});
    set_count(
        &mut status,
        "observedGeneration",
        int(&deployment["metadata"]["generation"]),
    );
    set_count(&mut status, "replicas", sum_status(&all, "replicas"));
    set_count(
        &mut status,
        "updatedReplicas",
        new.map_or(0, |rs| int(&rs["status"]["replicas"])),
    );
    set_count(
        &mut status,
        "readyReplicas",
        sum_status(&all, "readyReplicas"),
    );
    set_count(&mut status, "availableReplicas", available);
    set_count(
        &mut status,
        "unavailableReplicas",
        (sum_spec(&all) - available).max(0),
    );
    let previous = &deployment["status"];
    if !previous["collisionCount"].is_null() {
        status["collisionCount"] = previous["collisionCount"].clone();
    }
    if previous["conditions"].is_array() {
        status["conditions"] = previous["conditions"].clone();
    }
    let minimum = available >= replicas(deployment) - max_unavailable(deployment);
    let available_condition = if minimum {
        new_condition(
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        new_condition(
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    set_condition(&mut status, available_condition);
    status
}

/// kube's `syncDeploymentStatus`: the counts, without judging progress.
fn sync_status(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    let deployment = current(writer, deployment)?;
    let (new, old) = new_and_old(writer, &deployment);
    let status = calculate_status(&deployment, new.as_ref(), &old);
    writer.update(DEPLOYMENTS, &deployment, Part::Status, |d| {
        d["status"] = status
    })?;
    Ok(())
}

/// kube's `DeploymentComplete`: every wanted pod updated and available, and no old ones.
fn is_complete(deployment: &Value, status: &Value) -> bool {
    let desired = replicas(deployment);
    int(&status["updatedReplicas"]) == desired
        && int(&status["replicas"]) == desired
        && int(&status["availableReplicas"]) == desired
        && int(&status["observedGeneration"]) >= int(&deployment["metadata"]["generation"])
}

/// kube's `DeploymentProgressing`: more updated, ready or available pods, or fewer old ones.
fn is_progressing(deployment: &Value, status: &Value) -> bool {
    let before = &deployment["status"];
    let old_pods = |s: &Value| int(&s["replicas"]) - int(&s["updatedReplicas"]);
    int(&status["updatedReplicas"]) > int(&before["updatedReplicas"])
        || old_pods(status) < old_pods(before)
        || int(&status["readyReplicas"]) > int(&before["readyReplicas"])
        || int(&status["availableReplicas"]) > int(&before["availableReplicas"])
}

/// When the Progressing condition's last progress plus the deadline has passed, or `None`
/// while there is nothing to time out.
fn deadline(deployment: &Value, status: &Value) -> Option<std::time::SystemTime> {
    let progressing = condition(status, "Progressing")?;
    if progressing["reason"] == "NewReplicaSetAvailable"
        || progressing["reason"] == "ProgressDeadlineExceeded"
    {
        return None;
    }
    let seconds = deployment["spec"]["progressDeadlineSeconds"].as_i64()?;
    let from = timefmt::parse_rfc3339(progressing["lastUpdateTime"].as_str()?)?;
    Some(from + Duration::from_secs(seconds.max(0).unsigned_abs()))
}

/// kube's `syncRolloutStatus`: the counts, and the Progressing condition that
/// `kubectl rollout status` reads: progressing, complete, or past its deadline.
fn sync_rollout_status(writer: &mut Writer<'_>, deployment: &Value) -> Result<(), ApiError> {
    let deployment = current(writer, deployment)?;
    let (new, old) = new_and_old(writer, &deployment);
    let mut status = calculate_status(&deployment, new.as_ref(), &old);
    let with_deadline = has_progress_deadline(&deployment);
    if !with_deadline {
        remove_condition(&mut status, "Progressing");
    }
    let current_condition = condition(&status, "Progressing").cloned();
    let already_complete = int(&status["replicas"]) == int(&status["updatedReplicas"])
        && current_condition
            .as_ref()
            .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
    let subject = match &new {
        Some(rs) => format!("ReplicaSet {:?}", name(rs)),
        None => format!("Deployment {:?}", name(&deployment)),
    };
    if with_deadline && !already_complete {
        if is_complete(&deployment, &status) {
            let message = format!("{subject} has successfully progressed.");
            let done = new_condition("Progressing", "True", "NewReplicaSetAvailable", message);
            set_condition(&mut status, done);
        } else if is_progressing(&deployment, &status) {
            let message = format!("{subject} is progressing.");
            let mut moving = new_condition("Progressing", "True", "ReplicaSetUpdated", message);
            // Progress moves lastUpdateTime (the deadline counts from it), even with the
            // same reason, which `set_condition` alone would leave as it was.
            if let Some(current) = &current_condition {
                if current["status"] == "True" {
                    moving["lastTransitionTime"] = current["lastTransitionTime"].clone();
                }
                remove_condition(&mut status, "Progressing");
            }
            set_condition(&mut status, moving);
        } else if deadline(&deployment, &status).is_some_and(|at| at < writer.now) {
            let message = format!("{subject} has timed out progressing.");
            let late = new_condition("Progressing", "False", "ProgressDeadlineExceeded", message);
            set_condition(&mut status, late);
        }
    }
    // The first ReplicaFailure among the ReplicaSets (the new one first) becomes the deployment's.
    let failure = new
        .iter()
        .chain(old.iter())
        .find_map(|rs| condition(&rs["status"], "ReplicaFailure").filter(|c| c["status"] == "True"))
        .cloned();
    match failure {
        Some(failure) => set_condition(
            &mut status,
            new_condition(
                "ReplicaFailure",
                "True",
                failure["reason"].as_str().unwrap_or_default(),
                failure["message"].as_str().unwrap_or_default().into(),
            ),
        ),
        None => remove_condition(&mut status, "ReplicaFailure"),
    }
    // Not past the deadline yet: look again when it passes (kube's requeueStuckDeployment).
    if let Some(at) = deadline(&deployment, &status).filter(|_| with_deadline) {
        writer.wake_at(at + Duration::from_secs(1));
    }
    writer.update(DEPLOYMENTS, &deployment, Part::Status, |d| {
        d["status"] = status
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i64, surge: Value, unavailable: Value) -> Value {
        json!({"spec": {"replicas": replicas, "strategy": {"type": "RollingUpdate",
               "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}}})
    }

    /// Percentages: maxSurge rounds up, maxUnavailable down (25% of 3: surge 1, unavailable 0).
    #[test]
    fn surge_rounds_up_and_unavailable_down() {
        let d = deployment(3, json!("25%"), json!("25%"));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (1, 0));
        let d = deployment(10, json!("25%"), json!("25%"));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (3, 2));
        let d = deployment(4, json!(0), json!(0));
        assert_eq!((max_surge(&d), max_unavailable(&d)), (0, 1));
        let d = deployment(2, json!(1), json!(5));
        assert_eq!(max_unavailable(&d), 2, "never more than replicas");
    }

    /// A new ReplicaSet grows only as far as replicas + maxSurge allows in total.
    #[test]
    fn the_new_replica_set_grows_within_max_surge() {
        let d = deployment(3, json!(1), json!(0));
        let rs = |n: i64| Arc::new(json!({"spec": {"replicas": n}}));
        assert_eq!(new_replica_set_replicas(&d, &[rs(3), rs(0)], 0), 1);
        assert_eq!(new_replica_set_replicas(&d, &[rs(3), rs(1)], 1), 1);
        assert_eq!(new_replica_set_replicas(&d, &[rs(2), rs(1)], 1), 2);
        assert_eq!(new_replica_set_replicas(&d, &[rs(0)], 0), 3);
    }
}
