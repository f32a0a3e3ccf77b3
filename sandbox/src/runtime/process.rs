//! One process in a jail: start it under bwrap as the pod's user, signal it, wait for it.
//!
//! WORKSHOP.md, "Set-up: the sandbox". bwrap stays as the parent of the jailed command (it
//! reports the command's exit code as its own), so signals go to the command itself — the
//! container's PID 1, as containerd signals it: a PID 1 without a handler for the stop signal
//! (plain `sh`) ignores it and is killed when the grace period ends, exactly as in a cluster.

use std::ffi::OsString;
use std::fs::File;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::enter::Namespaces;
use super::jail::Jail;

/// Linux signal numbers (the same on every Linux architecture the sandbox runs on).
pub(crate) const SIGINT: i32 = 2;
pub(crate) const SIGTERM: i32 = 15;
pub(crate) const SIGKILL: i32 = 9;
pub(crate) const SIGSTOP: i32 = 19;
pub(crate) const SIGCONT: i32 = 18;

extern "C" {
    /// kill(2) from the C library std already links; the allowed crates offer no safe wrapper.
    fn kill(pid: i32, signal: i32) -> i32;
}

/// Send `signal` to process `pid`; false if it is gone.
fn send_signal(pid: u32, signal: i32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a positive pid never
    // addresses a process group, so a stale pid can at worst signal an unrelated process, which
    // the caller avoids by only signalling children it has not yet reaped.
    unsafe { kill(pid, signal) == 0 }
}

/// The children of `pid`, from every one of its threads' `/proc/PID/task/TID/children`
/// (empty if it is gone).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    threads
        .flatten()
        .filter_map(|thread| std::fs::read_to_string(thread.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|child| child.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Every descendant of `root` alive now (not `root` itself), parents before children.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let mut pending = children_of(root);
    while let Some(pid) = pending.pop() {
        if found.contains(&pid) {
            continue;
        }
        found.push(pid);
        pending.extend(children_of(pid));
    }
    found
}

/// Send `signal` to every descendant of `root` (not `root` itself: bwrap, the runtime's shim),
/// parents before children, and return how many were signalled. For SIGSTOP the tree is walked
/// again until a walk finds no process it has not stopped yet: a parent stopped mid-`fork` may
/// leave a child that the first walk did not see, and a stopped parent forks no more.
pub(crate) fn signal_descendants(root: u32, signal: i32) -> usize {
    let mut signalled = std::collections::HashSet::new();
    // A bound on the walks, in case pids are recycled faster than they are stopped.
    for _ in 0..10 {
        let mut found_new = false;
        let mut pending = children_of(root);
        while let Some(pid) = pending.pop() {
            if signalled.insert(pid) {
                found_new = true;
                send_signal(pid, signal);
            }
            pending.extend(children_of(pid));
        }
        if !found_new || signal != SIGSTOP {
            break;
        }
    }
    signalled.len()
}

/// A started process.
pub(crate) struct Jailed {
    child: Child,
    bwrap_pid: Option<u32>,
}

/// Start `argv` in `jail` with exactly `env`, output appended to `log` (or discarded).
pub(crate) fn spawn(
    bwrap: &Path,
    jail: &Jail,
    argv: &[String],
    env: &[(String, String)],
    run_as_host_user: Option<(u32, u32)>,
    log: Option<&File>,
) -> std::io::Result<Jailed> {
    let mut command = jailed_command(bwrap, jail, argv, env, run_as_host_user);
    command.stdin(Stdio::null());
    match log {
        Some(file) => {
            command.stdout(Stdio::from(file.try_clone()?));
            command.stderr(Stdio::from(file.try_clone()?));
        }
        None => {
            command.stdout(Stdio::null());
            command.stderr(Stdio::null());
        }
    }
    let child = command.spawn()?;
    let bwrap_pid = child.id();
    Ok(Jailed { child, bwrap_pid })
}

/// Where one more process of a container runs: inside the running container whose bwrap's
/// PID is `enter` (`enter.rs`), else (none yet, or its namespaces cannot be entered: bwrap is
/// still building them) in a bwrap jail of its own, built like the container's.
pub(crate) struct Place<'a> {
    pub(crate) bwrap: &'a Path,
    pub(crate) jail: &'a Jail,
    pub(crate) enter: Option<u32>,
}

/// Start `argv` at `place` with exactly `env`, as the pod's user, set up by `configure`.
fn spawn_at(
    place: &Place,
    argv: &[String],
    env: &[(String, String)],
    run_as_host_user: Option<(u32, u32)>,
    configure: impl Fn(&mut Command),
) -> std::io::Result<Child> {
    if let Some(bwrap_pid) = place.enter {
        let entered = Jailed::command_pid_of(bwrap_pid)
            .ok_or_else(|| std::io::Error::other("the container has no process"))
            .and_then(Namespaces::of)
            .and_then(|namespaces| {
                let (program, args) = argv
                    .split_first()
                    .ok_or_else(|| std::io::Error::other("an empty command"))?;
                let mut command = Command::new(program);
                command.args(args.iter().map(OsString::from));
                namespaces.enter_on_spawn(&mut command, place.jail.working_dir.as_deref())?;
                settle(&mut command, env, run_as_host_user);
                configure(&mut command);
                command.spawn()
            });
        match entered {
            Ok(child) => return Ok(child),
            Err(error) => tracing::debug!("an exec in a jail of its own, not entered: {error}"),
        }
    }
    let mut command = jailed_command(place.bwrap, place.jail, argv, env, run_as_host_user);
    configure(&mut command);
    command.spawn()
}

/// `bwrap ARGS -- ARGV` with exactly `env`, as the pod's user, killed with its handle.
fn jailed_command(
    bwrap: &Path,
    jail: &Jail,
    argv: &[String],
    env: &[(String, String)],
    run_as_host_user: Option<(u32, u32)>,
) -> Command {
    let mut command = Command::new(bwrap);
    command.args(jail.bwrap_args());
    command.arg("--");
    command.args(argv.iter().map(OsString::from));
    settle(&mut command, env, run_as_host_user);
    command
}

/// Exactly `env`, as the pod's user, in its own process group, killed with its handle.
fn settle(command: &mut Command, env: &[(String, String)], run_as_host_user: Option<(u32, u32)>) {
    command.env_clear();
    command.envs(env.iter().map(|(k, v)| (k, v)));
    // When the sandbox runs as root, bwrap itself starts as the pod's user: it then needs no
    // privilege at all (an unprivileged user namespace), and nothing in the pod is ever root.
    if let Some((uid, gid)) = run_as_host_user {
        command.uid(uid).gid(gid);
    }
    // Its own process group: Ctrl-C in the sandbox's terminal goes to the sandbox only, which
    // then stops pods in order rather than having every postgres see SIGINT at once.
    command.process_group(0);
    // If this handle is dropped (the sandbox's runtime ends without a clean stop, an exec's
    // caller hangs up, a probe times out), SIGKILL the process; for a bwrap, --die-with-parent
    // then takes the jailed processes down.
    command.kill_on_drop(true);
}

/// Start `argv` at `place` with stdout and stderr piped to the caller: `kubectl exec`.
pub(crate) fn spawn_piped(
    place: &Place,
    argv: &[String],
    env: &[(String, String)],
    run_as_host_user: Option<(u32, u32)>,
    stdin: bool,
) -> std::io::Result<Child> {
    spawn_at(place, argv, env, run_as_host_user, |command| {
        command.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        command.stdout(Stdio::piped());
        command.stderr(Stdio::piped());
    })
}

/// Like [`spawn`], with output captured: for probes and one-off commands.
pub(crate) async fn run_captured(
    place: &Place<'_>,
    argv: &[String],
    env: &[(String, String)],
    run_as_host_user: Option<(u32, u32)>,
    timeout: Duration,
) -> std::io::Result<(Option<i32>, String)> {
    if let Some(bwrap_pid) = place.enter {
        // A container just started may still be bwrap building its jail: what a probe would
        // enter then is half made. The kubelet's runtime execs only into a started process.
        for _ in 0..100 {
            if Jailed::started(bwrap_pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let child = spawn_at(place, argv, env, run_as_host_user, |command| {
        command.stdin(Stdio::null());
        command.stdout(Stdio::piped());
        command.stderr(Stdio::piped());
    })?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(output) => {
            let output = output?;
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            Ok((output.status.code(), text))
        }
        // Dropping the future drops the child: kill_on_drop ends it.
        Err(_) => Ok((
            None,
            format!("command timed out after {}s", timeout.as_secs()),
        )),
    }
}

impl Jailed {
    /// bwrap's PID: the root of the container's process tree, as the host sees it.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.bwrap_pid
    }

    /// The jailed command's PID as the host sees it: bwrap's only child.
    fn command_pid(&self) -> Option<u32> {
        Jailed::command_pid_of(self.bwrap_pid?)
    }

    /// Has the bwrap whose PID is `pid` started its command? Its child runs bwrap's own code
    /// (its `comm` is `bwrap`) until it execs the command, its jail finished.
    fn started(pid: u32) -> bool {
        Jailed::command_pid_of(pid)
            .and_then(|child| std::fs::read_to_string(format!("/proc/{child}/comm")).ok())
            .is_some_and(|comm| comm.trim_end() != "bwrap")
    }

    /// The command's PID of the bwrap whose PID is `pid`.
    fn command_pid_of(pid: u32) -> Option<u32> {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    /// Send the image's stop signal (`signal`) to the command (the container's PID 1). Before
    /// bwrap has started it there is nothing to ask politely: bwrap is killed, and the command
    /// with it.
    pub(crate) fn terminate(&mut self, signal: i32) {
        match self.command_pid() {
            Some(pid) => {
                send_signal(pid, signal);
            }
            None => {
                let _ = self.child.start_kill();
            }
        }
    }

    /// SIGKILL the command, then bwrap: nothing of the container survives.
    pub(crate) fn kill(&mut self) {
        if let Some(pid) = self.command_pid() {
            send_signal(pid, SIGKILL);
        }
        let _ = self.child.start_kill();
    }

    /// Wait for the process to end: its exit code, or 128 + the signal that killed it (what
    /// Kubernetes reports as `exitCode`, e.g. 137 for SIGKILL).
    pub(crate) async fn wait(&mut self) -> i32 {
        match self.child.wait().await {
            Ok(status) => exit_code(status),
            Err(_) => 128 + SIGKILL,
        }
    }

    /// The stop signal (`signal`), up to `grace` to exit, then SIGKILL. Returns the exit code.
    pub(crate) async fn stop(&mut self, grace: Duration, signal: i32) -> i32 {
        self.terminate(signal);
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(Ok(status)) => exit_code(status),
            _ => {
                self.kill();
                self.wait().await
            }
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(128 + SIGKILL)
}
