//! Support: skip it on first read — it is the shape of an error body; the steps only ask it for a
//! code and a reason.
//!
//! The Kubernetes `Status` object: the body of every error the API server returns, and of the
//! `ERROR` events a watch can carry.
//!
//! WORKSHOP.md, "When the server says no" (Set-up). Used by the client (which decodes it), the
//! watch decoder (which finds it inside events) and step 04's `exec.rs` (a command's exit Status);
//! the sandbox keeps its own copy to send it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":..,"reason":..,"details":..,"code":..}`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub kind: String,
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

/// The parts of `details` the operator reads: the causes, and how long to wait.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusDetails {
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
            status: "Failure".into(),
            message: message.into(),
            reason: reason.into(),
            details: None,
            code,
        }
    }

    /// Read a body as a Status, if it is one (`kind: Status`). Anything else gives `None`.
    pub fn from_body(body: &[u8]) -> Option<Status> {
        let status: Status = serde_json::from_slice(body).ok()?;
        (status.kind == "Status").then_some(status)
    }

    /// 410: our resourceVersion is older than the server's history. Reason Expired, or Gone before 1.18.
    pub fn is_expired(&self) -> bool {
        self.code == 410 || self.reason == "Expired" || self.reason == "Gone"
    }

    /// How long the server asked us to wait, if it did: API priority and fairness (429) and an
    /// overloaded or starting apiserver (503) put it in `details.retryAfterSeconds`, beside the
    /// `Retry-After` header.
    pub fn retry_after(&self) -> Option<Duration> {
        let seconds = self.details.as_ref()?.retry_after_seconds?;
        Some(Duration::from_secs(seconds.into()))
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

    #[test]
    fn decodes_an_in_stream_expired_status() {
        let body = br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 657887 (680402)","reason":"Expired","code":410}"#;
        let status = Status::from_body(body).expect("a Status");
        assert!(status.is_expired());
        assert_eq!(status.message, "too old resource version: 657887 (680402)");
    }

    #[test]
    fn a_body_that_is_not_a_status_is_none() {
        assert_eq!(Status::from_body(b"<html>502 Bad Gateway</html>"), None);
        assert_eq!(Status::from_body(br#"{"kind":"Pod"}"#), None);
    }

    #[test]
    fn retry_after_comes_from_the_details() {
        let mut status = Status::failure(429, "TooManyRequests", "slow down");
        assert_eq!(status.retry_after(), None);
        status.details = Some(StatusDetails {
            retry_after_seconds: Some(4),
            ..Default::default()
        });
        assert_eq!(status.retry_after(), Some(Duration::from_secs(4)));
    }

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
