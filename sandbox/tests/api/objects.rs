//! What the sandbox does to objects, as kube-apiserver and its controllers would: server-set
//! metadata, optimistic concurrency, generation, the status and scale subresources, CRD
//! lifecycle, garbage collection, finalizers, the simulated kubelet, discovery and OpenAPI.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Run: `cargo test -p sandbox --test api objects::`.

use std::time::Duration;

use http::Method;
use serde_json::{json, Value};
use test_support::http_client::{
    cluster, crd_json, pod, sandbox_and_http, sandbox_and_http_with, sandbox_with_crd, Http,
};

const PGC: &str = "/apis/workshop.example.com/v1/namespaces/default/postgresclusters";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CRD: &str =
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/postgresclusters.workshop.example.com";

/// The `name` of each element of the JSON array `list` (resources, table columns).
fn names_in(list: &Value) -> Vec<&str> {
    let items = list.as_array().expect("an array");
    items
        .iter()
        .filter_map(|item| item["name"].as_str())
        .collect()
}

/// Create fills in uid, creationTimestamp, generation, resourceVersion, kind and apiVersion;
/// generateName gets a 5-character suffix; a second create of the same name is 409 AlreadyExists.
#[tokio::test]
async fn create_sets_server_metadata_and_refuses_duplicates() {
    let (sandbox, http) = sandbox_with_crd().await;
    let mut body = cluster("db1", 3);
    body.as_object_mut().map(|o| o.remove("kind"));
    let created = http.create(PGC, &body).await;
    let object = created.json();
    assert_eq!(object["kind"], "PostgresCluster");
    assert_eq!(object["apiVersion"], "workshop.example.com/v1");
    assert_eq!(object["metadata"]["namespace"], "default");
    assert_eq!(object["metadata"]["generation"], 1);
    assert_eq!(object["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert!(object["metadata"]["creationTimestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    assert_eq!(
        object["metadata"]["resourceVersion"].as_str(),
        Some(sandbox.resource_version().as_str())
    );

    let again = http.post(PGC, &cluster("db1", 3)).await;
    assert_eq!(again.status, 409);
    let status = again.json();
    assert_eq!(status["reason"], "AlreadyExists");
    assert_eq!(
        status["message"],
        "postgresclusters.workshop.example.com \"db1\" already exists"
    );

    let generated = http
        .post(PGC, &json!({"apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
                          "metadata": {"generateName": "db-"}, "spec": {"size": 1, "version": "16"}}))
        .await
        .json();
    let name = generated["metadata"]["name"].as_str().unwrap_or_default();
    assert!(name.starts_with("db-") && name.len() == 8, "{name}");

    let missing = http
        .post("/api/v1/namespaces/nowhere/pods", &pod("p", json!({})))
        .await;
    missing.assert_refused(404, "namespaces \"nowhere\" not found");
}

/// PUT with a stale resourceVersion is 409 Conflict; generation moves on spec changes only.
#[tokio::test]
async fn updates_are_optimistic_and_generation_tracks_spec() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let first = http.post(PGC, &cluster("db1", 3)).await.json();

    let mut changed = first.clone();
    changed["spec"]["size"] = json!(4);
    let updated = http.put(&format!("{PGC}/db1"), &changed).await;
    assert_eq!(updated.status, 200, "{}", updated.text());
    assert_eq!(updated.json()["metadata"]["generation"], 2);

    let mut unconditional = changed.clone();
    unconditional["metadata"]
        .as_object_mut()
        .map(|m| m.remove("resourceVersion"));
    let refused = http.put(&format!("{PGC}/db1"), &unconditional).await;
    assert_eq!(
        refused.status, 422,
        "custom objects need a resourceVersion on PUT"
    );
    assert_eq!(
        refused.json()["details"]["causes"][0]["field"],
        "metadata.resourceVersion"
    );

    let stale = http.put(&format!("{PGC}/db1"), &changed).await;
    assert_eq!(stale.status, 409);
    let status = stale.json();
    assert_eq!(status["reason"], "Conflict");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("the object has been modified"),
        "{status}"
    );

    let labelled = http
        .merge_patch(
            &format!("{PGC}/db1"),
            &json!({"metadata": {"labels": {"tier": "db"}}}),
        )
        .await
        .json();
    assert_eq!(
        labelled["metadata"]["generation"], 2,
        "metadata changes keep the generation"
    );
    assert_ne!(
        labelled["metadata"]["resourceVersion"],
        updated.json()["metadata"]["resourceVersion"]
    );
}

/// With a status subresource, main-resource writes ignore status and /status writes change
/// only status (and do not bump generation).
#[tokio::test]
async fn status_subresource_separates_spec_and_status_writers() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let mut body = cluster("db1", 3);
    body["status"] = json!({"phase": "Sneaky"});
    let created = http.post(PGC, &body).await.json();
    assert!(
        created.get("status").is_none(),
        "status dropped on create: {created}"
    );

    let mut status_write = created.clone();
    status_write["status"] = json!({"phase": "Running", "readyInstances": 3});
    status_write["spec"]["size"] = json!(99);
    let written = http.put(&format!("{PGC}/db1/status"), &status_write).await;
    assert_eq!(written.status, 200, "{}", written.text());
    let written = written.json();
    assert_eq!(written["status"]["phase"], "Running");
    assert_eq!(written["spec"]["size"], 3, "spec untouched by /status");
    assert_eq!(written["metadata"]["generation"], 1);

    let main = http
        .merge_patch(
            &format!("{PGC}/db1"),
            &json!({"status": {"phase": "Ignored"}, "spec": {"size": 5}}),
        )
        .await
        .json();
    assert_eq!(
        main["status"]["phase"], "Running",
        "status untouched by the main resource"
    );
    assert_eq!(main["spec"]["size"], 5);

    let bad = http
        .merge_patch(
            &format!("{PGC}/db1/status"),
            &json!({"status": {"readyInstances": "three"}}),
        )
        .await;
    assert_eq!(bad.status, 422, "status is validated too");
}

/// /scale reads and writes .spec.size through an autoscaling/v1 Scale; a PUT with no
/// Content-Type works, as kubectl sends it.
#[tokio::test]
async fn scale_subresource_maps_replicas_to_spec_size() {
    let (_sandbox, http) = sandbox_with_crd().await;
    http.post(PGC, &cluster("db1", 3)).await;
    http.merge_patch(
        &format!("{PGC}/db1/status"),
        &json!({"status": {"size": 2}}),
    )
    .await;

    let scale = http.get(&format!("{PGC}/db1/scale")).await.json();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["replicas"], 2);

    let mut put = scale.clone();
    put["spec"]["replicas"] = json!(6);
    let answer = http
        .send(
            Method::PUT,
            &format!("{PGC}/db1/scale"),
            None,
            put.to_string().into_bytes(),
            &[],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.json()["spec"]["replicas"], 6);
    assert_eq!(
        http.get(&format!("{PGC}/db1")).await.json()["spec"]["size"],
        6
    );

    let patched = http
        .merge_patch(
            &format!("{PGC}/db1/scale"),
            &json!({"spec": {"replicas": 2}}),
        )
        .await;
    assert_eq!(patched.json()["spec"]["replicas"], 2);
    let invalid = http
        .merge_patch(
            &format!("{PGC}/db1/scale"),
            &json!({"spec": {"replicas": 0}}),
        )
        .await;
    assert_eq!(
        invalid.status,
        422,
        "size minimum 1 still applies: {}",
        invalid.text()
    );
}

/// A custom object failing the schema is 422 Invalid naming the field; unknown fields are
/// pruned, or refused with 400 under fieldValidation=Strict.
#[tokio::test]
async fn custom_objects_are_validated_and_pruned_by_schema() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let mut bad = cluster("bad", 3);
    bad["spec"]["size"] = json!("three");
    let answer = http.post(PGC, &bad).await;
    assert_eq!(answer.status, 422);
    let status = answer.json();
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "PostgresCluster");
    assert_eq!(status["details"]["group"], "workshop.example.com");
    assert_eq!(status["details"]["name"], "bad");
    assert_eq!(status["details"]["causes"][0]["field"], "spec.size");

    let mut extra = cluster("extra", 3);
    extra["spec"]["colour"] = json!("blue");
    let strict = http
        .post(&format!("{PGC}?fieldValidation=Strict"), &extra)
        .await;
    strict.assert_refused(400, "PostgresCluster in version \"v1\" cannot be handled as a PostgresCluster: strict decoding error: unknown field \"spec.colour\"");
    let duplicated = br#"{"apiVersion":"workshop.example.com/v1","kind":"PostgresCluster","metadata":{"name":"dup"},"spec":{"size":1,"size":2,"version":"1"}}"#;
    let answer = http
        .send(
            Method::POST,
            &format!("{PGC}?fieldValidation=Strict"),
            Some("application/json"),
            duplicated.to_vec(),
            &[],
        )
        .await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.json()["message"]
            .as_str()
            .unwrap_or_default()
            .contains("duplicate field \"spec.size\""),
        "{}",
        answer.text()
    );

    let warned = http.post(PGC, &extra).await;
    assert_eq!(warned.status, 201);
    assert!(warned
        .header("warning")
        .is_some_and(|w| w.contains("spec.colour")));
    assert!(warned.json()["spec"].get("colour").is_none(), "pruned");
}

/// Deleting a CRD removes its endpoints, discovery entry and objects; re-creating serves again.
#[tokio::test]
async fn deleting_a_crd_removes_its_api() {
    let (_sandbox, http) = sandbox_with_crd().await;
    http.post(PGC, &cluster("db1", 3)).await;
    let crd = http.get(CRD).await.json();
    assert_eq!(crd["status"]["acceptedNames"]["kind"], "PostgresCluster");
    let types: Vec<&str> = crd["status"]["conditions"]
        .as_array()
        .map(|c| c.iter().filter_map(|c| c["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(types, ["NamesAccepted", "Established"]);
    let replaced = http.put(CRD, &crd).await;
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    assert_eq!(
        replaced.json()["metadata"]["resourceVersion"],
        crd["metadata"]["resourceVersion"],
        "an unchanged CRD is a no-op write"
    );
    assert_eq!(
        http.post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd_json()
        )
        .await
        .status,
        409
    );

    assert_eq!(http.delete(CRD).await.status, 200);
    assert_eq!(http.get(PGC).await.status, 404);
    assert_eq!(http.get("/apis/workshop.example.com/v1").await.status, 404);
    let groups = http.get("/apis").await.json();
    assert!(
        !groups.to_string().contains("workshop.example.com"),
        "{groups}"
    );

    http.install_crd().await;
    assert_eq!(
        http.get(PGC).await.json()["items"],
        json!([]),
        "old objects went with the CRD"
    );
}

/// The CRD's Established condition waits for the configured delay (a MODIFIED on CRD watches).
#[tokio::test]
async fn established_waits_for_the_configured_delay() {
    let delay = Duration::from_millis(400);
    let (sandbox, http) = sandbox_and_http_with(|options| options.established_delay = delay).await;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let mut watch = http
        .stream(&format!(
            "{crds}?watch=true&resourceVersion={}",
            sandbox.resource_version()
        ))
        .await;
    // Before the POST: the controller's timer starts after it, so the delay is a lower bound
    // however slowly this machine hands over the events.
    let started = std::time::Instant::now();
    let created = http.post(crds, &crd_json()).await.json();
    assert!(!created["status"].to_string().contains("Established"));
    watch.next_event_of("ADDED", Duration::from_secs(5)).await;
    let modified = watch
        .next_event_of("MODIFIED", Duration::from_secs(5))
        .await;
    assert!(modified["object"]["status"]
        .to_string()
        .contains("Established"));
    let waited = started.elapsed();
    assert!(waited >= delay, "came after the delay: {waited:?}");
}

/// Deleting an owner deletes its dependents (background GC, by uid); a dependent with a
/// finalizer is only marked for deletion.
#[tokio::test]
async fn deleting_an_owner_collects_its_pods_unless_a_finalizer_holds_one() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let owner = http.post(PGC, &cluster("db1", 2)).await.json();
    let reference = json!([{"apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "name": "db1", "uid": owner["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}]);
    for name in ["db1-0", "db1-1"] {
        let mut body = pod(name, json!({"cluster": "db1"}));
        body["metadata"]["ownerReferences"] = reference.clone();
        assert_eq!(http.post(PODS, &body).await.status, 201);
    }
    let mut held = pod("db1-held", json!({}));
    held["metadata"]["ownerReferences"] = reference.clone();
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    http.post(PODS, &held).await;
    http.post(PODS, &pod("unrelated", json!({}))).await;

    assert_eq!(http.delete(&format!("{PGC}/db1")).await.status, 200);
    assert_eq!(http.get(&format!("{PODS}/db1-0")).await.status, 404);
    assert_eq!(http.get(&format!("{PODS}/db1-1")).await.status, 404);
    assert_eq!(http.get(&format!("{PODS}/unrelated")).await.status, 200);
    let held = http.get(&format!("{PODS}/db1-held")).await.json();
    assert!(held["metadata"]["deletionTimestamp"].is_string(), "{held}");

    // Orphan policy leaves dependents alone.
    let owner = http.post(PGC, &cluster("db2", 1)).await.json();
    let mut orphan = pod("db2-0", json!({}));
    orphan["metadata"]["ownerReferences"] = json!([{"apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster", "name": "db2", "uid": owner["metadata"]["uid"]}]);
    http.post(PODS, &orphan).await;
    http.delete_with(&format!("{PGC}/db2"), br#"{"propagationPolicy":"Orphan"}"#)
        .await;
    assert_eq!(http.get(&format!("{PODS}/db2-0")).await.status, 200);
}

/// The simulated kubelet: Pending, then Running with an IP, Ready and container statuses after
/// kubelet_delay (a delay changed later applies to pods already waiting); logs are text/plain;
/// nothing actually runs.
#[tokio::test]
async fn pods_go_pending_then_running_without_running_anything() {
    let (sandbox, http) =
        sandbox_and_http_with(|options| options.kubelet_delay = Duration::from_millis(100)).await;
    let created = http.post(PODS, &pod("web", json!({}))).await.json();
    assert_eq!(created["status"]["phase"], "Pending");
    let running = test_support::eventually(Duration::from_secs(5), "pod Running", || {
        let http = http.clone();
        async move {
            let pod = http.get(&format!("{PODS}/web")).await.json();
            (pod["status"]["phase"] == "Running").then_some(pod)
        }
    })
    .await;
    assert!(running["status"]["podIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("10.")));
    assert!(running["status"]["startTime"].is_string());
    assert_eq!(
        running["status"]["containerStatuses"][0]["image"],
        "postgres:16.4"
    );
    assert_eq!(running["status"]["containerStatuses"][0]["ready"], true);
    let ready = running["status"]["conditions"]
        .as_array()
        .expect("conditions");
    assert!(ready
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True"));

    let log = http
        .get(&format!("{PODS}/web/log?container=postgres"))
        .await;
    assert_eq!(log.status, 200);
    assert!(log
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/plain")));
    assert!(log.text().contains("simulated"));

    sandbox
        .faults()
        .set_kubelet_delay(Duration::from_secs(3600));
    let stuck = http.post(PODS, &pod("stuck", json!({}))).await.json();
    assert_eq!(stuck["status"]["phase"], "Pending");
    tokio::time::sleep(Duration::from_millis(300)).await; // proving an absence: nothing may happen
    assert_eq!(
        http.get(&format!("{PODS}/stuck")).await.json()["status"]["phase"],
        "Pending"
    );
    // A shorter delay reaches the pods already waiting: a test holds a pod Pending this way.
    sandbox.faults().set_kubelet_delay(Duration::ZERO);
    test_support::eventually(Duration::from_secs(5), "the held pod Running", || {
        let http = http.clone();
        async move {
            let pod = http.get(&format!("{PODS}/stuck")).await.json();
            (pod["status"]["phase"] == "Running").then_some(())
        }
    })
    .await;
    http.delete(&format!("{PODS}/stuck")).await;

    let failed = sandbox.faults().fail_random_pods(7, 1);
    assert_eq!(failed, ["web"]);
    let crashed = http.get(&format!("{PODS}/web")).await.json();
    assert_eq!(crashed["status"]["phase"], "Failed");
    assert_eq!(
        crashed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        137
    );
    assert!(
        sandbox.faults().fail_random_pods(7, 1).is_empty(),
        "only Running pods fail"
    );

    let killed = sandbox.faults().kill_random_pods(42, 1);
    assert_eq!(killed, ["web"]);
    assert_eq!(http.get(&format!("{PODS}/web")).await.status, 404);
}

/// Discovery: aggregated v2 with the exact media type when asked, legacy documents otherwise,
/// subresources listed; OpenAPI v3 lists fieldValidation on each kind's patch; v2 is 404.
#[tokio::test]
async fn discovery_and_openapi_describe_custom_resources() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let version = http.get("/version").await.json();
    assert_eq!(
        (version["major"].as_str(), version["minor"].as_str()),
        (Some("1"), Some("32"))
    );

    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let aggregated = http.get_accept("/apis", accept).await;
    assert_eq!(
        aggregated.header("content-type").as_deref(),
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
    );
    let text = aggregated.text();
    assert!(
        text.contains("\"resource\":\"postgresclusters\"")
            && text.contains("\"scope\":\"Namespaced\""),
        "{text}"
    );
    assert!(text.contains("\"subresource\":\"scale\""), "{text}");

    let legacy = http.get("/apis/workshop.example.com/v1").await.json();
    let names = names_in(&legacy["resources"]);
    assert_eq!(
        names,
        [
            "postgresclusters",
            "postgresclusters/status",
            "postgresclusters/scale"
        ]
    );
    assert_eq!(legacy["resources"][0]["shortNames"], json!(["pgc"]));
    assert_eq!(http.get("/api").await.json()["versions"], json!(["v1"]));
    assert_eq!(
        http.get("/apis/workshop.example.com").await.json()["kind"],
        "APIGroup"
    );

    let index = http.get("/openapi/v3").await.json();
    let url = index["paths"]["apis/workshop.example.com/v1"]["serverRelativeURL"]
        .as_str()
        .expect("url")
        .to_string();
    let document = http.get(&url).await.json();
    let patch = &document["paths"]
        ["/apis/workshop.example.com/v1/namespaces/{namespace}/postgresclusters/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"]["kind"],
        "PostgresCluster"
    );
    assert!(patch["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .any(|p| p["name"] == "fieldValidation"));
    // OpenAPI v2 is an empty protobuf document (kubectl reads it only as protobuf).
    let v2 = http.get("/openapi/v2").await;
    assert_eq!(v2.status, 200);
    assert!(v2
        .header("content-type")
        .is_some_and(|t| t.contains("protobuf")));
}

/// Tables for `kubectl get`: Name first, printer columns with ages, row.object metadata.
#[tokio::test]
async fn lists_become_tables_when_kubectl_asks() {
    let (_sandbox, http) = sandbox_with_crd().await;
    http.post(PGC, &cluster("db1", 3)).await;
    let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let table = http
        .get_accept(&format!("{PGC}?limit=500"), accept)
        .await
        .json();
    assert_eq!(table["kind"], "Table");
    let columns = names_in(&table["columnDefinitions"]);
    assert_eq!(
        columns,
        [
            "Name",
            "Size",
            "Ready",
            "Primary",
            "Phase",
            "Version",
            "Last Backup",
            "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "db1");
    assert_eq!(cells[1], 3);
    assert!(cells[2].is_null());
    assert!(
        cells[7].as_str().is_some_and(|age| age.ends_with('s')),
        "{cells}"
    );
    assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "db1");
    assert!(table["metadata"]["resourceVersion"].is_string());

    http.post(PODS, &pod("web", json!({}))).await;
    let pods = http.get_accept(PODS, accept).await.json();
    let columns: Vec<&str> = pods["columnDefinitions"]
        .as_array()
        .expect("columns")
        .iter()
        .filter(|c| c["priority"] == 0)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(columns, ["Name", "Ready", "Status", "Restarts", "Age"]);
}

/// Lists page with limit/continue and filter with selectors.
#[tokio::test]
async fn lists_page_and_filter() {
    let (_sandbox, http) = sandbox_and_http().await;
    let secrets = "/api/v1/namespaces/default/secrets";
    for i in 0..5 {
        http.post(secrets, &json!({"metadata": {"name": format!("s{i}"), "labels": {"even": (i % 2 == 0).to_string()}}})).await;
    }
    let first = http.get(&format!("{secrets}?limit=2")).await.json();
    assert_eq!(first["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(first["metadata"]["remainingItemCount"], 3);
    let token = first["metadata"]["continue"].as_str().expect("continue");
    let rest = http
        .get(&format!("{secrets}?limit=10&continue={token}"))
        .await
        .json();
    let names: Vec<&str> = rest["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["s2", "s3", "s4"]);
    let even = http
        .get(&format!("{secrets}?labelSelector=even%20in%20(true)"))
        .await
        .json();
    assert_eq!(even["items"].as_array().map(Vec::len), Some(3));
    let bad = http.get(&format!("{secrets}?labelSelector=%3D%3D")).await;
    assert_eq!(bad.status, 400);
    let by_name = http
        .get(&format!("{secrets}?fieldSelector=metadata.name%3Ds3"))
        .await
        .json();
    assert_eq!(by_name["items"].as_array().map(Vec::len), Some(1));
    let unsupported = http
        .get(&format!("{secrets}?fieldSelector=data.k%3Dv"))
        .await;
    unsupported.assert_refused(400, "field label not supported: data.k");
}

/// TLS mode: the files of a service-account directory, 401 without the right token, and a
/// rotated token replaces the old one (file rewritten).
#[tokio::test]
async fn tls_mode_requires_the_current_bearer_token() {
    let (sandbox, dir) = test_support::start_tls_sandbox(Default::default()).await;
    assert!(sandbox.url().starts_with("https://127.0.0.1:"));
    let ca = std::fs::read(dir.path().join("ca.crt")).expect("ca.crt");
    let token = std::fs::read_to_string(dir.path().join("token")).expect("token");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("namespace")).expect("namespace"),
        "default"
    );
    assert_eq!(Some(token.clone()), sandbox.token());

    let good = Http::with_tls(&sandbox.url(), &ca, Some(token.clone()));
    assert_eq!(good.get(PODS).await.status, 200);
    let anonymous = Http::with_tls(&sandbox.url(), &ca, None);
    anonymous.get(PODS).await.assert_reason(401, "Unauthorized");
    assert_eq!(
        anonymous.get("/version").await.status,
        200,
        "public info stays readable"
    );

    let rotated = sandbox.rotate_token();
    assert_ne!(rotated, token);
    assert_eq!(good.get(PODS).await.status, 401, "the old token is refused");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("token")).expect("token"),
        rotated
    );
    let fresh = Http::with_tls(&sandbox.url(), &ca, Some(rotated));
    assert_eq!(fresh.get(PODS).await.status, 200);
}

/// ClusterIPs are allocated like kube-apiserver's: a requested free address is honoured, a
/// taken one is refused with 422 "provided IP is already allocated", one outside the range too,
/// headless Services take none, automatic ones never collide, and a deleted Service's address
/// can be requested again; the address cannot be changed by an update.
#[tokio::test]
async fn cluster_ips_are_unique_and_requested_ones_honoured() {
    let (_sandbox, http) = sandbox_and_http().await;
    let services = "/api/v1/namespaces/default/services";
    let service = |name: &str, ip: Option<&str>| {
        let mut body = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 5432}]}});
        if let Some(ip) = ip {
            body["spec"]["clusterIP"] = json!(ip);
        }
        body
    };
    let pinned = http
        .create(services, &service("pinned", Some("10.96.0.10")))
        .await;
    assert_eq!(pinned.json()["spec"]["clusterIPs"], json!(["10.96.0.10"]));
    let taken = http
        .post(services, &service("again", Some("10.96.0.10")))
        .await;
    taken.assert_refused(422, "Service \"again\" is invalid: spec.clusterIPs: Invalid value: []string{\"10.96.0.10\"}: failed to allocate IP 10.96.0.10: provided IP is already allocated");
    let outside = http
        .post(services, &service("outside", Some("192.168.0.1")))
        .await;
    outside.assert_says(422, "The range of valid IPs is 10.96.0.0/16");
    let headless = http
        .post(services, &service("headless", Some("None")))
        .await;
    assert_eq!(headless.json()["spec"]["clusterIPs"], json!(["None"]));

    let mut seen = std::collections::BTreeSet::new();
    for index in 0..50 {
        let created = http
            .post(services, &service(&format!("s{index}"), None))
            .await
            .json();
        let ip = created["spec"]["clusterIP"]
            .as_str()
            .expect("an address")
            .to_string();
        assert!(ip.starts_with("10.96.") && ip != "10.96.0.10", "{ip}");
        assert!(seen.insert(ip.clone()), "{ip} given twice");
    }

    let changed = http
        .merge_patch(
            &format!("{services}/pinned"),
            &json!({"spec": {"clusterIP": "10.96.0.11"}}),
        )
        .await;
    assert_eq!(changed.status, 422, "{}", changed.text());
    assert_eq!(http.delete(&format!("{services}/pinned")).await.status, 200);
    http.create(services, &service("again", Some("10.96.0.10")))
        .await;
}

/// Built-in defaulting: a Service gets a cluster IP and TCP ports, needs ports unless headless;
/// a Secret's stringData is base64-encoded into data.
#[tokio::test]
async fn built_in_kinds_get_their_defaults() {
    let (_sandbox, http) = sandbox_and_http().await;
    let services = "/api/v1/namespaces/default/services";
    let service = http
        .post(
            services,
            &json!({"metadata": {"name": "db1"}, "spec": {"selector": {"app": "db1"},
                                "ports": [{"name": "postgres", "port": 5432}]}}),
        )
        .await
        .json();
    assert!(service["spec"]["clusterIP"]
        .as_str()
        .is_some_and(|ip| ip.starts_with("10.96.")));
    assert_eq!(service["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], 5432);
    let portless = http
        .post(services, &json!({"metadata": {"name": "x"}, "spec": {}}))
        .await;
    assert_eq!(portless.status, 422);
    let headless = http
        .post(
            services,
            &json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}),
        )
        .await;
    assert_eq!(headless.status, 201);

    let secret = http
        .post(
            "/api/v1/namespaces/default/secrets",
            &json!({"metadata": {"name": "pw"}, "stringData": {"password": "hunter2"}}),
        )
        .await
        .json();
    assert_eq!(secret["data"]["password"], "aHVudGVyMg==");
    assert!(secret.get("stringData").is_none());
    assert_eq!(secret["type"], "Opaque");
}

/// `default:` values in a CRD schema are filled in on create, as kube-apiserver does.
#[tokio::test]
async fn schema_defaults_are_applied() {
    let (_sandbox, http) = sandbox_and_http().await;
    let mut crd = crd_json();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["paused"]["default"] = json!(false);
    let answer = http
        .post(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            &crd,
        )
        .await;
    assert_eq!(answer.status, 201);
    let created = http.post(PGC, &cluster("db1", 1)).await.json();
    assert_eq!(created["spec"]["paused"], false);
}

/// With a pod termination delay, a deleted running pod is Terminating (MODIFIED with a
/// deletionTimestamp) for at least that delay, then DELETED once the simulated kubelet has
/// "stopped" it; gracePeriodSeconds=0 deletes at once. The verdict is the watch's events in
/// order, never a GET's timing: a slow machine may take longer than the delay between two
/// requests.
#[tokio::test]
async fn pods_terminate_gracefully_when_asked_to() {
    let delay = Duration::from_millis(300);
    let (sandbox, http) =
        sandbox_and_http_with(|options| options.pod_termination_delay = delay).await;
    let mut watch = http
        .stream(&format!(
            "{PODS}?watch=true&resourceVersion={}",
            sandbox.resource_version()
        ))
        .await;
    http.create(PODS, &pod("web", json!({}))).await;
    // Only a pod the kubelet runs has something to stop: one deleted before it started has
    // nothing running and is removed at once (controllers.rs), so wait for Running first.
    loop {
        let event = watch
            .next_event(Duration::from_secs(5))
            .await
            .expect("the watch stays open until the pod runs");
        if event["object"]["status"]["phase"] == "Running" {
            break;
        }
    }
    let asked = std::time::Instant::now();
    let deleted = http.delete(&format!("{PODS}/web")).await.json();
    assert!(deleted["metadata"]["deletionTimestamp"].is_string());
    let terminating = watch
        .next_event_of("MODIFIED", Duration::from_secs(5))
        .await;
    assert!(
        terminating["object"]["metadata"]["deletionTimestamp"].is_string(),
        "{terminating}"
    );
    watch.next_event_of("DELETED", Duration::from_secs(5)).await;
    // A lower bound only: the kubelet's timer starts after the DELETE was accepted.
    assert!(
        asked.elapsed() >= delay,
        "gone after {:?}, before the termination delay",
        asked.elapsed()
    );
    assert_eq!(http.get(&format!("{PODS}/web")).await.status, 404);

    http.create(PODS, &pod("now", json!({}))).await;
    http.delete_with(&format!("{PODS}/now"), br#"{"gracePeriodSeconds":0}"#)
        .await;
    assert_eq!(
        http.get(&format!("{PODS}/now")).await.status,
        404,
        "grace period 0 is immediate"
    );
}

/// propagationPolicy=Foreground: the owner gets a deletionTimestamp and the `foregroundDeletion`
/// finalizer, stays while a dependent is held by its own finalizer, and goes once that clears.
#[tokio::test]
async fn foreground_deletion_waits_for_dependents() {
    let (_sandbox, http) = sandbox_with_crd().await;
    let owner = http.post(PGC, &cluster("db1", 1)).await.json();
    let mut held = pod("db1-0", json!({}));
    held["metadata"]["ownerReferences"] = json!([{"apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster", "name": "db1", "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": true}]);
    held["metadata"]["finalizers"] = json!(["example.com/keep"]);
    http.post(PODS, &held).await;

    let answer = http
        .delete_with(
            &format!("{PGC}/db1"),
            br#"{"propagationPolicy":"Foreground"}"#,
        )
        .await;
    assert_eq!(answer.status, 200);
    let waiting = http.get(&format!("{PGC}/db1")).await.json();
    assert_eq!(
        waiting["metadata"]["finalizers"],
        json!(["foregroundDeletion"])
    );
    assert!(
        http.get(&format!("{PODS}/db1-0")).await.json()["metadata"]["deletionTimestamp"]
            .is_string()
    );

    http.clear_finalizers(&format!("{PODS}/db1-0")).await;
    assert_eq!(http.get(&format!("{PODS}/db1-0")).await.status, 404);
    assert_eq!(
        http.get(&format!("{PGC}/db1")).await.status,
        404,
        "the owner went last"
    );
}
