//! The built-in kinds: what their defaulting, validation and controllers fill in — namespaces,
//! the one node, pods (and the simulated kubelet's Running and Failed statuses), services,
//! secrets, PersistentVolumeClaims, PersistentVolumes and StorageClasses, and
//! CustomResourceDefinitions (names, acceptedNames, conditions).
//!
//! WORKSHOP.md, "Set-up: the sandbox". `objects.rs` calls these from create and update.

use base64::Engine;
use serde_json::{json, Value};

use crate::errors::ApiError;
use crate::random::Xorshift;
use crate::resources::{ResourceType, GIT_VERSION};
use crate::status::StatusCause;
use crate::timefmt;

pub(crate) fn default_namespace(object: &mut Value, name: &str) {
    object["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    object["spec"]["finalizers"] = json!(["kubernetes"]);
    object["status"] = json!({"phase": "Active"});
}

/// The one node every pod is "scheduled" to. It is Ready, and runs nothing.
pub(crate) fn initial_node(uid: String) -> Value {
    let now = timefmt::now_rfc3339();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": SANDBOX_NODE, "uid": uid, "creationTimestamp": now,
                     "labels": {"kubernetes.io/hostname": SANDBOX_NODE, "kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": "10.244.0.0/16"},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated by the sandbox: no container runtime",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            // `kubectl describe node` divides pod requests by allocatable; without it, it
            // prints percentages like -9223372036854775808%. The sizes are made up.
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
            "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": SANDBOX_NODE}],
            "nodeInfo": {"kubeletVersion": GIT_VERSION, "containerRuntimeVersion": "none://sandbox",
                         "operatingSystem": "linux", "architecture": "amd64"}
        }
    })
}

/// The pod spec defaults kube-apiserver fills in on every write (create or update).
fn default_pod_spec(spec: &mut Value) {
    for (field, value) in [
        ("restartPolicy", json!("Always")),
        ("terminationGracePeriodSeconds", json!(30)),
        ("dnsPolicy", json!("ClusterFirst")),
        ("schedulerName", json!("default-scheduler")),
    ] {
        if spec[field].is_null() {
            spec[field] = value;
        }
    }
}

/// What may change in a pod's spec after creation, in kube-apiserver's words.
const POD_UPDATABLE_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,\
`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),\
`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// A pod's spec is fixed once it exists, except for container images and a few timing fields
/// (kube-apiserver's ValidatePodUpdate): to change anything else, delete and re-create the pod,
/// which is what an operator does.
pub(crate) fn check_pod_update(
    resource: &ResourceType,
    name: &str,
    old: &Value,
    next: &mut Value,
) -> Result<(), ApiError> {
    default_pod_spec(&mut next["spec"]);
    let mut munged = next["spec"].clone();
    for list in ["containers", "initContainers"] {
        let old_images: Vec<Value> = old["spec"][list]
            .as_array()
            .map(|c| c.iter().map(|c| c["image"].clone()).collect())
            .unwrap_or_default();
        // `get_mut`, not `[list]`: indexing would insert a `null` list and spoil the comparison.
        if let Some(containers) = munged.get_mut(list).and_then(Value::as_array_mut) {
            for (container, image) in containers.iter_mut().zip(old_images) {
                container["image"] = image;
            }
        }
    }
    for field in [
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
    ] {
        match old["spec"].get(field) {
            Some(value) => munged[field] = value.clone(),
            None => {
                if let Some(map) = munged.as_object_mut() {
                    map.remove(field);
                }
            }
        }
    }
    if munged == old["spec"] {
        return Ok(());
    }
    Err(ApiError::invalid(
        resource,
        name,
        vec![StatusCause {
            reason: "FieldValueForbidden".into(),
            message: format!(
                "Forbidden: pod updates may not change fields other than {POD_UPDATABLE_FIELDS}"
            ),
            field: "spec".into(),
        }],
    ))
}

/// A core/v1 Event about `pod` from `component` (`default-scheduler`, `kubelet`), as
/// `kubectl describe pod` finds them: by involvedObject name, namespace and uid.
pub(crate) fn pod_event(
    pod: &Value,
    random: &mut Xorshift,
    component: &str,
    reason: &str,
    message: String,
) -> Value {
    let metadata = &pod["metadata"];
    let name = metadata["name"].as_str().unwrap_or_default();
    let now = timefmt::now_rfc3339();
    json!({
        "apiVersion": "v1", "kind": "Event",
        // Real event names are the object's name and a unique hex suffix.
        "metadata": {"name": format!("{name}.{}", random.hex(8)),
                     "namespace": metadata["namespace"], "creationTimestamp": now},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": name,
                           "namespace": metadata["namespace"], "uid": metadata["uid"],
                           "resourceVersion": metadata["resourceVersion"]},
        "type": "Normal", "reason": reason, "message": message,
        "source": {"component": component},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component, "reportingInstance": ""
    })
}

/// The node name pods get in `spec.nodeName`.
pub(crate) const SANDBOX_NODE: &str = "sandbox-node";

/// A namespace object as the sandbox starts with (`default`, `kube-system`, ...).
pub(crate) fn initial_namespace(name: &str, uid: String) -> Value {
    let mut object = json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "uid": uid, "creationTimestamp": timefmt::now_rfc3339()}
    });
    default_namespace(&mut object, name);
    object
}

pub(crate) fn default_pod(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    let containers = object["spec"]["containers"].as_array().cloned();
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        return Err(ApiError::invalid_field(
            resource,
            name,
            "FieldValueRequired",
            "spec.containers",
            "Required value",
        ));
    };
    let mut causes = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if container[field].as_str().unwrap_or_default().is_empty() {
                causes.push(StatusCause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: format!("spec.containers[{i}].{field}"),
                });
            }
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(resource, name, causes));
    }
    let spec = &mut object["spec"];
    default_pod_spec(spec);
    // The sandbox "schedules" every pod at once onto its one imaginary node.
    if spec["nodeName"].is_null() {
        spec["nodeName"] = json!(SANDBOX_NODE);
    }
    object["status"] = json!({
        "phase": "Pending",
        "qosClass": "BestEffort",
        "conditions": [{"type": "PodScheduled", "status": "True",
                        "lastTransitionTime": timefmt::now_rfc3339()}]
    });
    Ok(())
}

/// A Service's defaults; its ClusterIP is allocated when it is stored (`cluster_ips.rs`).
pub(crate) fn default_service(object: &mut Value, random: &mut Xorshift) {
    let spec = &mut object["spec"];
    if spec["type"].is_null() {
        spec["type"] = json!("ClusterIP");
    }
    if spec["clusterIP"] == "None" {
        spec["clusterIPs"] = json!(["None"]);
    }
    // NodePort and LoadBalancer services get a port on every node, from 30000-32767.
    let node_ports = matches!(spec["type"].as_str(), Some("NodePort" | "LoadBalancer"));
    if let Some(ports) = spec["ports"].as_array_mut() {
        for port in ports {
            if port["protocol"].is_null() {
                port["protocol"] = json!("TCP");
            }
            if port["targetPort"].is_null() {
                port["targetPort"] = port["port"].clone();
            }
            if node_ports && port["nodePort"].is_null() {
                port["nodePort"] = json!(30000 + random.below(2768));
            }
        }
    }
    if spec["sessionAffinity"].is_null() {
        spec["sessionAffinity"] = json!("None");
    }
    object["status"] = json!({"loadBalancer": {}});
}

/// `stringData` is write-only: the API server base64-encodes it into `data`.
pub(crate) fn default_secret(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    if object["type"].is_null() {
        object["type"] = json!("Opaque");
    }
    let string_data = object
        .as_object_mut()
        .and_then(|map| map.remove("stringData"));
    if let Some(Value::Object(entries)) = string_data {
        if !object["data"].is_object() {
            object["data"] = json!({});
        }
        for (key, value) in entries {
            let text = value.as_str().unwrap_or_default();
            object["data"][key] =
                json!(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()));
        }
    }
    if let Some(data) = object["data"].as_object() {
        for (key, value) in data {
            let decodes = value
                .as_str()
                .map(|s| base64::engine::general_purpose::STANDARD.decode(s).is_ok())
                .unwrap_or(false);
            if !decodes {
                return Err(ApiError::invalid_field(
                    resource,
                    name,
                    "FieldValueInvalid",
                    &format!("data[{key}]"),
                    "Invalid value: must be a base64-encoded string",
                ));
            }
        }
    }
    Ok(())
}

/// The finalizer kube-apiserver's StorageObjectInUseProtection admission puts on every new claim:
/// the PV controller removes it only once no pod uses the claim.
pub(crate) const CLAIM_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The same admission's finalizer on every new PersistentVolume: removed once no claim is bound to it.
pub(crate) const VOLUME_PROTECTION: &str = "kubernetes.io/pv-protection";

/// A resource quantity (`1Gi`, `500M`, `1.5e3`) as a number, or None if it is not one. The
/// syntax is apimachinery's: a decimal number, then a binary (`Ki`..`Ei`), decimal (`n u m k M G
/// T P E`) or exponent (`e3`) suffix.
pub(crate) fn parse_quantity(text: &str) -> Option<f64> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.matches('.').count() > 1 || number[1..].contains(['+', '-']) {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            10f64.powi(digits.parse::<i32>().ok()?)
        }
    };
    Some(value * scale)
}

/// apimachinery's Quantity refuses to decode anything else: kube-apiserver answers 400, before
/// validation, with this very message.
fn quantity_error(kind: &str, text: &Value) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"v1\" cannot be handled as a {kind}: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' (got {text})"
    ))
}

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

/// `spec.accessModes`: at least one, each one of the four kube knows.
fn check_access_modes(spec: &Value, causes: &mut Vec<StatusCause>) {
    let modes = spec["accessModes"].as_array().cloned().unwrap_or_default();
    if modes.is_empty() {
        causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: at least 1 access mode is required".into(),
            field: "spec.accessModes".into(),
        });
    }
    for mode in modes {
        if !ACCESS_MODES.iter().any(|known| mode == *known) {
            causes.push(StatusCause {
                reason: "FieldValueNotSupported".into(),
                message: format!(
                    "Unsupported value: {mode}: supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
                ),
                field: "spec.accessModes".into(),
            });
        }
    }
}

/// A claim's spec as kube-apiserver validates it on create and update: access modes and a
/// positive `resources.requests.storage`.
pub(crate) fn check_claim(
    resource: &ResourceType,
    claim: &Value,
    name: &str,
) -> Result<(), ApiError> {
    let spec = &claim["spec"];
    let mut causes = Vec::new();
    check_access_modes(spec, &mut causes);
    match &spec["resources"]["requests"]["storage"] {
        Value::Null => causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.resources[storage]".into(),
        }),
        request => match request.as_str().and_then(parse_quantity) {
            None => return Err(quantity_error(&resource.kind, request)),
            Some(bytes) if bytes <= 0.0 => causes.push(StatusCause {
                reason: "FieldValueInvalid".into(),
                message: format!("Invalid value: {request}: must be greater than zero"),
                field: "spec.resources[storage]".into(),
            }),
            Some(_) => {}
        },
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// A new claim: checked, Filesystem by default, protected, Pending until the PV controller binds it.
pub(crate) fn default_claim(
    resource: &ResourceType,
    claim: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    check_claim(resource, claim, name)?;
    if claim["spec"]["volumeMode"].is_null() {
        claim["spec"]["volumeMode"] = json!("Filesystem");
    }
    add_finalizer(claim, CLAIM_PROTECTION);
    claim["status"] = json!({"phase": "Pending"});
    Ok(())
}

/// A new PersistentVolume: a capacity, access modes, one source; Retain unless it says otherwise
/// (the provisioner's volumes say Delete); protected; Pending until the PV controller sees it.
pub(crate) fn default_volume(
    resource: &ResourceType,
    volume: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    let spec = &volume["spec"];
    let mut causes = Vec::new();
    check_access_modes(spec, &mut causes);
    match &spec["capacity"]["storage"] {
        Value::Null => causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "spec.capacity".into(),
        }),
        capacity => {
            if capacity.as_str().and_then(parse_quantity).is_none() {
                return Err(quantity_error(&resource.kind, capacity));
            }
        }
    }
    if spec["hostPath"]["path"].as_str().is_none() && spec["local"]["path"].as_str().is_none() {
        causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message:
                "Required value: must specify a volume type (the sandbox knows hostPath and local)"
                    .into(),
            field: "spec".into(),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(resource, name, causes));
    }
    if volume["spec"]["persistentVolumeReclaimPolicy"].is_null() {
        volume["spec"]["persistentVolumeReclaimPolicy"] = json!("Retain");
    }
    if volume["spec"]["volumeMode"].is_null() {
        volume["spec"]["volumeMode"] = json!("Filesystem");
    }
    add_finalizer(volume, VOLUME_PROTECTION);
    volume["status"] = json!({"phase": "Pending"});
    Ok(())
}

/// A StorageClass names its provisioner; reclaimPolicy Delete and volumeBindingMode Immediate
/// unless it says otherwise, as kube-apiserver defaults them.
pub(crate) fn default_storage_class(
    resource: &ResourceType,
    class: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    if class["provisioner"].as_str().unwrap_or_default().is_empty() {
        return Err(ApiError::invalid_field(
            resource,
            name,
            "FieldValueRequired",
            "provisioner",
            "Required value",
        ));
    }
    if class["reclaimPolicy"].is_null() {
        class["reclaimPolicy"] = json!("Delete");
    }
    if class["volumeBindingMode"].is_null() {
        class["volumeBindingMode"] = json!("Immediate");
    }
    Ok(())
}

fn add_finalizer(object: &mut Value, finalizer: &str) {
    let mut finalizers = object["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f == finalizer) {
        finalizers.push(json!(finalizer));
    }
    object["metadata"]["finalizers"] = json!(finalizers);
}

pub(crate) fn check_crd(resource: &ResourceType, crd: &Value, name: &str) -> Result<(), ApiError> {
    let spec = &crd["spec"];
    let mut causes = Vec::new();
    let mut require = |field: &str, value: &Value| {
        if value.as_str().unwrap_or_default().is_empty() {
            causes.push(StatusCause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: field.into(),
            });
        }
    };
    require("spec.group", &spec["group"]);
    require("spec.names.plural", &spec["names"]["plural"]);
    require("spec.names.kind", &spec["names"]["kind"]);
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        causes.push(StatusCause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: {}: must be spec.names.plural+\".\"+spec.group",
                json!(name)
            ),
            field: "metadata.name".into(),
        });
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced") | Some("Cluster")) {
        causes.push(StatusCause {
            reason: "FieldValueNotSupported".into(),
            message: format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                spec["scope"]
            ),
            field: "spec.scope".into(),
        });
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        causes.push(StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value: must have exactly one version marked as storage version"
                .into(),
            field: "spec.versions".into(),
        });
    } else if versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        causes.push(StatusCause {
            reason: "FieldValueInvalid".into(),
            message: "Invalid value: must have exactly one version marked as storage version"
                .into(),
            field: "spec.versions".into(),
        });
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// What the CRD's names controller fills in at once: defaults, acceptedNames, NamesAccepted.
/// `Established` comes later, from the follow-up timer.
pub(crate) fn default_crd(crd: &mut Value) {
    let kind = crd["spec"]["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let names = &mut crd["spec"]["names"];
    if names["singular"].is_null() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].is_null() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    let accepted = crd["spec"]["names"].clone();
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .map(|versions| {
            versions
                .iter()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect()
        })
        .unwrap_or_default();
    let existing = |kind: &str| {
        crd["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == kind).cloned())
    };
    // Conditions keep their lastTransitionTime while their status stays the same.
    let names_accepted = existing("NamesAccepted").unwrap_or_else(|| {
        json!({
            "type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
            "message": "no conflicts found", "lastTransitionTime": timefmt::now_rfc3339()
        })
    });
    let mut conditions = vec![names_accepted];
    if let Some(established) = existing("Established") {
        conditions.push(established);
    }
    crd["status"] =
        json!({"acceptedNames": accepted, "conditions": conditions, "storedVersions": stored});
}

/// The CRD's Established condition, as the apiextensions controller sets it.
pub(crate) fn established_condition() -> Value {
    json!({"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
           "message": "the initial names have been accepted",
           "lastTransitionTime": timefmt::now_rfc3339()})
}

/// The status the simulated kubelet writes once a pod "starts". Nothing runs: this is a record.
pub(crate) fn running_pod_status(pod: &Value, random: &mut Xorshift) -> Value {
    let now = timefmt::now_rfc3339();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .map(|containers| {
            containers
                .iter()
                .map(|c| {
                    json!({
                        "name": c["name"], "image": c["image"],
                        "imageID": format!("sandbox://{}", c["image"].as_str().unwrap_or_default()),
                        "containerID": format!("sandbox://{}", random.hex(16)),
                        "ready": true, "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": now}}
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
    let ip = format!("10.244.{}.{}", random.below(256), 2 + random.below(250));
    json!({
        "phase": "Running",
        "hostIP": "10.0.0.1",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "qosClass": "BestEffort",
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"),
                       condition("Ready"), condition("ContainersReady"), condition("PodScheduled")],
        "containerStatuses": statuses
    })
}

/// A crashed pod's status: Failed, not Ready, every container terminated (SIGKILL, 137).
pub(crate) fn failed_pod_status(pod: &Value) -> Value {
    let now = timefmt::now_rfc3339();
    let mut status = pod["status"].clone();
    if !status.is_object() {
        status = json!({});
    }
    status["phase"] = json!("Failed");
    status["conditions"] = json!([
        {"type": "Ready", "status": "False", "reason": "PodFailed", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "False", "reason": "PodFailed", "lastTransitionTime": now},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
    ]);
    if let Some(containers) = status["containerStatuses"].as_array_mut() {
        for container in containers {
            container["ready"] = json!(false);
            container["started"] = json!(false);
            container["state"] = json!({"terminated": {"exitCode": 137, "reason": "Error",
                                                      "finishedAt": now}});
        }
    }
    status
}

/// The STATUS column of `kubectl get pods`, as kube-apiserver's pod printer derives it: the
/// phase, unless an init container is still working (`Init:1/2`, `Init:CrashLoopBackOff`,
/// `Init:Error`) or a container waits or ended with a reason (`CrashLoopBackOff`,
/// `CreateContainerConfigError`, `ImagePullBackOff`, `Error`, `Completed`); `Terminating` once
/// deleted.
pub(crate) fn pod_status_reason(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = status["reason"]
        .as_str()
        .filter(|r| !r.is_empty())
        .or_else(|| status["phase"].as_str())
        .unwrap_or_default()
        .to_string();
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let init_statuses = status["initContainerStatuses"].as_array();
    let init_total = pod["spec"]["initContainers"].as_array().map_or(0, Vec::len);
    let mut initializing = false;
    for (i, container) in init_statuses.into_iter().flatten().enumerate() {
        let state = &container["state"];
        let terminated = &state["terminated"];
        let waiting = &state["waiting"];
        if terminated.is_object() && terminated["exitCode"] == 0 {
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            match text(&terminated["reason"]) {
                r if r.is_empty() => format!("Init:ExitCode:{}", terminated["exitCode"]),
                r => format!("Init:{r}"),
            }
        } else if waiting.is_object()
            && !text(&waiting["reason"]).is_empty()
            && waiting["reason"] != "PodInitializing"
        {
            format!("Init:{}", text(&waiting["reason"]))
        } else {
            format!("Init:{i}/{init_total}")
        };
        break;
    }
    let initialized = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        let mut has_running = false;
        let statuses = status["containerStatuses"].as_array();
        for container in statuses.into_iter().flatten().rev() {
            let state = &container["state"];
            let waiting_reason = text(&state["waiting"]["reason"]);
            let terminated = &state["terminated"];
            if !waiting_reason.is_empty() {
                reason = waiting_reason;
            } else if terminated.is_object() {
                reason = match text(&terminated["reason"]) {
                    r if r.is_empty() => format!("ExitCode:{}", terminated["exitCode"]),
                    r => r,
                };
            } else if container["ready"] == true && state["running"].is_object() {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if ready { "Running" } else { "NotReady" }.to_string();
        }
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        reason = "Terminating".to_string();
    }
    reason
}

#[cfg(test)]
mod pod_status_tests {
    use super::*;

    #[test]
    fn the_status_column_shows_init_progress_and_container_reasons() {
        let pod = json!({
            "spec": {"initContainers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [
                {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"state": {"running": {}}}
            ]}
        });
        assert_eq!(pod_status_reason(&pod), "Init:1/2");
        let crashing = json!({"status": {"phase": "Running", "conditions": [],
            "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
        assert_eq!(pod_status_reason(&crashing), "CrashLoopBackOff");
        let running = json!({"status": {"phase": "Running",
            "containerStatuses": [{"ready": true, "state": {"running": {}}}]}});
        assert_eq!(pod_status_reason(&running), "Running");
        let deleted =
            json!({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}});
        assert_eq!(pod_status_reason(&deleted), "Terminating");
    }
}
