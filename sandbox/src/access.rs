//! Access reviews: `kubectl auth can-i` asks the API server whether a request would be allowed
//! (a SelfSubjectAccessReview; `--list` sends a SelfSubjectRulesReview). Both are answered for
//! the user making the request — with `--as`, the impersonated one — by the same RBAC rules
//! that authorize real requests (`rbac.rs`), with kube-apiserver's `reason` text.
//! `kubectl auth whoami` asks who that user is (a SelfSubjectReview).
//!
//! WORKSHOP.md, "Set-up: the sandbox" and the RBAC step. kubectl sends both reviews as
//! protobuf; the handler decodes them to JSON before they reach here.

use serde_json::{json, Value};

use crate::rbac::{self, Attributes, Policies, UserInfo};

/// The answer to `POST /apis/authorization.k8s.io/v1/<review>` with `request` (the decoded
/// review), or None for a kind of review the sandbox does not serve.
pub(crate) fn review(
    review: &str,
    request: &Value,
    user: &UserInfo,
    policies: &Policies,
) -> Option<Value> {
    let spec = Some(request["spec"].clone())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let (kind, status) = match review {
        "selfsubjectaccessreviews" => (
            "SelfSubjectAccessReview",
            access_status(&spec, user, policies),
        ),
        "selfsubjectrulesreviews" => {
            let namespace = spec["namespace"].as_str().unwrap_or_default();
            let (resource_rules, non_resource_rules, errors) = if user.is_superuser() {
                // kube's RBAC lists the cluster-admin binding's rules for system:masters.
                (
                    vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
                    vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
                    String::new(),
                )
            } else {
                rbac::rules_in(user, namespace, policies)
            };
            let mut status = json!({
                "resourceRules": resource_rules,
                "nonResourceRules": non_resource_rules,
                "incomplete": !errors.is_empty()
            });
            if !errors.is_empty() {
                status["evaluationError"] = json!(errors);
            }
            ("SelfSubjectRulesReview", status)
        }
        _ => return None,
    };
    Some(json!({
        "kind": kind, "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": spec, "status": status
    }))
}

/// The answer to `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`: the user the request
/// authenticated as (after impersonation), as kube-apiserver's authenticator saw it.
pub(crate) fn self_subject_review(user: &UserInfo) -> Value {
    json!({
        "kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "status": {"userInfo": {"username": user.name, "groups": user.groups}}
    })
}

/// `{"allowed": true, "reason": "RBAC: allowed by ..."}` for the attributes the spec names.
fn access_status(spec: &Value, user: &UserInfo, policies: &Policies) -> Value {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let attributes = if spec["resourceAttributes"].is_object() {
        let asked = &spec["resourceAttributes"];
        Attributes::resource(
            &text(&asked["verb"]),
            &text(&asked["group"]),
            &text(&asked["resource"]),
            &text(&asked["subresource"]),
            &text(&asked["namespace"]),
            &text(&asked["name"]),
        )
    } else {
        let asked = &spec["nonResourceAttributes"];
        Attributes {
            verb: text(&asked["verb"]),
            path: text(&asked["path"]),
            ..Attributes::default()
        }
    };
    if user.is_superuser() {
        return json!({"allowed": true});
    }
    let decision = rbac::authorize(user, &attributes, policies);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// The answer follows RBAC for the asking user; the admin is always allowed.
    #[test]
    fn access_reviews_tell_the_truth() {
        let mut policies = Policies::default();
        policies.roles.push(Arc::new(
            json!({"metadata": {"name": "r", "namespace": "ns"},
            "rules": [{"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]}]}),
        ));
        policies.role_bindings.push(Arc::new(
            json!({"metadata": {"name": "rb", "namespace": "ns"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}],
            "roleRef": {"kind": "Role", "name": "r"}}),
        ));
        let asked = json!({"spec":{"resourceAttributes":{"verb":"create","resource":"pods",
                                                          "subresource":"exec","namespace":"ns"}}});
        let sa = UserInfo::service_account("ns", "sa");
        let answer = review("selfsubjectaccessreviews", &asked, &sa, &policies).expect("served");
        assert_eq!(answer["status"]["allowed"], true);
        assert_eq!(
            answer["status"]["reason"],
            "RBAC: allowed by RoleBinding \"rb/ns\" of Role \"r\" to ServiceAccount \"sa/ns\""
        );
        assert_eq!(answer["spec"]["resourceAttributes"]["verb"], "create");
        let other = UserInfo::service_account("ns", "other");
        let answer = review("selfsubjectaccessreviews", &asked, &other, &policies).expect("served");
        assert_eq!(answer["status"]["allowed"], false);
        let admin = review(
            "selfsubjectaccessreviews",
            &asked,
            &UserInfo::admin(),
            &policies,
        );
        assert_eq!(admin.expect("served")["status"]["allowed"], true);
        let rules = review(
            "selfsubjectrulesreviews",
            &json!({"spec": {"namespace": "ns"}}),
            &sa,
            &policies,
        )
        .expect("served");
        let listed = rules["status"]["resourceRules"].to_string();
        assert!(listed.contains("pods/exec"), "{listed}");
        assert!(review("subjectaccessreviews", &json!({}), &sa, &policies).is_none());
    }

    /// whoami names the asking user and every group it is in.
    #[test]
    fn a_self_subject_review_names_the_user_and_groups() {
        let answer = self_subject_review(&UserInfo::service_account("ns", "sa"));
        assert_eq!(answer["kind"], "SelfSubjectReview");
        assert_eq!(
            answer["status"]["userInfo"]["username"],
            "system:serviceaccount:ns:sa"
        );
        assert_eq!(
            answer["status"]["userInfo"]["groups"],
            json!([
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ])
        );
    }
}
