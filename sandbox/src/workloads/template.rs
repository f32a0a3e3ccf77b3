//! Pod templates as the Deployment controller compares and names them: equal ignoring the
//! `pod-template-hash` label, and the hash itself.

use serde_json::Value;

use crate::builtins::POD_TEMPLATE_HASH;

/// The template as compared and hashed: without the pod-template-hash label, and without
/// nulls or empty maps and lists (kube's semantic equality treats nil and empty alike, and
/// `kubectl create deployment` sends `creationTimestamp: null`).
fn semantic(template: &Value) -> Value {
    let mut template = template.clone();
    if let Some(labels) = template
        .get_mut("metadata")
        .and_then(|m| m.get_mut("labels"))
        .and_then(Value::as_object_mut)
    {
        labels.remove(POD_TEMPLATE_HASH);
    }
    prune(&mut template);
    template
}

fn prune(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for inner in map.values_mut() {
                prune(inner);
            }
            map.retain(|_, inner| !is_empty(inner));
        }
        Value::Array(items) => items.iter_mut().for_each(prune),
        _ => {}
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// kube's `EqualIgnoreHash`: is this ReplicaSet's template the Deployment's?
pub(super) fn equal_ignore_hash(a: &Value, b: &Value) -> bool {
    semantic(a) == semantic(b)
}

/// kube's `ComputeHash`: FNV-32a of the template, then of `collision_count` (4 bytes little
/// endian and 4 zero bytes, as kube writes it), the decimal sum made DNS-safe with
/// `SafeEncodeString`. (kube hashes Go's dump of the struct; this hashes canonical JSON.)
pub(super) fn pod_template_hash(template: &Value, collision_count: Option<i64>) -> String {
    let mut bytes = Vec::new();
    write_canonical(&semantic(template), &mut bytes);
    let mut hash = fnv32a(FNV_OFFSET, &bytes);
    if let Some(count) = collision_count {
        let mut extra = [0u8; 8];
        extra[..4].copy_from_slice(&(count as u32).to_le_bytes());
        hash = fnv32a(hash, &extra);
    }
    safe_encode(&hash.to_string())
}

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

fn fnv32a(mut hash: u32, bytes: &[u8]) -> u32 {
    for byte in bytes {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// apimachinery's `rand.SafeEncodeString`: each byte mapped into the alphabet without vowels
/// and look-alike digits, the same one `generateName` suffixes use.
fn safe_encode(text: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    text.bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// JSON with object keys sorted, whatever order the map keeps them in.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                out.extend_from_slice(Value::String(key.clone()).to_string().as_bytes());
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        scalar => out.extend_from_slice(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// FNV-32a's published test vectors, and SafeEncodeString's digit mapping.
    #[test]
    fn fnv32a_and_safe_encoding_match_the_reference() {
        assert_eq!(fnv32a(FNV_OFFSET, b""), 0x811c_9dc5);
        assert_eq!(fnv32a(FNV_OFFSET, b"a"), 0xe40c_292c);
        assert_eq!(fnv32a(FNV_OFFSET, b"foobar"), 0xbf9c_f968);
        assert_eq!(safe_encode("123"), "567");
    }

    /// The hash ignores key order, nulls and its own label; a collision count changes it.
    #[test]
    fn the_hash_names_the_template_not_its_spelling() {
        let a = json!({"metadata": {"labels": {"app": "web"}, "creationTimestamp": null},
                       "spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        let b = json!({"spec": {"containers": [{"image": "nginx", "name": "c"}]},
                       "metadata": {"labels": {"app": "web", "pod-template-hash": "xyz"}}});
        assert!(equal_ignore_hash(&a, &b));
        assert_eq!(pod_template_hash(&a, None), pod_template_hash(&b, None));
        assert_ne!(pod_template_hash(&a, None), pod_template_hash(&a, Some(1)));
        let c = json!({"metadata": {"labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx:2"}]}});
        assert!(!equal_ignore_hash(&a, &c));
        assert!(pod_template_hash(&a, None)
            .bytes()
            .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b)));
    }
}
