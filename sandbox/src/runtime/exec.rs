//! `kubectl exec`: one more process in a running container's jail, with its standard streams
//! piped to the caller (`remotecommand.rs` carries them over the WebSocket).
//!
//! WORKSHOP.md, "Set-up: the sandbox". The process gets what the container's own process gets
//! (the same mounts, environment, user, hostname, /tmp and /run, so `psql` finds postgres'
//! socket in /run/postgresql), in a bwrap of its own: its own PID namespace, where a container
//! runtime would join the container's. With `tty`, it runs under `script` from util-linux,
//! which gives it a pseudo-terminal without any terminal code here; the terminal's size is set
//! once, at start, from the first resize message (later resizes are not passed on).

use std::path::PathBuf;

use serde_json::Value;
use tokio::process::Child;

use super::container;
use super::jail::Jail;
use super::process::{self, Place};
use super::status::State;
use super::Node;
use crate::errors::ApiError;
use crate::sync::lock;

/// `script` ships with util-linux, on every machine bubblewrap runs on; inside the jail it is
/// the host's own, in the /usr every container's root binds read-only.
const SCRIPT: &str = "script";

/// What `GET .../pods/NAME/exec?command=...&container=...&stdin=...&tty=...` asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExecRequest {
    pub(crate) container: Option<String>,
    pub(crate) command: Vec<String>,
    pub(crate) stdin: bool,
    pub(crate) stdout: bool,
    pub(crate) stderr: bool,
    pub(crate) tty: bool,
}

impl ExecRequest {
    /// Parse the raw query: `command` repeats, once per argument, so no map will do.
    pub(crate) fn from_query(query: &str) -> ExecRequest {
        let mut request = ExecRequest::default();
        for (name, value) in url::form_urlencoded::parse(query.as_bytes()) {
            let flag = value == "true" || value == "1";
            match name.as_ref() {
                "command" => request.command.push(value.into_owned()),
                "container" if !value.is_empty() => request.container = Some(value.into_owned()),
                "stdin" => request.stdin = flag,
                "stdout" => request.stdout = flag,
                "stderr" => request.stderr = flag,
                "tty" => request.tty = flag,
                _ => {}
            }
        }
        request
    }
}

/// An exec that can start: the container's jail and environment, and the command.
pub(crate) struct PreparedExec {
    bwrap: PathBuf,
    jail: Jail,
    env: Vec<(String, String)>,
    host_user: Option<(u32, u32)>,
    command: Vec<String>,
    stdin: bool,
    tty: bool,
}

/// Check that `request` can run in `pod` (a running, non-simulated container) and plan it.
pub(crate) fn prepare(
    node: &Node,
    pod: &Value,
    request: &ExecRequest,
) -> Result<PreparedExec, ApiError> {
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if request.command.is_empty() {
        // kube-apiserver's own answer to an exec without a command.
        return Err(ApiError::bad_request("you must specify at least 1 command"));
    }
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    let worker = lock(&node.pods).get(uid).cloned().ok_or_else(|| {
        ApiError::bad_request(format!("pod {pod_name} is not running on this node"))
    })?;
    if worker.silent.is_cancelled() {
        // kube-apiserver proxies an exec to the pod's kubelet; on a lost node nothing answers.
        // It fails only after its dial timeout (30 s); the sandbox answers at once.
        return Err(ApiError::internal(format!(
            "error dialing backend: dial tcp: the kubelet of pod {pod_name}'s node does not answer (i/o timeout)"
        )));
    }
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let name = match &request.container {
        Some(name) => name.clone(),
        None => containers
            .first()
            .and_then(|c| c["name"].as_str())
            .unwrap_or_default()
            .to_string(),
    };
    let Some(index) = containers.iter().position(|c| c["name"] == name.as_str()) else {
        return Err(ApiError::bad_request(format!(
            "container {name} is not valid for pod {pod_name}"
        )));
    };
    let (running, simulated) = {
        let record = lock(&worker.record);
        let container = record.main.get(index);
        (
            container.is_some_and(|c| matches!(c.state, State::Running { .. })),
            container.is_some_and(|c| c.container_id.starts_with("sandbox://simulated-")),
        )
    };
    if !running {
        // What the kubelet answers for a container that is not running (yet, or any more).
        return Err(ApiError::bad_request(format!(
            "unable to upgrade connection: container not found (\"{name}\")"
        )));
    }
    if simulated {
        return Err(ApiError::bad_request(format!(
            "container {name} of pod {pod_name} is simulated: no process runs for its image, so there is nothing to exec into (see the pod's events)"
        )));
    }
    let plan = container::plan(node, &worker, &containers[index])
        .map_err(|blocked| ApiError::bad_request(blocked.message().to_string()))?;
    Ok(PreparedExec {
        bwrap: node.config.tools.bwrap.clone(),
        jail: plan.jail,
        env: plan.env,
        host_user: worker.host_user,
        command: request.command.clone(),
        stdin: request.stdin,
        tty: request.tty,
    })
}

impl PreparedExec {
    /// Start it; `size` is the terminal's (columns, rows), when the client has sent one.
    pub(crate) fn spawn(self, size: Option<(u16, u16)>) -> std::io::Result<Child> {
        let mut env = self.env;
        let argv = if self.tty {
            // Container runtimes set TERM for a TTY; psql and less want one.
            if !env.iter().any(|(k, _)| k == "TERM") {
                env.push(("TERM".into(), "xterm".into()));
            }
            tty_argv(&self.command, size)
        } else {
            self.command
        };
        // A jail of its own, not the container's namespaces as the probes enter them
        // (`enter.rs`): a command there outside the container's PID namespace would find no
        // /proc/self, and one inside it, left behind when kubectl hangs up, would end as a
        // child of the container's PID 1, which postgres takes for a crashed backend.
        let place = Place {
            bwrap: &self.bwrap,
            jail: &self.jail,
            enter: None,
        };
        process::spawn_piped(&place, &argv, &env, self.host_user, self.stdin)
    }
}

/// `command` under `script`, which runs it on a new pseudo-terminal and relays the pipes to it;
/// `-e` makes script exit with the command's exit code.
fn tty_argv(command: &[String], size: Option<(u16, u16)>) -> Vec<String> {
    let quoted: Vec<String> = command.iter().map(|arg| shell_quote(arg)).collect();
    let mut line = String::new();
    // A client without a real terminal reports 0×0: leave the pty's default then.
    if let Some((columns, rows)) = size.filter(|(c, r)| *c > 0 && *r > 0) {
        line.push_str(&format!("stty cols {columns} rows {rows} 2>/dev/null; "));
    }
    line.push_str("exec ");
    line.push_str(&quoted.join(" "));
    vec![
        SCRIPT.into(),
        "-q".into(),
        "-e".into(),
        "-c".into(),
        line,
        "/dev/null".into(),
    ]
}

/// One shell word: single quotes around everything, each `'` written as `'\''`.
fn shell_quote(arg: &str) -> String {
    format!("'{}'", arg.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_keeps_every_command_argument_in_order() {
        let request = ExecRequest::from_query(
            "command=psql&command=-U&command=postgres&command=-c&command=select+1&container=postgres&stdin=true&stdout=true&tty=false",
        );
        assert_eq!(
            request.command,
            ["psql", "-U", "postgres", "-c", "select 1"]
        );
        assert_eq!(request.container.as_deref(), Some("postgres"));
        assert!(request.stdin && request.stdout && !request.stderr && !request.tty);
    }

    #[test]
    fn a_tty_command_runs_under_script_with_its_words_quoted() {
        let argv = tty_argv(
            &["sh".into(), "-c".into(), "echo 'hi'".into()],
            Some((120, 40)),
        );
        assert_eq!(&argv[..4], ["script", "-q", "-e", "-c"]);
        assert_eq!(
            argv[4],
            r#"stty cols 120 rows 40 2>/dev/null; exec 'sh' '-c' 'echo '\''hi'\'''"#
        );
        assert_eq!(argv[5], "/dev/null");
    }
}
