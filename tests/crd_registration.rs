//! Registering the CRD: 201 Created, 409 AlreadyExists as success (and a 409 with a reason
//! Kubernetes does not define, once a GET confirms it), 403 with a hint naming the
//! missing permission, waiting (bounded) for Established, and reading discovery back. Against a
//! scripted server, so each answer is exact; `tests/stage01_register.rs` does it against the sandbox.

mod fake_api_server;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_api_server::{json, plain_client, ready, status, FakeServer};
use postgres_operator::crd::{self, CrdError, Registration};
use serde_json::json;

/// The CRD POST goes to the apiextensions collection with our object as the body; 201 → Created.
#[tokio::test]
async fn register_posts_the_crd_and_reports_created() {
    let server = FakeServer::http(|request, _| {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        ready(json(201, body))
    })
    .await;
    let client = plain_client(&server.url);
    assert_eq!(crd::register(&client).await.unwrap(), Registration::Created);
    let request = &server.requests()[0];
    assert_eq!(request.method, "POST");
    assert_eq!(
        request.path,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    );
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body, crd::postgres_cluster_crd());
}

/// 409 AlreadyExists is not an error: the type is there.
#[tokio::test]
async fn already_exists_is_success() {
    let server = FakeServer::http(|_, _| {
        ready(status(409, "AlreadyExists", "customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\" already exists"))
    })
    .await;
    assert_eq!(
        crd::register(&plain_client(&server.url)).await.unwrap(),
        Registration::AlreadyExisted
    );
}

/// A 409 with a reason Kubernetes does not define (a peer server's "Object Already Exists") counts
/// as already existing once a GET of the CRD finds it, as client-go decides by code for unknown reasons.
#[tokio::test]
async fn a_conflict_with_an_unknown_reason_is_confirmed_by_a_get() {
    let server = FakeServer::http(|request, _| match request.method.as_str() {
        "POST" => ready(status(409, "Object Already Exists", "it is there")),
        _ => ready(json(200, crd::postgres_cluster_crd())),
    })
    .await;
    assert_eq!(
        crd::register(&plain_client(&server.url)).await.unwrap(),
        Registration::AlreadyExisted
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[1].method.as_str(), requests[1].path.as_str()),
        (
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com"
        )
    );
}

/// The same 409, but the GET finds nothing: an error that keeps both answers, the GET's as its cause.
#[tokio::test]
async fn an_unknown_conflict_that_the_get_does_not_confirm_is_an_error() {
    let server = FakeServer::http(|request, _| match request.method.as_str() {
        "POST" => ready(status(409, "Object Already Exists", "it is there")),
        _ => ready(status(
            404,
            "NotFound",
            "customresourcedefinitions \"postgresclusters.workshop.example.com\" not found",
        )),
    })
    .await;
    let error = crd::register(&plain_client(&server.url)).await.unwrap_err();
    match &error {
        CrdError::ConfirmExisting { conflict, source } => {
            assert_eq!(conflict.reason(), Some("Object Already Exists"));
            assert_eq!(source.status_code(), Some(404));
        }
        other => panic!("expected ConfirmExisting, got {other:?}"),
    }
    assert_eq!(error.client_error().unwrap().status_code(), Some(404));
    let cause = std::error::Error::source(&error).expect("the GET's error as the cause");
    assert!(cause.to_string().starts_with("GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com: NotFound (404)"), "{cause}");
}

/// A 409 with a reason Kubernetes does define (Conflict) means what it says: an error, and no GET.
#[tokio::test]
async fn a_conflict_with_a_known_reason_is_an_error() {
    let server =
        FakeServer::http(|_, _| ready(status(409, "Conflict", "the object has been modified")))
            .await;
    let error = crd::register(&plain_client(&server.url)).await.unwrap_err();
    assert!(matches!(error, CrdError::Register(_)), "{error:?}");
    assert_eq!(server.requests().len(), 1);
}

/// 403 on register: the error names the step, and the hint the verb, the resource and kube/rbac.yaml.
#[tokio::test]
async fn forbidden_register_hints_at_the_missing_rbac_rule() {
    let server = FakeServer::http(|_, _| {
        ready(status(403, "Forbidden", "customresourcedefinitions.apiextensions.k8s.io is forbidden: User \"system:serviceaccount:default:postgres-operator\" cannot create resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\" at the cluster scope"))
    })
    .await;
    let error = crd::register(&plain_client(&server.url)).await.unwrap_err();
    assert!(matches!(error, CrdError::Register(_)), "{error:?}");
    assert!(error.to_string().starts_with("registering CustomResourceDefinition postgresclusters.workshop.example.com: POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions: Forbidden (403)"), "{error}");
    let hint = error.hint().expect("a hint for 403");
    assert!(
        hint.contains("may not create customresourcedefinitions.apiextensions.k8s.io"),
        "{hint}"
    );
    assert!(hint.contains("kube/rbac.yaml"), "{hint}");
}

/// Other failures on register (a 500) are errors without an RBAC hint.
#[tokio::test]
async fn other_register_failures_are_errors() {
    let server = FakeServer::http(|_, _| ready(status(500, "InternalError", "boom"))).await;
    let error = crd::register(&plain_client(&server.url)).await.unwrap_err();
    assert_eq!(error.client_error().unwrap().status_code(), Some(500));
    assert_eq!(error.hint(), None);
}

fn crd_with_conditions(conditions: serde_json::Value) -> serde_json::Value {
    let mut crd = crd::postgres_cluster_crd();
    crd["status"] = json!({ "conditions": conditions });
    crd
}

/// Established arrives after a few polls (first a 404, then Installing, then True): wait returns
/// as soon as it is True, polling every 200 ms.
#[tokio::test(start_paused = true)]
async fn wait_established_polls_until_the_condition_is_true() {
    let server = FakeServer::http(|_, index| match index {
        0 => ready(status(404, "NotFound", "not yet")),
        1..=4 => ready(json(
            200,
            crd_with_conditions(json!([
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                {"type": "Established", "status": "False", "reason": "Installing"}
            ])),
        )),
        _ => ready(json(
            200,
            crd_with_conditions(json!([
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
            ])),
        )),
    })
    .await;
    let started = tokio::time::Instant::now();
    crd::wait_established(&plain_client(&server.url), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(server.requests().len(), 6);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(1000),
        "5 waits of 200 ms"
    );
    assert!(server.requests().iter().all(|r| r.method == "GET"
        && r.path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com"));
}

/// Never Established: a NotEstablished error after the timeout, naming the last conditions.
#[tokio::test(start_paused = true)]
async fn wait_established_is_bounded() {
    let server = FakeServer::http(|_, _| {
        ready(json(
            200,
            crd_with_conditions(
                json!([{"type": "Established", "status": "False", "reason": "Installing"}]),
            ),
        ))
    })
    .await;
    let started = tokio::time::Instant::now();
    let error = crd::wait_established(&plain_client(&server.url), Duration::from_secs(3))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() <= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, CrdError::NotEstablished { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("Established=False (Installing)"),
        "{error}"
    );
    assert!(error.hint().unwrap().contains("--established-timeout"));
}

/// A name clash (NamesAccepted False) fails at once with the server's message.
#[tokio::test]
async fn names_not_accepted_fails_fast() {
    let server = FakeServer::http(|_, _| {
        ready(json(200, crd_with_conditions(json!([
            {"type": "NamesAccepted", "status": "False", "reason": "ShortNamesConflict", "message": "\"pgc\" is already in use"}
        ]))))
    })
    .await;
    let error = crd::wait_established(&plain_client(&server.url), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("\"pgc\" is already in use"),
        "{error}"
    );
    assert_eq!(server.requests().len(), 1);
}

/// 403 while waiting: WaitEstablished, with a hint about `get`.
#[tokio::test]
async fn forbidden_wait_hints_at_get() {
    let server = FakeServer::http(|_, _| ready(status(403, "Forbidden", "cannot get"))).await;
    let error = crd::wait_established(&plain_client(&server.url), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(error, CrdError::WaitEstablished(_)));
    assert!(error
        .hint()
        .unwrap()
        .contains("may not get customresourcedefinitions"));
}

/// Discovery's APIResourceList becomes ServedResource values, subresources included.
#[tokio::test]
async fn served_resources_reads_the_group_version_discovery() {
    let seen = Arc::new(Mutex::new(String::new()));
    let path = seen.clone();
    let server = FakeServer::http(move |request, _| {
        *path.lock().unwrap() = request.path;
        ready(json(200, json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "workshop.example.com/v1",
            "resources": [
                {"name": "postgresclusters", "singularName": "postgrescluster", "namespaced": true,
                 "kind": "PostgresCluster", "verbs": ["delete","deletecollection","get","list","patch","create","update","watch"],
                 "shortNames": ["pgc"], "categories": ["workshop"]},
                {"name": "postgresclusters/status", "singularName": "", "namespaced": true,
                 "kind": "PostgresCluster", "verbs": ["get","patch","update"]}
            ]
        })))
    })
    .await;
    let resources = crd::served_resources(&plain_client(&server.url))
        .await
        .unwrap();
    assert_eq!(*seen.lock().unwrap(), "/apis/workshop.example.com/v1");
    assert_eq!(resources.len(), 2);
    assert_eq!(resources[0].name, "postgresclusters");
    assert_eq!(resources[0].kind, "PostgresCluster");
    assert!(resources[0].namespaced);
    assert!(resources[0].verbs.contains(&"watch".to_string()));
    assert_eq!(resources[1].name, "postgresclusters/status");
}

/// A server that stops answering mid-wait cannot stretch the wait past its timeout (each poll is
/// bounded by the time left, not by the client's 30 s request timeout).
#[tokio::test(start_paused = true)]
async fn a_hanging_poll_does_not_stretch_the_wait() {
    let server = FakeServer::http(|_, index| {
        if index == 0 {
            ready(json(
                200,
                crd_with_conditions(
                    json!([{"type": "Established", "status": "False", "reason": "Installing"}]),
                ),
            ))
        } else {
            Box::pin(std::future::pending())
        }
    })
    .await;
    let started = tokio::time::Instant::now();
    let error = crd::wait_established(&plain_client(&server.url), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert!(
        error.to_string().contains("Established=False (Installing)"),
        "{error}"
    );
}
