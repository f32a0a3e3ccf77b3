//! What the API server does to an object on each write: names, uid, timestamps, generation,
//! the status subresource rule, finalizers, garbage collection and each built-in kind's defaults.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A create or update is built and checked in
//! [`prepare_create`]/[`prepare_update`] *outside* the store lock (schema validation with its
//! `pattern`s can take a while, and every request takes that lock), then [`commit`] stores it
//! under the lock in one atomic step, like one etcd transaction — if the object it was built
//! from is still the stored one; otherwise the caller builds it again from the new one, as
//! kube-apiserver's GuaranteedUpdate retries. Deletes and garbage collection run under the lock.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::builtins::{
    check_crd, default_crd, default_deployment, default_namespace, default_pod,
    default_replica_set, default_secret, default_service,
};
use crate::cluster_ips::{AllocationError, ServiceRange};
use crate::errors::ApiError;
use crate::names;
use crate::patch as patching;
use crate::random::Xorshift;
use crate::resources::ResourceType;
use crate::schema;
use crate::status::StatusCause;
use crate::store::StoreState;
use crate::timefmt;

/// `?fieldValidation=`: what to do with fields the schema does not know.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    /// Drop them silently (the pruning every structural CRD gets).
    Ignore,
    /// Drop them and say so in `Warning` headers (kube-apiserver's default).
    Warn,
    /// Refuse the request: 400 BadRequest naming every unknown field.
    Strict,
}

impl FieldValidation {
    pub(crate) fn from_query(value: Option<&str>) -> Result<FieldValidation, ApiError> {
        match value {
            None | Some("") | Some("Warn") => Ok(FieldValidation::Warn),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some(other) => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, not {other:?}"
            ))),
        }
    }
}

/// Options every write shares.
pub(crate) struct WriteOptions<'a> {
    pub(crate) field_validation: FieldValidation,
    /// `?dryRun=All`: do everything but store the result.
    pub(crate) dry_run: bool,
    pub(crate) random: &'a mut Xorshift,
    /// Fields the raw JSON body gave twice (serde_json keeps the last one silently).
    pub(crate) duplicate_fields: Vec<String>,
    /// Some(B): pods run as processes and Services get ClusterIPs in `127.B.192.0/18`.
    pub(crate) service_block: Option<u8>,
    /// Pods run as processes: a PersistentVolume's hostPath must lie below this directory.
    /// None for the sandbox's own controllers (the provisioner) and the simulated runtime.
    pub(crate) volume_root: Option<std::path::PathBuf>,
    /// Pods run as processes and the sandbox is root: pods may ask only for the ids in
    /// `builtins::POD_IDS_AS_ROOT`.
    pub(crate) pod_ids_restricted: bool,
}

/// Work to start once the store lock is released (timers, simulated controllers).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum FollowUp {
    /// The simulated kubelet: mark this pod Running after `kubelet_delay`.
    StartPod {
        namespace: String,
        name: String,
        uid: String,
    },
    /// The CRD controller: set Established after `established_delay`.
    EstablishCrd { name: String, uid: String },
    /// The kubelet again: a pod in graceful termination is gone after `pod_termination_delay`.
    RemovePod {
        namespace: String,
        name: String,
        uid: String,
    },
}

impl FollowUp {
    /// What a deletion leaves to do: a pod it left in graceful termination (a deletion
    /// timestamp and a grace period) is removed later, by the kubelet.
    pub(crate) fn after_delete(deleted: &Value) -> Option<FollowUp> {
        let metadata = &deleted["metadata"];
        let terminating = deleted["kind"] == "Pod"
            && !metadata["deletionTimestamp"].is_null()
            && metadata["deletionGracePeriodSeconds"].as_i64().unwrap_or(0) > 0;
        terminating.then(|| FollowUp::RemovePod {
            namespace: metadata["namespace"].as_str().unwrap_or_default().into(),
            name: metadata["name"].as_str().unwrap_or_default().into(),
            uid: metadata["uid"].as_str().unwrap_or_default().into(),
        })
    }
}

/// A successful write.
pub(crate) struct WriteOutcome {
    pub(crate) object: Arc<Value>,
    /// 201 for a create, 200 otherwise.
    pub(crate) code: u16,
    pub(crate) follow_ups: Vec<FollowUp>,
    /// `Warning` header texts (unknown fields under fieldValidation=Warn).
    pub(crate) warnings: Vec<String>,
}

/// A write built and checked outside the store lock, waiting for [`commit`].
pub(crate) struct Prepared {
    object: Value,
    /// None for a create; for an update, the stored object it was built from.
    base: Option<Arc<Value>>,
    part: Part,
    follow_ups: Vec<FollowUp>,
    warnings: Vec<String>,
    dry_run: bool,
    /// A new Service that needs a ClusterIP: from this range, scanning from this offset.
    cluster_ip: Option<(ServiceRange, u64)>,
    /// A new pod: the name of its service-account volume, `kube-api-access-<5 random>`.
    token_volume: Option<String>,
}

impl Prepared {
    /// The object as it will be stored (for admission checks that need the whole of it).
    pub(crate) fn object(&self) -> &Value {
        &self.object
    }
}

/// What [`commit`] did.
pub(crate) enum Committed {
    Done(WriteOutcome),
    /// The object changed since the write was prepared: prepare it again from the new one.
    Stale,
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The main resource: with a status subresource, status changes are ignored.
    Main,
    /// `/status`: only status changes are kept.
    Status,
}

fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn namespace_of(object: &Value) -> String {
    object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn uid_of(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn finalizers_of(object: &Value) -> usize {
    object["metadata"]["finalizers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0)
}

/// The body must be a JSON object whose kind/apiVersion, if given, match the URL.
pub(crate) fn check_body(resource: &ResourceType, body: &mut Value) -> Result<(), ApiError> {
    let Some(fields) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    match fields.get("apiVersion").and_then(Value::as_str) {
        Some(v) if v != resource.api_version() => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                resource.api_version()
            )))
        }
        _ => {}
    }
    match fields.get("kind").and_then(Value::as_str) {
        Some(k) if k != resource.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the kind this URL serves ({})",
                resource.kind
            )))
        }
        _ => {}
    }
    // The built-in kinds' Go types make a non-object `spec` a decoding error.
    if !resource.custom
        && fields
            .get("spec")
            .is_some_and(|spec| !spec.is_object() && !spec.is_null())
    {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: spec must be a JSON object",
            resource.kind, resource.version, resource.kind
        )));
    }
    // kubectl needs kind and apiVersion on every object it gets back.
    fields.insert("apiVersion".into(), json!(resource.api_version()));
    fields.insert("kind".into(), json!(resource.kind));
    match fields.get("metadata") {
        None | Some(Value::Null) => {
            fields.insert("metadata".into(), json!({}));
        }
        Some(Value::Object(_)) => {}
        Some(_) => return Err(ApiError::bad_request("metadata must be a JSON object")),
    }
    // ObjectMeta's maps and lists are `omitempty` in Go: after `kubectl label pgc db1 tier-`
    // removed the last label, kube-apiserver stores no `labels` at all, not `labels: {}`.
    if let Some(Value::Object(metadata)) = fields.get_mut("metadata") {
        metadata.retain(|field, value| {
            let omitted_when_empty = matches!(
                field.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences" | "managedFields"
            );
            let empty = match value {
                Value::Null => true,
                Value::Object(map) => map.is_empty(),
                Value::Array(list) => list.is_empty(),
                _ => false,
            };
            !(omitted_when_empty && empty)
        });
    }
    Ok(())
}

/// A namespaced object needs its namespace to exist (kube-apiserver's NamespaceLifecycle
/// admission, which runs before validation).
pub(crate) fn check_namespace(
    state: &StoreState,
    resource: &ResourceType,
    namespace: Option<&str>,
) -> Result<(), ApiError> {
    let url_namespace = namespace.unwrap_or_default();
    if resource.namespaced && state.get("/namespaces", "", url_namespace).is_none() {
        return Err(ApiError::namespace_not_found(url_namespace));
    }
    Ok(())
}

/// POST to a collection: the object it would store, built and validated without the store;
/// [`commit`] stores it, after checking the namespace exists and the name is free.
pub(crate) fn prepare_create(
    resource: &ResourceType,
    namespace: Option<&str>,
    mut body: Value,
    options: WriteOptions<'_>,
) -> Result<Prepared, ApiError> {
    check_size(&body)?;
    check_body(resource, &mut body)?;
    let metadata = &mut body["metadata"];
    let mut name = metadata["name"].as_str().unwrap_or_default().to_string();
    if name.is_empty() {
        match metadata["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => {
                name = format!("{prefix}{}", options.random.name_suffix());
                metadata["name"] = json!(name);
            }
            _ => {
                return Err(ApiError::invalid_field(
                    resource,
                    "",
                    "FieldValueRequired",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ))
            }
        }
    }
    if resource.namespaced {
        let url_namespace = namespace.unwrap_or_default();
        match metadata["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != url_namespace => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => metadata["namespace"] = json!(url_namespace),
        }
    } else if let Some(map) = metadata.as_object_mut() {
        map.remove("namespace");
    }
    validate_name(resource, &name)?;
    validate_metadata(resource, &name, &body)?;
    let namespace = namespace_of(&body);

    let metadata = &mut body["metadata"];
    if let Some(map) = metadata.as_object_mut() {
        for server_owned in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            map.remove(server_owned);
        }
    }
    let uid = options.random.uuid();
    metadata["uid"] = json!(uid);
    metadata["creationTimestamp"] = json!(timefmt::now_rfc3339());
    metadata["generation"] = json!(1);

    let mut follow_ups = Vec::new();
    let mut cluster_ip = None;
    let mut token_volume = None;
    if resource.custom && resource.status_subresource {
        // With a status subresource, POST/PUT/PATCH of the main resource ignore status.
        if let Some(map) = body.as_object_mut() {
            map.remove("status");
        }
    }
    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "namespaces") => default_namespace(&mut body, &name),
        ("", "pods") => {
            default_pod(resource, &mut body, &name)?;
            if options.pod_ids_restricted {
                crate::builtins::check_pod_ids_as_root(resource, &body, &name)?;
            }
            token_volume = Some(format!("kube-api-access-{}", options.random.name_suffix()));
            follow_ups.push(FollowUp::StartPod {
                namespace: namespace.clone(),
                name: name.clone(),
                uid: uid.clone(),
            });
        }
        ("", "services") => {
            // Headless services and ExternalName aliases may have no ports.
            let portless_allowed = body["spec"]["clusterIP"].as_str() == Some("None")
                || body["spec"]["type"] == "ExternalName";
            let has_ports = body["spec"]["ports"]
                .as_array()
                .is_some_and(|p| !p.is_empty());
            if !portless_allowed && !has_ports {
                return Err(ApiError::invalid_field(
                    resource,
                    &name,
                    "FieldValueRequired",
                    "spec.ports",
                    "Required value",
                ));
            }
            default_service(&mut body, options.random);
            // Headless Services and ExternalName aliases get no address.
            let wants_ip =
                body["spec"]["clusterIP"] != "None" && body["spec"]["type"] != "ExternalName";
            if wants_ip {
                let range = match options.service_block {
                    Some(block) => ServiceRange::Loopback(block),
                    None => ServiceRange::Simulated,
                };
                cluster_ip = Some((range, options.random.next_u64()));
            }
        }
        ("", "secrets") => default_secret(resource, &mut body, &name)?,
        ("", "persistentvolumeclaims") => {
            crate::builtins::default_claim(resource, &mut body, &name)?
        }
        ("", "persistentvolumes") => {
            crate::builtins::default_volume(resource, &mut body, &name)?;
            if let Some(root) = &options.volume_root {
                crate::builtins::check_volume_path(resource, &body, &name, root)?;
            }
        }
        ("storage.k8s.io", "storageclasses") => {
            crate::builtins::default_storage_class(resource, &mut body, &name)?
        }
        ("apps", "deployments") => default_deployment(resource, &mut body, &name)?,
        ("apps", "replicasets") => default_replica_set(resource, &mut body, &name)?,
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            check_crd(resource, &body, &name)?;
            check_crd_patterns(resource, &name, &body)?;
            default_crd(&mut body);
            follow_ups.push(FollowUp::EstablishCrd {
                name: name.clone(),
                uid: uid.clone(),
            });
        }
        _ => {}
    }
    let warnings = check_fields(resource, &name, &mut body, &options)?;
    check_size(&body)?;
    Ok(Prepared {
        object: body,
        base: None,
        part: Part::Main,
        follow_ups,
        warnings,
        dry_run: options.dry_run,
        cluster_ip,
        token_volume,
    })
}

/// Give a new Service its ClusterIP: the one it asks for if free, else a free one of `range`.
fn assign_cluster_ip(
    state: &StoreState,
    resource: &ResourceType,
    service: &mut Value,
    range: ServiceRange,
    start: u64,
) -> Result<(), ApiError> {
    let requested = service["spec"]["clusterIP"]
        .as_str()
        .or_else(|| service["spec"]["clusterIPs"][0].as_str())
        .filter(|ip| !ip.is_empty())
        .map(str::to_string);
    let used = state
        .list("/services", None)
        .iter()
        .filter_map(|s| s["spec"]["clusterIP"].as_str()?.parse().ok())
        .collect();
    match range.allocate(requested.as_deref(), &used, start) {
        Ok(ip) => {
            service["spec"]["clusterIP"] = json!(ip.to_string());
            service["spec"]["clusterIPs"] = json!([ip.to_string()]);
            Ok(())
        }
        Err(AllocationError::Full) => Err(ApiError::internal(AllocationError::Full.to_string())),
        Err(error) => Err(ApiError::invalid_field(
            resource,
            &name_of(service),
            "FieldValueInvalid",
            "spec.clusterIPs",
            format!(
                "Invalid value: []string{{{}}}: {error}",
                json!(requested.unwrap_or_default())
            ),
        )),
    }
}

/// Where every container finds its service account's token, `ca.crt` and `namespace`.
pub(crate) const SERVICE_ACCOUNT_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The ConfigMap root-ca-cert-publisher keeps in every namespace.
pub(crate) const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";

/// kube-apiserver's ServiceAccount admission, under the store lock: the pod's service account
/// (`default` if unnamed) must exist, and unless the pod or the account says
/// `automountServiceAccountToken: false`, the pod gets the projected volume the kubelet fills
/// with a token bound to it, the cluster CA and the namespace, mounted read-only in every
/// container that does not already mount something there.
fn admit_service_account(
    state: &StoreState,
    resource: &ResourceType,
    pod: &mut Value,
    volume: &str,
) -> Result<(), ApiError> {
    let namespace = namespace_of(pod);
    let spec = &mut pod["spec"];
    let account = spec["serviceAccountName"]
        .as_str()
        .or_else(|| spec["serviceAccount"].as_str())
        .filter(|name| !name.is_empty())
        .unwrap_or("default")
        .to_string();
    spec["serviceAccountName"] = json!(account);
    // The deprecated alias kube-apiserver still fills in.
    spec["serviceAccount"] = json!(account);
    let Some(service_account) = state.get("/serviceaccounts", &namespace, &account) else {
        return Err(ApiError::forbidden(
            resource,
            &name_of(pod),
            &format!(
                "error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
            ),
        ));
    };
    let automount = spec["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| service_account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if !automount {
        return Ok(());
    }
    // The kubelet asks for 3607 s and refreshes the file; see `tokens::KUBELET_TOKEN_SECONDS`.
    let projected = json!({"name": volume, "projected": {"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": ROOT_CA_CONFIG_MAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]}});
    let mut containers_changed = false;
    for list in ["initContainers", "containers"] {
        for container in spec[list].as_array_mut().into_iter().flatten() {
            let already = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT);
            if already || !container.is_object() {
                continue;
            }
            if !container["volumeMounts"].is_array() {
                container["volumeMounts"] = json!([]);
            }
            if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                mounts.push(json!({"name": volume, "readOnly": true,
                                   "mountPath": SERVICE_ACCOUNT_MOUNT}));
                containers_changed = true;
            }
        }
    }
    if containers_changed {
        if !spec["volumes"].is_array() {
            spec["volumes"] = json!([]);
        }
        if let Some(volumes) = spec["volumes"].as_array_mut() {
            volumes.push(projected);
        }
    }
    Ok(())
}

/// What a namespace holds from its first moment, as kube-controller-manager's
/// serviceaccounts-controller and root-ca-cert-publisher add them (within milliseconds on a
/// real cluster; here in the same step, so a pod created right after never races them).
pub(crate) fn populate_namespace(
    state: &mut StoreState,
    namespace: &str,
    ca_pem: &str,
    random: &mut Xorshift,
) {
    let now = timefmt::now_rfc3339();
    if state
        .get("/serviceaccounts", namespace, "default")
        .is_none()
    {
        state.commit_added(
            "/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": namespace,
                                "uid": random.uuid(), "creationTimestamp": now}}),
        );
    }
    if state
        .get("/configmaps", namespace, ROOT_CA_CONFIG_MAP)
        .is_none()
    {
        state.commit_added(
            "/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": ROOT_CA_CONFIG_MAP, "namespace": namespace,
                                "uid": random.uuid(), "creationTimestamp": now,
                                "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
                   "data": {"ca.crt": ca_pem}}),
        );
    }
}

/// Give every namespace's `kube-root-ca.crt` the CA `ca_pem` (a restarted sandbox has a new
/// CA; the objects it loaded still name the old one).
pub(crate) fn publish_root_ca(state: &mut StoreState, ca_pem: &str) {
    for config_map in state.list("/configmaps", None) {
        if config_map["metadata"]["name"] != ROOT_CA_CONFIG_MAP
            || config_map["data"]["ca.crt"] == ca_pem
        {
            continue;
        }
        let mut next = (*config_map).clone();
        next["data"]["ca.crt"] = ca_pem.into();
        state.commit_modified("/configmaps", next);
    }
}

/// Store a prepared write: one atomic step under the store lock.
pub(crate) fn commit(
    state: &mut StoreState,
    resource: &ResourceType,
    prepared: Prepared,
) -> Result<Committed, ApiError> {
    let Prepared {
        object: mut next,
        base,
        part,
        follow_ups,
        warnings,
        dry_run,
        cluster_ip,
        token_volume,
    } = prepared;
    let name = name_of(&next);
    let namespace = namespace_of(&next);
    let current = state.get(&resource.store_key(), &namespace, &name);
    let Some(old) = base else {
        check_namespace(state, resource, Some(&namespace))?;
        if current.is_some() {
            return Err(ApiError::already_exists(resource, &name));
        }
        // Under the store lock, so two creates cannot take the same address (a dry run checks
        // the address too, as kube-apiserver's dry-run allocator does, and keeps nothing).
        if let Some((range, start)) = cluster_ip {
            assign_cluster_ip(state, resource, &mut next, range, start)?;
        }
        if let Some(volume) = token_volume {
            admit_service_account(state, resource, &mut next, &volume)?;
        }
        if dry_run {
            return Ok(Committed::Done(WriteOutcome {
                object: Arc::new(next),
                code: 201,
                follow_ups: Vec::new(),
                warnings,
            }));
        }
        if resource.group == "apiextensions.k8s.io" {
            Arc::make_mut(&mut state.registry).register_crd(&next);
        }
        let object = state.commit_added(&resource.store_key(), next);
        return Ok(Committed::Done(WriteOutcome {
            object,
            code: 201,
            follow_ups,
            warnings,
        }));
    };
    match current {
        None => return Err(ApiError::not_found(resource, &name)),
        Some(current) if !Arc::ptr_eq(&current, &old) => return Ok(Committed::Stale),
        Some(_) => {}
    }
    // A no-op write stores nothing and keeps the resourceVersion (kubectl: "patched (no change)").
    if next == *old {
        return Ok(Committed::Done(WriteOutcome {
            object: old,
            code: 200,
            follow_ups: Vec::new(),
            warnings,
        }));
    }
    if dry_run {
        return Ok(Committed::Done(WriteOutcome {
            object: Arc::new(next),
            code: 200,
            follow_ups: Vec::new(),
            warnings,
        }));
    }
    // The last finalizer removed from an object being deleted: now it really goes.
    // (A pod still in its grace period is removed by the kubelet, not by this update.)
    if !next["metadata"]["deletionTimestamp"].is_null()
        && finalizers_of(&next) == 0
        && next["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0)
            == 0
    {
        // kube-apiserver does not store this update: it deletes the object instead, so
        // watchers see one DELETED (here carrying the state without finalizers).
        let removed = state.commit_deleted_as(&resource.store_key(), next);
        after_removal(state, resource, &removed, false);
        return Ok(Committed::Done(WriteOutcome {
            object: removed,
            code: 200,
            follow_ups: Vec::new(),
            warnings,
        }));
    }
    if resource.group == "apiextensions.k8s.io" && part == Part::Main {
        Arc::make_mut(&mut state.registry).register_crd(&next);
    }
    let object = state.commit_modified(&resource.store_key(), next);
    Ok(Committed::Done(WriteOutcome {
        object,
        code: 200,
        follow_ups,
        warnings,
    }))
}

/// Every object about to be stored: no deeper than [`patching::MAX_DEPTH`] (checked without
/// recursion, before anything recursive touches it) and no larger than etcd accepts.
pub(crate) fn check_size(object: &Value) -> Result<(), ApiError> {
    if patching::measure(object, patching::MAX_DEPTH).is_err() {
        return Err(ApiError::bad_request(format!(
            "the object nests more than {} levels deep",
            patching::MAX_DEPTH
        )));
    }
    let mut counter = ByteCounter(0);
    // The depth is bounded now, so serialising (which recurses) is safe.
    let _ = serde_json::to_writer(&mut counter, object);
    if counter.0 > patching::MAX_OBJECT_BYTES {
        return Err(ApiError::object_too_large(
            counter.0,
            patching::MAX_OBJECT_BYTES,
        ));
    }
    Ok(())
}

/// Counts the bytes written to it, and keeps none.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A CRD's `pattern`s are compiled when the CRD is written: one the instance writes could not
/// afford to evaluate (too long, nested too deep, too large once compiled) is refused here with
/// 422 naming its field, as kube-apiserver refuses a pattern Go's regexp cannot compile.
fn check_crd_patterns(resource: &ResourceType, name: &str, crd: &Value) -> Result<(), ApiError> {
    let causes: Vec<StatusCause> = schema::check_crd_patterns(crd)
        .into_iter()
        .map(|e| StatusCause {
            reason: e.reason,
            message: e.message,
            field: e.field,
        })
        .collect();
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// The metadata rules every kind shares: label and annotation keys are qualified names, label
/// values are short names, finalizers are qualified names, owner references name their owner.
/// A field of the wrong JSON type is a decoding error (400), as in kube-apiserver.
fn validate_metadata(resource: &ResourceType, name: &str, object: &Value) -> Result<(), ApiError> {
    let metadata = &object["metadata"];
    let mut causes = Vec::new();
    let mut invalid = |field: String, value: &str, problem: String| {
        causes.push(StatusCause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {}: {problem}", json!(value)),
            field,
        })
    };
    for map in ["labels", "annotations"] {
        match &metadata[map] {
            Value::Null => {}
            Value::Object(entries) => {
                for (key, value) in entries {
                    let Some(text) = value.as_str() else {
                        return Err(ApiError::bad_request(format!(
                            "metadata.{map}.{key}: must be a string, not {value}"
                        )));
                    };
                    if let Err(problem) = names::validate_qualified_name(key) {
                        invalid(format!("metadata.{map}"), key, problem);
                    }
                    if map == "labels" {
                        if let Err(problem) = names::validate_label_value(text) {
                            invalid("metadata.labels".to_string(), text, problem);
                        }
                    }
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "metadata.{map} must be a map of strings, not {other}"
                )))
            }
        }
    }
    match &metadata["finalizers"] {
        Value::Null => {}
        Value::Array(finalizers) => {
            for (i, finalizer) in finalizers.iter().enumerate() {
                let Some(text) = finalizer.as_str() else {
                    return Err(ApiError::bad_request("metadata.finalizers must be strings"));
                };
                if let Err(problem) = names::validate_qualified_name(text) {
                    invalid(format!("metadata.finalizers[{i}]"), text, problem);
                }
            }
        }
        _ => return Err(ApiError::bad_request("metadata.finalizers must be a list")),
    }
    match &metadata["ownerReferences"] {
        Value::Null => {}
        Value::Array(references) => {
            for (i, reference) in references.iter().enumerate() {
                if !reference.is_object() {
                    return Err(ApiError::bad_request(
                        "metadata.ownerReferences must be a list of objects",
                    ));
                }
                for field in ["apiVersion", "kind", "name", "uid"] {
                    if reference[field].as_str().unwrap_or_default().is_empty() {
                        causes.push(StatusCause {
                            reason: "FieldValueRequired".into(),
                            message: "Required value".into(),
                            field: format!("metadata.ownerReferences[{i}].{field}"),
                        });
                    }
                }
            }
        }
        _ => {
            return Err(ApiError::bad_request(
                "metadata.ownerReferences must be a list",
            ))
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

fn validate_name(resource: &ResourceType, name: &str) -> Result<(), ApiError> {
    // Namespaces (and services) must be DNS-1123 labels: they become DNS names; most other
    // names are DNS-1123 subdomains.
    let label_only = resource.group.is_empty()
        && (resource.plural == "namespaces" || resource.plural == "services");
    let checked = if label_only {
        names::validate_dns1123_label(name)
    } else {
        names::validate_dns1123_subdomain(name)
    };
    let Err(rule) = checked else {
        return Ok(());
    };
    Err(ApiError::invalid_field(
        resource,
        name,
        "FieldValueInvalid",
        "metadata.name",
        format!("Invalid value: {}: {rule}", json!(name)),
    ))
}

/// What kube-apiserver does while decoding a body: fields the schema does not know are pruned
/// and fields given twice are noticed; `fieldValidation` decides whether that is an error
/// (Strict: 400), a `Warning` header each (Warn) or nothing (Ignore). Then a custom object is
/// validated against its CRD's schema (422 Invalid naming each field).
fn check_fields(
    resource: &ResourceType,
    name: &str,
    object: &mut Value,
    options: &WriteOptions<'_>,
) -> Result<Vec<String>, ApiError> {
    let mut problems: Vec<String> = options
        .duplicate_fields
        .iter()
        .map(|f| schema::duplicate_field_message(f))
        .collect();
    if let (true, Some(schema)) = (resource.custom, &resource.schema) {
        problems.extend(
            schema::prune(schema, object)
                .iter()
                .map(|f| schema::unknown_field_message(f)),
        );
    }
    let warnings = match options.field_validation {
        FieldValidation::Strict if !problems.is_empty() => {
            return Err(ApiError::bad_request(schema::strict_decoding_message(
                &resource.kind,
                &resource.version,
                &problems,
            )))
        }
        FieldValidation::Strict | FieldValidation::Ignore => Vec::new(),
        FieldValidation::Warn => problems,
    };
    if let (true, Some(schema)) = (resource.custom, &resource.schema) {
        apply_defaults(schema, object);
        let errors = schema::validate(schema, object);
        if !errors.is_empty() {
            let causes = errors
                .into_iter()
                .map(|e| StatusCause {
                    reason: e.reason,
                    message: e.message,
                    field: e.field,
                })
                .collect();
            return Err(ApiError::invalid(resource, name, causes));
        }
    }
    Ok(warnings)
}

/// Structural defaulting: a missing field whose schema has `default` gets that value, at every
/// level that exists (kube-apiserver does this when it decodes a request, before validation).
fn apply_defaults(schema: &Value, value: &mut Value) {
    if let (Some(properties), Some(fields)) =
        (schema["properties"].as_object(), value.as_object_mut())
    {
        for (name, property) in properties {
            if !fields.contains_key(name) {
                if let Some(default) = property.get("default") {
                    fields.insert(name.clone(), default.clone());
                }
            }
            if let Some(inner) = fields.get_mut(name) {
                apply_defaults(property, inner);
            }
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array_mut()) {
        for item in values {
            apply_defaults(items, item);
        }
    }
}

/// PUT, PATCH (after the patch is applied) and `/status` writes: the object that would replace
/// `old`, built and validated without the store; [`commit`] stores it if `old` is still current.
pub(crate) fn prepare_update(
    resource: &ResourceType,
    old: &Arc<Value>,
    mut new: Value,
    part: Part,
    options: WriteOptions<'_>,
) -> Result<Prepared, ApiError> {
    check_size(&new)?;
    check_body(resource, &mut new)?;
    let name = name_of(old);
    match new["metadata"]["name"].as_str() {
        Some(n) if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {}
    }
    if resource.namespaced {
        match new["metadata"]["namespace"].as_str() {
            Some(ns) if !ns.is_empty() && ns != namespace_of(old) => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {}
        }
    }
    // An update that names a resourceVersion is conditional on it being current (optimistic
    // concurrency: whoever read an older version must re-read and retry).
    match new["metadata"]["resourceVersion"].as_str() {
        Some(rv) if !rv.is_empty() && Some(rv) != old["metadata"]["resourceVersion"].as_str() => {
            return Err(ApiError::stale_resource_version(resource, &name));
        }
        _ => {}
    }
    match new["metadata"]["uid"].as_str() {
        Some(uid) if !uid.is_empty() && uid != uid_of(old) => {
            return Err(ApiError::conflict(
                resource,
                &name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    uid_of(old)
                ),
            ));
        }
        _ => {}
    }

    let mut next = match part {
        Part::Status => {
            // /status changes status and nothing else.
            let mut next = (**old).clone();
            match new.get("status") {
                Some(status) => next["status"] = status.clone(),
                None => {
                    if let Some(map) = next.as_object_mut() {
                        map.remove("status");
                    }
                }
            }
            next
        }
        Part::Main => {
            let mut next = new;
            if resource.status_subresource {
                match old.get("status") {
                    Some(status) => next["status"] = status.clone(),
                    None => {
                        if let Some(map) = next.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
            }
            // Server-owned metadata always comes from the stored object.
            for field in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "namespace",
                "name",
            ] {
                match old["metadata"].get(field) {
                    Some(value) => next["metadata"][field] = value.clone(),
                    None => {
                        if let Some(map) = next["metadata"].as_object_mut() {
                            map.remove(field);
                        }
                    }
                }
            }
            next
        }
    };
    next["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
    validate_metadata(resource, &name, &next)?;
    if !old["metadata"]["deletionTimestamp"].is_null() {
        let had = old["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let added: Vec<&Value> = next["metadata"]["finalizers"]
            .as_array()
            .map(|now| now.iter().filter(|f| !had.contains(f)).collect())
            .unwrap_or_default();
        if !added.is_empty() {
            return Err(ApiError::invalid(
                resource,
                &name,
                vec![StatusCause {
                    reason: "FieldValueForbidden".into(),
                    message: format!(
                        "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {}",
                        json!(added)
                    ),
                    field: "metadata.finalizers".into(),
                }],
            ));
        }
    }

    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "pods") if part == Part::Main => {
            crate::builtins::check_pod_update(resource, &name, old, &mut next)?
        }
        ("", "secrets") => default_secret(resource, &mut next, &name)?,
        ("", "persistentvolumeclaims") if part == Part::Main => {
            crate::builtins::check_claim(resource, &next, &name)?
        }
        // What a volume is cannot change (else a checked path could become any path).
        ("", "persistentvolumes")
            if part == Part::Main
                && (next["spec"]["hostPath"] != old["spec"]["hostPath"]
                    || next["spec"]["local"] != old["spec"]["local"]) =>
        {
            return Err(ApiError::invalid_field(
                resource,
                &name,
                "FieldValueForbidden",
                "spec.persistentvolumesource",
                "Forbidden: spec.persistentvolumesource is immutable after creation",
            ));
        }
        ("apps", "deployments" | "replicasets") if part == Part::Main => {
            crate::builtins::check_workload_update(resource, &name, old, &mut next)?
        }
        // kube-apiserver keeps the allocated address when an update leaves it out or empty.
        ("", "services") if next["spec"]["clusterIP"].as_str().is_none_or(str::is_empty) => {
            next["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
            next["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
        // An address, once allocated, stays the Service's until it is deleted.
        ("", "services")
            if old["spec"]["clusterIP"].is_string()
                && next["spec"]["clusterIP"] != old["spec"]["clusterIP"] =>
        {
            return Err(ApiError::invalid_field(
                resource,
                &name,
                "FieldValueInvalid",
                "spec.clusterIPs[0]",
                format!(
                    "Invalid value: {}: may not change once set",
                    next["spec"]["clusterIP"]
                ),
            ));
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") if part == Part::Main => {
            check_crd(resource, &next, &name)?;
            check_crd_patterns(resource, &name, &next)?;
            default_crd(&mut next);
        }
        _ => {}
    }
    let warnings = check_fields(resource, &name, &mut next, &options)?;
    check_size(&next)?;

    // generation counts changes of what the user asked for: everything but metadata and status.
    let desired = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            map.remove("status");
        }
        v
    };
    if desired(&next) != desired(old) {
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        next["metadata"]["generation"] = json!(generation + 1);
    }

    Ok(Prepared {
        object: next,
        base: Some(old.clone()),
        part,
        follow_ups: Vec::new(),
        warnings,
        dry_run: options.dry_run,
        cluster_ip: None,
        token_volume: None,
    })
}

/// A PUT of a custom object or a CRD must name the resourceVersion it replaces: their
/// strategies do not allow unconditional updates (pods, services, secrets... do).
pub(crate) fn require_resource_version(
    resource: &ResourceType,
    name: &str,
    body: &Value,
) -> Result<(), ApiError> {
    let unconditional_allowed = !resource.custom && resource.group != "apiextensions.k8s.io";
    let given = body["metadata"]["resourceVersion"]
        .as_str()
        .is_some_and(|rv| !rv.is_empty());
    if unconditional_allowed || given {
        return Ok(());
    }
    Err(ApiError::invalid_field(
        resource,
        name,
        "FieldValueInvalid",
        "metadata.resourceVersion",
        "Invalid value: 0x0: must be specified for an update",
    ))
}

/// The DeleteOptions body kubectl sends: `{"propagationPolicy":"Background"}` and friends.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOptions {
    /// Orphan: leave dependents alone.
    pub(crate) orphan: bool,
    /// Foreground: the owner stays (finalizer `foregroundDeletion`) until its dependents are gone.
    pub(crate) foreground: bool,
    pub(crate) precondition_uid: Option<String>,
    pub(crate) precondition_resource_version: Option<String>,
    /// `gracePeriodSeconds` (body or query); 0 means "now", as `kubectl delete --force --grace-period=0`.
    pub(crate) grace_period_seconds: Option<i64>,
    /// How long the simulated kubelet takes to stop a pod (`SandboxOptions::pod_termination_delay`).
    pub(crate) pod_termination_delay: std::time::Duration,
}

impl DeleteOptions {
    pub(crate) fn from_body(body: &[u8]) -> Result<DeleteOptions, ApiError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(DeleteOptions::default());
        }
        let value: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("malformed DeleteOptions body: {e}")))?;
        let policy = value["propagationPolicy"].as_str().unwrap_or("Background");
        if !["Background", "Foreground", "Orphan"].contains(&policy) {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy must be Orphan, Background or Foreground, not {policy:?}"
            )));
        }
        let orphan = policy == "Orphan" || value["orphanDependents"].as_bool() == Some(true);
        Ok(DeleteOptions {
            foreground: policy == "Foreground" && !orphan,
            grace_period_seconds: value["gracePeriodSeconds"].as_i64(),
            pod_termination_delay: std::time::Duration::ZERO,
            orphan,
            precondition_uid: value["preconditions"]["uid"].as_str().map(String::from),
            precondition_resource_version: value["preconditions"]["resourceVersion"]
                .as_str()
                .map(String::from),
        })
    }
}

/// DELETE of one object. With finalizers the object only gets a deletionTimestamp (MODIFIED)
/// and stays until an update empties its finalizers.
pub(crate) fn delete(
    state: &mut StoreState,
    resource: &ResourceType,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
    dry_run: bool,
) -> Result<Arc<Value>, ApiError> {
    let Some(old) = state.get(&resource.store_key(), namespace, name) else {
        return Err(ApiError::not_found(resource, name));
    };
    // The NamespaceLifecycle admission plugin protects the namespaces the system relies on.
    if resource.group.is_empty()
        && resource.plural == "namespaces"
        && ["default", "kube-system", "kube-public"].contains(&name)
    {
        return Err(ApiError::forbidden(
            resource,
            name,
            "this namespace may not be deleted",
        ));
    }
    if let Some(uid) = &options.precondition_uid {
        if *uid != uid_of(&old) {
            return Err(ApiError::conflict(
                resource,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    uid_of(&old)
                ),
            ));
        }
    }
    if let Some(rv) = &options.precondition_resource_version {
        if Some(rv.as_str()) != old["metadata"]["resourceVersion"].as_str() {
            return Err(ApiError::stale_resource_version(resource, name));
        }
    }
    if dry_run {
        return Ok(old);
    }
    // Pods terminate gracefully: deletionTimestamp now, gone once the kubelet has stopped them.
    let graceful = resource.group.is_empty()
        && resource.plural == "pods"
        && !options.pod_termination_delay.is_zero()
        && options.grace_period_seconds != Some(0);
    if graceful {
        if !old["metadata"]["deletionTimestamp"].is_null() {
            return Ok(old);
        }
        let delay = options.pod_termination_delay;
        let mut marked = (*old).clone();
        marked["metadata"]["deletionTimestamp"] = json!(timefmt::format_rfc3339(
            std::time::SystemTime::now() + delay
        ));
        // `kubectl delete --grace-period=N` (DeleteOptions.gracePeriodSeconds) is what the kubelet
        // waits before SIGKILL; without it, the pod's own terminationGracePeriodSeconds applies
        // (the process runtime takes the smaller of this and the spec's).
        let grace = options
            .grace_period_seconds
            .filter(|seconds| *seconds > 0)
            .unwrap_or_else(|| i64::try_from(delay.as_secs().max(1)).unwrap_or(i64::MAX));
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        return Ok(state.commit_modified(&resource.store_key(), marked));
    }
    let uid = uid_of(&old);
    if options.foreground && !state.dependents_of(&uid).is_empty() {
        if old["metadata"]["deletionTimestamp"].is_null() {
            let mut marked = (*old).clone();
            marked["metadata"]["deletionTimestamp"] = json!(timefmt::now_rfc3339());
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            let mut finalizers = marked["metadata"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            finalizers.push(json!(FOREGROUND_DELETION));
            marked["metadata"]["finalizers"] = json!(finalizers);
            state.commit_modified(&resource.store_key(), marked);
        }
        collect_garbage(state, &uid);
        finish_foreground_deletion(state, &uid);
        return Ok(state
            .get(&resource.store_key(), namespace, name)
            .unwrap_or(old));
    }
    if finalizers_of(&old) > 0 {
        if !old["metadata"]["deletionTimestamp"].is_null() {
            return Ok(old);
        }
        let mut marked = (*old).clone();
        marked["metadata"]["deletionTimestamp"] = json!(timefmt::now_rfc3339());
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        return Ok(state.commit_modified(&resource.store_key(), marked));
    }
    Ok(remove(state, resource, namespace, name, options.orphan).unwrap_or(old))
}

/// Take an object out of the store for good, then do what controllers do after a deletion:
/// a namespace takes its contents with it, a CRD its custom objects and endpoints, and the
/// garbage collector deletes dependents whose every owner is gone.
pub(crate) fn remove(
    state: &mut StoreState,
    resource: &ResourceType,
    namespace: &str,
    name: &str,
    orphan_dependents: bool,
) -> Option<Arc<Value>> {
    let store_key = resource.store_key();
    let object = state.get(&store_key, namespace, name)?;
    if resource.group.is_empty() && resource.plural == "namespaces" {
        for (key, inner) in state.all_objects() {
            if namespace_of(&inner) == name {
                state.commit_deleted(&key, name, &name_of(&inner));
            }
        }
    }
    let is_pod = resource.group.is_empty() && resource.plural == "pods";
    let removed = if is_pod && object["metadata"]["deletionTimestamp"].is_null() {
        // A pod is always deleted gracefully, even with `--force --grace-period=0`: its last
        // state carries deletionTimestamp, so `kubectl get pods -w` prints it as Terminating.
        let mut last = (*object).clone();
        last["metadata"]["deletionTimestamp"] = json!(timefmt::now_rfc3339());
        last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        Some(state.commit_deleted_as(&store_key, last))
    } else {
        state.commit_deleted(&store_key, namespace, name)
    };
    after_removal(state, resource, &object, orphan_dependents);
    removed
}

/// What the controllers do once an object is gone: a CRD takes its objects and endpoints with
/// it, and the garbage collector looks for dependents.
fn after_removal(
    state: &mut StoreState,
    resource: &ResourceType,
    object: &Value,
    orphan_dependents: bool,
) {
    if resource.group == "apiextensions.k8s.io" {
        let group = object["spec"]["group"].as_str().unwrap_or_default();
        let plural = object["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default();
        let custom_key = format!("{group}/{plural}");
        for inner in state.list(&custom_key, None) {
            state.commit_deleted(&custom_key, &namespace_of(&inner), &name_of(&inner));
        }
        state.end_watchers_of(&custom_key);
        Arc::make_mut(&mut state.registry).unregister_crd(object);
    }
    if !orphan_dependents {
        collect_garbage(state, &uid_of(object));
    }
    // An owner waiting in foreground deletion may have just lost its last dependent.
    let owners: Vec<String> = object["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str().map(String::from))
        .collect();
    for owner in owners {
        finish_foreground_deletion(state, &owner);
    }
}

/// The finalizer the garbage collector puts on an owner deleted with propagationPolicy=Foreground.
const FOREGROUND_DELETION: &str = "foregroundDeletion";

/// Once an owner in foreground deletion has no dependents left, the garbage collector removes
/// its `foregroundDeletion` finalizer, which (with no other finalizer) deletes it.
fn finish_foreground_deletion(state: &mut StoreState, owner_uid: &str) {
    let Some((store_key, owner)) = state.object_by_uid(owner_uid) else {
        return;
    };
    let finalizers = owner["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == FOREGROUND_DELETION)
        || !state.dependents_of(owner_uid).is_empty()
    {
        return;
    }
    let Some(resource) = state.registry.find_by_store_key(&store_key).cloned() else {
        return;
    };
    let mut next = (*owner).clone();
    let remaining: Vec<Value> = finalizers
        .into_iter()
        .filter(|f| f != FOREGROUND_DELETION)
        .collect();
    let empty = remaining.is_empty();
    next["metadata"]["finalizers"] = json!(remaining);
    if empty {
        let removed = state.commit_deleted_as(&store_key, next);
        after_removal(state, &resource, &removed, false);
    } else {
        state.commit_modified(&store_key, next);
    }
}

/// Background garbage collection: dependents that name `owner_uid` in ownerReferences are
/// deleted once none of their owners exists; those with other live owners only lose the reference.
fn collect_garbage(state: &mut StoreState, owner_uid: &str) {
    if owner_uid.is_empty() {
        return;
    }
    for (store_key, dependent) in state.dependents_of(owner_uid) {
        let references = dependent["metadata"]["ownerReferences"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(resource) = state.registry.find_by_store_key(&store_key).cloned() else {
            continue;
        };
        let others_alive = references.iter().any(|r| {
            let uid = r["uid"].as_str().unwrap_or_default();
            uid != owner_uid && state.uid_exists(uid)
        });
        let (namespace, name) = (namespace_of(&dependent), name_of(&dependent));
        if others_alive {
            let mut kept = (*dependent).clone();
            let remaining: Vec<Value> = references
                .iter()
                .filter(|r| r["uid"].as_str() != Some(owner_uid))
                .cloned()
                .collect();
            kept["metadata"]["ownerReferences"] = json!(remaining);
            state.commit_modified(&store_key, kept);
        } else if finalizers_of(&dependent) > 0 {
            if dependent["metadata"]["deletionTimestamp"].is_null() {
                let mut marked = (*dependent).clone();
                marked["metadata"]["deletionTimestamp"] = json!(timefmt::now_rfc3339());
                state.commit_modified(&store_key, marked);
            }
        } else {
            remove(state, &resource, &namespace, &name, false);
        }
    }
}

/// Read a simple `.a.b.c` path (printer columns, scale paths).
pub(crate) fn read_path<'v>(object: &'v Value, path: &str) -> Option<&'v Value> {
    let mut current = object;
    for part in path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
    {
        current = current.get(part)?;
    }
    Some(current)
}

/// Write a simple `.a.b.c` path, creating objects on the way.
pub(crate) fn write_path(object: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .collect();
    let mut current = object;
    for part in &parts {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        current = &mut current[*part];
    }
    *current = value;
}
