//! Support: skip it on first read — the readiness agent beside each postgres server.
//!
//! WORKSHOP.md, step 04 ("Inside step 04: a readiness probe that costs next to nothing"). Ready
//! decides which pods the Services send traffic to, and a primary that stays unready is failed
//! over: the readiness probe is the operator's detector of a hung primary (its processes
//! stopped: TCP still accepts, only a query notices). So it runs often, every 2 s. An `exec`
//! probe of `pg_isready` costs, every time, a process started in the container (about 4 ms of
//! the node's CPU before it runs anything), `pg_isready` loading its libraries, and a backend the
//! server forks for it: six idle clusters of three kept a 2-core machine 9–12 % busy, most of it
//! the probes.
//!
//! `pg-ready` (`src/bin/pg-ready.rs`) keeps one `psql` session open and answers the kubelet's
//! `GET /readyz` with `200` when that session answers `SELECT n;` within the deadline, `503` and
//! the reason otherwise. A probe is then one HTTP request and one query on a backend that is
//! already there. It starts a new `psql` when the last one ended (the server restarted, a
//! deadline passed), so a probe says what `pg_isready` said: the server accepts connections and
//! answers. It holds no Postgres client of its own: `psql`, the server's own client, speaks the
//! protocol, as it does for every `pods/exec` of the operator.
//!
//! How it gets into a member pod, as CloudNativePG's instance manager does: an init container of
//! the operator's image (which has no shell) runs `/pg-ready install /agent/pg-ready`, a copy of
//! itself into an emptyDir; a second container, `ready`, of the postgres image (which has
//! `psql`) runs it from there (`manifests.rs`). A container of its own rather than a process
//! started beside postgres: the postgres container's PID 1 is the postmaster, which takes the
//! death of any child it did not start, with an exit code other than 0 or 1, for a crashed
//! backend.

use std::io;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};
use tokio::sync::Mutex;

use crate::metrics::server::{plain, Answer};

/// The port the agent listens on in every member pod (Patroni's REST API uses the same).
pub const AGENT_PORT: u16 = 8008;
/// The path of its readiness answer.
pub const READY_PATH: &str = "/readyz";
/// Where the operator's image holds the binary (the Dockerfile copies it there).
pub const IMAGE_BINARY: &str = "/pg-ready";
/// The emptyDir the init container copies it into, as the `ready` container mounts it.
pub const AGENT_DIR: &str = "/agent";
/// The copy the `ready` container runs.
pub const AGENT_BINARY: &str = "/agent/pg-ready";
/// How long one probe's query may take. Under the kubelet's one-second `timeoutSeconds`, so a
/// server that does not answer is this agent's `503` with the reason, not a probe timed out.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(800);

/// `psql` as the session runs it: no `.psqlrc` (-X), quiet (-q), unaligned tuples only (-A -t),
/// so `SELECT 7;` prints `7` on a line of its own, and never a password prompt (-w), which
/// would read the queries meant for the server. Where to connect comes from libpq's variables
/// (`PGHOST`, `PGUSER`, `PGPASSWORD`, ...), which the `ready` container's env sets.
const PSQL: [&str; 6] = ["psql", "-X", "-q", "-A", "-t", "-w"];

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

    /// Ask the server once: Ok when it answered within the deadline, else why not. A session
    /// that failed is ended; the next probe starts another.
    pub async fn ask(&mut self) -> Result<(), String> {
        self.asked += 1;
        let asked = self.asked;
        let outcome = match tokio::time::timeout(self.deadline, self.exchange(asked)).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!(
                "postgres did not answer within {} ms",
                self.deadline.as_millis()
            )),
        };
        if outcome.is_err() {
            // kill_on_drop: a psql stuck on a server that does not answer goes with it.
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

    async fn exchange(&mut self, asked: u64) -> Result<(), String> {
        let psql = match &mut self.open {
            Some(psql) => psql,
            open => open.insert(Psql::start(&self.program)?),
        };
        psql.ask(asked).await
    }
}

/// A running `psql` and its three pipes.
struct Psql {
    /// Killed when dropped.
    _child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: ChildStderr,
}

impl Psql {
    fn start(program: &[String]) -> Result<Psql, String> {
        let (name, args) = program.split_first().ok_or("no program to run")?;
        let mut child = Command::new(name)
            .args(args)
            .env("PGAPPNAME", "pg-ready")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(format!("{name} started without its pipes"));
        };
        Ok(Psql {
            _child: child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr,
        })
    }

    /// `SELECT asked;` and wait for the line `asked`. Lines before it (an answer to an earlier
    /// probe that gave up) are skipped.
    async fn ask(&mut self, asked: u64) -> Result<(), String> {
        let expected = asked.to_string();
        if self
            .stdin
            .write_all(format!("SELECT {asked};\n").as_bytes())
            .await
            .is_err()
        {
            return Err(self.why_it_ended().await);
        }
        let mut line = String::new();
        loop {
            line.clear();
            // A line of psql's is a number; a longer one is cut, not buffered without end.
            let read = (&mut self.stdout)
                .take(64)
                .read_line(&mut line)
                .await
                .map_err(|e| format!("reading psql's answer: {e}"))?;
            if read == 0 {
                return Err(self.why_it_ended().await);
            }
            if line.trim_end() == expected {
                return Ok(());
            }
        }
    }

    /// What psql said before it ended (it cannot connect, the server went away): its last
    /// message, without the indented hint lines under it. Read once it has ended, so the pipe is
    /// at its end: at most 4 KB.
    async fn why_it_ended(&mut self) -> String {
        let mut said = Vec::new();
        let _ = (&mut self.stderr).take(4096).read_to_end(&mut said).await;
        let said = String::from_utf8_lossy(&said);
        let last = said
            .lines()
            .rfind(|l| !l.trim().is_empty() && !l.starts_with(char::is_whitespace));
        match last {
            Some(last) if last.starts_with("psql: ") => last.to_string(),
            Some(last) => format!("psql: {last}"),
            None => "psql ended without a word".to_string(),
        }
    }
}

/// The agent's HTTP answers: `/readyz` asks the session.
#[derive(Clone)]
pub struct Agent {
    session: Arc<Mutex<Session>>,
}

impl Agent {
    pub fn new(session: Session) -> Agent {
        Agent {
            session: Arc::new(Mutex::new(session)),
        }
    }
}

impl Answer for Agent {
    async fn answer(&self, request: &Request<Incoming>) -> Response<Full<Bytes>> {
        if request.uri().path() != READY_PATH {
            return plain(
                StatusCode::NOT_FOUND,
                format!("not found: try {READY_PATH}\n"),
            );
        }
        // One probe at a time on the one session; the kubelet sends one per period.
        match self.session.lock().await.ask().await {
            Ok(()) => plain(StatusCode::OK, "ok\n".into()),
            Err(why) => plain(StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::metrics::serve_with;

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
    #[tokio::test]
    async fn one_session_answers_every_probe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut session = stand_in(&dir.path().join("starts"), ANSWERS, Duration::from_secs(10));
        for _ in 0..5 {
            assert_eq!(session.ask().await, Ok(()));
        }
        assert_eq!(starts(dir.path()), 1);
    }

    /// A server that does not answer (hung) is a failure within the deadline, and the next probe
    /// starts a new session rather than waiting on the stuck one.
    #[tokio::test]
    async fn a_silent_session_fails_within_the_deadline_and_is_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut session = stand_in(
            &dir.path().join("starts"),
            "sleep 60",
            Duration::from_millis(300),
        );
        let started = std::time::Instant::now();
        let failed = session.ask().await.expect_err("no answer");
        assert!(failed.contains("did not answer within 300 ms"), "{failed}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = session.ask().await;
        assert_eq!(starts(dir.path()), 2);
    }

    /// A session that ends (the server went away) says why, in psql's own last words, and the
    /// next probe starts another.
    #[tokio::test]
    async fn an_ended_session_says_why_and_is_started_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let body = "echo 'FATAL:  the database system is shutting down' >&2; exit 2";
        let mut session = stand_in(&dir.path().join("starts"), body, Duration::from_secs(10));
        let failed = session.ask().await.expect_err("it ended");
        assert_eq!(failed, "psql: FATAL:  the database system is shutting down");
        let _ = session.ask().await;
        assert_eq!(starts(dir.path()), 2);
        let mut missing = Session::of(vec!["/nonexistent/psql".into()], Duration::from_secs(1));
        let failed = missing.ask().await.expect_err("nothing to run");
        assert!(
            failed.starts_with("cannot start /nonexistent/psql: "),
            "{failed}"
        );
    }

    /// `GET path` on the agent: the status code and the body.
    async fn get(address: SocketAddr, method: &str, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(address).await.expect("connects");
        let request = format!("{method} {path} HTTP/1.1\r\nHost: pod\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("written");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.expect("read");
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .expect("a status line");
        let body = answer
            .split("\r\n\r\n")
            .nth(1)
            .unwrap_or_default()
            .to_string();
        (code, body)
    }

    /// Over HTTP, as the kubelet probes it: 200 while the session answers, 503 with the reason
    /// when it does not; any other path is 404, any other method 405.
    #[tokio::test]
    async fn the_kubelet_reads_200_or_503_with_the_reason() {
        let dir = tempfile::tempdir().expect("tempdir");
        let flag = dir.path().join("hung");
        let body = format!("[ -e '{}' ] && sleep 60; {ANSWERS}", flag.display());
        let session = stand_in(
            &dir.path().join("starts"),
            &body,
            Duration::from_millis(500),
        );
        let shutdown = CancellationToken::new();
        let (address, _task) = serve_with(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "pg-ready",
            Agent::new(session),
            shutdown.clone(),
        )
        .await
        .expect("listens");
        assert_eq!(get(address, "GET", READY_PATH).await, (200, "ok\n".into()));
        std::fs::write(&flag, "").expect("flag");
        let (code, why) = get(address, "GET", READY_PATH).await;
        assert_eq!(
            (code, why.trim()),
            (503, "postgres did not answer within 500 ms")
        );
        std::fs::remove_file(&flag).expect("flag removed");
        assert_eq!(get(address, "GET", READY_PATH).await, (200, "ok\n".into()));
        assert_eq!(get(address, "GET", "/").await.0, 404);
        assert_eq!(get(address, "POST", READY_PATH).await.0, 405);
        shutdown.cancel();
    }
}
