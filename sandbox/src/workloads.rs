//! kube-controller-manager's workload controllers: a Deployment keeps one ReplicaSet per pod
//! template and moves pods from the old ones to the new one; a ReplicaSet keeps `replicas`
//! pods of its template.
//!
//! WORKSHOP.md, "Set-up: the sandbox". One task runs both controllers. It watches the store
//! itself (Deployments, ReplicaSets and pods: kube-controller-manager's informers) and after
//! each batch of changes syncs every ReplicaSet, then every Deployment, level-based: a sync
//! reads what is stored now and writes only what differs, so its own writes come back as one
//! more batch that changes nothing, and the loop sleeps. Time-based checks (minReadySeconds,
//! the progress deadline) wake it when they fall due; a slow resync covers anything else.
//! Writes go through `objects.rs` like an API request's (defaults, checks, generation), and a
//! pod it creates is started by the kubelet of either runtime as any other pod.
//!
//! Where it simplifies: a controller owns exactly the objects whose controller reference
//! names it (no adoption of orphans that match its selector, no release of relabelled ones);
//! the pod-template-hash is FNV-32a of the template's canonical JSON, not of Go's dump of the
//! struct, so a template's hash differs from a real cluster's; pods to delete are ranked by
//! kube's rules without its logarithmic time buckets; no `revision-history` annotation.

mod deployment;
mod replica_set;
mod template;

use std::sync::{Arc, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::mpsc;

use crate::builtins;
use crate::controllers;
use crate::errors::ApiError;
use crate::objects::{
    self, Committed, DeleteOptions, FieldValidation, FollowUp, Part, WriteOptions,
};
use crate::random::Xorshift;
use crate::resources::ResourceType;
use crate::state::Shared;
use crate::store::{Filter, Store, StoreState, WatchMessage, WatchStart};
use crate::sync::lock;
use crate::timefmt;

const DEPLOYMENTS: &str = "apps/deployments";
const REPLICA_SETS: &str = "apps/replicasets";
const PODS: &str = "/pods";

/// Sync everything at least this often, even with no change seen.
const RESYNC: Duration = Duration::from_secs(30);
/// A time-based wake-up never comes sooner than this after a sync (no busy loop, whatever
/// the clock says).
const MIN_WAIT: Duration = Duration::from_millis(100);
/// kube's `burstReplicas`: at most this many pods created or deleted per ReplicaSet per sync.
const BURST: usize = 500;

/// Run both controllers until the sandbox shuts down.
pub(crate) async fn run(shared: Arc<Shared>) {
    while !shared.shutdown.is_cancelled() {
        let mut watches = Watches::register(&shared.store);
        loop {
            let wake = sync_all(&shared);
            let delay = wake
                .map_or(RESYNC, |at| {
                    at.duration_since(SystemTime::now()).unwrap_or_default()
                })
                .clamp(MIN_WAIT, RESYNC);
            let alive = tokio::select! {
                _ = shared.shutdown.cancelled() => {
                    watches.end(&shared.store);
                    return;
                }
                alive = watches.changed() => alive,
                _ = tokio::time::sleep(delay) => true,
            };
            // A watcher that fell behind (or was ended by a fault) is re-registered, and
            // everything synced again, as an informer re-lists.
            if !alive || !watches.drain() {
                break;
            }
        }
        watches.end(&shared.store);
    }
}

/// The controllers' own watchers on the store: one per kind they act on.
struct Watches {
    ids: Vec<u64>,
    deployments: mpsc::Receiver<WatchMessage>,
    replica_sets: mpsc::Receiver<WatchMessage>,
    pods: mpsc::Receiver<WatchMessage>,
}

impl Watches {
    fn register(store: &Store) -> Watches {
        let mut state = store.lock();
        let mut ids = Vec::new();
        let mut watch = |store_key: &str| {
            let filter = Filter {
                store_key: store_key.into(),
                ..Filter::default()
            };
            // From the current revision: nothing to replay, every sync reads the store anyway.
            let revision = state.revision();
            match state.register_watcher(filter, WatchStart::After(revision)) {
                Ok(registration) => {
                    ids.push(registration.id);
                    registration.receiver
                }
                // Cannot happen for the current revision; a closed channel re-registers.
                Err(_) => mpsc::channel(1).1,
            }
        };
        let deployments = watch(DEPLOYMENTS);
        let replica_sets = watch(REPLICA_SETS);
        let pods = watch(PODS);
        Watches {
            ids,
            deployments,
            replica_sets,
            pods,
        }
    }

    /// Wait for the next change of any kind; false when a watcher was ended.
    async fn changed(&mut self) -> bool {
        tokio::select! {
            message = self.deployments.recv() => message.is_some(),
            message = self.replica_sets.recv() => message.is_some(),
            message = self.pods.recv() => message.is_some(),
        }
    }

    /// Take every queued change (one sync covers them all); false when a watcher was ended.
    fn drain(&mut self) -> bool {
        for receiver in [
            &mut self.deployments,
            &mut self.replica_sets,
            &mut self.pods,
        ] {
            loop {
                match receiver.try_recv() {
                    Ok(_) => continue,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => return false,
                }
            }
        }
        true
    }

    fn end(&self, store: &Store) {
        let mut state = store.lock();
        for id in &self.ids {
            state.remove_watcher(*id);
        }
    }
}

/// One round: every ReplicaSet, then every Deployment, under one store lock (each write is
/// seen by the next sync at once). Returns when a time-based check next falls due.
fn sync_all(shared: &Arc<Shared>) -> Option<SystemTime> {
    // The random source first, on its own: the kubelet takes it while holding the store lock.
    let seed = lock(&shared.random).next_u64();
    let mut writer = Writer {
        state: shared.store.lock(),
        random: Xorshift::from_seed(seed),
        follow_ups: Vec::new(),
        events: shared.options.pod_events,
        pod_termination_delay: shared.options.pod_termination_delay,
        now: SystemTime::now(),
        wake: None,
    };
    for replica_set in writer.state.list(REPLICA_SETS, None) {
        if let Err(error) = replica_set::sync(&mut writer, &replica_set) {
            tracing::debug!(name = name(&replica_set), error = %error.status.message, "ReplicaSet sync failed");
        }
    }
    for deployment in writer.state.list(DEPLOYMENTS, None) {
        if let Err(error) = deployment::sync(&mut writer, &deployment) {
            tracing::debug!(name = name(&deployment), error = %error.status.message, "Deployment sync failed");
        }
    }
    let Writer {
        state,
        follow_ups,
        wake,
        ..
    } = writer;
    drop(state);
    controllers::spawn_follow_ups(shared, follow_ups);
    wake
}

/// What a sync may do to the store: the writes an API client would make, plus Events.
pub(super) struct Writer<'a> {
    pub(super) state: MutexGuard<'a, StoreState>,
    random: Xorshift,
    /// Pods to start and terminating pods to remove, once the store lock is released.
    follow_ups: Vec<FollowUp>,
    events: bool,
    pod_termination_delay: Duration,
    pub(super) now: SystemTime,
    wake: Option<SystemTime>,
}

impl Writer<'_> {
    /// The built-in kind at `store_key` (always registered; `None` would mean a broken registry).
    pub(super) fn resource(&self, store_key: &str) -> Result<ResourceType, ApiError> {
        self.state
            .registry
            .find_by_store_key(store_key)
            .cloned()
            .ok_or_else(|| ApiError::internal(format!("{store_key} is not registered")))
    }

    fn options(&mut self) -> WriteOptions<'_> {
        WriteOptions {
            field_validation: FieldValidation::Ignore,
            dry_run: false,
            random: &mut self.random,
            duplicate_fields: Vec::new(),
            service_block: None,
            volume_root: None,
            pod_ids_restricted: false,
        }
    }

    /// POST: the object as stored (defaults, uid, generated name).
    pub(super) fn create(
        &mut self,
        store_key: &str,
        namespace: &str,
        body: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let resource = self.resource(store_key)?;
        let prepared = objects::prepare_create(&resource, Some(namespace), body, self.options())?;
        match objects::commit(&mut self.state, &resource, prepared)? {
            Committed::Done(outcome) => {
                self.follow_ups.extend(outcome.follow_ups);
                Ok(outcome.object)
            }
            Committed::Stale => Err(ApiError::internal("a create cannot be stale")),
        }
    }

    /// PUT of the stored object (or its `/status`) after `change`; nothing when unchanged.
    pub(super) fn update(
        &mut self,
        store_key: &str,
        object: &Value,
        part: Part,
        change: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>, ApiError> {
        let resource = self.resource(store_key)?;
        let (namespace, name) = (namespace(object), name(object));
        let old = self
            .state
            .get(store_key, namespace, name)
            .ok_or_else(|| ApiError::not_found(&resource, name))?;
        let mut next = (*old).clone();
        change(&mut next);
        if next == *old {
            return Ok(old);
        }
        let prepared = objects::prepare_update(&resource, &old, next, part, self.options())?;
        match objects::commit(&mut self.state, &resource, prepared)? {
            Committed::Done(outcome) => Ok(outcome.object),
            Committed::Stale => Err(ApiError::internal("changed under the store lock")),
        }
    }

    /// DELETE with the default (background) propagation; a pod terminates gracefully when the
    /// sandbox gives pods time to stop.
    pub(super) fn delete(&mut self, store_key: &str, object: &Value) -> Result<(), ApiError> {
        let resource = self.resource(store_key)?;
        let options = DeleteOptions {
            pod_termination_delay: self.pod_termination_delay,
            ..DeleteOptions::default()
        };
        let deleted = objects::delete(
            &mut self.state,
            &resource,
            namespace(object),
            name(object),
            &options,
            false,
        )?;
        // As after a kubectl delete: the (simulated) kubelet removes a terminating pod later.
        self.follow_ups.extend(FollowUp::after_delete(&deleted));
        Ok(())
    }

    /// Record an Event about `object`, when the sandbox records events at all.
    pub(super) fn event(
        &mut self,
        object: &Value,
        component: &str,
        event_type: &str,
        reason: &str,
        message: String,
    ) {
        if !self.events {
            return;
        }
        let event = builtins::event_about(
            object,
            &mut self.random,
            component,
            event_type,
            reason,
            message,
        );
        self.state.commit_added("/events", event);
    }

    /// Sync again no later than `at`.
    pub(super) fn wake_at(&mut self, at: SystemTime) {
        self.wake = Some(self.wake.map_or(at, |current| current.min(at)));
    }

    /// The objects of `store_key` in `namespace` whose controller is `owner`, oldest first.
    pub(super) fn owned(&self, store_key: &str, owner: &Value) -> Vec<Arc<Value>> {
        let owner_uid = uid(owner);
        let mut owned: Vec<Arc<Value>> = self
            .state
            .list(store_key, Some(namespace(owner)))
            .into_iter()
            .filter(|o| controller_uid(o) == Some(owner_uid))
            .collect();
        owned.sort_by_key(|o| created(o));
        owned
    }
}

pub(super) fn name(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap_or_default()
}

pub(super) fn namespace(object: &Value) -> &str {
    object["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub(super) fn uid(object: &Value) -> &str {
    object["metadata"]["uid"].as_str().unwrap_or_default()
}

pub(super) fn is_deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// An integer field, 0 when absent (Go's zero value).
pub(super) fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

/// `spec.replicas`, defaulted to 1 when the object was stored.
pub(super) fn replicas(object: &Value) -> i64 {
    object["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// (creationTimestamp, name): RFC 3339 in one format sorts as time does.
pub(super) fn created(object: &Value) -> (String, String) {
    (
        object["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name(object).to_string(),
    )
}

/// The uid in the object's controller reference (`controller: true`), if any.
pub(super) fn controller_uid(object: &Value) -> Option<&str> {
    object["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"] == true)
        .and_then(|r| r["uid"].as_str())
}

/// The controller reference an owner puts on what it creates; `blockOwnerDeletion` makes a
/// foreground deletion of the owner wait for it.
pub(super) fn controller_reference(owner: &Value) -> Value {
    json!({"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name(owner),
           "uid": uid(owner), "controller": true, "blockOwnerDeletion": true})
}

/// The pod's Ready condition: `Some(since)` while it is True.
fn ready_since(pod: &Value) -> Option<Option<SystemTime>> {
    let ready = pod["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")?;
    Some(
        ready["lastTransitionTime"]
            .as_str()
            .and_then(timefmt::parse_rfc3339),
    )
}

pub(super) fn is_ready(pod: &Value) -> bool {
    ready_since(pod).is_some()
}

/// kube's `IsPodAvailable`: Ready, and for longer than `min_ready_seconds`. A ready pod that
/// is not available yet asks the writer to wake when it will be.
pub(super) fn is_available(writer: &mut Writer<'_>, pod: &Value, min_ready_seconds: i64) -> bool {
    let Some(since) = ready_since(pod) else {
        return false;
    };
    if min_ready_seconds <= 0 {
        return true;
    }
    let Some(since) = since else {
        return false;
    };
    let due = since + Duration::from_secs(min_ready_seconds.unsigned_abs());
    if due < writer.now {
        return true;
    }
    // Timestamps have whole seconds: one more second makes `due < now` certain.
    writer.wake_at(due + Duration::from_secs(1));
    false
}

/// Neither finished (Succeeded, Failed) nor being deleted: kube's `IsPodActive`. Terminating
/// pods are not counted in `replicas`, so a replacement starts while they stop.
pub(super) fn is_active(pod: &Value) -> bool {
    !is_deleting(pod)
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

/// `status` as an object (whatever a client wrote there), for conditions to be set in.
pub(super) fn status_object(object: &mut Value) -> &mut Value {
    if !object["status"].is_object() {
        object["status"] = json!({});
    }
    &mut object["status"]
}

/// kube's `SetCondition`: replace the condition of the same type, keeping its
/// lastTransitionTime while the status stays; nothing changes if status and reason are the same.
pub(super) fn set_condition(status: &mut Value, mut condition: Value) {
    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
    if let Some(current) = conditions.iter().find(|c| c["type"] == condition["type"]) {
        if current["status"] == condition["status"] && current["reason"] == condition["reason"] {
            return;
        }
        if current["status"] == condition["status"] {
            condition["lastTransitionTime"] = current["lastTransitionTime"].clone();
        }
    }
    let mut kept: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != condition["type"])
        .collect();
    kept.push(condition);
    status["conditions"] = json!(kept);
}

pub(super) fn remove_condition(status: &mut Value, kind: &str) {
    let Some(conditions) = status["conditions"].as_array() else {
        return;
    };
    let kept: Vec<Value> = conditions
        .iter()
        .filter(|c| c["type"] != kind)
        .cloned()
        .collect();
    match (kept.is_empty(), status.as_object_mut()) {
        // `conditions` is omitempty in Go.
        (true, Some(map)) => {
            map.remove("conditions");
        }
        _ => status["conditions"] = json!(kept),
    }
}

pub(super) fn condition<'v>(object: &'v Value, kind: &str) -> Option<&'v Value> {
    object["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

/// Put `value` in `status[field]`, or leave it out when 0 (omitempty in Go).
pub(super) fn set_count(status: &mut Value, field: &str, value: i64) {
    if value != 0 {
        status[field] = json!(value);
    }
}
