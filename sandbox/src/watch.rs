//! One watch: a streaming response of newline-separated JSON events.
//!
//! WORKSHOP.md, "Set-up: the sandbox" and step 02. Each event is one compact JSON object and a
//! `\n`, sent as its own HTTP chunk and flushed at once. A watch ends cleanly (end of stream)
//! at `timeoutSeconds`, at the server's default timeout, when it falls too far behind (its
//! queue in the store fills up), or when a fault says so. A resourceVersion older than the
//! history window is answered with HTTP 200 and an in-stream `ERROR` event carrying a 410
//! `Expired` Status, exactly as kube-apiserver does.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::body::ResponseBody;
use crate::errors::ApiError;
use crate::resources::ResourceType;
use crate::state::{FaultSettings, Shared};
use crate::status::Status;
use crate::store::{Filter, Registration, WatchMessage, WatchStart};
use crate::sync::lock;
use crate::table::{self, IncludeObject};

/// What the client asked for in the query string.
pub(crate) struct WatchParams {
    pub(crate) resource: ResourceType,
    pub(crate) filter: Filter,
    pub(crate) resource_version: Option<String>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) bookmarks: bool,
    /// `sendInitialEvents=true` (streaming lists): ADDED for every object, then a BOOKMARK
    /// annotated `k8s.io/initial-events-end: "true"` marking where the "list" ends.
    pub(crate) send_initial_events: bool,
    /// Some: the client's Accept asked for Tables (`kubectl get -w`).
    pub(crate) table: Option<IncludeObject>,
}

/// Start a watch and return the streaming body for its response.
pub(crate) fn start(shared: &Arc<Shared>, params: WatchParams) -> Result<ResponseBody, ApiError> {
    let start = match params.resource_version.as_deref() {
        _ if params.send_initial_events => WatchStart::Current,
        None | Some("") | Some("0") => WatchStart::Current,
        Some(text) => match text.parse::<u64>() {
            Ok(revision) => WatchStart::After(revision),
            Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersion: Invalid value: {text:?}: must be a resourceVersion this server returned"
                )))
            }
        },
    };
    if let WatchStart::After(requested) = start {
        let current = shared.store.revision();
        if requested > current {
            // An RV from the future: typically from before a restart of a server whose revision
            // started again from zero. kube-apiserver answers 504 with this wording; the
            // client must relist.
            return Err(ApiError::too_large_resource_version(requested, current));
        }
    }
    let settings = lock(&shared.faults).clone();
    let (body_sender, body_receiver) = mpsc::channel::<Bytes>(16);
    if settings.stall_watches {
        tokio::spawn(stall(shared.clone(), body_sender));
        return Ok(ResponseBody::Stream(body_receiver));
    }
    let registration = shared
        .store
        .lock()
        .register_watcher(params.filter.clone(), start);
    match registration {
        Ok(registration) => {
            tokio::spawn(pump(
                shared.clone(),
                registration,
                params,
                settings,
                body_sender,
            ));
        }
        Err(expired) => {
            let mut status = Status::failure(
                410,
                "Expired",
                format!(
                    "too old resource version: {} ({})",
                    expired.requested, expired.oldest
                ),
            );
            status.details = None;
            let line = event_line("ERROR", &serde_json::to_value(&status).unwrap_or_default());
            // The sender is dropped right after: the stream ends after this one event.
            let _ = body_sender.try_send(line);
        }
    }
    Ok(ResponseBody::Stream(body_receiver))
}

/// `{"type":"ADDED","object":{...}}\n`, with `type` first as kube-apiserver writes it.
fn event_line(event_type: &str, object: &Value) -> Bytes {
    let object = serde_json::to_vec(object).unwrap_or_default();
    splice_event(event_type, &object)
}

fn splice_event(event_type: &str, object_json: &[u8]) -> Bytes {
    let mut line = BytesMut::with_capacity(object_json.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event_type.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object_json);
    line.extend_from_slice(b"}\n");
    line.freeze()
}

/// Headers sent, then silence until the client leaves or the sandbox stops.
async fn stall(shared: Arc<Shared>, body_sender: mpsc::Sender<Bytes>) {
    let mut epoch = shared.watch_epoch.subscribe();
    tokio::select! {
        _ = body_sender.closed() => {}
        _ = shared.shutdown.cancelled() => {}
        _ = epoch.changed() => {}
    }
}

struct Output {
    sender: mpsc::Sender<Bytes>,
    /// `Shared::frozen`: a frozen server sends nothing on its open watches either.
    frozen: tokio::sync::watch::Receiver<bool>,
    chunk_size: Option<usize>,
    resource: ResourceType,
    table: Option<IncludeObject>,
    /// kube-apiserver sends column definitions with the first Table event only.
    first_table_sent: bool,
}

impl Output {
    fn render(&mut self, message: &WatchMessage) -> Bytes {
        let (event_type, object) = match message {
            WatchMessage::InitialEventsEnd(revision) => {
                let bookmark = json!({"kind": self.resource.kind,
                    "apiVersion": self.resource.api_version(),
                    "metadata": {"resourceVersion": revision.to_string(),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}});
                return event_line("BOOKMARK", &bookmark);
            }
            WatchMessage::Bookmark(revision) => {
                let bookmark = json!({"kind": self.resource.kind,
                    "apiVersion": self.resource.api_version(),
                    "metadata": {"resourceVersion": revision.to_string()}});
                return event_line("BOOKMARK", &bookmark);
            }
            WatchMessage::Event(event) => {
                if self.table.is_none() {
                    // The hot path: splice the object's shared JSON into the event line.
                    return splice_event(event.event_type.as_str(), &event.object_json());
                }
                (event.event_type, event.object.clone())
            }
            WatchMessage::Adjusted { event_type, object } => (*event_type, object.clone()),
        };
        match self.table {
            Some(include) => {
                let rv = object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let with_definitions = !self.first_table_sent;
                self.first_table_sent = true;
                let table =
                    table::table(&self.resource, &[&*object], &rv, include, with_definitions);
                event_line(event_type.as_str(), &table)
            }
            None => event_line(event_type.as_str(), &object),
        }
    }

    /// Send one rendered event, in pieces if a fault asks for it. False: the client is gone.
    async fn send(&self, line: Bytes) -> bool {
        let _ = self.frozen.clone().wait_for(|frozen| !*frozen).await;
        match self.chunk_size {
            None => self.sender.send(line).await.is_ok(),
            Some(size) => {
                let mut rest = line;
                while !rest.is_empty() {
                    let piece = rest.split_to(size.min(rest.len()));
                    if self.sender.send(piece).await.is_err() {
                        return false;
                    }
                }
                true
            }
        }
    }
}

/// Move events from the watcher's queue in the store to the HTTP response, until the watch ends.
async fn pump(
    shared: Arc<Shared>,
    registration: Registration,
    params: WatchParams,
    settings: FaultSettings,
    body_sender: mpsc::Sender<Bytes>,
) {
    let Registration {
        id,
        revision,
        mut initial,
        mut receiver,
    } = registration;
    if params.send_initial_events && params.bookmarks {
        initial.push(WatchMessage::InitialEventsEnd(revision));
    }
    let mut timeout = params
        .timeout
        .unwrap_or(shared.options.default_watch_timeout);
    if let Some(limit) = settings.end_watches_after {
        timeout = timeout.min(limit);
    }
    let deadline = Instant::now() + timeout;
    let event_limit = settings.end_watches_after_events;
    let interval = shared
        .options
        .bookmark_interval
        .max(Duration::from_millis(10));
    let mut bookmark_timer = tokio::time::interval_at(Instant::now() + interval, interval);
    let mut epoch = shared.watch_epoch.subscribe();
    let mut output = Output {
        sender: body_sender,
        frozen: shared.frozen.subscribe(),
        chunk_size: settings.watch_chunk_size,
        resource: params.resource.clone(),
        table: params.table,
        first_table_sent: false,
    };
    let mut sent = 0usize;
    let mut pending = std::collections::VecDeque::from(initial);

    'watch: loop {
        if event_limit.is_some_and(|limit| sent >= limit) {
            break;
        }
        let message = match pending.pop_front() {
            Some(message) => message,
            None => tokio::select! {
                message = receiver.recv() => match message {
                    Some(message) => message,
                    // The store dropped us: too slow, all watches ended, or the CRD is gone.
                    None => break 'watch,
                },
                _ = bookmark_timer.tick(), if params.bookmarks => {
                    shared.store.lock().queue_bookmark(id);
                    continue;
                }
                _ = tokio::time::sleep_until(deadline) => break 'watch,
                _ = shared.shutdown.cancelled() => break 'watch,
                _ = epoch.changed() => break 'watch,
                _ = output.sender.closed() => break 'watch,
            },
        };
        if !matches!(
            message,
            WatchMessage::Bookmark(_) | WatchMessage::InitialEventsEnd(_)
        ) {
            sent += 1;
        }
        let mut line = output.render(&message);
        if let Some(group) = settings.watch_events_per_chunk {
            // Fault: several events per chunk, taking only what is already waiting.
            let mut batch = bytes::BytesMut::from(&line[..]);
            for _ in 1..group {
                if event_limit.is_some_and(|limit| sent >= limit) {
                    break;
                }
                let Some(more) = pending.pop_front().or_else(|| receiver.try_recv().ok()) else {
                    break;
                };
                if !matches!(
                    more,
                    WatchMessage::Bookmark(_) | WatchMessage::InitialEventsEnd(_)
                ) {
                    sent += 1;
                }
                batch.extend_from_slice(&output.render(&more));
            }
            line = batch.freeze();
        }
        let delivered = tokio::select! {
            delivered = output.send(line) => delivered,
            _ = tokio::time::sleep_until(deadline) => false,
            _ = shared.shutdown.cancelled() => false,
            _ = epoch.changed() => false,
        };
        if !delivered {
            break;
        }
    }
    shared.store.lock().remove_watcher(id);
}
