//! The helpers both crates' tests share, so each lives once (STYLE.md, item 15): the operator's
//! tests (`tests/`) and the sandbox's (`sandbox/tests/`) name this crate as a dev-dependency.
//!
//! - [`kubectl`]: the real kubectl against one server, with its own cache and no kubeconfig;
//!   [`Kubectl::pod_report`]: a pod's logs and container statuses, for a failure around it.
//! - [`cluster`]: a PostgresCluster of real PostgreSQL pods, through kubectl: members, psql.
//! - [`eventually`](mod@eventually): poll a check until it holds or a deadline passes
//!   ([`within`]: or return None, for a caller with more to say).
//! - [`graph`]: module graphs and their cycles, for the layering tests.
//! - [`http_client`]: exact HTTP requests to a sandbox, below the operator's client.
//! - [`sandbox`]: start a sandbox on 127.0.0.1:0, in memory or with pods as real processes.
//! - [`scripted_server`]: an HTTP(S) server whose every answer a test decides, to the chunk.
//! - [`processes`](mod@processes): the host's process table, where pods run as real processes.
//! - [`runtime`]: pods as real PostgreSQL processes, created with kubectl and waited for.
//! - [`operator`]: the operator's client for a URL, and its CRD registered on a sandbox.
//! - [`psql`]: this host's `psql` against a pod or Service address, with a deadline.
//!
//! ```text
//! let sandbox = test_support::start_sandbox().await;
//! let kubectl = test_support::Kubectl::new(&sandbox.url());
//! kubectl.ok(&["create", "-f", test_support::EXAMPLE_FIXTURE]).await;
//! test_support::eventually(Duration::from_secs(10), "the pods", || async { ... }).await;
//! ```

pub mod cluster;
pub mod eventually;
pub mod graph;
pub mod http_client;
pub mod kubectl;
pub mod operator;
pub mod processes;
pub mod psql;
pub mod runtime;
pub mod sandbox;
pub mod scripted_server;

pub use eventually::{eventually, within, POLL_INTERVAL};
pub use kubectl::{
    kubectl_offline, kubectl_path, live_items, pod_ip, pod_is_ready, table_row, Kubectl,
    KubectlOutput, KubectlWatch, BUNDLED_KUBECTL,
};
pub use operator::{
    cluster_spec, create_cluster, older_crd, operator_command, plain_client, quick_backups,
    quick_failover, quick_postgres_options, register_crd, sandbox_with_crd, synchronous_spec,
    PostgresOperator, Story, PGC_TABLE_HEADER,
};
pub use processes::{processes, processes_matching, run_with_deadline, Process};
pub use psql::HostPsql;
pub use sandbox::{
    process_runtime, sandbox_and_kubectl, spawn_sandbox_binary, spawn_sandbox_binary_banner,
    start_process_sandbox, start_process_sandbox_on, start_sandbox, start_sandbox_with,
    start_tls_sandbox, until_watch_opened, PROCESS_SANDBOX_FLAGS,
};
pub use scripted_server::{ScriptedServer, TestPki};

/// The number in environment variable `name` (`SANDBOX_FUZZ_SEED=7`: a test's knob for a longer
/// or a repeated run), or None when it is unset or not a number.
pub fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
}

/// The CRD manifest users apply (`kube/crd.yaml`).
pub const CRD_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kube/crd.yaml");
/// The sandbox's pod fixture: pod `web`, label `app: web`, one container `c` of `nginx:1.27`.
pub const POD_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../sandbox/tests/fixtures/pod.yaml"
);
/// The workshop's example cluster: example-postgresql-cluster, size 3, version "16".
pub const EXAMPLE_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../kube/example-postgres-cluster.yaml"
);
