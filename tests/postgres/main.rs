//! Step 04's Postgres clusters, one test binary: the pod manifests (`src/postgres/manifests.rs`)
//! and the shell they hold, run on this machine, and a replicated cluster built from them by
//! hand on real PostgreSQL; what an idle cluster costs the API server; synchronous replication
//! through a lost node and a planned switchover; a Ready replica that streams from nothing,
//! replaced; an operator that starts beside many pods. WORKSHOP.md, step 04.
//!
//! Run one part: `cargo test --test postgres scripts::`.

use postgres_operator::client::Client;
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::psql_argv;

mod agent;
mod crashed_primary;
mod frozen_standby;
mod manifests;
mod many_pods;
mod not_streaming;
mod scripts;
mod steady_state;
mod synchronous_replication;

/// `sql`'s answer in `pod` through `pods/exec`, trimmed; None when psql failed.
async fn psql(client: &Client, pod: &str, sql: &str) -> Option<String> {
    psql_in_pod(client, client.namespace(), pod, &psql_argv(sql))
        .await
        .ok()
        .map(|out| out.trim().to_string())
}
