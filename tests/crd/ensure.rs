//! `crd::ensure` against the sandbox: an older CRD of ours (stage 01's before the status and scale
//! subresources) and a CRD of our name with someone else's schema are both updated in place, with
//! the objects already stored kept; a current CRD is left alone, with no write in the server's
//! request log. And the server's `spec.version` pattern agrees with `PostgresVersion`.

use std::time::Duration;

use crate::support::up_to_date;
use postgres_operator::api::{
    collection_path, crd_path, object_path, PostgresCluster, PostgresClusterSpec, PostgresVersion,
};
use postgres_operator::client::Client;
use postgres_operator::crd::{self, Registration, CRDS_PATH, CRD_NAME};
use sandbox::{Sandbox, SandboxOptions};
use serde_json::{json, Value};
use test_support::start_sandbox_with;

async fn sandbox_and_client() -> (Sandbox, Client) {
    let sandbox = start_sandbox_with(SandboxOptions::default()).await;
    let client = test_support::plain_client(&sandbox.url());
    (sandbox, client)
}

/// The CRD stage 01 registered before this schema: no status or scale subresource, no size
/// maximum, no version rule, and only the 2017 columns.
fn older_crd() -> Value {
    let mut crd = test_support::older_crd();
    crd["spec"]["versions"][0]["additionalPrinterColumns"] = json!([
        { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
        { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" },
    ]);
    crd
}

/// Someone else's CRD of our name: same group and kind, a schema that takes anything, no
/// subresources, another short name, and a label of its own.
fn foreign_crd() -> Value {
    let mut crd = crate::support::foreign_crd();
    crd["metadata"]["labels"] = json!({"owner": "someone-else"});
    crd["spec"]["names"]["shortNames"] = json!(["pg"]);
    let version = crd["spec"]["versions"][0]
        .as_object_mut()
        .expect("a version");
    version.remove("subresources");
    crd
}

/// Register `crd` as it is (what `kubectl apply` of another file would do) and wait for it.
async fn register_as_is(client: &Client, crd: &Value) {
    let _: Value = client.create(CRDS_PATH, crd).await.expect("CRD created");
    crd::wait_established(client, Duration::from_secs(10))
        .await
        .expect("established");
}

/// `crd::ensure`, which must say Updated, and the wait for Established after it: the writes of
/// our CRD it made.
async fn updated_by_ensure(sandbox: &Sandbox, client: &Client) -> Vec<String> {
    let writes_before = crd_writes(sandbox).len();
    assert_eq!(
        crd::ensure(client).await.unwrap(),
        Registration::Updated {
            crd: CRD_NAME.into()
        }
    );
    crd::wait_established(client, Duration::from_secs(10))
        .await
        .unwrap();
    crd_writes(sandbox).split_off(writes_before)
}

/// Writes (create, update, patch, delete) of our CRD in the request log.
fn crd_writes(sandbox: &Sandbox) -> Vec<String> {
    sandbox
        .requests()
        .into_iter()
        .filter(|r| r.resource == "customresourcedefinitions" && r.verb != "get")
        .map(|r| format!("{} {} {}", r.verb, r.path, r.code))
        .collect()
}

fn example(name: &str, size: i64, version: &str) -> PostgresCluster {
    PostgresCluster::new("default", name, PostgresClusterSpec::new(size, version))
}

/// Stage 01's older CRD is replaced in place (same uid, one PUT): the scale subresource is served
/// afterwards, the size rule applies, and a cluster stored under the old schema is still there.
#[tokio::test]
async fn an_older_crd_is_updated_in_place() {
    let (sandbox, client) = sandbox_and_client().await;
    register_as_is(&client, &older_crd()).await;
    let before: Value = client.get(&crd_path()).await.unwrap();
    // Under the old schema size 9 was fine.
    let _: Value = client
        .create(&collection_path("default"), &example("old", 9, "16"))
        .await
        .expect("size 9 allowed by the old schema");
    let writes = updated_by_ensure(&sandbox, &client).await;
    assert_eq!(
        writes,
        [format!("update {} 200", crd_path())],
        "one PUT of the CRD"
    );
    let after: Value = client.get(&crd_path()).await.unwrap();
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(
        crd::differences(&after, &crd::postgres_cluster_crd()).unwrap(),
        []
    );

    let scale: Value = client
        .get(&format!("{}/scale", object_path("default", "old")))
        .await
        .expect("the scale subresource is served now");
    assert_eq!(scale["spec"]["replicas"], 9);
    let kept: PostgresCluster = client.get(&object_path("default", "old")).await.unwrap();
    assert_eq!(kept.spec.size, 9, "stored objects are kept");
    let refused = client
        .create::<_, Value>(&collection_path("default"), &example("new", 9, "16"))
        .await
        .expect_err("size 9 refused by the new schema");
    assert_eq!(refused.status_code(), Some(422), "{refused}");
}

/// A current CRD: "already up to date", and not one write of it in the request log.
#[tokio::test]
async fn a_current_crd_is_left_alone() {
    let (sandbox, client) = sandbox_and_client().await;
    assert_eq!(
        crd::ensure(&client).await.unwrap(),
        Registration::Created {
            crd: CRD_NAME.into()
        }
    );
    crd::wait_established(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let writes_before = crd_writes(&sandbox);
    assert_eq!(writes_before, [format!("create {CRDS_PATH} 201")]);
    let before: Value = client.get(&crd_path()).await.unwrap();

    assert_eq!(crd::ensure(&client).await.unwrap(), up_to_date());
    assert_eq!(crd::ensure(&client).await.unwrap(), up_to_date());

    assert_eq!(
        crd_writes(&sandbox),
        writes_before,
        "no write after the first"
    );
    let after: Value = client.get(&crd_path()).await.unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
}

/// A CRD of our name with someone else's schema is ours to replace (one name, one schema): it
/// gets our names and schema, keeps its own metadata (the label), and the object stored under
/// it stays.
#[tokio::test]
async fn a_crd_of_our_name_with_someone_elses_schema_is_updated() {
    let (sandbox, client) = sandbox_and_client().await;
    register_as_is(&client, &foreign_crd()).await;
    let _: Value = client
        .create(
            &collection_path("default"),
            &json!({
                "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
                "metadata": {"name": "theirs"},
                "spec": {"size": 3, "version": "16", "paused": false},
            }),
        )
        .await
        .expect("anything goes under their schema");
    let writes = updated_by_ensure(&sandbox, &client).await;
    assert_eq!(writes.len(), 1, "{writes:?}");
    let after: Value = client.get(&crd_path()).await.unwrap();
    assert_eq!(
        crd::differences(&after, &crd::postgres_cluster_crd()).unwrap(),
        []
    );
    assert_eq!(after["spec"]["names"]["shortNames"], json!(["pgc"]));
    assert_eq!(after["metadata"]["labels"]["owner"], "someone-else");
    let kept: PostgresCluster = client.get(&object_path("default", "theirs")).await.unwrap();
    assert_eq!(kept.spec.version, "16");
    assert_eq!(crd::ensure(&client).await.unwrap(), up_to_date());
}

/// The server's `spec.version` pattern and `PostgresVersion::from_str` accept exactly the same
/// tags: what the operator would refuse never gets stored, and nothing it accepts is refused.
#[tokio::test]
async fn the_version_pattern_agrees_with_postgres_version() {
    let (_sandbox, client) = sandbox_and_client().await;
    crd::ensure(&client).await.unwrap();
    crd::wait_established(&client, Duration::from_secs(10))
        .await
        .unwrap();
    let candidates = [
        "13",
        "16",
        "16.4",
        "17.0",
        "18.1",
        "99",
        "99.99",
        "100",
        "123.4",
        "12",
        "12.20",
        "9.6",
        "9.6.3",
        "1",
        "0",
        "10",
        "013",
        "16.04",
        "16.",
        ".4",
        "16.4.1",
        "abc",
        "v16",
        "16-alpine",
        "16 ",
        "",
        "1e2",
        "16.4a",
        "١٦",
    ];
    for (index, version) in candidates.into_iter().enumerate() {
        let parsed = version.parse::<PostgresVersion>();
        let stored = client
            .create::<_, Value>(
                &collection_path("default"),
                &example(&format!("v{index}"), 3, version),
            )
            .await;
        match (&parsed, &stored) {
            (Ok(_), Ok(_)) => {}
            (Err(_), Err(error)) if error.status_code() == Some(422) => {
                assert!(error.to_string().contains("spec.version"), "{error}");
            }
            _ => panic!("{version:?}: PostgresVersion says {parsed:?}, the server {stored:?}"),
        }
    }
}
