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
