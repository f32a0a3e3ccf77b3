//! The resource handlers: what each verb does to `/api/v1/...` and `/apis/G/V/...` URLs —
//! get, list, watch, create, update, patch, delete, deletecollection, and the `status`,
//! `scale` and `log` subresources. Everything here runs after routing and authentication.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A write is built and validated outside the store lock
//! (patches applied, schemas and `pattern`s checked), then committed under it in one atomic
//! step if the object it started from is still the stored one — else built again (see
//! `objects.rs`). Nothing here awaits while holding the lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::authn;
use crate::body::ResponseBody;
use crate::controllers;
use crate::errors::ApiError;
use crate::objects::{
    self, Committed, DeleteOptions, FieldValidation, Part, Prepared, WriteOptions, WriteOutcome,
};
use crate::patch as patching;
use crate::protobuf;
use crate::random::Xorshift;
use crate::rbac::UserInfo;
use crate::remotecommand;
use crate::resources::{Registry, ResourceType, ScalePaths};
use crate::responses::{json_response, object_response, text_response};
use crate::schema;
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::{RequestRecord, Shared};
use crate::status::Status;
use crate::store::Filter;
use crate::sync::lock;
use crate::table::{self, IncludeObject};
use crate::tokens::{self, TokenClaims};
use crate::watch::{self as watching, WatchParams};

/// kube-apiserver refuses request bodies over 3 MiB.
const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How many times a write is built again when the object changed while it was being built:
/// kube-apiserver's patch handler gives up after 5 conflicts (`maxRetryWhenPatchConflicts`).
const MAX_WRITE_ATTEMPTS: usize = 5;

/// The media types a POST or PUT body may have. kube-apiserver also decodes
/// `application/yaml`; the sandbox has no YAML parser (kubectl sends JSON anyway).
const OBJECT_MEDIA_TYPES: &[&str] = &["application/json", "application/vnd.kubernetes.protobuf"];

/// Fill in the request log's verb, resource, namespace and name (before any fault is injected,
/// so a test can count, say, how many watches a client retried).
pub(crate) fn classify(
    registry: &Registry,
    method: &Method,
    segments: &[&str],
    query: &HashMap<String, String>,
    record: &mut RequestRecord,
) {
    let (group, version, rest) = match segments {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", group, version, rest @ ..] if !rest.is_empty() => (*group, *version, rest),
        _ => return,
    };
    let Ok(target) = Target::parse(registry, group, version, rest) else {
        return;
    };
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (method, target.name.is_some()) {
        (&Method::GET, false) if watch => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) => "get",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        _ => return,
    };
    record.verb = verb.to_string();
    record.resource = target.resource.plural;
    record.subresource = target.subresource.unwrap_or_default();
    record.namespace = target.namespace.unwrap_or_default();
    record.name = target.name.unwrap_or_default();
}

/// The resource a URL names.
pub(crate) struct Target {
    resource: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

impl Target {
    pub(crate) fn parse(
        registry: &Registry,
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
                "log" | "exec" | "portforward" => {
                    resource.group.is_empty() && resource.plural == "pods"
                }
                "token" => resource.group.is_empty() && resource.plural == "serviceaccounts",
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

pub(crate) async fn read_body(
    request: Request<Incoming>,
) -> Result<(http::request::Parts, Bytes), ApiError> {
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

/// A POST or PUT body must say it is JSON or protobuf (415 otherwise).
///
/// kube-apiserver reads a body without Content-Type as JSON, and kubectl relies on it for
/// `scale --current-replicas` (a PUT of the Scale). The sandbox allows that for PUT only: a
/// web page can make the browser POST a body without one cross-origin with no CORS preflight,
/// while a PUT is always preflighted (and refused, as no CORS headers are ever sent).
pub(crate) fn require_object_media_type(parts: &http::request::Parts) -> Result<(), ApiError> {
    let kind = content_type(parts);
    let unlabelled_put = kind.is_empty() && parts.method == Method::PUT;
    if OBJECT_MEDIA_TYPES.contains(&kind.as_str()) || unlabelled_put {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(&kind, OBJECT_MEDIA_TYPES))
    }
}

/// POST/PUT bodies are JSON, or the protobuf kubectl's `create namespace|secret|configmap` send.
pub(crate) fn parse_object_body(
    parts: &http::request::Parts,
    body: &[u8],
) -> Result<Value, ApiError> {
    require_object_media_type(parts)?;
    let kind = content_type(parts);
    if kind == "application/vnd.kubernetes.protobuf" {
        return protobuf::decode_object(body).map_err(|problem| {
            ApiError::unsupported_media_type(&format!("{kind}: {problem}"), &["application/json"])
        });
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
    raw_body: Option<&[u8]>,
    shared: &Shared,
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
    let field_validation =
        FieldValidation::from_query(query.get("fieldValidation").map(String::as_str))?;
    let duplicate_fields = match (field_validation, raw_body) {
        (FieldValidation::Ignore, _) | (_, None) => Vec::new(),
        (_, Some(raw)) => schema::duplicate_fields(std::str::from_utf8(raw).unwrap_or_default()),
    };
    Ok(WriteOptions {
        field_validation,
        dry_run,
        random,
        duplicate_fields,
        service_block: shared.node.as_ref().map(|n| n.service_block()),
        volume_root: shared.node.as_ref().map(|n| n.volume_root()),
        pod_ids_restricted: shared.node.as_ref().is_some_and(|n| n.runs_as_root()),
    })
}

pub(crate) async fn serve_resource(
    shared: &Arc<Shared>,
    request: Request<Incoming>,
    target: Target,
    query: HashMap<String, String>,
    accept: &str,
    user: &UserInfo,
) -> Result<Response<ResponseBody>, ApiError> {
    let resource = target.resource.clone();
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
        // kubectl opens both with GET (a WebSocket upgrade), and falls back to a SPDY POST.
        (&Method::GET | &Method::POST, Some(name), Some(sub @ ("exec" | "portforward"))) => {
            let pod = shared
                .store
                .lock()
                .get(&resource.store_key(), &namespace, name)
                .ok_or_else(|| ApiError::not_found(&resource, name))?;
            if sub == "portforward" {
                return Err(remotecommand::port_forward(&pod));
            }
            remotecommand::exec(shared.node.as_ref(), shared.shutdown.clone(), &pod, request)
        }
        (&Method::POST, Some(name), Some("token")) => {
            let (parts, raw) = read_body(request).await?;
            let body = parse_object_body(&parts, &raw)?;
            token_request(shared, &resource, &namespace, name, &body)
        }
        (&Method::GET, None, None) if watch_requested => {
            let params = WatchParams {
                filter: filter_for(&resource, target.namespace.clone(), &query)?,
                resource,
                resource_version: query.get("resourceVersion").cloned(),
                // timeoutSeconds=0 (or unparsable) means "the server's default", as upstream.
                timeout: query
                    .get("timeoutSeconds")
                    .and_then(|t| t.parse::<u64>().ok())
                    .filter(|t| *t > 0)
                    .map(Duration::from_secs),
                bookmarks: query.get("allowWatchBookmarks").map(String::as_str) == Some("true"),
                send_initial_events: query.get("sendInitialEvents").map(String::as_str)
                    == Some("true"),
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
            let filter = filter_for(&resource, target.namespace.clone(), &query)?;
            list(shared, &resource, &filter, &query, table)
        }
        (&Method::GET, Some(name), sub) => {
            let object = shared
                .store
                .lock()
                .get(&resource.store_key(), &namespace, name)
                .ok_or_else(|| ApiError::not_found(&resource, name))?;
            match sub {
                Some("scale") => Ok(json_response(200, &scale_of(&resource, &object))),
                Some("log") => match &shared.node {
                    // The process runtime: the container's real output (runtime/logs.rs).
                    Some(node) => {
                        match node.logs(&object, &crate::runtime::LogRequest::from_query(&query))? {
                            crate::runtime::LogOutput::Whole(text) => Ok(text_response(200, &text)),
                            crate::runtime::LogOutput::Follow(chunks) => Ok(Response::builder()
                                .status(200)
                                .header(header::CONTENT_TYPE, "text/plain")
                                .body(ResponseBody::Stream(chunks))
                                .unwrap_or_else(|_| Response::new(ResponseBody::empty()))),
                        }
                    }
                    None => Ok(text_response(200, &pod_log(&object, &query))),
                },
                _ => Ok(object_response(200, &resource, &object, table, &[])),
            }
        }
        (&Method::POST, None, None) => {
            if resource.namespaced && target.namespace.is_none() {
                return Err(ApiError::path_not_found());
            }
            let (parts, raw) = read_body(request).await?;
            let body = parse_object_body(&parts, &raw)?;
            objects::check_namespace(&shared.store.lock(), &resource, target.namespace.as_deref())?;
            let mut random = request_random(shared);
            let options = write_options(&query, &mut random, Some(&raw), shared)?;
            let prepared =
                objects::prepare_create(&resource, target.namespace.as_deref(), body, options)?;
            check_owners(shared, user, &resource, None, prepared.object())?;
            let outcome = commit_create(shared, &resource, prepared)?;
            Ok(finish_write(shared, &resource, outcome, table))
        }
        (&Method::PUT, Some(name), sub) => {
            let (parts, raw) = read_body(request).await?;
            let body = parse_object_body(&parts, &raw)?;
            if sub != Some("scale") {
                objects::require_resource_version(&resource, name, &body)?;
            }
            let outcome =
                update_with_retries(shared, user, &resource, &namespace, name, |old, random| {
                    let options = write_options(&query, random, Some(&raw), shared)?;
                    match sub {
                        Some("scale") => prepare_scale(&resource, old, body.clone(), options),
                        Some("status") => objects::prepare_update(
                            &resource,
                            old,
                            body.clone(),
                            Part::Status,
                            options,
                        ),
                        _ => objects::prepare_update(
                            &resource,
                            old,
                            body.clone(),
                            Part::Main,
                            options,
                        ),
                    }
                })?;
            if sub == Some("scale") {
                return Ok(json_response(200, &scale_of(&resource, &outcome.object)));
            }
            Ok(finish_write(shared, &resource, outcome, table))
        }
        (&Method::PATCH, Some(name), sub) => {
            let (parts, body) = read_body(request).await?;
            let patch_type = content_type(&parts);
            patch(
                shared,
                user,
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
            let (_, body) = read_body(request).await?;
            let options = delete_options(shared, &body, &query)?;
            let dry_run = query.get("dryRun").map(String::as_str) == Some("All");
            let object = {
                let mut state = shared.store.lock();
                objects::delete(&mut state, &resource, &namespace, name, &options, dry_run)?
            };
            start_pod_termination(shared, &object);
            Ok(object_response(200, &resource, &object, None, &[]))
        }
        (&Method::DELETE, None, None) => {
            let (_, body) = read_body(request).await?;
            let options = delete_options(shared, &body, &query)?;
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
                    start_pod_termination(shared, &deleted);
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

/// DeleteOptions from the body, `gracePeriodSeconds` from the query too, and the sandbox's
/// pod termination delay.
fn delete_options(
    shared: &Arc<Shared>,
    body: &[u8],
    query: &HashMap<String, String>,
) -> Result<DeleteOptions, ApiError> {
    let mut options = DeleteOptions::from_body(body)?;
    if let Some(seconds) = query.get("gracePeriodSeconds").and_then(|s| s.parse().ok()) {
        options.grace_period_seconds = Some(seconds);
    }
    options.pod_termination_delay = shared.options.pod_termination_delay;
    Ok(options)
}

/// The kubelet's part of a deletion: the process runtime's worker for the pod looks at it at
/// once; a simulated pod that `delete` left Terminating is removed later by a timer.
fn start_pod_termination(shared: &Arc<Shared>, object: &Value) {
    if let Some(node) = &shared.node {
        node.look_at(object);
    }
    if let Some(removal) = objects::FollowUp::after_delete(object) {
        controllers::spawn_follow_ups(shared, vec![removal]);
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
        Some(text) => {
            let selector = FieldSelector::parse(&text)
                .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
            let supported = resource.selectable_fields();
            if let Some(unsupported) = selector
                .requirements
                .iter()
                .find(|r| !supported.contains(&r.field.as_str()))
            {
                // Each kind indexes only a few fields; anything else is refused, not scanned.
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    unsupported.field
                )));
            }
            Some(selector)
        }
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
    user: &UserInfo,
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
    let exists = shared
        .store
        .lock()
        .get(&resource.store_key(), namespace, name)
        .is_some();
    if !exists && is_apply && subresource.is_none() {
        // Server-side apply of an object that does not exist yet creates it.
        let mut document = document;
        objects::check_body(resource, &mut document)?;
        document["metadata"]["name"] = json!(name);
        let ns = resource.namespaced.then_some(namespace);
        objects::check_namespace(&shared.store.lock(), resource, ns)?;
        let mut random = request_random(shared);
        let options = write_options(query, &mut random, None, shared)?;
        let prepared = objects::prepare_create(resource, ns, document, options)?;
        check_owners(shared, user, resource, None, prepared.object())?;
        let outcome = commit_create(shared, resource, prepared)?;
        return Ok(finish_write(shared, resource, outcome, table));
    }
    let outcome = update_with_retries(shared, user, resource, namespace, name, |old, random| {
        let options = write_options(query, random, None, shared)?;
        let base = match subresource {
            Some("scale") => scale_of(resource, old),
            _ => (**old).clone(),
        };
        // The patch runs outside the store lock; its result is bounded (depth, size) before
        // anything else touches it.
        let patched = apply_patch(patch_type, base, &document)?;
        objects::check_size(&patched)?;
        match subresource {
            Some("scale") => prepare_scale(resource, old, patched, options),
            Some("status") => {
                objects::prepare_update(resource, old, patched, Part::Status, options)
            }
            _ => objects::prepare_update(resource, old, patched, Part::Main, options),
        }
    })?;
    if subresource == Some("scale") {
        return Ok(json_response(200, &scale_of(resource, &outcome.object)));
    }
    Ok(finish_write(shared, resource, outcome, table))
}

/// Each write draws its own generator from the shared one, so the shared lock is held for one
/// number, not for the whole (unlocked, possibly slow) validation.
fn request_random(shared: &Arc<Shared>) -> Xorshift {
    Xorshift::from_seed(lock(&shared.random).next_u64())
}

/// Store a prepared create (the name must still be free, the namespace still there).
fn commit_create(
    shared: &Arc<Shared>,
    resource: &ResourceType,
    prepared: Prepared,
) -> Result<WriteOutcome, ApiError> {
    let mut state = shared.store.lock();
    match objects::commit(&mut state, resource, prepared)? {
        Committed::Done(outcome) => {
            let name = outcome.object["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            let stored = state.get(&resource.store_key(), "", name);
            // A new namespace (not a dry run) gets its `default` ServiceAccount and CA.
            if resource.group.is_empty()
                && resource.plural == "namespaces"
                && stored.is_some_and(|s| Arc::ptr_eq(&s, &outcome.object))
            {
                let mut random = request_random(shared);
                objects::populate_namespace(
                    &mut state,
                    name,
                    &shared.certificates.ca_pem,
                    &mut random,
                );
            }
            Ok(outcome)
        }
        Committed::Stale => Err(ApiError::conflict(resource, "", OBJECT_MODIFIED)),
    }
}

/// OwnerReferencesPermissionEnforcement for a write of `new` (see `authn.rs`).
fn check_owners(
    shared: &Arc<Shared>,
    user: &UserInfo,
    resource: &ResourceType,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), ApiError> {
    if user.is_superuser() {
        return Ok(());
    }
    let registry = shared.store.lock().registry.clone();
    let plural_of = |api_version: &str, kind: &str| -> Option<String> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        registry.resource_list(group, version)?["resources"]
            .as_array()?
            .iter()
            .find(|r| r["kind"] == kind && !r["name"].as_str().unwrap_or("/").contains('/'))?
            ["name"]
            .as_str()
            .map(str::to_string)
    };
    authn::check_owner_references(
        shared,
        user,
        (
            &resource.group,
            &resource.plural,
            new["metadata"]["namespace"].as_str().unwrap_or_default(),
            new["metadata"]["name"].as_str().unwrap_or_default(),
        ),
        old,
        new,
        plural_of,
    )
}

/// TokenRequest (`kubectl create token NAME`): a token for the service account, bound to a
/// pod if `boundObjectRef` names one, valid `expirationSeconds` (default one hour, at least
/// ten minutes).
fn token_request(
    shared: &Arc<Shared>,
    resource: &ResourceType,
    namespace: &str,
    name: &str,
    request: &Value,
) -> Result<Response<ResponseBody>, ApiError> {
    let spec = &request["spec"];
    let token_request_kind = ResourceType {
        group: "authentication.k8s.io".into(),
        kind: "TokenRequest".into(),
        ..resource.clone()
    };
    let expiration = match &spec["expirationSeconds"] {
        Value::Null => tokens::DEFAULT_EXPIRATION_SECONDS,
        value => match value.as_u64() {
            Some(seconds) if seconds < tokens::MIN_EXPIRATION_SECONDS => {
                return Err(ApiError::invalid_field(
                    &token_request_kind,
                    "",
                    "FieldValueInvalid",
                    "spec.expirationSeconds",
                    format!(
                        "Invalid value: {seconds}: may not specify a duration less than 10 minutes"
                    ),
                ))
            }
            Some(seconds) if seconds <= 1 << 32 => seconds,
            _ => {
                return Err(ApiError::invalid_field(
                    &token_request_kind,
                    "",
                    "FieldValueInvalid",
                    "spec.expirationSeconds",
                    format!(
                    "Invalid value: {value}: may not specify a duration larger than 2^32 seconds"
                ),
                ))
            }
        },
    };
    let state = shared.store.lock();
    let account = state
        .get("/serviceaccounts", namespace, name)
        .ok_or_else(|| ApiError::not_found(resource, name))?;
    let bound = &spec["boundObjectRef"];
    let pod = match bound["kind"].as_str() {
        None | Some("") => None,
        Some("Pod") => {
            let pod_name = bound["name"].as_str().unwrap_or_default();
            let pods = state
                .registry
                .find("", "v1", "pods")
                .cloned()
                .ok_or_else(ApiError::path_not_found)?;
            let pod = state
                .get("/pods", namespace, pod_name)
                .ok_or_else(|| ApiError::not_found(&pods, pod_name))?;
            let uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            match bound["uid"].as_str().filter(|u| !u.is_empty()) {
                Some(asked) if asked != uid => {
                    return Err(ApiError::conflict(
                        &pods,
                        pod_name,
                        &format!("the UID in the bound object reference ({asked}) does not match the UID in record. The object might have been deleted and then recreated"),
                    ))
                }
                _ => {}
            }
            Some((pod_name.to_string(), uid))
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
            "cannot bind token for object of kind {other:?}: the sandbox binds tokens to Pods only"
        )))
        }
    };
    drop(state);
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let audiences = if audiences.is_empty() {
        vec![tokens::ISSUER.to_string()]
    } else {
        audiences
    };
    let now = tokens::now_seconds();
    let token = shared
        .tokens
        .issue(TokenClaims {
            namespace: namespace.to_string(),
            service_account: name.to_string(),
            service_account_uid: account["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            pod: pod.clone(),
            audiences: audiences.clone(),
            issued_at: now,
            expires_at: now + expiration,
        })
        .map_err(|error| ApiError::internal(format!("cannot issue a token: {error}")))?;
    let expires = std::time::UNIX_EPOCH + Duration::from_secs(now + expiration);
    let mut answer_spec = json!({"audiences": audiences, "expirationSeconds": expiration,
                                 "boundObjectRef": null});
    if let Some((pod_name, uid)) = pod {
        answer_spec["boundObjectRef"] =
            json!({"kind": "Pod", "apiVersion": "v1", "name": pod_name, "uid": uid});
    }
    Ok(json_response(
        201,
        &json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"name": name, "namespace": namespace, "creationTimestamp": null},
                "spec": answer_spec,
                "status": {"token": token,
                           "expirationTimestamp": crate::timefmt::format_rfc3339(expires)}}),
    ))
}

/// kube-apiserver's message when optimistic concurrency gave up.
const OBJECT_MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// An update in kube-apiserver's GuaranteedUpdate style: read the stored object (a short
/// lock), build and validate the new one from it without the lock, then commit under the lock
/// if the stored object is still the one it was built from; otherwise build it again.
fn update_with_retries(
    shared: &Arc<Shared>,
    user: &UserInfo,
    resource: &ResourceType,
    namespace: &str,
    name: &str,
    mut build: impl FnMut(&Arc<Value>, &mut Xorshift) -> Result<Prepared, ApiError>,
) -> Result<WriteOutcome, ApiError> {
    let mut random = request_random(shared);
    for _ in 0..MAX_WRITE_ATTEMPTS {
        let old = shared
            .store
            .lock()
            .get(&resource.store_key(), namespace, name)
            .ok_or_else(|| ApiError::not_found(resource, name))?;
        let prepared = build(&old, &mut random)?;
        check_owners(shared, user, resource, Some(&old), prepared.object())?;
        if let Committed::Done(outcome) =
            objects::commit(&mut shared.store.lock(), resource, prepared)?
        {
            return Ok(outcome);
        }
    }
    Err(ApiError::conflict(resource, name, OBJECT_MODIFIED))
}

fn apply_patch(patch_type: &str, mut base: Value, document: &Value) -> Result<Value, ApiError> {
    match patch_type {
        "application/json-patch+json" => {
            patching::json_patch(&mut base, document).map_err(|e| {
                if e.is_too_large() {
                    // Too many operations, or copies adding more than 3 MiB: 413, as upstream.
                    ApiError::from(Status::failure(413, "RequestEntityTooLarge", e.to_string()))
                } else {
                    // kube-apiserver answers a failed operation (a `test`, a missing path) with 422.
                    ApiError::from(Status::failure(422, "Invalid", e.to_string()))
                }
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
    let paths = resource.scale.clone().unwrap_or(ScalePaths {
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
fn prepare_scale(
    resource: &ResourceType,
    old: &Arc<Value>,
    scale: Value,
    options: WriteOptions<'_>,
) -> Result<Prepared, ApiError> {
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
    objects::prepare_update(resource, old, next, Part::Main, options)
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
