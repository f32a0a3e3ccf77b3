//! Our CustomResourceDefinition and the three things stage 01 does with it: ensure the cluster
//! has it as we define it (create it, or update an older schema), wait until the API server
//! serves it, and read back what discovery serves.
//!
//! WORKSHOP.md, step 01. The 2017 workshop registered a ThirdPartyResource (removed in Kubernetes
//! 1.8); today the same idea is a CRD in `apiextensions.k8s.io/v1`, which must carry a structural
//! OpenAPI schema. The CRD itself is data: `kube/crd.yaml`, compiled in. The later stages do not
//! change it: they `crd_check::check` it (created if absent, otherwise left as it is), since
//! registering the type is this step's.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::client::{Client, ClientError};

mod compare;
mod error;
mod manifest;

use compare::replacement;
pub use compare::{differences, Difference, Registration};
use error::summarize_conditions;
pub use error::CrdError;
pub use manifest::from_manifest;
use manifest::{name_of, path_of};

/// The API group our CustomResourceDefinition adds (the 2017 workshop's TPR used `lukeb0nd.com`).
pub const GROUP: &str = "workshop.example.com";
/// The one version we serve and store.
pub const VERSION: &str = "v1";
/// A CRD's name must be `<plural>.<group>`; the API server rejects anything else.
pub const CRD_NAME: &str = "postgresclusters.workshop.example.com";

/// The CRD object itself, cluster-scoped under apiextensions.k8s.io.
pub fn crd_path() -> String {
    format!("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
}

/// `/apis/workshop.example.com/v1`: what discovery serves once the CRD is established.
pub fn group_version_path() -> String {
    format!("/apis/{GROUP}/{VERSION}")
}

/// Our CRD as `kubectl apply -f kube/crd.yaml` sends it. The file is JSON (which is YAML too, so
/// kubectl reads it) with whole-line `#` comments, which JSON lacks: `from_manifest` drops them.
pub fn postgres_cluster_crd() -> Value {
    // Compiled in, not read at run time: the unit tests below parse it in every build.
    from_manifest(include_str!("../../kube/crd.yaml"))
        .expect("kube/crd.yaml is JSON with # comment lines")
}

/// Where CRDs are created (cluster-scoped: no namespace in the path).
pub const CRDS_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// How long the later stages' `crd_check::check` waits for `Established` (the same 30 s as stage
/// 01's `--established-timeout` default).
pub const DEFAULT_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the CRD is re-read while waiting. Establishing takes well under a second on a
/// healthy API server, so a short interval keeps stage 01 (and every later stage's check)
/// snappy.
pub const ESTABLISHED_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// How many attempts (a GET, then a write) `ensure` (a POST or PUT) and `crd_check::check` (a
/// POST) make while every write meets a 409, before giving up with `CrdError::KeptChanging`.
pub const ENSURE_ATTEMPTS: u32 = 5;

/// The parts of a CRD's `spec` that are ours to say: the rest (`conversion`,
/// `preserveUnknownFields`, and whatever a newer API server adds) is defaulted by the server,
/// and we leave it alone.
pub const OWNED_SPEC_FIELDS: [&str; 4] = ["group", "names", "scope", "versions"];

/// Stage 01: make the cluster's CRD ours. GET it; absent → POST it; present, differing in what
/// we own (`OWNED_SPEC_FIELDS`) → PUT ours over it, with the resourceVersion we read so that a
/// write made in between is not overwritten; the same → write nothing; newer (it serves versions
/// or fields ours does not know) → write nothing either: replacing it would take away what a
/// newer release of the operator relies on.
///
/// Objects already stored are kept; the new schema applies to them from their next write.
///
/// 409 on either write means someone else wrote in between (the POST lost a race with another
/// creator, or the PUT's resourceVersion is stale): read again and decide again, within
/// `ENSURE_ATTEMPTS` attempts in all.
pub async fn ensure(client: &Client) -> Result<Registration, CrdError> {
    ensure_crd(client, &postgres_cluster_crd()).await
}

/// [`ensure`] for any CRD: ours, or another operator's (the Deployer's, `src/deployer/`).
// ANCHOR: register
pub async fn ensure_crd(client: &Client, ours: &Value) -> Result<Registration, CrdError> {
    let mut attempt = 1;
    loop {
        let conflict = match read_or_create(client, ours).await? {
            Read::Created => return Ok(Registration::Created { crd: name_of(ours) }),
            Read::Conflict(error) => error,
            Read::Found(current) => {
                let found = Registration::found(&current, ours)?;
                if !matches!(found, Registration::Differs { .. }) {
                    found.report_differences();
                    return Ok(found);
                }
                tracing::info!("replacing the CRD's schema with ours");
                match client
                    .replace::<_, Value>(&path_of(ours), &replacement(current, ours))
                    .await
                {
                    Ok(_) => return Ok(Registration::Updated { crd: name_of(ours) }),
                    Err(error) if error.status_code() == Some(409) => error,
                    Err(error) => return Err(CrdError::Update(name_of(ours), error)),
                }
            }
        };
        read_again(&mut attempt, conflict, &name_of(ours))?;
    }
}

/// What one read of the CRD found: GET it, and POST ours when the GET says 404.
pub(crate) enum Read {
    /// It was absent and our POST created it (201).
    Created,
    /// It is there, as the server holds it.
    Found(Value),
    /// The POST met a 409: someone else created it between our GET and our POST. kube answers
    /// AlreadyExists; any 409 means the same to us: it is there now, so read it again.
    Conflict(ClientError),
}

pub(crate) async fn read_or_create(client: &Client, ours: &Value) -> Result<Read, CrdError> {
    match client.get::<Value>(&path_of(ours)).await {
        Ok(current) => Ok(Read::Found(current)),
        Err(error) if error.status_code() == Some(404) => {
            match client.create::<_, Value>(CRDS_PATH, ours).await {
                Ok(_) => Ok(Read::Created),
                Err(error) if error.status_code() == Some(409) => Ok(Read::Conflict(error)),
                Err(error) => Err(CrdError::Create(name_of(ours), error)),
            }
        }
        Err(error) => Err(CrdError::Read(name_of(ours), error)),
    }
}

/// After a 409: count the attempt, and give up with the last answer after `ENSURE_ATTEMPTS`.
pub(crate) fn read_again(attempt: &mut u32, last: ClientError, crd: &str) -> Result<(), CrdError> {
    if *attempt == ENSURE_ATTEMPTS {
        return Err(CrdError::KeptChanging {
            crd: crd.into(),
            attempts: *attempt,
            last,
        });
    }
    tracing::debug!(attempt = *attempt, error = %last, "the CRD changed under us; reading it again");
    *attempt += 1;
    Ok(())
}

/// Poll the CRD until its `Established` condition is `True`: only then does the API server serve
/// `/apis/workshop.example.com/v1/...`. Bounded by `timeout`.
pub async fn wait_established(client: &Client, timeout: Duration) -> Result<(), CrdError> {
    wait_crd_established(client, CRD_NAME, timeout).await
}

/// [`wait_established`] for the CRD called `name`.
pub async fn wait_crd_established(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> Result<(), CrdError> {
    let started = tokio::time::Instant::now();
    let deadline = started + timeout;
    let mut last_conditions = "no answer yet".to_string();
    let path = format!("{CRDS_PATH}/{name}");
    loop {
        // Each GET is bounded by what is left of the wait, not by the client's 30 s default.
        let get = client.get::<Value>(&path);
        let Ok(answer) = tokio::time::timeout_at(deadline, get).await else {
            break;
        };
        match answer {
            Ok(crd) => {
                if established(&crd) == Some(true) {
                    return Ok(());
                }
                let names = condition(&crd, "NamesAccepted");
                if let Some(names) = names.filter(|names| names["status"] == "False") {
                    return Err(CrdError::NamesNotAccepted {
                        crd: name.into(),
                        message: names["message"].as_str().unwrap_or_default().to_string(),
                    });
                }
                let conditions = crd["status"]["conditions"].as_array();
                last_conditions =
                    summarize_conditions(conditions.map(Vec::as_slice).unwrap_or_default());
                tracing::debug!(conditions = %last_conditions, "CRD not Established yet");
            }
            // Right after the POST, another API server replica may not have it yet: not-yet, not failure.
            Err(error) if error.status_code() == Some(404) => {
                last_conditions = "CRD not found yet".into();
            }
            Err(error) => return Err(CrdError::WaitEstablished(name.into(), error)),
        }
        if tokio::time::Instant::now() + ESTABLISHED_POLL_INTERVAL > deadline {
            break;
        }
        tokio::time::sleep(ESTABLISHED_POLL_INTERVAL).await;
    }
    Err(CrdError::NotEstablished {
        crd: name.into(),
        waited: started.elapsed(),
        conditions: last_conditions,
    })
}
// ANCHOR_END: register

/// What discovery serves at `/apis/workshop.example.com/v1` (an `APIResourceList`): the resource
/// and its subresources, with their kinds and verbs.
pub async fn served_resources(client: &Client) -> Result<Vec<ServedResource>, CrdError> {
    #[derive(Deserialize)]
    struct ApiResourceList {
        #[serde(default)]
        resources: Vec<ServedResource>,
    }
    let list: ApiResourceList = client
        .get(&group_version_path())
        .await
        .map_err(CrdError::Discovery)?;
    Ok(list.resources)
}

/// The CRD's `Established` condition: `None` when it reports none at all (some servers that are
/// not kube-apiserver write no status).
pub(crate) fn established(crd: &Value) -> Option<bool> {
    condition(crd, "Established").map(|established| established["status"] == "True")
}

/// The CRD's condition of type `kind` (`Established`, `NamesAccepted`), if it reports one.
fn condition<'a>(crd: &'a Value, kind: &str) -> Option<&'a Value> {
    crd["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|condition| condition["type"] == kind)
}

/// One resource discovery serves under our group/version.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedResource {
    /// `postgresclusters`, or a subresource such as `postgresclusters/status`.
    pub name: String,
    pub kind: String,
    #[serde(default)]
    pub verbs: Vec<String>,
    pub namespaced: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{API_VERSION, KIND, MAX_SIZE, PLURAL};
    use serde_json::json;

    /// `kube/crd.yaml` says the names, version and size bound `api.rs` says; scale is in place.
    #[test]
    fn the_crd_is_named_plural_dot_group_and_uses_the_api_constants() {
        let crd = postgres_cluster_crd();
        assert_eq!(crd["metadata"]["name"], CRD_NAME);
        assert_eq!(CRD_NAME, format!("{PLURAL}.{GROUP}"));
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
        assert_eq!(crd["spec"]["group"], GROUP);
        let names = &crd["spec"]["names"];
        assert_eq!(names["kind"], KIND);
        assert_eq!(names["listKind"], "PostgresClusterList");
        assert_eq!(names["plural"], PLURAL);
        assert_eq!(names["singular"], "postgrescluster");
        assert_eq!(names["shortNames"], json!(["pgc"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1");
        assert_eq!(
            version["subresources"]["scale"],
            json!({
                "specReplicasPath": ".spec.size",
                "statusReplicasPath": ".status.size",
                "labelSelectorPath": ".status.selector",
            })
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["properties"]["size"]["minimum"], 1);
        assert_eq!(spec["properties"]["size"]["maximum"], MAX_SIZE);
        assert_eq!(spec["required"], json!(["size", "version"]));
    }

    /// kubectl's columns, in order, each from the field the issue names.
    #[test]
    fn printer_columns_are_size_ready_primary_phase_version_last_backup_age() {
        let crd = postgres_cluster_crd();
        let columns: Vec<(String, String)> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_uppercase(),
                    c["jsonPath"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let expected = [
            ("SIZE", ".spec.size"),
            ("READY", ".status.readyInstances"),
            ("PRIMARY", ".status.primary"),
            ("PHASE", ".status.phase"),
            ("VERSION", ".spec.version"),
            ("LAST BACKUP", ".status.lastBackup.time"),
            ("AGE", ".metadata.creationTimestamp"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(name, path)| (name.to_string(), path.to_string()))
            .collect();
        assert_eq!(columns, expected);
    }

    /// The phase column's and field's descriptions name every phase the operator writes
    /// (`postgres::conditions`, `backups::restore`), so `kubectl explain` and `kubectl get crd -o yaml` cannot drift
    /// from the code.
    #[test]
    fn the_phase_descriptions_name_every_phase() {
        use crate::backups::restore::PHASE_RECOVERING;
        use crate::postgres::conditions::{PHASE_CREATING, PHASE_FAILED, PHASE_RUNNING};
        let crd = postgres_cluster_crd();
        let version = &crd["spec"]["versions"][0];
        let column = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "Phase")
            .unwrap();
        let field =
            &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["phase"];
        for description in [&column["description"], &field["description"]] {
            let text = description.as_str().unwrap();
            for phase in [
                PHASE_CREATING,
                PHASE_RUNNING,
                PHASE_RECOVERING,
                PHASE_FAILED,
            ] {
                assert!(text.contains(phase), "{phase} missing from {text:?}");
            }
        }
    }

    /// Every field of `PostgresClusterStatus`, serialized, is a property of the status schema:
    /// the server would otherwise prune what the operator writes.
    #[test]
    fn the_status_schema_declares_every_status_field() {
        let mut status = crate::api::PostgresClusterStatus {
            phase: Some("Running".into()),
            primary: Some("p".into()),
            size: Some(1),
            ready_instances: Some(1),
            current_version: Some("16".into()),
            selector: Some("a=b".into()),
            observed_generation: Some(1),
            conditions: vec![crate::api::Condition {
                observed_generation: Some(1),
                ..Default::default()
            }],
            more: serde_json::Map::new(),
        };
        // Step 05's and step 06's fields, which step 02's status carries in `more`.
        let sync = crate::failover::api::SynchronousStatus::default();
        crate::failover::api::SynchronousStatus::write(Some(&sync), &mut status);
        crate::failover::api::set_switchover(Some(&"p".to_string()), &mut status);
        crate::backups::api::BackupStatus {
            last_backup: Some(Default::default()),
            backup_requested: Some("1".into()),
            restore: Some(Default::default()),
        }
        .write(&mut status);
        let status = serde_json::to_value(status).unwrap();
        let crd = postgres_cluster_crd();
        let schema =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        for field in status.as_object().unwrap().keys() {
            assert!(
                schema["properties"].get(field).is_some(),
                "status.{field} missing"
            );
        }
        for field in status["conditions"][0].as_object().unwrap().keys() {
            assert!(
                schema["properties"]["conditions"]["items"]["properties"]
                    .get(field)
                    .is_some(),
                "status.conditions[].{field} missing"
            );
        }
    }

    /// Only the fields we own count: a server-filled `conversion`, `preserveUnknownFields`,
    /// status, managedFields or a zero-valued default is no difference; a changed short name, a
    /// lost subresource and a field the server lacks are.
    #[test]
    fn only_owned_fields_make_a_crd_differ() {
        let ours = postgres_cluster_crd();
        let mut served = ours.clone();
        served["spec"]["conversion"] = json!({"strategy": "None"});
        served["spec"]["preserveUnknownFields"] = json!(false);
        served["spec"]["versions"][0]["deprecated"] = json!(false);
        served["spec"]["versions"][0]["additionalPrinterColumns"][0]["priority"] = json!(0);
        served["status"] = json!({"conditions": [], "storedVersions": ["v1"]});
        served["metadata"]["resourceVersion"] = json!("42");
        served["metadata"]["managedFields"] = json!([{"manager": "kubectl"}]);
        assert_eq!(differences(&served, &ours).unwrap(), []);

        served["spec"]["names"]["shortNames"] = json!(["pg"]);
        served["spec"]["versions"][0]["subresources"] = json!({"status": {}});
        served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]
            .as_object_mut()
            .unwrap()
            .remove("backup");
        assert_eq!(
            differences(&served, &ours).unwrap(),
            [
                Difference::Changed("names.shortNames".into()),
                Difference::Missing("versions[v1]: spec.backup".into()),
                Difference::Missing("versions[v1].subresources.scale".into()),
            ]
        );
        assert!(matches!(
            Registration::found(&served, &ours).unwrap(),
            Registration::Differs { .. }
        ));

        let body = replacement(served, &ours);
        assert_eq!(differences(&body, &ours).unwrap(), []);
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["spec"]["conversion"]["strategy"], "None");
    }

    /// A newer release's CRD — another version, a field ours does not know — is `Newer`.
    #[test]
    fn a_crd_with_versions_or_fields_we_do_not_know_is_newer() {
        let ours = postgres_cluster_crd();
        let mut newer = ours.clone();
        newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["monitoring"] = json!({"type": "object"});
        let mut v2 = ours["spec"]["versions"][0].clone();
        v2["name"] = json!("v2");
        v2["storage"] = json!(false);
        newer["spec"]["versions"].as_array_mut().unwrap().push(v2);
        let found = differences(&newer, &ours).unwrap();
        assert_eq!(
            found,
            [
                Difference::Unknown("versions[v1]: spec.monitoring".into()),
                Difference::Unknown("versions[v2]".into()),
            ]
        );
        assert!(matches!(
            Registration::found(&newer, &ours).unwrap(),
            Registration::Newer { .. }
        ));
    }

    /// A malformed answer (no spec, a spec that is not an object, versions not a list) is a clear
    /// error, not a panic; the PUT body is built safely from anything.
    #[test]
    fn a_malformed_current_crd_is_an_error_not_a_panic() {
        let ours = postgres_cluster_crd();
        for (answer, what) in [
            (json!("nonsense"), "it has no spec"),
            (json!({"metadata": {}}), "it has no spec"),
            (json!({"spec": 3}), "its spec is not an object"),
            (
                json!({"spec": {"versions": {"v1": {}}}}),
                "its spec.versions is not a list",
            ),
        ] {
            match differences(&answer, &ours) {
                Err(CrdError::Malformed { crd, what: said }) => {
                    assert_eq!((crd.as_str(), said.as_str()), (CRD_NAME, what))
                }
                other => panic!("{answer}: {other:?}"),
            }
        }
        for answer in [json!({"spec": 3}), json!([1, 2])] {
            let body = replacement(answer, &ours);
            assert_eq!(differences(&body, &ours).unwrap(), []);
        }
    }

    #[test]
    fn conditions_summarize_on_one_line() {
        let conditions = vec![
            json!({"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"}),
            json!({"type": "Established", "status": "False", "reason": "Installing"}),
        ];
        assert_eq!(
            summarize_conditions(&conditions),
            "NamesAccepted=True (NoConflicts), Established=False (Installing)"
        );
    }
}
