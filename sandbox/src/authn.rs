//! Who is asking, and may they: each request's user (the sandbox's admin, a service account
//! by its token, or whom the admin impersonates) and kube-apiserver's RBAC check of what it
//! asks against the Roles and bindings in the store.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and the RBAC step. The order is kube-apiserver's:
//! authentication (401 for a token it does not know), impersonation (`kubectl --as`; 403
//! unless RBAC grants `impersonate`), then authorization (403 in kube's words). The
//! learner's kubectl — with the generated admin token (the `sandbox` binary's default), or no
//! token on a plain-HTTP sandbox (`--insecure-http`, tests) — is `system:admin` in
//! `system:masters` and is never restricted.

use std::sync::Arc;

use http::{header, HeaderMap};

use crate::errors::ApiError;
use crate::rbac::{self, Attributes, Policies, UserInfo};
use crate::state::Shared;
use crate::tokens;

/// Impersonation headers longer than this are refused rather than echoed in messages.
const MAX_IMPERSONATED_NAME: usize = 1024;
const MAX_IMPERSONATED_GROUPS: usize = 64;

/// The authenticated (and possibly impersonated) caller of one request.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub(crate) user: UserInfo,
    /// The pod a bound token was issued for; empty otherwise.
    pub(crate) pod: String,
}

/// Paths anonymous clients may read, as kube-apiserver's `system:public-info-viewer` allows.
fn is_public(path: &str) -> bool {
    matches!(path, "/version" | "/healthz" | "/livez" | "/readyz")
}

/// The bearer token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Authenticate, then apply impersonation headers.
pub(crate) fn authenticate(
    shared: &Arc<Shared>,
    headers: &HeaderMap,
    path: &str,
) -> Result<Caller, ApiError> {
    let caller = match bearer_token(headers) {
        Some(token) => {
            if shared
                .security
                .as_ref()
                .is_some_and(|s| s.is_admin_token(token))
            {
                Caller {
                    user: UserInfo::admin(),
                    pod: String::new(),
                }
            } else {
                service_account_caller(shared, token).ok_or_else(ApiError::unauthorized)?
            }
        }
        // A plain-HTTP sandbox has no credentials at all: whoever connects is its admin.
        None if shared.security.is_none() => Caller {
            user: UserInfo::admin(),
            pod: String::new(),
        },
        None if is_public(path) => Caller {
            user: UserInfo::anonymous(),
            pod: String::new(),
        },
        None => return Err(ApiError::unauthorized()),
    };
    impersonate(shared, caller, headers)
}

/// A token the sandbox issued, not expired, whose service account — and bound pod, if any —
/// still exist with the uids it was issued for (kube's legacy validator checks the same).
fn service_account_caller(shared: &Arc<Shared>, token: &str) -> Option<Caller> {
    let claims = shared.tokens.lookup(token, tokens::now_seconds())?;
    let state = shared.store.lock();
    let account = state.get(
        "/serviceaccounts",
        &claims.namespace,
        &claims.service_account,
    )?;
    if account["metadata"]["uid"] != claims.service_account_uid.as_str() {
        return None;
    }
    let mut pod_name = String::new();
    if let Some((name, uid)) = &claims.pod {
        let pod = state.get("/pods", &claims.namespace, name)?;
        if pod["metadata"]["uid"] != uid.as_str() {
            return None;
        }
        pod_name = name.clone();
    }
    Some(Caller {
        user: UserInfo::service_account(&claims.namespace, &claims.service_account),
        pod: pod_name,
    })
}

/// `Impersonate-User` and `Impersonate-Group`: the admin may act as anyone; anyone else needs
/// RBAC's `impersonate` verb on `users`, `groups` or `serviceaccounts`.
fn impersonate(
    shared: &Arc<Shared>,
    caller: Caller,
    headers: &HeaderMap,
) -> Result<Caller, ApiError> {
    let text = |value: &http::HeaderValue| -> Result<String, ApiError> {
        let text = value
            .to_str()
            .map_err(|_| ApiError::bad_request("impersonation headers must be ASCII"))?;
        if text.len() > MAX_IMPERSONATED_NAME {
            return Err(ApiError::bad_request(format!(
                "impersonation header longer than {MAX_IMPERSONATED_NAME} bytes"
            )));
        }
        Ok(text.to_string())
    };
    let user = headers.get("impersonate-user").map(text).transpose()?;
    let groups = headers
        .get_all("impersonate-group")
        .iter()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    let Some(user) = user else {
        if !groups.is_empty() {
            return Err(ApiError::bad_request(
                "requested [Impersonate-Group] without impersonating a user",
            ));
        }
        return Ok(caller);
    };
    if groups.len() > MAX_IMPERSONATED_GROUPS || user.is_empty() {
        return Err(ApiError::bad_request("invalid impersonation headers"));
    }
    if !caller.user.is_superuser() {
        let policies = policies(shared);
        let mut asks = vec![match rbac::split_service_account(&user) {
            Some((namespace, name)) => {
                Attributes::resource("impersonate", "", "serviceaccounts", "", namespace, name)
            }
            None => Attributes::resource("impersonate", "", "users", "", "", &user),
        }];
        for group in &groups {
            asks.push(Attributes::resource(
                "impersonate",
                "",
                "groups",
                "",
                "",
                group,
            ));
        }
        for attributes in asks {
            let decision = rbac::authorize(&caller.user, &attributes, &policies);
            if !decision.allowed {
                return Err(forbidden(&caller.user, &attributes, &decision.reason));
            }
        }
    }
    Ok(Caller {
        user: UserInfo::impersonated(&user, groups),
        pod: String::new(),
    })
}

/// The RBAC objects as stored now.
pub(crate) fn policies(shared: &Arc<Shared>) -> Policies {
    let state = shared.store.lock();
    let group = "rbac.authorization.k8s.io";
    Policies {
        roles: state.list(&format!("{group}/roles"), None),
        cluster_roles: state.list(&format!("{group}/clusterroles"), None),
        role_bindings: state.list(&format!("{group}/rolebindings"), None),
        cluster_role_bindings: state.list(&format!("{group}/clusterrolebindings"), None),
    }
}

/// 403 in kube-apiserver's words for a request RBAC does not allow.
pub(crate) fn forbidden(user: &UserInfo, attributes: &Attributes, reason: &str) -> ApiError {
    let why = rbac::forbidden_message(user, attributes, reason);
    if attributes.resource_request {
        ApiError::forbidden_for(
            &attributes.api_group,
            &attributes.resource,
            &attributes.name,
            &why,
        )
    } else {
        ApiError::forbidden_for("", "", "", &why)
    }
}

/// May `caller` do what `attributes` describe? The admin always may.
pub(crate) fn authorize(
    shared: &Arc<Shared>,
    user: &UserInfo,
    attributes: &Attributes,
) -> Result<(), ApiError> {
    if user.is_superuser() {
        return Ok(());
    }
    let decision = rbac::authorize(user, attributes, &policies(shared));
    if decision.allowed {
        Ok(())
    } else {
        Err(forbidden(user, attributes, &decision.reason))
    }
}

/// kube-apiserver's OwnerReferencesPermissionEnforcement admission (on in OpenShift, and what
/// `kube/rbac.yaml`'s `postgresclusters/finalizers` rule is for): an ownerReference with
/// `blockOwnerDeletion: true` that was not already blocking needs `update` on the owner's
/// `finalizers` subresource. `plural_of(apiVersion, kind)` finds the owner's resource.
pub(crate) fn check_owner_references(
    shared: &Arc<Shared>,
    user: &UserInfo,
    (group, resource, namespace, name): (&str, &str, &str, &str),
    old: Option<&serde_json::Value>,
    new: &serde_json::Value,
    plural_of: impl Fn(&str, &str) -> Option<String>,
) -> Result<(), ApiError> {
    if user.is_superuser() {
        return Ok(());
    }
    let blocking = |object: Option<&serde_json::Value>| -> Vec<serde_json::Value> {
        object
            .and_then(|o| o["metadata"]["ownerReferences"].as_array())
            .into_iter()
            .flatten()
            .filter(|r| r["blockOwnerDeletion"] == true)
            .cloned()
            .collect()
    };
    let before = blocking(old);
    let new_refs: Vec<serde_json::Value> = blocking(Some(new))
        .into_iter()
        .filter(|r| !before.iter().any(|b| b["uid"] == r["uid"]))
        .collect();
    if new_refs.is_empty() {
        return Ok(());
    }
    let policies = policies(shared);
    for reference in new_refs {
        let api_version = reference["apiVersion"].as_str().unwrap_or_default();
        let kind = reference["kind"].as_str().unwrap_or_default();
        let owner_group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        let owner_resource = plural_of(api_version, kind).unwrap_or_else(|| kind.to_lowercase());
        let attributes = Attributes::resource(
            "update",
            owner_group,
            &owner_resource,
            "finalizers",
            namespace,
            reference["name"].as_str().unwrap_or_default(),
        );
        let decision = rbac::authorize(user, &attributes, &policies);
        if !decision.allowed {
            let why = format!(
                "cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {}",
                rbac::forbidden_message(user, &attributes, &decision.reason)
            );
            return Err(ApiError::forbidden_for(group, resource, name, &why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The scheme is case-insensitive, and an empty token is no token.
    #[test]
    fn bearer_tokens_are_read_as_kube_reads_them() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "bearer abc".parse().expect("header"));
        assert_eq!(bearer_token(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().expect("header"));
        assert_eq!(bearer_token(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer ".parse().expect("header"));
        assert_eq!(bearer_token(&headers), None);
    }
}
