//! A non-watch response body is read up to a cap (64 MiB by default, `Client::with_max_response_body`)
//! and no further: a server streaming an endless body, as a success or as an error, makes the
//! request fail with `BodyTooLarge` naming the method, path and cap, instead of growing the
//! process until the allocator aborts (issue 11, point 8).

use postgres_operator::client::{ClientError, RequestError, DEFAULT_MAX_RESPONSE_BODY};
use serde_json::Value;
use test_support::plain_client;
use test_support::scripted_server::{endless, raw, ready, ScriptedServer};

/// An endless 200 body stops at the default cap with an error naming method, path and cap.
#[tokio::test]
async fn an_endless_success_body_stops_at_the_default_cap() {
    let server = ScriptedServer::always(|| endless(200)).await;
    let client = plain_client(&server.url);
    let error = client
        .get::<Value>("/api/v1/namespaces/default/pods")
        .await
        .unwrap_err();
    match &error {
        ClientError::Request {
            method,
            path,
            kind: RequestError::BodyTooLarge { limit },
        } => {
            assert_eq!(
                (method.as_str(), path.as_str()),
                ("GET", "/api/v1/namespaces/default/pods")
            );
            assert_eq!(*limit, DEFAULT_MAX_RESPONSE_BODY);
            assert_eq!(*limit, 64 * 1024 * 1024);
        }
        other => panic!("expected BodyTooLarge, got {other:?}"),
    }
    let text = error.to_string();
    assert!(
        text.starts_with("GET /api/v1/namespaces/default/pods: the response body is larger than the cap of 67108864 bytes"),
        "{text}"
    );
}

/// An endless error body (a 503, which would otherwise be retried) stops at the cap too, and
/// is not retried: the next attempt would stream just as much.
#[tokio::test]
async fn an_endless_error_body_stops_at_the_cap_and_is_not_retried() {
    let server = ScriptedServer::always(|| endless(503)).await;
    let client = plain_client(&server.url).with_max_response_body(1024 * 1024);
    let error = client
        .delete::<Value>("/api/v1/namespaces/default/pods/db-0000")
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Request {
                kind: RequestError::BodyTooLarge { limit: 1_048_576 },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("DELETE /api/v1/namespaces/default/pods/db-0000: the response body is larger than the cap of 1048576 bytes"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// A body of exactly the cap is read; one byte more is refused from its Content-Length alone.
#[tokio::test]
async fn the_cap_is_inclusive_and_a_declared_length_over_it_fails() {
    let body = format!("\"{}\"", "x".repeat(1022));
    assert_eq!(body.len(), 1024);
    let longer = format!("\"{}\"", "x".repeat(1023));
    let server = ScriptedServer::http(move |request, _| {
        let answer = if request.path == "/fits" {
            &body
        } else {
            &longer
        };
        ready(raw(200, "application/json", answer))
    })
    .await;
    let client = plain_client(&server.url).with_max_response_body(1024);
    let fits: Value = client
        .get("/fits")
        .await
        .expect("1024 bytes fit a 1024-byte cap");
    assert_eq!(fits.as_str().map(str::len), Some(1022));
    let error = client.get::<Value>("/over").await.unwrap_err();
    assert!(
        matches!(
            error.kind(),
            Some(RequestError::BodyTooLarge { limit: 1024 })
        ),
        "{error:?}"
    );
}
