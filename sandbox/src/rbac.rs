//! RBAC as kube-apiserver's authorizer does it, on plain JSON: which user a request comes
//! from, the attributes kube derives from its URL, whether some Role or ClusterRole bound to
//! that user has a rule that matches, and kube's exact words when none does.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and the RBAC step. The order follows
//! `k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac`: ClusterRoleBindings first, then the
//! RoleBindings of the request's namespace; the first matching rule allows, nothing denies.
//! The bootstrap policy kube-apiserver installs (cluster-admin for `system:masters`,
//! discovery and self-reviews for every authenticated user, /healthz and /version for
//! everyone) is built in here rather than stored, so `kubectl get clusterroles` lists only
//! what was applied. Aggregated ClusterRoles (`view`, `edit`, `admin`) are not built.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};

pub(crate) const ADMIN_USER: &str = "system:admin";
pub(crate) const MASTERS: &str = "system:masters";
pub(crate) const AUTHENTICATED: &str = "system:authenticated";
pub(crate) const UNAUTHENTICATED: &str = "system:unauthenticated";
pub(crate) const ANONYMOUS: &str = "system:anonymous";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// Who a request acts as, after authentication and impersonation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UserInfo {
    pub(crate) name: String,
    pub(crate) groups: Vec<String>,
}

impl UserInfo {
    /// The sandbox's own administrator: the learner's kubectl.
    pub(crate) fn admin() -> UserInfo {
        UserInfo {
            name: ADMIN_USER.into(),
            groups: vec![MASTERS.into(), AUTHENTICATED.into()],
        }
    }

    pub(crate) fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
        }
    }

    /// `system:serviceaccount:<ns>:<name>` in its three groups, as kube-apiserver names it.
    pub(crate) fn service_account(namespace: &str, name: &str) -> UserInfo {
        UserInfo {
            name: format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}"),
            groups: service_account_groups(namespace),
        }
    }

    /// `system:masters` is never asked: kube-apiserver's authorizer lets it do anything.
    pub(crate) fn is_superuser(&self) -> bool {
        self.groups.iter().any(|g| g == MASTERS)
    }

    /// Impersonated as kube-apiserver's impersonation filter builds it: a service-account
    /// name without groups gets its service-account groups, and every non-anonymous user
    /// gets `system:authenticated`.
    pub(crate) fn impersonated(name: &str, groups: Vec<String>) -> UserInfo {
        let mut groups = groups;
        if groups.is_empty() {
            if let Some((namespace, _)) = split_service_account(name) {
                groups = service_account_groups(namespace);
            }
        }
        if name != ANONYMOUS && !groups.iter().any(|g| g == AUTHENTICATED) {
            groups.push(AUTHENTICATED.into());
        }
        UserInfo {
            name: name.into(),
            groups,
        }
    }
}

fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        AUTHENTICATED.into(),
    ]
}

/// `system:serviceaccount:ns:name` → (ns, name).
pub(crate) fn split_service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    let (namespace, name) = rest.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// What a request asks to do, as kube-apiserver's RequestInfo and authorizer see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    pub(crate) resource_request: bool,
    pub(crate) api_group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// The URL path (what nonResourceURLs match).
    pub(crate) path: String,
}

impl Attributes {
    /// A resource request's attributes (for the checks a handler makes itself).
    pub(crate) fn resource(
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    /// Derived from the method and URL alone, as kube-apiserver's RequestInfoFactory does (it
    /// never asks whether the resource exists): `/api/v1/namespaces/NS/pods/NAME/exec` is
    /// resource `pods`, subresource `exec`; GET without a name is `list`, or `watch` with
    /// `?watch=true`; DELETE without a name is `deletecollection`.
    pub(crate) fn from_request(
        method: &str,
        path: &str,
        query: &HashMap<String, String>,
    ) -> Attributes {
        let non_resource = Attributes {
            verb: method.to_lowercase(),
            path: path.to_string(),
            ..Attributes::default()
        };
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (api_group, mut parts) = match segments.as_slice() {
            ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest.to_vec()),
            ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest.to_vec()),
            _ => return non_resource,
        };
        let mut verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => return non_resource,
        }
        .to_string();
        let mut namespace = String::new();
        if parts[0] == "namespaces" && parts.len() > 1 {
            namespace = parts[1].to_string();
            // `namespaces/NS/status` and `/finalize` are subresources of the namespace itself.
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts.drain(..2);
            }
        }
        let mut name = parts.get(1).map(|s| s.to_string()).unwrap_or_default();
        let subresource = parts.get(2).map(|s| s.to_string()).unwrap_or_default();
        if name.is_empty() && verb == "get" {
            let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
            verb = if watch { "watch" } else { "list" }.into();
            // `kubectl get pod x -w` lists with fieldSelector=metadata.name=x: that is about x.
            if let Some(selected) = query.get("fieldSelector").and_then(|s| {
                s.strip_prefix("metadata.name=")
                    .or_else(|| s.strip_prefix("metadata.name=="))
            }) {
                if !selected.is_empty() && !selected.contains([',', '/', '=', '!']) {
                    name = selected.to_string();
                }
            }
        }
        if name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        Attributes {
            verb,
            resource_request: true,
            api_group: api_group.to_string(),
            resource: parts[0].to_string(),
            subresource,
            namespace,
            name,
            path: path.to_string(),
        }
    }

    /// `pods` or `pods/exec`: what rules' `resources` match.
    fn combined_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// The RBAC objects of the cluster, as stored (JSON; anything malformed matches nothing).
#[derive(Default)]
pub(crate) struct Policies {
    pub(crate) roles: Vec<Arc<Value>>,
    pub(crate) cluster_roles: Vec<Arc<Value>>,
    pub(crate) role_bindings: Vec<Arc<Value>>,
    pub(crate) cluster_role_bindings: Vec<Arc<Value>>,
}

/// The answer and kube's `reason` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    /// `RBAC: allowed by RoleBinding "x/ns" of Role "x" to ServiceAccount "sa/ns"`, or on a
    /// denial the roles that could not be found (usually empty).
    pub(crate) reason: String,
}

/// The ClusterRoles kube-apiserver bootstraps that matter here, with the binding that grants
/// each: (binding name, role name, group, rules).
fn bootstrap() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    vec![
        (
            "cluster-admin",
            "cluster-admin",
            MASTERS,
            json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                   {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        ),
        (
            "system:discovery",
            "system:discovery",
            AUTHENTICATED,
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz",
                                        "/livez", "/openapi", "/openapi/*", "/readyz",
                                        "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
        (
            "system:basic-user",
            "system:basic-user",
            AUTHENTICATED,
            json!([{"apiGroups": ["authorization.k8s.io"],
                    "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    "verbs": ["create"]},
                   {"apiGroups": ["authentication.k8s.io"],
                    "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        ),
        (
            "system:public-info-viewer",
            "system:public-info-viewer",
            AUTHENTICATED,
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
        (
            "system:public-info-viewer",
            "system:public-info-viewer",
            UNAUTHENTICATED,
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                    "verbs": ["get"]}]),
        ),
    ]
}

fn texts(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// kube's `RuleAllows`: verbs, API groups, resources (`*`, `pods/exec`, `*/scale`) and
/// resourceNames for a resource request; verbs and nonResourceURLs (`/apis/*`) otherwise.
pub(crate) fn rule_allows(attributes: &Attributes, rule: &Value) -> bool {
    let verbs = texts(&rule["verbs"]);
    if !verbs.iter().any(|v| *v == "*" || *v == attributes.verb) {
        return false;
    }
    if !attributes.resource_request {
        return texts(&rule["nonResourceURLs"]).iter().any(|url| {
            *url == "*"
                || *url == attributes.path
                || url
                    .strip_suffix('*')
                    .is_some_and(|prefix| attributes.path.starts_with(prefix))
        });
    }
    let groups = texts(&rule["apiGroups"]);
    if !groups
        .iter()
        .any(|g| *g == "*" || *g == attributes.api_group)
    {
        return false;
    }
    let combined = attributes.combined_resource();
    let resource_matches = texts(&rule["resources"]).iter().any(|r| {
        *r == "*"
            || *r == combined
            || (!attributes.subresource.is_empty()
                && r.strip_prefix("*/") == Some(attributes.subresource.as_str()))
    });
    let names = texts(&rule["resourceNames"]);
    resource_matches && (names.is_empty() || names.contains(&attributes.name.as_str()))
}

/// kube's `appliesToUser`: a ServiceAccount subject without a namespace means the binding's.
fn subject_applies(user: &UserInfo, subject: &Value, binding_namespace: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => user.name == name,
        Some("Group") => user.groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let namespace = subject["namespace"]
                .as_str()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(binding_namespace);
            !namespace.is_empty()
                && user.name == format!("{SERVICE_ACCOUNT_PREFIX}{namespace}:{name}")
        }
        _ => false,
    }
}

/// `ServiceAccount "sa/ns"`, `User "alice"`, `Group "g"`, as kube's describeSubject writes them.
fn describe_subject(subject: &Value, binding_namespace: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let namespace = subject["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
            .unwrap_or(binding_namespace);
        format!("{kind} \"{name}/{namespace}\"")
    } else {
        format!("{kind} \"{name}\"")
    }
}

/// One granted rule and where it came from.
struct Grant {
    rule: Value,
    source: String,
}

/// Every rule bound to `user` that applies in `namespace` ("" = cluster scope), in kube's
/// order, plus the errors met on the way (a binding naming a role that does not exist).
fn grants(user: &UserInfo, namespace: &str, policies: &Policies) -> (Vec<Grant>, Vec<String>) {
    let mut found = Vec::new();
    let mut errors = Vec::new();
    for (binding, role, group, rules) in bootstrap() {
        if user.groups.iter().any(|g| g == group) {
            for rule in rules.as_array().into_iter().flatten() {
                found.push(Grant {
                    rule: rule.clone(),
                    source: format!(
                        "ClusterRoleBinding \"{binding}\" of ClusterRole \"{role}\" to Group \"{group}\""
                    ),
                });
            }
        }
    }
    let cluster_role = |name: &str| -> Option<Value> {
        if let Some((_, _, _, rules)) = bootstrap()
            .into_iter()
            .find(|(_, role, _, _)| *role == name)
        {
            return Some(rules);
        }
        policies
            .cluster_roles
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .map(|r| r["rules"].clone())
    };
    let mut visit = |binding: &Value, binding_namespace: &str, scope: &str| {
        let Some(subject) = binding["subjects"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|s| subject_applies(user, s, binding_namespace))
        else {
            return;
        };
        let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = binding["roleRef"]["name"].as_str().unwrap_or_default();
        let rules = match role_kind {
            "ClusterRole" => cluster_role(role_name).ok_or_else(|| {
                format!("clusterrole.rbac.authorization.k8s.io \"{role_name}\" not found")
            }),
            "Role" if !binding_namespace.is_empty() => policies
                .roles
                .iter()
                .find(|r| {
                    r["metadata"]["name"] == role_name
                        && r["metadata"]["namespace"] == binding_namespace
                })
                .map(|r| r["rules"].clone())
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{role_name}\" not found")),
            _ => Err(format!("unknown roleRef kind {role_kind:?}")),
        };
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
        let described_binding = if scope == "RoleBinding" {
            format!("{binding_name}/{binding_namespace}")
        } else {
            binding_name.to_string()
        };
        match rules {
            Ok(rules) => {
                let source = format!(
                    "{scope} \"{described_binding}\" of {role_kind} \"{role_name}\" to {}",
                    describe_subject(subject, binding_namespace)
                );
                for rule in rules.as_array().into_iter().flatten() {
                    found.push(Grant {
                        rule: rule.clone(),
                        source: source.clone(),
                    });
                }
            }
            Err(error) => errors.push(error),
        }
    };
    for binding in &policies.cluster_role_bindings {
        visit(binding, "", "ClusterRoleBinding");
    }
    if !namespace.is_empty() {
        for binding in policies
            .role_bindings
            .iter()
            .filter(|b| b["metadata"]["namespace"] == namespace)
        {
            visit(binding, namespace, "RoleBinding");
        }
    }
    (found, errors)
}

fn errors_reason(errors: &[String]) -> String {
    match errors {
        [] => String::new(),
        [one] => format!("RBAC: {one}"),
        many => format!("RBAC: [{}]", many.join(", ")),
    }
}

/// Does RBAC allow `attributes` for `user`? `system:masters` always is.
pub(crate) fn authorize(user: &UserInfo, attributes: &Attributes, policies: &Policies) -> Decision {
    let (found, errors) = grants(user, &attributes.namespace, policies);
    match found.iter().find(|g| rule_allows(attributes, &g.rule)) {
        Some(grant) => Decision {
            allowed: true,
            reason: format!("RBAC: allowed by {}", grant.source),
        },
        None => Decision {
            allowed: false,
            reason: errors_reason(&errors),
        },
    }
}

/// kube-apiserver's `forbiddenMessage` plus the authorizer's reason:
/// `User "u" cannot list resource "pods" in API group "" in the namespace "ns"`.
pub(crate) fn forbidden_message(user: &UserInfo, attributes: &Attributes, reason: &str) -> String {
    let message = if !attributes.resource_request {
        format!(
            "User \"{}\" cannot {} path \"{}\"",
            user.name, attributes.verb, attributes.path
        )
    } else if !attributes.namespace.is_empty() {
        format!(
            "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" in the namespace \"{}\"",
            user.name,
            attributes.verb,
            attributes.combined_resource(),
            attributes.api_group,
            attributes.namespace
        )
    } else {
        format!(
            "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" at the cluster scope",
            user.name,
            attributes.verb,
            attributes.combined_resource(),
            attributes.api_group
        )
    };
    if reason.is_empty() {
        message
    } else {
        format!("{message}: {reason}")
    }
}

/// What SelfSubjectRulesReview answers: the user's resource rules and non-resource rules in
/// `namespace`, and the evaluation errors (then the list is incomplete).
pub(crate) fn rules_in(
    user: &UserInfo,
    namespace: &str,
    policies: &Policies,
) -> (Vec<Value>, Vec<Value>, String) {
    let (found, errors) = grants(user, namespace, policies);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for Grant { rule, .. } in found {
        let urls = texts(&rule["nonResourceURLs"]);
        if !urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": texts(&rule["verbs"]), "nonResourceURLs": urls}));
        } else if !texts(&rule["resources"]).is_empty() {
            let mut out = json!({"verbs": texts(&rule["verbs"]), "apiGroups": texts(&rule["apiGroups"]),
                                 "resources": texts(&rule["resources"])});
            let names = texts(&rule["resourceNames"]);
            if !names.is_empty() {
                out["resourceNames"] = json!(names);
            }
            resource_rules.push(out);
        }
    }
    (resource_rules, non_resource_rules, errors_reason(&errors))
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

    fn policies(objects: Vec<Value>) -> Policies {
        let mut policies = Policies::default();
        for object in objects {
            let list = match object["kind"].as_str() {
                Some("Role") => &mut policies.roles,
                Some("ClusterRole") => &mut policies.cluster_roles,
                Some("RoleBinding") => &mut policies.role_bindings,
                _ => &mut policies.cluster_role_bindings,
            };
            list.push(Arc::new(object));
        }
        policies
    }

    /// URLs become kube's attributes: list/watch/deletecollection, subresources, namespaces.
    #[test]
    fn attributes_are_derived_from_the_url_as_kube_does() {
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns/pods", &query(&[]));
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("list", "pods", "ns")
        );
        let a = Attributes::from_request("GET", "/api/v1/pods", &query(&[("watch", "true")]));
        assert_eq!((a.verb.as_str(), a.namespace.as_str()), ("watch", ""));
        let a = Attributes::from_request("POST", "/api/v1/namespaces/ns/pods/p/exec", &query(&[]));
        assert_eq!(
            (
                a.verb.as_str(),
                a.resource.as_str(),
                a.subresource.as_str(),
                a.name.as_str()
            ),
            ("create", "pods", "exec", "p")
        );
        let a = Attributes::from_request(
            "DELETE",
            "/apis/apps/v1/namespaces/ns/deployments",
            &query(&[]),
        );
        assert_eq!(
            (a.verb.as_str(), a.api_group.as_str()),
            ("deletecollection", "apps")
        );
        let a = Attributes::from_request("GET", "/api/v1/namespaces/ns", &query(&[]));
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "ns", "ns")
        );
        let a = Attributes::from_request(
            "GET",
            "/api/v1/namespaces/ns/pods",
            &query(&[("watch", "1"), ("fieldSelector", "metadata.name=p")]),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "p"));
        let a = Attributes::from_request("GET", "/apis/apps/v1", &query(&[]));
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
    }

    /// Rules match on verbs, groups, `*`, `pods/exec`, `*/scale`, resourceNames and URLs.
    #[test]
    fn rules_match_as_kube_matches_them() {
        let exec = Attributes::resource("create", "", "pods", "exec", "ns", "p");
        assert!(rule_allows(
            &exec,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods/exec"]})
        ));
        assert!(!rule_allows(
            &exec,
            &json!({"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]})
        ));
        assert!(rule_allows(
            &exec,
            &json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
        ));
        let scale = Attributes::resource("update", "apps", "deployments", "scale", "ns", "d");
        assert!(rule_allows(
            &scale,
            &json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["*/scale"]})
        ));
        assert!(!rule_allows(
            &scale,
            &json!({"verbs": ["update"], "apiGroups": [""], "resources": ["*/scale"]})
        ));
        let get = Attributes::resource("get", "", "secrets", "", "ns", "a");
        assert!(rule_allows(
            &get,
            &json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]})
        ));
        assert!(!rule_allows(
            &get,
            &json!({"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["b"]})
        ));
        let path = Attributes::from_request("GET", "/apis/apps/v1", &HashMap::new());
        assert!(rule_allows(
            &path,
            &json!({"verbs": ["get"], "nonResourceURLs": ["/apis/*"]})
        ));
        assert!(!rule_allows(
            &path,
            &json!({"verbs": ["get"], "nonResourceURLs": ["/api"]})
        ));
        assert!(
            !rule_allows(&get, &json!({"verbs": "get", "resources": 7})),
            "malformed matches nothing"
        );
    }

    /// A RoleBinding grants its Role (or a ClusterRole) in its namespace only, with kube's reason.
    #[test]
    fn role_bindings_grant_in_their_namespace_with_kubes_reason() {
        let user = UserInfo::service_account("ns", "sa");
        let stored = policies(vec![
            json!({"kind": "Role", "metadata": {"name": "r", "namespace": "ns"},
                   "rules": [{"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ns"},
                   "subjects": [{"kind": "ServiceAccount", "name": "sa"}],
                   "roleRef": {"kind": "Role", "name": "r", "apiGroup": "rbac.authorization.k8s.io"}}),
            json!({"kind": "ClusterRole", "metadata": {"name": "crd-reader"},
                   "rules": [{"verbs": ["get"], "apiGroups": ["apiextensions.k8s.io"],
                              "resources": ["customresourcedefinitions"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "crb"},
                   "subjects": [{"kind": "Group", "name": "system:serviceaccounts:ns"}],
                   "roleRef": {"kind": "ClusterRole", "name": "crd-reader"}}),
        ]);
        let list = Attributes::resource("list", "", "pods", "", "ns", "");
        assert_eq!(
            authorize(&user, &list, &stored),
            Decision {
                allowed: true,
                reason: "RBAC: allowed by RoleBinding \"rb/ns\" of Role \"r\" to ServiceAccount \"sa/ns\"".into()
            }
        );
        let elsewhere = Attributes::resource("list", "", "pods", "", "other", "");
        let denied = authorize(&user, &elsewhere, &stored);
        assert!(!denied.allowed);
        assert_eq!(
            forbidden_message(&user, &elsewhere, &denied.reason),
            "User \"system:serviceaccount:ns:sa\" cannot list resource \"pods\" in API group \"\" in the namespace \"other\""
        );
        let crd = Attributes::resource(
            "get",
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "",
            "",
            "x",
        );
        assert!(authorize(&user, &crd, &stored).allowed, "group subject");
        let other_user = UserInfo::service_account("other", "sa");
        assert!(!authorize(&other_user, &crd, &stored).allowed);
        let discovery = Attributes::from_request("GET", "/api", &HashMap::new());
        assert!(authorize(&user, &discovery, &stored).allowed);
        assert!(!authorize(&UserInfo::anonymous(), &discovery, &stored).allowed);
    }

    /// A binding to a missing role says so in the denial's reason.
    #[test]
    fn a_missing_role_is_named_in_the_reason() {
        let user = UserInfo::impersonated("alice", vec![]);
        assert_eq!(user.groups, vec![AUTHENTICATED.to_string()]);
        let stored = policies(vec![
            json!({"kind": "RoleBinding", "metadata": {"name": "rb", "namespace": "ns"},
                   "subjects": [{"kind": "User", "name": "alice"}],
                   "roleRef": {"kind": "Role", "name": "gone"}}),
        ]);
        let get = Attributes::resource("get", "", "pods", "", "ns", "p");
        let decision = authorize(&user, &get, &stored);
        assert_eq!(
            decision.reason,
            "RBAC: role.rbac.authorization.k8s.io \"gone\" not found"
        );
    }

    /// Impersonating a service account by name gives it its groups.
    #[test]
    fn impersonated_service_accounts_get_their_groups() {
        assert_eq!(
            UserInfo::impersonated("system:serviceaccount:ns:sa", vec![]),
            UserInfo::service_account("ns", "sa")
        );
        assert_eq!(
            split_service_account("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(split_service_account("system:serviceaccount:ns"), None);
    }
}
