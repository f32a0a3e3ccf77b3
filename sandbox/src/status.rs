//! The Kubernetes `Status` object: the body of every error the API server returns, and of the
//! `ERROR` events a watch can carry.
//!
//! WORKSHOP.md, step 01 ("When the server says no"). The sandbox only writes it; the operator
//! (`src/`) has its own copy that decodes it, a deliberate small duplication between the crates.

use serde::{Deserialize, Serialize};

/// `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":..,"reason":..,"details":..,"code":..}`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub api_version: String,
    /// "Success" or "Failure".
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub message: String,
    /// Machine-readable: NotFound, AlreadyExists, Conflict, Invalid, Forbidden, Unauthorized,
    /// Expired (410 on a watch; servers before 1.18 said Gone), TooManyRequests, ...
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<StatusDetails>,
    /// The HTTP status code this Status stands for.
    #[serde(default)]
    pub code: u16,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<StatusCause>,
    /// Set with 429 and 503: how long the server wants us to wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_seconds: Option<u32>,
}

/// One reason a request was refused; for 422 Invalid, `field` names the offending field (`spec.size`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub field: String,
}

impl Status {
    /// A Failure Status as the API server writes it.
    pub fn failure(code: u16, reason: &str, message: impl Into<String>) -> Status {
        Status {
            kind: "Status".into(),
            api_version: "v1".into(),
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
        }
    }
}

impl std::fmt::Display for Status {
    /// `Forbidden (403): postgresclusters is forbidden: ...`, then one `; field: message` per cause.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.reason, self.code, self.message)?;
        for cause in self.details.iter().flat_map(|d| &d.causes) {
            write!(f, "; {}: {}", cause.field, cause.message)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Display gives the reason and code, then each cause's field and message.
    #[test]
    fn display_names_the_fields_of_each_cause() {
        let mut status = Status::failure(422, "Invalid", "PostgresCluster \"db\" is invalid");
        status.details = Some(StatusDetails {
            causes: vec![StatusCause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: \"string\": must be integer".into(),
                field: "spec.size".into(),
            }],
            ..Default::default()
        });
        let text = status.to_string();
        assert!(text.starts_with("Invalid (422): "), "{text}");
        assert!(text.contains("spec.size: Invalid value"), "{text}");
    }
}
