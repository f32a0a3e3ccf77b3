//! The helpers both crates' tests share, so each lives once (STYLE.md, item 15): the operator's
//! tests (`tests/`) and the sandbox's (`sandbox/tests/`) name this crate as a dev-dependency.
//!
//! - [`kubectl`]: the real kubectl against one server, with its own cache and no kubeconfig.
//! - [`eventually`]: poll a check until it holds or a deadline passes.
//! - [`graph`]: module graphs and their cycles, for the layering tests.
//! - [`sandbox`]: start a sandbox on 127.0.0.1:0, in memory or with pods as real processes.
//! - [`scripted_server`]: an HTTP(S) server whose every answer a test decides, to the chunk.
//! - [`processes`]: the host's process table, where pods run as real processes.
//! - [`operator`]: the operator's client for a URL, and its CRD registered on a sandbox.
//! - [`psql`]: this host's `psql` against a pod or Service address, with a deadline.
//!
//! ```text
//! let sandbox = test_support::start_sandbox().await;
//! let kubectl = test_support::Kubectl::new(&sandbox.url());
//! kubectl.ok(&["create", "-f", test_support::EXAMPLE_FIXTURE]).await;
//! test_support::eventually(Duration::from_secs(10), "the pods", || async { ... }).await;
//! ```

pub mod eventually;
pub mod graph;
pub mod kubectl;
pub mod operator;
pub mod processes;
pub mod psql;
pub mod sandbox;
pub mod scripted_server;

pub use eventually::{eventually, POLL_INTERVAL};
pub use kubectl::{
    kubectl_offline, kubectl_path, live_items, pod_is_ready, table_row, Kubectl, KubectlOutput,
    BUNDLED_KUBECTL,
};
pub use operator::{
    older_crd, plain_client, quick_postgres_options, register_crd, sandbox_with_crd, Story,
    PGC_TABLE_HEADER,
};
pub use processes::{processes, processes_matching, Process};
pub use psql::HostPsql;
pub use sandbox::{
    process_runtime, spawn_sandbox_binary, spawn_sandbox_binary_banner, start_process_sandbox,
    start_sandbox, start_sandbox_with, until_watch_opened,
};
pub use scripted_server::{ScriptedServer, TestPki};

/// The CRD manifest users apply (`kube/crd.yaml`).
pub const CRD_FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kube/crd.yaml");
/// The workshop's example cluster: example-postgresql-cluster, size 3, version "16".
pub const EXAMPLE_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../kube/example-postgres-cluster.yaml"
);
