//! The HTTP side of the sandbox: accept connections (TLS, or plain HTTP and TLS on one port),
//! authenticate and authorize each request (`authn.rs`), log it, and route it: discovery and OpenAPI documents are answered here, resource
//! URLs go to `handlers.rs`.
//!
//! WORKSHOP.md, "Set-up: the sandbox". URL layout: `/api/v1/...` for the core group,
//! `/apis/GROUP/VERSION/...` for the rest; then `namespaces/NS/PLURAL[/NAME[/SUBRESOURCE]]` for
//! namespaced kinds or `PLURAL[/NAME[/SUBRESOURCE]]` for cluster-scoped ones.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::access;
use crate::authn;
use crate::body::ResponseBody;
use crate::connections::{self, Connections, InFlight};
use crate::errors::ApiError;
use crate::fault_door;
use crate::faults::Faults;
use crate::handlers::{classify, parse_object_body, read_body, serve_resource, Target};
use crate::metrics;
use crate::rbac::Attributes;
use crate::resources::{GIT_VERSION, METRICS_GROUP, METRICS_VERSION};
use crate::responses::{
    aggregated_response, error_response, injected_response, json_response, openapi_v2_response,
    text_response,
};
use crate::state::{RequestRecord, Shared};
use crate::sync::lock;

/// Accept connections until shutdown, then give open ones a moment to finish.
pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut outages = shared.outage.subscribe();
    let mut listener = Some(listener);
    let mut connections = tokio::task::JoinSet::new();
    // Every connection is a file descriptor: take what the system allows, and keep the cap on
    // open connections within it. At the cap, idle connections make room (connections.rs).
    let open_files = connections::raise_open_file_limit();
    let max_connections =
        connections::connections_within(shared.options.max_connections, open_files);
    tracing::debug!(?open_files, max_connections, "connection limits");
    let slots = Connections::new(max_connections);
    let mut failed_accepts: u32 = 0;
    // The loop ends on shutdown, or if the port cannot be bound again after an outage.
    while let Some(accepting) = listener.as_ref() {
        tokio::select! {
            accepted = accepting.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if failed_accepts > 0 {
                        tracing::info!(failed_accepts, "accepting connections again");
                        failed_accepts = 0;
                    }
                    // Here, not in the select above: accept() is cancel-safe, but a stream
                    // waiting for its slot would be dropped (closed) when another branch won.
                    let slot = tokio::select! {
                        slot = slots.slot() => slot,
                        _ = shared.shutdown.cancelled() => break,
                    };
                    let shared = shared.clone();
                    connections.spawn(async move {
                        tokio::select! {
                            _ = serve_connection(stream, shared, slot.activity.clone()) => {}
                            _ = slot.close.cancelled() => {}
                        }
                        drop(slot);
                    });
                }
                Err(error) => {
                    // Out of file descriptors and similar: back off (10 ms, doubling up to
                    // 1 s) instead of spinning, and log once per streak, not every time.
                    if failed_accepts == 0 {
                        tracing::warn!(%error, "accept failed; backing off until it works again");
                    }
                    failed_accepts = failed_accepts.saturating_add(1);
                    let backoff = Duration::from_millis(10 << failed_accepts.min(7))
                        .min(Duration::from_secs(1));
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shared.shutdown.cancelled() => break,
                    }
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            changed = outages.changed() => {
                if changed.is_err() {
                    continue;
                }
                let downtime = outages.borrow_and_update().1;
                // A simulated restart: close the port and every connection, keep the store.
                listener = None;
                connections.abort_all();
                tracing::info!(?downtime, "fault: API server offline");
                tokio::select! {
                    _ = tokio::time::sleep(downtime) => {}
                    _ = shared.shutdown.cancelled() => break,
                }
                match tokio::net::TcpListener::bind(shared.addr).await {
                    Ok(rebound) => listener = Some(rebound),
                    Err(error) => tracing::warn!(%error, "could not listen again after the outage"),
                }
                tracing::info!("fault: API server back online");
            }
            _ = shared.shutdown.cancelled() => break,
        }
    }
    drop(listener);
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        connections.abort_all();
    }
    tracing::info!("sandbox API server stopped");
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    shared: Arc<Shared>,
    activity: Arc<connections::Activity>,
) {
    let _ = stream.set_nodelay(true);
    // With credentials (the binary's default) every connection is TLS. Without them
    // (`--insecure-http`, tests) kubectl speaks plain HTTP, but in-cluster clients always speak
    // HTTPS to the API server: a TLS connection opens with a handshake record, whose first byte
    // is 0x16; an HTTP request starts with a method name in ASCII.
    let tls = if shared.security.is_some() {
        true
    } else {
        let mut first = [0u8; 1];
        match tokio::time::timeout(shared.options.header_read_timeout, stream.peek(&mut first))
            .await
        {
            Ok(Ok(1)) => first[0] == 0x16,
            Ok(_) => return,
            Err(_) => {
                tracing::debug!("no request within the header timeout");
                return;
            }
        }
    };
    if tls {
        let acceptor = tokio_rustls::TlsAcceptor::from(shared.certificates.tls_config.clone());
        match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
            Ok(Ok(tls)) => serve_http(TokioIo::new(tls), shared, activity).await,
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!("TLS handshake timed out"),
        }
    } else {
        serve_http(TokioIo::new(stream), shared, activity).await
    }
}

async fn serve_http<I>(io: I, shared: Arc<Shared>, activity: Arc<connections::Activity>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let shutdown = shared.shutdown.clone();
    let header_read_timeout = shared.options.header_read_timeout;
    let service = service_fn(move |request| {
        let shared = shared.clone();
        // The connection counts as busy until the whole body is sent: a watch's stream too.
        let in_flight = InFlight::start(&activity);
        async move {
            let response = handle_isolated(shared, request).await;
            Ok::<_, Infallible>(response.map(|body| {
                body.map_frame(move |frame| {
                    let _busy = &in_flight;
                    frame
                })
            }))
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that opens a connection and sends half a request head would otherwise hold
        // it (and a file descriptor) for ever.
        .header_read_timeout(header_read_timeout)
        .serve_connection(io, service)
        // `kubectl exec` upgrades its connection to a WebSocket (remotecommand.rs).
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
        }
    }
}

/// Answer one request on its own task, so a panic in a handler costs that request a 500 and
/// nothing else (the task's panic is caught by tokio, and every lock recovers from poisoning).
async fn handle_isolated(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Response<ResponseBody> {
    match tokio::spawn(handle(shared, request)).await {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%error, "a request handler panicked; answering 500");
            error_response(&ApiError::internal(
                "the sandbox failed while answering this request (a bug: please report it)",
            ))
        }
    }
}

async fn handle(shared: Arc<Shared>, request: Request<Incoming>) -> Response<ResponseBody> {
    let started = Instant::now();
    let path_and_query = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let method = request.method().clone();
    let mut record = RequestRecord {
        method: method.to_string(),
        verb: method.as_str().to_lowercase(),
        resource: String::new(),
        subresource: String::new(),
        namespace: String::new(),
        name: String::new(),
        code: 0,
        path: path_and_query.clone(),
        user_agent: request
            .headers()
            .get(header::USER_AGENT)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_string(),
        user: String::new(),
        pod: String::new(),
        received: std::time::SystemTime::now(),
    };
    // A frozen server (`Faults::freeze`) answers nothing until it runs again.
    tokio::select! {
        () = crate::sync::thawed(&shared.frozen) => {}
        () = shared.shutdown.cancelled() => {}
    }
    let response = match answer(&shared, request, &mut record).await {
        Ok(response) => response,
        Err(error) => error_response(&error),
    };
    record.code = response.status().as_u16();
    if shared.options.log_requests {
        tracing::info!(
            method = %method,
            path = %path_and_query,
            status = record.code,
            ms = started.elapsed().as_millis() as u64,
            "request"
        );
    }
    shared.record(record);
    response
}

async fn answer(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    record: &mut RequestRecord,
) -> Result<Response<ResponseBody>, ApiError> {
    let path = request.uri().path().to_string();
    check_host_and_origin(shared.addr, request.headers())?;
    let query: HashMap<String, String> =
        url::form_urlencoded::parse(request.uri().query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let method = request.method().clone();
    let read_only = |response: Response<ResponseBody>| {
        if method == Method::GET || method == Method::HEAD {
            Ok(response)
        } else {
            Err(ApiError::method_not_allowed())
        }
    };
    let registry = shared.store.lock().registry.clone();
    // Classified before authentication, so even a refused request is logged with its verb.
    classify(&registry, &method, &segments, &query, record);
    let caller = authn::authenticate(shared, request.headers(), &path)?;
    record.user = caller.user.name.clone();
    record.pod = caller.pod.clone();
    let attributes = Attributes::from_request(request.method().as_str(), &path, &query);
    authn::authorize(shared, &caller.user, &attributes)?;
    // `kubectl exec` opens a WebSocket with GET; since Kubernetes 1.35
    // (AuthorizePodWebsocketUpgradeCreatePermission) it needs `create` as well, as the SPDY
    // POST always did.
    let websocket = request
        .headers()
        .get(header::UPGRADE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h.eq_ignore_ascii_case("websocket"));
    if websocket
        && attributes.verb == "get"
        && attributes.resource == "pods"
        && matches!(
            attributes.subresource.as_str(),
            "exec" | "attach" | "portforward"
        )
    {
        let create = Attributes {
            verb: "create".into(),
            ..attributes.clone()
        };
        authn::authorize(shared, &caller.user, &create)?;
    }
    let injected = lock(&shared.faults).take_failure(&record.path);
    if let Some(fault) = injected {
        return Ok(injected_response(fault));
    }
    match segments.as_slice() {
        ["version"] => read_only(json_response(200, &version_document())),
        ["healthz"] | ["livez"] | ["readyz"] => read_only(text_response(200, "ok")),
        ["api"] => {
            if wants_aggregated(&accept) {
                read_only(aggregated_response(&registry.aggregated(true)))
            } else {
                read_only(json_response(
                    200,
                    &registry.core_versions(&shared.addr.to_string()),
                ))
            }
        }
        ["apis"] => {
            if wants_aggregated(&accept) {
                read_only(aggregated_response(&registry.aggregated(false)))
            } else {
                read_only(json_response(200, &registry.group_list()))
            }
        }
        ["api", "v1"] => match registry.resource_list("", "v1") {
            Some(doc) => read_only(json_response(200, &doc)),
            None => Err(ApiError::path_not_found()),
        },
        ["apis", group] => match registry.group(group) {
            Some(doc) => read_only(json_response(200, &doc)),
            None => Err(ApiError::path_not_found()),
        },
        ["apis", group, version] => match registry.resource_list(group, version) {
            Some(doc) => read_only(json_response(200, &doc)),
            None => Err(ApiError::path_not_found()),
        },
        ["openapi", "v2"] => read_only(openapi_v2_response(GIT_VERSION)),
        ["openapi", "v3"] => read_only(json_response(200, &registry.openapi_index())),
        ["openapi", "v3", "api", "v1"] => match registry.openapi_document("", "v1") {
            Some(doc) => read_only(json_response(200, &doc)),
            None => Err(ApiError::path_not_found()),
        },
        ["openapi", "v3", "apis", group, version] => {
            match registry.openapi_document(group, version) {
                Some(doc) => read_only(json_response(200, &doc)),
                None => Err(ApiError::path_not_found()),
            }
        }
        ["apis", "authorization.k8s.io", "v1", kind] if method == Method::POST => {
            let (parts, body) = read_body(request).await?;
            let asked = parse_object_body(&parts, &body)?;
            let policies = authn::policies(shared);
            match access::review(kind, &asked, &caller.user, &policies) {
                Some(review) => Ok(json_response(201, &review)),
                None => Err(ApiError::path_not_found()),
            }
        }
        // kubectl auth whoami: the review carries no input (its status is the answer), so the
        // body (protobuf from kubectl) is read and not decoded.
        ["apis", "authentication.k8s.io", "v1", "selfsubjectreviews"] if method == Method::POST => {
            read_body(request).await?;
            Ok(json_response(
                201,
                &access::self_subject_review(&caller.user),
            ))
        }
        ["apis", METRICS_GROUP, METRICS_VERSION, rest @ ..] => {
            read_only(json_response(200, &metrics::answer(shared, rest, &query)?))
        }
        ["sandbox", "faults", rest @ ..] => {
            let faults = Faults::new(shared.clone());
            let done = fault_door::answer(&faults, &method, rest, &query)?;
            Ok(json_response(200, &done))
        }
        ["api", "v1", rest @ ..] => {
            let target = Target::parse(&registry, "", "v1", rest)?;
            serve_resource(shared, request, target, query, &accept, &caller.user).await
        }
        ["apis", group, version, rest @ ..] => {
            let target = Target::parse(&registry, group, version, rest)?;
            serve_resource(shared, request, target, query, &accept, &caller.user).await
        }
        _ => Err(ApiError::path_not_found()),
    }
}

/// Refuse a request whose Host is not this server's address, or whose Origin is another site.
///
/// A web page the learner has open can make the browser send requests to
/// `http://127.0.0.1:8001`; with DNS rebinding, a name the attacker controls first points at
/// their server, then at 127.0.0.1, so the browser thinks it is same-origin. Either way the
/// browser sends the attacker's name as Host, or the page's origin as Origin. Clients such as
/// kubectl send Host as given in `--server` and no Origin. A request with no Host (HTTP/1.0)
/// is let through: every browser sends one.
fn check_host_and_origin(
    addr: std::net::SocketAddr,
    headers: &http::HeaderMap,
) -> Result<(), ApiError> {
    // Every Host header must be ours (a client sending two could otherwise pick which one counts).
    for host in headers.get_all(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !is_own_authority(addr, host) {
            return Err(ApiError::forbidden_request(format!(
                "Host {host:?} is not this server's address ({addr}); requests through another name are refused (DNS rebinding)"
            )));
        }
    }
    for origin in headers.get_all(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if !authority.is_some_and(|authority| is_own_authority(addr, authority)) {
            return Err(ApiError::forbidden_request(format!(
                "Origin {origin:?} is another site; cross-origin requests are refused"
            )));
        }
    }
    Ok(())
}

/// `127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT` (any loopback name, with this port); when
/// listening on a specific address, that address too; when listening on every address
/// (`0.0.0.0`), any IP address with this port — but never a DNS name other than localhost.
fn is_own_authority(addr: std::net::SocketAddr, authority: &str) -> bool {
    let Some((host, port)) = authority.rsplit_once(':') else {
        return false;
    };
    if port.parse::<u16>().ok() != Some(addr.port()) {
        return false;
    }
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match literal.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback() || ip == addr.ip() || addr.ip().is_unspecified(),
        Err(_) => false,
    }
}

fn version_document() -> Value {
    json!({"major": "1", "minor": "32", "gitVersion": GIT_VERSION,
           "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.8", "compiler": "gc",
           "platform": "linux/amd64"})
}

/// Did the Accept header list aggregated discovery v2 (`g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`)?
fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|range| {
        let params: Vec<String> = range
            .split(';')
            .map(|p| p.trim().replace(' ', ""))
            .collect();
        params.iter().any(|p| p == "g=apidiscovery.k8s.io")
            && params.iter().any(|p| p == "v=v2")
            && params.iter().any(|p| p == "as=APIGroupDiscoveryList")
    })
}
