//! Minimal stand-ins, used until the pure modules from the `sandbox-parts` branch (selector.rs,
//! patch.rs, schema.rs, timefmt.rs, names.rs) are merged. Each function here is the simplest
//! correct subset; the real modules replace them.
//!
//! WORKSHOP.md, "Set-up: the sandbox".

use serde_json::Value;
use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Days since 1970-01-01 → (year, month, day); Howard Hinnant's civil_from_days.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-22T10:04:18Z`: Kubernetes timestamps have second precision and a `Z`.
pub(crate) fn format_rfc3339(unix: i64) -> String {
    let (y, mo, d) = civil_from_days(unix.div_euclid(86_400));
    let secs = unix.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

pub(crate) fn now_rfc3339() -> String {
    format_rfc3339(unix_now())
}

/// Parse `YYYY-MM-DDTHH:MM:SSZ` (fractions and offsets other than Z are not needed here).
pub(crate) fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| text.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(num(0..4)?, num(5..7)?, num(8..10)?);
    Some(days * 86_400 + num(11..13)? * 3600 + num(14..16)? * 60 + num(17..19)?)
}

/// kubectl's short age: `45s`, `5m`, `3h`, `2d3h`, `9d`, `2y`.
pub(crate) fn format_age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=599 => {
            if s % 60 == 0 {
                format!("{}m", s / 60)
            } else {
                format!("{}m{}s", s / 60, s % 60)
            }
        }
        600..=10_799 => format!("{}m", s / 60),
        10_800..=28_799 if s / 60 % 60 != 0 => format!("{}h{}m", s / 3600, s / 60 % 60),
        10_800..=172_799 => format!("{}h", s / 3600),
        172_800..=691_199 if s / 3600 % 24 != 0 => format!("{}d{}h", s / 86_400, s / 3600 % 24),
        _ if s < 63_072_000 => format!("{}d", s / 86_400),
        _ => format!("{}y", s / 31_536_000),
    }
}

/// RFC 7386 JSON merge patch: objects merge, `null` deletes, anything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(patch_fields) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            if let Value::Object(target_fields) = target {
                for (key, value) in patch_fields {
                    if value.is_null() {
                        target_fields.remove(key);
                    } else {
                        merge_patch(
                            target_fields.entry(key.clone()).or_insert(Value::Null),
                            value,
                        );
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// `a=b,c!=d,e,!f` equality-based label selectors (set-based ones come with selector.rs).
pub(crate) fn label_selector_matches(selector: &str, labels: Option<&Value>) -> bool {
    let get = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                get(k.trim()) != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k.trim()) == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                get(k.trim()).is_none()
            } else {
                get(term).is_some()
            }
        })
}

/// `metadata.name=x,involvedObject.kind=Pod,status.phase!=Running` over dotted paths.
pub(crate) fn field_selector_matches(selector: &str, object: &Value) -> bool {
    let get = |path: &str| -> String {
        let mut v = object;
        for part in path.split('.') {
            match v.get(part) {
                Some(next) => v = next,
                None => return String::new(),
            }
        }
        match v {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        }
    };
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                get(k.trim()) != v.trim()
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                get(k.trim()) == v.trim()
            } else {
                false
            }
        })
}

/// DNS-1123 subdomain: lower-case alphanumerics, '-' and '.', starting and ending alphanumeric, ≤ 253.
pub(crate) fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty() && name.len() <= 253 && name.split('.').all(is_dns1123_label)
}

/// DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub(crate) fn is_dns1123_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Structural-schema validation subset: type, required, minimum/maximum, enum, nested
/// properties and items. Root `apiVersion`, `kind` and `metadata` are the server's business.
pub(crate) fn validate_schema(schema: &Value, object: &Value) -> Vec<crate::status::StatusCause> {
    let mut causes = Vec::new();
    validate_at(schema, object, "", true, &mut causes);
    causes
}

fn json_type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        _ => true,
    }
}

fn validate_at(
    schema: &Value,
    value: &Value,
    path: &str,
    root: bool,
    causes: &mut Vec<crate::status::StatusCause>,
) {
    let field = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    let cause = |reason: &str, field: &str, message: String| crate::status::StatusCause {
        reason: reason.into(),
        message,
        field: field.into(),
    };
    if value.is_null() && schema["nullable"].as_bool() == Some(true) {
        return;
    }
    if let Some(expected) = schema["type"].as_str() {
        if !json_type_matches(expected, value) {
            causes.push(cause(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: \"{}\": {path} in body must be of type {expected}: \"{}\"",
                    json_type_name(value),
                    json_type_name(value)
                ),
            ));
            return;
        }
    }
    if let Some(minimum) = schema["minimum"].as_f64() {
        if value.as_f64().is_some_and(|v| v < minimum) {
            causes.push(cause("FieldValueInvalid", path,
                format!("Invalid value: {value}: {path} in body should be greater than or equal to {minimum}")));
        }
    }
    if let Some(maximum) = schema["maximum"].as_f64() {
        if value.as_f64().is_some_and(|v| v > maximum) {
            causes.push(cause("FieldValueInvalid", path,
                format!("Invalid value: {value}: {path} in body should be less than or equal to {maximum}")));
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            causes.push(cause(
                "FieldValueNotSupported",
                path,
                format!("Unsupported value: {value}"),
            ));
        }
    }
    if let (Some(required), Some(fields)) = (schema["required"].as_array(), value.as_object()) {
        for name in required.iter().filter_map(Value::as_str) {
            if !(fields.contains_key(name)
                || root && ["apiVersion", "kind", "metadata"].contains(&name))
            {
                causes.push(cause(
                    "FieldValueRequired",
                    &field(name),
                    "Required value".into(),
                ));
            }
        }
    }
    if let (Some(properties), Some(fields)) = (schema["properties"].as_object(), value.as_object())
    {
        for (name, inner) in fields {
            if root && ["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
                continue;
            }
            if let Some(inner_schema) = properties.get(name) {
                validate_at(inner_schema, inner, &field(name), false, causes);
            }
        }
    }
    if let (Some(items), Some(values)) = (schema.get("items"), value.as_array()) {
        for (i, item) in values.iter().enumerate() {
            validate_at(items, item, &format!("{path}[{i}]"), false, causes);
        }
    }
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Remove fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields) and
/// return their dotted paths.
pub(crate) fn prune(schema: &Value, object: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_at(schema, object, "", true, &mut pruned);
    pruned
}

fn prune_at(schema: &Value, value: &mut Value, path: &str, root: bool, pruned: &mut Vec<String>) {
    if schema["x-kubernetes-preserve-unknown-fields"].as_bool() == Some(true) {
        return;
    }
    let join = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    if let Some(fields) = value.as_object_mut() {
        let properties = schema["properties"].as_object();
        let additional = schema.get("additionalProperties");
        let names: Vec<String> = fields.keys().cloned().collect();
        for name in names {
            if root && ["apiVersion", "kind", "metadata"].contains(&name.as_str()) {
                continue;
            }
            match (properties.and_then(|p| p.get(&name)), additional) {
                (Some(inner), _) => {
                    if let Some(v) = fields.get_mut(&name) {
                        prune_at(inner, v, &join(&name), false, pruned);
                    }
                }
                (None, Some(Value::Object(_))) => {
                    if let (Some(v), Some(inner)) = (fields.get_mut(&name), additional) {
                        prune_at(inner, v, &join(&name), false, pruned);
                    }
                }
                (None, Some(Value::Bool(true))) => {}
                (None, _) => {
                    fields.remove(&name);
                    pruned.push(join(&name));
                }
            }
        }
    } else if let (Some(items), Some(values)) = (schema.get("items"), value.as_array_mut()) {
        for (i, item) in values.iter_mut().enumerate() {
            prune_at(items, item, &format!("{path}[{i}]"), false, pruned);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let t = 1_795_000_000;
        let text = format_rfc3339(t);
        assert_eq!(parse_rfc3339(&text), Some(t));
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn ages_look_like_kubectl() {
        assert_eq!(format_age(5), "5s");
        assert_eq!(format_age(300), "5m");
        assert_eq!(format_age(2 * 86_400 + 3 * 3600), "2d3h");
    }
}
