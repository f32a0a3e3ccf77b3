//! The node faults over HTTP, for a learner with the `sandbox` binary in one terminal and
//! kubectl in another: `POST /sandbox/faults/namespaces/NS/pods/NAME/FAULT`, which
//! `kubectl create --raw PATH -f /dev/null` sends. The same [`Faults`] calls the tests make:
//!
//! | FAULT | what happens to the pod | query |
//! |---|---|---|
//! | `hang` | every process of its containers stopped (SIGSTOP); the kubelet carries on | |
//! | `resume` | a hung or frozen pod's processes continued (SIGCONT) | |
//! | `lose-node` | its node stops reporting (`runtime/lost_node.rs`) | `processes=frozen\|killed`, `graceSeconds=N` |
//! | `crash` | one container's process killed, as if it crashed; the kubelet restarts it | `container=NAME` |
//!
//! and one fault for every pod of an image, `POST /sandbox/faults/images/FAULT?image=IMAGE`:
//! `fail-readiness` (its pods turn, and start, not Ready: a version whose probe never passes)
//! and `pass-readiness` (lifted).
//!
//! WORKSHOP.md, "Set-up: the sandbox". The path is a non-resource URL, so RBAC decides who may
//! POST it: the sandbox's admin may (`nonResourceURLs: ["*"]`), a service account may not, and
//! no operator under test can break its own node.

use std::collections::HashMap;
use std::time::Duration;

use http::Method;
use serde_json::json;

use crate::errors::ApiError;
use crate::faults::Faults;
use crate::runtime::{LostNode, LostProcesses};
use crate::status::Status;

/// The answer to `POST /sandbox/faults/...`: the Status kubectl prints, or why not.
pub(crate) fn answer(
    faults: &Faults,
    method: &Method,
    rest: &[&str],
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed());
    }
    if let ["images", fault] = rest {
        return image_fault(faults, fault, query);
    }
    let ["namespaces", namespace, "pods", name, fault] = rest else {
        return Err(ApiError::bad_request(
            "expected /sandbox/faults/namespaces/NAMESPACE/pods/NAME/FAULT, FAULT one of hang, resume, lose-node, crash; or /sandbox/faults/images/FAULT?image=IMAGE, FAULT one of fail-readiness, pass-readiness",
        ));
    };
    let (done, what) = match *fault {
        "hang" => (
            faults.hang_pod(namespace, name),
            "hung: every process stopped",
        ),
        "resume" => (
            faults.resume_pod(namespace, name),
            "resumed: every process continued",
        ),
        "lose-node" => (
            faults.lose_node(namespace, name, lost_node(query)?),
            "lost its node: it no longer reports",
        ),
        "crash" => {
            let Some(container) = query.get("container") else {
                return Err(ApiError::bad_request(
                    "crash needs ?container=NAME: the container whose process is killed",
                ));
            };
            (
                faults.crash_container(namespace, name, container),
                "crashed: its container's process was killed",
            )
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "no fault {other:?}: one of hang, resume, lose-node, crash"
            )))
        }
    };
    if !done {
        // Not a 404 of the pod itself: the object may exist while nothing of it runs here.
        return Err(ApiError::from(Status::failure(
            404,
            "NotFound",
            format!("no running process of pod {namespace}/{name} to act on (pods are simulated, or it does not run on this node)"),
        )));
    }
    Ok(success(format!("pod {namespace}/{name} {what}")))
}

/// The `Status` a fault door call answers with once it has done what it was asked.
fn success(message: String) -> serde_json::Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 200,
        "message": message,
    })
}

/// `POST /sandbox/faults/images/fail-readiness?image=nginx:1.7.9` (or `pass-readiness`).
fn image_fault(
    faults: &Faults,
    fault: &str,
    query: &HashMap<String, String>,
) -> Result<serde_json::Value, ApiError> {
    let fail = match fault {
        "fail-readiness" => true,
        "pass-readiness" => false,
        other => {
            return Err(ApiError::bad_request(format!(
                "no image fault {other:?}: one of fail-readiness, pass-readiness"
            )))
        }
    };
    let Some(image) = query.get("image").filter(|image| !image.is_empty()) else {
        return Err(ApiError::bad_request(
            "an image fault needs ?image=IMAGE, as the pods' container spec names it (nginx:1.7.9)",
        ));
    };
    let marked = faults.fail_readiness(image, fail);
    let what = if fail { "fail" } else { "pass" };
    Ok(success(format!(
        "pods of image {image} {what} readiness ({} running now)",
        marked.len()
    )))
}

/// `?processes=frozen|killed&graceSeconds=N`, each defaulting to [`LostNode::default`]'s.
fn lost_node(query: &HashMap<String, String>) -> Result<LostNode, ApiError> {
    let mut how = LostNode::default();
    match query.get("processes").map(String::as_str) {
        None => {}
        Some("frozen") => how.processes = LostProcesses::Frozen,
        Some("killed") => how.processes = LostProcesses::Killed,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "processes={other:?}: frozen (a node cut off) or killed (a node without power)"
            )))
        }
    }
    if let Some(seconds) = query.get("graceSeconds") {
        let seconds: u64 = seconds.parse().map_err(|_| {
            ApiError::bad_request(format!("graceSeconds={seconds:?} is not a whole number"))
        })?;
        how.grace = Duration::from_secs(seconds);
    }
    Ok(how)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_lost_node_is_read_from_the_query() {
        let how =
            lost_node(&query(&[("processes", "killed"), ("graceSeconds", "40")])).expect("valid");
        assert_eq!(how.processes, LostProcesses::Killed);
        assert_eq!(how.grace, Duration::from_secs(40));
        assert_eq!(lost_node(&query(&[])).expect("valid"), LostNode::default());
        for bad in [("processes", "asleep"), ("graceSeconds", "-1")] {
            let error = lost_node(&query(&[bad])).expect_err("refused");
            assert_eq!(error.code(), 400, "{bad:?}");
        }
    }
}
