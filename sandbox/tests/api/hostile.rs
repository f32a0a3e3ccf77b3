//! Hostile requests (issue 11): each attack that once killed or froze the sandbox now gets a
//! clear refusal, and afterwards the server still answers `GET /version` within a second and a
//! normal create/get round-trip still works.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test api hostile::`.

use std::time::Duration;

use http::Method;
use sandbox::SandboxOptions;
use serde_json::{json, Value};
use test_support::http_client::{cluster, sandbox_and_http, sandbox_with_crd, Answer, Http};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PGC: &str = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const NAMESPACES: &str = "/api/v1/namespaces";

/// What every attack test ends with: the server answers at once and still stores and reads.
async fn still_serving(http: &Http, name: &str) {
    let version = tokio::time::timeout(Duration::from_secs(1), http.get("/version"))
        .await
        .expect("GET /version answers within a second");
    assert_eq!(version.status, 200);
    http.create_named(NAMESPACES, name).await;
    let read = http.get(&format!("{NAMESPACES}/{name}")).await;
    assert_eq!(read.status, 200);
    assert_eq!(read.json()["metadata"]["name"], name);
}

fn json_patch(operations: &[Value]) -> Vec<u8> {
    serde_json::to_vec(operations).expect("serialises")
}

async fn send_json_patch(http: &Http, path: &str, operations: &[Value]) -> Answer {
    http.patch(path, "application/json-patch+json", &json_patch(operations))
        .await
}

/// 1: a `copy` of a value into its own child, repeated, is refused at 128 levels (it used to
/// build 8,000 levels and overflow the stack).
#[tokio::test]
async fn copy_into_own_child_is_refused() {
    let (_sandbox, http) = sandbox_and_http().await;
    let created = http
        .post(
            NAMESPACES,
            &json!({"metadata": {"name": "victim", "labels": {"a": "b"}}}),
        )
        .await;
    assert_eq!(created.status, 201);
    let mut operations = vec![json!({"op": "add", "path": "/spec/x", "value": {"x": 1}})];
    operations
        .extend((0..8000).map(|_| json!({"op": "copy", "from": "/spec/x", "path": "/spec/x/x"})));
    let answer = send_json_patch(&http, &format!("{NAMESPACES}/victim"), &operations).await;
    assert_eq!(answer.status, 422, "{}", answer.text());
    assert!(answer.json()["message"]
        .as_str()
        .unwrap_or_default()
        .contains("more than 128 levels deep"));
    still_serving(&http, "after-deep-copy").await;
}

/// 2: doubling copies stop at kube-apiserver's 3 MiB copy limit (413), and an object over
/// etcd's 1.5 MiB is never stored, whichever way it is built.
#[tokio::test]
async fn doubling_copies_and_huge_objects_are_refused() {
    let (_sandbox, http) = sandbox_and_http().await;
    http.post(NAMESPACES, &json!({"metadata": {"name": "victim"}}))
        .await;
    let mut operations = vec![
        json!({"op": "add", "path": "/metadata/annotations", "value": {}}),
        json!({"op": "add", "path": "/spec/a", "value": ["x".repeat(1000)]}),
    ];
    for _ in 0..30 {
        operations.push(json!({"op": "copy", "from": "/spec/a", "path": "/spec/b"}));
        operations.push(json!({"op": "copy", "from": "/spec/b", "path": "/spec/a/-"}));
    }
    let answer = send_json_patch(&http, &format!("{NAMESPACES}/victim"), &operations).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert_eq!(answer.json()["reason"], "RequestEntityTooLarge");

    // Under the copy limit (1 MiB copied) but over etcd's 1.5 MiB once stored.
    let big = "y".repeat(800 * 1024);
    let operations = [
        json!({"op": "add", "path": "/metadata/annotations", "value": {"a": big}}),
        json!({"op": "copy", "from": "/metadata/annotations/a", "path": "/metadata/annotations/b"}),
    ];
    let answer = send_json_patch(&http, &format!("{NAMESPACES}/victim"), &operations).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert!(answer.text().contains("etcd"), "{}", answer.text());

    // A 2 MiB body is under the 3 MiB request limit but over etcd's object limit.
    let huge = json!({"metadata": {"name": "huge", "annotations": {"a": "z".repeat(2 << 20)}}});
    let answer = http.post(NAMESPACES, &huge).await;
    assert_eq!(answer.status, 413, "{}", answer.text());
    assert_eq!(http.get(&format!("{NAMESPACES}/huge")).await.status, 404);
    still_serving(&http, "after-doubling").await;
}

/// A CRD for `things` whose `spec.name` has `pattern`.
fn crd_with_pattern(pattern: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.hostile.example.com"},
        "spec": {
            "group": "hostile.example.com", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing", "listKind": "ThingList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "name": {"type": "string", "pattern": pattern}}}}}}}]
        }
    })
}

/// 3: a pattern of deeply nested groups is refused when the CRD is written, with 422 naming the
/// pattern's field (its first instance write used to overflow the parser's stack).
#[tokio::test]
async fn deeply_nested_pattern_is_refused_at_crd_write() {
    let (_sandbox, http) = sandbox_and_http().await;
    let deep = format!("{}a{}", "(".repeat(5000), ")".repeat(5000));
    let answer = http.post(CRDS, &crd_with_pattern(&deep)).await;
    assert_eq!(answer.status, 422, "{}", answer.text());
    assert_eq!(
        answer.json()["details"]["causes"][0]["field"],
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[name].pattern"
    );
    let nested_too_deep = format!("{}a{}", "(".repeat(101), ")".repeat(101));
    let answer = http.post(CRDS, &crd_with_pattern(&nested_too_deep)).await;
    assert_eq!(answer.status, 422, "{}", answer.text());
    still_serving(&http, "after-deep-pattern").await;
}

/// 4: a costly pattern against a 20,000-character value never blocks other requests: the
/// write is checked outside the store lock and gives up within its step budget (422).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costly_pattern_does_not_block_other_requests() {
    let (_sandbox, http) = sandbox_and_http().await;
    http.create(CRDS, &crd_with_pattern("(?:[a-z]{0,1000}){0,23}0"))
        .await;
    let things = "/apis/hostile.example.com/v1/namespaces/default/things";
    test_support::eventually(Duration::from_secs(5), "the CRD is served", || async {
        (http.get(things).await.status == 200).then_some(())
    })
    .await;
    let writer = {
        let http = http.clone();
        tokio::spawn(async move {
            let thing = json!({"apiVersion": "hostile.example.com/v1", "kind": "Thing",
                               "metadata": {"name": "slow"}, "spec": {"name": "a".repeat(20_000)}});
            http.post(things, &thing).await
        })
    };
    while !writer.is_finished() {
        let version = tokio::time::timeout(Duration::from_secs(1), http.get("/version"))
            .await
            .expect("GET /version answers within a second while the write is in flight");
        assert_eq!(version.status, 200);
    }
    let refused = writer.await.expect("the writer task ends");
    assert_eq!(refused.status, 422, "{}", refused.text());
    assert!(refused.text().contains("gave up"), "{}", refused.text());
    let fine = json!({"apiVersion": "hostile.example.com/v1", "kind": "Thing",
                      "metadata": {"name": "fine"}, "spec": {"name": "abc0"}});
    assert_eq!(http.post(things, &fine).await.status, 201);
    still_serving(&http, "after-costly-pattern").await;
}

/// 5: a write needs a JSON or protobuf Content-Type (415), and a foreign Host or Origin is
/// refused (403) — what a web page in the learner's browser would send.
#[tokio::test]
async fn cross_site_requests_are_refused() {
    let (sandbox, http) = sandbox_and_http().await;
    let body = json!({"metadata": {"name": "csrf"}})
        .to_string()
        .into_bytes();
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let answer = http
            .send(Method::POST, NAMESPACES, content_type, body.clone(), &[])
            .await;
        assert_eq!(answer.status, 415, "{content_type:?}: {}", answer.text());
        assert!(answer.json()["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf"));
    }
    let port = sandbox.addr().port();
    let rebound = format!("attacker.example:{port}");
    let answer = http
        .get_with_headers("/version", &[("host", &rebound)])
        .await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    let answer = http
        .send(
            Method::POST,
            NAMESPACES,
            Some("application/json"),
            body.clone(),
            &[("origin", "https://attacker.example")],
        )
        .await;
    assert_eq!(answer.status, 403, "{}", answer.text());
    assert_eq!(http.get(&format!("{NAMESPACES}/csrf")).await.status, 404);
    for own in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        let answer = http.get_with_headers("/version", &[("host", &own)]).await;
        assert_eq!(answer.status, 200, "{own}");
    }
    let same_origin = format!("http://127.0.0.1:{port}");
    let answer = http
        .get_with_headers("/version", &[("origin", &same_origin)])
        .await;
    assert_eq!(answer.status, 200);
    still_serving(&http, "after-csrf").await;
}

/// 6: half-sent request heads are closed after the header read timeout, and beyond the
/// connection cap new connections wait instead of using up file descriptors.
#[tokio::test]
async fn half_sent_heads_time_out_and_connections_are_capped() {
    let sandbox = test_support::start_sandbox_with(SandboxOptions {
        header_read_timeout: Duration::from_millis(300),
        max_connections: 4,
        ..SandboxOptions::default()
    })
    .await;
    let http = Http::new(&sandbox.url());
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut stream = tokio::net::TcpStream::connect(sandbox.addr())
            .await
            .expect("connects");
        stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .expect("writes half a head");
        slow.push(stream);
    }
    // Every half-sent head is closed by the server (EOF or a 408), none stays open for ever.
    for stream in &mut slow {
        let mut buffer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut buffer))
            .await
            .expect("the server closes a half-sent head");
        let answer = String::from_utf8_lossy(&buffer);
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "a half-sent head is closed, not answered: {answer}"
        );
    }
    still_serving(&http, "after-slowloris").await;
}

/// 7: the credentials directory is 0700, its files 0600, and a planted `token.tmp` symlink
/// is not followed (its target keeps its content).
#[tokio::test]
async fn credentials_are_private_and_symlinks_are_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path().join("tls");
    std::fs::create_dir(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let target = scratch.path().join("precious");
    std::fs::write(&target, "keep me").expect("write target");
    std::os::unix::fs::symlink(&target, dir.join("token.tmp")).expect("plant symlink");
    let sandbox = test_support::start_sandbox_with(SandboxOptions {
        credentials_dir: Some(dir.clone()),
        ..SandboxOptions::default()
    })
    .await;
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
    let mode = |path: &std::path::Path| {
        std::fs::symlink_metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode(&dir), 0o700);
    for file in ["token", "ca.crt", "namespace"] {
        assert_eq!(mode(&dir.join(file)), 0o600, "{file}");
    }
    let token = std::fs::read_to_string(dir.join("token")).expect("token");
    assert_eq!(Some(token), sandbox.token());
    std::os::unix::fs::symlink(&target, dir.join("token.tmp")).expect("plant again");
    sandbox.rotate_token();
    assert_eq!(std::fs::read_to_string(&target).expect("target"), "keep me");
    assert_eq!(
        std::fs::read_to_string(dir.join("token")).ok(),
        sandbox.token()
    );
}

/// The ordinary write paths still work after the restructuring: PUT with a stale
/// resourceVersion is 409, a PATCH of a missing object 404, apply creates.
#[tokio::test]
async fn ordinary_writes_still_behave() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let created = http.post(PGC, &cluster("db1", 1)).await;
    assert_eq!(created.status, 201);
    let mut stale = created.json();
    stale["metadata"]["resourceVersion"] = json!("1");
    stale["spec"]["size"] = json!(2);
    assert_eq!(http.put(&format!("{PGC}/db1"), &stale).await.status, 409);
    let missing = http
        .merge_patch(&format!("{PGC}/nope"), &json!({"spec": {"size": 2}}))
        .await;
    assert_eq!(missing.status, 404);
    let applied = http
        .patch(
            &format!("{PGC}/db2?fieldManager=test"),
            "application/apply-patch+yaml",
            cluster("db2", 2).to_string().as_bytes(),
        )
        .await;
    assert_eq!(applied.status, 201, "{}", applied.text());
    still_serving(&http, "after-ordinary").await;
}

/// A handler that panics (a bug in the server, here injected) costs that one request a 500: the
/// process, the connection pool and every other request live on.
#[tokio::test]
async fn a_panicking_handler_is_a_500_for_that_request_only() {
    let (sandbox, http) = sandbox_and_http().await;
    sandbox.faults().fail_next(
        1,
        "/api/v1/namespaces/default/configmaps",
        sandbox::InjectedFault::Panic,
    );
    let answer = http.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(answer.status, 500, "{}", answer.text());
    let again = http.get("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(again.status, 200, "{}", again.text());
    still_serving(&http, "after-a-panic").await;
}

/// This process's open-file soft limit (the sandbox raised it to the hard limit when it
/// started), from /proc/self/limits.
fn open_file_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// 8: thousands of idle connections cannot lock out a real client. With 5,000 half-sent
/// request heads open (or as many as the open-file limit allows), more than the connection
/// slots (`SLOTS`) and each within the 32 s header timeout, a GET is answered within 2 s, and a
/// watch opened before them still delivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_half_sent_heads_do_not_lock_out_a_real_request() {
    const SLOTS: usize = 1024;
    let sandbox = test_support::start_sandbox_with(SandboxOptions {
        max_connections: SLOTS,
        ..SandboxOptions::default()
    })
    .await;
    let http = Http::new(&sandbox.url());
    let mut watch = http
        .stream("/api/v1/namespaces/default/configmaps?watch=true")
        .await;
    assert_eq!(watch.status, 200);
    // Each half-sent head is one descriptor here; the server holds at most SLOTS more.
    let limit = open_file_limit().expect("/proc/self/limits names the open-file limit");
    let wanted = 5_000.min(limit.saturating_sub(1_024) as usize);
    let mut slow = Vec::with_capacity(wanted);
    let opening = std::time::Instant::now();
    for _ in 0..wanted {
        let Ok(mut stream) = tokio::net::TcpStream::connect(sandbox.addr()).await else {
            break;
        };
        if stream
            .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .is_err()
        {
            break;
        }
        slow.push(stream);
    }
    println!(
        "open-file limit {limit}; opened {} half-sent heads in {:?}",
        slow.len(),
        opening.elapsed()
    );
    assert!(
        slow.len() >= wanted.min(4_000),
        "opened only {}",
        slow.len()
    );

    let asking = std::time::Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(2), http.get(NAMESPACES))
        .await
        .expect("GET answers within 2 s");
    let took = asking.elapsed();
    println!("GET {NAMESPACES} answered {} in {took:?}", answer.status);
    assert_eq!(answer.status, 200, "{}", answer.text());

    // The watch had a request in flight, so it was never closed to make room.
    http.create_named("/api/v1/namespaces/default/configmaps", "after-the-flood")
        .await;
    // The first events are the initial ADDED of what existed (kube-root-ca.crt).
    let mut names = Vec::new();
    while let Some(event) = watch.next_event(Duration::from_secs(5)).await {
        names.push(event["object"]["metadata"]["name"].clone());
        if names.last() == Some(&json!("after-the-flood")) {
            break;
        }
    }
    assert_eq!(
        names.last(),
        Some(&json!("after-the-flood")),
        "the watch opened before the flood still delivers: {names:?}"
    );

    // What the half-sent heads met: most were closed to make room (EOF), at most SLOTS held.
    let mut closed = 0;
    for stream in &slow {
        let mut byte = [0u8; 1];
        if matches!(stream.try_read(&mut byte), Ok(0)) {
            closed += 1;
        }
    }
    println!(
        "{closed} of {} half-sent heads closed by the server",
        slow.len()
    );
    assert!(
        slow.len() - closed <= SLOTS,
        "{} idle connections still held",
        slow.len() - closed
    );
}
