//! The operator's side of a test: its client for a server, and its CRD registered.

use std::time::Duration;

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
