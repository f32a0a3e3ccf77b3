//! How the CRD on the server differs from ours, by meaning rather than bytes, and what that makes
//! of it (`Registration`): what stage 01's `ensure` replaces, and what the later stages' `check`
//! only reports. Support: a learner may skip it on first read — `ensure` in `mod.rs` shows what
//! each outcome leads to; this file is how a server's defaults are told from a real difference.
//!
//! WORKSHOP.md, step 01 ("Who owns the CRD").

use serde_json::{json, Value};

use super::manifest::name_of;
use super::{CrdError, OWNED_SPEC_FIELDS};

/// One place where the CRD on the server differs from ours, named by its path in the CRD's
/// `spec` (`versions[v1]: spec.backup` is the field `spec.backup` of version v1's schema).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Difference {
    /// Ours has it; the server's does not (an older schema).
    Missing(String),
    /// Both have it, with other values.
    Changed(String),
    /// The server's has a version or a schema field that ours does not know (a newer schema).
    Unknown(String),
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Difference::Missing(path) => write!(f, "{path}: missing on the server"),
            Difference::Changed(path) => write!(f, "{path}: differs"),
            Difference::Unknown(path) => write!(f, "{path}: unknown to this build"),
        }
    }
}

/// Every place where the CRD on the server differs from ours in what we own
/// (`OWNED_SPEC_FIELDS`). Fields the server fills in are no difference: `conversion` and
/// `preserveUnknownFields` lie outside what we own, and a field ours does not set is taken as a
/// server default when its value is a zero (`false`, `0`, `""`, `[]`, `{}`, `null`), as Go's
/// `omitempty` writes them. Versions and printer columns are matched by name. An error when the
/// answer is not a CRD at all.
pub fn differences(current: &Value, ours: &Value) -> Result<Vec<Difference>, CrdError> {
    let malformed = |what: &str| CrdError::Malformed {
        crd: name_of(ours),
        what: what.into(),
    };
    let spec = current
        .get("spec")
        .ok_or_else(|| malformed("it has no spec"))?;
    if !spec.is_object() {
        return Err(malformed("its spec is not an object"));
    }
    if !spec["versions"].is_array() {
        return Err(malformed("its spec.versions is not a list"));
    }
    let mut found = Vec::new();
    for field in OWNED_SPEC_FIELDS {
        compare(&spec[field], &ours["spec"][field], field, &mut found);
    }
    Ok(found)
}

/// `differences` for one value, recursively; `path` is where it is, as `versions[v1].schema.…`.
fn compare(server: &Value, ours: &Value, path: &str, found: &mut Vec<Difference>) {
    match (server, ours) {
        (Value::Object(server), Value::Object(ours)) => {
            for (key, value) in ours {
                let here = format!("{path}.{key}");
                match server.get(key) {
                    Some(theirs) => compare(theirs, value, &here, found),
                    None => found.push(Difference::Missing(readable(&here))),
                }
            }
            for (key, value) in server {
                if ours.contains_key(key) || is_zero(value) {
                    continue;
                }
                let here = readable(&format!("{path}.{key}"));
                // A key under a schema's `properties` is a field of the resource.
                if path.ends_with(".properties") {
                    found.push(Difference::Unknown(here));
                } else {
                    found.push(Difference::Changed(here));
                }
            }
        }
        (Value::Array(server_items), Value::Array(our_items))
            if all_named(server_items) && all_named(our_items) =>
        {
            let name = |item: &Value| item["name"].as_str().unwrap_or_default().to_string();
            for item in our_items {
                let here = format!("{path}[{}]", name(item));
                match server_items
                    .iter()
                    .find(|theirs| name(theirs) == name(item))
                {
                    Some(theirs) => compare(theirs, item, &here, found),
                    None => found.push(Difference::Missing(readable(&here))),
                }
            }
            for item in server_items {
                if our_items.iter().any(|ours| name(ours) == name(item)) {
                    continue;
                }
                let here = readable(&format!("{path}[{}]", name(item)));
                // A version ours does not have is a newer release's; a column is only looks.
                if path == "versions" {
                    found.push(Difference::Unknown(here));
                } else {
                    found.push(Difference::Changed(here));
                }
            }
        }
        _ if server == ours => {}
        (Value::Null, _) => found.push(Difference::Missing(readable(path))),
        _ => found.push(Difference::Changed(readable(path))),
    }
}

/// `versions[v1].schema.openAPIV3Schema.properties.spec.properties.backup` →
/// `versions[v1]: spec.backup`: inside a schema, `properties` and `items` are structure, not names.
fn readable(path: &str) -> String {
    let Some((version, schema)) = path.split_once(".schema.openAPIV3Schema") else {
        return path.to_string();
    };
    let mut field = String::new();
    let segments: Vec<&str> = schema.split('.').filter(|s| !s.is_empty()).collect();
    for (index, segment) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        match *segment {
            "properties" if !last => {}
            "items" => field.push_str("[]"),
            _ => {
                if !field.is_empty() {
                    field.push('.');
                }
                field.push_str(segment);
            }
        }
    }
    if field.is_empty() {
        format!("{version}: the schema")
    } else {
        format!("{version}: {field}")
    }
}

/// Whether every item is an object with a string `name` (versions, printer columns).
fn all_named(items: &[Value]) -> bool {
    items.iter().all(|item| item["name"].is_string())
}

/// A value Go's `omitempty` would leave out: what a server writes for a field it defaulted.
fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(flag) => !flag,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(fields) => fields.is_empty(),
    }
}

/// What [`super::ensure`] (stage 01) or [`crate::crd_check::check`] (every later stage) found, and what
/// it did, to the CRD called `crd`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Registration {
    /// There was no CRD of our name: we created it (201).
    Created { crd: String },
    /// The CRD was there as this build defines it (server defaults aside): nothing was written.
    UpToDate { crd: String },
    /// Stage 01 only: the CRD was there with an older schema (stage 01's from before the status
    /// and scale subresources, say): we replaced it with a PUT (200).
    Updated { crd: String },
    /// A later stage found the CRD different from this build's, and left it as it is: the type
    /// is stage 01's (or the administrator's) to change, not every operator's.
    Differs {
        crd: String,
        differences: Vec<Difference>,
    },
    /// The CRD serves versions or fields this build does not know (a newer release installed
    /// it): left as it is by every stage, stage 01 too, which would otherwise downgrade it.
    Newer {
        crd: String,
        differences: Vec<Difference>,
    },
}

impl Registration {
    /// What the CRD `ours` found on the server as `current` makes of it.
    pub(crate) fn found(current: &Value, ours: &Value) -> Result<Registration, CrdError> {
        let differences = differences(current, ours)?;
        let crd = name_of(ours);
        Ok(if differences.is_empty() {
            Registration::UpToDate { crd }
        } else if differences
            .iter()
            .any(|difference| matches!(difference, Difference::Unknown(_)))
        {
            Registration::Newer { crd, differences }
        } else {
            Registration::Differs { crd, differences }
        })
    }

    /// The CRD it is about.
    pub fn crd(&self) -> &str {
        match self {
            Registration::Created { crd }
            | Registration::UpToDate { crd }
            | Registration::Updated { crd }
            | Registration::Differs { crd, .. }
            | Registration::Newer { crd, .. } => crd,
        }
    }

    /// Say once, at info level, each place where the CRD differs and how to update it.
    pub(crate) fn report_differences(&self) {
        let (Registration::Differs { differences, .. } | Registration::Newer { differences, .. }) =
            self
        else {
            return;
        };
        const SHOWN: usize = 8;
        let mut list: Vec<String> = differences
            .iter()
            .take(SHOWN)
            .map(|d| d.to_string())
            .collect();
        if differences.len() > SHOWN {
            list.push(format!("and {} more", differences.len() - SHOWN));
        }
        let how = match self {
            // `ensure` leaves a newer release's CRD alone: replacing it would drop its fields.
            Registration::Newer { .. } => "it is a newer release's, which this build leaves alone",
            _ => "to update it: `cargo run --bin stage01`, or `kubectl apply -f kube/crd.yaml`",
        };
        tracing::info!(
            differences = %list.join("; "),
            "the CustomResourceDefinition on the server differs from this build's; {how}"
        );
    }
}

impl Registration {
    /// What was done, after the CRD's name: `created`, `already up to date`, ...
    pub fn outcome(&self) -> String {
        match self {
            Registration::Created { .. } => "created".into(),
            Registration::UpToDate { .. } => "already up to date".into(),
            Registration::Updated { .. } => "updated: an older schema was replaced".into(),
            Registration::Differs { differences, .. } => format!(
                "found, not as this build defines it ({} {}); left as it is: stage 01 registers the type",
                differences.len(),
                if differences.len() == 1 { "difference" } else { "differences" }
            ),
            Registration::Newer { .. } => "found, newer than this build's (it serves versions or fields this build does not know); left as it is".into(),
        }
    }
}

impl std::fmt::Display for Registration {
    /// The workshop's log line for each outcome.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CustomResourceDefinition {} {}",
            self.crd(),
            self.outcome()
        )
    }
}

/// The PUT body: the CRD as read (its metadata with the resourceVersion, the spec fields the
/// server defaulted, its status, which a PUT leaves unchanged anyway) with our owned fields in.
pub(super) fn replacement(current: Value, ours: &Value) -> Value {
    // Indexing a JSON value that is not an object would panic; a server's answer cannot make us.
    let mut current = if current.is_object() {
        current
    } else {
        json!({})
    };
    if !current["spec"].is_object() {
        current["spec"] = json!({});
    }
    for field in OWNED_SPEC_FIELDS {
        current["spec"][field] = ours["spec"][field].clone();
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_paths_read_as_fields() {
        assert_eq!(
            readable("versions[v1].schema.openAPIV3Schema.properties.status.properties.conditions.items.properties.type"),
            "versions[v1]: status.conditions[].type"
        );
        assert_eq!(
            readable("versions[v1].schema.openAPIV3Schema.properties"),
            "versions[v1]: properties"
        );
        assert_eq!(readable("names.shortNames"), "names.shortNames");
    }
}
