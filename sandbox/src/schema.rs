//! Checking a custom object against its CRD's `openAPIV3Schema`, the way the API server does
//! before it stores a PostgresCluster: [`validate`] finds invalid fields (a 422 Invalid with one
//! `details.causes[]` entry each), and [`prune`] drops fields the schema does not declare (what
//! `fieldValidation=Strict` rejects with a 400, `Warn` reports as warnings, and `Ignore` drops).
//!
//! Part of WORKSHOP.md "Set-up: the sandbox" and "Step 01". Error wording
//! follows kube-openapi's validator as wrapped by apiextensions-apiserver, so
//! `kubectl apply` against the sandbox prints the same lines as against a cluster:
//! `* spec.size: Invalid value: "string": spec.size in body must be of type integer: "string"`.
//!
//! Supported keywords: `type`, `required`, `properties`, `items`, `additionalProperties` (as a
//! schema), `minimum`/`maximum` (+ `exclusiveMinimum`/`exclusiveMaximum` as booleans),
//! `multipleOf`, `minLength`/`maxLength`, `minItems`/`maxItems`, `minProperties`/
//! `maxProperties`, `enum`, `pattern` (a small regex engine below), `nullable`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-embedded-resource`. Ignored: `format`, `allOf`/`anyOf`/`oneOf`/`not`,
//! `uniqueItems`, `x-kubernetes-validations` (CEL), `default`, `additionalProperties: false`.
//!
//! Also here for `fieldValidation`: [`duplicate_fields`] (serde_json keeps the last of two equal
//! keys, so duplicates must be found in the raw body), and the exact message helpers
//! [`unknown_field_message`], [`duplicate_field_message`] and [`strict_decoding_message`].

use serde_json::{Map, Value};

/// One invalid field, shaped like a Kubernetes `StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// Dotted path from the object root: `spec.size`, `spec.databases[0].name`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`,
    /// `FieldValueTypeInvalid`, `FieldValueTooLong` or `FieldValueTooMany`.
    pub reason: String,
    /// The cause's message, e.g. `Invalid value: 0: spec.size in body should be greater than or equal to 1`.
    pub message: String,
}

impl FieldError {
    fn new(field: &str, reason: &str, message: String) -> FieldError {
        FieldError {
            field: field.to_string(),
            reason: reason.to_string(),
            message,
        }
    }
}

impl std::fmt::Display for FieldError {
    /// `spec.size: Invalid value: ...`, as kubectl prints each cause.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

const REASON_INVALID: &str = "FieldValueInvalid";
const REASON_REQUIRED: &str = "FieldValueRequired";
const REASON_NOT_SUPPORTED: &str = "FieldValueNotSupported";
const REASON_TYPE_INVALID: &str = "FieldValueTypeInvalid";
const REASON_TOO_LONG: &str = "FieldValueTooLong";
const REASON_TOO_MANY: &str = "FieldValueTooMany";

/// Validates `object` against a CRD version's `openAPIV3Schema`. An empty list means valid.
///
/// At the root, `apiVersion`, `kind` and `metadata` are only type-checked: the API server
/// validates metadata with its own rules (see `names.rs`), not with the CRD's schema.
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Findings {
        errors: Vec::new(),
        pattern_steps_left: PATTERN_STEP_BUDGET,
        compiled: std::collections::HashMap::new(),
    };
    validate_node(schema, object, "", true, &mut errors);
    errors.errors
}

/// How many steps (threads advanced, plus instructions compiled) one write's `pattern` checks
/// may take in all. Go's regexp, which kube-apiserver uses, is linear in the input but has no
/// budget; this engine is linear too, yet a pattern of 46,000 instructions against a 20,000
/// character value is a billion steps, so past the budget the sandbox refuses the write (422
/// naming the field) instead of spending a minute on it. Real patterns stay far below it.
pub const PATTERN_STEP_BUDGET: usize = 10_000_000;

/// What validation found so far, and what it may still spend on `pattern`s.
struct Findings {
    errors: Vec<FieldError>,
    pattern_steps_left: usize,
    /// Each pattern is compiled once per write, not once per value (an array of 10,000 items).
    compiled: std::collections::HashMap<String, Option<Pattern>>,
}

impl Findings {
    fn push(&mut self, error: FieldError) {
        self.errors.push(error);
    }
}

fn schema_flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn child_path(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// The type name kube-openapi reports for a JSON value.
fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Formats a bad value the way apimachinery's `field.Error` does: strings quoted, numbers and
/// booleans bare, anything else as JSON.
fn display_value(value: &Value) -> String {
    match value {
        Value::String(text) => Value::String(text.clone()).to_string(),
        Value::Number(number) => number.to_string(),
        other => other.to_string(),
    }
}

/// A bound as Go's `%v` prints a float64: `1`, not `1.0`.
fn display_bound(bound: f64) -> String {
    if bound.fract() == 0.0 && bound.abs() < 1e15 {
        format!("{}", bound as i64)
    } else {
        format!("{bound}")
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> FieldError {
    FieldError::new(
        path,
        REASON_INVALID,
        format!("Invalid value: {}: {detail}", display_value(value)),
    )
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match (expected, value) {
        ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("boolean", Value::Bool(_))
        | ("number", Value::Number(_)) => true,
        // A float with no fractional part counts as an integer, as in kube-openapi.
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn validate_node(schema: &Value, value: &Value, path: &str, at_root: bool, errors: &mut Findings) {
    let int_or_string = schema_flag(schema, "x-kubernetes-int-or-string");
    let declared_type = schema.get("type").and_then(Value::as_str);

    if value.is_null() {
        // kube-apiserver drops nulls of non-nullable fields before validating (they then count
        // as absent); the sandbox does not, so a null that reaches validation is a type error.
        let type_name = if int_or_string {
            Some("integer,string".to_string())
        } else {
            declared_type.map(str::to_string)
        };
        if let (Some(type_name), false) = (type_name, schema_flag(schema, "nullable")) {
            errors.push(type_error(path, &type_name, "null"));
        }
        return;
    }

    if int_or_string {
        if !(type_matches("integer", value) || type_matches("string", value)) {
            errors.push(type_error(path, "integer,string", json_type_name(value)));
            return;
        }
    } else if let Some(expected) = declared_type {
        if !type_matches(expected, value) {
            errors.push(type_error(path, expected, json_type_name(value)));
            return;
        }
    }

    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.iter().any(|a| crate::patch::json_equal(a, value)) {
            let quoted: Vec<String> = allowed
                .iter()
                .map(|a| {
                    let text = match a {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    Value::String(text).to_string()
                })
                .collect();
            errors.push(FieldError::new(
                path,
                REASON_NOT_SUPPORTED,
                format!(
                    "Unsupported value: {}: supported values: {}",
                    display_value(value),
                    quoted.join(", ")
                ),
            ));
        }
    }

    match value {
        Value::String(text) => validate_string(schema, text, value, path, errors),
        Value::Number(number) => validate_number(schema, number, value, path, errors),
        Value::Array(items) => validate_array(schema, items, path, errors),
        Value::Object(fields) => validate_object(schema, fields, path, at_root, errors),
        _ => {}
    }
}

fn type_error(path: &str, expected: &str, actual: &str) -> FieldError {
    FieldError::new(
        path,
        REASON_TYPE_INVALID,
        format!(
            "Invalid value: \"{actual}\": {path} in body must be of type {expected}: \"{actual}\""
        ),
    )
}

fn validate_string(schema: &Value, text: &str, value: &Value, path: &str, errors: &mut Findings) {
    // OpenAPI lengths count characters (Go counts runes), not bytes.
    let length = text.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
        if length > max {
            let unit = if max == 1 { "byte" } else { "bytes" };
            errors.push(FieldError::new(
                path,
                REASON_TOO_LONG,
                format!("Too long: may not be more than {max} {unit}"),
            ));
        }
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
        if length < min {
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be at least {min} chars long"),
            ));
        }
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        if errors.pattern_steps_left == 0 {
            return; // already over budget: that field was named once
        }
        let compiled = errors
            .compiled
            .entry(pattern.to_string())
            .or_insert_with(|| Pattern::compile(pattern));
        // A pattern our small engine cannot compile is treated as matching: better to accept
        // an object the real server might reject than to reject one it would accept.
        let Some(compiled) = compiled.as_ref() else {
            return;
        };
        let mut steps_left = errors
            .pattern_steps_left
            .saturating_sub(compiled.program.len());
        let outcome = compiled.matches(text, &mut steps_left);
        errors.pattern_steps_left = steps_left;
        match outcome {
            Ok(true) => {}
            Ok(false) => errors.push(invalid(
                path,
                value,
                format!("{path} in body should match '{pattern}'"),
            )),
            Err(OverBudget) => {
                errors.pattern_steps_left = 0;
                errors.push(invalid(
                    path,
                    value,
                    format!(
                        "{path} in body: the sandbox gave up matching it against '{}' after {PATTERN_STEP_BUDGET} steps (shorten the value or simplify the pattern)",
                        shortened(pattern)
                    ),
                ));
            }
        }
    }
}

fn validate_number(
    schema: &Value,
    number: &serde_json::Number,
    value: &Value,
    path: &str,
    errors: &mut Findings,
) {
    let Some(actual) = number.as_f64() else {
        return;
    };
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = schema_flag(schema, "exclusiveMinimum");
        if actual < min || (exclusive && actual == min) {
            let relation = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be {relation} {}", display_bound(min)),
            ));
        }
    }
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = schema_flag(schema, "exclusiveMaximum");
        if actual > max || (exclusive && actual == max) {
            let relation = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errors.push(invalid(
                path,
                value,
                format!("{path} in body should be {relation} {}", display_bound(max)),
            ));
        }
    }
    if let Some(factor) = schema.get("multipleOf").and_then(Value::as_f64) {
        if factor > 0.0 && (actual / factor).fract().abs() > 1e-9 {
            errors.push(invalid(
                path,
                value,
                format!(
                    "{path} in body should be a multiple of {}",
                    display_bound(factor)
                ),
            ));
        }
    }
}

fn validate_array(schema: &Value, items: &[Value], path: &str, errors: &mut Findings) {
    let count = items.len() as u64;
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64) {
        if count > max {
            errors.push(FieldError::new(
                path,
                REASON_TOO_MANY,
                format!("Too many: {count}: must have at most {max} items"),
            ));
        }
    }
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64) {
        if count < min {
            errors.push(invalid(
                path,
                &Value::from(count),
                format!("{path} in body should have at least {min} items"),
            ));
        }
    }
    if let Some(item_schema) = schema.get("items") {
        for (index, item) in items.iter().enumerate() {
            validate_node(
                item_schema,
                item,
                &format!("{path}[{index}]"),
                false,
                errors,
            );
        }
    }
}

fn validate_object(
    schema: &Value,
    fields: &Map<String, Value>,
    path: &str,
    at_root: bool,
    errors: &mut Findings,
) {
    let count = fields.len() as u64;
    if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64) {
        if count > max {
            errors.push(FieldError::new(
                path,
                REASON_TOO_MANY,
                format!("Too many: {count}: must have at most {max} items"),
            ));
        }
    }
    if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
        if count < min {
            errors.push(invalid(
                path,
                &Value::from(count),
                format!("{path} in body should have at least {min} properties"),
            ));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for name in required.iter().filter_map(Value::as_str) {
            if !fields.contains_key(name) {
                errors.push(FieldError::new(
                    &child_path(path, name),
                    REASON_REQUIRED,
                    "Required value".to_string(),
                ));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    let additional = schema
        .get("additionalProperties")
        .filter(|extra| extra.is_object());
    for (key, field_value) in fields {
        let field_path = child_path(path, key);
        let is_metadata_field = (at_root || schema_flag(schema, "x-kubernetes-embedded-resource"))
            && matches!(key.as_str(), "apiVersion" | "kind" | "metadata");
        if is_metadata_field {
            let expected = if key == "metadata" {
                "object"
            } else {
                "string"
            };
            if !type_matches(expected, field_value) {
                errors.push(type_error(
                    &field_path,
                    expected,
                    json_type_name(field_value),
                ));
            }
            continue;
        }
        if let Some(field_schema) = properties.and_then(|p| p.get(key)) {
            validate_node(field_schema, field_value, &field_path, false, errors);
        } else if let Some(extra_schema) = additional {
            validate_node(extra_schema, field_value, &field_path, false, errors);
        }
        // Fields the schema does not declare are not errors here: `prune` handles them.
    }
}

/// Removes fields the schema does not declare and returns their paths (`spec.colour`,
/// `spec.databases[0].owner`). This is the API server's pruning: under `fieldValidation=Strict`
/// a non-empty result becomes a 400 (`unknown field "spec.colour"`), under `Warn` one warning
/// per path, under `Ignore` the fields vanish silently.
///
/// Never prunes `apiVersion`, `kind` or `metadata` at the root (or inside an
/// `x-kubernetes-embedded-resource`); inside `metadata` only fields that `ObjectMeta` lacks go
/// (`metadata.colour`). Keeps everything under `x-kubernetes-preserve-unknown-fields: true`.
pub fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut removed = Vec::new();
    prune_node(schema, object, "", true, &mut removed);
    removed
}

fn prune_node(
    schema: &Value,
    value: &mut Value,
    path: &str,
    at_root: bool,
    removed: &mut Vec<String>,
) {
    let preserve_unknown = schema_flag(schema, "x-kubernetes-preserve-unknown-fields");
    match value {
        Value::Object(fields) => {
            let keeps_metadata = at_root || schema_flag(schema, "x-kubernetes-embedded-resource");
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema
                .get("additionalProperties")
                .filter(|extra| extra.is_object());
            let mut unknown = Vec::new();
            for (key, field_value) in fields.iter_mut() {
                let field_path = child_path(path, key);
                if keeps_metadata && matches!(key.as_str(), "apiVersion" | "kind") {
                    continue;
                }
                if keeps_metadata && key == "metadata" {
                    prune_object_meta(field_value, &field_path, removed);
                    continue;
                }
                if let Some(field_schema) = properties.and_then(|p| p.get(key)) {
                    prune_node(field_schema, field_value, &field_path, false, removed);
                } else if let Some(extra_schema) = additional {
                    prune_node(extra_schema, field_value, &field_path, false, removed);
                } else if !preserve_unknown {
                    unknown.push(key.clone());
                    removed.push(field_path);
                }
            }
            for key in unknown {
                fields.remove(&key);
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter_mut().enumerate() {
                    prune_node(
                        item_schema,
                        item,
                        &format!("{path}[{index}]"),
                        false,
                        removed,
                    );
                }
            }
        }
        _ => {}
    }
}

/// The fields of `ObjectMeta`. Anything else under `metadata` is dropped, and reported like any
/// unknown field, because the API server decodes metadata into this fixed Go struct.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn prune_object_meta(metadata: &mut Value, path: &str, removed: &mut Vec<String>) {
    if let Value::Object(fields) = metadata {
        let unknown: Vec<String> = fields
            .keys()
            .filter(|key| !OBJECT_META_FIELDS.contains(&key.as_str()))
            .cloned()
            .collect();
        for key in unknown {
            fields.remove(&key);
            removed.push(child_path(path, &key));
        }
    }
}

/// The warning (under `fieldValidation=Warn`) or error fragment for one pruned field:
/// `unknown field "spec.colour"`.
pub fn unknown_field_message(path: &str) -> String {
    format!("unknown field \"{path}\"")
}

/// The warning or error fragment for a field given twice in the request body:
/// `duplicate field "spec.size"`.
pub fn duplicate_field_message(path: &str) -> String {
    format!("duplicate field \"{path}\"")
}

/// The message of the 400 BadRequest that `fieldValidation=Strict` produces, e.g.
/// `PostgresCluster in version "v1" cannot be handled as a PostgresCluster: strict decoding
/// error: unknown field "spec.colour", duplicate field "spec.size"`.
pub fn strict_decoding_message(kind: &str, version: &str, problems: &[String]) -> String {
    format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        problems.join(", ")
    )
}

/// Fields that appear more than once in one JSON object of `body` (serde_json silently keeps
/// the last, so Strict validation has to look at the raw text). Paths as in [`prune`]:
/// `spec.size`, `spec.databases[0].name`. Malformed JSON yields whatever was found before
/// the error; the caller's real parse reports the syntax error.
pub fn duplicate_fields(body: &str) -> Vec<String> {
    let mut scanner = DuplicateScanner {
        text: body,
        position: 0,
        duplicates: Vec::new(),
    };
    scanner.value("");
    scanner.duplicates
}

struct DuplicateScanner<'a> {
    text: &'a str,
    position: usize,
    duplicates: Vec<String>,
}

impl DuplicateScanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.position).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r' | b'\n')) {
            self.position += 1;
        }
    }

    fn value(&mut self, path: &str) -> Option<()> {
        self.skip_whitespace();
        match self.peek()? {
            b'{' => self.object(path),
            b'[' => self.array(path),
            b'"' => self.string().map(drop),
            _ => {
                while !matches!(
                    self.peek(),
                    None | Some(b',' | b']' | b'}' | b' ' | b'\t' | b'\r' | b'\n')
                ) {
                    self.position += 1;
                }
                Some(())
            }
        }
    }

    fn object(&mut self, path: &str) -> Option<()> {
        self.position += 1;
        let mut seen: Vec<String> = Vec::new();
        loop {
            self.skip_whitespace();
            if self.peek()? == b'}' {
                self.position += 1;
                return Some(());
            }
            let key = self.string()?;
            let field_path = child_path(path, &key);
            if seen.contains(&key) {
                if !self.duplicates.contains(&field_path) {
                    self.duplicates.push(field_path.clone());
                }
            } else {
                seen.push(key);
            }
            self.skip_whitespace();
            if self.peek()? != b':' {
                return None;
            }
            self.position += 1;
            self.value(&field_path)?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.position += 1,
                b'}' => {
                    self.position += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self, path: &str) -> Option<()> {
        self.position += 1;
        let mut index = 0;
        loop {
            self.skip_whitespace();
            if self.peek()? == b']' {
                self.position += 1;
                return Some(());
            }
            self.value(&format!("{path}[{index}]"))?;
            index += 1;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.position += 1,
                b']' => {
                    self.position += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Reads a string token and decodes its escapes with serde_json.
    fn string(&mut self) -> Option<String> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.position;
        self.position += 1;
        loop {
            match self.peek()? {
                b'\\' => self.position += 2,
                b'"' => {
                    self.position += 1;
                    return serde_json::from_str(self.text.get(start..self.position)?).ok();
                }
                _ => self.position += 1,
            }
        }
    }
}

/// A long pattern in a message: its first 80 characters, then "...".
fn shortened(pattern: &str) -> String {
    match pattern.char_indices().nth(80) {
        Some((cut, _)) => format!("{}...", &pattern[..cut]),
        None => pattern.to_string(),
    }
}

/// Every `pattern` in a CRD's version schemas that [`Pattern::check`] refuses, as a field error
/// naming it the way kube-apiserver does
/// (`spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[name].pattern`).
/// Walks the schemas with an explicit stack.
pub fn check_crd_patterns(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut pending: Vec<(String, &Value)> = Vec::new();
    for (index, version) in crd["spec"]["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        pending.push((
            format!("spec.versions[{index}].schema.openAPIV3Schema"),
            &version["schema"]["openAPIV3Schema"],
        ));
    }
    while let Some((path, schema)) = pending.pop() {
        let Some(fields) = schema.as_object() else {
            continue;
        };
        if let Some(pattern) = fields.get("pattern").and_then(Value::as_str) {
            if let Err(problem) = Pattern::check(pattern) {
                errors.push(FieldError::new(
                    &format!("{path}.pattern"),
                    REASON_INVALID,
                    format!(
                        "Invalid value: {}: must be a valid regular expression, but isn't: {problem}",
                        Value::String(shortened(pattern))
                    ),
                ));
            }
        }
        if let Some(properties) = fields.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                pending.push((format!("{path}.properties[{name}]"), property));
            }
        }
        for single in ["items", "additionalProperties", "not"] {
            if let Some(inner) = fields.get(single) {
                pending.push((format!("{path}.{single}"), inner));
            }
        }
        for list in ["allOf", "anyOf", "oneOf"] {
            for (index, inner) in fields
                .get(list)
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .enumerate()
            {
                pending.push((format!("{path}.{list}[{index}]"), inner));
            }
        }
    }
    errors
}

// ---------------------------------------------------------------------------------------------
// A small regular-expression engine for `pattern`.
// ---------------------------------------------------------------------------------------------

/// A compiled `pattern`. Supports the subset CRDs use in practice: literals, `.`, character
/// classes (`[a-z0-9-]`, `[^...]`), `\d \w \s \D \W \S`, `\b`, escaped punctuation, anchors
/// `^ $`, groups `( )` and `(?: )`, alternation `|`, and quantifiers `* + ? {m} {m,} {m,n}`
/// (lazy `?` suffixes accepted and treated as greedy, since only match/no-match matters).
///
/// It compiles to a small instruction list and runs it as a Thompson/Pike simulation: every
/// possible thread advances one character at a time, so there is no exponential backtracking.
/// Like Go's `regexp.MatchString` (and JavaScript's `test`) the match is unanchored: `^`/`$`
/// in the pattern anchor it.
#[derive(Debug, Clone)]
pub struct Pattern {
    program: Vec<Instruction>,
}

#[derive(Debug, Clone)]
enum Instruction {
    Char(char),
    AnyExceptNewline,
    Class(CharClass),
    Split(usize, usize),
    Jump(usize),
    TextStart,
    TextEnd,
    WordBoundary(bool),
    Match,
}

#[derive(Debug, Clone, Default)]
struct CharClass {
    ranges: Vec<(char, char)>,
    negated: bool,
}

impl CharClass {
    fn contains(&self, character: char) -> bool {
        let inside = self
            .ranges
            .iter()
            .any(|&(low, high)| low <= character && character <= high);
        inside != self.negated
    }

    fn digits() -> Vec<(char, char)> {
        vec![('0', '9')]
    }
    fn word() -> Vec<(char, char)> {
        vec![('0', '9'), ('A', 'Z'), ('_', '_'), ('a', 'z')]
    }
    fn space() -> Vec<(char, char)> {
        vec![('\t', '\r'), (' ', ' ')]
    }
}

#[derive(Debug, Clone)]
enum Node {
    Empty,
    Literal(char),
    Any,
    Class(CharClass),
    TextStart,
    TextEnd,
    WordBoundary(bool),
    Concat(Vec<Node>),
    Alternate(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

/// Go's regexp refuses repeat counts above 1000; so do we.
const MAX_REPEAT: u32 = 1000;
/// A bound on compiled size so a pattern like `(a{1000}){1000}` cannot exhaust memory.
const MAX_PROGRAM: usize = 50_000;
/// The longest pattern a CRD may declare. Go has no such limit; real patterns are a few dozen
/// characters, and this bounds the parser's work on a CRD write.
pub const MAX_PATTERN_CHARS: usize = 10_000;
/// The deepest nesting of groups a pattern may have. Go's regexp allows 1000 (`maxHeight`,
/// added against stack exhaustion, CVE-2022-24921); the parser here recurses about three
/// frames per group on a 2 MiB tokio worker stack, and no real CRD pattern nests beyond a few.
pub const MAX_PATTERN_NESTING: usize = 100;

/// Why a pattern was refused when its CRD was written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::enum_variant_names)] // each names the limit broken: too long, too deep, too large
pub enum PatternError {
    TooLong {
        characters: usize,
    },
    TooDeep {
        depth: usize,
    },
    /// It compiles to more than the engine's program limit.
    TooLarge,
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatternError::TooLong { characters } => write!(
                f,
                "the pattern is {characters} characters long; the sandbox accepts at most {MAX_PATTERN_CHARS}"
            ),
            PatternError::TooDeep { depth } => write!(
                f,
                "groups nest {depth} deep; the sandbox accepts at most {MAX_PATTERN_NESTING}"
            ),
            PatternError::TooLarge => write!(
                f,
                "its repetitions expand to more than {MAX_PROGRAM} instructions"
            ),
        }
    }
}

/// The step budget ran out before the match was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

/// How deep the groups of `pattern` nest, found by a scan without recursion (escapes and
/// character classes skipped), before the recursive parser sees it.
fn group_nesting(pattern: &str) -> usize {
    let (mut depth, mut deepest, mut in_class) = (0usize, 0usize, false);
    let mut characters = pattern.chars();
    while let Some(character) = characters.next() {
        match character {
            '\\' => {
                characters.next();
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ')' if !in_class => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

impl Pattern {
    /// Compiles `pattern`, or `None` if it uses syntax this engine does not support
    /// (backreferences, lookaround, named classes such as `\p{L}` or `[[:alpha:]]`, flags)
    /// or breaks one of [`Pattern::check`]'s limits.
    pub fn compile(pattern: &str) -> Option<Pattern> {
        Pattern::build(pattern).ok().flatten()
    }

    /// Whether a CRD may declare `pattern`: within the length, nesting and size limits.
    /// Syntax this engine does not support passes (instances then skip that check).
    pub fn check(pattern: &str) -> Result<(), PatternError> {
        Pattern::build(pattern).map(drop)
    }

    /// `Ok(None)`: syntax this engine does not support.
    fn build(pattern: &str) -> Result<Option<Pattern>, PatternError> {
        let characters = pattern.chars().count();
        if characters > MAX_PATTERN_CHARS {
            return Err(PatternError::TooLong { characters });
        }
        let depth = group_nesting(pattern);
        if depth > MAX_PATTERN_NESTING {
            return Err(PatternError::TooDeep { depth });
        }
        let mut parser = RegexParser {
            characters: pattern.chars().collect(),
            position: 0,
        };
        let Some(node) = parser.parse_alternation() else {
            return Ok(None);
        };
        if parser.position != parser.characters.len() {
            return Ok(None); // an unbalanced ')'
        }
        let mut program = Vec::new();
        emit(&node, &mut program).ok_or(PatternError::TooLarge)?;
        program.push(Instruction::Match);
        Ok(Some(Pattern { program }))
    }

    /// Whether the pattern matches anywhere in `text` (with an unlimited budget).
    #[cfg(test)]
    pub fn is_match(&self, text: &str) -> bool {
        let mut unlimited = usize::MAX;
        self.matches(text, &mut unlimited) == Ok(true)
    }

    /// Whether the pattern matches anywhere in `text`, spending at most `steps_left` steps:
    /// at most (instructions × characters), linear in the text.
    pub fn matches(&self, text: &str, steps_left: &mut usize) -> Result<bool, OverBudget> {
        let characters: Vec<char> = text.chars().collect();
        let size = self.program.len();
        let mut current = ThreadSet::new(size);
        let mut next = ThreadSet::new(size);
        for position in 0..=characters.len() {
            // Unanchored search: a new thread starts at every position.
            if self.add_thread(&mut current, 0, position, &characters, steps_left)? {
                return Ok(true);
            }
            let Some(&character) = characters.get(position) else {
                break;
            };
            next.clear();
            for index in 0..current.list.len() {
                let pc = current.list[index];
                let advances = match &self.program[pc] {
                    Instruction::Char(wanted) => *wanted == character,
                    Instruction::AnyExceptNewline => character != '\n',
                    Instruction::Class(class) => class.contains(character),
                    _ => false,
                };
                if advances
                    && self.add_thread(&mut next, pc + 1, position + 1, &characters, steps_left)?
                {
                    return Ok(true);
                }
            }
            std::mem::swap(&mut current, &mut next);
        }
        Ok(false)
    }

    /// Adds `pc` and everything reachable from it without consuming input. Returns true once
    /// `Match` is reachable.
    fn add_thread(
        &self,
        set: &mut ThreadSet,
        start: usize,
        position: usize,
        characters: &[char],
        steps_left: &mut usize,
    ) -> Result<bool, OverBudget> {
        let mut stack = vec![start];
        while let Some(pc) = stack.pop() {
            *steps_left = steps_left.checked_sub(1).ok_or(OverBudget)?;
            if !set.insert(pc) {
                continue;
            }
            match &self.program[pc] {
                Instruction::Match => return Ok(true),
                Instruction::Jump(target) => stack.push(*target),
                Instruction::Split(first, second) => {
                    stack.push(*second);
                    stack.push(*first);
                }
                Instruction::TextStart if position == 0 => stack.push(pc + 1),
                Instruction::TextEnd if position == characters.len() => stack.push(pc + 1),
                Instruction::WordBoundary(wanted) => {
                    let is_word = |c: Option<&char>| {
                        c.is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                    };
                    let before = position.checked_sub(1).and_then(|p| characters.get(p));
                    let at_boundary = is_word(before) != is_word(characters.get(position));
                    if at_boundary == *wanted {
                        stack.push(pc + 1);
                    }
                }
                _ => {}
            }
        }
        Ok(false)
    }
}

struct ThreadSet {
    list: Vec<usize>,
    member: Vec<bool>,
}

impl ThreadSet {
    fn new(size: usize) -> ThreadSet {
        ThreadSet {
            list: Vec::with_capacity(size),
            member: vec![false; size],
        }
    }
    fn insert(&mut self, pc: usize) -> bool {
        if self.member[pc] {
            return false;
        }
        self.member[pc] = true;
        self.list.push(pc);
        true
    }
    fn clear(&mut self) {
        for &pc in &self.list {
            self.member[pc] = false;
        }
        self.list.clear();
    }
}

fn emit(node: &Node, program: &mut Vec<Instruction>) -> Option<()> {
    if program.len() > MAX_PROGRAM {
        return None;
    }
    match node {
        Node::Empty => {}
        Node::Literal(c) => program.push(Instruction::Char(*c)),
        Node::Any => program.push(Instruction::AnyExceptNewline),
        Node::Class(class) => program.push(Instruction::Class(class.clone())),
        Node::TextStart => program.push(Instruction::TextStart),
        Node::TextEnd => program.push(Instruction::TextEnd),
        Node::WordBoundary(wanted) => program.push(Instruction::WordBoundary(*wanted)),
        Node::Concat(parts) => {
            for part in parts {
                emit(part, program)?;
            }
        }
        Node::Alternate(branches) => {
            let mut jumps_to_end = Vec::new();
            for (index, branch) in branches.iter().enumerate() {
                if index + 1 < branches.len() {
                    let split = program.len();
                    program.push(Instruction::Split(split + 1, 0));
                    emit(branch, program)?;
                    jumps_to_end.push(program.len());
                    program.push(Instruction::Jump(0));
                    let next_branch = program.len();
                    program[split] = Instruction::Split(split + 1, next_branch);
                } else {
                    emit(branch, program)?;
                }
            }
            let end = program.len();
            for jump in jumps_to_end {
                program[jump] = Instruction::Jump(end);
            }
        }
        Node::Repeat { node, min, max } => {
            for _ in 0..*min {
                emit(node, program)?;
            }
            match max {
                None => {
                    let split = program.len();
                    program.push(Instruction::Split(split + 1, 0));
                    emit(node, program)?;
                    program.push(Instruction::Jump(split));
                    let end = program.len();
                    program[split] = Instruction::Split(split + 1, end);
                }
                Some(max) => {
                    let mut splits = Vec::new();
                    for _ in *min..*max {
                        splits.push(program.len());
                        program.push(Instruction::Split(0, 0));
                        emit(node, program)?;
                    }
                    let end = program.len();
                    for split in splits {
                        program[split] = Instruction::Split(split + 1, end);
                    }
                }
            }
        }
    }
    if program.len() > MAX_PROGRAM {
        return None;
    }
    Some(())
}

struct RegexParser {
    characters: Vec<char>,
    position: usize,
}

impl RegexParser {
    fn peek(&self) -> Option<char> {
        self.characters.get(self.position).copied()
    }

    fn parse_alternation(&mut self) -> Option<Node> {
        let mut branches = vec![self.parse_concatenation()?];
        while self.peek() == Some('|') {
            self.position += 1;
            branches.push(self.parse_concatenation()?);
        }
        Some(if branches.len() == 1 {
            branches.remove(0)
        } else {
            Node::Alternate(branches)
        })
    }

    fn parse_concatenation(&mut self) -> Option<Node> {
        let mut parts = Vec::new();
        while let Some(character) = self.peek() {
            if character == '|' || character == ')' {
                break;
            }
            let atom = self.parse_atom()?;
            parts.push(self.parse_quantifier(atom)?);
        }
        Some(match parts.len() {
            0 => Node::Empty,
            1 => parts.remove(0),
            _ => Node::Concat(parts),
        })
    }

    fn parse_atom(&mut self) -> Option<Node> {
        let character = self.peek()?;
        self.position += 1;
        Some(match character {
            '.' => Node::Any,
            '^' => Node::TextStart,
            '$' => Node::TextEnd,
            '(' => {
                if self.peek() == Some('?') {
                    // Only the non-capturing group; lookaround and flags are unsupported.
                    if self.characters.get(self.position + 1) == Some(&':') {
                        self.position += 2;
                    } else {
                        return None;
                    }
                }
                let inner = self.parse_alternation()?;
                if self.peek() != Some(')') {
                    return None;
                }
                self.position += 1;
                inner
            }
            '[' => Node::Class(self.parse_class()?),
            '\\' => self.parse_escape()?,
            '*' | '+' | '?' => return None, // a quantifier with nothing to repeat
            other => Node::Literal(other),
        })
    }

    fn parse_escape(&mut self) -> Option<Node> {
        let escaped = self.peek()?;
        self.position += 1;
        let class = |ranges, negated| Node::Class(CharClass { ranges, negated });
        Some(match escaped {
            'd' => class(CharClass::digits(), false),
            'D' => class(CharClass::digits(), true),
            'w' => class(CharClass::word(), false),
            'W' => class(CharClass::word(), true),
            's' => class(CharClass::space(), false),
            'S' => class(CharClass::space(), true),
            'b' => Node::WordBoundary(true),
            'B' => Node::WordBoundary(false),
            'n' => Node::Literal('\n'),
            't' => Node::Literal('\t'),
            'r' => Node::Literal('\r'),
            'f' => Node::Literal('\x0c'),
            'v' => Node::Literal('\x0b'),
            c if c.is_ascii_punctuation() => Node::Literal(c),
            _ => return None, // backreferences, \p{..}, \x.., \u.. and friends
        })
    }

    fn parse_class(&mut self) -> Option<CharClass> {
        let mut class = CharClass::default();
        if self.peek() == Some('^') {
            class.negated = true;
            self.position += 1;
        }
        let mut first = true;
        loop {
            let character = self.peek()?;
            self.position += 1;
            if character == ']' && !first {
                return Some(class);
            }
            first = false;
            let low = match character {
                '[' if self.peek() == Some(':') => return None, // [[:alpha:]]
                '\\' => {
                    let escaped = self.peek()?;
                    self.position += 1;
                    match escaped {
                        'd' => {
                            class.ranges.extend(CharClass::digits());
                            continue;
                        }
                        'w' => {
                            class.ranges.extend(CharClass::word());
                            continue;
                        }
                        's' => {
                            class.ranges.extend(CharClass::space());
                            continue;
                        }
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        c if c.is_ascii_punctuation() => c,
                        _ => return None, // \D \W \S inside a class, \p{..}, \x..
                    }
                }
                other => other,
            };
            // A range needs a '-' followed by something other than the closing ']'.
            let is_range = self.peek() == Some('-')
                && self
                    .characters
                    .get(self.position + 1)
                    .is_some_and(|&c| c != ']');
            if is_range {
                self.position += 1;
                let mut high = self.peek()?;
                self.position += 1;
                if high == '\\' {
                    high = self.peek().filter(char::is_ascii_punctuation)?;
                    self.position += 1;
                }
                if high < low {
                    return None;
                }
                class.ranges.push((low, high));
            } else {
                class.ranges.push((low, low));
            }
        }
    }

    /// At most one quantifier (plus a lazy `?`) after an atom.
    fn parse_quantifier(&mut self, atom: Node) -> Option<Node> {
        let (min, max) = match self.peek() {
            Some('*') => {
                self.position += 1;
                (0, None)
            }
            Some('+') => {
                self.position += 1;
                (1, None)
            }
            Some('?') => {
                self.position += 1;
                (0, Some(1))
            }
            Some('{') => match self.parse_counted_repeat() {
                CountedRepeat::Bounds(min, max) => (min, max),
                // Not a valid `{m,n}`: the '{' is an ordinary character, as in Go.
                CountedRepeat::Literal => return Some(atom),
                CountedRepeat::TooLarge => return None,
            },
            _ => return Some(atom),
        };
        if self.peek() == Some('?') {
            self.position += 1; // lazy: same match/no-match answer
        }
        // Go refuses stacked repetitions (`a**`, `a{2}{2}`: "invalid nested repetition
        // operator"); refusing them here also keeps the tree as shallow as the groups.
        let stacked = match self.peek() {
            Some('*' | '+' | '?') => true,
            Some('{') => {
                let start = self.position;
                let repeat = self.parse_counted_repeat();
                self.position = start;
                !matches!(repeat, CountedRepeat::Literal)
            }
            _ => false,
        };
        if stacked {
            return None;
        }
        Some(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
        })
    }

    /// Parses `{m}`, `{m,}` or `{m,n}` at the current '{'; leaves the position alone if the
    /// text is not a repeat at all.
    fn parse_counted_repeat(&mut self) -> CountedRepeat {
        let start = self.position;
        let Some(close) = self.characters[start..].iter().position(|&c| c == '}') else {
            return CountedRepeat::Literal;
        };
        let close = close + start;
        let inside: String = self.characters[start + 1..close].iter().collect();
        let number = |text: &str| -> Option<u64> {
            if text.is_empty() || text.len() > 9 || !text.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            text.parse().ok()
        };
        let (min, max) = match inside.split_once(',') {
            None => match number(&inside) {
                Some(exact) => (exact, Some(exact)),
                None => return CountedRepeat::Literal,
            },
            Some((low, "")) => match number(low) {
                Some(low) => (low, None),
                None => return CountedRepeat::Literal,
            },
            Some((low, high)) => match (number(low), number(high)) {
                (Some(low), Some(high)) if low <= high => (low, Some(high)),
                (Some(_), Some(_)) => return CountedRepeat::TooLarge,
                _ => return CountedRepeat::Literal,
            },
        };
        if min > u64::from(MAX_REPEAT) || max.is_some_and(|max| max > u64::from(MAX_REPEAT)) {
            return CountedRepeat::TooLarge;
        }
        self.position = close + 1;
        CountedRepeat::Bounds(min as u32, max.map(|max| max as u32))
    }
}

enum CountedRepeat {
    Bounds(u32, Option<u32>),
    /// Not repeat syntax: the '{' is matched literally.
    Literal,
    /// Repeat syntax Go would reject (over 1000, or `{3,2}`).
    TooLarge,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["size", "version"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 9},
                        "version": {"type": "string", "enum": ["14", "15", "16"]},
                        "name": {"type": "string", "pattern": "^[a-z]([-a-z0-9]*[a-z0-9])?$", "minLength": 2, "maxLength": 10},
                        "port": {"x-kubernetes-int-or-string": true},
                        "ratio": {"type": "number", "minimum": 0, "maximum": 1, "exclusiveMaximum": true},
                        "databases": {
                            "type": "array", "maxItems": 2, "minItems": 1,
                            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
                        },
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "note": {"type": "string", "nullable": true}
                    }
                },
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
            }
        })
    }

    fn object(spec: Value) -> Value {
        json!({"apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
               "metadata": {"name": "db1", "anything": {"goes": true}}, "spec": spec})
    }

    /// A well-formed object has no errors, and metadata's own fields are not checked.
    #[test]
    fn valid_object_passes() {
        let errors = validate(
            &cluster_schema(),
            &object(
                json!({"size": 3, "version": "16", "name": "db-1", "port": "pg", "ratio": 0.5,
                           "databases": [{"name": "app"}], "labels": {"a": "b"},
                           "extra": {"free": [1, {"x": null}]}, "note": null}),
            ),
        );
        assert_eq!(errors, vec![]);
    }

    /// `size: "three"` is a type error worded exactly like the API server's.
    #[test]
    fn wrong_type_names_the_field() {
        let errors = validate(
            &cluster_schema(),
            &object(json!({"size": "three", "version": "16"})),
        );
        assert_eq!(
            errors,
            vec![FieldError {
                field: "spec.size".into(),
                reason: "FieldValueTypeInvalid".into(),
                message: "Invalid value: \"string\": spec.size in body must be of type integer: \"string\"".into(),
            }]
        );
    }

    /// `size: 0` under `minimum: 1` is FieldValueInvalid with the bound in the message.
    #[test]
    fn below_minimum() {
        let errors = validate(
            &cluster_schema(),
            &object(json!({"size": 0, "version": "16"})),
        );
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "spec.size");
        assert_eq!(errors[0].reason, "FieldValueInvalid");
        assert_eq!(
            errors[0].message,
            "Invalid value: 0: spec.size in body should be greater than or equal to 1"
        );
        let above = validate(
            &cluster_schema(),
            &object(json!({"size": 10, "version": "16"})),
        );
        assert_eq!(
            above[0].message,
            "Invalid value: 10: spec.size in body should be less than or equal to 9"
        );
    }

    /// A missing required field is FieldValueRequired at its own path.
    #[test]
    fn required_missing() {
        let errors = validate(&cluster_schema(), &object(json!({"size": 3})));
        assert_eq!(
            errors,
            vec![FieldError {
                field: "spec.version".into(),
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
            }]
        );
        let missing_spec = validate(
            &json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object"}}}),
            &json!({"apiVersion": "v1", "kind": "X", "metadata": {}}),
        );
        assert_eq!(missing_spec[0].field, "spec");
    }

    /// Enum, string length, pattern, exclusive bounds, int-or-string, arrays, maps, nullable.
    #[test]
    fn each_keyword_reports() {
        let schema = cluster_schema();
        let errors = validate(
            &schema,
            &object(
                json!({"size": 3, "version": "9", "name": "Bad_Name_Too_Long", "port": true,
                           "ratio": 1, "databases": [{"name": 1}, {}, {"name": "c"}],
                           "labels": {"a": 1}, "note": null, "extra": "not an object"}),
            ),
        );
        let by_field: Vec<(String, String, String)> = errors
            .iter()
            .map(|e| (e.field.clone(), e.reason.clone(), e.message.clone()))
            .collect();
        let expect = |field: &str, reason: &str, message: &str| {
            assert!(
                by_field.contains(&(field.into(), reason.into(), message.into())),
                "missing {field} {reason} {message}\n got {by_field:#?}"
            );
        };
        expect(
            "spec.version",
            "FieldValueNotSupported",
            "Unsupported value: \"9\": supported values: \"14\", \"15\", \"16\"",
        );
        expect(
            "spec.name",
            "FieldValueTooLong",
            "Too long: may not be more than 10 bytes",
        );
        expect("spec.name", "FieldValueInvalid", "Invalid value: \"Bad_Name_Too_Long\": spec.name in body should match '^[a-z]([-a-z0-9]*[a-z0-9])?$'");
        expect("spec.port", "FieldValueTypeInvalid", "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"");
        expect(
            "spec.ratio",
            "FieldValueInvalid",
            "Invalid value: 1: spec.ratio in body should be less than 1",
        );
        expect(
            "spec.databases",
            "FieldValueTooMany",
            "Too many: 3: must have at most 2 items",
        );
        expect("spec.databases[0].name", "FieldValueTypeInvalid", "Invalid value: \"integer\": spec.databases[0].name in body must be of type string: \"integer\"");
        expect(
            "spec.databases[1].name",
            "FieldValueRequired",
            "Required value",
        );
        expect(
            "spec.labels.a",
            "FieldValueTypeInvalid",
            "Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\"",
        );
        expect(
            "spec.extra",
            "FieldValueTypeInvalid",
            "Invalid value: \"string\": spec.extra in body must be of type object: \"string\"",
        );
        assert_eq!(errors.len(), 10, "{by_field:#?}");
    }

    /// Too-short strings and too-few items use kube-openapi's "should be at least" wording.
    #[test]
    fn minimums_for_strings_and_lists() {
        let errors = validate(
            &cluster_schema(),
            &object(json!({"size": 1, "version": "16", "name": "a", "databases": []})),
        );
        let messages: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        assert!(
            messages.contains(
                &"Invalid value: \"a\": spec.name in body should be at least 2 chars long"
            ),
            "{messages:?}"
        );
        assert!(
            messages
                .contains(&"Invalid value: 0: spec.databases in body should have at least 1 items"),
            "{messages:?}"
        );
    }

    /// A null in a non-nullable field is a type error; in a nullable one it is accepted.
    #[test]
    fn nulls_are_type_errors_unless_nullable() {
        let candidate = object(json!({"size": null, "version": "16", "note": null}));
        let errors = validate(&cluster_schema(), &candidate);
        assert_eq!(
            errors
                .iter()
                .map(|e| e.message.as_str())
                .collect::<Vec<_>>(),
            ["Invalid value: \"null\": spec.size in body must be of type integer: \"null\""]
        );
    }

    /// Metadata fields at the root are only type-checked.
    #[test]
    fn root_metadata_fields_are_type_checked_only() {
        let errors = validate(
            &json!({"type": "object", "properties": {"spec": {"type": "object"}}}),
            &json!({"apiVersion": 1, "kind": "X", "metadata": "oops", "spec": {}}),
        );
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, vec!["apiVersion", "metadata"]);
    }

    /// Pruning removes undeclared fields, reports their paths, and respects the exceptions.
    #[test]
    fn prune_removes_unknown_fields() {
        let mut candidate = object(json!({
            "size": 3, "colour": "blue",
            "databases": [{"name": "a", "owner": "me"}],
            "labels": {"free": "form"},
            "extra": {"anything": {"at": "all"}}
        }));
        candidate["topLevel"] = json!(1);
        let removed = prune(&cluster_schema(), &mut candidate);
        assert_eq!(
            removed,
            vec![
                "metadata.anything",
                "spec.colour",
                "spec.databases[0].owner",
                "topLevel"
            ]
        );
        assert_eq!(candidate["metadata"], json!({"name": "db1"}));
        assert_eq!(candidate["spec"]["extra"]["anything"], json!({"at": "all"}));
        assert_eq!(candidate["spec"]["labels"], json!({"free": "form"}));
        assert!(candidate["spec"].get("colour").is_none());
        assert_eq!(
            prune(&cluster_schema(), &mut candidate),
            Vec::<String>::new()
        );
    }

    /// Embedded resources keep their apiVersion/kind/metadata when pruned.
    #[test]
    fn prune_keeps_embedded_resource_metadata() {
        let schema = json!({"type": "object", "properties": {"template": {
            "type": "object", "x-kubernetes-embedded-resource": true,
            "properties": {"spec": {"type": "object"}}}}});
        let mut candidate = json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}, "junk": 1}});
        assert_eq!(prune(&schema, &mut candidate), vec!["template.junk"]);
        assert_eq!(candidate["template"]["kind"], "Pod");
    }

    fn matches(pattern: &str, text: &str) -> bool {
        Pattern::compile(pattern)
            .unwrap_or_else(|| panic!("{pattern} should compile"))
            .is_match(text)
    }

    /// The regex subset CRDs use: anchors, classes, escapes, quantifiers, groups, alternation.
    #[test]
    fn pattern_engine_basics() {
        let dns_label = "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
        assert!(matches(dns_label, "db-1"));
        assert!(!matches(dns_label, "-db"));
        assert!(!matches(dns_label, "db-"));
        assert!(!matches(dns_label, "Db"));
        assert!(matches("^\\d{2,3}$", "123") && !matches("^\\d{2,3}$", "1234"));
        assert!(matches("^\\d{2}$", "12") && !matches("^\\d{2}$", "1"));
        assert!(matches("^a{2,}$", "aaaa") && !matches("^a{2,}$", "a"));
        assert!(matches("^(v|version)\\d+(\\.\\d+)*$", "version1.2.3"));
        assert!(!matches("^(v|version)\\d+(\\.\\d+)*$", "ver1"));
        assert!(matches("^\\w+\\s\\w+$", "hello world"));
        assert!(matches("^[^/]+$", "abc") && !matches("^[^/]+$", "a/b"));
        assert!(matches("colou?r", "my colour") && matches("colou?r", "color!"));
        assert!(matches("^.+@.+\\..+$", "a@b.c") && !matches("^.+@.+\\..+$", "a@b"));
        assert!(matches("^(?:ab)+$", "abab") && !matches("^(?:ab)+$", "aba"));
        assert!(matches("\\bdb\\b", "a db here") && !matches("\\bdb\\b", "adb"));
        assert!(matches("^[-a-z]+$", "a-b") && matches("^[a-z-]+$", "a-b"));
        assert!(matches("^[]a]+$", "]a]"));
        assert!(matches("x{", "x{") && matches("^a{,2}$", "a{,2}"));
        assert!(matches("^$", "") && !matches("^$", "a"));
        assert!(matches("^[0-9]+(Mi|Gi)$", "10Gi") && !matches("^[0-9]+(Mi|Gi)$", "10Ti"));
        assert!(matches("^(a|)$", "") && matches("^(a*)*$", "aaaa"));
    }

    /// A pathological pattern runs in linear time instead of backtracking exponentially.
    #[test]
    fn pattern_engine_has_no_catastrophic_backtracking() {
        let text = format!("{}b", "a".repeat(5_000));
        assert!(!matches("^(a+)+$", &text));
        assert!(!matches("^(a|aa)*c$", &text));
    }

    /// Deep groups, stacked repeats and over-long patterns are refused by `check`, before the
    /// recursive parser runs; a CRD naming one gets a field error at its pattern.
    #[test]
    fn pattern_limits_are_checked_without_recursion() {
        let deep = format!("{}a{}", "(".repeat(4000), ")".repeat(4000));
        assert_eq!(
            Pattern::check(&deep),
            Err(PatternError::TooDeep { depth: 4000 })
        );
        assert!(Pattern::check(&"a".repeat(MAX_PATTERN_CHARS + 1)).is_err());
        assert!(Pattern::compile(&format!("a{}", "{1}".repeat(10_000))).is_none());
        assert!(Pattern::compile("[(((((]").is_some());
        let crd = json!({"spec": {"versions": [{"schema": {"openAPIV3Schema": {
            "properties": {"spec": {"properties": {"name": {"type": "string", "pattern": deep}}}}}}}]}});
        let errors = check_crd_patterns(&crd);
        assert_eq!(errors.len(), 1);
        assert_eq!(
            errors[0].field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[name].pattern"
        );
        assert!(errors[0]
            .message
            .contains("must be a valid regular expression"));
    }

    /// A pattern too costly for a value runs out of budget quickly and names the field.
    #[test]
    fn costly_patterns_run_out_of_budget() {
        let schema = json!({"type": "object", "properties": {"name": {
            "type": "string", "pattern": "(?:[a-z]{0,1000}){0,23}0"}}});
        let errors = validate(&schema, &json!({"name": "a".repeat(20_000)}));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "name");
        assert!(
            errors[0].message.contains("gave up"),
            "{}",
            errors[0].message
        );
        let errors = validate(&schema, &json!({"name": "abc0"}));
        assert!(errors.is_empty(), "{errors:?}");
    }

    /// Unsupported syntax does not compile, and validation then treats the pattern as matching.
    #[test]
    fn unsupported_patterns_are_skipped() {
        for pattern in [
            "(?=a)",
            "(a)\\1",
            "\\p{L}",
            "[[:alpha:]]",
            "(?i)abc",
            "a**",
            "(a",
            "a)",
            "*a",
            "a{1001}",
        ] {
            assert!(
                Pattern::compile(pattern).is_none(),
                "{pattern} should not compile"
            );
        }
        let schema = json!({"type": "string", "pattern": "(?i)^abc$"});
        assert_eq!(validate(&schema, &json!("ABC")), vec![]);
    }

    /// Unknown metadata fields are pruned too; known ones stay.
    #[test]
    fn prune_drops_unknown_metadata_fields() {
        let mut candidate = object(json!({"size": 1}));
        let removed = prune(&cluster_schema(), &mut candidate);
        assert_eq!(removed, vec!["metadata.anything"]);
        assert_eq!(candidate["metadata"], json!({"name": "db1"}));
    }

    /// Duplicate keys are found at any depth, once each, with list indices in the path.
    #[test]
    fn finds_duplicate_fields() {
        let body = r#"{"spec": {"size": 1, "size": 2, "size": 3, "dbs": [{"n": "a", "n": "b"}, {"n": "c"}],
                       "s\u0069ze": 4}, "kind": "X", "x": "{\"a\":1,\"a\":2}", "kind": "Y"}"#;
        assert_eq!(
            duplicate_fields(body),
            vec!["spec.size", "spec.dbs[0].n", "kind"]
        );
        assert_eq!(
            duplicate_fields(r#"{"a": [1, 2, {"b": true}], "c": null}"#),
            Vec::<String>::new()
        );
        assert_eq!(duplicate_fields(r#"{"a": 1, "a": "#), vec!["a"]);
        assert_eq!(duplicate_fields(""), Vec::<String>::new());
    }

    /// The Strict 400 message names the kind, version and every problem.
    #[test]
    fn strict_message_format() {
        let problems = vec![
            unknown_field_message("spec.colour"),
            duplicate_field_message("spec.size"),
        ];
        assert_eq!(
            strict_decoding_message("PostgresCluster", "v1", &problems),
            "PostgresCluster in version \"v1\" cannot be handled as a PostgresCluster: strict decoding error: unknown field \"spec.colour\", duplicate field \"spec.size\""
        );
    }
}
