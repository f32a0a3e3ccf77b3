//! What a cluster task learns when a pod call fails: `PodApiError` wraps the client's error, so
//! the HTTP status survives — 403 (RBAC says no: retrying will not help) is told apart from 503
//! (the apiserver is busy: the next tick may well work). Against a scripted server.

use std::error::Error as _;

use postgres_operator::client::ClientError;
use postgres_operator::controller::pods::{label_selector, PodApi, PodApiError};
use test_support::plain_client;
use test_support::scripted_server::{ready, status, ScriptedServer};

/// The answer a pod list gets: 403 for namespace `locked`, 503 (retry at once) for `busy`.
async fn refusing_server() -> ScriptedServer {
    ScriptedServer::http(|request, _| {
        if request.path.starts_with("/api/v1/namespaces/locked/") {
            ready(status(403, "Forbidden", "pods is forbidden: User \"system:serviceaccount:default:postgres-operator\" cannot list resource \"pods\""))
        } else {
            let mut busy = status(503, "ServiceUnavailable", "the server is currently unable to handle the request");
            // Retry at once: the client's three retries take no time.
            busy.headers_mut()
                .insert("retry-after", http::HeaderValue::from_static("0"));
            ready(busy)
        }
    })
    .await
}

/// A caller of `PodApi::list_pods` tells 403 from 503 by the status code inside the error.
#[tokio::test]
async fn a_pod_list_error_keeps_the_http_status_403_apart_from_503() {
    let server = refusing_server().await;
    let client = plain_client(&server.url);
    let selector = label_selector("db");

    let forbidden = client.list_pods("locked", &selector).await.unwrap_err();
    assert_eq!(forbidden.status_code(), Some(403));
    assert!(
        matches!(&forbidden, PodApiError::ListPods { namespace, .. } if namespace == "locked"),
        "{forbidden:?}"
    );
    // The cause is the client's typed error, reachable through source() too.
    let cause = forbidden
        .source()
        .and_then(|cause| cause.downcast_ref::<ClientError>())
        .expect("a ClientError underneath");
    assert_eq!(cause.reason(), Some("Forbidden"));
    assert_eq!(server.requests().len(), 1, "403 is not retried");

    let busy = client.list_pods("busy", &selector).await.unwrap_err();
    assert_eq!(busy.status_code(), Some(503));
    assert_eq!(busy.client_error().reason(), Some("ServiceUnavailable"));
    assert!(
        busy.to_string().starts_with(
            "listing pods in namespace busy with selector app.kubernetes.io/name=postgres,workshop.example.com/cluster=db: GET /api/v1/namespaces/busy/pods?labelSelector="
        ),
        "{busy}"
    );
    assert_eq!(
        server.requests().len(),
        1 + 4,
        "503 is retried three times by the client before the task sees it"
    );
}

/// A failed delete names the pod and keeps the status too; a 404 is success (already gone).
#[tokio::test]
async fn a_pod_delete_error_keeps_its_status_and_404_is_success() {
    let server = ScriptedServer::http(|request, _| {
        ready(match request.path.ends_with("/gone") {
            true => status(404, "NotFound", "pods \"gone\" not found"),
            false => status(403, "Forbidden", "pods \"db-0000\" is forbidden"),
        })
    })
    .await;
    let client = plain_client(&server.url);
    client
        .delete_pod("default", "gone")
        .await
        .expect("404 is success");
    let error = client.delete_pod("default", "db-0000").await.unwrap_err();
    assert!(
        matches!(&error, PodApiError::DeletePod { name, .. } if name == "db-0000"),
        "{error:?}"
    );
    assert_eq!(error.status_code(), Some(403));
}
