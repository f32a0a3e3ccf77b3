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
use crate::selector::LabelSelector;
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

/// What kube-apiserver requires of every pod spec (a pod's, or a workload's template at
/// `field`): at least one container, each with a name and an image.
fn pod_spec_causes(spec: &Value, field: &str) -> Vec<StatusCause> {
    let containers = spec["containers"].as_array().filter(|c| !c.is_empty());
    let Some(containers) = containers else {
        return vec![StatusCause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: format!("{field}.containers"),
        }];
    };
    let mut causes = Vec::new();
    for (i, container) in containers.iter().enumerate() {
        for part in ["name", "image"] {
            if container[part].as_str().unwrap_or_default().is_empty() {
                causes.push(StatusCause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: format!("{field}.containers[{i}].{part}"),
                });
            }
        }
    }
    causes
}

/// The official postgres image's `postgres` user: the user pods run as on the host when the
/// sandbox is root, whatever their `runAsUser` (the kubelet maps theirs onto it).
pub(crate) const POSTGRES_USER: u32 = 999;
/// The distroless `nonroot` user that kube/deployment.yaml's operator pod asks for.
pub(crate) const OPERATOR_USER: u32 = 65532;
/// The ids a pod may ask for (runAsUser, runAsGroup, fsGroup) when the sandbox runs as root: what
/// the project's own pods need (src/postgres/manifests.rs: 999; kube/deployment.yaml: 65532),
/// and 0, which never means root here (such a pod runs as the postgres user).
pub(crate) const POD_IDS_AS_ROOT: [u64; 3] = [0, POSTGRES_USER as u64, OPERATOR_USER as u64];

/// When the sandbox runs as root, a pod's processes run as a host user, on the host's /usr and
/// the pod's volumes: a pod asking for uid 4321 must not become host uid 4321 and read or
/// write its files there. Such pods are refused as PodSecurity admission refuses: `pods "x" is forbidden`.
pub(crate) fn check_pod_ids_as_root(
    resource: &ResourceType,
    pod: &Value,
    name: &str,
) -> Result<(), ApiError> {
    let spec = &pod["spec"];
    let mut contexts = vec![("spec.securityContext".to_string(), &spec["securityContext"])];
    for list in ["initContainers", "containers"] {
        for (index, container) in spec[list].as_array().into_iter().flatten().enumerate() {
            contexts.push((
                format!("spec.{list}[{index}].securityContext"),
                &container["securityContext"],
            ));
        }
    }
    let mut refused = Vec::new();
    for (path, context) in contexts {
        for field in ["runAsUser", "runAsGroup", "fsGroup"] {
            let value = &context[field];
            if !value.is_null()
                && !value
                    .as_u64()
                    .is_some_and(|id| POD_IDS_AS_ROOT.contains(&id))
            {
                refused.push(format!("{path}.{field}={value}"));
            }
        }
    }
    if refused.is_empty() {
        return Ok(());
    }
    Err(ApiError::forbidden(
        resource,
        name,
        &format!(
            "{} not allowed: this sandbox runs as root and pods see the host's files, so a pod may ask only for ids {POSTGRES_USER} (postgres) or {OPERATOR_USER} (the operator image's nonroot); either runs as host user {POSTGRES_USER}",
            refused.join(", ")
        ),
    ))
}

pub(crate) fn default_pod(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    let causes = pod_spec_causes(&object["spec"], "spec");
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

/// Where a PersistentVolume's data may live when pods run as processes: below `root`, the
/// sandbox's own volume directory (`<data dir>/persistentvolumes`). A pod writes into its
/// volume's directory as the sandbox's pod user, and a Delete reclaim removes it, so a
/// hostPath of `/etc` or `/home/someone` would hand the host's files to any pod. Refused as an
/// admission plugin refuses: `persistentvolumes "x" is forbidden: ...`. The path is judged after
/// symbolic links of its existing part are resolved (a link inside the root pointing out of it
/// does not pass).
pub(crate) fn check_volume_path(
    resource: &ResourceType,
    volume: &Value,
    name: &str,
    root: &std::path::Path,
) -> Result<(), ApiError> {
    use std::path::{Component, Path};
    for source in ["hostPath", "local"] {
        let Some(path) = volume["spec"][source]["path"].as_str() else {
            continue;
        };
        let field = format!("spec.{source}.path");
        let given = Path::new(path);
        let refuse = |why: String| {
            Err(ApiError::forbidden(
                resource,
                name,
                &format!(
                    "{field} {path:?} {why}: pods may only write below {} (a PersistentVolumeClaim alone gets a volume there)",
                    root.display()
                ),
            ))
        };
        if !given.is_absolute() {
            return refuse("is not an absolute path".into());
        }
        if given.components().any(|c| c == Component::ParentDir) {
            return refuse("must not contain '..'".into());
        }
        // The longest existing prefix, with its links resolved, then the rest as written.
        let mut existing = given;
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(last)) => {
                    rest.push(last);
                    existing = parent;
                }
                _ => break,
            }
        }
        let mut resolved = existing
            .canonicalize()
            .unwrap_or_else(|_| existing.to_path_buf());
        resolved.extend(rest.iter().rev());
        if !resolved.starts_with(root) || resolved == root {
            return refuse(if resolved.as_path() == given {
                "is outside the sandbox's volume directory".into()
            } else {
                format!(
                    "is outside the sandbox's volume directory (it resolves to {})",
                    resolved.display()
                )
            });
        }
    }
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

/// Images whose pods never pass readiness (`Faults::fail_readiness`): shared by the fault
/// switches, the simulated kubelet and the process runtime, which each consult it.
pub(crate) type UnreadyImages =
    std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

/// Whether a container of `pod` runs one of `images` (`nginx:1.7.9`, as its spec says).
pub(crate) fn runs_image(pod: &Value, images: &std::collections::BTreeSet<String>) -> bool {
    pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["image"]
                .as_str()
                .is_some_and(|image| images.contains(image))
        })
}

/// A running pod's `status` with readiness set to `ready`: its Ready and ContainersReady
/// conditions and each container's `ready`, as a failing (or passing again) readiness probe
/// leaves them. The ReplicaSet counts a pod available only while it is Ready.
pub(crate) fn with_readiness(mut status: Value, ready: bool) -> Value {
    let now = timefmt::now_rfc3339();
    let word = if ready { "True" } else { "False" };
    for condition in status["conditions"].as_array_mut().into_iter().flatten() {
        if condition["type"] != "Ready" && condition["type"] != "ContainersReady" {
            continue;
        }
        if condition["status"] != word {
            condition["status"] = json!(word);
            condition["lastTransitionTime"] = json!(now);
        }
        condition["reason"] = if ready {
            Value::Null
        } else {
            json!("ContainersNotReady")
        };
    }
    for container in status["containerStatuses"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        container["ready"] = json!(ready);
    }
    status
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

// ---- apps/v1: Deployments and ReplicaSets ----

/// The label the Deployment controller adds to a ReplicaSet's selector, template and pods.
pub(crate) const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// `spec.selector` as label-selector text (`app=web,tier in (db)`), as kube's
/// `metav1.LabelSelectorAsSelector` reads it; `Err` names what is wrong with it.
pub(crate) fn label_selector_text(selector: &Value) -> Result<String, String> {
    let mut terms = Vec::new();
    if !selector["matchLabels"].is_null() && !selector["matchLabels"].is_object() {
        return Err("matchLabels must be a map of strings".into());
    }
    if !selector["matchExpressions"].is_null() && !selector["matchExpressions"].is_array() {
        return Err("matchExpressions must be a list".into());
    }
    for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
        let Some(value) = value.as_str() else {
            return Err(format!("matchLabels.{key} must be a string"));
        };
        terms.push(format!("{key}={value}"));
    }
    for expression in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = expression["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let operator = expression["operator"].as_str().unwrap_or_default();
        terms.push(match (operator, values.is_empty()) {
            ("In", false) => format!("{key} in ({})", values.join(",")),
            ("NotIn", false) => format!("{key} notin ({})", values.join(",")),
            ("Exists", true) => key.to_string(),
            ("DoesNotExist", true) => format!("!{key}"),
            ("In" | "NotIn", true) => {
                return Err(format!("{operator}: values must be non-empty"));
            }
            ("Exists" | "DoesNotExist", false) => {
                return Err(format!("{operator}: values must be empty"));
            }
            _ => return Err(format!("{operator:?} is not a valid selector operator")),
        });
    }
    let text = terms.join(",");
    LabelSelector::parse(&text).map_err(|e| e.to_string())?;
    Ok(text)
}

/// Go's `%#v` of a `map[string]string`, as kube-apiserver's messages print label maps.
fn go_string_map(map: &Value) -> String {
    let mut entries: Vec<String> = map
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{}:{}", json!(k), json!(v.as_str().unwrap_or_default())))
        .collect();
    entries.sort();
    format!("map[string]string{{{}}}", entries.join(", "))
}

/// A 400 for a field of the wrong JSON type: kube-apiserver fails to decode such a body.
fn expect_object(resource: &ResourceType, value: &Value, field: &str) -> Result<(), ApiError> {
    if value.is_null() || value.is_object() {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: {field} must be a JSON object",
        kind = resource.kind,
        version = resource.version
    )))
}

fn cause(reason: &str, field: &str, message: String) -> StatusCause {
    StatusCause {
        reason: reason.into(),
        message,
        field: field.into(),
    }
}

/// A non-negative integer field, or a cause saying why not (absent is fine).
fn check_non_negative(spec: &Value, field: &str, causes: &mut Vec<StatusCause>) {
    match &spec[field] {
        Value::Null => {}
        value if value.as_i64().is_some_and(|n| n >= 0) => {}
        value => causes.push(cause(
            "FieldValueInvalid",
            &format!("spec.{field}"),
            format!("Invalid value: {value}: must be greater than or equal to 0"),
        )),
    }
}

/// The checks a Deployment and a ReplicaSet share (kube's ValidateReplicaSetSpec and
/// ValidateDeploymentSpec): replicas, a non-empty selector that the template's labels match,
/// and a pod template that could make pods that restart (restartPolicy Always).
fn workload_causes(resource: &ResourceType, spec: &Value) -> Vec<StatusCause> {
    let mut causes = Vec::new();
    check_non_negative(spec, "replicas", &mut causes);
    check_non_negative(spec, "minReadySeconds", &mut causes);
    let selector = &spec["selector"];
    let labels = &spec["template"]["metadata"]["labels"];
    if selector.is_null() {
        causes.push(cause(
            "FieldValueRequired",
            "spec.selector",
            "Required value".into(),
        ));
    } else {
        match label_selector_text(selector) {
            Ok(text) if text.is_empty() => causes.push(cause(
                "FieldValueInvalid",
                "spec.selector",
                format!(
                    "Invalid value: {selector}: empty selector is invalid for {}",
                    resource.plural.trim_end_matches('s')
                ),
            )),
            Ok(text) => {
                let matches = LabelSelector::parse(&text)
                    .is_ok_and(|s| s.matches_json_labels(labels.as_object()));
                if !matches {
                    causes.push(cause(
                        "FieldValueInvalid",
                        "spec.template.metadata.labels",
                        format!(
                            "Invalid value: {}: `selector` does not match template `labels`",
                            go_string_map(labels)
                        ),
                    ));
                }
            }
            Err(problem) => causes.push(cause(
                "FieldValueInvalid",
                "spec.selector",
                format!("Invalid value: {selector}: {problem}"),
            )),
        }
    }
    causes.extend(pod_spec_causes(
        &spec["template"]["spec"],
        "spec.template.spec",
    ));
    match spec["template"]["spec"]["restartPolicy"].as_str() {
        None | Some("Always") => {}
        Some(other) => causes.push(cause(
            "FieldValueNotSupported",
            "spec.template.spec.restartPolicy",
            format!(
                "Unsupported value: {}: supported values: \"Always\"",
                json!(other)
            ),
        )),
    }
    causes
}

/// The defaults both workload kinds get, and their 400 for fields of the wrong type.
fn default_workload(resource: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    let spec = &object["spec"];
    for (value, field) in [
        (&spec["selector"], "spec.selector"),
        (&spec["template"], "spec.template"),
        (&spec["template"]["metadata"], "spec.template.metadata"),
        (&spec["template"]["spec"], "spec.template.spec"),
        (&spec["strategy"], "spec.strategy"),
        (
            &spec["strategy"]["rollingUpdate"],
            "spec.strategy.rollingUpdate",
        ),
    ] {
        expect_object(resource, value, field)?;
    }
    let spec = &mut object["spec"];
    if spec["replicas"].is_null() {
        spec["replicas"] = json!(1);
    }
    if spec["template"]["spec"].is_object() {
        default_pod_spec(&mut spec["template"]["spec"]);
    }
    Ok(())
}

/// A deployment strategy's `maxSurge`/`maxUnavailable`: an integer or a `"25%"` string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IntOrPercent {
    Int(i64),
    Percent(i64),
}

impl IntOrPercent {
    pub(crate) fn parse(value: &Value) -> Option<IntOrPercent> {
        if let Some(n) = value.as_i64() {
            return Some(IntOrPercent::Int(n));
        }
        let digits = value.as_str()?.strip_suffix('%')?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok().map(IntOrPercent::Percent)
    }

    /// kube's `GetScaledValueFromIntOrPercent`: a percent of `total`, rounded up or down.
    pub(crate) fn scaled(self, total: i64, round_up: bool) -> i64 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) if round_up => (p * total + 99) / 100,
            IntOrPercent::Percent(p) => p * total / 100,
        }
    }

    fn is_zero(self) -> bool {
        matches!(self, IntOrPercent::Int(0) | IntOrPercent::Percent(0))
    }
}

/// apps/v1 Deployment: kube-apiserver's defaults (strategy RollingUpdate 25%/25%, 1 replica,
/// revisionHistoryLimit 10, progressDeadlineSeconds 600) and checks, in its 422 words.
pub(crate) fn default_deployment(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    check_deployment(resource, object, name)?;
    // A new object's status is the controller's to write (kube's PrepareForCreate resets it).
    object["status"] = json!({});
    Ok(())
}

fn check_deployment(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    default_workload(resource, object)?;
    let spec = &mut object["spec"];
    if spec["strategy"]["type"].is_null() {
        spec["strategy"]["type"] = json!("RollingUpdate");
    }
    if spec["strategy"]["type"] == "RollingUpdate" {
        for field in ["maxUnavailable", "maxSurge"] {
            if spec["strategy"]["rollingUpdate"][field].is_null() {
                spec["strategy"]["rollingUpdate"][field] = json!("25%");
            }
        }
    }
    for (field, value) in [
        ("revisionHistoryLimit", 10),
        ("progressDeadlineSeconds", 600),
    ] {
        if spec[field].is_null() {
            spec[field] = json!(value);
        }
    }
    let causes = deployment_causes(resource, spec);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

fn deployment_causes(resource: &ResourceType, spec: &Value) -> Vec<StatusCause> {
    let mut causes = workload_causes(resource, spec);
    check_non_negative(spec, "revisionHistoryLimit", &mut causes);
    let deadline = spec["progressDeadlineSeconds"].as_i64().unwrap_or(0);
    if deadline <= spec["minReadySeconds"].as_i64().unwrap_or(0) {
        causes.push(cause(
            "FieldValueInvalid",
            "spec.progressDeadlineSeconds",
            format!(
                "Invalid value: {}: must be greater than minReadySeconds",
                spec["progressDeadlineSeconds"]
            ),
        ));
    }
    let strategy = &spec["strategy"];
    match strategy["type"].as_str() {
        Some("Recreate") if !strategy["rollingUpdate"].is_null() => causes.push(cause(
            "FieldValueForbidden",
            "spec.strategy.rollingUpdate",
            "Forbidden: may not be specified when strategy `type` is 'Recreate'".into(),
        )),
        Some("Recreate") => {}
        Some("RollingUpdate") => {
            let rolling = &strategy["rollingUpdate"];
            let mut parsed = Vec::new();
            for field in ["maxUnavailable", "maxSurge"] {
                let path = format!("spec.strategy.rollingUpdate.{field}");
                match IntOrPercent::parse(&rolling[field]) {
                    Some(IntOrPercent::Int(n) | IntOrPercent::Percent(n)) if n < 0 => {
                        causes.push(cause(
                            "FieldValueInvalid",
                            &path,
                            format!(
                                "Invalid value: {}: must be greater than or equal to 0",
                                rolling[field]
                            ),
                        ))
                    }
                    Some(IntOrPercent::Percent(p)) if p > 100 && field == "maxUnavailable" => {
                        causes.push(cause(
                            "FieldValueInvalid",
                            &path,
                            format!(
                                "Invalid value: {}: must not be greater than 100%",
                                rolling[field]
                            ),
                        ))
                    }
                    Some(value) => parsed.push(value),
                    None => causes.push(cause(
                        "FieldValueInvalid",
                        &path,
                        format!(
                            "Invalid value: {}: a valid percent string must be a numeric string \
                             followed by an ending '%' (e.g. '1%',  or '93%', regex used for \
                             validation is '[0-9]+%')",
                            rolling[field]
                        ),
                    )),
                }
            }
            if parsed.len() == 2 && parsed.iter().all(|v| v.is_zero()) {
                causes.push(cause(
                    "FieldValueInvalid",
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    format!(
                        "Invalid value: {}: may not be 0 when `maxSurge` is 0",
                        rolling["maxUnavailable"]
                    ),
                ));
            }
        }
        _ => causes.push(cause(
            "FieldValueNotSupported",
            "spec.strategy.type",
            format!(
                "Unsupported value: {}: supported values: \"Recreate\", \"RollingUpdate\"",
                strategy["type"]
            ),
        )),
    }
    causes
}

/// apps/v1 ReplicaSet: 1 replica by default; the checks it shares with Deployments.
pub(crate) fn default_replica_set(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    check_replica_set(resource, object, name)?;
    object["status"] = json!({});
    Ok(())
}

fn check_replica_set(
    resource: &ResourceType,
    object: &mut Value,
    name: &str,
) -> Result<(), ApiError> {
    default_workload(resource, object)?;
    let causes = workload_causes(resource, &object["spec"]);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(resource, name, causes))
    }
}

/// An update of a Deployment or ReplicaSet: the same defaults and checks as a create, and
/// `spec.selector` may not change in apps/v1 (pods would silently leave their owner).
pub(crate) fn check_workload_update(
    resource: &ResourceType,
    name: &str,
    old: &Value,
    next: &mut Value,
) -> Result<(), ApiError> {
    if resource.plural == "deployments" {
        check_deployment(resource, next, name)?;
    } else {
        check_replica_set(resource, next, name)?;
    }
    if next["spec"]["selector"] != old["spec"]["selector"] {
        return Err(ApiError::invalid_field(
            resource,
            name,
            "FieldValueInvalid",
            "spec.selector",
            format!(
                "Invalid value: v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{}}}: field is immutable",
                go_string_map(&next["spec"]["selector"]["matchLabels"]),
                next["spec"]["selector"]["matchExpressions"]
            ),
        ));
    }
    Ok(())
}

/// A core/v1 Event about any object (a Deployment, a ReplicaSet, a Pod) from `component`, as
/// `kubectl describe` and `kubectl events` find them: by involvedObject kind, name and uid.
pub(crate) fn event_about(
    object: &Value,
    random: &mut Xorshift,
    component: &str,
    event_type: &str,
    reason: &str,
    message: String,
) -> Value {
    let mut event = pod_event(object, random, component, reason, message);
    event["type"] = json!(event_type);
    event["involvedObject"]["kind"] = object["kind"].clone();
    event["involvedObject"]["apiVersion"] = object["apiVersion"].clone();
    event
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
