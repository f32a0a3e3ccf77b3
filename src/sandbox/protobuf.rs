//! Reading the few protobuf bodies kubectl sends. `kubectl create namespace|secret|configmap`
//! POST the object as Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), with no JSON
//! fallback; everything else kubectl sends is JSON. This decodes just those three kinds into
//! the JSON the rest of the sandbox works on (answers stay JSON: kubectl's Accept allows it).
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
    if !["Namespace", "Secret", "ConfigMap"].contains(&kind.as_str()) {
        return Err(format!(
            "the sandbox reads protobuf only for Namespace, Secret and ConfigMap, not {kind:?}; send JSON"
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
