//! The CRD is stage 01's to change, no one else's. Stages 02–05, the tour's operators and
//! watch-bench call `crd_check::check`: create the CRD when it is absent, and when it is there and
//! serves v1, go on — whatever it says — without a PUT, saying once what differs. Against
//! scripted servers whose CRD differs from ours and whose PUT answers 404, 403 or 405 (as
//! servers nobody here wrote do), with server defaults, with a newer release's CRD, with odd 409s,
//! a forbidden or impossible create and malformed answers; then each binary from stage 02 on,
//! run as a learner runs it, reaches its first watch event on such a server.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::support::up_to_date;
use postgres_operator::crd::{self, CrdError, Difference, Registration};
use postgres_operator::crd_check;
use serde_json::{json, Value};
use test_support::plain_client;
use test_support::scripted_server::{
    json, lines_then_quiet, ready, status, Body, Recorded, Reply, ScriptedServer,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const CRD_URL: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com";
const CRDS_URL: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
const WAIT: Duration = Duration::from_secs(30);

/// A CRD as a server returns it: a resourceVersion, the defaults kube-apiserver fills in, and
/// Established.
fn served(crd: Value) -> Value {
    let mut crd = crd;
    crd["metadata"]["resourceVersion"] = json!("7");
    crd["metadata"]["uid"] = json!("5d2b7c1e");
    crd["metadata"]["managedFields"] = json!([{"manager": "kubectl-client-side-apply"}]);
    crd["spec"]["conversion"] = json!({"strategy": "None"});
    crd["spec"]["preserveUnknownFields"] = json!(false);
    crd["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
        ],
        "acceptedNames": {"kind": "PostgresCluster", "plural": "postgresclusters"},
        "storedVersions": ["v1"],
    });
    crd
}

/// The CRD of a server nobody here wrote, as that server serves it.
fn foreign_crd() -> Value {
    served(crate::support::foreign_crd())
}

/// A newer release's CRD: ours plus a field and a version this build does not know.
fn newer_crd() -> Value {
    let mut crd = crd::postgres_cluster_crd();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["monitoring"] = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    let mut v2 = crd["spec"]["versions"][0].clone();
    v2["name"] = json!("v2");
    v2["storage"] = json!(false);
    crd["spec"]["versions"].as_array_mut().unwrap().push(v2);
    served(crd)
}

fn not_found() -> hyper::Response<test_support::scripted_server::Body> {
    status(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// A server whose CRD is `crd` and whose PUT of it answers `put_code`; everything else 404.
async fn crd_server(crd: Value, put_code: u16) -> ScriptedServer {
    ScriptedServer::http(
        move |request, _| match (request.method.as_str(), request.path.as_str()) {
            ("GET", CRD_URL) => ready(json(200, crd.clone())),
            ("PUT", _) => ready(status(put_code, "Refused", "this server takes no PUT")),
            _ => ready(not_found()),
        },
    )
    .await
}

fn writes(server: &ScriptedServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .filter(|request| request.method != "GET")
        .map(|request| format!("{} {}", request.method, request.path))
        .collect()
}

/// A CRD that differs and cannot be updated (PUT → 404, 403 or 405): `check` goes on with
/// `Differs`, naming each difference, and writes nothing; stage 01's `ensure` tries the PUT and
/// fails with a hint that says what to do.
#[tokio::test]
async fn a_differing_crd_is_checked_never_put() {
    for put_code in [404, 403, 405] {
        let server = crd_server(foreign_crd(), put_code).await;
        let client = plain_client(&server.url);
        let found = crd_check::check(&client, WAIT, |_| {})
            .await
            .expect("check goes on");
        let Registration::Differs { differences, .. } = &found else {
            panic!("PUT {put_code}: {found:?}");
        };
        assert!(differences.contains(&Difference::Missing("versions[v1]: properties".into())));
        assert!(differences.contains(&Difference::Missing(
            "versions[v1].subresources.scale".into()
        )));
        assert!(found.to_string().contains("left as it is"), "{found}");
        assert_eq!(writes(&server), Vec::<String>::new(), "PUT {put_code}");

        let error = crd::ensure(&client).await.unwrap_err();
        assert!(matches!(error, CrdError::Update(..)), "{error}");
        let hint = error.hint().unwrap_or_default();
        match put_code {
            403 => assert!(
                hint.contains("may not update customresourcedefinitions"),
                "{hint}"
            ),
            _ => assert!(hint.contains("does not let us update"), "{hint}"),
        }
        assert_eq!(writes(&server), [format!("PUT {CRD_URL}")]);
    }
}

/// Our CRD with every field kube-apiserver fills in (conversion, preserveUnknownFields, status,
/// managedFields, a zero-valued `deprecated` and printer-column `priority`): up to date for both,
/// one GET each, nothing written.
#[tokio::test]
async fn server_defaults_are_no_difference() {
    let mut crd = served(crd::postgres_cluster_crd());
    crd["spec"]["versions"][0]["deprecated"] = json!(false);
    crd["spec"]["versions"][0]["additionalPrinterColumns"][0]["priority"] = json!(0);
    let server = crd_server(crd, 404).await;
    let client = plain_client(&server.url);
    assert_eq!(
        crd_check::check(&client, WAIT, |_| {}).await.unwrap(),
        up_to_date()
    );
    assert_eq!(crd::ensure(&client).await.unwrap(), up_to_date());
    assert_eq!(server.requests().len(), 2);
    assert_eq!(writes(&server), Vec::<String>::new());
}

/// A newer release's CRD (a version and a field this build does not know) is `Newer` and left
/// alone by every stage — stage 01 too, which would otherwise downgrade it.
#[tokio::test]
async fn a_newer_crd_is_never_replaced() {
    let server = crd_server(newer_crd(), 200).await;
    let client = plain_client(&server.url);
    for found in [
        crd_check::check(&client, WAIT, |_| {}).await.unwrap(),
        crd::ensure(&client).await.unwrap(),
    ] {
        let Registration::Newer { differences, .. } = &found else {
            panic!("{found:?}");
        };
        assert!(differences.contains(&Difference::Unknown("versions[v2]".into())));
        assert!(differences.contains(&Difference::Unknown("versions[v1]: spec.monitoring".into())));
        assert!(
            found.to_string().contains("newer than this build's"),
            "{found}"
        );
    }
    assert_eq!(writes(&server), Vec::<String>::new());
}

/// A server that answers the CRD's GET with 404 until `created` requests were made, and the
/// POST with `post`.
fn absent_then(
    post: impl Fn() -> hyper::Response<test_support::scripted_server::Body> + Send + Sync + 'static,
) -> impl Fn(Recorded, usize) -> Reply + Send + Sync + 'static {
    let posted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    move |request, _| match request.method.as_str() {
        "GET" if posted.load(std::sync::atomic::Ordering::SeqCst) => {
            ready(json(200, served(crd::postgres_cluster_crd())))
        }
        "GET" => ready(not_found()),
        _ => {
            posted.store(true, std::sync::atomic::Ordering::SeqCst);
            ready(post())
        }
    }
}

/// Absent, then a 409 on create — kube's AlreadyExists, or a non-standard reason and body — means
/// another creator won: read it again and go on.
#[tokio::test]
async fn any_409_on_create_reads_the_winner() {
    let answers: [fn() -> hyper::Response<test_support::scripted_server::Body>; 2] = [
        || {
            status(409, "AlreadyExists", "customresourcedefinitions.apiextensions.k8s.io \"postgresclusters.workshop.example.com\" already exists")
        },
        || test_support::scripted_server::raw(409, "text/plain", "conflict: try later"),
    ];
    for answer in answers {
        let server = ScriptedServer::http(absent_then(answer)).await;
        let client = plain_client(&server.url);
        assert_eq!(
            crd_check::check(&client, WAIT, |_| {}).await.unwrap(),
            up_to_date()
        );
        let calls: Vec<String> = server
            .requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        assert_eq!(
            calls,
            [
                format!("GET {CRD_URL}"),
                format!("POST {CRDS_URL}"),
                format!("GET {CRD_URL}")
            ]
        );
    }
}

/// Absent and not ours to create: 403 (RBAC) names the permission and the other way to register
/// the type; 405 and 501 (a server with no such verb) say so. Nothing is retried.
#[tokio::test]
async fn an_absent_crd_that_cannot_be_created_is_a_clear_error() {
    for code in [403, 405, 501] {
        let server =
            ScriptedServer::http(absent_then(move || status(code, "Refused", "not here"))).await;
        let error = crd_check::check(&plain_client(&server.url), WAIT, |_| {})
            .await
            .unwrap_err();
        assert!(matches!(error, CrdError::Create(..)), "{error}");
        assert!(error
            .to_string()
            .starts_with("creating CustomResourceDefinition"));
        let hint = error.hint().expect("a hint");
        assert!(hint.contains("kubectl apply -f kube/crd.yaml"), "{hint}");
        if code == 403 {
            assert!(
                hint.contains("may not create customresourcedefinitions.apiextensions.k8s.io"),
                "{hint}"
            );
        } else {
            assert!(hint.contains("does not let us create"), "{hint}");
        }
        assert_eq!(server.requests().len(), 2);
    }
}

/// Answers that are not a CRD — no spec, versions not a list — and a CRD that does not serve v1
/// are clear errors for `check` (and the first two for `ensure`), not panics, and nothing is written.
#[tokio::test]
async fn malformed_or_unserved_crds_are_clear_errors() {
    let mut unserved = crd::postgres_cluster_crd();
    unserved["spec"]["versions"][0]["name"] = json!("v1beta1");
    for (answer, said) in [
        (
            json!({"kind": "CustomResourceDefinition", "metadata": {}}),
            "is not one: it has no spec",
        ),
        (
            json!({"spec": {"group": "workshop.example.com", "versions": "v1"}}),
            "is not one: its spec.versions is not a list",
        ),
        (served(unserved), "does not serve v1 (it serves: v1beta1)"),
    ] {
        let server = crd_server(answer.clone(), 404).await;
        let client = plain_client(&server.url);
        let error = crd_check::check(&client, WAIT, |_| {}).await.unwrap_err();
        assert!(error.to_string().contains(said), "{error}");
        assert!(error.hint().is_some(), "{error}");
        if !said.starts_with("does not serve") {
            let error = crd::ensure(&client).await.unwrap_err();
            assert!(error.to_string().contains(said), "{error}");
        }
        assert_eq!(writes(&server), Vec::<String>::new());
    }
}

/// A list of nothing, current at resourceVersion 10.
fn empty_list(api_version: &str, kind: &str) -> hyper::Response<Body> {
    json(
        200,
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": {"resourceVersion": "10"}, "items": [],
        }),
    )
}

/// A server for the binaries: the foreign CRD (PUT → 404), a list of no PostgresClusters at
/// resourceVersion 10, then a watch that sends one ADDED and stays open; an empty pod list and a
/// quiet pod watch; 404 for anything else.
async fn watch_server() -> ScriptedServer {
    let cluster = json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"name": "example", "namespace": "default", "uid": "u-1", "resourceVersion": "11", "generation": 1},
        "spec": {"size": 3, "version": "16"},
    });
    let added = json!({"type": "ADDED", "object": cluster}).to_string();
    ScriptedServer::http(move |request, _| {
        let path = request.path.as_str();
        let watching = path.contains("watch=true") || path.contains("watch=1");
        match request.method.as_str() {
            "GET" if path == CRD_URL => ready(json(200, foreign_crd())),
            "GET"
                if path.starts_with(
                    "/apis/workshop.example.com/v1/namespaces/default/postgresclusters",
                ) =>
            {
                if watching {
                    ready(lines_then_quiet(vec![added.clone()]))
                } else {
                    ready(empty_list("workshop.example.com/v1", "PostgresClusterList"))
                }
            }
            "GET" if path.starts_with("/api/v1/namespaces/default/pods") => {
                if watching {
                    ready(lines_then_quiet(Vec::new()))
                } else {
                    ready(empty_list("v1", "PodList"))
                }
            }
            "PUT" => ready(status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )),
            _ => ready(not_found()),
        }
    })
    .await
}

/// Each binary from stage 02 on, started as a learner starts it against a server whose CRD
/// differs from ours and cannot be updated: it says once (at info level) what differs and how to
/// update it, reaches its first watch event, and never writes the CRD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_binary_after_stage01_reaches_its_first_watch_event() {
    let binaries: [(&str, &str, &[&str]); 6] = [
        ("stage02", env!("CARGO_BIN_EXE_stage02"), &[]),
        ("stage03", env!("CARGO_BIN_EXE_stage03"), &[]),
        (
            "stage04",
            env!("CARGO_BIN_EXE_stage04"),
            &["--leader-elect=false"],
        ),
        (
            "stage05",
            env!("CARGO_BIN_EXE_stage05"),
            &["--leader-elect=false"],
        ),
        (
            "stage06",
            env!("CARGO_BIN_EXE_stage06"),
            &["--leader-elect=false"],
        ),
        (
            "watch-bench",
            env!("CARGO_BIN_EXE_watch-bench"),
            &["--expect", "1"],
        ),
    ];
    for (name, path, extra) in binaries {
        let server = watch_server().await;
        // At info level, so that what differs is said.
        let mut child = test_support::operator_command(path, &server.url)
            .args(extra)
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let stderr = tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut all = String::new();
            while let Ok(Some(line)) = lines.next_line().await {
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let mut lines = BufReader::new(stdout).lines();
        let mut seen = String::new();
        let reached = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                seen.push_str(&line);
                seen.push('\n');
                let first_event = if name == "watch-bench" {
                    line.starts_with("watch-bench events=1 ")
                } else {
                    line.starts_with("PostgresCluster event: ADDED default/example")
                };
                if first_event {
                    return true;
                }
            }
            false
        })
        .await;
        let _ = child.start_kill();
        let _ = child.wait().await;
        let stderr = stderr.await.unwrap_or_default();
        assert_eq!(
            reached,
            Ok(true),
            "{name}:\nstdout:\n{seen}\nstderr:\n{stderr}"
        );
        if name != "watch-bench" {
            assert!(
                seen.contains("not as this build defines it"),
                "{name}: {seen}"
            );
        }
        assert_eq!(
            stderr
                .matches("to update it: `cargo run --bin stage01`")
                .count(),
            1,
            "{name}: {stderr}"
        );
        let crd_writes: Vec<String> = writes(&server)
            .into_iter()
            .filter(|call| call.contains("customresourcedefinitions"))
            .collect();
        assert_eq!(crd_writes, Vec::<String>::new(), "{name}");
    }
}

/// Stage 01 on the same server still owns the type: it tries the PUT, and when the server
/// refuses, exits 1 naming the step and what to do.
#[tokio::test]
async fn stage01_still_updates_and_says_why_it_cannot() {
    let server = watch_server().await;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_stage01"))
        .args(["--server", &server.url])
        .output()
        .await
        .expect("stage01 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "updating CustomResourceDefinition postgresclusters.workshop.example.com to our schema"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("does not let us update"), "{stderr}");
    assert_eq!(writes(&server), [format!("PUT {CRD_URL}")]);
}
