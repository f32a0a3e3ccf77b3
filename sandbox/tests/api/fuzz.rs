//! A seeded random request fuzzer: random verbs, paths (every kind, namespaced or not,
//! subresources, garbage), content types, bodies (random JSON, deep nesting, huge strings,
//! invalid UTF-8), patches of every type against every kind, and CRDs with random schemas and
//! patterns — sent as raw bytes over TCP. No answer may be a 5xx (except 504 for a too-new
//! resourceVersion, as kube-apiserver answers), the process must not abort, and at the end
//! the server still answers `GET /version` and a create/get round-trip.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test api fuzz::`;
//! longer: `SANDBOX_FUZZ_COUNT=200000 SANDBOX_FUZZ_SEED=42 cargo test --release -p sandbox
//! --test api fuzz:: -- --nocapture`. The seed is printed so a failure replays.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{json, Value};
use test_support::http_client::{cluster, Http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// xorshift64*: small, seeded, and the same on every machine.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const COLLECTIONS: &[&str] = &[
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/namespaces/default/pods",
    "/api/v1/namespaces/default/services",
    "/api/v1/namespaces/default/secrets",
    "/api/v1/namespaces/default/configmaps",
    "/api/v1/namespaces/default/events",
    "/api/v1/namespaces/nope/pods",
    "/api/v1/pods",
    "/apis/apps/v1/namespaces/default/deployments",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
    "/apis/workshop.example.com/v1/namespaces/default/postgresclusters",
    "/apis/workshop.example.com/v1/postgresclusters",
    "/apis/fuzz.example.com/v1/namespaces/default/fuzzes",
    "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
];

const ODD_PATHS: &[&str] = &[
    "/",
    "/version",
    "/healthz",
    "/api",
    "/apis",
    "/api/v1",
    "/apis/apps/v1",
    "/openapi/v2",
    "/openapi/v3",
    "/openapi/v3/api/v1",
    "/apis/nope/v9/things",
    "/api/v1/namespaces/default/pods/a/b/c/d",
    "//api//v1",
    "/api/v1/namespaces/%ff%fe/pods",
    "/api/v1/namespaces/default/pods/%00",
];

const NAMES: &[&str] = &[
    "db1",
    "a",
    "fuzz",
    "default",
    "x-y",
    "Upper",
    "",
    "..",
    "a.b",
    "%2F",
    "db1/status",
];

const SUBRESOURCES: &[&str] = &["", "/status", "/scale", "/log", "/exec", "/nope"];

const CONTENT_TYPES: &[&str] = &[
    "",
    "application/json",
    "application/json; charset=utf-8",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/json-patch+json",
    "application/apply-patch+yaml",
    "application/vnd.kubernetes.protobuf",
    "application/yaml",
    "text/plain",
    "*/*",
];

const QUERIES: &[&str] = &[
    "",
    "?dryRun=All",
    "?fieldValidation=Strict",
    "?fieldValidation=Ignore",
    "?labelSelector=a%3Db,c!%3Dd",
    "?labelSelector=%28%28%28",
    "?fieldSelector=metadata.name%3Ddb1",
    "?fieldSelector=spec.nope%3D1",
    "?limit=1&continue=garbage",
    "?limit=-5",
    "?watch=true&timeoutSeconds=1",
    "?watch=true&resourceVersion=999999999",
    "?resourceVersion=abc&watch=1",
    "?gracePeriodSeconds=0&propagationPolicy=Foreground",
    "?includeObject=None",
    "?fieldManager=fuzz&force=true",
];

/// A random JSON value: small objects and lists, sometimes deep or long.
fn random_json(random: &mut Random, budget: usize) -> Value {
    if budget == 0 {
        return json!(null);
    }
    match random.below(9) {
        0 => json!(null),
        1 => json!(random.chance(50)),
        2 => json!(random.next() as i64),
        3 => json!(random.below(1000) as f64 / 7.0),
        4 => json!(*random.pick(NAMES)),
        5 => json!("é€😀\u{0}\"\\".repeat(random.below(5))),
        6 => Value::Array(
            (0..random.below(4))
                .map(|_| random_json(random, budget - 1))
                .collect(),
        ),
        _ => {
            let keys = [
                "metadata",
                "spec",
                "status",
                "name",
                "labels",
                "annotations",
                "size",
                "version",
                "kind",
                "apiVersion",
                "containers",
                "replicas",
                "finalizers",
                "$patch",
                "x",
            ];
            let mut fields = serde_json::Map::new();
            for _ in 0..random.below(5) {
                fields.insert(
                    random.pick(&keys).to_string(),
                    random_json(random, budget - 1),
                );
            }
            Value::Object(fields)
        }
    }
}

/// A plausible object for the collection, randomly damaged.
fn random_object(random: &mut Random) -> Value {
    let name = *random.pick(NAMES);
    let mut object = match random.below(6) {
        0 => json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"containers": [{"name": "c", "image": "postgres:16"}]}}),
        1 => cluster(name, random.below(5) as i64 - 1),
        2 => json!({"metadata": {"name": name, "labels": {"app": "x"}}}),
        3 => json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                    "spec": {"ports": [{"port": 5432}]}}),
        4 => random_crd(random),
        _ => random_json(random, 6),
    };
    if let Some(fields) = object.as_object_mut() {
        if random.chance(30) {
            fields.insert("spec".into(), random_json(random, 5));
        }
        if random.chance(10) {
            fields.insert(
                "metadata".into(),
                json!({"name": name, "resourceVersion": random.below(50).to_string()}),
            );
        }
    }
    object
}

/// A CRD for `fuzzes` with a random schema and pattern.
fn random_crd(random: &mut Random) -> Value {
    let patterns = [
        "^[a-z]+$",
        "(?:[a-z]{0,1000}){0,23}0",
        "((((((((((a))))))))))",
        "(a|aa)*b",
        "[",
        "a{2}{2}",
        "\\p{L}+",
        "(?i)abc",
        "^.{0,1000}$",
        "x*y*z*",
    ];
    let depth = random.below(200);
    let nested = format!("{}a{}", "(".repeat(depth), ")".repeat(depth));
    let pattern = if random.chance(20) {
        nested
    } else {
        random.pick(&patterns).to_string()
    };
    let types = ["string", "integer", "object", "array", "boolean", "nope"];
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "fuzzes.fuzz.example.com"},
        "spec": {"group": "fuzz.example.com", "scope": "Namespaced",
                 "names": {"plural": "fuzzes", "singular": "fuzz", "kind": "Fuzz", "listKind": "FuzzList"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "name": {"type": "string", "pattern": pattern, "maxLength": random.below(100)},
                            "size": {"type": random.pick(&types), "minimum": 0},
                            "items": {"type": "array", "items": {"type": "string", "pattern": "^[0-9]+$"}}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}
    })
}

fn random_patch(random: &mut Random, content_type: &str) -> Value {
    if content_type == "application/json-patch+json" && random.chance(80) {
        let paths = [
            "",
            "/spec",
            "/spec/x",
            "/spec/x/x",
            "/metadata/labels",
            "/metadata/labels/a",
            "/spec/containers/0",
            "/spec/containers/-",
            "/status",
            "/a~1b",
            "/~2",
        ];
        let ops = ["add", "remove", "replace", "move", "copy", "test", "nope"];
        let count = if random.chance(5) {
            3000
        } else {
            random.below(6)
        };
        return Value::Array(
            (0..count)
                .map(|_| {
                    json!({"op": random.pick(&ops), "path": random.pick(&paths),
                           "from": random.pick(&paths), "value": random_json(random, 3)})
                })
                .collect(),
        );
    }
    random_object(random)
}

/// Bodies that are not just random JSON: deep nesting, huge strings, invalid UTF-8.
fn hostile_body(random: &mut Random) -> Vec<u8> {
    match random.below(5) {
        0 => {
            let depth = random.below(5000);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
        }
        1 => {
            let depth = random.below(200);
            let mut text = String::new();
            for _ in 0..depth {
                text.push_str("{\"spec\":");
            }
            text.push('1');
            text.push_str(&"}".repeat(depth));
            text.into_bytes()
        }
        2 => json!({"metadata": {"name": "big", "annotations": {"a": "x".repeat(random.below(2_000_000))}}})
            .to_string()
            .into_bytes(),
        3 => {
            let mut bytes = b"{\"metadata\":{\"name\":\"".to_vec();
            bytes.extend((0..random.below(40)).map(|_| random.next() as u8));
            bytes.extend_from_slice(b"\"}}");
            bytes
        }
        _ => (0..random.below(300)).map(|_| random.next() as u8).collect(),
    }
}

struct Request {
    method: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
    extra_headers: String,
}

fn random_request(random: &mut Random) -> Request {
    let methods = [
        "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "BREW",
    ];
    let method = random.pick(&methods).to_string();
    let path = if random.chance(10) {
        random.pick(ODD_PATHS).to_string()
    } else {
        let collection = random.pick(COLLECTIONS);
        let item = if method == "POST" || random.chance(20) {
            String::new()
        } else {
            // Mostly names that exist (or were just created), so writes reach the objects.
            let name = if random.chance(60) {
                *random.pick(&["db1", "default", "fuzz", "fuzzes.fuzz.example.com"])
            } else {
                *random.pick(NAMES)
            };
            format!("/{name}{}", random.pick(SUBRESOURCES))
        };
        format!("{collection}{item}{}", random.pick(QUERIES))
    };
    let content_type = if method == "PATCH" && random.chance(70) {
        random.pick(&CONTENT_TYPES[3..7]).to_string()
    } else if matches!(method.as_str(), "POST" | "PUT") && random.chance(70) {
        "application/json".to_string()
    } else {
        random.pick(CONTENT_TYPES).to_string()
    };
    let body = match method.as_str() {
        "GET" | "HEAD" if random.chance(90) => Vec::new(),
        _ if random.chance(15) => hostile_body(random),
        "PATCH" => random_patch(random, &content_type).to_string().into_bytes(),
        "DELETE" if random.chance(50) => Vec::new(),
        _ => random_object(random).to_string().into_bytes(),
    };
    let extra_headers = match random.below(20) {
        0 => "Origin: https://evil.example\r\n".to_string(),
        1 => "Accept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n".to_string(),
        2 => "Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList\r\n"
            .to_string(),
        3 => "Accept: application/vnd.kubernetes.protobuf\r\n".to_string(),
        _ => String::new(),
    };
    Request {
        method,
        path,
        content_type,
        body,
        extra_headers,
    }
}

/// Send one request as raw bytes; the status code of the answer (None: no answer at all).
async fn send_raw(addr: SocketAddr, request: &Request) -> Option<u16> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n{}",
        request.method,
        request.path,
        request.body.len(),
        request.extra_headers
    );
    if !request.content_type.is_empty() {
        head.push_str(&format!("Content-Type: {}\r\n", request.content_type));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.ok()?;
    // The server may answer (413, say) before reading the whole body and close.
    let _ = stream.write_all(&request.body).await;
    let mut status_line = Vec::new();
    let mut byte = [0u8; 1];
    while !status_line.ends_with(b"\r\n") && status_line.len() < 200 {
        match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut byte)).await {
            Ok(Ok(1)) => status_line.push(byte[0]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&status_line);
    text.split(' ').nth(1).and_then(|code| code.parse().ok())
}

/// Thousands of random and hostile requests: never a 5xx (but 504 for a too-new
/// resourceVersion), never an abort, and the server still serves afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_requests_never_break_the_sandbox() {
    let count: usize = test_support::env_number("SANDBOX_FUZZ_COUNT").unwrap_or(2000);
    let seed: u64 = test_support::env_number("SANDBOX_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    println!("sandbox fuzz: SANDBOX_FUZZ_SEED={seed} SANDBOX_FUZZ_COUNT={count}");
    let sandbox = test_support::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    http.install_crd().await;
    let mut random = Random(seed | 1);
    let mut codes = std::collections::BTreeMap::<u16, usize>::new();
    for index in 0..count {
        let request = random_request(&mut random);
        let code = send_raw(sandbox.addr(), &request).await;
        let allowed_5xx = code == Some(504) && request.path.contains("resourceVersion=");
        assert!(
            code.is_some_and(|c| c < 500) || allowed_5xx,
            "request {index} (seed {seed}): {} {} [{}] answered {code:?}; body starts {:?}",
            request.method,
            request.path,
            request.content_type,
            String::from_utf8_lossy(&request.body[..request.body.len().min(300)])
        );
        *codes.entry(code.unwrap_or(0)).or_default() += 1;
    }
    println!("sandbox fuzz: {count} requests, status codes {codes:?}");
    let version = tokio::time::timeout(Duration::from_secs(1), http.get("/version"))
        .await
        .expect("GET /version answers within a second");
    assert_eq!(version.status, 200);
    http.create_named("/api/v1/namespaces", "after-fuzz").await;
    let read = http.get("/api/v1/namespaces/after-fuzz").await;
    assert_eq!(read.json()["metadata"]["name"], "after-fuzz");
}
