//! `kubectl get` tables: the server, not kubectl, decides the columns and formats the cells.
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl asks for
//! `application/json;as=Table;v=v1;g=meta.k8s.io` and prints the cells exactly as sent, headers in
//! upper case. For a custom resource the columns are Name, then the CRD's
//! `additionalPrinterColumns` (or Age if it lists none), as kube-apiserver's table convertor does.

use serde_json::{json, Value};

use std::time::SystemTime;

use crate::objects::read_path;
use crate::resources::ResourceType;
use crate::timefmt;

/// What `row.object` carries: `?includeObject=None|Metadata|Object` (default Metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    Metadata,
    Object,
}

impl IncludeObject {
    pub(crate) fn from_query(value: Option<&str>) -> IncludeObject {
        match value {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        }
    }
}

/// Did the client's Accept header ask for a Table?
pub(crate) fn wants_table(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| {
        let params: Vec<&str> = first.split(';').map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
    })
}

/// Computes one cell from the object and the current time (for ages).
type CellFn = Box<dyn Fn(&Value, SystemTime) -> Value>;

struct Column {
    definition: Value,
    cell: CellFn,
}

fn age_of(object: &Value, now: SystemTime) -> Value {
    let created = object["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap_or_default();
    json!(timefmt::format_age_of_timestamp(created, now))
}

fn name_column() -> Column {
    Column {
        definition: json!({"name": "Name", "type": "string", "format": "name",
                           "description": "Name must be unique within a namespace.", "priority": 0}),
        cell: Box::new(|o, _| o["metadata"]["name"].clone()),
    }
}

fn age_column() -> Column {
    Column {
        definition: json!({"name": "Age", "type": "date", "format": "",
                           "description": "CreationTimestamp is the time the object was created.",
                           "priority": 0}),
        cell: Box::new(age_of),
    }
}

fn text_column(name: &str, priority: i64, cell: fn(&Value) -> Value) -> Column {
    Column {
        definition: json!({"name": name, "type": "string", "format": "", "description": "",
                           "priority": priority}),
        cell: Box::new(move |o, _| cell(o)),
    }
}

fn columns_for(resource: &ResourceType) -> Vec<Column> {
    let mut columns = vec![name_column()];
    if resource.custom {
        if resource.printer_columns.is_empty() {
            columns.push(age_column());
        }
        for printer in &resource.printer_columns {
            let path = printer.json_path.clone();
            let is_date = printer.column_type == "date";
            columns.push(Column {
                definition: json!({"name": printer.name, "type": printer.column_type,
                    "format": printer.format, "description": printer.description,
                    "priority": printer.priority}),
                cell: Box::new(move |o, now| {
                    let value = read_path(o, &path).cloned().unwrap_or(Value::Null);
                    match (is_date, value.as_str()) {
                        // A `date` column prints as an age, as kube-apiserver's convertor does.
                        (true, Some(time)) => json!(timefmt::format_age_of_timestamp(time, now)),
                        _ => value,
                    }
                }),
            });
        }
        return columns;
    }
    match (resource.group.as_str(), resource.plural.as_str()) {
        ("", "pods") => {
            columns.push(text_column("Ready", 0, |o| {
                let total = o["spec"]["containers"].as_array().map_or(0, Vec::len);
                let ready = o["status"]["containerStatuses"].as_array().map_or(0, |s| {
                    s.iter()
                        .filter(|c| c["ready"].as_bool() == Some(true))
                        .count()
                });
                json!(format!("{ready}/{total}"))
            }));
            columns.push(text_column("Status", 0, |o| {
                json!(crate::builtins::pod_status_reason(o))
            }));
            columns.push(Column {
                definition: json!({"name": "Restarts", "type": "string", "format": "",
                                   "description": "", "priority": 0}),
                cell: Box::new(|o, _| {
                    let restarts: i64 =
                        o["status"]["containerStatuses"].as_array().map_or(0, |s| {
                            s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
                        });
                    json!(restarts.to_string())
                }),
            });
            columns.push(age_column());
            columns.push(text_column("IP", 1, |o| {
                o["status"]["podIP"]
                    .as_str()
                    .map_or(json!("<none>"), |ip| json!(ip))
            }));
            columns.push(text_column("Node", 1, |o| o["spec"]["nodeName"].clone()));
            columns.push(text_column("Nominated Node", 1, |o| {
                or_none(
                    o["status"]["nominatedNodeName"]
                        .as_str()
                        .unwrap_or_default(),
                )
            }));
            columns.push(text_column("Readiness Gates", 1, readiness_gates));
        }
        ("", "nodes") => {
            columns.push(text_column("Status", 0, |o| {
                let ready = o["status"]["conditions"].as_array().is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                });
                json!(if ready { "Ready" } else { "NotReady" })
            }));
            columns.push(text_column("Roles", 0, |_| json!("<none>")));
            columns.push(age_column());
            columns.push(text_column("Version", 0, |o| {
                o["status"]["nodeInfo"]["kubeletVersion"].clone()
            }));
        }
        ("", "namespaces") => {
            columns.push(text_column("Status", 0, |o| o["status"]["phase"].clone()));
            columns.push(age_column());
        }
        ("", "services") => {
            columns.push(text_column("Type", 0, |o| o["spec"]["type"].clone()));
            columns.push(text_column("Cluster-IP", 0, |o| {
                or_none(o["spec"]["clusterIP"].as_str().unwrap_or_default())
            }));
            columns.push(text_column("External-IP", 0, external_ips));
            columns.push(text_column("Port(s)", 0, service_ports));
            columns.push(age_column());
            columns.push(text_column("Selector", 1, |o| {
                or_none(&key_values(&o["spec"]["selector"]))
            }));
        }
        ("discovery.k8s.io", "endpointslices") => {
            columns.push(text_column("AddressType", 0, |o| o["addressType"].clone()));
            columns.push(text_column("Ports", 0, |o| {
                let ports = o["ports"].as_array().map(|p| {
                    p.iter()
                        .map(|port| match port["port"].as_u64() {
                            Some(number) => number.to_string(),
                            None => port["name"].as_str().unwrap_or("*").to_string(),
                        })
                        .collect::<Vec<_>>()
                });
                json!(first_three(ports.unwrap_or_default()))
            }));
            columns.push(text_column("Endpoints", 0, |o| {
                let addresses = o["endpoints"].as_array().map(|e| {
                    e.iter()
                        .flat_map(|endpoint| endpoint["addresses"].as_array().into_iter().flatten())
                        .map(|a| a.as_str().unwrap_or_default().to_string())
                        .collect::<Vec<_>>()
                });
                json!(first_three(addresses.unwrap_or_default()))
            }));
            columns.push(age_column());
        }
        ("", "configmaps") => {
            columns.push(count_column("Data", |o| {
                o["data"].as_object().map_or(0, |d| d.len())
                    + o["binaryData"].as_object().map_or(0, |d| d.len())
            }));
            columns.push(age_column());
        }
        ("", "serviceaccounts") => {
            columns.push(count_column("Secrets", |o| {
                o["secrets"].as_array().map_or(0, Vec::len)
            }));
            columns.push(age_column());
        }
        ("apps", "deployments") => {
            // Deployments are stored, not run: nothing updates their status, so a new one
            // reads 0/1 here, as a real one does while its pods are not ready.
            columns.push(text_column("Ready", 0, |o| {
                let wanted = o["spec"]["replicas"].as_i64().unwrap_or(1);
                let ready = o["status"]["readyReplicas"].as_i64().unwrap_or(0);
                json!(format!("{ready}/{wanted}"))
            }));
            columns.push(count_column("Up-to-date", |o| {
                o["status"]["updatedReplicas"].as_u64().unwrap_or(0) as usize
            }));
            columns.push(count_column("Available", |o| {
                o["status"]["availableReplicas"].as_u64().unwrap_or(0) as usize
            }));
            columns.push(age_column());
            columns.push(text_column("Containers", 1, |o| container_field(o, "name")));
            columns.push(text_column("Images", 1, |o| container_field(o, "image")));
            columns.push(text_column("Selector", 1, |o| {
                or_none(&key_values(&o["spec"]["selector"]["matchLabels"]))
            }));
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            columns.push(text_column("Role", 0, |o| {
                json!(format!(
                    "{}/{}",
                    o["roleRef"]["kind"].as_str().unwrap_or_default(),
                    o["roleRef"]["name"].as_str().unwrap_or_default()
                ))
            }));
            columns.push(age_column());
            for (column, kind) in [
                ("Users", "User"),
                ("Groups", "Group"),
                ("ServiceAccounts", "ServiceAccount"),
            ] {
                columns.push(Column {
                    definition: json!({"name": column, "type": "string", "format": "",
                                       "description": "", "priority": 1}),
                    cell: Box::new(move |o, _| subjects_of_kind(o, kind)),
                });
            }
        }
        ("rbac.authorization.k8s.io", "roles" | "clusterroles") => {
            columns.push(text_column("Created At", 0, |o| {
                o["metadata"]["creationTimestamp"].clone()
            }));
        }
        ("", "secrets") => {
            columns.push(text_column("Type", 0, |o| o["type"].clone()));
            columns.push(Column {
                definition: json!({"name": "Data", "type": "integer", "format": "",
                                   "description": "", "priority": 0}),
                cell: Box::new(|o, _| json!(o["data"].as_object().map_or(0, |d| d.len()))),
            });
            columns.push(age_column());
        }
        ("", "events") => {
            // kubectl's event columns: Last Seen, Type, Reason, Object, Message; Name is wide-only.
            let mut name = columns.remove(0);
            name.definition["priority"] = json!(1);
            columns.push(Column {
                definition: json!({"name": "Last Seen", "type": "string", "format": "",
                                   "description": "", "priority": 0}),
                cell: Box::new(|o, now| {
                    let seen = ["lastTimestamp", "eventTime", "firstTimestamp"]
                        .iter()
                        .find_map(|f| o[*f].as_str())
                        .or(o["metadata"]["creationTimestamp"].as_str())
                        .unwrap_or_default();
                    json!(timefmt::format_age_of_timestamp(seen, now))
                }),
            });
            columns.push(text_column("Type", 0, |o| o["type"].clone()));
            columns.push(text_column("Reason", 0, |o| o["reason"].clone()));
            columns.push(text_column("Object", 0, |o| {
                let involved = &o["involvedObject"];
                json!(format!(
                    "{}/{}",
                    involved["kind"].as_str().unwrap_or_default().to_lowercase(),
                    involved["name"].as_str().unwrap_or_default()
                ))
            }));
            columns.push(text_column("Message", 0, |o| o["message"].clone()));
            columns.push(name);
        }
        // kubectl 1.32's columns (pkg/printers/internalversion): the capacity and access modes
        // of a claim are its volume's, shown once it is bound.
        ("", "persistentvolumeclaims") => {
            columns.push(text_column("Status", 0, storage_phase));
            columns.push(text_column("Volume", 0, |o| {
                o["spec"]["volumeName"].clone()
            }));
            columns.push(text_column("Capacity", 0, |o| {
                if o["spec"]["volumeName"]
                    .as_str()
                    .is_some_and(|v| !v.is_empty())
                {
                    o["status"]["capacity"]["storage"].clone()
                } else {
                    json!("")
                }
            }));
            columns.push(text_column("Access Modes", 0, |o| {
                if o["spec"]["volumeName"]
                    .as_str()
                    .is_some_and(|v| !v.is_empty())
                {
                    access_modes(&o["status"]["accessModes"])
                } else {
                    json!("")
                }
            }));
            columns.push(text_column("StorageClass", 0, |o| {
                o["spec"]["storageClassName"].clone()
            }));
            columns.push(text_column("VolumeAttributesClass", 0, |_| {
                json!("<unset>")
            }));
            columns.push(age_column());
            columns.push(text_column("VolumeMode", 1, volume_mode));
        }
        ("", "persistentvolumes") => {
            columns.push(text_column("Capacity", 0, |o| {
                o["spec"]["capacity"]["storage"].clone()
            }));
            columns.push(text_column("Access Modes", 0, |o| {
                access_modes(&o["spec"]["accessModes"])
            }));
            columns.push(text_column("Reclaim Policy", 0, |o| {
                o["spec"]["persistentVolumeReclaimPolicy"].clone()
            }));
            columns.push(text_column("Status", 0, storage_phase));
            columns.push(text_column("Claim", 0, |o| {
                let claim = &o["spec"]["claimRef"];
                if claim.is_object() {
                    json!(format!(
                        "{}/{}",
                        claim["namespace"].as_str().unwrap_or_default(),
                        claim["name"].as_str().unwrap_or_default()
                    ))
                } else {
                    json!("")
                }
            }));
            columns.push(text_column("StorageClass", 0, |o| {
                o["spec"]["storageClassName"].clone()
            }));
            columns.push(text_column("VolumeAttributesClass", 0, |_| {
                json!("<unset>")
            }));
            columns.push(text_column("Reason", 0, |o| o["status"]["reason"].clone()));
            columns.push(age_column());
            columns.push(text_column("VolumeMode", 1, volume_mode));
        }
        ("storage.k8s.io", "storageclasses") => {
            columns[0].cell = Box::new(|o, _| {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                let default = o["metadata"]["annotations"]
                    ["storageclass.kubernetes.io/is-default-class"]
                    == "true";
                json!(if default {
                    format!("{name} (default)")
                } else {
                    name.to_string()
                })
            });
            columns.push(text_column("Provisioner", 0, |o| o["provisioner"].clone()));
            columns.push(text_column("ReclaimPolicy", 0, |o| {
                json!(o["reclaimPolicy"].as_str().unwrap_or("Delete"))
            }));
            columns.push(text_column("VolumeBindingMode", 0, |o| {
                json!(o["volumeBindingMode"].as_str().unwrap_or("Immediate"))
            }));
            columns.push(Column {
                definition: json!({"name": "AllowVolumeExpansion", "type": "boolean",
                                   "format": "", "description": "", "priority": 0}),
                cell: Box::new(|o, _| json!(o["allowVolumeExpansion"].as_bool() == Some(true))),
            });
            columns.push(age_column());
        }
        ("coordination.k8s.io", "leases") => {
            columns.push(text_column("Holder", 0, |o| {
                o["spec"]["holderIdentity"].clone()
            }));
            columns.push(age_column());
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            columns.push(text_column("Created At", 0, |o| {
                o["metadata"]["creationTimestamp"].clone()
            }));
        }
        _ => columns.push(age_column()),
    }
    columns
}

/// A claim's or volume's phase; `Terminating` once it is being deleted.
fn storage_phase(object: &Value) -> Value {
    if object["metadata"]["deletionTimestamp"].is_null() {
        object["status"]["phase"].clone()
    } else {
        json!("Terminating")
    }
}

fn volume_mode(object: &Value) -> Value {
    json!(object["spec"]["volumeMode"].as_str().unwrap_or("<unset>"))
}

/// `RWO,RWX`: kubectl's abbreviations, always in this order.
fn access_modes(modes: &Value) -> Value {
    let modes = modes.as_array().cloned().unwrap_or_default();
    let short: Vec<&str> = [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .into_iter()
    .filter(|(mode, _)| modes.iter().any(|m| m == mode))
    .map(|(_, short)| short)
    .collect();
    json!(short.join(","))
}

fn count_column(name: &str, count: fn(&Value) -> usize) -> Column {
    Column {
        definition: json!({"name": name, "type": "integer", "format": "", "description": "",
                           "priority": 0}),
        cell: Box::new(move |o, _| json!(count(o))),
    }
}

/// kubectl's printers write `<none>` where there is nothing to show.
/// kubectl's "a,b,c + 2 more..." for EndpointSlice ports and addresses; `<unset>` for none.
fn first_three(items: Vec<String>) -> String {
    match items.len() {
        0 => "<unset>".to_string(),
        1..=3 => items.join(","),
        n => format!("{} + {} more...", items[..3].join(","), n - 3),
    }
}

fn or_none(text: &str) -> Value {
    if text.is_empty() {
        json!("<none>")
    } else {
        json!(text)
    }
}

/// `{"app":"web","tier":"db"}` as `app=web,tier=db`.
fn key_values(map: &Value) -> String {
    map.as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// `ready/total` of a pod's readiness gates, `<none>` without any.
fn readiness_gates(pod: &Value) -> Value {
    let Some(gates) = pod["spec"]["readinessGates"]
        .as_array()
        .filter(|g| !g.is_empty())
    else {
        return json!("<none>");
    };
    let conditions = pod["status"]["conditions"].as_array();
    let ready = gates
        .iter()
        .filter(|gate| {
            conditions.is_some_and(|all| {
                all.iter()
                    .any(|c| c["type"] == gate["conditionType"] && c["status"] == "True")
            })
        })
        .count();
    json!(format!("{ready}/{}", gates.len()))
}

fn external_ips(service: &Value) -> Value {
    let spec = &service["spec"];
    let listed = |values: Option<&Vec<Value>>| -> Vec<String> {
        values
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(String::from))
            .collect()
    };
    let mut ips = listed(spec["externalIPs"].as_array());
    match spec["type"].as_str() {
        Some("ExternalName") => return or_none(spec["externalName"].as_str().unwrap_or("")),
        Some("LoadBalancer") => {
            let ingress = service["status"]["loadBalancer"]["ingress"].as_array();
            ips.extend(
                ingress
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                    .map(String::from),
            );
            // No cloud provider here: a LoadBalancer never gets an address.
            if ips.is_empty() {
                return json!("<pending>");
            }
        }
        _ => {}
    }
    or_none(&ips.join(","))
}

/// `5432/TCP`, or `80:30080/TCP` with a node port; several joined by commas.
fn service_ports(service: &Value) -> Value {
    let ports: Vec<String> = service["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let protocol = p["protocol"].as_str().unwrap_or("TCP");
            match p["nodePort"].as_i64() {
                Some(node_port) => format!("{}:{node_port}/{protocol}", p["port"]),
                None => format!("{}/{protocol}", p["port"]),
            }
        })
        .collect();
    or_none(&ports.join(","))
}

/// One field of every container of a deployment's pod template, joined by commas.
fn container_field(deployment: &Value, field: &str) -> Value {
    let values: Vec<&str> = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c[field].as_str())
        .collect();
    or_none(&values.join(","))
}

/// The binding's subjects of one kind (`ServiceAccount`s print as `namespace/name`).
fn subjects_of_kind(binding: &Value, kind: &str) -> Value {
    let names: Vec<String> = binding["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .map(|s| {
            let name = s["name"].as_str().unwrap_or_default();
            match s["namespace"].as_str() {
                Some(ns) if kind == "ServiceAccount" => format!("{ns}/{name}"),
                _ => name.to_string(),
            }
        })
        .collect();
    json!(names.join(", "))
}

fn row_object(object: &Value, include: IncludeObject) -> Option<Value> {
    match include {
        IncludeObject::None => None,
        IncludeObject::Object => Some(object.clone()),
        IncludeObject::Metadata => Some(json!({
            "kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": object["metadata"]
        })),
    }
}

/// A Table of `objects` (one row each), stamped with `resource_version`.
pub(crate) fn table(
    resource: &ResourceType,
    objects: &[&Value],
    resource_version: &str,
    include: IncludeObject,
    with_column_definitions: bool,
) -> Value {
    let now = SystemTime::now();
    let columns = columns_for(resource);
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let cells: Vec<Value> = columns.iter().map(|c| (c.cell)(object, now)).collect();
            let mut row = json!({ "cells": cells });
            if let Some(inner) = row_object(object, include) {
                row["object"] = inner;
            }
            row
        })
        .collect();
    let definitions: Vec<Value> = if with_column_definitions {
        columns.into_iter().map(|c| c.definition).collect()
    } else {
        Vec::new()
    };
    json!({
        "kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_slice_cells_show_three_items_then_how_many_more() {
        let items = |n: usize| (1..=n).map(|i| i.to_string()).collect::<Vec<_>>();
        assert_eq!(first_three(items(0)), "<unset>");
        assert_eq!(first_three(items(3)), "1,2,3");
        assert_eq!(first_three(items(5)), "1,2,3 + 2 more...");
    }

    /// Only kubectl's Table media range (first in its Accept) turns a response into a Table.
    #[test]
    fn table_is_chosen_by_the_first_accepted_media_range() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table("application/json, */*"));
    }
}
