//! What the feed answers: the discovery documents and the CRD (so kube-rs, kubectl and the
//! project's `crd_check::check` find the type), an empty list at resourceVersion "1", and the watch.
//! Anything else is a 404 `Status`.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::events::{GROUP, KIND, LIST_RESOURCE_VERSION, NAMESPACE, PLURAL, Stream, VERSION};

const CRD_NAME: &str = "postgresclusters.workshop.example.com";
const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
/// How long an empty watch stays open when the client gives no `timeoutSeconds`.
const DEFAULT_HOLD: Duration = Duration::from_secs(2);

pub struct Feed {
    pub stream: Stream,
    pub chunk: usize,
    pub log: bool,
}

impl Feed {
    pub fn answer<B>(&self, request: Request<B>) -> Response<Reply> {
        if self.log {
            eprintln!("{} {}", request.method(), request.uri());
        }
        let path = request.uri().path().trim_end_matches('/');
        let query = request.uri().query().unwrap_or("");
        let watch = matches!(param(query, "watch"), Some("true" | "1"));
        let crd = format!("{CRDS}/{CRD_NAME}");
        let collection = format!("/apis/{GROUP}/{VERSION}/{PLURAL}");
        let namespaced = format!("/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}");

        match (request.method(), path) {
            (&Method::GET, "/version") => document(StatusCode::OK, version()),
            (&Method::GET, "/api") => document(
                StatusCode::OK,
                json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            ),
            (&Method::GET, "/api/v1") => document(StatusCode::OK, resource_list("v1", &[])),
            (&Method::GET, "/apis") => document(
                StatusCode::OK,
                json!({
                    "kind": "APIGroupList",
                    "apiVersion": "v1",
                    "groups": [group("apiextensions.k8s.io", "v1"), group(GROUP, VERSION)],
                }),
            ),
            (&Method::GET, "/apis/apiextensions.k8s.io") => document(
                StatusCode::OK,
                with_kind(group("apiextensions.k8s.io", "v1"), "APIGroup"),
            ),
            (&Method::GET, "/apis/apiextensions.k8s.io/v1") => document(
                StatusCode::OK,
                resource_list(
                    "apiextensions.k8s.io/v1",
                    &[resource(
                        "customresourcedefinitions",
                        "CustomResourceDefinition",
                        false,
                        &["crd", "crds"],
                    )],
                ),
            ),
            (&Method::GET, p) if p == format!("/apis/{GROUP}") => {
                document(StatusCode::OK, with_kind(group(GROUP, VERSION), "APIGroup"))
            }
            (&Method::GET, p) if p == format!("/apis/{GROUP}/{VERSION}") => document(
                StatusCode::OK,
                resource_list(
                    &format!("{GROUP}/{VERSION}"),
                    &[resource(PLURAL, KIND, true, &["pgc"])],
                ),
            ),
            (&Method::GET, p) if p == crd => document(StatusCode::OK, crd_document()),
            // `kubectl wait --for=condition=Established` lists, then watches: nothing changes.
            (&Method::GET, CRDS) if watch => held_open(query),
            (&Method::GET, CRDS) => document(
                StatusCode::OK,
                json!({
                    "apiVersion": "apiextensions.k8s.io/v1",
                    "kind": "CustomResourceDefinitionList",
                    "metadata": {"resourceVersion": "1"},
                    "items": [crd_document()],
                }),
            ),
            (&Method::POST, CRDS) => document(
                StatusCode::CONFLICT,
                status(
                    409,
                    "AlreadyExists",
                    &format!(
                        "customresourcedefinitions.apiextensions.k8s.io \"{CRD_NAME}\" already exists"
                    ),
                ),
            ),
            (&Method::GET, p) if p == namespaced || p == collection => {
                if watch {
                    self.watch(query)
                } else {
                    document(
                        StatusCode::OK,
                        json!({
                            "apiVersion": format!("{GROUP}/{VERSION}"),
                            "kind": format!("{KIND}List"),
                            "metadata": {"resourceVersion": LIST_RESOURCE_VERSION.to_string()},
                            "items": [],
                        }),
                    )
                }
            }
            _ => document(
                StatusCode::NOT_FOUND,
                status(
                    404,
                    "NotFound",
                    &format!("the server could not find the requested resource ({path})"),
                ),
            ),
        }
    }

    /// The events after the client's resourceVersion (all of them without one, or from "0"), in
    /// `--chunk`-byte HTTP chunks; the response ends after the last. Nothing left to send: an
    /// empty stream held open, as a real server does until `timeoutSeconds`.
    fn watch(&self, query: &str) -> Response<Reply> {
        let from = param(query, "resourceVersion")
            .and_then(|rv| rv.parse::<u64>().ok())
            .filter(|&rv| rv >= LIST_RESOURCE_VERSION)
            .unwrap_or(LIST_RESOURCE_VERSION);
        let events = self.stream.after(from);
        if events.is_empty() {
            return held_open(query);
        }
        streaming(Reply {
            rest: events,
            chunk: self.chunk,
            hold: None,
            whole: false,
        })
    }
}

fn param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query
        .split('&')
        .find_map(|pair| match pair.split_once('=') {
            Some((key, value)) if key == name => Some(value),
            None if pair == name => Some(""),
            _ => None,
        })
}

/// A response body: either one whole document (sent with a Content-Length), or a watch's bytes
/// cut into `chunk`-byte frames, each an HTTP chunk, optionally followed by a pause before the
/// end (an idle watch).
pub struct Reply {
    rest: Bytes,
    chunk: usize,
    hold: Option<Pin<Box<tokio::time::Sleep>>>,
    whole: bool,
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let reply = &mut *self;
        if !reply.rest.is_empty() {
            let take = reply.chunk.min(reply.rest.len());
            return Poll::Ready(Some(Ok(Frame::data(reply.rest.split_to(take)))));
        }
        if let Some(hold) = &mut reply.hold {
            std::task::ready!(hold.as_mut().poll(cx));
            reply.hold = None;
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        // A watch never says so up front, which makes hyper use chunked encoding.
        self.whole && self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        if self.whole {
            SizeHint::with_exact(self.rest.len() as u64)
        } else {
            SizeHint::default()
        }
    }
}

fn document(code: StatusCode, body: Value) -> Response<Reply> {
    let bytes = Bytes::from(serde_json::to_vec(&body).expect("JSON"));
    let mut response = streaming(Reply {
        chunk: bytes.len().max(1),
        rest: bytes,
        hold: None,
        whole: true,
    });
    *response.status_mut() = code;
    response
}

fn streaming(reply: Reply) -> Response<Reply> {
    let mut response = Response::new(reply);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn held_open(query: &str) -> Response<Reply> {
    let hold = param(query, "timeoutSeconds")
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_HOLD);
    streaming(Reply {
        rest: Bytes::new(),
        chunk: 1,
        hold: Some(Box::pin(tokio::time::sleep(hold))),
        whole: false,
    })
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-watch-feed",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

fn group(name: &str, version: &str) -> Value {
    let group_version = json!({"groupVersion": format!("{name}/{version}"), "version": version});
    json!({"name": name, "versions": [group_version.clone()], "preferredVersion": group_version})
}

fn with_kind(mut value: Value, kind: &str) -> Value {
    value["kind"] = kind.into();
    value["apiVersion"] = "v1".into();
    value
}

fn resource(plural: &str, kind: &str, namespaced: bool, short: &[&str]) -> Value {
    json!({
        "name": plural,
        "singularName": kind.to_lowercase(),
        "namespaced": namespaced,
        "kind": kind,
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "shortNames": short,
    })
}

fn resource_list(group_version: &str, resources: &[Value]) -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    })
}

/// The CRD as a server reports it once Established. Its schema keeps every field (the feed's
/// objects are what they are); the project's `crd_check::check` notes the difference and goes on.
fn crd_document() -> Value {
    let names = json!({
        "plural": PLURAL,
        "singular": KIND.to_lowercase(),
        "kind": KIND,
        "listKind": format!("{KIND}List"),
        "shortNames": ["pgc"],
    });
    let since = "2025-02-28T23:00:00Z";
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "uid": "00000000-0000-4000-8000-00000000c4d0",
            "resourceVersion": "1",
            "generation": 1,
            "creationTimestamp": since,
        },
        "spec": {
            "group": GROUP,
            "names": names,
            "scope": "Namespaced",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                "subresources": {"status": {}},
            }],
            "conversion": {"strategy": "None"},
        },
        "status": {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": since},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": since},
            ],
            "acceptedNames": names,
            "storedVersions": [VERSION],
        },
    })
}
