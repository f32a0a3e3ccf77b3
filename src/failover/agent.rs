//! Support: skip it on first read — the readiness agent beside each postgres server.
//!
//! WORKSHOP.md, step 05 ("Probes that cost nothing"). Ready decides which pods the
//! Services send traffic to, and a primary that stays unready is failed over: the readiness
//! probe is the operator's detector of a hung primary (its processes stopped: TCP still accepts,
//! only a query notices), so it runs every 2 s. An `exec` probe of `pg_isready` would start a
//! process in the container and make the server fork a backend every time.
//!
//! `pg-ready` (`src/bin/pg-ready.rs`) keeps one `psql` session open and answers the kubelet's
//! `GET /readyz` with `200` when that session answers `SELECT n;` within the deadline, `503` and
//! the reason otherwise. A probe is then one HTTP request and one query on a backend that is
//! already there. It starts a new `psql` when the last one ended (the server restarted, a
//! deadline passed), so a probe says what `pg_isready` said: the server accepts connections and
//! answers. `GET /livez` is the liveness probe's: alive when the session answers, or else when
//! `pg_isready` (run only then) finds the postmaster there at all, accepting or not (a replica
//! replaying WAL rejects connections and is alive). It holds no Postgres client of its own:
//! `psql`, the server's own client, speaks the protocol, as it does for every `pods/exec` of the
//! operator.
//!
//! Plain threads and the standard library, no async runtime, no HTTP library (the binary's one
//! tokio thread only waits for the stop signal): it answers one request at a time, the kubelet's
//! two probes, and costs the node little even as the debug build `cargo run` makes. Every read is
//! bounded in time and size.
//!
//! How it gets into a member pod, as CloudNativePG's instance manager does: an init container of
//! the operator's image (which has no shell) runs `/pg-ready install /agent/pg-ready`, a copy of
//! itself into an emptyDir; a second container, `ready`, of the postgres image (which has
//! `psql`) runs it from there (`manifests.rs`). A container of its own rather than a process
//! started beside postgres: the postgres container's PID 1 is the postmaster, which takes the
//! death of any child it did not start, with an exit code other than 0 or 1, for a crashed
//! backend.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The port the agent listens on in every member pod (Patroni's REST API uses the same).
pub const AGENT_PORT: u16 = 8008;
/// The path of its readiness answer, and of its liveness answer.
pub const READY_PATH: &str = "/readyz";
pub const LIVE_PATH: &str = "/livez";
/// Where the operator's image holds the binary (the Dockerfile copies it there).
pub const IMAGE_BINARY: &str = "/pg-ready";
/// The emptyDir the init container copies it into, as the `ready` container mounts it.
pub const AGENT_DIR: &str = "/agent";
/// The copy the `ready` container runs.
pub const AGENT_BINARY: &str = "/agent/pg-ready";
/// How long one probe's query may take. Under the kubelet's one-second `timeoutSeconds`, so a
/// server that does not answer is this agent's `503` with the reason, not a probe timed out.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(800);
/// How long a session that ended waits before it starts again within one probe's deadline.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(100);
/// How long a request's head may take to arrive, and its most bytes: the kubelet sends ~150.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
pub const MAX_REQUEST_BYTES: usize = 4096;

/// `psql` as the session runs it: no `.psqlrc` (-X), quiet (-q), unaligned tuples only (-A -t),
/// so `SELECT 7;` prints `7` on a line of its own, and never a password prompt (-w), which
/// would read the queries meant for the server. Where to connect comes from libpq's variables
/// (`PGHOST`, `PGUSER`, `PGPASSWORD`, ...), which the `ready` container's env sets.
const PSQL: [&str; 6] = ["psql", "-X", "-q", "-A", "-t", "-w"];
/// Exit 0 (accepting) or 1 (rejecting: starting, replaying WAL, stopping): the postmaster is
/// there. `-t 2`: within the liveness probe's timeout.
const ALIVE: [&str; 4] = ["pg_isready", "-q", "-t", "2"];

/// Copy this executable to `destination` (through a temporary name beside it, renamed at the
/// end, so a container never starts a half-written binary), executable by everyone.
pub fn install(destination: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let source = std::env::current_exe()?;
    let partial = destination.with_extension("partial");
    std::fs::copy(&source, &partial)?;
    std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&partial, destination)
}

/// One long-lived `psql`, asked `SELECT n;` for each probe.
pub struct Session {
    program: Vec<String>,
    deadline: Duration,
    open: Option<Psql>,
    asked: u64,
    /// The last answer, to log changes only (a probe every 2 s would fill the log).
    last: Option<Result<(), String>>,
}

impl Session {
    /// A session of `psql` (see [`PSQL`]) with this deadline per probe; nothing starts yet.
    pub fn new(deadline: Duration) -> Session {
        Session::of(PSQL.iter().map(|s| s.to_string()).collect(), deadline)
    }

    /// A session of `program` (argv), which must answer `SELECT n;` on stdin with `n` on a line
    /// of its own on stdout, as `psql -A -t` does.
    pub fn of(program: Vec<String>, deadline: Duration) -> Session {
        Session {
            program,
            deadline,
            open: None,
            asked: 0,
            last: None,
        }
    }

    /// Ask the server: Ok when it answered within the deadline, else why not. A session that
    /// failed is ended (killed and reaped). One that ended (no server yet, a server restarting)
    /// is started again every [`RECONNECT_PAUSE`] while the deadline allows: the kubelet asks
    /// once the startup probe passed, then every 2 s, so a postmaster still refusing sessions
    /// then (replaying WAL up to a consistent state) is Ready within that probe, not 2 s later.
    pub fn ask(&mut self) -> Result<(), String> {
        self.asked += 1;
        let until = Instant::now() + self.deadline;
        let outcome = loop {
            let outcome = match &mut self.open {
                Some(psql) => psql.ask(self.asked, until),
                open => Psql::start(&self.program)
                    .and_then(|psql| open.insert(psql).ask(self.asked, until)),
            };
            match outcome {
                // A pause, and as long again for the next psql to start and be refused: the
                // kubelet gives up on the whole answer after 1 s.
                Err(Why::Said(_)) if Instant::now() + 2 * RECONNECT_PAUSE < until => {
                    self.open = None;
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                outcome => break outcome,
            }
        };
        let outcome = outcome.map_err(|why| match why {
            Why::Late => format!(
                "postgres did not answer within {} ms",
                self.deadline.as_millis()
            ),
            Why::Said(why) => why,
        });
        if outcome.is_err() {
            self.open = None;
        }
        if self.last.as_ref() != Some(&outcome) {
            match &outcome {
                Ok(()) => tracing::info!("ready: postgres answers"),
                Err(why) => tracing::warn!("not ready: {why}"),
            }
            self.last = Some(outcome.clone());
        }
        outcome
    }
}

/// Why a question went unanswered.
enum Why {
    Late,
    Said(String),
}

/// A running `psql`: its stdin, its stdout's lines from a thread of their own (so a read can
/// have a deadline), and its stderr's last message.
struct Psql {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    said: Arc<Mutex<String>>,
    stderr: Option<JoinHandle<()>>,
}

impl Psql {
    fn start(program: &[String]) -> Result<Psql, Why> {
        let (name, args) = program
            .split_first()
            .ok_or_else(|| Why::Said("no program to run".into()))?;
        let mut child = Command::new(name)
            .args(args)
            .env("PGAPPNAME", "pg-ready")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| Why::Said(format!("cannot start {name}: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Why::Said(format!("{name} started without its pipes")));
        };
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            // A line of psql's is a number; a longer one is cut, not buffered without end.
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            while (&mut stdout)
                .take(64)
                .read_line(&mut line)
                .is_ok_and(|n| n > 0)
            {
                if sender.send(std::mem::take(&mut line)).is_err() {
                    return;
                }
            }
        });
        let said = Arc::new(Mutex::new(String::new()));
        let last = Arc::clone(&said);
        let stderr = std::thread::spawn(move || {
            // Its last message, without the indented hint lines under it. Everything is read,
            // so psql never blocks on a full pipe; a line is kept to its first 1 KB.
            let mut stderr = BufReader::new(stderr);
            let mut line = Vec::new();
            while (&mut stderr)
                .take(1024)
                .read_until(b'\n', &mut line)
                .is_ok_and(|n| n > 0)
            {
                let text = String::from_utf8_lossy(&line);
                if !text.trim().is_empty() && !text.starts_with(char::is_whitespace) {
                    if let Ok(mut last) = last.lock() {
                        *last = text.trim_end().to_string();
                    }
                }
                line.clear();
            }
        });
        Ok(Psql {
            child,
            stdin,
            lines,
            said,
            stderr: Some(stderr),
        })
    }

    /// `SELECT asked;` and wait until `until` for the line `asked`. Lines before it (an answer
    /// to an earlier probe that gave up) are skipped.
    fn ask(&mut self, asked: u64, until: Instant) -> Result<(), Why> {
        if writeln!(self.stdin, "SELECT {asked};").is_err() {
            return Err(Why::Said(self.why_it_ended()));
        }
        let expected = asked.to_string();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.trim_end() == expected => return Ok(()),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => return Err(Why::Late),
                Err(RecvTimeoutError::Disconnected) => return Err(Why::Said(self.why_it_ended())),
            }
        }
    }

    /// What psql said before it ended (it cannot connect, the server went away). Its stdout
    /// closed, so it has ended (the kill only makes sure); then its stderr is at its end too.
    fn why_it_ended(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(stderr) = self.stderr.take() {
            let _ = stderr.join();
        }
        let said = self.said.lock().map(|s| s.clone()).unwrap_or_default();
        if said.is_empty() {
            "psql ended without a word".to_string()
        } else if said.starts_with("psql: ") {
            said
        } else {
            format!("psql: {said}")
        }
    }
}

impl Drop for Psql {
    /// A psql stuck on a server that does not answer is killed, and reaped.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Answer on `listener`, one request at a time, for ever: `/readyz` from `session`, `/livez`
/// from it or else from `alive` (argv; [`ALIVE`] in a pod).
pub fn serve(listener: &TcpListener, session: &mut Session, alive: &[String]) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                if let Err(error) = answer(stream, session, alive) {
                    tracing::debug!(%error, "pg-ready: a request failed");
                }
            }
            // Out of file descriptors, most likely: wait a little rather than spin.
            Err(error) => {
                tracing::warn!(%error, "pg-ready: accept failed");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The argv of the liveness fallback in a pod.
pub fn pg_isready() -> Vec<String> {
    ALIVE.iter().map(|s| s.to_string()).collect()
}

/// Read one request's head (bounded), answer it, close.
fn answer(mut stream: TcpStream, session: &mut Session, alive: &[String]) -> io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let started = Instant::now();
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= MAX_REQUEST_BYTES || started.elapsed() > REQUEST_TIMEOUT {
            respond(&mut stream, 431, "request head too large or too slow\n")?;
            // Closed with unread bytes, the socket would reset the connection and the client
            // might lose the answer: end ours, then read what it still sends (1 s, 64 KB).
            stream.shutdown(Shutdown::Write)?;
            let _ = io::copy(&mut (&stream).take(65536), &mut io::sink());
            return Ok(());
        }
        let read = stream.read(&mut buffer)?;
        if read == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buffer[..read]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return respond(&mut stream, 405, "only GET and HEAD\n");
    }
    match path {
        READY_PATH => match session.ask() {
            Ok(()) => respond(&mut stream, 200, "ok\n"),
            Err(why) => respond(&mut stream, 503, &format!("{why}\n")),
        },
        LIVE_PATH => match session.ask() {
            Ok(()) => respond(&mut stream, 200, "ok\n"),
            Err(why) => match is_alive(alive) {
                Ok(()) => respond(&mut stream, 200, &format!("alive, not ready: {why}\n")),
                Err(dead) => respond(&mut stream, 503, &format!("{why}; {dead}\n")),
            },
        },
        _ => respond(
            &mut stream,
            404,
            &format!("not found: try {READY_PATH} or {LIVE_PATH}\n"),
        ),
    }
}

/// `alive` (pg_isready) exits 0 or 1: the postmaster is there.
fn is_alive(alive: &[String]) -> Result<(), String> {
    let Some((name, args)) = alive.split_first() else {
        return Err("nothing to ask".into());
    };
    match Command::new(name).args(args).stdin(Stdio::null()).status() {
        Ok(status) if matches!(status.code(), Some(0 | 1)) => Ok(()),
        Ok(status) => Err(format!("{name}: no response ({status})")),
        Err(error) => Err(format!("cannot start {name}: {error}")),
    }
}

fn respond(stream: &mut TcpStream, code: u16, body: &str) -> io::Result<()> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let answer = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(answer.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;

    /// A stand-in for `psql -A -t`: `sh -c script`, which appends a line to `starts` when it
    /// starts, then runs `body` for each line read.
    fn stand_in(starts: &Path, body: &str, deadline: Duration) -> Session {
        let script = format!(
            "echo started >> '{}'; while read -r line; do {body}; done",
            starts.display()
        );
        Session::of(vec!["sh".into(), "-c".into(), script], deadline)
    }

    /// Answers `n` to `SELECT n;`, as psql -A -t does.
    const ANSWERS: &str = r#"n=${line#SELECT }; echo "${n%;}""#;

    fn starts(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("starts"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// One process answers every probe: a probe is a line written and a line read, not a
    /// process started.
    #[test]
    fn one_session_answers_every_probe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut session = stand_in(&dir.path().join("starts"), ANSWERS, Duration::from_secs(10));
        for _ in 0..5 {
            assert_eq!(session.ask(), Ok(()));
        }
        assert_eq!(starts(dir.path()), 1);
    }

    /// A server that does not answer (hung) is a failure within the deadline, and the next probe
    /// starts a new session rather than waiting on the stuck one.
    #[test]
    fn a_silent_session_fails_within_the_deadline_and_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut session = stand_in(
            &dir.path().join("starts"),
            "sleep 60",
            Duration::from_millis(300),
        );
        let started = Instant::now();
        let failed = session.ask().expect_err("no answer");
        assert_eq!(failed, "postgres did not answer within 300 ms");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = session.ask();
        assert_eq!(starts(dir.path()), 2);
    }

    /// A server that comes up while a probe waits (a restarted container's postmaster, after
    /// refusing the first two sessions) answers that probe: one probe, three starts.
    #[test]
    fn a_server_that_comes_up_within_the_deadline_answers_that_probe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let starts_file = dir.path().join("starts");
        let body = format!(
            "if [ $(wc -l < '{}') -lt 3 ]; then echo 'psql: error: the database system is starting up' >&2; exit 2; fi; {ANSWERS}",
            starts_file.display()
        );
        let mut session = stand_in(&starts_file, &body, Duration::from_secs(10));
        assert_eq!(session.ask(), Ok(()));
        assert_eq!(starts(dir.path()), 3);
    }

    /// A session that ends (the server went away) says why, in psql's own last message without
    /// its indented hints, and the next probe starts another.
    #[test]
    fn an_ended_session_says_why_and_is_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "echo 'psql: error: connection to server failed: Connection refused' >&2; \
                    printf '\\tIs the server running?\\n' >&2; exit 2";
        let deadline = RECONNECT_PAUSE * 3;
        let mut session = stand_in(&dir.path().join("starts"), body, deadline);
        let started = Instant::now();
        let failed = session.ask().expect_err("it ended");
        assert_eq!(
            failed,
            "psql: error: connection to server failed: Connection refused"
        );
        assert!(started.elapsed() < deadline + RECONNECT_PAUSE);
        // Started again within the one probe's deadline, while it allowed.
        let within_one = starts(dir.path());
        assert!(within_one >= 2, "{within_one} starts");
        let _ = session.ask();
        assert!(starts(dir.path()) > within_one);
        let mut missing = Session::of(vec!["/nonexistent/psql".into()], Duration::from_secs(1));
        let failed = missing.ask().expect_err("nothing to run");
        assert!(
            failed.starts_with("cannot start /nonexistent/psql: "),
            "{failed}"
        );
    }

    /// `method path` on the agent: the status code and the body.
    fn request(address: SocketAddr, head: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(address).expect("connects");
        stream.write_all(head.as_bytes()).expect("written");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("read");
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        (code, body.to_string())
    }

    fn get(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
        request(
            address,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: pod\r\nUser-Agent: kube-probe/1.32\r\n\r\n"
            ),
        )
    }

    /// Over HTTP, as the kubelet probes it: 200 while the session answers, 503 with the reason
    /// when it does not; liveness asks `pg_isready` only then, and counts its exit 1
    /// (rejecting) as alive. Any other path is 404, any other method 405, and a head that
    /// never ends is refused without stopping the agent.
    #[test]
    fn the_kubelet_reads_200_or_503_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hung = dir.path().join("hung");
        let body = format!("[ -e '{}' ] && sleep 60; {ANSWERS}", hung.display());
        let mut session = stand_in(
            &dir.path().join("starts"),
            &body,
            Duration::from_millis(500),
        );
        let isready = dir.path().join("isready");
        let alive: Vec<String> = vec![
            "sh".into(),
            "-c".into(),
            format!("exit $(cat '{}')", isready.display()),
        ];
        let listener = TcpListener::bind("127.0.0.1:0").expect("listens");
        let address = listener.local_addr().expect("an address");
        std::thread::spawn(move || serve(&listener, &mut session, &alive));

        assert_eq!(get(address, "GET", READY_PATH), (200, "ok\n".into()));
        assert_eq!(get(address, "GET", LIVE_PATH), (200, "ok\n".into()));
        std::fs::write(&hung, "").expect("hung");
        let late = "postgres did not answer within 500 ms";
        assert_eq!(get(address, "GET", READY_PATH), (503, format!("{late}\n")));
        std::fs::write(&isready, "1").expect("rejecting");
        assert_eq!(
            get(address, "GET", LIVE_PATH),
            (200, format!("alive, not ready: {late}\n"))
        );
        std::fs::write(&isready, "2").expect("no response");
        let (code, why) = get(address, "GET", LIVE_PATH);
        assert_eq!(code, 503, "{why}");
        assert!(why.contains("no response"), "{why}");
        std::fs::remove_file(&hung).expect("answering again");
        assert_eq!(get(address, "GET", READY_PATH), (200, "ok\n".into()));

        assert_eq!(get(address, "GET", "/").0, 404);
        assert_eq!(get(address, "POST", READY_PATH).0, 405);
        let endless = format!(
            "GET {READY_PATH} HTTP/1.1\r\nX: {}",
            "a".repeat(MAX_REQUEST_BYTES)
        );
        assert_eq!(request(address, &endless).0, 431);
        // A client that sends half a head and goes quiet holds the agent for 1 s at most.
        let mut quiet = TcpStream::connect(address).expect("connects");
        quiet
            .write_all(b"GET /readyz HTTP/1.1\r\n")
            .expect("written");
        let started = Instant::now();
        assert_eq!(get(address, "GET", READY_PATH), (200, "ok\n".into()));
        assert!(started.elapsed() < Duration::from_secs(3));
    }
}
