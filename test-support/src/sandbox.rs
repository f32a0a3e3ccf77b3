//! Starting a sandbox for a test: on 127.0.0.1:0, in memory or with pods as real processes.

use std::time::Duration;

use sandbox::{ProcessRuntime, Runtime, Sandbox, SandboxOptions};
use tokio_util::sync::CancellationToken;

use crate::eventually;

/// A sandbox on 127.0.0.1:0 with default options.
pub async fn start_sandbox() -> Sandbox {
    start_sandbox_with(SandboxOptions::default()).await
}

/// A sandbox on 127.0.0.1:0 with these options (pods are simulated, in memory).
pub async fn start_sandbox_with(options: SandboxOptions) -> Sandbox {
    Sandbox::start(options, CancellationToken::new())
        .await
        .expect("sandbox starts")
}

/// A sandbox whose pods run as real PostgreSQL processes ([`process_runtime`]).
pub async fn start_process_sandbox(options: SandboxOptions) -> Sandbox {
    Sandbox::start_with_runtime(
        options,
        Runtime::Processes(process_runtime()),
        CancellationToken::new(),
    )
    .await
    .expect("sandbox starts")
}

/// The sandbox's process runtime (pods as real processes) with the short back-offs tests want,
/// or a failure that says what is missing: a test that needs real Postgres never passes
/// without it.
pub fn process_runtime() -> ProcessRuntime {
    let mut runtime = ProcessRuntime::detect(None).unwrap_or_else(|error| {
        panic!(
            "this test runs pods as real processes, which this machine cannot: {error}. \
             Install PostgreSQL and bubblewrap (.ci/install-test-deps)"
        )
    });
    runtime.restart_backoff = Duration::from_millis(200);
    runtime.max_restart_backoff = Duration::from_secs(1);
    runtime.retry_period = Duration::from_millis(200);
    runtime.sync_period = Duration::from_millis(100);
    runtime
}

/// Wait until some client (kubectl, say) has a watch open on `resource`, per the request log, so
/// that a change made next arrives as a live event rather than in the initial list.
pub async fn until_watch_opened(sandbox: &Sandbox, resource: &str) {
    eventually(
        Duration::from_secs(15),
        &format!("a watch on {resource}"),
        || {
            let opened = sandbox
                .requests()
                .iter()
                .any(|r| r.verb == "watch" && r.resource == resource);
            async move { opened.then_some(()) }
        },
    )
    .await;
}
