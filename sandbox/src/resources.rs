//! What the sandbox serves: the built-in kinds, the kinds learnt from CustomResourceDefinitions,
//! and the documents that describe them (discovery, aggregated discovery, OpenAPI v3).
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl reads discovery before every command to turn
//! `pgc` into `/apis/workshop.example.com/v1/namespaces/default/postgresclusters`, and reads the
//! OpenAPI v3 document to learn that the server checks fields itself (`fieldValidation`).

use serde_json::{json, Value};

/// What `/version`, discovery and OpenAPI report. kubectl here is a dispatcher that picks its
/// real binary by the version's `minor` (32).
pub(crate) const GIT_VERSION: &str = "v1.32.4+sandbox";

/// The resource metrics API, metrics-server's group: `metrics.rs` answers it from the pods'
/// processes, not from the store, and discovery lists it so that `kubectl top` finds it.
pub(crate) const METRICS_GROUP: &str = "metrics.k8s.io";
pub(crate) const METRICS_VERSION: &str = "v1beta1";
/// (plural, kind, namespaced) of each metrics resource; both are read-only.
const METRICS_RESOURCES: [(&str, &str, bool); 2] = [
    ("nodes", "NodeMetrics", false),
    ("pods", "PodMetrics", true),
];

/// Where the replica count lives in a custom object, for the `/scale` subresource.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ScalePaths {
    /// `.spec.size` for PostgresCluster.
    pub(crate) spec_replicas: String,
    /// `.status.readyReplicas`; `None` means the Scale's status.replicas is 0.
    pub(crate) status_replicas: Option<String>,
    pub(crate) label_selector: Option<String>,
}

/// One `additionalPrinterColumns` entry of a CRD version.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PrinterColumn {
    pub(crate) name: String,
    pub(crate) column_type: String,
    pub(crate) format: String,
    pub(crate) description: String,
    pub(crate) priority: i64,
    pub(crate) json_path: String,
}

/// One resource at one group-version: `pods` in core/v1, `postgresclusters` in workshop.example.com/v1.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResourceType {
    /// Empty for the core group (`/api/v1`).
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) plural: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    /// Groups of kinds kubectl can name at once: `kubectl get all` means every kind in "all".
    pub(crate) categories: Vec<String>,
    pub(crate) status_subresource: bool,
    pub(crate) scale: Option<ScalePaths>,
    /// The CRD's `openAPIV3Schema` for this version (custom resources only).
    pub(crate) schema: Option<Value>,
    pub(crate) printer_columns: Vec<PrinterColumn>,
    /// Defined by a CRD: strategic merge patch is refused (415), as kube-apiserver does.
    pub(crate) custom: bool,
}

impl ResourceType {
    fn builtin(group: &str, plural: &str, kind: &str, namespaced: bool, short: &[&str]) -> Self {
        ResourceType {
            group: group.into(),
            version: "v1".into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            status_subresource: false,
            scale: None,
            schema: None,
            printer_columns: Vec::new(),
            custom: false,
        }
    }

    /// `v1` or `workshop.example.com/v1`: the `apiVersion` of this kind's objects.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The key objects are stored under: one collection per group+plural, whatever the version.
    pub(crate) fn store_key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    /// `postgresclusters.workshop.example.com`, or `pods` for the core group (error messages).
    pub(crate) fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `PostgresCluster.workshop.example.com` or `Pod` (the 422 Invalid message).
    pub(crate) fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    /// `/api/v1` or `/apis/GROUP/VERSION`.
    pub(crate) fn group_version_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The fields a `fieldSelector` may name for this kind, as kube-apiserver registers them.
    pub(crate) fn selectable_fields(&self) -> Vec<&'static str> {
        let mut fields = vec!["metadata.name", "metadata.namespace"];
        if !self.group.is_empty() {
            return fields;
        }
        fields.extend(match self.plural.as_str() {
            "pods" => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            ][..],
            "events" => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ][..],
            "secrets" => &["type"][..],
            "namespaces" => &["status.phase"][..],
            "services" => &["spec.clusterIP", "spec.type"][..],
            _ => &[][..],
        });
        fields
    }

    pub(crate) fn verbs(&self) -> Value {
        json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ])
    }

    /// `(name, kind-group, kind-version, kind, verbs)` of each subresource.
    fn subresources(&self) -> Vec<(&'static str, &'static str, &'static str, String, Value)> {
        let mut subs = Vec::new();
        if self.status_subresource {
            subs.push((
                "status",
                "",
                "",
                self.kind.clone(),
                json!(["get", "patch", "update"]),
            ));
        }
        if self.scale.is_some() {
            subs.push((
                "scale",
                "autoscaling",
                "v1",
                "Scale".to_string(),
                json!(["get", "patch", "update"]),
            ));
        }
        if self.group.is_empty() && self.plural == "pods" {
            subs.push(("log", "", "", "Pod".to_string(), json!(["get"])));
            // As kube-apiserver lists them: the verbs are the HTTP methods kubectl may use.
            subs.push((
                "exec",
                "",
                "",
                "PodExecOptions".to_string(),
                json!(["create", "get"]),
            ));
            subs.push((
                "portforward",
                "",
                "",
                "PodPortForwardOptions".to_string(),
                json!(["create", "get"]),
            ));
        }
        subs
    }
}

/// Every resource the sandbox serves right now. CRDs add and remove entries at run time.
#[derive(Clone, Debug)]
pub(crate) struct Registry {
    resources: Vec<ResourceType>,
    /// Bumped on every change, so OpenAPI URLs carry a new `?hash=` and kubectl refetches.
    pub(crate) generation: u64,
}

impl Registry {
    pub(crate) fn with_builtins() -> Registry {
        let mut namespaces = ResourceType::builtin("", "namespaces", "Namespace", false, &["ns"]);
        namespaces.status_subresource = true;
        let mut pods = ResourceType::builtin("", "pods", "Pod", true, &["po"]);
        pods.status_subresource = true;
        pods.categories = vec!["all".into()];
        let mut nodes = ResourceType::builtin("", "nodes", "Node", false, &["no"]);
        nodes.status_subresource = true;
        let mut services = ResourceType::builtin("", "services", "Service", true, &["svc"]);
        services.status_subresource = true;
        services.categories = vec!["all".into()];
        let mut crds = ResourceType::builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
        );
        crds.status_subresource = true;
        let mut deployments =
            ResourceType::builtin("apps", "deployments", "Deployment", true, &["deploy"]);
        deployments.status_subresource = true;
        deployments.categories = vec!["all".into()];
        deployments.scale = Some(ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: Some(".status.replicas".into()),
            label_selector: None,
        });
        let mut replica_sets =
            ResourceType::builtin("apps", "replicasets", "ReplicaSet", true, &["rs"]);
        replica_sets.status_subresource = true;
        replica_sets.categories = vec!["all".into()];
        replica_sets.scale = deployments.scale.clone();
        let rbac = |plural: &str, kind: &str, namespaced: bool| {
            ResourceType::builtin("rbac.authorization.k8s.io", plural, kind, namespaced, &[])
        };
        // The PV controller (`storage.rs`) binds claims to volumes and writes both statuses.
        let mut claims = ResourceType::builtin(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
        );
        claims.status_subresource = true;
        let mut volumes =
            ResourceType::builtin("", "persistentvolumes", "PersistentVolume", false, &["pv"]);
        volumes.status_subresource = true;
        let storage_classes = ResourceType::builtin(
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
        );
        Registry {
            resources: vec![
                namespaces,
                nodes,
                pods,
                services,
                ResourceType::builtin("", "secrets", "Secret", true, &[]),
                ResourceType::builtin("", "configmaps", "ConfigMap", true, &["cm"]),
                // Written by the process runtime's endpoints controller (`runtime/services.rs`).
                ResourceType::builtin("", "endpoints", "Endpoints", true, &["ep"]),
                // The same, as the EndpointSlice controller writes them beside Endpoints.
                ResourceType::builtin(
                    "discovery.k8s.io",
                    "endpointslices",
                    "EndpointSlice",
                    true,
                    &[],
                ),
                ResourceType::builtin("", "events", "Event", true, &["ev"]),
                claims,
                volumes,
                storage_classes,
                crds,
                ResourceType::builtin("coordination.k8s.io", "leases", "Lease", true, &[]),
                // Stored only, for `kubectl apply -f` of an operator's own manifests.
                ResourceType::builtin("", "serviceaccounts", "ServiceAccount", true, &["sa"]),
                // Run by the Deployment and ReplicaSet controllers (`workloads.rs`).
                deployments,
                replica_sets,
                rbac("roles", "Role", true),
                rbac("rolebindings", "RoleBinding", true),
                rbac("clusterroles", "ClusterRole", false),
                rbac("clusterrolebindings", "ClusterRoleBinding", false),
            ],
            generation: 1,
        }
    }

    pub(crate) fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Any served version of a group+plural (the store keys objects by these two).
    pub(crate) fn find_by_store_key(&self, store_key: &str) -> Option<&ResourceType> {
        self.resources.iter().find(|r| r.store_key() == store_key)
    }

    pub(crate) fn serves_group_version(&self, group: &str, version: &str) -> bool {
        self.resources
            .iter()
            .any(|r| r.group == group && r.version == version)
    }

    /// Groups (core excluded) with their versions, in first-seen order.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.resources.iter().filter(|r| !r.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, versions)) => {
                    if !versions.contains(&r.version) {
                        versions.push(r.version.clone())
                    }
                }
                None => groups.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        groups
    }

    /// Replace everything a CRD defines with what `crd` says now (create and update).
    pub(crate) fn register_crd(&mut self, crd: &Value) {
        self.unregister_crd(crd);
        self.resources.extend(resources_from_crd(crd));
        self.generation += 1;
    }

    pub(crate) fn unregister_crd(&mut self, crd: &Value) {
        let group = crd["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let plural = crd["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.resources
            .retain(|r| !(r.custom && r.group == group && r.plural == plural));
        self.generation += 1;
    }

    // ---- discovery documents ----

    /// `GET /api` (legacy): the core group's versions.
    pub(crate) fn core_versions(&self, server_address: &str) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"],
               "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]})
    }

    fn group_json(name: &str, versions: &[String]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
            .collect();
        json!({"name": name, "versions": versions, "preferredVersion": versions[0].clone()})
    }

    fn metrics_group_json() -> Value {
        Registry::group_json(METRICS_GROUP, &[METRICS_VERSION.to_string()])
    }

    /// `GET /apis` (legacy): every group and its versions.
    pub(crate) fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(name, versions)| Registry::group_json(name, versions))
            .chain([Registry::metrics_group_json()])
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/GROUP` (legacy).
    pub(crate) fn group(&self, group: &str) -> Option<Value> {
        let mut doc = if group == METRICS_GROUP {
            Registry::metrics_group_json()
        } else {
            let (name, versions) = self.groups().into_iter().find(|(g, _)| g == group)?;
            Registry::group_json(&name, &versions)
        };
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        Some(doc)
    }

    /// `GET /api/v1` or `/apis/GROUP/VERSION` (legacy): resources and subresources of one version.
    pub(crate) fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if (group, version) == (METRICS_GROUP, METRICS_VERSION) {
            let entries: Vec<Value> = METRICS_RESOURCES
                .iter()
                .map(|(plural, kind, namespaced)| {
                    json!({"name": plural, "singularName": "", "namespaced": namespaced,
                           "kind": kind, "verbs": ["get", "list"]})
                })
                .collect();
            return Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("{METRICS_GROUP}/{METRICS_VERSION}"), "resources": entries}));
        }
        if !self.serves_group_version(group, version) {
            return None;
        }
        let mut entries = Vec::new();
        for r in self
            .resources
            .iter()
            .filter(|r| r.group == group && r.version == version)
        {
            let mut entry = json!({"name": r.plural, "singularName": r.singular,
                "namespaced": r.namespaced, "kind": r.kind, "verbs": r.verbs()});
            if !r.short_names.is_empty() {
                entry["shortNames"] = json!(r.short_names);
            }
            if !r.categories.is_empty() {
                entry["categories"] = json!(r.categories);
            }
            entries.push(entry);
            for (sub, kind_group, kind_version, kind, verbs) in r.subresources() {
                let mut entry = json!({"name": format!("{}/{sub}", r.plural), "singularName": "",
                    "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
                if !kind_group.is_empty() {
                    entry["group"] = json!(kind_group);
                    entry["version"] = json!(kind_version);
                }
                entries.push(entry);
            }
        }
        let group_version = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": group_version, "resources": entries}))
    }

    /// Aggregated discovery (apidiscovery.k8s.io/v2): everything in one answer. `core` picks
    /// `/api` (the core group, named "") or `/apis` (every other group).
    pub(crate) fn aggregated(&self, core: bool) -> Value {
        let groups: Vec<(String, Vec<String>)> = if core {
            vec![(String::new(), vec!["v1".to_string()])]
        } else {
            self.groups()
        };
        let mut items: Vec<Value> = groups
            .iter()
            .map(|(group, versions)| {
                let versions: Vec<Value> = versions
                    .iter()
                    .map(|version| {
                        let resources: Vec<Value> = self
                            .resources
                            .iter()
                            .filter(|r| &r.group == group && &r.version == version)
                            .map(aggregated_resource)
                            .collect();
                        json!({"version": version, "resources": resources, "freshness": "Current"})
                    })
                    .collect();
                json!({"metadata": {"name": group}, "versions": versions})
            })
            .collect();
        if !core {
            let resources: Vec<Value> = METRICS_RESOURCES
                .iter()
                .map(|(plural, kind, namespaced)| {
                    json!({"resource": plural,
                           "responseKind": {"group": METRICS_GROUP, "version": METRICS_VERSION, "kind": kind},
                           "scope": if *namespaced { "Namespaced" } else { "Cluster" },
                           "singularResource": "", "verbs": ["get", "list"]})
                })
                .collect();
            items.push(json!({"metadata": {"name": METRICS_GROUP}, "versions": [
                {"version": METRICS_VERSION, "resources": resources, "freshness": "Current"}]}));
        }
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
               "metadata": {}, "items": items})
    }

    // ---- OpenAPI v3 ----

    /// `GET /openapi/v3`: one entry per group-version, pointing at its document.
    pub(crate) fn openapi_index(&self) -> Value {
        let mut paths = serde_json::Map::new();
        let mut seen: Vec<String> = Vec::new();
        for r in &self.resources {
            let key = r.group_version_path().trim_start_matches('/').to_string();
            if seen.contains(&key) {
                continue;
            }
            let url = format!("/openapi/v3/{key}?hash={:016X}", self.generation);
            paths.insert(key.clone(), json!({ "serverRelativeURL": url }));
            seen.push(key);
        }
        json!({ "paths": paths })
    }

    /// `GET /openapi/v3/api/v1` or `/openapi/v3/apis/G/V`: a `patch` operation per kind that lists
    /// the `fieldValidation` parameter. kubectl looks for exactly that before it lets the server
    /// validate fields; without it, kubectl falls back to the protobuf-only /openapi/v2 (served
    /// empty, see `responses::openapi_v2_response`) and validates nothing itself. Every kind also
    /// gets `apiVersion`, `kind` and `metadata` (an ObjectMeta reference) for `kubectl explain`.
    pub(crate) fn openapi_document(&self, group: &str, version: &str) -> Option<Value> {
        if !self.serves_group_version(group, version) {
            return None;
        }
        let mut paths = serde_json::Map::new();
        let mut schemas = serde_json::Map::new();
        for r in self
            .resources
            .iter()
            .filter(|r| r.group == group && r.version == version)
        {
            let collection = if r.namespaced {
                format!(
                    "{}/namespaces/{{namespace}}/{}",
                    r.group_version_path(),
                    r.plural
                )
            } else {
                format!("{}/{}", r.group_version_path(), r.plural)
            };
            let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
            let schema_name = format!(
                "{}.{}.{}",
                if r.group.is_empty() {
                    "io.k8s.api.core"
                } else {
                    r.group.as_str()
                },
                r.version,
                r.kind
            );
            let reference = json!({"$ref": format!("#/components/schemas/{schema_name}")});
            let body = json!({"content": {"application/json": {"schema": reference}}});
            let parameters = json!([
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"},
                 "description": "Strict, Warn or Ignore: what to do with unknown or duplicate fields."},
                {"name": "force", "in": "query", "schema": {"type": "boolean"}}
            ]);
            let operation = |verb: &str| {
                json!({"operationId": format!("{verb}{}", r.kind),
                       "x-kubernetes-action": verb,
                       "x-kubernetes-group-version-kind": gvk,
                       "parameters": parameters, "requestBody": body,
                       "responses": {"200": body}})
            };
            paths.insert(
                format!("{collection}/{{name}}"),
                json!({"get": operation("get"), "put": operation("put"),
                       "patch": operation("patch"), "delete": operation("delete")}),
            );
            paths.insert(
                collection,
                json!({"post": operation("post"), "get": operation("list")}),
            );
            let mut schema = r.schema.clone().unwrap_or_else(|| {
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                       "description": format!(
                           "{}: the sandbox describes only the metadata of built-in kinds; \
                            their full schema is at {BUILTIN_REFERENCE}.", r.kind)})
            });
            add_type_meta_properties(&mut schema);
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            schemas.insert(schema_name, schema);
        }
        if !schemas.is_empty() {
            schemas.insert(OBJECT_META.into(), object_meta_schema());
            schemas.insert(OWNER_REFERENCE.into(), owner_reference_schema());
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (sandbox)", "version": GIT_VERSION},
            "paths": paths,
            "components": {"schemas": schemas}
        }))
    }
}

/// Where a learner finds the fields of built-in kinds the sandbox does not describe.
const BUILTIN_REFERENCE: &str = "https://kubernetes.io/docs/reference/kubernetes-api/";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const OWNER_REFERENCE: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference";

/// kube-apiserver publishes every kind with `apiVersion`, `kind` and `metadata` (an
/// `ObjectMeta` reference), even when a CRD's schema leaves them out; `kubectl explain pgc`
/// lists them and `kubectl explain pgc.metadata` follows the reference.
fn add_type_meta_properties(schema: &mut Value) {
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    let properties = &mut schema["properties"];
    properties["apiVersion"] = json!({"type": "string", "description":
        "APIVersion defines the versioned schema of this representation of an object. Servers \
         should convert recognized schemas to the latest internal value, and may reject \
         unrecognized values. More info: \
         https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"});
    properties["kind"] = json!({"type": "string", "description":
        "Kind is a string value representing the REST resource this object represents. Servers \
         may infer this from the endpoint the client submits requests to. Cannot be updated. In \
         CamelCase. More info: \
         https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"});
    properties["metadata"] = json!({
        "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
        "default": {},
        "description": "Standard object's metadata. More info: \
            https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"});
}

/// The `ObjectMeta` fields the sandbox keeps, described as kube-apiserver describes them
/// (shortened).
fn object_meta_schema() -> Value {
    let text = |description: &str| json!({"type": "string", "description": description});
    let map = |description: &str| {
        json!({"type": "object", "additionalProperties": {"type": "string", "default": ""},
               "description": description})
    };
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which \
            includes all objects users must create.",
        "properties": {
            "annotations": map("Annotations is an unstructured key value map stored with a \
                resource that may be set by external tools to store and retrieve arbitrary \
                metadata. They are not queryable and should be preserved when modifying objects."),
            "creationTimestamp": {"type": "string", "format": "date-time", "description":
                "CreationTimestamp is a timestamp representing the server time when this object \
                 was created. Populated by the system. Read-only."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description":
                "Number of seconds allowed for this object to gracefully terminate before it \
                 will be removed from the system. Only set when deletionTimestamp is also set."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description":
                "DeletionTimestamp is RFC 3339 date and time at which this resource will be \
                 deleted. Set by the server when a graceful deletion is requested by the user; \
                 the object stays while finalizers remain. Read-only."},
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""},
                "x-kubernetes-list-type": "set", "description":
                "Must be empty before the object is deleted from the registry. Each entry is an \
                 identifier for the responsible component that will remove the entry from the \
                 list."},
            "generateName": text("GenerateName is an optional prefix, used by the server, to \
                generate a unique name ONLY IF the Name field has not been provided."),
            "generation": {"type": "integer", "format": "int64", "description":
                "A sequence number representing a specific generation of the desired state. \
                 Populated by the system. Read-only."},
            "labels": map("Map of string keys and values that can be used to organize and \
                categorize (scope and select) objects."),
            "name": text("Name must be unique within a namespace. Is required when creating \
                resources, although some resources may allow a client to request the generation \
                of an appropriate name automatically. Cannot be updated."),
            "namespace": text("Namespace defines the space within which each name must be \
                unique. Cannot be updated."),
            "ownerReferences": {"type": "array",
                "items": {"allOf": [{"$ref": format!("#/components/schemas/{OWNER_REFERENCE}")}],
                          "default": {}},
                "x-kubernetes-patch-merge-key": "uid",
                "x-kubernetes-patch-strategy": "merge",
                "description": "List of objects depended by this object. If ALL objects in the \
                    list have been deleted, this object will be garbage collected."},
            "resourceVersion": text("An opaque value that represents the internal version of \
                this object that can be used by clients to determine when objects have changed. \
                Populated by the system. Read-only."),
            "uid": text("UID is the unique in time and space value for this object. Populated \
                by the system. Read-only."),
        }
    })
}

fn owner_reference_schema() -> Value {
    let text =
        |description: &str| json!({"type": "string", "default": "", "description": description});
    json!({
        "type": "object",
        "description": "OwnerReference contains enough information to let you identify an \
            owning object. An owning object must be in the same namespace as the dependent, or \
            be cluster-scoped, so there is no namespace field.",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            "apiVersion": text("API version of the referent."),
            "blockOwnerDeletion": {"type": "boolean", "description":
                "If true, AND if the owner has the \"foregroundDeletion\" finalizer, then the \
                 owner cannot be deleted from the key-value store until this reference is \
                 removed."},
            "controller": {"type": "boolean", "description":
                "If true, this reference points to the managing controller."},
            "kind": text("Kind of the referent."),
            "name": text("Name of the referent."),
            "uid": text("UID of the referent."),
        }
    })
}

fn aggregated_resource(r: &ResourceType) -> Value {
    let subresources: Vec<Value> = r
        .subresources()
        .into_iter()
        .map(|(sub, kind_group, kind_version, kind, verbs)| {
            let (g, v) = if kind_group.is_empty() {
                (r.group.as_str(), r.version.as_str())
            } else {
                (kind_group, kind_version)
            };
            json!({"subresource": sub, "responseKind": {"group": g, "version": v, "kind": kind},
                   "verbs": verbs})
        })
        .collect();
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs(),
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}

/// One ResourceType per served version of a CRD.
fn resources_from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let names = &spec["names"];
    let kind = text(&names["kind"]);
    let singular = match names["singular"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => kind.to_lowercase(),
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = strings(&names["shortNames"]);
    let categories = strings(&names["categories"]);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(true))
        .map(|v| {
            let subresources = &v["subresources"];
            let scale = subresources.get("scale").map(|scale| ScalePaths {
                spec_replicas: text(&scale["specReplicasPath"]),
                status_replicas: scale["statusReplicasPath"].as_str().map(String::from),
                label_selector: scale["labelSelectorPath"].as_str().map(String::from),
            });
            let printer_columns = v["additionalPrinterColumns"]
                .as_array()
                .map(|columns| {
                    columns
                        .iter()
                        .map(|c| PrinterColumn {
                            name: text(&c["name"]),
                            column_type: text(&c["type"]),
                            format: text(&c["format"]),
                            description: text(&c["description"]),
                            priority: c["priority"].as_i64().unwrap_or(0),
                            json_path: text(&c["jsonPath"]),
                        })
                        .collect()
                })
                .unwrap_or_default();
            ResourceType {
                group: text(&spec["group"]),
                version: text(&v["name"]),
                plural: text(&names["plural"]),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: short_names.clone(),
                categories: categories.clone(),
                status_subresource: subresources.get("status").is_some(),
                scale,
                schema: v["schema"].get("openAPIV3Schema").cloned(),
                printer_columns,
                custom: true,
            }
        })
        .collect()
}
