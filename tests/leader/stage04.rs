//! The stage-04 binary with leader election, as processes against the sandbox: SIGTERM hands
//! the Lease over at once, `kill -9` only after it expired, a leader that finds another name in
//! the Lease exits non-zero; and with two operators on a real Postgres cluster, every write in
//! the sandbox's request log comes from the process that held the Lease, the old leader's last
//! before the new leader's first.
//!
//! Each process gets its own `HOSTNAME` (the pod name in a cluster), so the Lease's holder names
//! it. To tell their requests apart in the request log, each talks to the sandbox through its own
//! small proxy that appends `(via NAME)` to the User-Agent (both send `postgres-operator/0.1.0`).
//! Short lease durations (4 s) so the test need not wait 15 s.
//!
//! The real-cluster test needs PostgreSQL, bubblewrap and kubectl: without them it fails and
//! says what is missing.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use postgres_operator::client::{Client, USER_AGENT};
use postgres_operator::leader::{lease_path, Lease};
use sandbox::{RequestRecord, Sandbox, SandboxOptions};
use test_support::Kubectl;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const STAGE04: &str = env!("CARGO_BIN_EXE_stage04");
const LEASE_KEY: &str = "default/postgres-operator";
/// Bounds for a hung process, not timings: real Postgres pods start slowly on a busy machine.
const DEADLINE: Duration = Duration::from_secs(240);

/// One stage04 process and what it has printed on stdout.
struct Operator {
    name: &'static str,
    child: tokio::process::Child,
    stdout: Arc<Mutex<Vec<String>>>,
    /// Ends when stdout closes.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Operator {
    /// `stage04 --server URL` with `HOSTNAME=name` and a 4-second lease.
    fn start(name: &'static str, server: &str) -> Operator {
        let mut child = test_support::operator_command(STAGE04, server)
            .args(["--reconcile-interval", "1"])
            .args(["--lease-duration", "4", "--renew-deadline", "3"])
            .args(["--retry-period", "0.25"])
            .env("HOSTNAME", name)
            .spawn()
            .expect("stage04 starts");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let lines = stdout.clone();
        let pipe = child.stdout.take().expect("stdout piped");
        let reader = tokio::spawn(async move {
            let mut reader = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                println!("{name}: {line}");
                lines.lock().unwrap().push(line);
            }
        });
        Operator {
            name,
            child,
            stdout,
            reader: Some(reader),
        }
    }

    fn lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// Wait until a line starting with `prefix` and containing `rest` is printed.
    async fn said(&self, prefix: &str, rest: &str) -> String {
        let what = format!("{}: {prefix}...{rest}", self.name);
        test_support::eventually(DEADLINE, &what, || async {
            self.lines()
                .into_iter()
                .find(|line| line.starts_with(prefix) && line.contains(rest))
        })
        .await
    }

    /// SIGTERM, as the kubelet sends it; the exit status.
    async fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().expect("still running").to_string();
        let killed = tokio::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("kill runs");
        assert!(killed.success());
        self.exit().await
    }

    async fn exit(&mut self) -> (std::process::ExitStatus, Vec<String>) {
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("stage04 exits")
            .expect("wait works");
        // Every line printed is in once the reader has seen the end of the pipe.
        if let Some(reader) = self.reader.take() {
            let _ = tokio::time::timeout(DEADLINE, reader).await;
        }
        (status, self.lines())
    }
}

fn client(sandbox: &Sandbox) -> Client {
    test_support::plain_client(&sandbox.url())
}

async fn lease(client: &Client) -> Lease {
    client
        .get(&lease_path("default", "postgres-operator"))
        .await
        .expect("the Lease exists")
}

/// `operator-a_1234567890` → `operator-a`.
fn pod_of(holder: Option<&str>) -> Option<&str> {
    holder
        .and_then(|holder| holder.rsplit_once('_'))
        .map(|(pod, _)| pod)
}

/// SIGTERM: the leader releases and exits 0, the standby leads at its next read ("after it was
/// released"). kill -9: no release, the Lease keeps the dead holder's name until the standby
/// judges it expired. A Lease overwritten with another name: the leader exits 1 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage04_hands_over_on_sigterm_waits_out_kill_9_and_exits_when_taken() {
    let sandbox = test_support::start_sandbox_with(SandboxOptions::default()).await;
    let url = sandbox.url();
    let api = client(&sandbox);

    let a = Operator::start("operator-a", &url);
    a.said(
        "leading as operator-a_",
        &format!("(lease {LEASE_KEY}, new)"),
    )
    .await;
    let b = Operator::start("operator-b", &url);
    b.said(
        &format!("waiting for lease {LEASE_KEY}, held by operator-a_"),
        "",
    )
    .await;

    let (status, a_lines) = a.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    assert_eq!(
        a_lines.last().map(String::as_str),
        Some(format!("released lease {LEASE_KEY}").as_str()),
        "the release is the last thing it does"
    );
    b.said("leading as operator-b_", "took over from operator-a_")
        .await;
    let line = b.said("leading as operator-b_", "").await;
    assert!(line.ends_with("after it was released)"), "{line}");

    let mut c = Operator::start("operator-c", &url);
    c.said(
        &format!("waiting for lease {LEASE_KEY}, held by operator-b_"),
        "",
    )
    .await;
    let mut b = b;
    b.child.kill().await.expect("kill -9");
    let held = lease(&api).await;
    assert_eq!(pod_of(held.spec.holder()), Some("operator-b"), "no release");
    let line = c.said("leading as operator-c_", "").await;
    assert!(
        line.contains("took over from operator-b_") && line.ends_with("after it expired)"),
        "{line}"
    );
    assert_eq!(pod_of(lease(&api).await.spec.holder()), Some("operator-c"));

    // Someone else writes their name into the Lease: the leader stops at its next renewal.
    let mut stolen = lease(&api).await;
    stolen.spec.holder_identity = Some("intruder_1".into());
    let _: Lease = api
        .replace(&lease_path("default", "postgres-operator"), &stolen)
        .await
        .expect("the overwrite");
    let (status, lines) = c.exit().await;
    assert_eq!(status.code(), Some(1), "a lost lease is an error exit");
    assert!(
        lines.contains(&format!(
            "lost lease {LEASE_KEY}: held by intruder_1 now: stopping"
        )),
        "{lines:?}"
    );
}

/// Durations that would let two leaders act at once are a usage error, exit 2, naming the flag.
#[test]
fn durations_that_cannot_work_are_refused() {
    let output = std::process::Command::new(STAGE04)
        .args(["--server", "http://127.0.0.1:9", "--renew-deadline", "20"])
        .output()
        .expect("stage04 runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--renew-deadline"), "{stderr}");
    assert!(stderr.contains("--lease-duration"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Never two leaders: a proxy per process tags its requests
// ---------------------------------------------------------------------------------------------

/// A loopback HTTP proxy to `upstream` that appends ` (via TAG)` to every request's User-Agent.
/// Bodies stream through both ways (watches), and `101 Switching Protocols` (pods/exec) turns
/// the two connections into one byte pipe.
async fn tagging_proxy(upstream: SocketAddr, tag: &'static str, stop: CancellationToken) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(_) => continue,
                },
                () = stop.cancelled() => return,
            };
            let service =
                hyper::service::service_fn(move |request| forward(upstream, tag, request));
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .with_upgrades(),
            );
        }
    });
    format!("http://{address}")
}

async fn forward(
    upstream: SocketAddr,
    tag: &'static str,
    mut request: Request<Incoming>,
) -> Result<Response<Incoming>, Box<dyn std::error::Error + Send + Sync>> {
    let agent = request
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let tagged = format!("{agent} (via {tag})");
    let headers = request.headers_mut();
    headers.insert(http::header::USER_AGENT, tagged.parse()?);
    // The sandbox refuses a Host that is not its own address (DNS rebinding).
    headers.insert(http::header::HOST, upstream.to_string().parse()?);
    let downstream_upgrade = hyper::upgrade::on(&mut request);
    let stream = TcpStream::connect(upstream).await?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection.with_upgrades());
    let mut response = sender.send_request(request).await?;
    if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        let upstream_upgrade = hyper::upgrade::on(&mut response);
        tokio::spawn(async move {
            if let (Ok(down), Ok(up)) = tokio::join!(downstream_upgrade, upstream_upgrade) {
                let (mut down, mut up) = (TokioIo::new(down), TokioIo::new(up));
                let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
            }
        });
    }
    Ok(response)
}

/// Whose request this is: the tag the proxy added, for the operator's requests only.
fn writer(record: &RequestRecord) -> Option<&'static str> {
    // `postgres-operator/0.1.0 (operator-a_1234567890) (via operator-a)`: the Lease identity,
    // then the proxy's tag.
    let rest = record.user_agent.strip_prefix(USER_AGENT)?;
    ["operator-a", "operator-b"]
        .into_iter()
        .find(|tag| rest.ends_with(&format!(" (via {tag})")))
}

/// A request that changes something: a write, or a command run in a pod.
fn acts(record: &RequestRecord) -> bool {
    matches!(
        record.verb.as_str(),
        "create" | "update" | "patch" | "delete" | "deletecollection"
    ) || record.subresource == "exec"
}

/// Two stage04 processes on a real Postgres cluster; the leader is stopped (SIGTERM) while it
/// builds the cluster and the standby finishes it. In the sandbox's request log, every action
/// of each comes while it held the Lease: all of A's actions, then A's release, then B's
/// take-over, then B's actions; before it led, B only read the Lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_leaders_act_on_a_real_cluster() {
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let stop_proxies = CancellationToken::new();
    let via_a = tagging_proxy(sandbox.addr(), "operator-a", stop_proxies.clone()).await;
    let via_b = tagging_proxy(sandbox.addr(), "operator-b", stop_proxies.clone()).await;
    let kubectl = Kubectl::new(&sandbox.url());

    let a = Operator::start("operator-a", &via_a);
    a.said("leading as operator-a_", "").await;
    let b = Operator::start("operator-b", &via_b);
    b.said(
        &format!("waiting for lease {LEASE_KEY}, held by operator-a_"),
        "",
    )
    .await;

    let manifest = serde_json::json!({
        "apiVersion": "workshop.example.com/v1",
        "kind": "PostgresCluster",
        "metadata": {"name": "db"},
        "spec": {"size": 2, "version": "16"},
    });
    kubectl
        .create_when_served(&manifest.to_string(), DEADLINE)
        .await;

    // Mid-way: the seed is being launched, the replica not yet.
    a.said("[default/db] Launching seed Postgres node db-", "")
        .await;
    let (status, _) = a.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    b.said("leading as operator-b_", "after it was released)")
        .await;

    // The standby finishes the job: two ready members.
    test_support::eventually(DEADLINE, "the cluster ready with 2 members", || async {
        let out = kubectl
            .run(&[
                "get",
                "pgc",
                "db",
                "-o",
                "jsonpath={.status.readyInstances}",
            ])
            .await;
        (out.stdout.trim() == "2").then_some(())
    })
    .await;
    let (status, _) = b.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
    stop_proxies.cancel();

    let requests = sandbox.requests();
    let log: Vec<(usize, &'static str, &RequestRecord)> = requests
        .iter()
        .enumerate()
        .filter_map(|(index, record)| writer(record).map(|who| (index, who, record)))
        .collect();
    let is_lease = |record: &RequestRecord| record.resource == "leases";
    let position = |who: &str, wanted: &dyn Fn(&RequestRecord) -> bool, last: bool| {
        let mut found = log
            .iter()
            .filter(|(_, writer, record)| *writer == who && wanted(record))
            .map(|(index, _, _)| *index);
        if last { found.last() } else { found.next() }
            .unwrap_or_else(|| panic!("no such request of {who}"))
    };
    let a_last_action = position("operator-a", &|r| acts(r) && !is_lease(r), true);
    let a_release = position("operator-a", &|r| is_lease(r) && r.verb == "update", true);
    let b_takeover = position(
        "operator-b",
        &|r| is_lease(r) && matches!(r.verb.as_str(), "update" | "create"),
        false,
    );
    let b_first_action = position("operator-b", &|r| acts(r) && !is_lease(r), false);
    println!(
        "a's last action #{a_last_action}, a's release #{a_release}, b's take-over #{b_takeover}, b's first action #{b_first_action}"
    );
    assert!(a_last_action < a_release, "a acted after releasing");
    assert!(a_release < b_takeover, "b took over before a released");
    assert!(b_takeover < b_first_action, "b acted before leading");
    // Nothing of a's after its release; nothing of b's but reading the Lease before it led.
    for (index, who, record) in &log {
        if *who == "operator-a" {
            assert!(*index <= a_release, "a after its release: {record:?}");
        } else if *index < b_takeover {
            assert!(
                is_lease(record) && record.verb == "get",
                "b before it led: {record:?}"
            );
        }
    }
    // a's share of the work was real: it created the seed pod (b's first action exists, above).
    assert!(log
        .iter()
        .any(|(_, who, r)| *who == "operator-a" && r.resource == "pods" && r.verb == "create"));
}
