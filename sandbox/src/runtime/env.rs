//! A container's environment, as the kubelet builds it: `envFrom` first, then `env` (which wins),
//! values from Secrets, ConfigMaps and the pod's own fields, and `$(VAR)` references expanded.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A reference to a missing Secret or key (not `optional`)
//! stops the container from starting: the kubelet reports `CreateContainerConfigError` with the
//! messages below and tries again later, so creating the Secret afterwards starts the pod.

use std::collections::BTreeMap;

use base64::Engine;
use serde_json::Value;

/// Objects the environment may read, looked up in the pod's namespace.
pub(crate) trait Lookup {
    fn secret(&self, name: &str) -> Option<Value>;
    fn config_map(&self, name: &str) -> Option<Value>;
}

/// The kubelet's reason text for `CreateContainerConfigError`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConfigError(pub(crate) String);

/// `(name, value)` in the order the kubelet sets them; later entries override earlier ones.
/// A `value`'s `$(VAR)` may name a variable defined before it or one of `services` (the
/// Service variables the container gets; its own win), as the kubelet's mapping reads them.
pub(crate) fn resolve(
    pod: &Value,
    container: &Value,
    pod_ip: &str,
    services: &[(String, String)],
    objects: &dyn Lookup,
) -> Result<Vec<(String, String)>, ConfigError> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut resolved: Vec<(String, String)> = Vec::new();
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        let (kind, reference) = if source["secretRef"].is_object() {
            ("secret", &source["secretRef"])
        } else {
            ("configmap", &source["configMapRef"])
        };
        let name = reference["name"].as_str().unwrap_or_default();
        let optional = reference["optional"].as_bool() == Some(true);
        let Some(data) = object_data(objects, kind, name) else {
            if optional {
                continue;
            }
            return Err(ConfigError(format!("{kind} \"{name}\" not found")));
        };
        for (key, value) in data {
            resolved.push((format!("{prefix}{key}"), value));
        }
    }
    for variable in container["env"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap_or_default().to_string();
        let from = &variable["valueFrom"];
        let value = if let Some(value) = variable["value"].as_str() {
            // `expand` takes the last definition of a name: the container's own after services'.
            let defined: Vec<(String, String)> =
                services.iter().chain(&resolved).cloned().collect();
            expand(value, &defined)
        } else if from["secretKeyRef"].is_object() {
            match key_ref(
                objects,
                "secret",
                "Secret",
                namespace,
                &from["secretKeyRef"],
            )? {
                Some(value) => value,
                None => continue,
            }
        } else if from["configMapKeyRef"].is_object() {
            match key_ref(
                objects,
                "configmap",
                "ConfigMap",
                namespace,
                &from["configMapKeyRef"],
            )? {
                Some(value) => value,
                None => continue,
            }
        } else if let Some(path) = from["fieldRef"]["fieldPath"].as_str() {
            field_ref(pod, path, pod_ip)?
        } else {
            String::new()
        };
        resolved.push((name, value));
    }
    Ok(resolved)
}

/// One key of a Secret or ConfigMap; Ok(None) when it is missing but `optional`.
fn key_ref(
    objects: &dyn Lookup,
    kind: &str,
    title: &str,
    namespace: &str,
    reference: &Value,
) -> Result<Option<String>, ConfigError> {
    let name = reference["name"].as_str().unwrap_or_default();
    let key = reference["key"].as_str().unwrap_or_default();
    let optional = reference["optional"].as_bool() == Some(true);
    let Some(data) = object_data(objects, kind, name) else {
        return if optional {
            Ok(None)
        } else {
            Err(ConfigError(format!("{kind} \"{name}\" not found")))
        };
    };
    match data.get(key) {
        Some(value) => Ok(Some(value.clone())),
        None if optional => Ok(None),
        None => Err(ConfigError(format!(
            "couldn't find key {key} in {title} {namespace}/{name}"
        ))),
    }
}

/// A Secret's `data` (decoded) or a ConfigMap's `data`, as text.
pub(crate) fn object_data(
    objects: &dyn Lookup,
    kind: &str,
    name: &str,
) -> Option<BTreeMap<String, String>> {
    let object = match kind {
        "secret" => objects.secret(name)?,
        _ => objects.config_map(name)?,
    };
    let mut data = BTreeMap::new();
    for (key, value) in object["data"].as_object().into_iter().flatten() {
        let text = value.as_str().unwrap_or_default();
        let text = if kind == "secret" {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            text.to_string()
        };
        data.insert(key.clone(), text);
    }
    Some(data)
}

/// The downward API fields the sandbox knows.
fn field_ref(pod: &Value, path: &str, pod_ip: &str) -> Result<String, ConfigError> {
    let metadata = &pod["metadata"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    Ok(match path {
        "metadata.name" => text(&metadata["name"]),
        "metadata.namespace" => text(&metadata["namespace"]),
        "metadata.uid" => text(&metadata["uid"]),
        "spec.nodeName" => text(&pod["spec"]["nodeName"]),
        "spec.serviceAccountName" => text(&pod["spec"]["serviceAccountName"]),
        "status.podIP" | "status.hostIP" => pod_ip.to_string(),
        other => {
            let label = other
                .strip_prefix("metadata.labels['")
                .map(|rest| ("labels", rest))
                .or_else(|| {
                    other
                        .strip_prefix("metadata.annotations['")
                        .map(|rest| ("annotations", rest))
                });
            match label.and_then(|(map, rest)| Some((map, rest.strip_suffix("']")?))) {
                Some((map, key)) => text(&metadata[map][key]),
                None => {
                    return Err(ConfigError(format!(
                        "unsupported fieldRef fieldPath {other:?} (the sandbox knows metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'], metadata.annotations['k'], spec.nodeName, spec.serviceAccountName, status.podIP, status.hostIP)"
                    )))
                }
            }
        }
    })
}

/// `$(NAME)` → the value of a variable defined earlier; `$$` → `$` (so `$$(NAME)` → `$(NAME)`);
/// an unknown name, an unclosed `$(` and any other `$` stay as written (Kubernetes' expansion
/// rule, `third_party/forked/golang/expansion`, also used for `command` and `args`).
pub(crate) fn expand(text: &str, defined: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(escaped) = after.strip_prefix('$') {
            out.push('$');
            rest = escaped;
        } else if let Some(inner) = after.strip_prefix('(') {
            match inner.find(')') {
                Some(end) => {
                    let name = &inner[..end];
                    match defined.iter().rev().find(|(n, _)| n == name) {
                        Some((_, value)) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &inner[end + 1..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Objects;
    impl Lookup for Objects {
        fn secret(&self, name: &str) -> Option<Value> {
            (name == "creds").then(|| json!({"data": {"password": "czNjcjN0"}}))
        }
        fn config_map(&self, name: &str) -> Option<Value> {
            (name == "settings").then(|| json!({"data": {"MODE": "fast"}}))
        }
    }

    fn pod() -> Value {
        json!({"metadata": {"name": "pg-0", "namespace": "db", "labels": {"app": "pg"}}})
    }

    #[test]
    fn env_reads_secrets_config_maps_fields_and_expands_references() {
        let container = json!({
            "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "X_"}],
            "env": [
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "GREETING", "value": "$(POD) at $(IP), $$(POD), $(NOPE)"},
                {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
                {"name": "KUBERNETES_SERVICE_PORT", "value": "9999"},
                {"name": "API_AFTER", "value": "$(KUBERNETES_SERVICE_PORT)"}
            ]
        });
        let services = vec![
            (
                "KUBERNETES_SERVICE_HOST".to_string(),
                "127.0.0.1".to_string(),
            ),
            ("KUBERNETES_SERVICE_PORT".to_string(), "8001".to_string()),
        ];
        let env = resolve(&pod(), &container, "127.9.0.2", &services, &Objects).expect("resolves");
        let get = |name: &str| env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(get("X_MODE"), Some("fast"));
        assert_eq!(get("PASSWORD"), Some("s3cr3t"));
        assert_eq!(get("APP"), Some("pg"));
        assert_eq!(get("GREETING"), Some("pg-0 at 127.9.0.2, $(POD), $(NOPE)"));
        assert_eq!(get("API"), Some("https://127.0.0.1:8001"));
        assert_eq!(get("API_AFTER"), Some("9999"), "the container's own wins");
    }

    #[test]
    fn expansion_follows_kubernetes_escapes_and_leaves_the_unknown_alone() {
        let defined = vec![
            ("NAMESPACE".to_string(), "db".to_string()),
            ("NAMESPACE".to_string(), "later-wins".to_string()),
        ];
        for (text, expanded) in [
            ("--namespace=$(NAMESPACE)", "--namespace=later-wins"),
            ("$$(NAMESPACE)", "$(NAMESPACE)"),
            ("$$$(NAMESPACE)", "$later-wins"),
            ("cost: $$5 or $5", "cost: $5 or $5"),
            ("$(UNKNOWN) $(unclosed", "$(UNKNOWN) $(unclosed"),
            ("end$", "end$"),
            ("$()", "$()"),
        ] {
            assert_eq!(expand(text, &defined), expanded, "{text}");
        }
    }

    #[test]
    fn a_missing_secret_or_key_is_the_kubelets_config_error_unless_optional() {
        let missing = json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]});
        assert_eq!(
            resolve(&pod(), &missing, "", &[], &Objects),
            Err(ConfigError("secret \"gone\" not found".into()))
        );
        let no_key = json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "k"}}}]});
        assert_eq!(
            resolve(&pod(), &no_key, "", &[], &Objects),
            Err(ConfigError("couldn't find key k in Secret db/creds".into()))
        );
        let optional = json!({"env": [{"name": "P", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}}]});
        assert_eq!(resolve(&pod(), &optional, "", &[], &Objects), Ok(vec![]));
    }
}
