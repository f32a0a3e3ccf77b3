//! The error answers the sandbox gives, each a `Status` body with the reason, code and details
//! kube-apiserver would send, so clients (and kubectl's error printer) see the real thing.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and step 01 ("When the server says no").

use crate::resources::ResourceType;
use crate::status::{Status, StatusCause, StatusDetails};

/// A request the sandbox refuses: the Status to send, plus optional extra headers.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    /// Boxed: an error travels through many `Result`s and should stay small.
    pub(crate) status: Box<Status>,
    /// `Retry-After` seconds (429/503), sent as a header and in `details.retryAfterSeconds`.
    pub(crate) retry_after: Option<u32>,
}

impl From<Status> for ApiError {
    fn from(status: Status) -> Self {
        let retry_after = status.details.as_ref().and_then(|d| d.retry_after_seconds);
        ApiError {
            status: Box::new(status),
            retry_after,
        }
    }
}

fn with_details(mut status: Status, details: StatusDetails) -> ApiError {
    status.details = Some(details);
    status.into()
}

/// `details` naming the object, as kube-apiserver's NotFound/AlreadyExists/Conflict/Forbidden
/// carry it: `kind` is the resource's plural there (its `qualifiedResource`), not its Kind.
fn about(resource: &ResourceType, name: &str) -> StatusDetails {
    StatusDetails {
        name: name.into(),
        group: resource.group.clone(),
        kind: resource.plural.clone(),
        ..Default::default()
    }
}

impl ApiError {
    pub(crate) fn code(&self) -> u16 {
        self.status.code
    }

    /// `postgresclusters.workshop.example.com "nope" not found` (core kinds: `pods "nope" not found`).
    pub(crate) fn not_found(resource: &ResourceType, name: &str) -> ApiError {
        with_details(
            Status::failure(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", resource.qualified_plural()),
            ),
            about(resource, name),
        )
    }

    /// A URL that names nothing the server serves.
    pub(crate) fn path_not_found() -> ApiError {
        with_details(
            Status::failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
            StatusDetails::default(),
        )
    }

    pub(crate) fn namespace_not_found(namespace: &str) -> ApiError {
        with_details(
            Status::failure(
                404,
                "NotFound",
                format!("namespaces \"{namespace}\" not found"),
            ),
            StatusDetails {
                name: namespace.into(),
                kind: "namespaces".into(),
                ..Default::default()
            },
        )
    }

    pub(crate) fn already_exists(resource: &ResourceType, name: &str) -> ApiError {
        with_details(
            Status::failure(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", resource.qualified_plural()),
            ),
            about(resource, name),
        )
    }

    /// 409 Conflict: the write named a resourceVersion that is no longer current.
    pub(crate) fn conflict(resource: &ResourceType, name: &str, why: &str) -> ApiError {
        with_details(
            Status::failure(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    resource.qualified_plural()
                ),
            ),
            about(resource, name),
        )
    }

    pub(crate) fn stale_resource_version(resource: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per field, e.g. `spec.size: Invalid value: "three": ...`.
    pub(crate) fn invalid(
        resource: &ResourceType,
        name: &str,
        causes: Vec<StatusCause>,
    ) -> ApiError {
        let listed: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if listed.len() == 1 {
            listed[0].clone()
        } else {
            format!("[{}]", listed.join(", "))
        };
        with_details(
            Status::failure(
                422,
                "Invalid",
                format!(
                    "{} \"{name}\" is invalid: {summary}",
                    resource.qualified_kind()
                ),
            ),
            StatusDetails {
                name: name.into(),
                group: resource.group.clone(),
                kind: resource.kind.clone(),
                causes,
                ..Default::default()
            },
        )
    }

    /// A single-field 422 (the common case).
    pub(crate) fn invalid_field(
        resource: &ResourceType,
        name: &str,
        reason: &str,
        field: &str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError::invalid(
            resource,
            name,
            vec![StatusCause {
                reason: reason.into(),
                message: message.into(),
                field: field.into(),
            }],
        )
    }

    /// 403: `namespaces "default" is forbidden: this namespace may not be deleted`.
    pub(crate) fn forbidden(resource: &ResourceType, name: &str, why: &str) -> ApiError {
        with_details(
            Status::failure(
                403,
                "Forbidden",
                format!(
                    "{} \"{name}\" is forbidden: {why}",
                    resource.qualified_plural()
                ),
            ),
            about(resource, name),
        )
    }

    /// 504 Timeout for a watch from a resourceVersion the store has not reached.
    pub(crate) fn too_large_resource_version(requested: u64, current: u64) -> ApiError {
        let mut error: ApiError = with_details(
            Status::failure(
                504,
                "Timeout",
                format!("Too large resource version: {requested}, current: {current}"),
            ),
            StatusDetails {
                causes: vec![StatusCause {
                    reason: "ResourceVersionTooLarge".into(),
                    message: "Too large resource version".into(),
                    field: String::new(),
                }],
                retry_after_seconds: Some(1),
                ..Default::default()
            },
        );
        error.retry_after = Some(1);
        error
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        Status::failure(400, "BadRequest", message).into()
    }

    pub(crate) fn method_not_allowed() -> ApiError {
        Status::failure(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
        .into()
    }

    pub(crate) fn unsupported_media_type(content_type: &str, accepted: &[&str]) -> ApiError {
        Status::failure(
            415,
            "UnsupportedMediaType",
            // kube-apiserver's wording (apiserver/pkg/endpoints/handlers/negotiation), then
            // what was sent, so a learner sees which header to fix.
            format!(
                "the body of the request was in an unknown format - accepted media types include: {} (got {content_type:?})",
                accepted.join(", ")
            ),
        )
        .into()
    }

    pub(crate) fn too_large(limit: usize) -> ApiError {
        Status::failure(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
        .into()
    }

    /// An object over etcd's request limit. etcd answers `request is too large`; the sandbox
    /// says so as a 413 naming both sizes (kube-apiserver may pass etcd's error on as a 500).
    pub(crate) fn object_too_large(bytes: usize, limit: usize) -> ApiError {
        Status::failure(
            413,
            "RequestEntityTooLarge",
            format!(
                "Request entity too large: the object would be {bytes} bytes, over the {limit} bytes etcd accepts (etcdserver: request is too large)"
            ),
        )
        .into()
    }

    /// A request whose handler panicked: that request fails, the server carries on.
    pub(crate) fn internal(message: impl Into<String>) -> ApiError {
        Status::failure(500, "InternalError", message).into()
    }

    /// A request refused before it is looked at (a foreign Host or Origin).
    pub(crate) fn forbidden_request(message: impl Into<String>) -> ApiError {
        Status::failure(403, "Forbidden", message).into()
    }

    /// apimachinery's NewForbidden as the authorizer and admission use it:
    /// `pods "p" is forbidden: <why>`, `pods is forbidden: <why>` without a name, and
    /// `forbidden: <why>` for a non-resource path; details name the group and the resource
    /// (never the subresource, which only `why` mentions).
    pub(crate) fn forbidden_for(group: &str, resource: &str, name: &str, why: &str) -> ApiError {
        let qualified = match (resource, group) {
            ("", _) => String::new(),
            (resource, "") => resource.to_string(),
            (resource, group) => format!("{resource}.{group}"),
        };
        let message = match (qualified.as_str(), name) {
            ("", _) => format!("forbidden: {why}"),
            (qualified, "") => format!("{qualified} is forbidden: {why}"),
            (qualified, name) => format!("{qualified} \"{name}\" is forbidden: {why}"),
        };
        with_details(
            Status::failure(403, "Forbidden", message),
            StatusDetails {
                name: name.into(),
                group: group.into(),
                kind: resource.into(),
                ..Default::default()
            },
        )
    }

    pub(crate) fn unauthorized() -> ApiError {
        Status::failure(401, "Unauthorized", "Unauthorized").into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    /// One invalid field is named plainly; several are bracketed, as apimachinery's NewInvalid
    /// writes them, and each is a cause.
    #[test]
    fn invalid_lists_several_causes_in_brackets() {
        let registry = Registry::with_builtins();
        let pods = registry.find("", "v1", "pods").expect("pods are built in");
        let cause = |field: &str, message: &str| StatusCause {
            reason: "FieldValueInvalid".into(),
            message: message.into(),
            field: field.into(),
        };
        let one = ApiError::invalid(pods, "db9", vec![cause("spec.a", "Required value")]);
        assert_eq!(
            one.status.message,
            "Pod \"db9\" is invalid: spec.a: Required value"
        );
        let two = ApiError::invalid(
            pods,
            "db9",
            vec![
                cause("spec.a", "Required value"),
                cause("spec.b", "Invalid value: 0"),
            ],
        );
        assert_eq!(
            two.status.message,
            "Pod \"db9\" is invalid: [spec.a: Required value, spec.b: Invalid value: 0]"
        );
        assert_eq!(two.code(), 422);
        assert_eq!(two.status.details.as_ref().map(|d| d.causes.len()), Some(2));
    }
}
