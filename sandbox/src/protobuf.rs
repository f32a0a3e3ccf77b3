//! Reading the protobuf bodies kubectl sends. `kubectl create namespace|secret|configmap|
//! serviceaccount|service|deployment|role|rolebinding|clusterrole|clusterrolebinding` POST the
//! object as Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), with no JSON fallback;
//! everything else kubectl sends is JSON. This decodes those kinds (the fields those commands
//! set) into the JSON the rest of the sandbox works on (answers stay JSON: kubectl's Accept
//! allows it).
//!
//! WORKSHOP.md, "Set-up: the sandbox". The wire format: the 4 bytes `k8s\0`, then a
//! `runtime.Unknown` message {1: TypeMeta{1: apiVersion, 2: kind}, 2: raw object bytes}; field
//! numbers come from k8s.io/api's generated.proto.

use base64::Engine;
use serde_json::{json, Map, Value};

/// One field of a protobuf message: its number and its payload.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// Fixed 32/64-bit values: no field used here has one.
    Fixed,
}

/// Iterate over `(number, field)` pairs of one message.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.rest.split_first().ok_or("truncated varint")?;
            self.rest = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.rest.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = match key & 7 {
            0 => Field::Varint(self.varint()?),
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                if self.rest.len() < width {
                    return Err("truncated fixed-width field".into());
                }
                self.rest = &self.rest[width..];
                Field::Fixed
            }
            2 => {
                let length = usize::try_from(self.varint()?).map_err(|_| "length overflow")?;
                if self.rest.len() < length {
                    return Err("truncated length-delimited field".into());
                }
                let (bytes, rest) = self.rest.split_at(length);
                self.rest = rest;
                Field::Bytes(bytes)
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((key >> 3, field)))
    }
}

fn text(bytes: &[u8]) -> Result<String, String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| "a string field is not UTF-8".to_string())
}

/// A `map<string, V>` entry: {1: key, 2: value}.
fn map_entry(bytes: &[u8]) -> Result<(String, &[u8]), String> {
    let mut reader = Reader::new(bytes);
    let (mut key, mut value): (String, &[u8]) = (String::new(), &[]);
    while let Some((number, field)) = reader.next_field()? {
        match (number, field) {
            (1, Field::Bytes(b)) => key = text(b)?,
            (2, Field::Bytes(b)) => value = b,
            _ => {}
        }
    }
    Ok((key, value))
}

fn object_meta(bytes: &[u8]) -> Result<Value, String> {
    let mut metadata = Map::new();
    let mut reader = Reader::new(bytes);
    while let Some((number, field)) = reader.next_field()? {
        let Field::Bytes(b) = field else { continue };
        match number {
            1 => metadata.insert("name".into(), json!(text(b)?)),
            2 => metadata.insert("generateName".into(), json!(text(b)?)),
            3 => metadata.insert("namespace".into(), json!(text(b)?)),
            11 | 12 => {
                let (key, value) = map_entry(b)?;
                let value = text(value)?;
                let name = if number == 11 {
                    "labels"
                } else {
                    "annotations"
                };
                if let Some(map) = metadata
                    .entry(name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    map.insert(key, json!(value));
                }
                None
            }
            14 => {
                let finalizer = text(b)?;
                if let Some(list) = metadata
                    .entry("finalizers")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(json!(finalizer));
                }
                None
            }
            _ => None,
        };
    }
    // Empty strings are how protobuf says "unset".
    metadata.retain(|_, v| v.as_str() != Some(""));
    Ok(Value::Object(metadata))
}

// ---- Kinds described by field tables -------------------------------------------------------
//
// Field numbers come from k8s.io/api's generated.proto files, checked against the bytes
// kubectl v1.32 sends. Go's protobuf encoder writes every non-pointer field, zero or not, so a
// zero `Text`/`Number`/`Flag` means "unset" (JSON's omitempty); pointer fields keep their zeros.

/// How one field's bytes become JSON.
#[derive(Clone, Copy)]
enum Shape {
    /// A string; "" is dropped.
    Text,
    /// An int32/int64; 0 is dropped.
    Number,
    /// A bool; false is dropped.
    Flag,
    /// A pointer to an integer in Go (`replicas`): 0 is a value.
    OptionalNumber,
    /// A pointer to a bool in Go: false is a value.
    OptionalFlag,
    /// `repeated string`, kept as sent: `apiGroups: [""]` names the core group.
    Texts,
    /// `map<string, string>`.
    TextMap,
    /// `map<string, Quantity>` (resource requests and limits); a Quantity is {1: string}.
    Quantities,
    /// ObjectMeta.
    Metadata,
    /// IntOrString {1: type (0 int, 1 string), 2: intVal, 3: strVal}.
    IntOrString,
    /// One nested message; dropped if nothing in it is set.
    Message(&'static [FieldSpec]),
    /// `repeated` nested message.
    Messages(&'static [FieldSpec]),
}

struct FieldSpec {
    number: u64,
    name: &'static str,
    shape: Shape,
}

const fn field(number: u64, name: &'static str, shape: Shape) -> FieldSpec {
    FieldSpec {
        number,
        name,
        shape,
    }
}

use Shape::*;

const LABEL_SELECTOR_REQUIREMENT: &[FieldSpec] = &[
    field(1, "key", Text),
    field(2, "operator", Text),
    field(3, "values", Texts),
];
const LABEL_SELECTOR: &[FieldSpec] = &[
    field(1, "matchLabels", TextMap),
    field(2, "matchExpressions", Messages(LABEL_SELECTOR_REQUIREMENT)),
];
const CONTAINER_PORT: &[FieldSpec] = &[
    field(1, "name", Text),
    field(2, "hostPort", Number),
    field(3, "containerPort", Number),
    field(4, "protocol", Text),
    field(5, "hostIP", Text),
];
const ENV_VAR: &[FieldSpec] = &[field(1, "name", Text), field(2, "value", Text)];
const RESOURCE_REQUIREMENTS: &[FieldSpec] = &[
    field(1, "limits", Quantities),
    field(2, "requests", Quantities),
];
const CONTAINER: &[FieldSpec] = &[
    field(1, "name", Text),
    field(2, "image", Text),
    field(3, "command", Texts),
    field(4, "args", Texts),
    field(5, "workingDir", Text),
    field(6, "ports", Messages(CONTAINER_PORT)),
    field(7, "env", Messages(ENV_VAR)),
    field(8, "resources", Message(RESOURCE_REQUIREMENTS)),
    field(13, "terminationMessagePath", Text),
    field(14, "imagePullPolicy", Text),
    field(16, "stdin", Flag),
    field(17, "stdinOnce", Flag),
    field(18, "tty", Flag),
    field(20, "terminationMessagePolicy", Text),
];
const POD_SPEC: &[FieldSpec] = &[
    field(2, "containers", Messages(CONTAINER)),
    field(3, "restartPolicy", Text),
    field(4, "terminationGracePeriodSeconds", OptionalNumber),
    field(6, "dnsPolicy", Text),
    field(7, "nodeSelector", TextMap),
    field(8, "serviceAccountName", Text),
    field(10, "nodeName", Text),
    field(11, "hostNetwork", Flag),
    field(16, "hostname", Text),
    field(17, "subdomain", Text),
    field(19, "schedulerName", Text),
    field(24, "priorityClassName", Text),
];
const POD_TEMPLATE_SPEC: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(POD_SPEC)),
];
const DEPLOYMENT_SPEC: &[FieldSpec] = &[
    field(1, "replicas", OptionalNumber),
    field(2, "selector", Message(LABEL_SELECTOR)),
    field(3, "template", Message(POD_TEMPLATE_SPEC)),
    field(5, "minReadySeconds", Number),
    field(6, "revisionHistoryLimit", OptionalNumber),
    field(7, "paused", Flag),
    field(9, "progressDeadlineSeconds", OptionalNumber),
];
const DEPLOYMENT: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(DEPLOYMENT_SPEC)),
];
const SERVICE_PORT: &[FieldSpec] = &[
    field(1, "name", Text),
    field(2, "protocol", Text),
    field(3, "port", Number),
    field(4, "targetPort", IntOrString),
    field(5, "nodePort", Number),
    field(6, "appProtocol", Text),
];
const SERVICE_SPEC: &[FieldSpec] = &[
    field(1, "ports", Messages(SERVICE_PORT)),
    field(2, "selector", TextMap),
    field(3, "clusterIP", Text),
    field(4, "type", Text),
    field(5, "externalIPs", Texts),
    field(7, "sessionAffinity", Text),
    field(8, "loadBalancerIP", Text),
    field(10, "externalName", Text),
    field(11, "externalTrafficPolicy", Text),
    field(13, "publishNotReadyAddresses", Flag),
];
const SERVICE: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(SERVICE_SPEC)),
];
const OBJECT_REFERENCE: &[FieldSpec] = &[
    field(1, "kind", Text),
    field(2, "namespace", Text),
    field(3, "name", Text),
    field(5, "apiVersion", Text),
];
const LOCAL_OBJECT_REFERENCE: &[FieldSpec] = &[field(1, "name", Text)];
const SERVICE_ACCOUNT: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "secrets", Messages(OBJECT_REFERENCE)),
    field(3, "imagePullSecrets", Messages(LOCAL_OBJECT_REFERENCE)),
    field(4, "automountServiceAccountToken", OptionalFlag),
];
const POLICY_RULE: &[FieldSpec] = &[
    field(1, "verbs", Texts),
    field(2, "apiGroups", Texts),
    field(3, "resources", Texts),
    field(4, "resourceNames", Texts),
    field(5, "nonResourceURLs", Texts),
];
const ROLE: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "rules", Messages(POLICY_RULE)),
];
const SUBJECT: &[FieldSpec] = &[
    field(1, "kind", Text),
    field(2, "apiGroup", Text),
    field(3, "name", Text),
    field(4, "namespace", Text),
];
const ROLE_REF: &[FieldSpec] = &[
    field(1, "apiGroup", Text),
    field(2, "kind", Text),
    field(3, "name", Text),
];
const ROLE_BINDING: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "subjects", Messages(SUBJECT)),
    field(3, "roleRef", Message(ROLE_REF)),
];

const RESOURCE_ATTRIBUTES: &[FieldSpec] = &[
    field(1, "namespace", Text),
    field(2, "verb", Text),
    field(3, "group", Text),
    field(4, "version", Text),
    field(5, "resource", Text),
    field(6, "subresource", Text),
    field(7, "name", Text),
];
const NON_RESOURCE_ATTRIBUTES: &[FieldSpec] = &[field(1, "path", Text), field(2, "verb", Text)];
const ACCESS_REVIEW_SPEC: &[FieldSpec] = &[
    field(1, "resourceAttributes", Message(RESOURCE_ATTRIBUTES)),
    field(2, "nonResourceAttributes", Message(NON_RESOURCE_ATTRIBUTES)),
];
const RULES_REVIEW_SPEC: &[FieldSpec] = &[field(1, "namespace", Text)];
const BOUND_OBJECT_REFERENCE: &[FieldSpec] = &[
    field(1, "kind", Text),
    field(2, "apiVersion", Text),
    field(3, "name", Text),
    field(4, "uid", Text),
];
const TOKEN_REQUEST_SPEC: &[FieldSpec] = &[
    field(1, "audiences", Texts),
    field(3, "boundObjectRef", Message(BOUND_OBJECT_REFERENCE)),
    field(4, "expirationSeconds", OptionalNumber),
];
/// `kubectl auth can-i` and `kubectl create token` send these (authorization.k8s.io/v1,
/// authentication.k8s.io/v1): {1: metadata, 2: spec}.
const SELF_SUBJECT_ACCESS_REVIEW: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(ACCESS_REVIEW_SPEC)),
];
const SELF_SUBJECT_RULES_REVIEW: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(RULES_REVIEW_SPEC)),
];
const TOKEN_REQUEST: &[FieldSpec] = &[
    field(1, "metadata", Metadata),
    field(2, "spec", Message(TOKEN_REQUEST_SPEC)),
];

/// The field table of a kind `kubectl create <kind>` sends as protobuf, beyond the three
/// decoded by hand below.
fn described_kind(kind: &str) -> Option<&'static [FieldSpec]> {
    Some(match kind {
        "Deployment" => DEPLOYMENT,
        "Service" => SERVICE,
        "ServiceAccount" => SERVICE_ACCOUNT,
        "Role" | "ClusterRole" => ROLE,
        "RoleBinding" | "ClusterRoleBinding" => ROLE_BINDING,
        "SelfSubjectAccessReview" => SELF_SUBJECT_ACCESS_REVIEW,
        "SelfSubjectRulesReview" => SELF_SUBJECT_RULES_REVIEW,
        "TokenRequest" => TOKEN_REQUEST,
        _ => return None,
    })
}

/// Protobuf varints carry negative int32/int64 as 64-bit two's complement.
fn signed(varint: u64) -> i64 {
    varint as i64
}

/// Decode one message by its field table; unknown fields are skipped.
fn message(bytes: &[u8], fields: &[FieldSpec]) -> Result<Map<String, Value>, String> {
    let mut out = Map::new();
    let mut reader = Reader::new(bytes);
    while let Some((number, found)) = reader.next_field()? {
        let Some(spec) = fields.iter().find(|f| f.number == number) else {
            continue;
        };
        let name = spec.name.to_string();
        match (spec.shape, found) {
            (Text, Field::Bytes(b)) => {
                let value = text(b)?;
                if !value.is_empty() {
                    out.insert(name, json!(value));
                }
            }
            (Number, Field::Varint(v)) if v != 0 => {
                out.insert(name, json!(signed(v)));
            }
            (OptionalNumber, Field::Varint(v)) => {
                out.insert(name, json!(signed(v)));
            }
            (Flag, Field::Varint(v)) if v != 0 => {
                out.insert(name, json!(true));
            }
            (OptionalFlag, Field::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (Texts, Field::Bytes(b)) => push(&mut out, name, json!(text(b)?)),
            (TextMap, Field::Bytes(b)) => {
                let (key, value) = map_entry(b)?;
                insert_entry(&mut out, name, key, json!(text(value)?));
            }
            (Quantities, Field::Bytes(b)) => {
                let (key, quantity) = map_entry(b)?;
                let amount = message(quantity, &[field(1, "string", Text)])?;
                let amount = amount.get("string").cloned().unwrap_or_else(|| json!("0"));
                insert_entry(&mut out, name, key, amount);
            }
            (Metadata, Field::Bytes(b)) => {
                out.insert(name, object_meta(b)?);
            }
            (IntOrString, Field::Bytes(b)) => {
                let mut reader = Reader::new(b);
                let (mut is_text, mut number, mut label) = (false, 0i64, String::new());
                while let Some((n, f)) = reader.next_field()? {
                    match (n, f) {
                        (1, Field::Varint(v)) => is_text = v == 1,
                        (2, Field::Varint(v)) => number = signed(v),
                        (3, Field::Bytes(b)) => label = text(b)?,
                        _ => {}
                    }
                }
                out.insert(name, if is_text { json!(label) } else { json!(number) });
            }
            (Message(inner), Field::Bytes(b)) => {
                let nested = message(b, inner)?;
                if !nested.is_empty() {
                    out.insert(name, Value::Object(nested));
                }
            }
            (Messages(inner), Field::Bytes(b)) => {
                push(&mut out, name, Value::Object(message(b, inner)?));
            }
            // A zero, or a wire type this table does not expect: nothing to record.
            _ => {}
        }
    }
    Ok(out)
}

fn push(out: &mut Map<String, Value>, name: String, item: Value) {
    if let Some(list) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
        list.push(item);
    }
}

fn insert_entry(out: &mut Map<String, Value>, name: String, key: String, value: Value) {
    if let Some(map) = out.entry(name).or_insert_with(|| json!({})).as_object_mut() {
        map.insert(key, value);
    }
}

/// Decode a Kubernetes protobuf body of a Namespace, Secret or ConfigMap into JSON.
pub(crate) fn decode_object(body: &[u8]) -> Result<Value, String> {
    let envelope = body
        .strip_prefix(b"k8s\0")
        .ok_or("not a Kubernetes protobuf body (the k8s\\0 prefix is missing)")?;
    let mut reader = Reader::new(envelope);
    let (mut api_version, mut kind, mut raw): (String, String, &[u8]) =
        (String::new(), String::new(), &[]);
    while let Some((number, field)) = reader.next_field()? {
        match (number, field) {
            (1, Field::Bytes(type_meta)) => {
                let mut inner = Reader::new(type_meta);
                while let Some((n, f)) = inner.next_field()? {
                    match (n, f) {
                        (1, Field::Bytes(b)) => api_version = text(b)?,
                        (2, Field::Bytes(b)) => kind = text(b)?,
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    if let Some(fields) = described_kind(&kind) {
        let mut object = message(raw, fields)?;
        // Status is the server's to write; kubectl sends an empty one.
        object.remove("status");
        object.insert("apiVersion".into(), json!(api_version));
        object.insert("kind".into(), json!(kind));
        object.entry("metadata").or_insert_with(|| json!({}));
        return Ok(Value::Object(object));
    }
    if !["Namespace", "Secret", "ConfigMap"].contains(&kind.as_str()) {
        return Err(format!(
            "the sandbox reads protobuf only for {}, not {kind:?}; send JSON",
            "Namespace, Secret, ConfigMap, ServiceAccount, Service, Deployment and RBAC kinds"
        ));
    }
    let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {}});
    let mut reader = Reader::new(raw);
    let base64 = base64::engine::general_purpose::STANDARD;
    while let Some((number, field)) = reader.next_field()? {
        match (kind.as_str(), number, field) {
            (_, 1, Field::Bytes(b)) => object["metadata"] = object_meta(b)?,
            ("Secret", 2, Field::Bytes(b)) => {
                let (key, value) = map_entry(b)?;
                object["data"][key] = json!(base64.encode(value));
            }
            ("Secret", 3, Field::Bytes(b)) if !b.is_empty() => object["type"] = json!(text(b)?),
            ("Secret", 4, Field::Bytes(b)) => {
                let (key, value) = map_entry(b)?;
                object["stringData"][key] = json!(text(value)?);
            }
            ("Secret", 5, Field::Varint(v)) | ("ConfigMap", 4, Field::Varint(v)) => {
                object["immutable"] = json!(v != 0)
            }
            ("ConfigMap", 2, Field::Bytes(b)) => {
                let (key, value) = map_entry(b)?;
                object["data"][key] = json!(text(value)?);
            }
            ("ConfigMap", 3, Field::Bytes(b)) => {
                let (key, value) = map_entry(b)?;
                object["binaryData"][key] = json!(base64.encode(value));
            }
            ("Namespace", 2, Field::Bytes(spec)) => {
                let mut inner = Reader::new(spec);
                while let Some((n, f)) = inner.next_field()? {
                    if let (1, Field::Bytes(b)) = (n, f) {
                        if !object["spec"]["finalizers"].is_array() {
                            object["spec"]["finalizers"] = json!([]);
                        }
                        if let Some(list) = object["spec"]["finalizers"].as_array_mut() {
                            list.push(json!(text(b)?));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact bytes `kubectl create secret generic s1 --from-literal=a=b` POSTs.
    #[test]
    fn decodes_what_kubectl_create_secret_sends() {
        let body = b"k8s\x00\n\x0c\n\x02v1\x12\x06Secret\x12\x1e\n\x12\n\x02s1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x06\n\x01a\x12\x01b\x1a\x00\x1a\x00\"\x00";
        let secret = decode_object(body).expect("decodes");
        assert_eq!(secret["kind"], "Secret");
        assert_eq!(secret["metadata"], json!({"name": "s1"}));
        assert_eq!(secret["data"]["a"], "Yg==");
    }

    /// The exact bytes `kubectl create namespace demo` POSTs.
    #[test]
    fn decodes_what_kubectl_create_namespace_sends() {
        let body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x1c\n\x14\n\x04demo\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        let namespace = decode_object(body).expect("decodes");
        assert_eq!(namespace["metadata"]["name"], "demo");
        assert_eq!(namespace["kind"], "Namespace");
    }

    /// The exact bytes `kubectl create deployment d1 --image=nginx --replicas=2 --port=80` POSTs.
    #[test]
    fn decodes_what_kubectl_create_deployment_sends() {
        let body = b"k8s\x00\n\x15\n\x07apps/v1\x12\nDeployment\x12\xb4\x01\n\x1d\n\x02d1\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00Z\t\n\x03app\x12\x02d1\x12\x84\x01\x08\x02\x12\x0b\n\t\n\x03app\x12\x02d1\x1ak\n\x1b\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00Z\t\n\x03app\x12\x02d1\x12L\x12.\n\x05nginx\x12\x05nginx*\x002\n\n\x00\x10\x00\x18P\"\x00*\x00B\x00j\x00r\x00\x80\x01\x00\x88\x01\x00\x90\x01\x00\xa2\x01\x00\x1a\x002\x00B\x00J\x00R\x00X\x00`\x00h\x00\x82\x01\x00\x8a\x01\x00\x9a\x01\x00\xc2\x01\x00\"\x02\n\x00(\x008\x00\x1a\x0c\x08\x00\x10\x00\x18\x00 \x00(\x008\x00\x1a\x00\"\x00";
        let deployment = decode_object(body).expect("decodes");
        assert_eq!(
            deployment,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d1", "labels": {"app": "d1"}},
                   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d1"}},
                            "template": {"metadata": {"labels": {"app": "d1"}},
                                         "spec": {"containers": [{"name": "nginx", "image": "nginx",
                                                  "ports": [{"containerPort": 80}]}]}}}})
        );
    }

    /// The exact bytes `kubectl create service nodeport np --tcp=80:8080 --node-port=30080` POSTs.
    #[test]
    fn decodes_what_kubectl_create_service_sends() {
        let body = b"k8s\x00\n\r\n\x02v1\x12\x07Service\x12g\n\x1d\n\x02np\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00Z\t\n\x03app\x12\x02np\x12B\n\x1d\n\x0780-8080\x12\x03TCP\x18P\"\x07\x08\x00\x10\x90?\x1a\x00(\x80\xeb\x01\x12\t\n\x03app\x12\x02np\x1a\x00\"\x08NodePort:\x00B\x00R\x00Z\x00`\x00h\x00\x1a\x02\n\x00\x1a\x00\"\x00";
        let service = decode_object(body).expect("decodes");
        assert_eq!(
            service["spec"],
            json!({"ports": [{"name": "80-8080", "protocol": "TCP", "port": 80,
                              "targetPort": 8080, "nodePort": 30080}],
                   "selector": {"app": "np"}, "type": "NodePort"})
        );
    }

    /// The exact bytes `kubectl create role r --verb=get,list --resource=pods,deployments.apps`
    /// and `kubectl create rolebinding rb --role=r --serviceaccount=default:sa2 --user=alice`
    /// POST: the core group stays `""` in apiGroups.
    #[test]
    fn decodes_what_kubectl_create_role_and_rolebinding_send() {
        let role = b"k8s\x00\n$\n\x1crbac.authorization.k8s.io/v1\x12\x04Role\x12H\n\x11\n\x01r\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x13\n\x03get\n\x04list\x12\x00\x1a\x04pods\x12\x1e\n\x03get\n\x04list\x12\x04apps\x1a\x0bdeployments\x1a\x00\"\x00";
        let role = decode_object(role).expect("decodes");
        assert_eq!(
            role["rules"],
            json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]},
                   {"verbs": ["get", "list"], "apiGroups": ["apps"], "resources": ["deployments"]}])
        );
        let binding = b"k8s\x00\n+\n\x1crbac.authorization.k8s.io/v1\x12\x0bRoleBinding\x12\x88\x01\n\x12\n\x02rb\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12*\n\x04User\x12\x19rbac.authorization.k8s.io\x1a\x05alice\"\x00\x12 \n\x0eServiceAccount\x12\x00\x1a\x03sa2\"\x07default\x1a$\n\x19rbac.authorization.k8s.io\x12\x04Role\x1a\x01r\x1a\x00\"\x00";
        let binding = decode_object(binding).expect("decodes");
        assert_eq!(binding["roleRef"]["name"], "r");
        assert_eq!(
            binding["subjects"][1],
            json!({"kind": "ServiceAccount", "name": "sa2", "namespace": "default"})
        );
    }

    /// The exact bytes `kubectl create token sa1 --duration 20m --bound-object-kind Pod
    /// --bound-object-name p1 --bound-object-uid u1` and `kubectl auth can-i create pods/exec
    /// -n ns1` POST (kubectl reads `pods/exec` as TYPE/NAME: the pod named "exec"; a
    /// subresource is `--subresource=exec`).
    #[test]
    fn decodes_what_kubectl_create_token_and_auth_can_i_send() {
        let request = b"k8s\x00\n(\n\x18authentication.k8s.io/v1\x12\x0cTokenRequest\x120\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12\x16\x1a\x11\n\x03Pod\x12\x02v1\x1a\x02p1\"\x02u1 \xb0\t\x1a\x04\n\x00\x12\x00\x1a\x00\"\x00";
        let request = decode_object(request).expect("decodes");
        assert_eq!(
            request["spec"],
            json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p1", "uid": "u1"},
                   "expirationSeconds": 1200})
        );
        let review = b"k8s\x00\n2\n\x17authorization.k8s.io/v1\x12\x17SelfSubjectAccessReview\x12?\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x002\x008\x00B\x00\x12!\n\x1f\n\x03ns1\x12\x06create\x1a\x00\"\x00*\x04pods2\x00:\x04exec\x1a\x08\x08\x00\x12\x00\x1a\x00 \x00\x1a\x00\"\x00";
        let review = decode_object(review).expect("decodes");
        assert_eq!(
            review["spec"],
            json!({"resourceAttributes": {"namespace": "ns1", "verb": "create",
                                          "resource": "pods", "name": "exec"}})
        );
    }

    /// Anything else is an error that says to send JSON, never a panic.
    #[test]
    fn refuses_garbage_and_other_kinds_clearly() {
        assert!(decode_object(b"{}").is_err());
        assert!(
            decode_object(b"k8s\x00\n\x09\n\x02v1\x12\x03Pod\x12\x02\n\x00")
                .unwrap_err()
                .contains("send JSON")
        );
        assert!(decode_object(b"k8s\x00\n\xff").is_err());
    }
}
