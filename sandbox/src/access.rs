//! Access reviews: `kubectl auth can-i` asks the API server whether a request would be allowed
//! (a SelfSubjectAccessReview; `--list` sends a SelfSubjectRulesReview). The sandbox has no
//! RBAC, so every answer is "allowed", with a warning saying so: a learner checking
//! `kube/rbac.yaml` here must not take the "yes" for proof that the Role is right.
//!
//! WORKSHOP.md, "Set-up: the sandbox" (what it is and is not) and the RBAC step.

use serde_json::{json, Value};

/// kubectl prints this (from a `Warning` header) above its "yes".
pub(crate) const NO_RBAC_WARNING: &str =
    "the sandbox has no RBAC: every request is allowed (check kube/rbac.yaml on a real cluster)";

/// The answer to `POST /apis/authorization.k8s.io/v1/<review>`, or None for a kind of review
/// the sandbox does not serve.
pub(crate) fn review(review: &str, body: &[u8]) -> Option<Value> {
    // kubectl's typed client may send protobuf; the answer never depends on what was asked, so
    // a body that is not JSON is simply not echoed.
    let spec = serde_json::from_slice::<Value>(body)
        .ok()
        .map(|request| request["spec"].clone())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let (kind, status) = match review {
        "selfsubjectaccessreviews" => (
            "SelfSubjectAccessReview",
            json!({"allowed": true, "reason": NO_RBAC_WARNING}),
        ),
        "selfsubjectrulesreviews" => (
            "SelfSubjectRulesReview",
            json!({
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": false
            }),
        ),
        _ => return None,
    };
    Some(json!({
        "kind": kind, "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec, "status": status
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every access review is allowed, and a JSON request's spec is echoed back.
    #[test]
    fn every_access_review_is_allowed() {
        let asked = br#"{"spec":{"resourceAttributes":{"verb":"create","resource":"pods"}}}"#;
        let answer = review("selfsubjectaccessreviews", asked).expect("served");
        assert_eq!(answer["status"]["allowed"], true);
        assert_eq!(answer["spec"]["resourceAttributes"]["verb"], "create");
        let protobuf = review("selfsubjectaccessreviews", b"k8s\x00\x0a").expect("served");
        assert_eq!(protobuf["spec"], json!({}));
        assert!(review("subjectaccessreviews", b"{}").is_none());
    }
}
