//! Support: skip it on first read — part of leader election, which one replica never needs.
//!
//! The leader's term on every pod, so that the API server refuses an old leader's label or
//! deletion. The gate (`gate.rs`) is checked in this process: a pause between its check and the
//! socket gets a write past it. Kubernetes has no precondition across objects (no "only while
//! this Lease names me"), but it enforces one on the object written: a `resourceVersion`. So a
//! new leader first stamps its term on every pod (`stamp_pods`), which changes each pod's
//! `resourceVersion`; and every label or deletion of a leader reads the pod, refuses if its stamp
//! is later than our term, and sends the write conditional on the version it read. An old
//! leader's write prepared before the stamp names a version the stamp replaced: 409. One prepared
//! after it reads the later term and is not sent. A relabel raises the stamp to ours as it goes.
//!
//! Left to the gate alone: creates (there is no object yet to be conditional on; a replica
//! created late makes one more than asked for, and the count rule removes the newest), the
//! cluster's status (a report the next round writes again) and Events.
//!
//! WORKSHOP.md, step 05 ("Two operators, one pause").

use http::Method;
use serde_json::{json, Value};

use crate::client::{Client, ClientError, Patch, RequestError};
use crate::controller::pods::{pods_path, APP_LABEL, APP_LABEL_VALUE};

/// The annotation that carries the term of the latest leader to have written a pod.
pub const TERM_ANNOTATION: &str = "workshop.example.com/leader-term";

/// A pod changed between our read and our write (its kubelet reported a probe, say) is read
/// again; this many tries, then the error goes to the caller, whose next round tries again.
const TRIES: usize = 5;

/// The term stamped on `object`, 0 when none (a pod no leader has written since it was made).
pub fn stamped_term(object: &Value) -> u64 {
    object["metadata"]["annotations"][TERM_ANNOTATION]
        .as_str()
        .and_then(|term| term.parse().ok())
        .unwrap_or(0)
}

/// `patch` (a merge patch) made conditional on `resource_version`, and stamping `term`.
pub fn conditional_patch(patch: &Value, resource_version: &str, term: u64) -> Value {
    let mut patch = patch.clone();
    if !patch.is_object() {
        patch = json!({});
    }
    let metadata = &mut patch["metadata"];
    if !metadata.is_object() {
        *metadata = json!({});
    }
    metadata["resourceVersion"] = json!(resource_version);
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][TERM_ANNOTATION] = json!(term.to_string());
    patch
}

/// Read the object at `path` for a write of term `term`: its `resourceVersion`, or a refusal
/// when a later leader has stamped it. A 404 is the caller's to judge.
async fn read_for(
    client: &Client,
    method: &Method,
    path: &str,
    term: u64,
) -> Result<String, ClientError> {
    let object: Value = client.get(path).await?;
    let stamped = stamped_term(&object);
    if stamped > term {
        let why = format!("stamped with leader term {stamped}, later than ours ({term}): another operator leads now");
        return Err(ClientError::request(
            method,
            path,
            RequestError::HeldBack { why },
        ));
    }
    Ok(object["metadata"]["resourceVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// Merge-`patch` the object at `path`: as a leader (the client has a term), conditional on the
/// version read and stamping our term; else as it is.
pub async fn patch_in_term(client: &Client, path: &str, patch: &Value) -> Result<(), ClientError> {
    let Some(term) = client.term() else {
        return client
            .patch::<Value>(path, &Patch::Merge(patch.clone()))
            .await
            .map(|_| ());
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let version = read_for(client, &Method::PATCH, path, term).await?;
        let conditional = Patch::Merge(conditional_patch(patch, &version, term));
        match client.patch::<Value>(path, &conditional).await {
            // 409: changed since we read it. Read it again: a later leader's stamp is refused there.
            Err(error) if error.status_code() == Some(409) && tries < TRIES => continue,
            outcome => return outcome.map(|_| ()),
        }
    }
}

/// DELETE the object at `path`, with `grace` seconds for its processes to stop in place of its
/// own (`kubectl delete --grace-period`): as a leader, conditional on the version read
/// (`preconditions.resourceVersion`); else as it is.
pub async fn delete_in_term(
    client: &Client,
    path: &str,
    grace: Option<u32>,
) -> Result<(), ClientError> {
    let Some(term) = client.term() else {
        let query = grace.map(|seconds| format!("?gracePeriodSeconds={seconds}"));
        let path = format!("{path}{}", query.unwrap_or_default());
        return client.delete::<Value>(&path).await.map(|_| ());
    };
    let mut tries = 0;
    loop {
        tries += 1;
        let version = read_for(client, &Method::DELETE, path, term).await?;
        // In the body, not the query: with a body, the API server reads no options from the query.
        let mut options = json!({"preconditions": {"resourceVersion": version}});
        if let Some(seconds) = grace {
            options["gracePeriodSeconds"] = json!(seconds);
        }
        match client.delete_with::<_, Value>(path, &options).await {
            Err(error) if error.status_code() == Some(409) && tries < TRIES => continue,
            outcome => return outcome.map(|_| ()),
        }
    }
}

/// What a new leader does before it acts: stamp its term on every pod of ours in `namespace`.
/// Each stamp is a conditional patch, so it never lowers a later leader's. Returns how many were
/// stamped, and what went wrong with the others (they are fenced by the gate alone until our
/// first write of them stamps them).
pub async fn stamp_pods(client: &Client, namespace: &str) -> (usize, Vec<String>) {
    let list = pods_path(namespace, &format!("{APP_LABEL}={APP_LABEL_VALUE}"));
    let pods: Value = match client.get(&list).await {
        Ok(pods) => pods,
        Err(error) => return (0, vec![format!("listing the pods: {error}")]),
    };
    let (mut stamped, mut failed) = (0, Vec::new());
    let empty = Vec::new();
    for pod in pods["items"].as_array().unwrap_or(&empty) {
        let Some(name) = pod["metadata"]["name"].as_str() else {
            continue;
        };
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}");
        match patch_in_term(client, &path, &json!({})).await {
            Ok(()) => stamped += 1,
            // Gone since the list: nothing left to fence.
            Err(error) if error.status_code() == Some(404) => {}
            Err(error) => failed.push(format!("{name}: {error}")),
        }
    }
    (stamped, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conditional_patch_names_the_version_read_and_stamps_the_term() {
        let role = json!({"metadata": {"labels": {"role": "primary"}}});
        let patch = conditional_patch(&role, "41", 1_764_000_000_000_003);
        assert_eq!(
            patch,
            json!({"metadata": {
                "labels": {"role": "primary"},
                "resourceVersion": "41",
                "annotations": {TERM_ANNOTATION: "1764000000000003"},
            }})
        );
        assert_eq!(stamped_term(&patch), 1_764_000_000_000_003);
        // A stamp alone, and a patch that already had annotations: theirs are kept.
        let mut keep = json!({"metadata": {"annotations": {"a": "b"}}});
        keep = conditional_patch(&keep, "7", 2);
        assert_eq!(keep["metadata"]["annotations"]["a"], "b");
        assert_eq!(
            conditional_patch(&json!({}), "7", 2)["metadata"]["resourceVersion"],
            "7"
        );
    }

    #[test]
    fn an_unstamped_or_garbled_stamp_counts_as_no_term() {
        assert_eq!(stamped_term(&json!({"metadata": {}})), 0);
        let garbled = json!({"metadata": {"annotations": {TERM_ANNOTATION: "soon"}}});
        assert_eq!(stamped_term(&garbled), 0);
    }
}
