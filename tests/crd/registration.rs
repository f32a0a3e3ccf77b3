//! Ensuring the CRD: GET first; 404 → POST (201 Created); the same owned fields → nothing
//! written; different → PUT ours with the resourceVersion read; a 409 on either write → read
//! again, a bounded number of times; 403 with a hint naming the missing permission. Then waiting
//! (bounded) for Established, and reading discovery back. Against a scripted server, so each
//! answer is exact; `tests/crd/ensure.rs` and `tests/stages/stage01_register.rs` do it against the sandbox.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::up_to_date;
use postgres_operator::crd::{self, CrdError, Registration, CRD_NAME, ENSURE_ATTEMPTS};
use serde_json::json;
use test_support::plain_client;
use test_support::scripted_server::{json, ready, status, ScriptedServer};

const CRD_URL: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com";
const CRDS_URL: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

fn not_found() -> hyper::Response<test_support::scripted_server::Body> {
    status(
        404,
        "NotFound",
        "customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\" not found",
    )
}

/// Our CRD as a server returns it: with a resourceVersion, a defaulted conversion and a status.
fn served(crd: serde_json::Value, resource_version: &str) -> serde_json::Value {
    let mut crd = crd;
    crd["metadata"]["resourceVersion"] = json!(resource_version);
    crd["metadata"]["uid"] = json!("5d2b7c1e");
    crd["spec"]["conversion"] = json!({"strategy": "None"});
    crd["status"] = json!({"conditions": [{"type": "Established", "status": "True"}]});
    crd
}

/// No CRD yet: a GET (404), then the POST to the apiextensions collection with our object as the
/// body; 201 → Created.
#[tokio::test]
async fn an_absent_crd_is_created() {
    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "GET" => ready(not_found()),
        _ => {
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            ready(json(201, body))
        }
    })
    .await;
    let client = plain_client(&server.url);
    assert_eq!(
        crd::ensure(&client).await.unwrap(),
        Registration::Created {
            crd: CRD_NAME.into()
        }
    );
    let requests = server.requests();
    let calls: Vec<(&str, &str)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str()))
        .collect();
    assert_eq!(calls, [("GET", CRD_URL), ("POST", CRDS_URL)]);
    let body: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(body, crd::postgres_cluster_crd());
}

/// A CRD equal to ours in what we own (the server's conversion, status and metadata aside): one
/// GET, no write, "already up to date".
#[tokio::test]
async fn an_up_to_date_crd_is_left_alone() {
    let server =
        ScriptedServer::always(|| json(200, served(crd::postgres_cluster_crd(), "17"))).await;
    let registration = crd::ensure(&plain_client(&server.url)).await.unwrap();
    assert_eq!(registration, up_to_date());
    assert_eq!(
        registration.to_string(),
        "CustomResourceDefinition postgresclusters.workshop.example.com already up to date"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].method, "GET");
}

/// An older schema: PUT to the CRD's URL, carrying our owned fields, the resourceVersion that was
/// read (so a write in between is refused, not overwritten) and what the server filled in.
#[tokio::test]
async fn an_outdated_crd_is_replaced_with_the_resource_version_read() {
    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "GET" => ready(json(200, served(test_support::older_crd(), "17"))),
        _ => {
            let mut body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            body["metadata"]["resourceVersion"] = json!("18");
            ready(json(200, body))
        }
    })
    .await;
    let registration = crd::ensure(&plain_client(&server.url)).await.unwrap();
    assert_eq!(
        registration,
        Registration::Updated {
            crd: CRD_NAME.into()
        }
    );
    assert_eq!(
        registration.to_string(),
        "CustomResourceDefinition postgresclusters.workshop.example.com updated: an older schema was replaced"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        (requests[1].method.as_str(), requests[1].path.as_str()),
        ("PUT", CRD_URL)
    );
    let body: serde_json::Value = serde_json::from_slice(&requests[1].body).unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "17");
    assert_eq!(body["spec"]["conversion"]["strategy"], "None");
    let ours = crd::postgres_cluster_crd();
    for field in crd::OWNED_SPEC_FIELDS {
        assert_eq!(body["spec"][field], ours["spec"][field], "spec.{field}");
    }
}

/// The PUT meets a 409 (someone wrote the CRD after our GET): read again, and write again on top
/// of the newer resourceVersion.
#[tokio::test]
async fn a_conflicting_update_reads_again_and_retries() {
    let server = ScriptedServer::http(|request, index| match (request.method.as_str(), index) {
        ("GET", 0) => ready(json(200, served(test_support::older_crd(), "17"))),
        ("PUT", 1) => ready(status(409, "Conflict", "Operation cannot be fulfilled on customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\": the object has been modified; please apply your changes to the latest version and try again")),
        ("GET", _) => ready(json(200, served(test_support::older_crd(), "19"))),
        _ => {
            let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
            ready(json(200, body))
        }
    })
    .await;
    assert_eq!(
        crd::ensure(&plain_client(&server.url)).await.unwrap(),
        Registration::Updated {
            crd: CRD_NAME.into()
        }
    );
    let requests = server.requests();
    let methods: Vec<&str> = requests.iter().map(|r| r.method.as_str()).collect();
    assert_eq!(methods, ["GET", "PUT", "GET", "PUT"]);
    let body: serde_json::Value = serde_json::from_slice(&requests[3].body).unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "19");
}

/// The POST loses a race (409 AlreadyExists: created after our GET said 404): read again, and the
/// CRD found is compared like any other.
#[tokio::test]
async fn losing_the_create_race_reads_the_winner() {
    let server = ScriptedServer::http(|request, index| match (request.method.as_str(), index) {
        ("GET", 0) => ready(not_found()),
        ("POST", _) => ready(status(409, "AlreadyExists", "customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\" already exists")),
        _ => ready(json(200, served(crd::postgres_cluster_crd(), "3"))),
    })
    .await;
    assert_eq!(
        crd::ensure(&plain_client(&server.url)).await.unwrap(),
        up_to_date()
    );
    let methods: Vec<String> = server.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["GET", "POST", "GET"]);
}

/// A server that answers every POST with a 409 (of a reason Kubernetes does not define) and every
/// GET with 404 cannot keep us going round: KeptChanging after ENSURE_ATTEMPTS tries, with the
/// last 409 as its cause.
#[tokio::test]
async fn endless_conflicts_end_in_an_error() {
    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "POST" => ready(status(409, "Object Already Exists", "it is there")),
        _ => ready(not_found()),
    })
    .await;
    let error = crd::ensure(&plain_client(&server.url)).await.unwrap_err();
    match &error {
        CrdError::KeptChanging {
            crd,
            attempts,
            last,
        } => {
            assert_eq!(crd, CRD_NAME);
            assert_eq!(*attempts, ENSURE_ATTEMPTS);
            assert_eq!(last.reason(), Some("Object Already Exists"));
        }
        other => panic!("expected KeptChanging, got {other:?}"),
    }
    assert_eq!(server.requests().len(), 2 * ENSURE_ATTEMPTS as usize);
    let cause = std::error::Error::source(&error).expect("the last 409 as the cause");
    assert!(cause.to_string().contains("(409)"), "{cause}");
    assert!(error.hint().unwrap().contains("kubectl get crd"));
}

/// 403 on the first step, the GET: the error names the step, and the hint the verb, the resource
/// and kube/rbac.yaml.
#[tokio::test]
async fn forbidden_read_hints_at_the_missing_rbac_rule() {
    let message = "customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\" is forbidden: User \"system:serviceaccount:default:postgres-operator\" cannot get resource \"customresourcedefinitions\" in API group \"apiextensions.k8s.io\" at the cluster scope";
    let server = ScriptedServer::always(move || status(403, "Forbidden", message)).await;
    let error = crd::ensure(&plain_client(&server.url)).await.unwrap_err();
    assert!(matches!(error, CrdError::Read(..)), "{error:?}");
    assert!(error.to_string().starts_with("reading CustomResourceDefinition postgresclusters.workshop.example.com: GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com: Forbidden (403)"), "{error}");
    let hint = error.hint().expect("a hint for 403");
    assert!(
        hint.contains("may not get customresourcedefinitions.apiextensions.k8s.io"),
        "{hint}"
    );
    assert!(hint.contains("kube/rbac.yaml"), "{hint}");
}

/// 403 on the POST or the PUT: each hint names its own verb.
#[tokio::test]
async fn forbidden_writes_hint_at_create_and_update() {
    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "GET" => ready(not_found()),
        _ => ready(status(403, "Forbidden", "cannot create")),
    })
    .await;
    let error = crd::ensure(&plain_client(&server.url)).await.unwrap_err();
    assert!(matches!(error, CrdError::Create(..)), "{error:?}");
    assert!(error
        .hint()
        .unwrap()
        .contains("may not create customresourcedefinitions"));

    let server = ScriptedServer::http(|request, _| match request.method.as_str() {
        "GET" => ready(json(200, served(test_support::older_crd(), "5"))),
        _ => ready(status(403, "Forbidden", "cannot update")),
    })
    .await;
    let error = crd::ensure(&plain_client(&server.url)).await.unwrap_err();
    assert!(matches!(error, CrdError::Update(..)), "{error:?}");
    assert!(error.to_string().starts_with("updating CustomResourceDefinition postgresclusters.workshop.example.com to our schema: PUT "), "{error}");
    assert!(error
        .hint()
        .unwrap()
        .contains("may not update customresourcedefinitions"));
}

/// Other failures (a 500 on the GET) are errors without an RBAC hint, and nothing is written.
#[tokio::test]
async fn other_failures_are_errors() {
    let server = ScriptedServer::always(|| status(500, "InternalError", "boom")).await;
    let error = crd::ensure(&plain_client(&server.url)).await.unwrap_err();
    assert_eq!(error.client_error().unwrap().status_code(), Some(500));
    assert_eq!(error.hint(), None);
    assert!(server.requests().iter().all(|r| r.method == "GET"));
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
    let server = ScriptedServer::http(|_, index| match index {
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
    let server = ScriptedServer::always(|| {
        json(
            200,
            crd_with_conditions(
                json!([{"type": "Established", "status": "False", "reason": "Installing"}]),
            ),
        )
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
    let conditions = json!([
        {"type": "NamesAccepted", "status": "False", "reason": "ShortNamesConflict", "message": "\"pgc\" is already in use"}
    ]);
    let server =
        ScriptedServer::always(move || json(200, crd_with_conditions(conditions.clone()))).await;
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
    let server = ScriptedServer::always(|| status(403, "Forbidden", "cannot get")).await;
    let error = crd::wait_established(&plain_client(&server.url), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(matches!(error, CrdError::WaitEstablished(..)));
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
    let server = ScriptedServer::http(move |request, _| {
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
    let server = ScriptedServer::http(|_, index| {
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
