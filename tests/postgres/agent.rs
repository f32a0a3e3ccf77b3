//! The readiness agent's binary, `pg-ready`, as a container runs it: PID 1 of a PID namespace of
//! its own (bubblewrap, as the sandbox runs every container). `src/postgres/agent.rs` has its
//! answers' tests; every test here that starts a member pod probes through it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The kernel gives a PID 1 no default action for SIGTERM or SIGINT: without handlers of its
/// own the agent would ignore the kubelet's stop signal, and every deleted member pod would
/// wait out its grace period (a primary's delete took 20 s, the operator's stop timeout,
/// instead of half a second). It exits 0 on either.
#[test]
fn as_pid_1_the_agent_stops_on_the_stop_signal() {
    let bwrap = test_support::process_runtime().tools.bwrap.clone();
    for signal in ["TERM", "INT"] {
        let mut agent = Command::new(&bwrap)
            .args(["--unshare-pid", "--as-pid-1", "--dev-bind", "/", "/", "--"])
            .args([
                env!("CARGO_BIN_EXE_pg-ready"),
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "info")
            .stderr(Stdio::piped())
            .spawn()
            .expect("bwrap starts");
        // Its first line comes once the handlers are in place.
        // Kept open to the end, as a container's log is.
        let mut stderr = BufReader::new(agent.stderr.take().expect("stderr"));
        let mut first = String::new();
        stderr.read_line(&mut first).expect("a line");
        assert!(first.contains("answering GET /readyz"), "{first}");
        // bwrap stays outside, the namespace's PID 1 is its one child: signal that one, as a
        // container runtime signals a container's PID 1.
        let children = format!("/proc/{0}/task/{0}/children", agent.id());
        let pid1 = std::fs::read_to_string(&children).expect("bwrap's children");
        let pid1 = pid1.split_whitespace().next().expect("one child");
        let status = Command::new("kill")
            .args([&format!("-{signal}"), pid1])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let (sender, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(agent.wait());
        });
        let status = exited
            .recv_timeout(Duration::from_secs(10))
            .expect("the agent stops within 10 s of SIG{signal}")
            .expect("waited");
        assert!(status.success(), "SIG{signal}: {status}");
    }
}
