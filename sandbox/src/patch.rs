//! The three PATCH flavours kubectl sends, applied to JSON values in memory:
//!
//! - `application/merge-patch+json` → [`merge_patch`] (RFC 7386): `kubectl patch --type=merge`,
//!   `kubectl scale`, and `kubectl apply` for custom resources.
//! - `application/json-patch+json` → [`json_patch`] (RFC 6902): `kubectl patch --type=json`.
//! - `application/strategic-merge-patch+json` → [`strategic_merge_patch`]: the default for
//!   built-in kinds such as Pods. Lists of containers merge by name instead of being replaced.
//!   Custom resources never get this one: the API server answers 415, and so should the sandbox.
//!
//! Part of WORKSHOP.md "Set-up: the sandbox". All three are pure functions over
//! `serde_json::Value`, so every rule is unit-tested here without a server.
//!
//! A patch can build what no request body could carry: a JSON Patch `copy` of a value into its
//! own child nests one level deeper each time, and repeated copies double the object. So the
//! bounds every stored object keeps ([`MAX_DEPTH`], [`MAX_OBJECT_BYTES`], measured by
//! [`measure`] without recursion) live here too, with kube-apiserver's limits on JSON Patch
//! itself ([`MAX_JSON_PATCH_OPERATIONS`], [`MAX_JSON_PATCH_COPY_BYTES`]).

use std::fmt;

use serde_json::{Map, Value};

/// A patch could not be applied. The target is left unchanged in every case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchError {
    /// A JSON Patch body must be an array of operations.
    JsonPatchNotAList,
    /// Operation `index` (0-based, its position in the array) failed.
    JsonPatchOperation {
        index: usize,
        op: String,
        path: String,
        problem: String,
    },
    /// A strategic merge patch was malformed at `field` (a dotted path; "" for the top).
    StrategicMerge { field: String, problem: String },
    /// More operations than kube-apiserver accepts in one JSON Patch (413 there).
    TooManyOperations { count: usize },
    /// The `copy` operations together copied more than kube-apiserver's limit (413 there).
    CopiedTooMuch { index: usize, copied: usize },
    /// Operation `index` would nest the object deeper than [`MAX_DEPTH`].
    TooDeep { index: usize, path: String },
}

impl PatchError {
    /// Whether kube-apiserver answers this one 413 Request Entity Too Large (the other
    /// failures are 422 for JSON Patch, 400 for strategic merge).
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            PatchError::TooManyOperations { .. } | PatchError::CopiedTooMuch { .. }
        )
    }
}

impl fmt::Display for PatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatchError::JsonPatchNotAList => {
                write!(f, "json patch: the body must be a JSON array of operations")
            }
            PatchError::JsonPatchOperation {
                index,
                op,
                path,
                problem,
            } => write!(f, "json patch op {index} ({op} {path}): {problem}"),
            PatchError::StrategicMerge { field, problem } if field.is_empty() => {
                write!(f, "strategic merge patch: {problem}")
            }
            PatchError::StrategicMerge { field, problem } => {
                write!(f, "strategic merge patch at {field}: {problem}")
            }
            // kube-apiserver's own wording for both limits.
            PatchError::TooManyOperations { count } => write!(
                f,
                "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {count}"
            ),
            PatchError::CopiedTooMuch { index, copied } => write!(
                f,
                "json patch op {index} (copy): Unable to copy, the accumulated size increase of copy is {copied}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}"
            ),
            PatchError::TooDeep { index, path } => write!(
                f,
                "json patch op {index} ({path}): the object would nest more than {MAX_DEPTH} levels deep"
            ),
        }
    }
}

impl std::error::Error for PatchError {}

// ---------------------------------------------------------------------------------------------
// Bounds on what a patch may build
// ---------------------------------------------------------------------------------------------

/// The deepest nesting of objects and arrays a stored object may have. serde_json refuses to
/// parse a body nested deeper than 128 levels (its recursion limit), so no request body can be
/// deeper; only a patch could build one, and every patch result is held to the same bound. It
/// also keeps every recursive walk (clone, compare, serialise, drop, schema validation) far
/// from the bottom of a 2 MiB tokio worker stack. (Go's encoding/json, which kube-apiserver
/// decodes with, stops at 10,000 levels; etcd stores opaque bytes and has no limit of its own.)
pub const MAX_DEPTH: usize = 128;

/// etcd refuses a request over 1.5 MiB (its `--max-request-bytes` default), so no stored
/// Kubernetes object is larger; the sandbox checks every object it is about to store.
pub const MAX_OBJECT_BYTES: usize = 1536 * 1024;

/// kube-apiserver's `maxJSONPatchOperations`: more operations get 413.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// kube-apiserver's `JSONPatchMaxCopyBytes` (3 MiB, twice etcd's limit): the total size the
/// `copy` operations of one JSON Patch may add; more gets 413.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// How deep a value nests (a scalar is 0, `[1]` is 1) and about how many bytes its JSON takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub depth: usize,
    pub bytes: usize,
}

/// A value nested deeper than the depth [`measure`] was asked to allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep;

/// Measures `value` with an explicit stack (no recursion, so any depth is safe to look at),
/// stopping as soon as it nests deeper than `max_depth`. Call it before anything recursive
/// (clone, `==`, serialisation, drop of a patched copy) touches a value a client built.
pub fn measure(value: &Value, max_depth: usize) -> Result<Shape, TooDeep> {
    let mut shape = Shape { depth: 0, bytes: 0 };
    let mut pending: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Null | Value::Bool(true) => shape.bytes += 4,
            Value::Bool(false) => shape.bytes += 5,
            Value::Number(number) => shape.bytes += number.to_string().len(),
            Value::String(text) => shape.bytes += text.len() + 2,
            Value::Array(items) => {
                if depth + 1 > max_depth {
                    return Err(TooDeep);
                }
                shape.depth = shape.depth.max(depth + 1);
                shape.bytes += 1 + items.len().max(1);
                pending.extend(items.iter().map(|item| (item, depth + 1)));
            }
            Value::Object(fields) => {
                if depth + 1 > max_depth {
                    return Err(TooDeep);
                }
                shape.depth = shape.depth.max(depth + 1);
                shape.bytes += 1 + fields.len().max(1);
                for (key, item) in fields {
                    shape.bytes += key.len() + 3;
                    pending.push((item, depth + 1));
                }
            }
        }
    }
    Ok(shape)
}

// ---------------------------------------------------------------------------------------------
// RFC 7386 JSON Merge Patch
// ---------------------------------------------------------------------------------------------

/// Applies an RFC 7386 merge patch: objects merge key by key, `null` deletes a key, and anything
/// that is not an object (including arrays) replaces the target outright.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch_fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(target_fields) = target {
        for (key, patch_value) in patch_fields {
            if patch_value.is_null() {
                target_fields.remove(key);
            } else {
                merge_patch(
                    target_fields.entry(key.clone()).or_insert(Value::Null),
                    patch_value,
                );
            }
        }
    }
}

/// JSON equality in the RFC 6902 sense: numbers compare by value, so `1` equals `1.0`.
pub fn json_equal(left: &Value, right: &Value) -> bool {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => {
            a == b || matches!((a.as_f64(), b.as_f64()), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, x)| b.get(key).is_some_and(|y| json_equal(x, y)))
        }
        _ => left == right,
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 6902 JSON Patch
// ---------------------------------------------------------------------------------------------

/// Applies an RFC 6902 JSON Patch (`add`, `remove`, `replace`, `move`, `copy`, `test`).
///
/// Atomic: the operations run on a copy, and `target` changes only if all of them succeed.
pub fn json_patch(target: &mut Value, operations: &Value) -> Result<(), PatchError> {
    let Value::Array(operations) = operations else {
        return Err(PatchError::JsonPatchNotAList);
    };
    if operations.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooManyOperations {
            count: operations.len(),
        });
    }
    let mut working = target.clone();
    let mut copied = 0;
    for (index, operation) in operations.iter().enumerate() {
        let op = operation
            .get("op")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let path = operation
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let grown = apply_operation(&mut working, operation).map_err(|problem| {
            PatchError::JsonPatchOperation {
                index,
                op: if op.is_empty() { "?".into() } else { op },
                path: path.clone(),
                problem,
            }
        })?;
        // Checked after every operation, so no step ever holds a value deeper than the bound:
        // the clone, comparison and drop of the next step recurse no further than MAX_DEPTH.
        if let Some(growth) = grown {
            if growth.depth > MAX_DEPTH {
                return Err(PatchError::TooDeep { index, path });
            }
            if growth.copied_bytes > 0 {
                copied += growth.copied_bytes;
                if copied > MAX_JSON_PATCH_COPY_BYTES {
                    return Err(PatchError::CopiedTooMuch { index, copied });
                }
            }
        }
    }
    *target = working;
    Ok(())
}

/// What an `add`, `replace`, `move` or `copy` put into the document: how deep the new value
/// reaches from the root, and (for `copy`) how many bytes it duplicated.
struct Growth {
    depth: usize,
    copied_bytes: usize,
}

/// The depth the document reaches through a value inserted at `path`: the path's own levels
/// plus the value's, measured iteratively; past the bound it reports `MAX_DEPTH + 1`.
fn growth_at(path: &[String], value: &Value) -> Growth {
    let depth = match measure(value, MAX_DEPTH.saturating_sub(path.len())) {
        Ok(shape) => path.len() + shape.depth,
        Err(TooDeep) => MAX_DEPTH + 1,
    };
    Growth {
        depth,
        copied_bytes: 0,
    }
}

fn apply_operation(document: &mut Value, operation: &Value) -> Result<Option<Growth>, String> {
    if !operation.is_object() {
        return Err("an operation must be a JSON object".into());
    }
    let member = |name: &str| -> Result<&Value, String> {
        operation
            .get(name)
            .ok_or_else(|| format!("the operation has no \"{name}\" member"))
    };
    let string_member = |name: &str| -> Result<&str, String> {
        member(name)?
            .as_str()
            .ok_or_else(|| format!("\"{name}\" must be a string"))
    };
    let op = string_member("op")?;
    let path = parse_pointer(string_member("path")?)?;
    match op {
        "add" => {
            let value = member("value")?;
            let growth = growth_at(&path, value);
            add_at(document, &path, value.clone()).map(|()| Some(growth))
        }
        "remove" => remove_at(document, &path).map(|_| None),
        "replace" => {
            let value = member("value")?;
            let growth = growth_at(&path, value);
            let slot = pointer_mut(document, &path).ok_or("path not found")?;
            *slot = value.clone();
            Ok(Some(growth))
        }
        "move" => {
            let from = parse_pointer(string_member("from")?)?;
            if from == path {
                // Moving a value onto itself changes nothing, but the value must exist.
                return pointer(document, &from)
                    .map(|_| None)
                    .ok_or_else(|| "from: path not found".into());
            }
            if path.len() > from.len() && path[..from.len()] == from[..] {
                return Err("cannot move a value into one of its own children".into());
            }
            let source = pointer(document, &from).ok_or("from: path not found")?;
            let growth = growth_at(&path, source);
            let value = remove_at(document, &from).map_err(|p| format!("from: {p}"))?;
            add_at(document, &path, value).map(|()| Some(growth))
        }
        "copy" => {
            let from = parse_pointer(string_member("from")?)?;
            let source = pointer(document, &from).ok_or("from: path not found")?;
            // Measured before it is cloned: a copy into its own child nests one level deeper
            // each time, and copies of copies double the object.
            let mut growth = growth_at(&path, source);
            growth.copied_bytes = measure(source, MAX_DEPTH)
                .map(|shape| shape.bytes)
                .unwrap_or(usize::MAX);
            if growth.depth > MAX_DEPTH || growth.copied_bytes > MAX_JSON_PATCH_COPY_BYTES {
                return Ok(Some(growth)); // refused by the caller before anything is cloned
            }
            let value = source.clone();
            add_at(document, &path, value).map(|()| Some(growth))
        }
        "test" => {
            let expected = member("value")?;
            let actual = pointer(document, &path).ok_or("path not found")?;
            if json_equal(actual, expected) {
                Ok(None)
            } else {
                Err(format!(
                    "test failed: value is {actual}, expected {expected}"
                ))
            }
        }
        other => Err(format!(
            "unknown op \"{other}\" (expected add, remove, replace, move, copy or test)"
        )),
    }
}

/// Splits a JSON Pointer (RFC 6901) into unescaped tokens: `/a~1b/c~0d` → `["a/b", "c~d"]`.
pub fn parse_pointer(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(format!("JSON pointer \"{pointer}\" must start with '/'"));
    };
    rest.split('/')
        .map(|token| {
            let mut unescaped = String::with_capacity(token.len());
            let mut characters = token.chars();
            while let Some(character) = characters.next() {
                if character == '~' {
                    match characters.next() {
                        Some('0') => unescaped.push('~'),
                        Some('1') => unescaped.push('/'),
                        _ => {
                            return Err(format!(
                                "JSON pointer \"{pointer}\" has '~' not followed by 0 or 1"
                            ))
                        }
                    }
                } else {
                    unescaped.push(character);
                }
            }
            Ok(unescaped)
        })
        .collect()
}

/// An array index token: `0` or digits without a leading zero.
fn parse_index(token: &str, length: usize) -> Result<usize, String> {
    let well_formed = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if !well_formed {
        return Err(format!("\"{token}\" is not a valid array index"));
    }
    match token.parse::<usize>() {
        Ok(index) if index < length => Ok(index),
        _ => Err(format!(
            "index {token} is out of bounds (the array has {length} items)"
        )),
    }
}

fn pointer<'a>(document: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    tokens
        .iter()
        .try_fold(document, |current, token| match current {
            Value::Object(fields) => fields.get(token),
            Value::Array(items) => parse_index(token, items.len())
                .ok()
                .and_then(|i| items.get(i)),
            _ => None,
        })
}

fn pointer_mut<'a>(document: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    tokens
        .iter()
        .try_fold(document, |current, token| match current {
            Value::Object(fields) => fields.get_mut(token),
            Value::Array(items) => {
                let index = parse_index(token, items.len()).ok()?;
                items.get_mut(index)
            }
            _ => None,
        })
}

fn add_at(document: &mut Value, tokens: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        *document = value;
        return Ok(());
    };
    let parent = pointer_mut(document, parent_tokens).ok_or("path not found")?;
    match parent {
        Value::Object(fields) => {
            fields.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            // "-" appends; an index equal to the length also appends (RFC 6902 section 4.1).
            let index = if last == "-" {
                items.len()
            } else {
                parse_index(last, items.len() + 1)?
            };
            items.insert(index, value);
            Ok(())
        }
        _ => Err("path not found: the parent is neither an object nor an array".into()),
    }
}

fn remove_at(document: &mut Value, tokens: &[String]) -> Result<Value, String> {
    let Some((last, parent_tokens)) = tokens.split_last() else {
        return Err("cannot remove the whole document".into());
    };
    let parent = pointer_mut(document, parent_tokens).ok_or("path not found")?;
    match parent {
        Value::Object(fields) => fields.remove(last).ok_or_else(|| "path not found".into()),
        Value::Array(items) => {
            let index = parse_index(last, items.len())?;
            Ok(items.remove(index))
        }
        _ => Err("path not found".into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Strategic merge patch (built-in kinds only)
// ---------------------------------------------------------------------------------------------

/// The merge key for a list field of a built-in kind: list items with the same key value are
/// merged instead of the list being replaced. This stands in for the `patchMergeKey` struct tags
/// in k8s.io/api that the real API server reads; we key on the field name alone.
fn merge_key_for(field: &str, original: &[Value], patch: &[Value]) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates" => Some("name"),
        "podIPs" | "hostIPs" => Some("ip"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        "hostAliases" => Some("ip"),
        "topologySpreadConstraints" => Some("topologyKey"),
        // Container ports merge by containerPort; Service ports by port.
        "ports" => {
            let has_container_port = original
                .iter()
                .chain(patch)
                .any(|item| item.get("containerPort").is_some());
            Some(if has_container_port {
                "containerPort"
            } else {
                "port"
            })
        }
        _ => None,
    }
}

/// Lists of scalars that merge as sets rather than being replaced (`patchStrategy:"merge"`).
fn is_merged_primitive_list(field: &str) -> bool {
    matches!(field, "finalizers")
}

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList/";

fn is_directive_key(key: &str) -> bool {
    key == PATCH_DIRECTIVE
        || key == RETAIN_KEYS_DIRECTIVE
        || key.starts_with(SET_ELEMENT_ORDER_PREFIX)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
}

/// Applies a strategic merge patch, as kubectl sends for Pods and other built-in kinds.
///
/// Maps merge recursively and `null` deletes, like a merge patch. Lists of objects with a known
/// merge key (containers by `name`, ports by `containerPort`, conditions by `type`, …) merge item
/// by item; other lists are replaced. Directives: `$patch: replace | merge | delete` on a map or
/// a list item, `{"$patch": "replace"}` as a list element, `$retainKeys`,
/// `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>`. No directive key survives
/// into the result. Atomic: on error `target` is unchanged.
///
/// Ported from apimachinery's `strategicpatch.StrategicMergeMapPatch`, with three deliberate
/// differences: merge keys come from a table of field names (`merge_key_for`) instead of Go struct tags; `$patch: merge`
/// is accepted everywhere (upstream rejects it in places kubectl never sends it); and directive
/// keys inside brand-new content are applied rather than stored verbatim.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Value::Object(patch_fields) = patch else {
        return Err(PatchError::StrategicMerge {
            field: String::new(),
            problem: "the patch must be a JSON object".into(),
        });
    };
    let mut working = match target {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    match merge_map(&mut working, patch_fields, "")? {
        MapOutcome::Keep => {}
        MapOutcome::Delete => {
            return Err(PatchError::StrategicMerge {
                field: String::new(),
                problem: "\"$patch\": \"delete\" at the top level would delete the whole object; send DELETE instead".into(),
            })
        }
    }
    *target = Value::Object(working);
    Ok(())
}

enum MapOutcome {
    Keep,
    /// The patch said `$patch: delete` for this map.
    Delete,
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

fn smp_error(field: &str, problem: impl Into<String>) -> PatchError {
    PatchError::StrategicMerge {
        field: field.to_string(),
        problem: problem.into(),
    }
}

fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    path: &str,
) -> Result<MapOutcome, PatchError> {
    match patch.get(PATCH_DIRECTIVE) {
        None => {}
        Some(Value::String(directive)) => match directive.as_str() {
            "merge" => {}
            "delete" => return Ok(MapOutcome::Delete),
            "replace" => {
                *original = strip_directives_from_map(patch);
                return Ok(MapOutcome::Keep);
            }
            other => {
                return Err(smp_error(
                    path,
                    format!(
                    "unknown \"$patch\" directive \"{other}\" (expected replace, merge or delete)"
                ),
                ))
            }
        },
        Some(other) => {
            return Err(smp_error(
                path,
                format!("\"$patch\" must be a string, not {other}"),
            ))
        }
    }

    if let Some(retain) = patch.get(RETAIN_KEYS_DIRECTIVE) {
        apply_retain_keys(original, patch, retain, path)?;
    }

    let ordered_lists = merge_lists_with_element_order(original, patch, path)?;

    for (key, patch_value) in patch {
        if is_directive_key(key) || ordered_lists.contains(&key.as_str()) {
            continue;
        }
        let field = child_path(path, key);
        match patch_value {
            Value::Null => {
                original.remove(key);
            }
            Value::Object(patch_map) => match original.get_mut(key) {
                Some(Value::Object(original_map)) => {
                    if let MapOutcome::Delete = merge_map(original_map, patch_map, &field)? {
                        // Upstream empties the map rather than removing the field.
                        original_map.clear();
                    }
                }
                _ => {
                    let mut fresh = Map::new();
                    match merge_map(&mut fresh, patch_map, &field)? {
                        MapOutcome::Keep => {
                            original.insert(key.clone(), Value::Object(fresh));
                        }
                        MapOutcome::Delete => {}
                    }
                }
            },
            Value::Array(patch_items) => {
                let mut items = match original.remove(key) {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                };
                merge_list(key, &mut items, patch_items, &field)?;
                original.insert(key.clone(), Value::Array(items));
            }
            scalar => {
                original.insert(key.clone(), scalar.clone());
            }
        }
    }

    for (key, directive_value) in patch {
        if let Some(list_field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            let field = child_path(path, list_field);
            let Value::Array(unwanted) = directive_value else {
                return Err(smp_error(&field, format!("\"{key}\" must be a list")));
            };
            if let Some(Value::Array(items)) = original.get_mut(list_field) {
                items.retain(|item| !unwanted.iter().any(|u| json_equal(u, item)));
            }
        }
    }
    Ok(MapOutcome::Keep)
}

/// `$retainKeys` lists the only fields this map may keep. Fields with
/// `patchStrategy:"retainKeys"` (a volume's source, a Deployment's strategy) use it so that
/// switching `hostPath` to `emptyDir` also clears `hostPath`.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: &Value,
    path: &str,
) -> Result<(), PatchError> {
    let malformed = || smp_error(path, "\"$retainKeys\" must be a list of field names");
    let keep: Vec<&str> = retain
        .as_array()
        .ok_or_else(malformed)?
        .iter()
        .map(|name| name.as_str().ok_or_else(malformed))
        .collect::<Result<_, _>>()?;
    for (key, value) in patch {
        if value.is_null() || is_directive_key(key) {
            continue;
        }
        if !keep.contains(&key.as_str()) {
            return Err(smp_error(
                path,
                format!("the patch sets \"{key}\", which \"$retainKeys\" does not list"),
            ));
        }
    }
    original.retain(|key, _| keep.contains(&key.as_str()));
    Ok(())
}

/// Handles every `$setElementOrder/<list>` in `patch`: merges that list (if the patch has it)
/// and then orders it as the directive says. Returns the list fields it took care of, so the
/// main loop leaves them alone.
fn merge_lists_with_element_order<'p>(
    original: &mut Map<String, Value>,
    patch: &'p Map<String, Value>,
    path: &str,
) -> Result<Vec<&'p str>, PatchError> {
    let mut handled = Vec::new();
    for (key, order) in patch {
        let Some(list_field) = key.strip_prefix(SET_ELEMENT_ORDER_PREFIX) else {
            continue;
        };
        let field = child_path(path, list_field);
        let Value::Array(order) = order else {
            return Err(smp_error(&field, format!("\"{key}\" must be a list")));
        };
        let patch_list = match patch.get(list_field) {
            Some(Value::Array(items)) => Some(items.as_slice()),
            // The patch replaces or deletes the list outright; the main loop does that.
            Some(_) => continue,
            None => None,
        };
        let original_list = match original.get(list_field) {
            Some(Value::Array(items)) => Some(items.clone()),
            _ => None,
        };
        let server_order = original_list.clone().unwrap_or_default();
        let merge_key = merge_key_for(list_field, &server_order, patch_list.unwrap_or(&[]));
        check_patch_follows_order(
            list_field,
            patch_list.unwrap_or(&[]),
            order,
            merge_key,
            &field,
        )?;
        let merged = match (original_list, patch_list) {
            (Some(mut items), Some(patch_items)) => {
                merge_list(list_field, &mut items, patch_items, &field)?;
                items
            }
            (None, Some(patch_items)) => {
                let mut items = Vec::new();
                merge_list(list_field, &mut items, patch_items, &field)?;
                items
            }
            (Some(items), None) => items,
            (None, None) => continue,
        };
        let ordered = normalize_element_order(merged, order, &server_order, merge_key);
        original.insert(list_field.to_string(), Value::Array(ordered));
        handled.push(list_field);
    }
    Ok(handled)
}

/// Upstream's `validatePatchWithSetOrderList`: the patch's items (deletions aside) must appear
/// in the same relative order as in `$setElementOrder`, and every entry must carry the merge key.
fn check_patch_follows_order(
    list_field: &str,
    patch_items: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
    path: &str,
) -> Result<(), PatchError> {
    if let Some(key) = merge_key {
        if order.iter().any(|entry| entry.get(key).is_none()) {
            return Err(smp_error(
                path,
                format!(
                    "\"$setElementOrder/{list_field}\" entries must carry the merge key \"{key}\""
                ),
            ));
        }
    }
    let identity = |item: &Value| -> Value {
        match merge_key {
            Some(key) => item.get(key).cloned().unwrap_or(Value::Null),
            None => item.clone(),
        }
    };
    let is_deletion =
        |item: &Value| item.get(PATCH_DIRECTIVE).and_then(Value::as_str) == Some("delete");
    let listed: Vec<&Value> = patch_items
        .iter()
        .filter(|item| merge_key.is_none() || !is_deletion(item))
        .collect();
    let (mut patch_index, mut order_index) = (0, 0);
    while patch_index < listed.len() && order_index < order.len() {
        if merge_key.is_some() && listed[patch_index].get(PATCH_DIRECTIVE).is_some() {
            patch_index += 1;
            continue;
        }
        if json_equal(
            &identity(listed[patch_index]),
            &identity(&order[order_index]),
        ) {
            patch_index += 1;
        }
        order_index += 1;
    }
    if patch_index < listed.len() {
        return Err(smp_error(
            path,
            format!("the items of \"{list_field}\" are not in the order \"$setElementOrder/{list_field}\" gives"),
        ));
    }
    Ok(())
}

fn merge_list(
    list_field: &str,
    original: &mut Vec<Value>,
    patch: &[Value],
    path: &str,
) -> Result<(), PatchError> {
    let merge_key = merge_key_for(list_field, original, patch);
    let all_scalars = original
        .iter()
        .chain(patch)
        .all(|item| !item.is_object() && !item.is_array());

    if all_scalars && is_merged_primitive_list(list_field) {
        // A set of scalars (finalizers): union, then upstream's ordering rules.
        let server_order = original.clone();
        let mut merged = std::mem::take(original);
        for item in patch {
            if !merged.iter().any(|existing| json_equal(existing, item)) {
                merged.push(item.clone());
            }
        }
        *original = normalize_element_order(merged, patch, &server_order, None);
        return Ok(());
    }
    let Some(merge_key) = merge_key else {
        // No merge strategy for this field: the patch's list replaces the live one.
        *original = strip_directives_from_list(patch);
        return Ok(());
    };

    // First the special elements: deletions by key, and a whole-list replace.
    let mut replace_whole_list = false;
    let mut regular: Vec<(usize, &Map<String, Value>)> = Vec::new();
    for (position, patch_item) in patch.iter().enumerate() {
        let item_path = format!("{path}[{position}]");
        let Value::Object(patch_fields) = patch_item else {
            return Err(smp_error(
                &item_path,
                format!("items of \"{list_field}\" must be objects merged by \"{merge_key}\""),
            ));
        };
        match patch_fields.get(PATCH_DIRECTIVE) {
            None => regular.push((position, patch_fields)),
            Some(Value::String(directive)) => match directive.as_str() {
                "delete" => {
                    let Some(key_value) = patch_fields.get(merge_key) else {
                        return Err(missing_merge_key(&item_path, merge_key));
                    };
                    // Every live item with this key goes, as upstream's deleteMatchingEntries.
                    original.retain(|item| {
                        !item.get(merge_key).is_some_and(|v| json_equal(v, key_value))
                    });
                }
                "replace" => replace_whole_list = true,
                "merge" => regular.push((position, patch_fields)),
                other => {
                    return Err(smp_error(
                        &item_path,
                        format!("unknown \"$patch\" directive \"{other}\" (expected replace, merge or delete)"),
                    ))
                }
            },
            Some(other) => {
                return Err(smp_error(
                    &item_path,
                    format!("\"$patch\" must be a string, not {other}"),
                ))
            }
        }
    }
    if replace_whole_list {
        *original = regular
            .iter()
            .map(|(_, fields)| Value::Object(strip_directives_from_map(fields)))
            .collect();
        return Ok(());
    }

    // Then merge each remaining item into the live item with the same key, or append it.
    let server_order = original.clone();
    for (position, patch_fields) in &regular {
        let item_path = format!("{path}[{position}]");
        let Some(key_value) = patch_fields.get(merge_key) else {
            return Err(missing_merge_key(&item_path, merge_key));
        };
        let existing = original.iter().position(|item| {
            item.get(merge_key)
                .is_some_and(|v| json_equal(v, key_value))
        });
        match existing {
            Some(index) => match &mut original[index] {
                Value::Object(original_fields) => {
                    merge_map(original_fields, patch_fields, &item_path)?;
                }
                other => *other = Value::Object(strip_directives_from_map(patch_fields)),
            },
            None => {
                let mut fresh = Map::new();
                merge_map(&mut fresh, patch_fields, &item_path)?;
                original.push(Value::Object(fresh));
            }
        }
    }
    let patch_order: Vec<Value> = regular
        .iter()
        .map(|(_, fields)| Value::Object((*fields).clone()))
        .collect();
    let merged = std::mem::take(original);
    *original = normalize_element_order(merged, &patch_order, &server_order, Some(merge_key));
    Ok(())
}

fn missing_merge_key(item_path: &str, merge_key: &str) -> PatchError {
    smp_error(
        item_path,
        format!("list item does not contain the merge key \"{merge_key}\""),
    )
}

/// Upstream's `normalizeElementOrder`: items named in `patch_order` come in that order, items
/// only the server has keep their live order, and the two are interleaved by their positions in
/// the live list (`server_order`). So a patch that changes one container keeps the others where
/// they were, and `$setElementOrder` can reorder the whole list.
fn normalize_element_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let identity = |item: &Value| -> Value {
        match merge_key {
            Some(key) => item.get(key).cloned().unwrap_or(Value::Null),
            None => item.clone(),
        }
    };
    let position_in = |list: &[Value], item: &Value| -> Option<usize> {
        let wanted = identity(item);
        list.iter()
            .position(|entry| json_equal(&identity(entry), &wanted))
    };
    let (mut from_patch, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|item| position_in(patch_order, item).is_some());
    from_patch.sort_by_key(|item| position_in(patch_order, item).unwrap_or(usize::MAX));
    server_only.sort_by_key(|item| position_in(server_order, item).unwrap_or(usize::MAX));

    // mergeSortedSlice: take the server-only item first only when both items are in the live
    // list and the server-only one came earlier there.
    let mut result = Vec::with_capacity(from_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = from_patch.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (position_in(server_order, l), position_in(server_order, r)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        result.extend(next);
    }
    result
}

fn strip_directives_from_map(fields: &Map<String, Value>) -> Map<String, Value> {
    fields
        .iter()
        .filter(|(key, _)| !is_directive_key(key))
        .map(|(key, value)| (key.clone(), strip_directives(value)))
        .collect()
}

fn strip_directives_from_list(items: &[Value]) -> Vec<Value> {
    items
        .iter()
        .filter(|item| {
            // Drop directive-only elements and items marked for deletion: there is nothing for
            // them to act on in a list that is being replaced.
            let directive = item.get(PATCH_DIRECTIVE).and_then(Value::as_str);
            let marked_for_deletion = directive == Some("delete");
            let directive_only =
                directive.is_some() && item.as_object().is_some_and(|fields| fields.len() == 1);
            !marked_for_deletion && !directive_only
        })
        .map(strip_directives)
        .collect()
}

fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(strip_directives_from_map(fields)),
        Value::Array(items) => Value::Array(strip_directives_from_list(items)),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn merged(target: Value, patch: Value) -> Value {
        let mut target = target;
        merge_patch(&mut target, &patch);
        target
    }

    /// Every example from RFC 7386 Appendix A.
    #[test]
    fn rfc7386_appendix_a() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (
                json!({"a":"b","b":"c"}),
                json!({"a":null}),
                json!({"b":"c"}),
            ),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"c"}), json!({"a":["b"]}), json!({"a":["b"]})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!({"a":[{"b":"c"}]}), json!({"a":[1]}), json!({"a":[1]})),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"b"}), json!(["c"]), json!(["c"])),
            (json!({"a":"foo"}), json!(null), json!(null)),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (json!({"e":null}), json!({"a":1}), json!({"e":null,"a":1})),
            (json!([1, 2]), json!({"a":"b","c":null}), json!({"a":"b"})),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            assert_eq!(
                merged(target.clone(), patch.clone()),
                expected,
                "{target} + {patch}"
            );
        }
    }

    /// What `kubectl scale` sends on the /scale subresource.
    #[test]
    fn merge_patch_scale_body() {
        let object = json!({"spec": {"replicas": 3, "version": "16"}});
        assert_eq!(
            merged(object, json!({"spec": {"replicas": 5}})),
            json!({"spec": {"replicas": 5, "version": "16"}})
        );
    }

    fn patched(target: Value, operations: Value) -> Result<Value, PatchError> {
        let mut target = target;
        json_patch(&mut target, &operations)?;
        Ok(target)
    }

    /// The successful examples of RFC 6902 Appendix A.
    #[test]
    fn rfc6902_appendix_a_successes() {
        let cases = [
            // A.1 add an object member
            (
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux"}]),
                json!({"baz":"qux","foo":"bar"}),
            ),
            // A.2 add an array element
            (
                json!({"foo":["bar","baz"]}),
                json!([{"op":"add","path":"/foo/1","value":"qux"}]),
                json!({"foo":["bar","qux","baz"]}),
            ),
            // A.3 remove an object member
            (
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"remove","path":"/baz"}]),
                json!({"foo":"bar"}),
            ),
            // A.4 remove an array element
            (
                json!({"foo":["bar","qux","baz"]}),
                json!([{"op":"remove","path":"/foo/1"}]),
                json!({"foo":["bar","baz"]}),
            ),
            // A.5 replace a value
            (
                json!({"baz":"qux","foo":"bar"}),
                json!([{"op":"replace","path":"/baz","value":"boo"}]),
                json!({"baz":"boo","foo":"bar"}),
            ),
            // A.6 move a value
            (
                json!({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}}),
                json!([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}]),
                json!({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}}),
            ),
            // A.7 move an array element
            (
                json!({"foo":["all","grass","cows","eat"]}),
                json!([{"op":"move","from":"/foo/1","path":"/foo/3"}]),
                json!({"foo":["all","cows","eat","grass"]}),
            ),
            // A.8 test a value (success)
            (
                json!({"baz":"qux","foo":["a",2,"c"]}),
                json!([{"op":"test","path":"/baz","value":"qux"},{"op":"test","path":"/foo/1","value":2}]),
                json!({"baz":"qux","foo":["a",2,"c"]}),
            ),
            // A.10 add a nested member object
            (
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/child","value":{"grandchild":{}}}]),
                json!({"foo":"bar","child":{"grandchild":{}}}),
            ),
            // A.11 ignore unrecognized elements
            (
                json!({"foo":"bar"}),
                json!([{"op":"add","path":"/baz","value":"qux","xyz":123}]),
                json!({"foo":"bar","baz":"qux"}),
            ),
            // A.14 ~ escape ordering
            (
                json!({"/":9,"~1":10}),
                json!([{"op":"test","path":"/~01","value":10}]),
                json!({"/":9,"~1":10}),
            ),
            // A.16 add an array value
            (
                json!({"foo":["bar"]}),
                json!([{"op":"add","path":"/foo/-","value":["abc","def"]}]),
                json!({"foo":["bar",["abc","def"]]}),
            ),
            // add at the end index, replace the root, copy
            (
                json!({"a":[1]}),
                json!([{"op":"add","path":"/a/1","value":2}]),
                json!({"a":[1,2]}),
            ),
            (
                json!({"a":1}),
                json!([{"op":"replace","path":"","value":[1]}]),
                json!([1]),
            ),
            (
                json!({"a":{"b":1}}),
                json!([{"op":"copy","from":"/a","path":"/c"}]),
                json!({"a":{"b":1},"c":{"b":1}}),
            ),
            // numbers compare by value in test
            (
                json!({"n":1}),
                json!([{"op":"test","path":"/n","value":1.0}]),
                json!({"n":1}),
            ),
        ];
        for (target, operations, expected) in cases {
            assert_eq!(
                patched(target, operations.clone()).unwrap(),
                expected,
                "{operations}"
            );
        }
    }

    /// The failing examples of RFC 6902 Appendix A, and that failure leaves the target alone.
    #[test]
    fn rfc6902_failures_are_atomic_and_named() {
        let original = json!({"baz":"qux","foo":"bar","spec":{"replicas":3}});
        let cases = [
            // A.9 test a value (error)
            (
                json!([{"op":"test","path":"/baz","value":"bar"}]),
                "json patch op 0 (test /baz): test failed",
            ),
            // A.12 adding to a nonexistent target
            (
                json!([{"op":"add","path":"/baz/bat","value":"qux"}]),
                "json patch op 0 (add /baz/bat): path not found",
            ),
            // A.15 comparing strings and numbers
            (
                json!([{"op":"test","path":"/baz","value":10}]),
                "test failed",
            ),
            (
                json!([{"op":"replace","path":"/spec/replicas","value":5},{"op":"remove","path":"/x"},{"op":"replace","path":"/spec/size","value":1}]),
                "json patch op 1 (remove /x): path not found",
            ),
            (
                json!([{"op":"replace","path":"/spec/size","value":1}]),
                "json patch op 0 (replace /spec/size): path not found",
            ),
            (
                json!([{"op":"frobnicate","path":"/a"}]),
                "unknown op \"frobnicate\"",
            ),
            (json!([{"op":"add","path":"/a"}]), "no \"value\" member"),
            (json!([{"op":"add","value":1}]), "no \"path\" member"),
            (
                json!([{"op":"add","path":"a","value":1}]),
                "must start with '/'",
            ),
            (
                json!([{"op":"add","path":"/~2","value":1}]),
                "'~' not followed by 0 or 1",
            ),
            (
                json!([{"op":"move","from":"/spec","path":"/spec/inner"}]),
                "own children",
            ),
            (json!([{"op":"remove","path":""}]), "whole document"),
            (
                json!([{"op":"move","from":"/nope","path":"/nope"}]),
                "from: path not found",
            ),
            (json!({"op":"add"}), "must be a JSON array"),
        ];
        for (operations, expected) in cases {
            let mut target = original.clone();
            let error = json_patch(&mut target, &operations)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{operations}: {error}");
            assert_eq!(target, original, "target changed by failed {operations}");
        }
    }

    /// Array indices must be canonical and in range.
    #[test]
    fn rfc6902_array_index_rules() {
        let list = json!({"a":[1,2,3]});
        for (operations, expected) in [
            (
                json!([{"op":"remove","path":"/a/01"}]),
                "not a valid array index",
            ),
            (json!([{"op":"remove","path":"/a/3"}]), "out of bounds"),
            (
                json!([{"op":"add","path":"/a/4","value":0}]),
                "out of bounds",
            ),
            (
                json!([{"op":"replace","path":"/a/-","value":0}]),
                "path not found",
            ),
        ] {
            let error = patched(list.clone(), operations.clone())
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{operations}: {error}");
        }
    }

    fn strategic(target: Value, patch: Value) -> Value {
        let mut target = target;
        strategic_merge_patch(&mut target, &patch).unwrap();
        target
    }

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web", "labels": {"tier": "db", "app": "web"}},
            "spec": {
                "containers": [
                    {"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                    {"name": "side", "image": "busybox"}
                ],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        })
    }

    /// The exact patch kubectl apply sent for a pod (from kubectl-needs.md): labels deleted by
    /// null, a container deleted by `$patch: delete`, order directive removed from the result.
    #[test]
    fn smp_kubectl_apply_pod_patch() {
        let result = strategic(
            pod(),
            json!({"metadata":{"labels":{"tier":null}},"spec":{"$setElementOrder/containers":[{"name":"c"}],"containers":[{"$patch":"delete","name":"side"}]}}),
        );
        assert_eq!(result["metadata"]["labels"], json!({"app": "web"}));
        let containers = result["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 1);
        assert_eq!(containers[0]["name"], "c");
        assert!(!result.to_string().contains('$'), "{result}");
    }

    /// Containers merge by name, env by name, ports by containerPort; new items append.
    #[test]
    fn smp_merges_lists_by_key() {
        let result = strategic(
            pod(),
            json!({"spec":{"containers":[
                {"name":"c","image":"nginx:2","env":[{"name":"B","value":"3"},{"name":"C","value":"4"}],
                 "ports":[{"containerPort":80,"name":"http"}]},
                {"name":"new","image":"redis"}
            ]}}),
        );
        let containers = &result["spec"]["containers"];
        assert_eq!(containers[0]["image"], "nginx:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name":"A","value":"1"},{"name":"B","value":"3"},{"name":"C","value":"4"}])
        );
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort":80,"protocol":"TCP","name":"http"}])
        );
        // Upstream's ordering: patch items in patch order, then the live-only "side".
        assert_eq!(containers[1], json!({"name":"new","image":"redis"}));
        assert_eq!(containers[2]["image"], "busybox");
    }

    /// Lists without a merge key (args, command) are replaced outright.
    #[test]
    fn smp_replaces_unkeyed_lists() {
        let result = strategic(
            json!({"spec":{"args":["a","b"],"tolerations":[{"key":"x"}]}}),
            json!({"spec":{"args":["c"],"tolerations":[{"key":"y"}]}}),
        );
        assert_eq!(
            result,
            json!({"spec":{"args":["c"],"tolerations":[{"key":"y"}]}})
        );
    }

    /// `$patch: replace` on a map and as a list element replaces instead of merging.
    #[test]
    fn smp_replace_directives() {
        let result = strategic(
            pod(),
            json!({"metadata":{"labels":{"$patch":"replace","only":"this"}},
                   "spec":{"containers":[{"name":"z","image":"alpine"},{"$patch":"replace"}]}}),
        );
        assert_eq!(result["metadata"]["labels"], json!({"only":"this"}));
        assert_eq!(
            result["spec"]["containers"],
            json!([{"name":"z","image":"alpine"}])
        );
    }

    /// `$patch: delete` on a map empties it (upstream keeps the field as `{}`); on a missing
    /// field it adds nothing.
    #[test]
    fn smp_delete_map_directive() {
        let result = strategic(
            pod(),
            json!({"metadata":{"labels":{"$patch":"delete"},"annotations":{"$patch":"delete"}}}),
        );
        assert_eq!(result["metadata"]["labels"], json!({}));
        assert!(result["metadata"].get("annotations").is_none(), "{result}");
    }

    /// `$retainKeys` clears fields it does not list (switching a volume source).
    #[test]
    fn smp_retain_keys() {
        let result = strategic(
            json!({"spec":{"volumes":[{"name":"data","hostPath":{"path":"/x"}}]}}),
            json!({"spec":{"volumes":[{"name":"data","emptyDir":{},"$retainKeys":["emptyDir","name"]}]}}),
        );
        assert_eq!(
            result["spec"]["volumes"],
            json!([{"name":"data","emptyDir":{}}])
        );
    }

    /// `$deleteFromPrimitiveList` removes values; finalizers merge as a set, patch values first
    /// (upstream's order: [a,b,c] + [d,a] - [b] = [d,a,c]).
    #[test]
    fn smp_primitive_lists() {
        let result = strategic(
            json!({"metadata":{"finalizers":["a","b","c"]}}),
            json!({"metadata":{"$deleteFromPrimitiveList/finalizers":["b"],"finalizers":["d","a"]}}),
        );
        assert_eq!(result["metadata"]["finalizers"], json!(["d", "a", "c"]));
    }

    /// `$setElementOrder` reorders the listed items; a live-only item is slotted in by its live
    /// position (worked through upstream's mergeSortedSlice by hand).
    #[test]
    fn smp_set_element_order() {
        let result = strategic(
            json!({"spec":{"containers":[{"name":"a"},{"name":"b"},{"name":"server-only"},{"name":"c"}]}}),
            json!({"spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"a"},{"name":"b"}],
                           "containers":[{"name":"a","image":"x"}]}}),
        );
        let names: Vec<&str> = result["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["server-only", "c", "a", "b"]);
        assert_eq!(result["spec"]["containers"][2]["image"], "x");

        let primitive = strategic(
            json!({"metadata":{"finalizers":["x","y","z"]}}),
            json!({"metadata":{"$setElementOrder/finalizers":["z","y","x"]}}),
        );
        assert_eq!(primitive["metadata"]["finalizers"], json!(["z", "y", "x"]));
    }

    /// Patching one item of a keyed list leaves the others where they were.
    #[test]
    fn smp_keeps_live_order_of_untouched_items() {
        let names = |value: &Value| -> Vec<String> {
            value["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap().to_string())
                .collect()
        };
        let first = strategic(
            pod(),
            json!({"spec":{"containers":[{"name":"c","image":"x"}]}}),
        );
        assert_eq!(names(&first), vec!["c", "side"]);
        let second = strategic(
            pod(),
            json!({"spec":{"containers":[{"name":"side","image":"x"}]}}),
        );
        assert_eq!(names(&second), vec!["c", "side"]);
        assert_eq!(second["spec"]["containers"][1]["image"], "x");
    }

    /// A `{"$patch":"replace"}` element may sit anywhere in the list; deletions beside it vanish.
    #[test]
    fn smp_list_replace_ignores_other_directives() {
        let result = strategic(
            pod(),
            json!({"spec":{"volumes":[{"$patch":"replace"},{"name":"new","emptyDir":{}},{"name":"data","$patch":"delete"}]}}),
        );
        assert_eq!(
            result["spec"]["volumes"],
            json!([{"name":"new","emptyDir":{}}])
        );
    }

    /// `$retainKeys` must list every field the patch sets, as upstream checks.
    #[test]
    fn smp_retain_keys_must_cover_the_patch() {
        let mut target = json!({"spec":{"strategy":{"type":"Recreate"}}});
        let error = strategic_merge_patch(
            &mut target,
            &json!({"spec":{"strategy":{"$retainKeys":["type"],"type":"RollingUpdate","rollingUpdate":{"maxSurge":1}}}}),
        )
        .unwrap_err();
        assert_eq!(
            error.to_string(),
            "strategic merge patch at spec.strategy: the patch sets \"rollingUpdate\", which \"$retainKeys\" does not list"
        );
    }

    /// A patch list whose order contradicts `$setElementOrder` is rejected.
    #[test]
    fn smp_set_element_order_must_agree_with_the_patch() {
        let mut target = pod();
        let error = strategic_merge_patch(
            &mut target,
            &json!({"spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"side"}],
                            "containers":[{"name":"side"},{"name":"c"}]}}),
        )
        .unwrap_err();
        assert!(error.to_string().contains("not in the order"), "{error}");
        let missing_key = strategic_merge_patch(
            &mut target,
            &json!({"spec":{"$setElementOrder/containers":[{"image":"c"}]}}),
        )
        .unwrap_err();
        assert!(
            missing_key
                .to_string()
                .contains("must carry the merge key \"name\""),
            "{missing_key}"
        );
    }

    /// Service ports merge by `port`, container ports by `containerPort`.
    #[test]
    fn smp_ports_pick_their_merge_key() {
        let service = strategic(
            json!({"spec":{"ports":[{"port":80,"targetPort":8080},{"port":443}]}}),
            json!({"spec":{"ports":[{"port":80,"targetPort":9090}]}}),
        );
        assert_eq!(
            service["spec"]["ports"],
            json!([{"port":80,"targetPort":9090},{"port":443}])
        );
    }

    /// Conditions merge by type and ownerReferences by uid.
    #[test]
    fn smp_conditions_and_owner_references() {
        let result = strategic(
            json!({"status":{"conditions":[{"type":"Ready","status":"False"},{"type":"Scheduled","status":"True"}]},
                   "metadata":{"ownerReferences":[{"uid":"1","name":"a"}]}}),
            json!({"status":{"conditions":[{"type":"Ready","status":"True"}]},
                   "metadata":{"ownerReferences":[{"uid":"2","name":"b"}]}}),
        );
        assert_eq!(
            result["status"]["conditions"],
            json!([{"type":"Ready","status":"True"},{"type":"Scheduled","status":"True"}])
        );
        assert_eq!(
            result["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    /// Directive keys never leak into newly added content either.
    #[test]
    fn smp_new_content_is_clean() {
        let result = strategic(
            json!({}),
            json!({"spec":{"template":{"$patch":"merge","containers":[{"name":"a","$patch":"merge"},{"name":"gone","$patch":"delete"}]}}}),
        );
        assert_eq!(
            result,
            json!({"spec":{"template":{"containers":[{"name":"a"}]}}})
        );
    }

    /// Malformed strategic patches fail with the field named, and change nothing.
    #[test]
    fn smp_errors_name_the_field() {
        let original = pod();
        for (patch, expected) in [
            (
                json!({"spec":{"containers":[{"image":"x"}]}}),
                "at spec.containers[0]: list item does not contain the merge key \"name\"",
            ),
            (
                json!({"metadata":{"labels":{"$patch":"explode"}}}),
                "at metadata.labels: unknown \"$patch\" directive \"explode\"",
            ),
            (
                json!({"spec":{"$retainKeys":"containers"}}),
                "at spec: \"$retainKeys\" must be a list",
            ),
            (json!({"$patch":"delete"}), "send DELETE instead"),
            (json!([1]), "must be a JSON object"),
        ] {
            let mut target = original.clone();
            let error = strategic_merge_patch(&mut target, &patch)
                .unwrap_err()
                .to_string();
            assert!(error.contains(expected), "{patch}: {error}");
            assert_eq!(target, original);
        }
    }

    /// The merge patch that turns `original` into `modified` (the inverse of `merge_patch`), so
    /// the property tests below can check the patch kinds against each other.
    ///
    /// RFC 7386 cannot express "set this key to null", so a `null` in `modified` comes out as a
    /// deletion. kubectl computes the same kind of diff for `apply` on custom resources.
    fn create_merge_patch(original: &Value, modified: &Value) -> Value {
        match (original, modified) {
            (Value::Object(before), Value::Object(after)) => {
                let mut patch = Map::new();
                for key in before.keys() {
                    if !after.contains_key(key) {
                        patch.insert(key.clone(), Value::Null);
                    }
                }
                for (key, after_value) in after {
                    match before.get(key) {
                        Some(before_value) if json_equal(before_value, after_value) => {}
                        Some(before_value)
                            if before_value.is_object() && after_value.is_object() =>
                        {
                            patch
                                .insert(key.clone(), create_merge_patch(before_value, after_value));
                        }
                        _ => {
                            patch.insert(key.clone(), after_value.clone());
                        }
                    }
                }
                Value::Object(patch)
            }
            _ => modified.clone(),
        }
    }

    fn json_without_nulls() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::from),
            any::<i32>().prop_map(Value::from),
            "[a-z]{0,3}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
                prop::collection::btree_map("[a-d]", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn nested_arrays(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    /// Everything serde_json parses fits MAX_DEPTH, and one level more is refused by both.
    #[test]
    fn max_depth_matches_what_a_body_can_carry() {
        let deepest = (1..200)
            .take_while(|levels| serde_json::from_str::<Value>(&nested_arrays(*levels)).is_ok())
            .last()
            .unwrap_or(0);
        let value: Value = serde_json::from_str(&nested_arrays(deepest)).expect("parses");
        assert_eq!(measure(&value, MAX_DEPTH).map(|s| s.depth), Ok(deepest));
        assert!(deepest <= MAX_DEPTH);
        assert_eq!(measure(&value, deepest - 1), Err(TooDeep));
    }

    /// `copy` of a value into its own child, repeated, stops at MAX_DEPTH with the op named.
    #[test]
    fn copy_into_own_child_is_bounded() {
        let operations: Vec<Value> = (0..10_000)
            .map(|_| json!({"op": "copy", "from": "/a", "path": "/a/a"}))
            .collect();
        let error = patched(json!({"a": {"x": 1}}), json!(operations)).expect_err("too deep");
        assert!(
            matches!(error, PatchError::TooDeep { index, .. } if index < MAX_DEPTH),
            "{error}"
        );
        assert!(!error.is_too_large());
    }

    /// Repeated doubling copies stop at kube-apiserver's 3 MiB copy budget with its wording.
    #[test]
    fn doubling_copies_are_bounded() {
        let mut operations = vec![json!({"op": "add", "path": "/a", "value": ["x".repeat(1000)]})];
        for _ in 0..40 {
            operations.push(json!({"op": "copy", "from": "/a", "path": "/a/-"}));
            operations.push(json!({"op": "copy", "from": "/a", "path": "/b"}));
            operations.push(json!({"op": "move", "from": "/b", "path": "/a"}));
        }
        let error = patched(json!({}), json!(operations)).expect_err("too large");
        assert!(error.is_too_large(), "{error}");
        assert!(
            error
                .to_string()
                .contains("Unable to copy, the accumulated size increase of copy"),
            "{error}"
        );
        let many =
            vec![json!({"op": "test", "path": "", "value": {}}); MAX_JSON_PATCH_OPERATIONS + 1];
        let error = patched(json!({}), json!(many)).expect_err("too many");
        assert_eq!(
            error.to_string(),
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    /// `add` of a deep value at a deep path is refused; measuring a very deep value is safe.
    #[test]
    fn deep_add_is_refused_and_measuring_never_recurses() {
        let deep: Value = serde_json::from_str(&nested_arrays(100)).expect("parses");
        let path = "/a".repeat(40);
        let mut target = json!({});
        let mut slot = &mut target;
        for _ in 0..39 {
            slot["a"] = json!({});
            slot = &mut slot["a"];
        }
        let error = patched(target, json!([{"op": "add", "path": path, "value": deep}]))
            .expect_err("too deep");
        assert!(
            matches!(error, PatchError::TooDeep { index: 0, .. }),
            "{error}"
        );
        // A million levels, built and torn down without recursion.
        let mut huge = Value::Null;
        for _ in 0..1_000_000 {
            huge = Value::Array(vec![huge]);
        }
        assert_eq!(measure(&huge, MAX_DEPTH), Err(TooDeep));
        while let Value::Array(mut items) = huge {
            huge = items.pop().unwrap_or(Value::Null);
        }
    }

    proptest! {
        /// Applying the computed merge patch of a diff turns the original into the modified value.
        #[test]
        fn merge_patch_of_diff_round_trips(original in json_without_nulls(), modified in json_without_nulls()) {
            let patch = create_merge_patch(&original, &modified);
            let mut result = original.clone();
            merge_patch(&mut result, &patch);
            prop_assert_eq!(result, modified);
        }

        /// Without keyed lists or directives, a strategic merge patch is exactly a merge patch
        /// (field names a-d have no merge key, so their lists are replaced).
        #[test]
        fn strategic_equals_merge_patch_without_keyed_lists(
            original in prop::collection::btree_map("[a-d]", json_without_nulls(), 0..4),
            modified in prop::collection::btree_map("[a-d]", json_without_nulls(), 0..4),
        ) {
            let original = Value::Object(original.into_iter().collect());
            let modified = Value::Object(modified.into_iter().collect());
            let patch = create_merge_patch(&original, &modified);
            let mut by_merge = original.clone();
            merge_patch(&mut by_merge, &patch);
            let mut by_strategic = original.clone();
            strategic_merge_patch(&mut by_strategic, &patch).unwrap();
            prop_assert_eq!(by_strategic, by_merge);
        }

        /// A json patch that fails midway never changes the target.
        #[test]
        fn json_patch_is_atomic(original in json_without_nulls(), value in json_without_nulls()) {
            let operations = json!([{"op":"add","path":"/fresh","value":value},{"op":"remove","path":"/does/not/exist"}]);
            let mut target = original.clone();
            prop_assert!(json_patch(&mut target, &operations).is_err());
            prop_assert_eq!(target, original);
        }
    }
}
