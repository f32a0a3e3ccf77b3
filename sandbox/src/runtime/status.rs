//! What the kubelet knows about a pod, and the `status` it writes from it: phase, conditions,
//! and one status per (init) container with its state, last state and restart count; and the
//! termination message a finished container leaves in its terminated state.
//!
//! WORKSHOP.md, "Set-up: the sandbox". kubectl derives its STATUS column from exactly these
//! fields (`Init:0/1`, `PodInitializing`, `CrashLoopBackOff`, `CreateContainerConfigError`,
//! `Error`, `Completed`), so writing them as the kubelet does is what makes the column right.
//! The kubelet also caps all containers' messages together at 12 KiB; the sandbox does not.

use std::net::Ipv4Addr;

use serde_json::{json, Value};

/// The default `terminationMessagePath`, which the API server fills in on every container.
pub(crate) const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";
/// The kubelet keeps the last 4 KiB of what a container wrote to its termination message file.
pub(crate) const MESSAGE_FILE_BYTES: usize = 4096;
/// `FallbackToLogsOnError` takes the log's last 80 lines, of which the last 2 KiB.
pub(crate) const MESSAGE_LOG_BYTES: usize = 2048;
const MESSAGE_LOG_LINES: usize = 80;

/// The message of a terminated state, as kuberuntime's getTerminationMessage picks it:
/// `written` is the end of the container's termination message file (None if it is gone),
/// `log_end` the last [`MESSAGE_LOG_BYTES`] of its log. The file wins; its absence or
/// emptiness falls back to the log only under `terminationMessagePolicy:
/// FallbackToLogsOnError` and a non-zero exit (a success never reports its log).
pub(crate) fn termination_message(
    written: Option<&[u8]>,
    log_end: &[u8],
    fallback_to_logs: bool,
    exit_code: i32,
) -> String {
    let written = written.unwrap_or_default();
    let written = &written[written.len().saturating_sub(MESSAGE_FILE_BYTES)..];
    if !written.is_empty() || !fallback_to_logs || exit_code == 0 {
        return String::from_utf8_lossy(written).into_owned();
    }
    // The last 80 lines cut to the last 2 KiB: within the last 2 KiB, at most 80 lines.
    let log_end = &log_end[log_end.len().saturating_sub(MESSAGE_LOG_BYTES)..];
    let mut lines_seen = 0;
    let mut start = 0;
    for (at, _) in log_end
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
    {
        // The newline that ends the log is not the start of a line.
        if at + 1 == log_end.len() {
            continue;
        }
        lines_seen += 1;
        if lines_seen == MESSAGE_LOG_LINES {
            start = at + 1;
            break;
        }
    }
    String::from_utf8_lossy(&log_end[start..]).into_owned()
}

/// A container's state, as `containerStatuses[].state` has it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started_at: String,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        message: String,
        started_at: String,
        finished_at: String,
    },
}

impl State {
    pub(crate) fn waiting(reason: &str, message: impl Into<String>) -> State {
        State::Waiting {
            reason: reason.to_string(),
            message: message.into(),
        }
    }

    /// Exit 0 is `Completed`, anything else `Error`, as containerd reports them.
    pub(crate) fn exited(exit_code: i32, started_at: String, finished_at: String) -> State {
        State::Terminated {
            exit_code,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.to_string(),
            message: String::new(),
            started_at,
            finished_at,
        }
    }

    /// A terminated state with `message` (the termination message); others as they are.
    pub(crate) fn with_message(mut self, text: String) -> State {
        if let State::Terminated { message, .. } = &mut self {
            *message = text;
        }
        self
    }

    fn to_json(&self) -> Value {
        match self {
            State::Waiting { reason, message } => {
                let mut waiting = json!({"reason": reason});
                if !message.is_empty() {
                    waiting["message"] = json!(message);
                }
                json!({"waiting": waiting})
            }
            State::Running { started_at } => json!({"running": {"startedAt": started_at}}),
            State::Terminated {
                exit_code,
                reason,
                message,
                started_at,
                finished_at,
            } => {
                let mut terminated = json!({"exitCode": exit_code, "reason": reason,
                                            "startedAt": started_at, "finishedAt": finished_at});
                if !message.is_empty() {
                    terminated["message"] = json!(message);
                }
                json!({"terminated": terminated})
            }
        }
    }
}

/// One container as the kubelet tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ContainerRecord {
    pub(crate) name: String,
    pub(crate) image: String,
    pub(crate) state: State,
    pub(crate) last_state: Option<State>,
    pub(crate) restart_count: u32,
    pub(crate) ready: bool,
    /// Whether the startup probe (if any) has passed: `started` in the status.
    pub(crate) started: bool,
    /// Set when it will not run again (restartPolicy said so, or the pod is stopping).
    pub(crate) finished: bool,
    pub(crate) container_id: String,
}

impl ContainerRecord {
    pub(crate) fn new(name: &str, image: &str, waiting_reason: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            state: State::waiting(waiting_reason, ""),
            last_state: None,
            restart_count: 0,
            ready: false,
            started: false,
            finished: false,
            container_id: String::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut status = json!({
            "name": self.name, "image": self.image,
            "imageID": format!("sandbox://{}", self.image),
            "ready": self.ready, "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state.to_json(),
            "lastState": self.last_state.as_ref().map(State::to_json).unwrap_or_else(|| json!({}))
        });
        if !self.container_id.is_empty() {
            status["containerID"] = json!(self.container_id);
        }
        status
    }

    fn succeeded(&self) -> bool {
        matches!(self.state, State::Terminated { exit_code: 0, .. })
    }

    /// Waiting without ever having run: still being created (or unable to be).
    fn never_ran(&self) -> bool {
        matches!(self.state, State::Waiting { .. }) && self.last_state.is_none()
    }
}

/// The whole pod as the kubelet tracks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PodRecord {
    pub(crate) pod_ip: Option<Ipv4Addr>,
    pub(crate) start_time: String,
    pub(crate) init: Vec<ContainerRecord>,
    pub(crate) main: Vec<ContainerRecord>,
    pub(crate) initialized: bool,
    /// An init container failed under `restartPolicy: Never`: the pod has failed for good.
    pub(crate) init_failed: bool,
}

impl PodRecord {
    /// The pod phase by the kubelet's rules (getPhase), simplified to what the sandbox runs.
    pub(crate) fn phase(&self) -> &'static str {
        if self.init_failed {
            return "Failed";
        }
        if !self.initialized || self.main.iter().any(ContainerRecord::never_ran) {
            return "Pending";
        }
        if self.main.iter().all(|c| c.finished) {
            return if self.main.iter().all(ContainerRecord::succeeded) {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        "Running"
    }

    /// The status object; `previous` keeps each condition's lastTransitionTime while it holds.
    pub(crate) fn to_status(&self, previous: &Value, now: &str) -> Value {
        let all_ready = !self.main.is_empty() && self.main.iter().all(|c| c.ready);
        let names = |containers: &[ContainerRecord], keep: &dyn Fn(&ContainerRecord) -> bool| {
            let names: Vec<&str> = containers
                .iter()
                .filter(|c| keep(c))
                .map(|c| c.name.as_str())
                .collect();
            format!("[{}]", names.join(" "))
        };
        let condition = |kind: &str, status: bool, reason: &str, message: String| {
            let status = if status { "True" } else { "False" };
            let since = previous["conditions"]
                .as_array()
                .and_then(|all| {
                    all.iter()
                        .find(|c| c["type"] == kind && c["status"] == status)
                })
                .and_then(|c| c["lastTransitionTime"].as_str())
                .unwrap_or(now)
                .to_string();
            let mut condition =
                json!({"type": kind, "status": status, "lastTransitionTime": since});
            if status == "False" {
                condition["reason"] = json!(reason);
                condition["message"] = json!(message);
            }
            condition
        };
        let unready = format!(
            "containers with unready status: {}",
            names(&self.main, &|c| !c.ready)
        );
        let uninitialized = format!(
            "containers with incomplete status: {}",
            names(&self.init, &|c| !c.succeeded())
        );
        let mut status = json!({
            "phase": self.phase(),
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "startTime": self.start_time,
            "qosClass": "BestEffort",
            "conditions": [
                condition("PodReadyToStartContainers", self.pod_ip.is_some(), "", String::new()),
                condition("Initialized", self.initialized, "ContainersNotInitialized", uninitialized),
                condition("Ready", all_ready, "ContainersNotReady", unready.clone()),
                condition("ContainersReady", all_ready, "ContainersNotReady", unready),
                condition("PodScheduled", true, "", String::new()),
            ],
            "containerStatuses": self.main.iter().map(ContainerRecord::to_json).collect::<Vec<_>>(),
        });
        if !self.init.is_empty() {
            status["initContainerStatuses"] = json!(self
                .init
                .iter()
                .map(ContainerRecord::to_json)
                .collect::<Vec<_>>());
        }
        if let Some(ip) = self.pod_ip {
            status["podIP"] = json!(ip.to_string());
            status["podIPs"] = json!([{"ip": ip.to_string()}]);
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> PodRecord {
        PodRecord {
            pod_ip: Some(Ipv4Addr::new(127, 9, 0, 2)),
            start_time: "2025-01-01T00:00:00Z".into(),
            init: vec![ContainerRecord::new(
                "clone",
                "postgres:16",
                "PodInitializing",
            )],
            main: vec![ContainerRecord::new(
                "postgres",
                "postgres:16",
                "PodInitializing",
            )],
            initialized: false,
            init_failed: false,
        }
    }

    #[test]
    fn a_pod_is_pending_until_initialised_and_running_once_its_container_runs() {
        let mut pod = record();
        assert_eq!(pod.phase(), "Pending");
        let status = pod.to_status(&Value::Null, "t1");
        assert_eq!(status["conditions"][1]["status"], "False");
        assert_eq!(
            status["conditions"][1]["message"],
            "containers with incomplete status: [clone]"
        );
        pod.initialized = true;
        pod.init[0].state = State::exited(0, "t0".into(), "t1".into());
        pod.main[0].state = State::Running {
            started_at: "t1".into(),
        };
        assert_eq!(pod.phase(), "Running");
        pod.main[0].ready = true;
        let ready = pod.to_status(&status, "t2");
        assert_eq!(ready["conditions"][2]["status"], "True");
        assert_eq!(ready["conditions"][2]["lastTransitionTime"], "t2");
        assert_eq!(ready["conditions"][4]["lastTransitionTime"], "t1");
        assert_eq!(
            ready["initContainerStatuses"][0]["state"]["terminated"]["reason"],
            "Completed"
        );
        assert_eq!(ready["podIP"], "127.9.0.2");
    }

    #[test]
    fn a_crash_looping_container_keeps_the_pod_running_and_finished_ones_end_it() {
        let mut pod = record();
        pod.initialized = true;
        pod.main[0].last_state = Some(State::exited(1, "a".into(), "b".into()));
        pod.main[0].state = State::waiting("CrashLoopBackOff", "back-off 10s");
        assert_eq!(pod.phase(), "Running");
        pod.main[0].state = State::exited(1, "a".into(), "b".into());
        pod.main[0].finished = true;
        assert_eq!(pod.phase(), "Failed");
        pod.main[0].state = State::exited(0, "a".into(), "b".into());
        assert_eq!(pod.phase(), "Succeeded");
    }

    #[test]
    fn the_message_file_wins_and_the_log_stands_in_only_for_a_failure() {
        let log = b"starting\nERROR: no such file\n";
        assert_eq!(termination_message(Some(b"done\n"), log, true, 1), "done\n");
        assert_eq!(
            termination_message(Some(b""), log, true, 1),
            "starting\nERROR: no such file\n"
        );
        assert_eq!(
            termination_message(None, log, true, 2),
            "starting\nERROR: no such file\n"
        );
        assert_eq!(termination_message(Some(b""), log, true, 0), "");
        assert_eq!(termination_message(Some(b""), log, false, 1), "");
        let big = vec![b'x'; MESSAGE_FILE_BYTES + 10];
        assert_eq!(
            termination_message(Some(&big), log, false, 0).len(),
            MESSAGE_FILE_BYTES
        );
    }

    #[test]
    fn the_log_fallback_keeps_the_last_80_lines_within_2_kib() {
        let many: String = (1..=100).map(|i| format!("{i}\n")).collect();
        let message = termination_message(None, many.as_bytes(), true, 1);
        assert_eq!(message.lines().count(), 80);
        assert!(
            message.starts_with("21\n") && message.ends_with("100\n"),
            "{message}"
        );
        let long: String = (1..=10)
            .map(|i| format!("{i} {}\n", "y".repeat(400)))
            .collect();
        let message = termination_message(None, long.as_bytes(), true, 1);
        assert_eq!(message.len(), MESSAGE_LOG_BYTES);
        assert!(message.ends_with(&format!("10 {}\n", "y".repeat(400))));
    }
}
