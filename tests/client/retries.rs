//! The retries Kubernetes asks of a client: 401 → re-read the token file and retry once (token
//! rotation), 429/503 → wait `Retry-After` or `details.retryAfterSeconds` (bounded) and retry;
//! a file-backed token is re-read every minute, and a failed re-read keeps the last good token.
//! Timer logic runs under paused tokio time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres_operator::client::{Client, RequestError};
use postgres_operator::config::{Config, ConfigArgs, SecretString};
use serde_json::{json, Value};
use test_support::scripted_server::{json, ready, status, ScriptedServer, TestPki};

/// A server that accepts exactly one bearer token at a time (`accepted` can be changed).
async fn token_checking_server(pki: &TestPki, accepted: Arc<Mutex<String>>) -> ScriptedServer {
    ScriptedServer::https(pki.server_config(false), move |request, _| {
        let expected = format!("Bearer {}", accepted.lock().unwrap());
        if request.authorization.as_deref() == Some(expected.as_str()) {
            ready(json(200, json!({"kind": "PodList", "items": []})))
        } else {
            ready(status(401, "Unauthorized", "Unauthorized"))
        }
    })
    .await
}

/// A service-account directory (token, ca.crt, namespace) and an in-cluster client for `server`.
fn in_cluster_client(
    pki: &TestPki,
    server: &ScriptedServer,
    token: &str,
) -> (tempfile::TempDir, Client) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), token).unwrap();
    std::fs::write(dir.path().join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.path().join("namespace"), "team-a\n").unwrap();
    let port = server.url.rsplit(':').next().unwrap();
    let config = Config::incluster_from(dir.path(), "127.0.0.1", port).unwrap();
    (dir, Client::new(config).unwrap())
}

/// Token rotation: the server switches tokens, the kubelet rewrites the file; the next request
/// gets a 401, the client re-reads the file and retries once, successfully.
#[tokio::test]
async fn a_401_rereads_the_token_file_and_retries_once() {
    let pki = TestPki::generate();
    let accepted = Arc::new(Mutex::new("token-one".to_string()));
    let server = token_checking_server(&pki, accepted.clone()).await;
    let (dir, client) = in_cluster_client(&pki, &server, "token-one\n");
    assert_eq!(client.namespace(), "team-a");

    let _: Value = client.get("/api/v1/namespaces/team-a/pods").await.unwrap();
    *accepted.lock().unwrap() = "token-two".into();
    std::fs::write(dir.path().join("token"), "token-two\n").unwrap();
    let _: Value = client.get("/api/v1/namespaces/team-a/pods").await.unwrap();

    let seen = authorizations(&server);
    assert_eq!(
        seen,
        ["Bearer token-one", "Bearer token-one", "Bearer token-two"]
    );
}

/// A 401 that a fresh token does not fix is returned after exactly one retry (no loop).
#[tokio::test]
async fn a_second_401_is_returned_not_retried_forever() {
    let pki = TestPki::generate();
    let accepted = Arc::new(Mutex::new("the-real-token".to_string()));
    let server = token_checking_server(&pki, accepted).await;
    let (_dir, client) = in_cluster_client(&pki, &server, "a-wrong-token");
    let error = client
        .get::<Value>("/api/v1/namespaces/team-a/pods")
        .await
        .unwrap_err();
    assert_eq!(error.status_code(), Some(401));
    assert_eq!(server.requests().len(), 2);
}

/// An inline token (`--token`) cannot change, so a 401 is returned at once.
#[tokio::test]
async fn an_inline_token_is_not_retried_after_401() {
    let server = ScriptedServer::always(|| status(401, "Unauthorized", "Unauthorized")).await;
    let args = ConfigArgs {
        server: Some(server.url.clone()),
        token: Some(SecretString::new("abc")),
        ..ConfigArgs::default()
    };
    let config =
        Config::infer_from(&args, &postgres_operator::config::Environment::default()).unwrap();
    let client = Client::new(config).unwrap();
    let error = client.get::<Value>("/api").await.unwrap_err();
    assert_eq!(error.status_code(), Some(401));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].authorization.as_deref(), Some("Bearer abc"));
}

/// The token file is re-read once it is a minute old, without waiting for a 401; a re-read that
/// fails (file gone mid-rewrite) keeps the last good token.
#[tokio::test(start_paused = true)]
async fn the_token_file_is_reread_every_minute_and_a_failed_read_keeps_the_last_token() {
    let server = ScriptedServer::always(|| json(200, json!({}))).await;
    let dir = tempfile::tempdir().unwrap();
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "first").unwrap();
    let args = ConfigArgs {
        server: Some(server.url.clone()),
        token_file: Some(token_path.clone()),
        ..ConfigArgs::default()
    };
    let config =
        Config::infer_from(&args, &postgres_operator::config::Environment::default()).unwrap();
    let client = Client::new(config).unwrap();

    let _: Value = client.get("/a").await.unwrap();
    std::fs::write(&token_path, "second").unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    let _: Value = client.get("/b").await.unwrap(); // 30 s old: still the cached token
    tokio::time::advance(Duration::from_secs(31)).await;
    let _: Value = client.get("/c").await.unwrap(); // 61 s old: re-read
    std::fs::remove_file(&token_path).unwrap();
    tokio::time::advance(Duration::from_secs(61)).await;
    let _: Value = client.get("/d").await.unwrap(); // re-read fails: keep "second"

    let seen = authorizations(&server);
    assert_eq!(
        seen,
        [
            "Bearer first",
            "Bearer first",
            "Bearer second",
            "Bearer second"
        ]
    );
}

/// 429 with `Retry-After: 2`: the client waits 2 s (paused clock) and retries, then succeeds.
#[tokio::test(start_paused = true)]
async fn a_429_waits_for_retry_after_then_retries() {
    let server = ScriptedServer::http(|_, index| {
        if index == 0 {
            let mut response = status(
                429,
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later",
            );
            response
                .headers_mut()
                .insert("retry-after", "2".parse().unwrap());
            ready(response)
        } else {
            ready(json(200, json!({"kind": "PodList"})))
        }
    })
    .await;
    let client = test_support::plain_client(&server.url);
    let started = tokio::time::Instant::now();
    let list: Value = client.get("/api/v1/pods").await.unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(started.elapsed().as_secs(), 2);
    assert_eq!(server.requests().len(), 2);
}

/// 503 with `details.retryAfterSeconds: 3` and no header: that wait is used.
#[tokio::test(start_paused = true)]
async fn a_503_uses_retry_after_seconds_from_the_status() {
    let server = ScriptedServer::http(|_, index| {
        if index == 0 {
            ready(json(
                503,
                json!({
                    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "the apiserver is shutting down", "reason": "ServiceUnavailable",
                    "details": {"retryAfterSeconds": 3}, "code": 503
                }),
            ))
        } else {
            ready(json(201, json!({"kind": "Pod"})))
        }
    })
    .await;
    let client = test_support::plain_client(&server.url);
    let started = tokio::time::Instant::now();
    let _: Value = client
        .create("/api/v1/namespaces/default/pods", &json!({}))
        .await
        .unwrap();
    assert_eq!(started.elapsed().as_secs(), 3);
    assert_eq!(server.requests().len(), 2);
}

/// Throttling that never ends: at most 3 retries, each wait capped at 10 s, then the 429 error.
#[tokio::test(start_paused = true)]
async fn throttling_retries_are_bounded() {
    let server = ScriptedServer::http(|_, _| {
        let mut response = status(429, "TooManyRequests", "slow down");
        response
            .headers_mut()
            .insert("retry-after", "3600".parse().unwrap());
        ready(response)
    })
    .await;
    let client = test_support::plain_client(&server.url);
    let started = tokio::time::Instant::now();
    let error = client.get::<Value>("/api/v1/pods").await.unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Api(_))),
        "{error:?}"
    );
    assert_eq!(error.status_code(), Some(429));
    assert_eq!(server.requests().len(), 4, "one request and three retries");
    assert_eq!(
        started.elapsed().as_secs(),
        30,
        "three waits of at most 10 s"
    );
}

/// A watch start that is throttled is retried the same way before the stream is handed over.
#[tokio::test(start_paused = true)]
async fn stream_retries_a_throttled_start() {
    let server = ScriptedServer::http(|_, index| {
        if index == 0 {
            ready(status(503, "ServiceUnavailable", "try again"))
        } else {
            ready(test_support::scripted_server::raw(
                200,
                "application/json",
                "{\"type\":\"ADDED\"}\n",
            ))
        }
    })
    .await;
    let client = test_support::plain_client(&server.url);
    let mut stream = client.stream("/api/v1/pods?watch=true").await.unwrap();
    let chunk = stream.next_chunk().await.unwrap().unwrap();
    assert_eq!(&chunk[..], b"{\"type\":\"ADDED\"}\n");
    assert_eq!(server.requests().len(), 2);
}

/// The Authorization header of every request the server saw, in order.
fn authorizations(server: &ScriptedServer) -> Vec<String> {
    server
        .requests()
        .into_iter()
        .map(|r| r.authorization.expect("an Authorization header"))
        .collect()
}
