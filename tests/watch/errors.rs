//! Error answers at list or watch start — 401 after a token rotation, 403, 404, 429 with
//! Retry-After, 500, 503 — are retried with backoff, never in a hot loop, and the watch recovers.
//!
//! WORKSHOP.md, step 02 ("The state machine that never loses its place"). Runs against the sandbox (TLS and bearer
//! tokens for the 401 case).

use std::time::Duration;

use postgres_operator::client::Client;
use postgres_operator::config::{Config, ConfigArgs, Environment};
use postgres_operator::watch::WatchNotice;
use sandbox::{Sandbox, SandboxOptions};
use tokio::time::Instant;

use crate::support::*;

fn watch_requests_with_code(sandbox: &Sandbox, code: u16) -> usize {
    sandbox
        .requests()
        .iter()
        // By path: injected faults and 401s are answered before the sandbox works out the verb.
        .filter(|r| r.path.contains("postgresclusters?watch=true") && r.code == code)
        .count()
}

/// 500 at watch start: back off, retry from the same resourceVersion (no relist), recover.
#[tokio::test]
async fn a_500_at_watch_start_is_retried_and_the_watch_recovers() {
    let (sandbox, client, mut running) = watching_a_sandbox(test_options()).await;
    fail_next_watches(&sandbox, 2, injected(500, "InternalError", None));
    create_cluster(&client, "during", 3).await;
    running.expect_event("ADDED default/during size=3").await;
    assert_eq!(running.retries_with("InternalError (500)"), 2);
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Relisted { .. })),
        0
    );
    running.stop().await;
}

/// 503 beyond the client's own retries: the watch loop backs off and recovers.
#[tokio::test]
async fn a_503_storm_is_ridden_out() {
    let (sandbox, client, mut running) = watching_a_sandbox(test_options()).await;
    // The client retries a 503 three times itself (Retry-After 0 here); the fifth attempt succeeds.
    let unavailable = injected(503, "ServiceUnavailable", Some(0));
    fail_next_watches(&sandbox, 5, unavailable);
    create_cluster(&client, "after-503", 1).await;
    running.expect_event("ADDED default/after-503 size=1").await;
    assert!(running.retries_with("503") >= 1);
    assert_eq!(watch_requests_with_code(&sandbox, 503), 5);
    running.stop().await;
}

/// 429 with Retry-After: 1 — the retry waits at least that second.
#[tokio::test]
async fn a_429_waits_for_its_retry_after() {
    let (sandbox, client, mut running) = watching_a_sandbox(test_options()).await;
    let started = Instant::now();
    fail_next_watches(&sandbox, 1, injected(429, "TooManyRequests", Some(1)));
    create_cluster(&client, "throttled", 2).await;
    running.expect_event("ADDED default/throttled size=2").await;
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited only {:?}",
        started.elapsed()
    );
    assert_eq!(watch_requests_with_code(&sandbox, 429), 1);
    running.stop().await;
}

/// A persistent 403 (RBAC missing) is reported on the notice path and retried with growing
/// delays — a handful of requests, not a hot loop.
#[tokio::test]
async fn a_persistent_403_backs_off_and_is_reported() {
    let (sandbox, _client, mut running) = watching_a_sandbox(test_options()).await;
    fail_next_watches(&sandbox, 1000, injected(403, "Forbidden", None));
    running.retrying_with(WITHIN, "Forbidden (403)").await;
    tokio::time::sleep(Duration::from_secs(2)).await; // the measurement window
    let forbidden = watch_requests_with_code(&sandbox, 403);
    // 100 ms, 200, 400, 800, 1000 (±20 %) → about 5 attempts in 2 s.
    assert!(
        (3..=8).contains(&forbidden),
        "{forbidden} watch requests got 403 in ~2 s"
    );
    running.count_notices(|_| false); // take in what arrived during the window
    let delays: Vec<Duration> = running
        .notices
        .iter()
        .filter_map(|n| match n {
            WatchNotice::Retrying { after, .. } => Some(*after),
            _ => None,
        })
        .collect();
    assert!(
        delays.len() >= 3 && delays[2] > delays[0],
        "delays grow: {delays:?}"
    );
    running.stop().await;
}

/// Right after the CRD is Established the collection can briefly 404: the first list is retried.
#[tokio::test]
async fn a_404_on_the_first_list_is_retried() {
    let (sandbox, client) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    create_cluster(&client, "early", 3).await;
    sandbox
        .faults()
        .fail_next(2, "/postgresclusters", injected(404, "NotFound", None));
    let mut running = start_watch(client.clone(), test_options());
    running.expect_event("ADDED default/early size=3").await;
    assert_eq!(running.retries_with("NotFound (404)"), 2);
    running.stop().await;
}

/// The service-account token is rotated; the old one now gets 401. The client re-reads the
/// token file and the watch carries on — no backoff, no relist.
#[tokio::test]
async fn a_401_after_token_rotation_rereads_the_token_file() {
    let (sandbox, credentials) = test_support::start_tls_sandbox(SandboxOptions::default()).await;
    let args = ConfigArgs {
        server: Some(sandbox.url()),
        certificate_authority: Some(credentials.path().join("ca.crt")),
        token_file: Some(credentials.path().join("token")),
        ..ConfigArgs::default()
    };
    let no_env = Environment::default();
    let make_client =
        || Client::new(Config::infer_from(&args, &no_env).expect("config")).expect("client");
    let client = make_client();
    test_support::register_crd(&client).await;

    let mut running = start_watch(make_client(), test_options());
    running.until_watching(WITHIN).await;
    sandbox.rotate_token();
    sandbox.faults().end_all_watches_now();
    create_cluster(&make_client(), "after-rotation", 3).await;
    running
        .expect_event("ADDED default/after-rotation size=3")
        .await;
    assert!(
        watch_requests_with_code(&sandbox, 401) >= 1,
        "the old token was refused on a watch"
    );
    // (A "watch ended at once" retry can appear: the test ends the first watch right after it began.)
    assert_eq!(running.retries_with("401"), 0, "{:#?}", running.notices);
    assert_eq!(
        running.count_notices(|n| matches!(n, WatchNotice::Relisted { .. })),
        0
    );
    running.stop().await;
}
