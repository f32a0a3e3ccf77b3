//! The operator's side of a test: its client for a server, and its CRD registered.

use std::time::Duration;

use postgres_operator::api::{collection_path, PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::Client;
use sandbox::{Sandbox, SandboxOptions};

use crate::start_sandbox_with;

/// The operator's client for a plain-HTTP `url` (a sandbox or a scripted server): no auth, the
/// default timeouts.
pub fn plain_client(url: &str) -> Client {
    let config = postgres_operator::config::Config::from_url(url).expect("a plain http URL");
    Client::new(config).expect("client")
}

/// Register the PostgresCluster CRD through `client` and wait (10 s at most) until the server
/// says it is Established, so the collection is served.
pub async fn register_crd(client: &Client) {
    postgres_operator::crd::ensure(client)
        .await
        .expect("CRD registered");
    postgres_operator::crd::wait_established(client, Duration::from_secs(10))
        .await
        .expect("CRD established");
}

/// A sandbox with these options, the CRD registered and Established, and a client for it.
pub async fn sandbox_with_crd(options: SandboxOptions) -> (Sandbox, Client) {
    let sandbox = start_sandbox_with(options).await;
    let client = plain_client(&sandbox.url());
    register_crd(&client).await;
    (sandbox, client)
}

/// A spec of `size` members running PostgreSQL 16, with nothing else asked for.
pub fn cluster_spec(size: i64) -> PostgresClusterSpec {
    PostgresClusterSpec::new(size, "16")
}

/// [`cluster_spec`] with synchronous replication: `number` standbys, `dataDurability: required`.
pub fn synchronous_spec(size: i64, number: i64) -> PostgresClusterSpec {
    use postgres_operator::postgres::api::{DataDurability, ReplicationSpec, SynchronousSpec};
    let replication = ReplicationSpec {
        synchronous: Some(SynchronousSpec {
            number,
            data_durability: DataDurability::Required,
        }),
    };
    let mut spec = PostgresClusterSpec::new(size, "16");
    ReplicationSpec::write(Some(&replication), &mut spec);
    spec
}

/// POST `namespace/name` with [`cluster_spec`]`(size)` through `client`, and return it as the
/// server stored it (with its uid and resourceVersion).
pub async fn create_cluster(
    client: &Client,
    namespace: &str,
    name: &str,
    size: i64,
) -> PostgresCluster {
    let body = PostgresCluster::new(namespace, name, cluster_spec(size));
    client
        .create(&collection_path(namespace), &body)
        .await
        .expect("cluster created")
}

/// An operator binary (`program`, from `env!("CARGO_BIN_EXE_...")`) as a learner starts it
/// against `server`: `--server SERVER`, no kubeconfig and no in-cluster variables (so only the
/// flag names a server), warnings only on stderr, stdin closed, stdout piped; killed when dropped.
/// Add the binary's own flags, then spawn.
pub fn operator_command(program: &str, server: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .args(["--server", server])
        .env("KUBECONFIG", "/dev/null")
        .env("RUST_LOG", "warn")
        .env_remove("KUBE_SERVER")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    command
}

/// The CRD stage 01 registered before the status and scale subresources, the size maximum and
/// the version rule: what an older operator left on a cluster.
pub fn older_crd() -> serde_json::Value {
    let mut crd = postgres_operator::crd::postgres_cluster_crd();
    let version = &mut crd["spec"]["versions"][0];
    version
        .as_object_mut()
        .expect("a version object")
        .remove("subresources");
    let schema = &mut version["schema"]["openAPIV3Schema"];
    schema["properties"]
        .as_object_mut()
        .expect("schema properties")
        .remove("status");
    let spec = &mut schema["properties"]["spec"]["properties"];
    spec["size"]
        .as_object_mut()
        .expect("spec.size")
        .remove("maximum");
    spec["version"]
        .as_object_mut()
        .expect("spec.version")
        .remove("pattern");
    crd
}

/// The stage-04 operator's options with the short timings end-to-end tests want: a round every
/// second, failover after 2 s, a member lost after 30 s, expectations given up after 10 s.
/// Stage 06's tests run the same operator with the `Backups` layer.
pub fn quick_postgres_options() -> postgres_operator::postgres::PostgresOptions {
    postgres_operator::postgres::PostgresOptions {
        reconcile_interval: Duration::from_secs(1),
        delays: postgres_operator::postgres::plan::Delays {
            failover_after: Duration::from_secs(2),
            member_lost_after: Duration::from_secs(30),
            not_streaming_after: Duration::from_secs(10),
            ..postgres_operator::postgres::plan::Delays::default()
        },
        expectation_timeout: Duration::from_secs(10),
        ..postgres_operator::postgres::PostgresOptions::default()
    }
}

/// Every story line an operator tells through its [`Reporter`], kept for the test to search
/// (and printed as `operator: LINE`, which `--nocapture` shows).
///
/// [`Reporter`]: postgres_operator::story::Reporter
#[derive(Clone, Default)]
pub struct Story {
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Story {
    /// A reporter to hand to the operator, and the story it fills.
    pub fn record() -> (postgres_operator::story::Reporter, Story) {
        let (reporter, mut receiver) = postgres_operator::story::Reporter::channel();
        let story = Story::default();
        let lines = story.lines.clone();
        tokio::spawn(async move {
            while let Some(line) = receiver.recv().await {
                println!("operator: {line}");
                lines.lock().expect("story lines").push(line.to_string());
            }
        });
        (reporter, story)
    }

    /// True once some line contains `part`.
    pub fn said(&self, part: &str) -> bool {
        self.lines
            .lock()
            .expect("story lines")
            .iter()
            .any(|line| line.contains(part))
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("story lines").clone()
    }

    /// How many lines so far (an index for [`Story::first_after`]).
    pub fn count(&self) -> usize {
        self.lines.lock().expect("story lines").len()
    }

    /// The first line after the first `from` that satisfies `wanted`, if one came.
    pub fn first_after(&self, from: usize, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let lines = self.lines.lock().expect("story lines");
        lines
            .get(from..)
            .and_then(|new| new.iter().find(|line| wanted(line)).cloned())
    }
}

/// The header of `kubectl get pgc`, split into words: the CRD's printer columns (LAST BACKUP,
/// stage 06's column, is two words).
pub const PGC_TABLE_HEADER: [&str; 9] = [
    "NAME", "SIZE", "READY", "PRIMARY", "PHASE", "VERSION", "LAST", "BACKUP", "AGE",
];

/// Step 04's operator (no layer) running in this process against a fresh sandbox whose pods are
/// real processes, with the CRD registered: how the tests of real failover begin.
pub struct PostgresOperator {
    pub sandbox: Sandbox,
    pub client: Client,
    pub story: Story,
    stop: tokio_util::sync::CancellationToken,
    task: OperatorTask,
}

/// The operator running as a task of the test's runtime.
type OperatorTask = tokio::task::JoinHandle<
    Result<postgres_operator::controller::ControllerStopped, postgres_operator::crd::CrdError>,
>;

impl PostgresOperator {
    /// Start the sandbox (failing with what is missing without PostgreSQL and bubblewrap) and
    /// the operator with `options` (e.g. [`crate::quick_postgres_options`]).
    pub async fn start(options: postgres_operator::postgres::PostgresOptions) -> PostgresOperator {
        let sandbox = crate::start_process_sandbox(SandboxOptions::default()).await;
        let client = plain_client(&sandbox.url());
        register_crd(&client).await;
        let (story, stop, task) = Self::spawn(&client, options);
        PostgresOperator {
            sandbox,
            client,
            story,
            stop,
            task,
        }
    }

    /// The operator's task, with what it says and what stops it.
    fn spawn(
        client: &Client,
        options: postgres_operator::postgres::PostgresOptions,
    ) -> (Story, tokio_util::sync::CancellationToken, OperatorTask) {
        let (reporter, story) = Story::record();
        let stop = tokio_util::sync::CancellationToken::new();
        let task = tokio::spawn(postgres_operator::postgres::run_postgres_operator(
            client.clone(),
            options,
            (),
            reporter,
            stop.clone(),
        ));
        (story, stop, task)
    }

    /// Stop only the operator, as SIGTERM would (the sandbox and its pods go on); [`resume`]
    /// starts a new one, as a restarted operator process.
    ///
    /// [`resume`]: PostgresOperator::resume
    pub async fn pause(&mut self) {
        self.stop.cancel();
        (&mut self.task)
            .await
            .expect("the operator's task")
            .expect("the operator stops cleanly");
    }

    /// A new operator with `options`, after [`PostgresOperator::pause`].
    pub fn resume(&mut self, options: postgres_operator::postgres::PostgresOptions) {
        (self.story, self.stop, self.task) = Self::spawn(&self.client, options);
    }

    /// Stop the operator as SIGTERM would, and require that it stopped cleanly.
    pub async fn stop(self) {
        self.stop.cancel();
        self.task
            .await
            .expect("the operator's task")
            .expect("the operator stops cleanly");
    }
}
