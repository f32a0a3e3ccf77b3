//! What the acts share: the API server, the stage they play on, the operator running now, and
//! what the tour has seen so far (the primary, the newest backup, the segment archived...), which
//! later acts act on and their captions and reports name.

use std::time::{Duration, Instant};

use postgres_operator::api::object_path;
use postgres_operator::backups::api::LastBackup;
use postgres_operator::client::Client;
use postgres_operator::controller::ControllerStopped;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::example::EXAMPLE_NAME;
use crate::sql::{SqlRoute, SqlTarget};
use crate::story::Story;

/// Where the tour plays.
pub enum Stage {
    /// An API server the flags or kubectl's configuration name: steps 01-03 only, and nothing
    /// left behind.
    RealCluster,
    /// The tour's own sandbox. `sql` is how SQL reaches its pods, `None` when they are simulated.
    Sandbox { sql: Option<SqlRoute> },
}

/// An operator the tour started, until its curtain.
pub struct Operator {
    /// A child of the scene's `stop_operators`: cancelled at the curtain, or by Ctrl-C/SIGTERM.
    pub stop: CancellationToken,
    pub task: JoinHandle<Result<ControllerStopped, String>>,
}

pub struct Scene {
    pub client: Client,
    pub stage: Stage,
    pub reconcile_interval: Duration,
    /// The example object exists because the tour created it: a tour stopped half-way deletes it.
    pub created_example: bool,
    /// The parent of every operator's stop token.
    pub stop_operators: CancellationToken,
    pub operator: Option<Operator>,
    /// The running operator's lines.
    pub story: Story,
    /// When the last timed write was sent: reports say how long the cluster took to answer it.
    pub clock: Instant,
    /// The primary, as `status.primary` named it when the tour last looked.
    pub primary: String,
    /// The backup-now annotation's value, settled before the caption shows it.
    pub backup_request: String,
    /// `status.lastBackup.name` before the backup asked for, and then the new one.
    pub backup_before: Option<String>,
    pub last_backup: LastBackup,
    /// Where the act's SQL goes: aimed at the primary before each SQL act.
    pub sql: Option<SqlTarget>,
    /// The WAL segment `pg_switch_wal()` finished.
    pub segment: String,
    /// `status.restore.message`: the WAL position the restore reached.
    pub restore_reached: String,
    /// How many cluster tasks the operator stopped at its curtain.
    pub tasks_stopped: usize,
}

impl Scene {
    pub fn new(
        client: Client,
        stage: Stage,
        reconcile_interval: Duration,
        stop_operators: CancellationToken,
    ) -> Scene {
        Scene {
            client,
            stage,
            reconcile_interval,
            created_example: false,
            stop_operators,
            operator: None,
            story: Story::ended(),
            clock: Instant::now(),
            primary: String::new(),
            backup_request: String::new(),
            backup_before: None,
            last_backup: LastBackup::default(),
            sql: None,
            segment: String::new(),
            restore_reached: String::new(),
            tasks_stopped: 0,
        }
    }

    /// `namespace/name`: how the operator tags its lines about the example.
    pub fn key(&self) -> String {
        format!("{}/{EXAMPLE_NAME}", self.client.namespace())
    }

    pub fn cluster_path(&self) -> String {
        object_path(self.client.namespace(), EXAMPLE_NAME)
    }

    /// Seconds since the clock last started.
    pub fn seconds(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }
}
