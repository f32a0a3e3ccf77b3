//! `kubectl get` tables: the server, not kubectl, decides the columns and formats the cells.
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl asks for
//! `application/json;as=Table;v=v1;g=meta.k8s.io` and prints the cells exactly as sent, headers in
//! upper case. For a custom resource the columns are Name, then the CRD's
//! `additionalPrinterColumns` (or Age if it lists none), as kube-apiserver's table convertor does.

use serde_json::{json, Value};

use std::time::SystemTime;

use super::objects::read_path;
use super::resources::ResourceType;
use super::timefmt;

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
                if !o["metadata"]["deletionTimestamp"].is_null() {
                    json!("Terminating")
                } else {
                    o["status"]["phase"].clone()
                }
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
        }
        ("", "namespaces") => {
            columns.push(text_column("Status", 0, |o| o["status"]["phase"].clone()));
            columns.push(age_column());
        }
        ("", "services") => {
            columns.push(text_column("Type", 0, |o| o["spec"]["type"].clone()));
            columns.push(text_column("Cluster-IP", 0, |o| {
                o["spec"]["clusterIP"].clone()
            }));
            columns.push(age_column());
        }
        _ => columns.push(age_column()),
    }
    columns
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
