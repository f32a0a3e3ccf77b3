//! `kubectl logs`: what a container wrote to stdout and stderr, one file per instance (so
//! `--previous` is the instance before the last restart), read whole or followed (`-f`).
//!
//! WORKSHOP.md, "Set-up: the sandbox". The errors are kube-apiserver's own (400 BadRequest):
//! "a container name must be specified ...", "container X is waiting to start: REASON",
//! "previous terminated container X in pod Y not found".

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use super::status::State;
use super::worker::PodWorker;
use super::Node;
use crate::errors::ApiError;
use crate::sync::lock;

/// How often a followed log is checked for new output.
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// The log file of `container`'s instance number `instance` (its restartCount when it ran).
pub(crate) fn path(pod_dir: &Path, container: &str, instance: u32) -> PathBuf {
    pod_dir
        .join("containers")
        .join(container)
        .join("log")
        .join(format!("{instance}.log"))
}

/// The query of `GET .../pods/NAME/log`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogRequest {
    pub(crate) container: Option<String>,
    pub(crate) previous: bool,
    pub(crate) follow: bool,
    pub(crate) tail_lines: Option<usize>,
}

impl LogRequest {
    pub(crate) fn from_query(query: &std::collections::HashMap<String, String>) -> LogRequest {
        let flag = |name: &str| query.get(name).is_some_and(|v| v == "true" || v == "1");
        LogRequest {
            container: query.get("container").filter(|c| !c.is_empty()).cloned(),
            previous: flag("previous"),
            follow: flag("follow"),
            tail_lines: query.get("tailLines").and_then(|n| n.parse().ok()),
        }
    }
}

/// A log, whole or as a stream of chunks that ends when the instance ends.
pub(crate) enum LogOutput {
    Whole(String),
    Follow(mpsc::Receiver<Bytes>),
}

pub(crate) fn read(
    node: &Node,
    worker: Option<Arc<PodWorker>>,
    pod: &Value,
    request: &LogRequest,
) -> Result<LogOutput, ApiError> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(String::from))
            .collect()
    };
    let main = names("containers");
    let init = names("initContainers");
    let container = match &request.container {
        Some(container) => container.clone(),
        None if main.len() == 1 => main[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}] or one of the init containers: [{}]",
                main.join(" "),
                init.join(" ")
            )))
        }
    };
    if !main.contains(&container) && !init.contains(&container) {
        return Err(ApiError::bad_request(format!(
            "container {container} is not valid for pod {pod_name}"
        )));
    }
    let Some(worker) = worker else {
        return Err(ApiError::bad_request(format!(
            "container \"{container}\" in pod \"{pod_name}\" is waiting to start: ContainerCreating"
        )));
    };
    let (state, restart_count) = {
        let record = lock(&worker.record);
        let found = record
            .main
            .iter()
            .chain(record.init.iter())
            .find(|c| c.name == container);
        match found {
            Some(c) => (c.state.clone(), c.restart_count),
            None => (State::waiting("ContainerCreating", ""), 0),
        }
    };
    let instance = if request.previous {
        if restart_count == 0 {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
            )));
        }
        restart_count - 1
    } else {
        restart_count
    };
    let file = path(&worker.dir, &container, instance);
    let text = match std::fs::read(&file) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(_) => {
            if let State::Waiting { reason, .. } = &state {
                return Err(ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{pod_name}\" is waiting to start: {reason}"
                )));
            }
            // Running but never wrote a file: a simulated container.
            let image = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == container.as_str())
                .and_then(|c| c["image"].as_str())
                .unwrap_or("?");
            return Ok(LogOutput::Whole(format!(
                "sandbox: container {container} (image {image}) is simulated: no process runs, so there is no output\n"
            )));
        }
    };
    let text = match request.tail_lines {
        Some(n) => last_lines(&text, n),
        None => text,
    };
    let running = matches!(state, State::Running { .. });
    if !request.follow || request.previous || !running {
        return Ok(LogOutput::Whole(text));
    }
    let (sender, receiver) = mpsc::channel(16);
    let shutdown = node.shutdown.clone();
    let skip = std::fs::read(&file).map(|b| b.len()).unwrap_or(0) as u64;
    let first = Bytes::from(text);
    tokio::spawn(async move {
        if !first.is_empty() && sender.send(first).await.is_err() {
            return;
        }
        follow(worker, container, instance, file, skip, sender, shutdown).await;
    });
    Ok(LogOutput::Follow(receiver))
}

/// Send what is appended to `file` until this instance has ended and all of it was sent.
async fn follow(
    worker: Arc<PodWorker>,
    container: String,
    instance: u32,
    file: PathBuf,
    mut offset: u64,
    sender: mpsc::Sender<Bytes>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    // Held open for the whole follow: a deleted pod's directory, its logs with it, is removed as
    // soon as its containers have exited (`pod.rs`), which can be before the next poll reads the
    // last lines they wrote; an open file is read to its end after its name is gone.
    let mut handle = std::fs::File::open(&file).ok();
    if let Some(open) = handle.as_mut() {
        if open.seek(SeekFrom::Start(offset)).is_err() {
            handle = None;
        }
    }
    loop {
        let ended = {
            let record = lock(&worker.record);
            record
                .main
                .iter()
                .chain(record.init.iter())
                .find(|c| c.name == container)
                .is_none_or(|c| {
                    c.restart_count != instance || !matches!(c.state, State::Running { .. })
                })
        };
        let chunk = match handle.as_mut() {
            Some(handle) => read_more(handle),
            None => read_from(&file, offset),
        };
        if !chunk.is_empty() {
            offset += chunk.len() as u64;
            if sender.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            continue;
        }
        if ended {
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
            _ = sender.closed() => return,
            _ = shutdown.cancelled() => return,
        }
    }
}

/// What was appended to the open `handle` since the last read, at most 1 MiB at a time.
fn read_more(handle: &mut std::fs::File) -> Vec<u8> {
    let mut bytes = Vec::new();
    let _ = handle.take(1 << 20).read_to_end(&mut bytes);
    bytes
}

fn read_from(file: &Path, offset: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Ok(mut handle) = std::fs::File::open(file) {
        if handle.seek(SeekFrom::Start(offset)).is_ok() {
            let _ = handle.take(1 << 20).read_to_end(&mut bytes);
        }
    }
    bytes
}

/// The last `n` lines of `text` (`kubectl logs --tail`).
fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    lines[lines.len().saturating_sub(n)..].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_log_is_read_to_its_end_after_its_file_is_removed() {
        let dir = tempfile::tempdir().expect("a folder");
        let path = dir.path().join("postgres-0.log");
        std::fs::write(&path, "first\n").expect("written");
        let mut handle = std::fs::File::open(&path).expect("opened");
        assert_eq!(read_more(&mut handle), b"first\n");
        // The container's last lines, then its pod's directory removed before the next poll.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, b"shut down\n"))
            .expect("appended");
        std::fs::remove_file(&path).expect("removed");
        assert_eq!(read_more(&mut handle), b"shut down\n");
        assert!(read_more(&mut handle).is_empty());
        assert!(
            read_from(&path, 0).is_empty(),
            "by name, the lines are gone"
        );
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb", 5), "a\nb");
        assert_eq!(last_lines("a\nb\n", 0), "");
    }
}
