//! Support: skip it on first read — the words of the log lines, kept in one place so the stages say
//! them alike.
//!
//! The workshop's story lines — what `stage02`, `stage03` and the tour print as the watch and the
//! cluster tasks go along — in one place, so the stages cannot drift apart: step 02's lines, and
//! the [`Reporter`] that carries step 03's [`LogLine`]s to stdout, a test or `tracing` (step 04's
//! lines about who leads are the election's, in `src/leader/elect.rs`).
//!
//! WORKSHOP.md, steps 02 and 03. The 2017 operator printed Go structs with their format verbs left
//! in (`{size %d ...}`); here every line is built from `Display` impls (`PostgresClusterSpec`'s is
//! `{size: 3, version: 16, paused: false}`).

use tokio::sync::mpsc;

use crate::resource::Resource;
use crate::watch::{Event, WatchNotice};

/// Step 02's lines for one event. A change is one line,
/// `PostgresCluster event: ADDED default/db {size: 3, version: 16, paused: false}`; a notice is
/// `Watch version: 4566` and `Controller initialised` once the first list's first page is in
/// (before its objects' ADDED lines), `Starting at watchVersion 4566` for the first watch, one line
/// per resume, relist or retry.
pub fn event_lines<K: Resource>(event: &Event<K>, first_watch: &mut bool) -> Vec<String> {
    let notice = match event {
        Event::Added(object) | Event::Modified(object) | Event::Deleted(object) => {
            return vec![format!(
                "{} event: {} {} {}",
                K::KIND,
                event.type_name(),
                object.key(),
                object.spec()
            )];
        }
        Event::Notice(notice) => notice,
    };
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

/// One line of the operator's story. Lines about one cluster name it: `[default/db] spec update: ..`;
/// lines about the operator as a whole (step 02's "Watch version: 4566") have no cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// `namespace/name`, or `None` for the operator as a whole.
    pub cluster: Option<String>,
    pub line: String,
}

impl LogLine {
    pub fn is_about(&self, cluster: &str) -> bool {
        self.cluster.as_deref() == Some(cluster)
    }
}

impl std::fmt::Display for LogLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cluster {
            Some(cluster) => write!(f, "[{cluster}] {}", self.line),
            None => f.write_str(&self.line),
        }
    }
}

/// Where the controller and its tasks tell their story. Cheap to clone: every task holds one.
#[derive(Clone, Debug)]
pub struct Reporter {
    lines: Option<mpsc::UnboundedSender<LogLine>>,
}

impl Reporter {
    /// Story lines become `tracing` info events (with a `cluster` field when they are about one):
    /// what a deployed operator wants in `kubectl logs`.
    pub fn tracing() -> Reporter {
        Reporter { lines: None }
    }

    /// Story lines go to the returned receiver, in order. Unbounded because a line must never
    /// block a cluster task; the receiver (stage03's printer, a test) keeps up easily.
    pub fn channel() -> (Reporter, mpsc::UnboundedReceiver<LogLine>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            Reporter {
                lines: Some(sender),
            },
            receiver,
        )
    }

    /// Story lines printed on stdout, in order, by a task that ends once every clone of the
    /// `Reporter` is dropped: await it before exiting, so that the last lines are printed.
    pub fn to_stdout() -> (Reporter, tokio::task::JoinHandle<()>) {
        let (reporter, mut lines) = Reporter::channel();
        let printer = tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                println!("{line}");
            }
        });
        (reporter, printer)
    }

    /// A line about one cluster, `namespace/name`.
    pub fn report(&self, cluster: &str, line: impl Into<String>) {
        self.send(LogLine {
            cluster: Some(cluster.to_string()),
            line: line.into(),
        });
    }

    /// A line about the operator as a whole.
    pub fn report_operator(&self, line: impl Into<String>) {
        self.send(LogLine {
            cluster: None,
            line: line.into(),
        });
    }

    fn send(&self, log: LogLine) {
        let unsent = match &self.lines {
            Some(sender) => sender.send(log).err().map(|error| error.0),
            None => Some(log),
        };
        // No channel, or its receiver has gone away: the line still reaches the log.
        if let Some(log) = unsent {
            match &log.cluster {
                Some(cluster) => tracing::info!(cluster = %cluster, "{}", log.line),
                None => tracing::info!("{}", log.line),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::api::{PostgresCluster, PostgresClusterSpec};

    fn cluster(size: i64) -> PostgresCluster {
        let spec = PostgresClusterSpec::new(size, "16");
        PostgresCluster::new("default", "db", spec)
    }

    #[test]
    fn events_read_like_the_workshop_log() {
        assert_eq!(
            event_lines(&Event::Modified(Arc::new(cluster(5))), &mut true),
            ["PostgresCluster event: MODIFIED default/db {size: 5, version: 16, paused: false}"]
        );
    }

    #[test]
    fn only_the_first_watch_is_announced_as_the_start() {
        let mut first_watch = true;
        let watching = WatchNotice::Watching {
            resource_version: "12".into(),
        };
        assert_eq!(
            event_lines(
                &Event::<PostgresCluster>::Notice(watching.clone()),
                &mut first_watch
            ),
            vec!["Starting at watchVersion 12".to_string()]
        );
        assert!(event_lines(
            &Event::<PostgresCluster>::Notice(watching.clone()),
            &mut first_watch
        )
        .is_empty());
        let retrying = WatchNotice::Retrying {
            after: Duration::from_millis(900),
            error: "InternalError (500): boom".into(),
        };
        assert_eq!(
            event_lines(
                &Event::<PostgresCluster>::Notice(retrying),
                &mut first_watch
            ),
            vec!["Watch failed, retrying in 0.9s: InternalError (500): boom".to_string()]
        );
    }

    /// stage03 prints cluster lines with a `[namespace/name]` prefix and operator lines bare.
    #[test]
    fn log_lines_print_with_their_cluster_prefix() {
        let (reporter, mut lines) = Reporter::channel();
        reporter.report("default/db", "Running: [], pending: []");
        reporter.report_operator("Watch version: 4566");
        let printed: Vec<String> = std::iter::from_fn(|| lines.try_recv().ok())
            .map(|line| line.to_string())
            .collect();
        assert_eq!(
            printed,
            [
                "[default/db] Running: [], pending: []",
                "Watch version: 4566"
            ]
        );
    }
}
