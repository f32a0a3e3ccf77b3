//! What a spec may say, and how the log prints a spec and a status: the size bound, the Postgres
//! version rule the CRD's schema also enforces, `validate_spec`, the `{size: 3, version: 16,
//! paused: false}` form and `describe_status`. Support: a learner may skip it on first read — the server's schema refuses a bad spec
//! before the watch sees it; these checks hold when the CRD is old or someone else's.
//!
//! WORKSHOP.md, step 01 (the schema's rules) and step 03 ("The cluster task").

use serde_json::Value;

use super::{PostgresClusterSpec, PostgresClusterStatus};

/// The largest `spec.size`: a primary and six replicas. Each streaming replica holds a WAL sender
/// on the primary (`max_wal_senders` is 10 by default), and a failover must compare every replica.
pub const MAX_SIZE: i64 = 7;

/// The oldest Postgres major version the operator runs; every major before it is past the
/// PostgreSQL project's five years of support.
pub const OLDEST_MAJOR: u32 = 13;

/// A postgres image tag's version: `"16"` (the newest 16.x) or `"16.4"`. Major ≥ [`OLDEST_MAJOR`].
/// Since Postgres 10 the first number is the major version (9.6 was a major of its own), and only
/// a major change needs `pg_upgrade`; minors of one major share the on-disk format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PostgresVersion {
    pub major: u32,
    pub minor: Option<u32>,
}

/// Why a `spec.version` is not a [`PostgresVersion`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error("{value:?} is not a postgres version: expected MAJOR or MAJOR.MINOR in digits, e.g. \"16\" or \"16.4\"")]
    NotAVersion { value: String },
    #[error("{value:?} is too old: major version {major} is below {OLDEST_MAJOR}, the oldest this operator runs")]
    TooOld { value: String, major: u32 },
}

impl std::str::FromStr for PostgresVersion {
    type Err = VersionError;

    /// The same rule as the CRD's `spec.version` pattern: digits without leading zeros, one
    /// optional `.MINOR`, major at least 13.
    fn from_str(value: &str) -> Result<PostgresVersion, VersionError> {
        let not_a_version = || VersionError::NotAVersion {
            value: value.to_string(),
        };
        let number = |digits: &str| -> Option<u32> {
            let plain = !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit())
                && (digits == "0" || !digits.starts_with('0'));
            plain.then(|| digits.parse().ok()).flatten()
        };
        let (major, minor) = match value.split_once('.') {
            Some((major, minor)) => (major, Some(minor)),
            None => (value, None),
        };
        let major = number(major).ok_or_else(not_a_version)?;
        let minor = minor
            .map(|minor| number(minor).ok_or_else(not_a_version))
            .transpose()?;
        if major < OLDEST_MAJOR {
            return Err(VersionError::TooOld {
                value: value.to_string(),
                major,
            });
        }
        Ok(PostgresVersion { major, minor })
    }
}

impl std::fmt::Display for PostgresVersion {
    /// `16` or `16.4`: the image tag again.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.minor {
            Some(minor) => write!(f, "{}.{minor}", self.major),
            None => write!(f, "{}", self.major),
        }
    }
}

impl std::fmt::Display for PostgresClusterSpec {
    /// `{size: 3, version: 16, paused: false}` — the workshop's log shape, without Go's format verbs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{size: {}, version: {}, paused: {}",
            self.size, self.version, self.paused
        )?;
        // The later steps' fields as they came; a cluster without them prints as in 2017.
        for (name, value) in &self.more {
            write!(f, ", {name}: {}", flow(value))?;
        }
        write!(f, "}}")
    }
}

/// A carried field as the log lines print it, in YAML's flow style without quotes:
/// `{keep: 2, storageSize: 256Mi}`. Keys in the order serde_json keeps them (sorted).
fn flow(value: &Value) -> String {
    match value {
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .map(|(name, value)| format!("{name}: {}", flow(value)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(flow).collect();
            format!("[{}]", items.join(", "))
        }
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Why a spec cannot be acted on. The CRD's schema enforces the same rules on the server, so
/// these fire only when the CRD is old or was registered by someone else.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("spec.size must be between 1 and {MAX_SIZE}, got {size}")]
    SizeOutOfRange { size: i64 },
    #[error("spec.version: {0}")]
    Version(#[source] VersionError),
}

/// The checks a cluster task runs on a spec before acting (and that a spec update must pass to
/// be accepted). Step 05 adds its own on `spec.replication` (`failover::api::validate_spec`,
/// through `ClusterLayer::validate`).
pub fn validate_spec(spec: &PostgresClusterSpec) -> Result<(), SpecError> {
    if !(1..=MAX_SIZE).contains(&spec.size) {
        return Err(SpecError::SizeOutOfRange { size: spec.size });
    }
    spec.version
        .parse::<PostgresVersion>()
        .map_err(SpecError::Version)?;
    Ok(())
}

/// `{phase: Running, size: 3}` with the fields that are set, or `<none>` (the workshop's word).
pub fn describe_status(status: Option<&PostgresClusterStatus>) -> String {
    let Some(status) = status else {
        return "<none>".to_string();
    };
    let mut fields = Vec::new();
    if let Some(phase) = &status.phase {
        fields.push(format!("phase: {phase}"));
    }
    if let Some(size) = status.size {
        fields.push(format!("size: {size}"));
    }
    if let Some(ready) = status.ready_instances {
        fields.push(format!("readyInstances: {ready}"));
    }
    if fields.is_empty() {
        "<none>".to_string()
    } else {
        format!("{{{}}}", fields.join(", "))
    }
}
