//! The client turns every way a request can fail into a typed, readable `ClientError` that names
//! the method and path: Status bodies (403, 422 with causes, 500), non-Status bodies (a proxy's
//! HTML 502), connection refused, bad JSON in a 2xx body, and a request timeout. Also: the headers
//! every request carries.

use std::time::Duration;

use postgres_operator::client::{Client, ClientError, Patch, RequestError};
use postgres_operator::config::Config;
use serde_json::{json, Value};
use test_support::plain_client;
use test_support::scripted_server::{json, raw, ready, status, ScriptedServer};

/// What a GET of `path` fails with, through the operator's client for `server`.
async fn get_error(server: &ScriptedServer, path: &str) -> ClientError {
    let client = plain_client(&server.url);
    client.get::<Value>(path).await.unwrap_err()
}

/// A 403 Status comes back as `RequestError::Api` with code, reason and message intact.
#[tokio::test]
async fn forbidden_is_an_api_error_with_the_status() {
    let message = "postgresclusters.workshop.example.com is forbidden: User \"system:serviceaccount:default:postgres-operator\" cannot list resource \"postgresclusters\"";
    let server = ScriptedServer::always(move || status(403, "Forbidden", message)).await;
    let error = get_error(
        &server,
        "/apis/workshop.example.com/v1/namespaces/default/postgresclusters",
    )
    .await;
    assert_eq!(error.status_code(), Some(403));
    assert_eq!(error.reason(), Some("Forbidden"));
    let text = error.to_string();
    assert!(text.starts_with("GET /apis/workshop.example.com/v1/namespaces/default/postgresclusters: Forbidden (403): "), "{text}");
    assert!(text.contains("cannot list resource"), "{text}");
    assert_eq!(server.requests().len(), 1, "403 is not retried");
}

/// A 422 Invalid names the offending field from `details.causes`, and is not retried.
#[tokio::test]
async fn invalid_names_the_field_from_the_causes() {
    let invalid = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "PostgresCluster.workshop.example.com \"db\" is invalid: spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
        "reason": "Invalid",
        "details": {"name": "db", "group": "workshop.example.com", "kind": "PostgresCluster",
            "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: 0: spec.size in body should be greater than or equal to 1", "field": "spec.size"}]},
        "code": 422
    });
    let server = ScriptedServer::always(move || json(422, invalid.clone())).await;
    let client = plain_client(&server.url);
    let error = client
        .create::<_, Value>(
            "/apis/workshop.example.com/v1/namespaces/default/postgresclusters",
            &json!({"spec": {"size": 0, "version": "16.4"}}),
        )
        .await
        .unwrap_err();
    let status = error.api_status().expect("a Status");
    assert_eq!(status.code, 422);
    let causes = &status.details.as_ref().unwrap().causes;
    assert_eq!(causes[0].field, "spec.size");
    assert!(
        error.to_string().contains("; spec.size: Invalid value: 0"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1, "422 is not retried");
}

/// A 500 with a Status body is an Api error too, not retried.
#[tokio::test]
async fn internal_error_is_an_api_error() {
    let server =
        ScriptedServer::always(|| status(500, "InternalError", "etcdserver: request timed out"))
            .await;
    let client = plain_client(&server.url);
    let error = client
        .delete::<Value>("/api/v1/namespaces/default/pods/db-0000")
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Api(_))),
        "{error:?}"
    );
    assert_eq!(error.status_code(), Some(500));
    assert!(
        error.to_string().contains(
            "DELETE /api/v1/namespaces/default/pods/db-0000: InternalError (500): etcdserver"
        ),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// An HTML 502 from a proxy still gives a readable message: method, path, code and a snippet.
#[tokio::test]
async fn an_html_error_page_is_readable() {
    let page = "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>nginx</body>\n</html>\n";
    let server = ScriptedServer::always(move || raw(502, "text/html", page)).await;
    let error = get_error(&server, "/apis/workshop.example.com/v1").await;
    match error.kind() {
        Some(RequestError::Http { code, body }) => {
            assert_eq!(*code, 502);
            assert!(body.contains("<title>502 Bad Gateway</title>"), "{body}");
        }
        other => panic!("expected Http, got {other:?}"),
    }
    let text = error.to_string();
    assert!(text.starts_with("GET /apis/workshop.example.com/v1: HTTP 502 Bad Gateway and the body is not a Kubernetes Status"), "{text}");
    assert!(!text.contains('\n'), "one line: {text}");
}

/// A 2xx body that is not the expected JSON is a Decode error naming the step.
#[tokio::test]
async fn bad_json_in_a_success_body_is_a_decode_error() {
    let cut_short = "{\"kind\": \"PodList\", \"items\": [tru";
    let server = ScriptedServer::always(move || raw(200, "application/json", cut_short)).await;
    let error = get_error(&server, "/api/v1/namespaces/default/pods").await;
    match &error {
        ClientError::Request {
            method,
            path,
            kind: RequestError::Decode { code, snippet, .. },
        } => {
            assert_eq!(
                (method.as_str(), path.as_str(), *code),
                ("GET", "/api/v1/namespaces/default/pods", 200)
            );
            assert!(snippet.contains("PodList"), "{snippet}");
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    // The chain: the request's error, which step failed (`RequestError::Decode`), serde_json's.
    let kind = std::error::Error::source(&error).expect("the step as the cause");
    let cause = kind.source().expect("the serde_json error under it");
    assert!(cause.is::<serde_json::Error>(), "{cause:?}");
}

/// Nobody listening: a Connect error that names the server, distinct from a timeout.
#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    // Bind then drop: the port is (almost certainly) free and refuses connections.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = plain_client(&format!("http://127.0.0.1:{port}"));
    let error = client.get::<Value>("/version").await.unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Connect { .. })),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.starts_with("GET /version: cannot connect to the API server: "),
        "{text}"
    );
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    // The cause is kept, not just its text: hyper-util's error, and the io error under it.
    let mut causes = 0;
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        causes += 1;
        cause = inner.source();
    }
    assert!(causes >= 2, "{error:?}");
}

/// A server that never answers: the request ends with Timeout after the configured time
/// (paused clock: the 30 s default passes instantly).
#[tokio::test(start_paused = true)]
async fn a_silent_server_times_out() {
    let server = ScriptedServer::silent().await;
    let started = tokio::time::Instant::now();
    let error = get_error(&server, "/api/v1/namespaces/default/pods").await;
    assert!(
        matches!(error.kind(), Some(RequestError::Timeout { after }) if *after == Duration::from_secs(30)),
        "{error:?}"
    );
    assert_eq!(started.elapsed().as_secs(), 30);
    assert_eq!(
        error.to_string(),
        "GET /api/v1/namespaces/default/pods: no complete response within 30s"
    );
}

/// The timeout is configurable per Config.
#[tokio::test(start_paused = true)]
async fn the_request_timeout_is_configurable() {
    let server = ScriptedServer::silent().await;
    let mut config = Config::from_url(&server.url).unwrap();
    config.request_timeout = Duration::from_secs(2);
    let client = Client::new(config).unwrap();
    let started = tokio::time::Instant::now();
    let error = client.get::<Value>("/version").await.unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Timeout { .. })),
        "{error:?}"
    );
    assert_eq!(started.elapsed().as_secs(), 2);
}

/// Every request says who we are (User-Agent), asks for JSON, and labels its body's type;
/// patches carry the patch content type.
#[tokio::test]
async fn requests_carry_user_agent_accept_and_content_type() {
    let server = ScriptedServer::always(|| json(200, json!({"kind": "Pod"}))).await;
    let client = plain_client(&server.url);
    let _: Value = client
        .get("/api/v1/namespaces/default/pods/p")
        .await
        .unwrap();
    let _: Value = client
        .create("/api/v1/namespaces/default/pods", &json!({"kind": "Pod"}))
        .await
        .unwrap();
    let _: Value = client
        .patch(
            "/api/v1/namespaces/default/pods/p",
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    for request in &requests {
        assert_eq!(
            request.user_agent.as_deref(),
            Some(concat!("postgres-operator/", env!("CARGO_PKG_VERSION")))
        );
        assert_eq!(request.accept.as_deref(), Some("application/json"));
        assert_eq!(
            request.authorization, None,
            "no credentials configured, none sent"
        );
    }
    assert_eq!(requests[0].content_type, None);
    assert_eq!(
        requests[1].content_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(requests[1].body, br#"{"kind":"Pod"}"#);
    assert_eq!(requests[2].method, "PATCH");
    assert_eq!(
        requests[2].content_type.as_deref(),
        Some("application/merge-patch+json")
    );
}

/// A server URL with a path prefix (as behind Rancher) keeps the prefix; query strings pass through.
#[tokio::test]
async fn paths_append_to_the_server_url() {
    let server = ScriptedServer::always(|| json(200, json!({}))).await;
    let client = plain_client(&format!("{}/k8s/clusters/c-1/", server.url));
    let _: Value = client
        .get("/api/v1/pods?labelSelector=app%3Dpostgres&limit=5")
        .await
        .unwrap();
    assert_eq!(
        server.requests()[0].path,
        "/k8s/clusters/c-1/api/v1/pods?labelSelector=app%3Dpostgres&limit=5"
    );
}

/// `stream` returns the body chunk by chunk and ends cleanly; a non-2xx at the start is an error.
#[tokio::test]
async fn stream_yields_bytes_then_ends_and_reports_errors_at_start() {
    let server = ScriptedServer::http(|request, _| {
        if request.path.contains("forbidden") {
            ready(status(403, "Forbidden", "no watching for you"))
        } else {
            ready(raw(
                200,
                "application/json",
                "{\"type\":\"ADDED\"}\n{\"type\":\"DELETED\"}\n",
            ))
        }
    })
    .await;
    let client = plain_client(&server.url);
    let mut stream = client.stream("/api/v1/pods?watch=true").await.unwrap();
    let mut all = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        all.extend_from_slice(&chunk.unwrap());
    }
    assert_eq!(all, b"{\"type\":\"ADDED\"}\n{\"type\":\"DELETED\"}\n");
    let error = client.stream("/forbidden?watch=true").await.unwrap_err();
    assert_eq!(error.status_code(), Some(403));
}

/// A watch connection that drops mid-body is a ReadBody error, not a clean end of stream: the
/// watch must not mistake a broken connection for the server's normal timeout.
#[tokio::test]
async fn a_stream_cut_mid_body_is_a_transport_error() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = socket.read(&mut request).await.unwrap();
        // One complete chunk, then the connection closes without the terminating 0-chunk.
        socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n{\"type\":\"ADDED\"}\n\r\n")
            .await
            .unwrap();
        socket.shutdown().await.unwrap();
    });
    let client = plain_client(&url);
    let mut stream = client.stream("/api/v1/pods?watch=true").await.unwrap();
    let first = stream.next_chunk().await.unwrap().unwrap();
    assert_eq!(&first[..], b"{\"type\":\"ADDED\"}\n");
    let error = stream
        .next_chunk()
        .await
        .expect("an error, not a clean end")
        .unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::ReadBody(_))),
        "{error:?}"
    );
    assert!(
        error.to_string().starts_with(
            "GET /api/v1/pods?watch=true: connection failed while reading the response body"
        ),
        "{error}"
    );
    assert!(
        std::error::Error::source(&error).is_some(),
        "the hyper error is kept as the cause"
    );
}

/// Headers arrive but the body stalls: a non-watch request still ends with Timeout, not a hang.
#[tokio::test(start_paused = true)]
async fn a_stalled_body_times_out() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = socket.read(&mut request).await.unwrap();
        socket
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"kind\":")
            .await
            .unwrap();
        // Hold the connection open without sending the rest.
        std::future::pending::<()>().await;
        drop(socket);
    });
    let client = plain_client(&url);
    let started = tokio::time::Instant::now();
    let error = client.get::<Value>("/api/v1/pods").await.unwrap_err();
    assert!(
        matches!(error.kind(), Some(RequestError::Timeout { .. })),
        "{error:?}"
    );
    assert_eq!(started.elapsed().as_secs(), 30);
}
