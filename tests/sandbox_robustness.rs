//! Bad input never crashes the sandbox: every malformed request gets a clear Status with the
//! right code, and a seeded storm of random requests leaves it serving.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test --test sandbox_robustness`.

mod common;

use common::{cluster, pod, Http};
use http::Method;
use serde_json::json;

const PGC: &str = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn reason(answer: &common::Answer) -> String {
    answer.json()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Each kind of bad request gets its own code and reason, as kube-apiserver answers it.
#[tokio::test]
async fn bad_requests_get_the_right_status() {
    let sandbox = common::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    http.install_crd().await;

    let unknown = http.get("/apis/nope.example.com/v1/things").await;
    assert_eq!(
        (unknown.status.as_u16(), reason(&unknown).as_str()),
        (404, "NotFound")
    );
    assert_eq!(http.get("/no/such/path").await.status, 404);

    let malformed = http
        .send(
            Method::POST,
            PODS,
            Some("application/json"),
            b"{\"metadata\":".to_vec(),
            &[],
        )
        .await;
    assert_eq!(
        (malformed.status.as_u16(), reason(&malformed).as_str()),
        (400, "BadRequest")
    );

    let mut wrong_kind = cluster("db1", 1);
    wrong_kind["kind"] = json!("Pod");
    let answer = http.post(PGC, &wrong_kind).await;
    assert_eq!(
        (answer.status.as_u16(), reason(&answer).as_str()),
        (400, "BadRequest")
    );
    let mut wrong_version = cluster("db1", 1);
    wrong_version["apiVersion"] = json!("workshop.example.com/v2");
    assert_eq!(http.post(PGC, &wrong_version).await.status, 400);

    let bad_name = http.post(PGC, &cluster("Not_A_Name", 1)).await;
    assert_eq!(
        (bad_name.status.as_u16(), reason(&bad_name).as_str()),
        (422, "Invalid")
    );
    assert_eq!(
        bad_name.json()["details"]["causes"][0]["field"],
        "metadata.name"
    );

    let mut huge = cluster("huge", 1);
    huge["metadata"]["annotations"] = json!({"x": "y".repeat(3 * 1024 * 1024 + 1)});
    let too_large = http.post(PGC, &huge).await;
    assert_eq!(
        (too_large.status.as_u16(), reason(&too_large).as_str()),
        (413, "RequestEntityTooLarge")
    );

    let not_allowed = http
        .send(
            Method::PUT,
            PGC,
            Some("application/json"),
            b"{}".to_vec(),
            &[],
        )
        .await;
    assert_eq!(
        (not_allowed.status.as_u16(), reason(&not_allowed).as_str()),
        (405, "MethodNotAllowed")
    );

    http.post(PGC, &cluster("db1", 1)).await;
    let strategic = http
        .send(
            Method::PATCH,
            &format!("{PGC}/db1"),
            Some("application/strategic-merge-patch+json"),
            b"{}".to_vec(),
            &[],
        )
        .await;
    assert_eq!(
        (strategic.status.as_u16(), reason(&strategic).as_str()),
        (415, "UnsupportedMediaType")
    );
    let yaml_apply = http
        .send(
            Method::PATCH,
            &format!("{PGC}/db1"),
            Some("application/apply-patch+yaml"),
            b"spec:\n  size: 2\n".to_vec(),
            &[],
        )
        .await;
    assert_eq!(
        yaml_apply.status, 415,
        "YAML apply bodies are refused cleanly"
    );
    let yaml_create = http
        .send(
            Method::POST,
            PGC,
            Some("application/yaml"),
            b"kind: x".to_vec(),
            &[],
        )
        .await;
    assert_eq!(yaml_create.status, 415);
    assert_eq!(
        http.get(&format!("{PODS}?watch=true&resourceVersion=abc"))
            .await
            .status,
        400
    );
    assert_eq!(
        http.get(&format!("{PGC}/db1?fieldValidation=Loose"))
            .await
            .status,
        200,
        "ignored on GET"
    );
    assert_eq!(
        http.post(&format!("{PGC}?fieldValidation=Loose"), &cluster("x", 1))
            .await
            .status,
        400
    );
}

/// The other patch types: JSON patch, strategic merge on a pod, and server-side apply (JSON body)
/// creating then merging.
#[tokio::test]
async fn json_strategic_and_apply_patches_work() {
    let sandbox = common::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    http.install_crd().await;
    http.post(PGC, &cluster("db1", 1)).await;
    let json_patch = http
        .send(
            Method::PATCH,
            &format!("{PGC}/db1"),
            Some("application/json-patch+json"),
            br#"[{"op":"replace","path":"/spec/size","value":7}]"#.to_vec(),
            &[],
        )
        .await;
    assert_eq!(json_patch.json()["spec"]["size"], 7);
    let failed = http
        .send(
            Method::PATCH,
            &format!("{PGC}/db1"),
            Some("application/json-patch+json"),
            br#"[{"op":"test","path":"/spec/size","value":1}]"#.to_vec(),
            &[],
        )
        .await;
    assert_eq!(failed.status, 422);

    let mut web = pod("web", json!({"a": "1"}));
    web["spec"]["containers"] =
        json!([{"name": "c", "image": "nginx"}, {"name": "side", "image": "busybox"}]);
    http.post(PODS, &web).await;
    let strategic = http
        .send(
            Method::PATCH,
            &format!("{PODS}/web"),
            Some("application/strategic-merge-patch+json"),
            br#"{"spec":{"containers":[{"name":"side","$patch":"delete"}]}}"#.to_vec(),
            &[],
        )
        .await;
    assert_eq!(strategic.status, 200, "{}", strategic.text());
    assert_eq!(
        strategic.json()["spec"]["containers"],
        json!([{"name": "c", "image": "nginx"}])
    );

    let apply = serde_json::to_vec(&cluster("applied", 2)).expect("json");
    let created = http
        .send(
            Method::PATCH,
            &format!("{PGC}/applied?fieldManager=kubectl&force=false"),
            Some("application/apply-patch+yaml"),
            apply.clone(),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let merged = http
        .send(
            Method::PATCH,
            &format!("{PGC}/applied?fieldManager=kubectl"),
            Some("application/apply-patch+yaml"),
            apply,
            &[],
        )
        .await;
    assert_eq!(merged.status, 200);
    assert_eq!(
        merged.json()["metadata"]["resourceVersion"],
        created.json()["metadata"]["resourceVersion"],
        "no-op apply"
    );
}

/// Tiny xorshift so the storm is reproducible (seeded, no `rand`).
struct Xorshift(u64);
impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() % items.len() as u64) as usize]
    }
}

/// 600 seeded random requests (paths, methods, content types, bodies): never a 5xx, every JSON
/// error is a Status, and the sandbox still serves kubectl-shaped requests afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_random_requests_leaves_it_serving() {
    let sandbox = common::start_sandbox().await;
    let http = Http::new(&sandbox.url());
    http.install_crd().await;
    http.post(PGC, &cluster("db1", 1)).await;
    let mut random = Xorshift(0x5eed_1234_abcd_0001);
    let prefixes = [
        "/api",
        "/api/v1",
        "/apis",
        "/apis/workshop.example.com/v1",
        "/apis/apiextensions.k8s.io/v1",
        "/api/v1/namespaces/default",
        "/apis/workshop.example.com/v1/namespaces/default",
        "/openapi/v3",
        "/version",
        "",
    ];
    let segments = [
        "pods",
        "postgresclusters",
        "db1",
        "status",
        "scale",
        "log",
        "namespaces",
        "default",
        "%00",
        "%FF%FE",
        "..",
        "a%2Fb",
        "secrets",
        "customresourcedefinitions",
        "x".repeat(300).leak(),
        "é",
        "events",
        "leases",
    ];
    let queries = [
        "",
        "?watch=true&timeoutSeconds=0",
        "?watch=1&resourceVersion=99999999999999999999",
        "?labelSelector=a%20in%20(",
        "?fieldSelector=x",
        "?limit=-1",
        "?continue=%%%",
        "?resourceVersion=0&watch=true&timeoutSeconds=0",
        "?dryRun=All",
        "?fieldValidation=Strict",
    ];
    let methods = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
        Method::HEAD,
    ];
    let content_types = [
        "application/json",
        "application/merge-patch+json",
        "application/json-patch+json",
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "text/plain",
        "",
    ];
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"{".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"42".to_vec(),
        b"\"str\"".to_vec(),
        serde_json::to_vec(&cluster("db1", 1)).expect("json"),
        serde_json::to_vec(&cluster("db2", -5)).expect("json"),
        serde_json::to_vec(&json!({"metadata": {"name": 5, "labels": [1]}, "spec": []}))
            .expect("json"),
        serde_json::to_vec(&json!({"kind": "Scale", "spec": {"replicas": "many"}})).expect("json"),
        serde_json::to_vec(&json!([{"op": "remove", "path": "/metadata"}])).expect("json"),
        serde_json::to_vec(&json!({"metadata": {"finalizers": {"a": 1}, "ownerReferences": "x"}}))
            .expect("json"),
        "[".repeat(10_000).into_bytes(),
        vec![0xff, 0xfe, 0x00, 0x7b],
    ];
    for _ in 0..600 {
        let mut path = random.pick(&prefixes).to_string();
        for _ in 0..random.next() % 4 {
            path.push('/');
            path.push_str(random.pick(&segments));
        }
        if path.is_empty() {
            path.push('/');
        }
        path.push_str(random.pick(&queries));
        let method = methods[(random.next() % methods.len() as u64) as usize].clone();
        let content_type = random.pick(&content_types);
        let body = bodies[(random.next() % bodies.len() as u64) as usize].clone();
        let answer = http
            .send(
                method.clone(),
                &path,
                (!content_type.is_empty()).then_some(content_type),
                body,
                &[],
            )
            .await;
        assert!(
            answer.status.as_u16() < 500,
            "{method} {path} -> {} {}",
            answer.status,
            answer.text()
        );
        let is_json = answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json"));
        if answer.status.as_u16() >= 400 && is_json && method != Method::HEAD {
            assert_eq!(answer.json()["kind"], "Status", "{method} {path}");
        }
    }
    assert_eq!(http.get("/version").await.status, 200);
    // The storm may have deleted the default namespace or the CRD, as it would on a real
    // cluster; a fresh namespace and object must still work.
    let namespace = http
        .post(
            "/api/v1/namespaces",
            &json!({"metadata": {"name": "after-storm"}}),
        )
        .await;
    assert_eq!(namespace.status, 201, "{}", namespace.text());
    let secrets = "/api/v1/namespaces/after-storm/secrets";
    assert_eq!(
        http.post(secrets, &json!({"metadata": {"name": "s"}}))
            .await
            .status,
        201
    );
    let list = http.get(secrets).await.json();
    assert_eq!(list["items"][0]["metadata"]["name"], "s");
}
