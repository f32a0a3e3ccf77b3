//! The operator's `/metrics`, `/healthz` and `/readyz` without Postgres: ready once its watches
//! have listed, live while they keep moving, and `/healthz` failing once the API server stops
//! answering (a proxy in front of the sandbox that goes silent: a wedged watch); and a server
//! that answers three paths, refuses the rest, and outlives whatever a client sends.
//!
//! WORKSHOP.md, "Inside step 04: watching the operator".

use super::support as metrics_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use metrics_support::{get, try_get, Scrape};
use postgres_operator::metrics::{serve, HealthBounds, Metrics};
use postgres_operator::postgres::run_postgres_operator;
use postgres_operator::watch::WatchOptions;
use sandbox::SandboxOptions;
use test_support::scripted_server::{never, status, Recorded, Reply};
use test_support::ScriptedServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);

/// A response body that passes the sandbox's bytes on until `wedged`, then goes silent for good
/// (the connection stays open, as a half-dead one does).
struct Stall {
    body: Incoming,
    wedged: Arc<AtomicBool>,
}

impl Body for Stall {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.wedged.load(Ordering::SeqCst) {
            return Poll::Pending;
        }
        match Pin::new(&mut self.body).poll_frame(cx) {
            // Bytes that arrive after the wedge are swallowed too.
            Poll::Ready(Some(Ok(_))) if self.wedged.load(Ordering::SeqCst) => Poll::Pending,
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(Some(Err(_)) | None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A scripted server that forwards every request to `upstream` until `wedged`; from then on it
/// answers nothing, and the streams already open send nothing more.
async fn wedging_proxy(upstream: String, wedged: Arc<AtomicBool>) -> ScriptedServer {
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    ScriptedServer::http(move |request: Recorded, _| -> Reply {
        if wedged.load(Ordering::SeqCst) {
            return never();
        }
        let (http, upstream, wedged) = (http.clone(), upstream.clone(), wedged.clone());
        Box::pin(async move {
            let mut outgoing = hyper::Request::builder()
                .method(request.method.as_str())
                .uri(format!("{upstream}{}", request.path));
            for (name, value) in [
                ("content-type", &request.content_type),
                ("accept", &request.accept),
                ("user-agent", &request.user_agent),
            ] {
                if let Some(value) = value {
                    outgoing = outgoing.header(name, value);
                }
            }
            let Ok(outgoing) = outgoing.body(Full::new(Bytes::from(request.body))) else {
                return status(
                    500,
                    "InternalError",
                    "the proxy could not build the request",
                );
            };
            match http.request(outgoing).await {
                Ok(response) => {
                    let (parts, body) = response.into_parts();
                    hyper::Response::from_parts(parts, Stall { body, wedged }.boxed())
                }
                Err(error) => status(502, "BadGateway", &error.to_string()),
            }
        })
    })
    .await
}

/// Ready once both watches have listed; live while they keep reopening every second; and once
/// the API server goes silent, `/healthz` fails (500) naming the watch, within its bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_once_the_watches_are_wedged() {
    let (sandbox, _) = test_support::sandbox_with_crd(SandboxOptions::default()).await;
    let wedged = Arc::new(AtomicBool::new(false));
    let proxy = wedging_proxy(sandbox.url(), Arc::clone(&wedged)).await;
    // Watches that the server ends every second, so a quiet healthy watch shows progress often,
    // and a bound of (1 s + 1 s) × 2 = 4 s.
    let mut options = test_support::quick_postgres_options();
    options.watch = WatchOptions {
        watch_timeout_min: Duration::from_secs(1),
        watch_timeout_max: Duration::from_secs(1),
        idle_margin: Duration::from_secs(1),
        ..WatchOptions::default()
    };
    let bounds = HealthBounds::for_operator(options.reconcile_interval, &options.watch);
    assert_eq!(bounds.watch, Duration::from_secs(4));
    let stop = CancellationToken::new();
    let server = serve(
        local_any_port(),
        Arc::clone(&options.metrics),
        bounds,
        stop.clone(),
    )
    .await
    .expect("the metrics server listens");
    let (reporter, _story) = test_support::Story::record();
    let client = test_support::plain_client(&proxy.url);
    let operator = tokio::spawn(run_postgres_operator(
        client,
        options,
        (),
        reporter,
        stop.clone(),
    ));

    test_support::eventually(DEADLINE, "/readyz to answer 200", || async {
        (get(server.address, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    // Healthy and quiet: each watch reopened twice since, and still live.
    test_support::eventually(DEADLINE, "both watches to reopen twice", || async {
        let scrape = Scrape::parse(&get(server.address, "/metrics").await.1);
        let restarts = |resource| {
            scrape
                .value(
                    "postgres_operator_watch_restarts_total",
                    &[("resource", resource)],
                )
                .unwrap_or(0.0)
        };
        (restarts("pods") >= 2.0 && restarts("postgresclusters") >= 2.0).then_some(())
    })
    .await;
    let (code, body) = get(server.address, "/healthz").await;
    assert_eq!((code, body.as_str()), (200, "ok\n"));

    wedged.store(true, Ordering::SeqCst);
    let reason = test_support::eventually(DEADLINE, "/healthz to fail", || async {
        let (code, body) = get(server.address, "/healthz").await;
        (code == 500).then_some(body)
    })
    .await;
    assert!(reason.contains("watch made no progress"), "{reason}");
    // Figures still come: they are kept, not asked of the API server.
    let scrape = Scrape::parse(&get(server.address, "/metrics").await.1);
    assert_eq!(scrape.value("postgres_operator_leader", &[]), Some(1.0));
    assert!(
        scrape
            .value(
                "postgres_operator_api_requests_total",
                &[("method", "GET"), ("code", "200")]
            )
            .unwrap_or(0.0)
            > 0.0,
        "{scrape:?}"
    );

    stop.cancel();
    let _ = tokio::time::timeout(DEADLINE, operator).await;
}

/// A standby is ready and live; unknown paths are 404, other methods 405; garbage, a huge head
/// and more idle connections than allowed leave the server answering as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_answers_three_paths_and_outlives_hostile_clients() {
    let metrics = Arc::new(Metrics::new());
    let bounds = HealthBounds::for_operator(Duration::from_secs(8), &WatchOptions::default());
    let server = serve(
        local_any_port(),
        Arc::clone(&metrics),
        bounds,
        CancellationToken::new(),
    )
    .await
    .expect("the metrics server listens");
    let address = server.address;
    assert_eq!(
        get(address, "/readyz").await.0,
        503,
        "not started: not ready"
    );
    metrics.standing_by();
    assert_eq!(get(address, "/readyz").await, (200, "ok\n".to_string()));
    assert_eq!(get(address, "/healthz").await, (200, "ok\n".to_string()));
    assert_eq!(get(address, "/nothing").await.0, 404);
    assert_eq!(get(address, "/metrics?x=1").await.0, 200);
    let scrape = Scrape::parse(&get(address, "/metrics").await.1);
    assert_eq!(scrape.value("postgres_operator_leader", &[]), Some(0.0));

    let post = raw(
        address,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
    )
    .await;
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let garbage = raw(address, b"\x00\x01\x02 not http at all\r\n\r\n").await;
    assert!(!garbage.starts_with("HTTP/1.1 200"), "{garbage}");
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 100_000));
    huge.extend(b"\r\n\r\n");
    let too_big = raw(address, &huge).await;
    assert!(!too_big.starts_with("HTTP/1.1 200"), "{too_big}");

    // Forty connections that never send a byte: sixteen are held until the head timeout, the
    // rest closed at once. Afterwards the server answers again.
    let mut idle = Vec::new();
    for _ in 0..40 {
        if let Ok(stream) = tokio::net::TcpStream::connect(address).await {
            idle.push(stream);
        }
    }
    test_support::eventually(DEADLINE, "/healthz to answer again", || async {
        let exchange = tokio::time::timeout(Duration::from_secs(2), try_get(address, "/healthz"));
        matches!(exchange.await, Ok(Some((200, _)))).then_some(())
    })
    .await;
    drop(idle);
    assert!(!server.task.is_finished(), "the server is still running");
}

/// Send `bytes`, read what comes back until the server closes (at most 10 s): the text.
async fn raw(address: SocketAddr, bytes: &[u8]) -> String {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        // The server may close before it has read everything (a head too large): fine.
        let _ = stream.write_all(bytes).await;
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        Some(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn local_any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}
