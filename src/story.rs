//! The workshop's story lines for step 02 — what `stage02`, `stage03` and the tour print as the
//! watch goes along — in one place, so the stages cannot drift apart.
//!
//! WORKSHOP.md, step 02. The 2017 operator printed Go structs with their format verbs left in
//! (`{size %d ...}`); here every line is built from `Display` impls (`PostgresClusterSpec`'s is
//! `{size: 3, version: 9.6.3, paused: false}`).

use crate::api::PostgresCluster;
use crate::watch::{Event, WatchNotice};

/// `PostgresCluster event: ADDED default/db {size: 3, version: 9.6.3, paused: false}` (step 02's line).
pub fn event_line(event: &Event<PostgresCluster>) -> String {
    let cluster = event.object();
    format!(
        "PostgresCluster event: {} {} {}",
        event.type_name(),
        cluster.key(),
        cluster.spec
    )
}

/// Step 02's lines for a notice: `Watch version: 4566` and `Controller initialised` after the first
/// list, `Starting at watchVersion 4566` for the first watch, one line per resume/relist/retry.
pub fn watch_notice_lines(notice: &WatchNotice, first_watch: &mut bool) -> Vec<String> {
    match notice {
        WatchNotice::Listed {
            resource_version, ..
        } => vec![
            format!("Watch version: {resource_version}"),
            "Controller initialised".to_string(),
        ],
        WatchNotice::Watching { resource_version } if *first_watch => {
            *first_watch = false;
            vec![format!("Starting at watchVersion {resource_version}")]
        }
        WatchNotice::Watching { .. } => Vec::new(),
        WatchNotice::Resumed {
            resource_version,
            why,
        } => vec![format!(
            "Watch resumed at watchVersion {resource_version}: {why}"
        )],
        WatchNotice::Relisted {
            why,
            resource_version,
            added,
            modified,
            deleted,
        } => vec![format!(
            "Relisted at watchVersion {resource_version} ({why}): {added} added, {modified} modified, {deleted} deleted while away"
        )],
        WatchNotice::Retrying { after, error } => vec![format!(
            "Watch failed, retrying in {:.1}s: {error}",
            after.as_secs_f64()
        )],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::api::{ObjectMeta, PostgresClusterSpec};

    fn cluster(size: i64) -> PostgresCluster {
        PostgresCluster {
            api_version: crate::api::API_VERSION.into(),
            kind: crate::api::KIND.into(),
            metadata: ObjectMeta {
                name: "db".into(),
                namespace: "default".into(),
                ..ObjectMeta::default()
            },
            spec: PostgresClusterSpec {
                size,
                version: "9.6.3".into(),
                paused: false,
            },
            status: None,
        }
    }

    #[test]
    fn events_read_like_the_workshop_log() {
        assert_eq!(
            event_line(&Event::Modified(cluster(5))),
            "PostgresCluster event: MODIFIED default/db {size: 5, version: 9.6.3, paused: false}"
        );
    }

    #[test]
    fn only_the_first_watch_is_announced_as_the_start() {
        let mut first_watch = true;
        let watching = WatchNotice::Watching {
            resource_version: "12".into(),
        };
        assert_eq!(
            watch_notice_lines(&watching, &mut first_watch),
            vec!["Starting at watchVersion 12".to_string()]
        );
        assert!(watch_notice_lines(&watching, &mut first_watch).is_empty());
        let retrying = WatchNotice::Retrying {
            after: Duration::from_millis(900),
            error: "InternalError (500): boom".into(),
        };
        assert_eq!(
            watch_notice_lines(&retrying, &mut first_watch),
            vec!["Watch failed, retrying in 0.9s: InternalError (500): boom".to_string()]
        );
    }
}
