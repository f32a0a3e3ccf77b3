//! Support: skip it on first read — the HTTP server behind `/metrics` and the probes.
//!
//! The HTTP server of `/metrics`, `/healthz` and `/readyz`, on hyper like the client. Anyone who
//! reaches the port may call it (a Prometheus, a kubelet, a port scanner), so everything it does
//! per request is bounded: at most [`MAX_CONNECTIONS`] at once (more are closed unanswered), the
//! request head within [`HEADER_READ_TIMEOUT`] and [`MAX_HEAD_BYTES`], the whole connection
//! within [`CONNECTION_TIMEOUT`], one request per connection, the body never read, and figures
//! read at scrape time within [`SCRAPE_DEADLINE`].

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::text::CONTENT_TYPE;
use super::{HealthBounds, Metrics};

/// Connections served at once; one more is closed at once. A scraper and two probes need three.
pub const MAX_CONNECTIONS: usize = 16;
/// The request line and headers must arrive within this.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// hyper's read buffer, which bounds the request head (its smallest allowed size).
pub const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Prometheus' default `scrape_timeout` is 10 s: the figures read at scrape time (one
/// `pods/exec` per primary) get half of it, so the answer still arrives in time.
pub const SCRAPE_DEADLINE: Duration = Duration::from_secs(5);
/// A whole connection, head to last byte of the answer.
pub const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

/// A running server: the address it listens on (the port is known even when 0 was asked for).
#[derive(Debug)]
pub struct MetricsServer {
    pub address: SocketAddr,
    /// Ends when the shutdown token is cancelled.
    pub task: JoinHandle<()>,
}

/// Listen on `address` and answer until `shutdown` is cancelled: `/metrics` from `metrics`,
/// `/healthz` and `/readyz` from its health within `bounds`.
pub async fn serve(
    address: SocketAddr,
    metrics: Arc<Metrics>,
    bounds: HealthBounds,
    shutdown: CancellationToken,
) -> std::io::Result<MetricsServer> {
    let listener = TcpListener::bind(address).await?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "serving /metrics, /healthz and /readyz");
    let task = tokio::spawn(accept(listener, metrics, bounds, shutdown));
    Ok(MetricsServer { address, task })
}

async fn accept(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    bounds: HealthBounds,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Out of file descriptors, most likely: wait a little rather than spin.
                Err(error) => {
                    tracing::warn!(%error, "metrics server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::debug!("metrics server: too many connections; closing one");
            continue;
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let metrics = Arc::clone(&metrics);
                async move { Ok::<_, Infallible>(answer(&metrics, &bounds, &request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                // One request per connection: nothing outlives its answer.
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(CONNECTION_TIMEOUT, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => tracing::debug!(%error, "metrics server: connection failed"),
                Err(_) => tracing::debug!("metrics server: connection timed out"),
            }
        });
    }
}

/// The answer to one request. Only the method and path are read.
async fn answer(
    metrics: &Metrics,
    bounds: &HealthBounds,
    request: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    match request.uri().path() {
        "/metrics" => {
            let body = metrics.render(Instant::now() + SCRAPE_DEADLINE).await;
            let mut response = plain(StatusCode::OK, body);
            response
                .headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
            response
        }
        // The kubelet counts 200–399 as success and anything else as failure; the body is
        // for the human reading `kubectl describe pod`'s probe event.
        "/healthz" => match metrics.live(bounds) {
            Ok(()) => plain(StatusCode::OK, "ok\n".into()),
            Err(why) => plain(StatusCode::INTERNAL_SERVER_ERROR, format!("{why}\n")),
        },
        "/readyz" => match metrics.ready() {
            Ok(()) => plain(StatusCode::OK, "ok\n".into()),
            Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
        _ => plain(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /healthz or /readyz\n".into(),
        ),
    }
}

fn plain(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
