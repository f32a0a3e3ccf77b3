//! The HTTP side of the sandbox: accept connections (TLS optional), check the bearer token,
//! route each request like kube-apiserver and answer with JSON objects, lists, Tables, Status
//! errors or a watch stream.
//!
//! WORKSHOP.md, "Set-up: the sandbox". URL layout: `/api/v1/...` for the core group,
//! `/apis/GROUP/VERSION/...` for the rest; then `namespaces/NS/PLURAL[/NAME[/SUBRESOURCE]]` for
//! namespaced kinds or `PLURAL[/NAME[/SUBRESOURCE]]` for cluster-scoped ones.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::body::ResponseBody;
use super::controllers;
use super::errors::ApiError;
use super::faults::{FaultSettings, InjectedFault};
use super::lock;
use super::objects::{self, DeleteOptions, FieldValidation, Part, WriteOptions, WriteOutcome};
use super::patch as patching;
use super::random::Xorshift;
use super::resources::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{Filter, Store};
use super::table::{self, IncludeObject};
use super::tls::Security;
use super::watch::{self as watching, WatchParams};
use super::{RequestRecord, SandboxOptions};

/// What `/version` reports. kubectl here is a dispatcher that picks its real binary by `minor`.
pub(crate) const GIT_VERSION: &str = "v1.32.4+sandbox";
/// kube-apiserver refuses request bodies over 3 MiB.
pub(crate) const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// The media type aggregated discovery must be answered with, byte for byte.
const AGGREGATED_DISCOVERY: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
/// Keep the request log bounded in a long-running sandbox.
const MAX_RECORDED_REQUESTS: usize = 100_000;

/// Everything the request handlers share.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) options: SandboxOptions,
    pub(crate) addr: SocketAddr,
    pub(crate) security: Option<Security>,
    pub(crate) faults: Mutex<FaultSettings>,
    pub(crate) requests: Mutex<Vec<RequestRecord>>,
    pub(crate) established_delay: Mutex<Duration>,
    pub(crate) random: Mutex<Xorshift>,
    /// Bumped by `Faults::end_all_watches_now`: every open watch ends.
    pub(crate) watch_epoch: watch::Sender<u64>,
    pub(crate) shutdown: watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn new(
        options: SandboxOptions,
        addr: SocketAddr,
        security: Option<Security>,
    ) -> Arc<Shared> {
        let store = Store::new(options.history_window, options.watch_queue_capacity);
        let mut random = Xorshift::from_entropy();
        {
            let mut state = store.lock();
            // The namespaces every cluster starts with.
            for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
                state.commit_added(
                    "/namespaces",
                    objects::initial_namespace(name, random.uuid()),
                );
            }
        }
        Arc::new(Shared {
            store,
            established_delay: Mutex::new(options.established_delay),
            options,
            addr,
            security,
            faults: Mutex::new(FaultSettings::default()),
            requests: Mutex::new(Vec::new()),
            random: Mutex::new(random),
            watch_epoch: watch::channel(0).0,
            shutdown: watch::channel(false).0,
        })
    }

    pub(crate) fn begin_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

/// Accept connections until shutdown, then give open ones a moment to finish.
pub(crate) async fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(serve_connection(stream, shared.clone()));
                }
                Err(error) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = super::stopping(&mut shutdown) => break,
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

async fn serve_connection(stream: tokio::net::TcpStream, shared: Arc<Shared>) {
    let _ = stream.set_nodelay(true);
    match &shared.security {
        Some(security) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(security.tls_config.clone());
            match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_http(TokioIo::new(tls), shared).await,
                Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
                Err(_) => tracing::debug!("TLS handshake timed out"),
            }
        }
        None => serve_http(TokioIo::new(stream), shared).await,
    }
}

async fn serve_http<I>(io: I, shared: Arc<Shared>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut shutdown = shared.shutdown.subscribe();
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, request).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30))
        .serve_connection(io, service);
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = super::stopping(&mut shutdown) => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), connection).await;
        }
    }
}

/// Paths anonymous clients may read, as kube-apiserver's `system:public-info-viewer` allows.
fn is_public(path: &str) -> bool {
    matches!(path, "/version" | "/healthz" | "/livez" | "/readyz")
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
    };
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
    let mut requests = lock(&shared.requests);
    if requests.len() >= MAX_RECORDED_REQUESTS {
        requests.drain(..MAX_RECORDED_REQUESTS / 2);
    }
    requests.push(record);
    response
}

async fn answer(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    record: &mut RequestRecord,
) -> Result<Response<ResponseBody>, ApiError> {
    let path = request.uri().path().to_string();
    if let Some(security) = &shared.security {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok());
        // A wrong token is refused everywhere; no token at all is "anonymous", which may still
        // read the public paths.
        let anonymous_ok = authorization.is_none() && is_public(&path);
        if !anonymous_ok && !security.accepts(authorization) {
            return Err(ApiError::unauthorized());
        }
    }
    let injected = lock(&shared.faults).take_failure(&record.path);
    if let Some(fault) = injected {
        return Ok(injected_response(fault));
    }

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
        // kubectl asks for v2 only as protobuf; a 404 makes it carry on without it.
        ["openapi", "v2"] => Err(ApiError::path_not_found()),
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
        ["api", "v1", rest @ ..] => {
            let target = Target::parse(&registry, "", "v1", rest)?;
            serve_resource(shared, request, target, query, &accept, record).await
        }
        ["apis", group, version, rest @ ..] => {
            let target = Target::parse(&registry, group, version, rest)?;
            serve_resource(shared, request, target, query, &accept, record).await
        }
        _ => Err(ApiError::path_not_found()),
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

/// The resource a URL names.
struct Target {
    resource: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    fn parse(
        registry: &super::resources::Registry,
        group: &str,
        version: &str,
        rest: &[&str],
    ) -> Result<Target, ApiError> {
        let namespaced_plural = |plural: &str| {
            registry
                .find(group, version, plural)
                .is_some_and(|r| r.namespaced)
        };
        let (namespace, rest) = match rest {
            ["namespaces", namespace, plural, ..] if namespaced_plural(plural) => {
                (Some(namespace.to_string()), &rest[2..])
            }
            _ => (None, rest),
        };
        let (plural, name, subresource) = match rest {
            [plural] => (*plural, None, None),
            [plural, name] => (*plural, Some(name.to_string()), None),
            [plural, name, sub] => (*plural, Some(name.to_string()), Some(sub.to_string())),
            _ => return Err(ApiError::path_not_found()),
        };
        let resource = registry
            .find(group, version, plural)
            .cloned()
            .ok_or_else(ApiError::path_not_found)?;
        // A namespaced object is only reachable through its namespace.
        if resource.namespaced && namespace.is_none() && name.is_some() {
            return Err(ApiError::path_not_found());
        }
        if let Some(sub) = &subresource {
            let known = match sub.as_str() {
                "status" => resource.status_subresource,
                "scale" => resource.scale.is_some(),
                "log" => resource.group.is_empty() && resource.plural == "pods",
                _ => false,
            };
            if !known {
                return Err(ApiError::path_not_found());
            }
        }
        Ok(Target {
            resource,
            namespace,
            name,
            subresource,
        })
    }
}

async fn read_body(request: Request<Incoming>) -> Result<(http::request::Parts, Bytes), ApiError> {
    let (parts, body) = request.into_parts();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY_BYTES) {
        return Err(ApiError::too_large(MAX_BODY_BYTES));
    }
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok((parts, collected.to_bytes())),
        Err(error) => {
            if error.is::<http_body_util::LengthLimitError>() {
                Err(ApiError::too_large(MAX_BODY_BYTES))
            } else {
                Err(ApiError::bad_request(format!(
                    "reading the request body failed: {error}"
                )))
            }
        }
    }
}

fn content_type(parts: &http::request::Parts) -> String {
    parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .map(|h| {
            h.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_lowercase()
        })
        .unwrap_or_default()
}

/// POST/PUT bodies must be JSON (no Content-Type is read as JSON, as for kubectl's scale PUT).
fn parse_json_body(parts: &http::request::Parts, body: &[u8]) -> Result<Value, ApiError> {
    let kind = content_type(parts);
    if !(kind.is_empty() || kind == "application/json" || kind == "*/*") {
        return Err(ApiError::unsupported_media_type(
            &kind,
            &["application/json"],
        ));
    }
    serde_json::from_slice(body).map_err(|error| {
        ApiError::bad_request(format!(
            "couldn't get version/kind; json parse error: {error}"
        ))
    })
}

fn write_options<'a>(
    query: &HashMap<String, String>,
    random: &'a mut Xorshift,
) -> Result<WriteOptions<'a>, ApiError> {
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "dryRun: Unsupported value: {other:?}: supported values: \"All\""
            )))
        }
    };
    Ok(WriteOptions {
        field_validation: FieldValidation::from_query(
            query.get("fieldValidation").map(String::as_str),
        )?,
        dry_run,
        random,
    })
}

async fn serve_resource(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    target: Target,
    query: HashMap<String, String>,
    accept: &str,
    record: &mut RequestRecord,
) -> Result<Response<ResponseBody>, ApiError> {
    let resource = target.resource.clone();
    record.resource = resource.plural.clone();
    record.subresource = target.subresource.clone().unwrap_or_default();
    record.namespace = target.namespace.clone().unwrap_or_default();
    record.name = target.name.clone().unwrap_or_default();
    let namespace = target.namespace.clone().unwrap_or_default();
    let method = request.method().clone();
    let table = table::wants_table(accept)
        .then(|| IncludeObject::from_query(query.get("includeObject").map(String::as_str)));
    let watch_requested = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));

    match (
        &method,
        target.name.as_deref(),
        target.subresource.as_deref(),
    ) {
        (&Method::GET, None, None) if watch_requested => {
            record.verb = "watch".into();
            let params = WatchParams {
                filter: filter_for(&resource, target.namespace.clone(), &query)?,
                resource,
                resource_version: query.get("resourceVersion").cloned(),
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .map(Duration::from_secs),
                bookmarks: query.get("allowWatchBookmarks").map(String::as_str) == Some("true"),
                table,
            };
            let body = watching::start(shared, params)?;
            Ok(Response::builder()
                .status(200)
                .header(header::CONTENT_TYPE, "application/json")
                .body(body)
                .unwrap_or_else(|_| Response::new(ResponseBody::empty())))
        }
        (&Method::GET, None, None) => {
            record.verb = "list".into();
            let filter = filter_for(&resource, target.namespace.clone(), &query)?;
            list(shared, &resource, &filter, &query, table)
        }
        (&Method::GET, Some(name), sub) => {
            record.verb = "get".into();
            let object = shared
                .store
                .lock()
                .get(&resource.store_key(), &namespace, name)
                .ok_or_else(|| ApiError::not_found(&resource, name))?;
            match sub {
                Some("scale") => Ok(json_response(200, &scale_of(&resource, &object))),
                Some("log") => Ok(text_response(200, &pod_log(&object, &query))),
                _ => Ok(object_response(200, &resource, &object, table, &[])),
            }
        }
        (&Method::POST, None, None) => {
            record.verb = "create".into();
            if resource.namespaced && target.namespace.is_none() {
                return Err(ApiError::path_not_found());
            }
            let (parts, body) = read_body(request).await?;
            let body = parse_json_body(&parts, &body)?;
            let outcome = {
                let mut state = shared.store.lock();
                let mut random = lock(&shared.random);
                let options = write_options(&query, &mut random)?;
                objects::create(
                    &mut state,
                    &resource,
                    target.namespace.as_deref(),
                    body,
                    options,
                )?
            };
            Ok(finish_write(shared, &resource, outcome, table))
        }
        (&Method::PUT, Some(name), sub) => {
            record.verb = "update".into();
            let (parts, body) = read_body(request).await?;
            let body = parse_json_body(&parts, &body)?;
            let outcome = {
                let mut state = shared.store.lock();
                let old = state
                    .get(&resource.store_key(), &namespace, name)
                    .ok_or_else(|| ApiError::not_found(&resource, name))?;
                let mut random = lock(&shared.random);
                let options = write_options(&query, &mut random)?;
                match sub {
                    Some("scale") => {
                        let outcome = write_scale(&mut state, &resource, &old, body, options)?;
                        return Ok(json_response(200, &scale_of(&resource, &outcome.object)));
                    }
                    Some("status") => {
                        objects::update(&mut state, &resource, &old, body, Part::Status, options)?
                    }
                    _ => objects::update(&mut state, &resource, &old, body, Part::Main, options)?,
                }
            };
            Ok(finish_write(shared, &resource, outcome, table))
        }
        (&Method::PATCH, Some(name), sub) => {
            record.verb = "patch".into();
            let (parts, body) = read_body(request).await?;
            let patch_type = content_type(&parts);
            patch(
                shared,
                &resource,
                &namespace,
                name,
                sub,
                &patch_type,
                &body,
                &query,
                table,
            )
        }
        (&Method::DELETE, Some(name), None) => {
            record.verb = "delete".into();
            let (_, body) = read_body(request).await?;
            let options = DeleteOptions::from_body(&body)?;
            let dry_run = query.get("dryRun").map(String::as_str) == Some("All");
            let object = {
                let mut state = shared.store.lock();
                objects::delete(&mut state, &resource, &namespace, name, &options, dry_run)?
            };
            Ok(object_response(200, &resource, &object, None, &[]))
        }
        (&Method::DELETE, None, None) => {
            record.verb = "deletecollection".into();
            let (_, body) = read_body(request).await?;
            let options = DeleteOptions::from_body(&body)?;
            let filter = filter_for(&resource, target.namespace.clone(), &query)?;
            let mut state = shared.store.lock();
            let doomed: Vec<Arc<Value>> = state
                .list(&resource.store_key(), filter.namespace.as_deref())
                .into_iter()
                .filter(|o| filter.matches(o))
                .collect();
            let mut items = Vec::new();
            for object in doomed {
                let ns = object["metadata"]["namespace"].as_str().unwrap_or_default();
                let name = object["metadata"]["name"].as_str().unwrap_or_default();
                if let Ok(deleted) =
                    objects::delete(&mut state, &resource, ns, name, &options, false)
                {
                    items.push((*deleted).clone());
                }
            }
            let list = json!({"kind": resource.list_kind(), "apiVersion": resource.api_version(),
                              "metadata": {"resourceVersion": state.revision().to_string()},
                              "items": items});
            Ok(json_response(200, &list))
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

fn filter_for(
    resource: &ResourceType,
    namespace: Option<String>,
    query: &HashMap<String, String>,
) -> Result<Filter, ApiError> {
    let non_empty = |key: &str| query.get(key).filter(|v| !v.trim().is_empty()).cloned();
    let label_selector = match non_empty("labelSelector") {
        Some(text) => Some(
            LabelSelector::parse(&text)
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
        ),
        None => None,
    };
    let field_selector = match non_empty("fieldSelector") {
        Some(text) => Some(
            FieldSelector::parse(&text)
                .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?,
        ),
        None => None,
    };
    Ok(Filter {
        store_key: resource.store_key(),
        namespace,
        label_selector,
        field_selector,
    })
}

/// LIST, with `limit`/`continue` paging: the continue token is the last (namespace, name) sent.
fn list(
    shared: &Arc<Shared>,
    resource: &ResourceType,
    filter: &Filter,
    query: &HashMap<String, String>,
    table: Option<IncludeObject>,
) -> Result<Response<ResponseBody>, ApiError> {
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let after = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let decoded =
                base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, token)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(
                    "continue: Invalid value: the continue token is not one this server issued",
                )
                    })?;
            Some(decoded)
        }
        None => None,
    };
    let state = shared.store.lock();
    let revision = state.revision().to_string();
    let key_of = |o: &Value| {
        format!(
            "{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        )
    };
    let mut matching: Vec<Arc<Value>> = state
        .list(&resource.store_key(), filter.namespace.as_deref())
        .into_iter()
        .filter(|o| filter.matches(o))
        .filter(|o| after.as_ref().is_none_or(|a| key_of(o) > *a))
        .collect();
    drop(state);
    let mut metadata = json!({ "resourceVersion": revision });
    if let Some(limit) = limit {
        if matching.len() > limit {
            let remaining = matching.len() - limit;
            matching.truncate(limit);
            if let Some(last) = matching.last() {
                metadata["continue"] = json!(base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    key_of(last)
                ));
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
    }
    if let Some(include) = table {
        let objects: Vec<&Value> = matching.iter().map(|o| &**o).collect();
        let mut doc = table::table(resource, &objects, &revision, include, true);
        doc["metadata"] = metadata;
        return Ok(json_response(200, &doc));
    }
    let items: Vec<&Value> = matching.iter().map(|o| &**o).collect();
    let doc = json!({"kind": resource.list_kind(), "apiVersion": resource.api_version(),
                     "metadata": metadata, "items": items});
    Ok(json_response(200, &doc))
}

#[allow(clippy::too_many_arguments)]
fn patch(
    shared: &Arc<Shared>,
    resource: &ResourceType,
    namespace: &str,
    name: &str,
    subresource: Option<&str>,
    patch_type: &str,
    body: &[u8],
    query: &HashMap<String, String>,
    table: Option<IncludeObject>,
) -> Result<Response<ResponseBody>, ApiError> {
    const ACCEPTED: &[&str] = &[
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ];
    let is_apply = patch_type == "application/apply-patch+yaml";
    match patch_type {
        "application/json-patch+json" | "application/merge-patch+json" => {}
        "application/apply-patch+yaml" => {}
        // Strategic merge needs patch directives compiled into the kind: built-ins only.
        "application/strategic-merge-patch+json" if !resource.custom => {}
        other => return Err(ApiError::unsupported_media_type(other, ACCEPTED)),
    }
    let document: Value = serde_json::from_slice(body).map_err(|error| {
        if is_apply {
            ApiError::unsupported_media_type(
                "application/apply-patch+yaml (YAML)",
                &["application/apply-patch+yaml with a JSON body"],
            )
        } else {
            ApiError::bad_request(format!("error decoding patch: {error}"))
        }
    })?;
    let mut state = shared.store.lock();
    let mut random = lock(&shared.random);
    let options = write_options(query, &mut random)?;
    let old = match state.get(&resource.store_key(), namespace, name) {
        Some(old) => old,
        None if is_apply && subresource.is_none() => {
            // Server-side apply of an object that does not exist yet creates it.
            let mut document = document;
            if !document["metadata"].is_object() {
                document["metadata"] = json!({});
            }
            document["metadata"]["name"] = json!(name);
            let ns = resource.namespaced.then_some(namespace);
            let outcome = objects::create(&mut state, resource, ns, document, options)?;
            drop(random);
            drop(state);
            return Ok(finish_write(shared, resource, outcome, table));
        }
        None => return Err(ApiError::not_found(resource, name)),
    };
    let base = match subresource {
        Some("scale") => scale_of(resource, &old),
        _ => (*old).clone(),
    };
    let patched = apply_patch(patch_type, base, &document)?;
    let outcome = match subresource {
        Some("scale") => {
            let outcome = write_scale(&mut state, resource, &old, patched, options)?;
            return Ok(json_response(200, &scale_of(resource, &outcome.object)));
        }
        Some("status") => {
            objects::update(&mut state, resource, &old, patched, Part::Status, options)?
        }
        _ => objects::update(&mut state, resource, &old, patched, Part::Main, options)?,
    };
    drop(random);
    drop(state);
    Ok(finish_write(shared, resource, outcome, table))
}

fn apply_patch(patch_type: &str, mut base: Value, document: &Value) -> Result<Value, ApiError> {
    match patch_type {
        "application/json-patch+json" => {
            patching::json_patch(&mut base, document).map_err(|e| {
                // kube-apiserver answers a failed operation (a `test`, a missing path) with 422.
                ApiError::from(crate::status::Status::failure(
                    422,
                    "Invalid",
                    e.to_string(),
                ))
            })?;
            Ok(base)
        }
        "application/strategic-merge-patch+json" => {
            patching::strategic_merge_patch(&mut base, document)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            Ok(base)
        }
        _ => {
            // Merge patch (RFC 7386); server-side apply is served as a merge of the applied
            // configuration (no field ownership is tracked).
            if !document.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            patching::merge_patch(&mut base, document);
            Ok(base)
        }
    }
}

/// `autoscaling/v1` Scale built from the CRD's specReplicasPath/statusReplicasPath.
fn scale_of(resource: &ResourceType, object: &Value) -> Value {
    let paths = resource
        .scale
        .clone()
        .unwrap_or(super::resources::ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: None,
            label_selector: None,
        });
    let metadata = &object["metadata"];
    let spec_replicas = objects::read_path(object, &paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = paths
        .status_replicas
        .as_deref()
        .and_then(|p| objects::read_path(object, p))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut status = json!({ "replicas": status_replicas });
    if let Some(selector) = paths
        .label_selector
        .as_deref()
        .and_then(|p| objects::read_path(object, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": metadata["name"], "namespace": metadata["namespace"],
                     "uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"],
                     "creationTimestamp": metadata["creationTimestamp"]},
        "spec": {"replicas": spec_replicas},
        "status": status
    })
}

/// PUT/PATCH of `/scale`: only `spec.replicas` is taken, written to the CRD's specReplicasPath.
fn write_scale(
    state: &mut super::store::StoreState,
    resource: &ResourceType,
    old: &Arc<Value>,
    scale: Value,
    options: WriteOptions<'_>,
) -> Result<WriteOutcome, ApiError> {
    let name = old["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(kind) = scale["kind"].as_str() {
        if kind != "Scale" {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({kind}) does not match Scale"
            )));
        }
    }
    match scale["metadata"]["resourceVersion"].as_str() {
        Some(rv) if !rv.is_empty() && Some(rv) != old["metadata"]["resourceVersion"].as_str() => {
            return Err(ApiError::stale_resource_version(resource, &name));
        }
        _ => {}
    }
    let replicas = match scale["spec"]["replicas"].as_i64() {
        Some(r) if r >= 0 => r,
        _ => {
            let scale_kind = ResourceType {
                group: "autoscaling".into(),
                kind: "Scale".into(),
                ..resource.clone()
            };
            return Err(ApiError::invalid_field(
                &scale_kind,
                &name,
                "FieldValueInvalid",
                "spec.replicas",
                format!(
                    "Invalid value: {}: must be greater than or equal to 0",
                    scale["spec"]["replicas"]
                ),
            ));
        }
    };
    let Some(paths) = &resource.scale else {
        return Err(ApiError::path_not_found());
    };
    let mut next = (**old).clone();
    objects::write_path(&mut next, &paths.spec_replicas, json!(replicas));
    objects::update(state, resource, old, next, Part::Main, options)
}

fn pod_log(pod: &Value, query: &HashMap<String, String>) -> String {
    let container = query.get("container").cloned().unwrap_or_else(|| {
        pod["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    });
    let image = pod["spec"]["containers"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == container.as_str()))
        .and_then(|c| c["image"].as_str())
        .unwrap_or("?");
    format!(
        "sandbox: no container runs here; pod {} container {container} (image {image}) is simulated\n",
        pod["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// After a write: start follow-up timers, then answer with the object (or its Table row).
fn finish_write(
    shared: &Arc<Shared>,
    resource: &ResourceType,
    outcome: WriteOutcome,
    table: Option<IncludeObject>,
) -> Response<ResponseBody> {
    controllers::spawn_follow_ups(shared, outcome.follow_ups);
    object_response(
        outcome.code,
        resource,
        &outcome.object,
        table,
        &outcome.warnings,
    )
}

fn object_response(
    code: u16,
    resource: &ResourceType,
    object: &Value,
    table: Option<IncludeObject>,
    warnings: &[String],
) -> Response<ResponseBody> {
    let mut response = match table {
        Some(include) => {
            let rv = object["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            json_response(code, &table::table(resource, &[object], rv, include, true))
        }
        None => json_response(code, object),
    };
    for warning in warnings {
        // kubectl prints `Warning: 299 - "text"` headers as `Warning: text`.
        let text = format!(
            "299 - \"{}\"",
            warning.replace('\\', "\\\\").replace('"', "\\\"")
        );
        if let Ok(value) = HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

fn json_response(code: u16, value: &Value) -> Response<ResponseBody> {
    let body = serde_json::to_vec(value).unwrap_or_default();
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(ResponseBody::full(body))
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

fn aggregated_response(value: &Value) -> Response<ResponseBody> {
    let mut response = json_response(200, value);
    // kubectl reads the body as aggregated discovery only if the Content-Type says so.
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(AGGREGATED_DISCOVERY),
    );
    response
}

fn text_response(code: u16, text: &str) -> Response<ResponseBody> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
        .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
        .body(ResponseBody::full(text.to_string()))
        .unwrap_or_else(|_| Response::new(ResponseBody::empty()))
}

fn error_response(error: &ApiError) -> Response<ResponseBody> {
    let mut status = (*error.status).clone();
    if let Some(seconds) = error.retry_after {
        status
            .details
            .get_or_insert_with(Default::default)
            .retry_after_seconds = Some(seconds);
    }
    let mut value = serde_json::to_value(&status).unwrap_or_default();
    // The real Status always carries an (empty) metadata object.
    value["metadata"] = json!({});
    let mut response = json_response(error.code(), &value);
    if let Some(seconds) = error.retry_after {
        if let Ok(v) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    response
}

fn injected_response(fault: InjectedFault) -> Response<ResponseBody> {
    match fault {
        InjectedFault::Status {
            code,
            reason,
            retry_after_seconds,
        } => {
            let reason = if reason.is_empty() {
                default_reason(code).to_string()
            } else {
                reason
            };
            let mut status =
                crate::status::Status::failure(code, &reason, format!("injected fault: {reason}"));
            if retry_after_seconds.is_some() {
                status.details = Some(crate::status::StatusDetails {
                    retry_after_seconds,
                    ..Default::default()
                });
            }
            error_response(&ApiError::from(status))
        }
        InjectedFault::NonJson { code, body } => Response::builder()
            .status(StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY))
            .header(header::CONTENT_TYPE, "text/html")
            .body(ResponseBody::full(body))
            .unwrap_or_else(|_| Response::new(ResponseBody::empty())),
        InjectedFault::EmptyOk => Response::builder()
            .status(200)
            .header(header::CONNECTION, "close")
            .header(header::CONTENT_TYPE, "application/json")
            .body(ResponseBody::empty())
            .unwrap_or_else(|_| Response::new(ResponseBody::empty())),
    }
}

fn default_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}
