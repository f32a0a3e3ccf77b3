//! Support: skip it on first read — reading a CRD manifest of `kube/` into JSON, and a CRD's own
//! path from its name; what lets step 01's `ensure_crd` register any CRD (the Deployer's too).
//!
//! WORKSHOP.md, step 01, and "Your own operator: the Deployer".

use serde_json::Value;

use super::CRDS_PATH;

/// A CRD manifest of `kube/` (JSON with whole-line `#` comments, which JSON lacks) as JSON. No
/// line of JSON starts with `#`, since a JSON string cannot span lines.
pub fn from_manifest(manifest: &str) -> Result<Value, serde_json::Error> {
    let json: String = manifest
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .collect();
    serde_json::from_str(&json)
}

/// A CRD's own path, from its `metadata.name`.
pub(super) fn path_of(crd: &Value) -> String {
    format!("{CRDS_PATH}/{}", name_of(crd))
}

/// A CRD's `metadata.name`: what its errors and its `Registration` call it.
pub(super) fn name_of(crd: &Value) -> String {
    crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
