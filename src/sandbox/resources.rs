//! What the sandbox serves: the built-in kinds, the kinds learnt from CustomResourceDefinitions,
//! and the documents that describe them (discovery, aggregated discovery, OpenAPI v3).
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl reads discovery before every command to turn
//! `pgc` into `/apis/workshop.example.com/v1/namespaces/default/postgresclusters`, and reads the
//! OpenAPI v3 document to learn that the server checks fields itself (`fieldValidation`).

use serde_json::{json, Value};

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
        let mut services = ResourceType::builtin("", "services", "Service", true, &["svc"]);
        services.status_subresource = true;
        let mut crds = ResourceType::builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
        );
        crds.status_subresource = true;
        Registry {
            resources: vec![
                namespaces,
                pods,
                services,
                ResourceType::builtin("", "secrets", "Secret", true, &[]),
                ResourceType::builtin("", "events", "Event", true, &["ev"]),
                crds,
                ResourceType::builtin("coordination.k8s.io", "leases", "Lease", true, &[]),
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

    /// `GET /apis` (legacy): every group and its versions.
    pub(crate) fn group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(name, versions)| Registry::group_json(name, versions))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `GET /apis/GROUP` (legacy).
    pub(crate) fn group(&self, group: &str) -> Option<Value> {
        let (name, versions) = self.groups().into_iter().find(|(g, _)| g == group)?;
        let mut doc = Registry::group_json(&name, &versions);
        doc["kind"] = json!("APIGroup");
        doc["apiVersion"] = json!("v1");
        Some(doc)
    }

    /// `GET /api/v1` or `/apis/GROUP/VERSION` (legacy): resources and subresources of one version.
    pub(crate) fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
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
        let items: Vec<Value> = groups
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
    /// validate fields; without it, kubectl wants the protobuf-only /openapi/v2 and gives up.
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
            let mut schema = r.schema.clone().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            schema["x-kubernetes-group-version-kind"] = json!([gvk]);
            schemas.insert(schema_name, schema);
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes (sandbox)", "version": super::server::GIT_VERSION},
            "paths": paths,
            "components": {"schemas": schemas}
        }))
    }
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
    let short_names: Vec<String> = names["shortNames"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
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
                status_subresource: subresources.get("status").is_some(),
                scale,
                schema: v["schema"].get("openAPIV3Schema").cloned(),
                printer_columns,
                custom: true,
            }
        })
        .collect()
}
