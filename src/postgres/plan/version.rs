//! Support: skip it on first read — what a change of `spec.version` means: a minor one only
//! makes new pods run it; a major one, or any change of a one-member cluster, is refused (the
//! round then says so in `Degraded`). The rules of `plan.rs` never read it.
//!
//! WORKSHOP.md, step 04 ("One action per tick").

use crate::api::PostgresVersion;

/// What a change of `spec.version` means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionChange {
    /// The pods run what the spec asks (or the cluster has no pods yet).
    None,
    /// Same major version: a rolling replacement, one pod at a time.
    Minor,
    /// A different major version: PostgreSQL's data directory format changes between majors
    /// (`pg_upgrade` or a dump and restore); an image swap would not start. Refused.
    Major { from: u32, to: u32 },
    /// A minor change of a one-member cluster: replacing its only pod loses its data (the data
    /// directory is an emptyDir). Refused until the cluster has a replica to switch over to.
    NeedsReplica,
    /// The spec's version does not parse; the CRD's pattern stops this unless it was bypassed.
    Invalid(String),
}

/// What changing the pods from `running` (the primary's version, or the version last recorded)
/// to `wanted` would take.
pub fn version_change(running: Option<&str>, wanted: &str, size: usize) -> VersionChange {
    let Some(running) = running else {
        return VersionChange::None;
    };
    if running == wanted {
        return VersionChange::None;
    }
    let (from, to) = match (
        running.parse::<PostgresVersion>(),
        wanted.parse::<PostgresVersion>(),
    ) {
        (Ok(from), Ok(to)) => (from, to),
        (_, Err(error)) => return VersionChange::Invalid(error.to_string()),
        // A pod on an odd tag: nothing to compare with, treat it as "different, same major".
        (Err(_), Ok(_)) => return VersionChange::Minor,
    };
    if from.major != to.major {
        VersionChange::Major {
            from: from.major,
            to: to.major,
        }
    } else if size < 2 {
        VersionChange::NeedsReplica
    } else {
        VersionChange::Minor
    }
}
