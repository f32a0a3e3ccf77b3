//! Chaos on real PostgreSQL: a size-3 cluster with synchronous replication (`ANY 1`,
//! `dataDurability: required`), a writer committing numbered rows through the `<name>-primary`
//! Service, and one fault after another. After each fault: the cluster converges (3 ready
//! members, one primary, its standbys set, every replica streaming from the primary), no
//! acknowledged row is missing on the primary, every replica holds every acknowledged row
//! within 5 s of the writer's last commit (asked again once the writer has stopped, at the
//! end) and none was replaced for not streaming, and no two members could acknowledge a commit
//! at one moment (by the answers' times: [`at_once`]). Two members not in recovery at once are
//! counted, not refused: an old primary that resumes (a hung process, a node whose network
//! returns) before its stop is writable, with no standby to acknowledge anything, until then.
//! (A crashed one restarted in place comes back in recovery: the manifests' start script.)
//! The outage per fault (the longest stretch with no acknowledged write) and each replica's
//! catch-up time are printed.
//!
//! WORKSHOP.md, step 05 ("Putting it to the test"). Needs PostgreSQL and bubblewrap.
//! The operator runs with the defaults a user gets (`PostgresOptions::default()`, which the
//! flags' defaults match: a round every 8 s; a failover delay of 2 s, a stop timeout of 20 s,
//! a replica not streaming replaced after 30 s, an unready one after 60 s: `Delays::default`).
//! The short run (each fault once): `cargo test --test chaos -- --nocapture`.
//! The long run (the whole sequence N times, min/median/max per fault):
//! `CHAOS_ROUNDS=20 cargo test --test chaos -- --nocapture`. One fault, or a few, to study
//! them: `CHAOS_ONLY=KillOperatorMidPromotion,HangPrimary` (the names of [`Fault`]). A lost
//! node's grace period (5 s): `CHAOS_NODE_GRACE=40`.
//! The last two faults run the operator as two stage05 processes on their default flags,
//! under leader election, in place of the one in this process: the leader paused (SIGSTOP)
//! for 25 s while the primary's postmaster is killed, and the API server and kubelet frozen
//! for 10 s right after it is; the sandbox's request log shows what the paused one sent after
//! it woke.
//! The same faults under the end-to-end tests' short timings (a round every second, a replica
//! not streaming replaced after 10 s, an unready one after 30 s), to compare:
//! `cargo test --test chaos -- --ignored --nocapture with_the_tests_short_timings`.
//! Asynchronous replication (the default of a cluster without `spec.replication`), where a
//! failover may lose acknowledged rows: `CHAOS_REPLICATION=async`; the rows lost per fault are
//! counted and printed, not refused.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use postgres_operator::api::{collection_path, object_path, PostgresCluster, PostgresClusterSpec};
use postgres_operator::client::Client;
use postgres_operator::controller::pods::{pods_path, CLUSTER_LABEL};
use postgres_operator::failover::Failover;
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::{
    credentials_secret_name, primary_service_name, psql_argv, POSTGRES_CONTAINER,
    SUPERUSER_PASSWORD_KEY,
};
use postgres_operator::postgres::{run_postgres_operator, PostgresOptions};
use postgres_operator::story::Reporter;
use sandbox::{LostNode, Sandbox, SandboxOptions};
use serde_json::Value;
use test_support::{HostPsql, Story};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const CLUSTER: &str = "chaos";
const STAGE05: &str = env!("CARGO_BIN_EXE_stage05");
/// How long the leader stays paused (`Fault::PauseLeader`): past its Lease's 15 s.
const PAUSE: Duration = Duration::from_secs(25);
/// How long the API server and kubelet stay frozen (`Fault::FreezeApiServer`).
const FREEZE: Duration = Duration::from_secs(10);
/// Leader election's default lease duration, which the standby waits out.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const SIZE: u64 = 3;
/// How long one fault may take to converge: generous, the machine has 2 cores.
const FAULT_DEADLINE: Duration = Duration::from_secs(180);
/// One statement's deadline: a stopped server accepts connections and never answers.
const SQL_DEADLINE: Duration = Duration::from_secs(3);
/// How often every member is asked whether it is in recovery.
const POLL_EVERY: Duration = Duration::from_millis(300);
/// What the operator says when it replaces a Ready replica that has not streamed from the
/// primary for the not-streaming delay (30 s): that replica was that long behind.
const NOT_STREAMING_SAID: &str = "has not streamed from the primary";
/// On the primary: the standbys streaming from it, by `application_name` (their pod names).
const STREAMING_SQL: &str =
    "SELECT application_name FROM pg_stat_replication WHERE state = 'streaming'";
/// How soon after the writer's last acknowledged commit every replica must hold it.
const CATCH_UP_DEADLINE: Duration = Duration::from_secs(5);
/// How often a replica is asked whether it holds every acknowledged row.
const CATCH_UP_POLL: Duration = Duration::from_millis(100);
/// On a replica that fell behind: what its WAL receiver says, and how far it received and
/// replayed. One row even without a receiver (`pg_stat_wal_receiver` is then empty).
const RECEIVER_SQL: &str = "SELECT coalesce((SELECT format('receiver %s from %s:%s, timeline %s, written %s, flushed %s, end on the primary %s, last message %s', status, sender_host, sender_port, received_tli, written_lsn, flushed_lsn, latest_end_lsn, last_msg_receipt_time) FROM pg_stat_wal_receiver), 'no WAL receiver') || format('; received %s, replayed %s (last replayed commit %s)', pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), pg_last_xact_replay_timestamp())";
/// On a replica that fell behind: what its startup process (replay), WAL receiver and client
/// backends wait on. A standby's replay waits up to `max_standby_streaming_delay` (30 s) for
/// queries it conflicts with, and queries queue behind a lock it replays.
const WAITS_SQL: &str = "SELECT coalesce(string_agg(format('%s (pid %s) waits on %s/%s: %s', backend_type, pid, wait_event_type, wait_event, left(query, 60)), '; '), 'nothing waits') FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type IN ('startup', 'walreceiver', 'client backend')";
/// On the primary, when a replica fell behind: where its WAL ends, and what each standby has.
const SENDERS_SQL: &str = "SELECT format('WAL ends at %s; ', pg_current_wal_lsn()) || coalesce(string_agg(format('%s %s (%s): sent %s, flushed %s, replayed %s', application_name, state, sync_state, sent_lsn, flush_lsn, replay_lsn), '; '), 'no standby connected') FROM pg_stat_replication";

/// The replication the cluster runs with (`CHAOS_REPLICATION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Replication {
    /// `ANY 1`, `dataDurability: required`: no acknowledged row may be lost.
    Synchronous,
    /// No `spec.replication`: rows acknowledged but not yet streamed may be lost; counted.
    Asynchronous,
}

impl Replication {
    fn from_env() -> Replication {
        match std::env::var("CHAOS_REPLICATION").as_deref() {
            Ok("async") => Replication::Asynchronous,
            Ok("sync") | Err(_) => Replication::Synchronous,
            Ok(other) => panic!("CHAOS_REPLICATION={other}: say sync or async"),
        }
    }
}

/// What each round does to the cluster, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `kubectl delete pod <primary>` (the API's DELETE, default grace period).
    DeletePrimaryPod,
    /// The primary's postmaster killed with SIGKILL; the kubelet restarts the container.
    KillPrimaryPostmaster,
    /// One backend of the primary killed with SIGKILL (`kill -KILL $PPID` from the shell of a
    /// `COPY ... TO PROGRAM`): with `restart_after_crash=off` the postmaster exits.
    KillPrimaryBackend,
    /// Every process of the primary stopped with SIGSTOP; resumed once the cluster converged.
    HangPrimary,
    /// The primary's node lost (processes killed, pod unready at once), and the operator
    /// killed in the failover that follows, then started anew: in turn 1 s after the loss
    /// (within the failover delay) and when it fences the primary (before any promotion).
    KillOperatorMidFailover,
    /// `kubectl delete pod <primary>`, and the operator killed the moment it says it promotes
    /// a replica (the promotion's `pods/exec` in flight, maybe done, the labels not yet moved),
    /// then started anew: the new operator finds a replica promoted or not, and finishes.
    KillOperatorMidPromotion,
    /// A replica's node lost (processes killed, pod unready at once).
    LoseReplica,
    /// A planned switchover to a standby: `workshop.example.com/switchover-to=<pod>`.
    Switchover,
    /// The primary's node lost as a cluster loses one: processes frozen, pod Ready for 5 s,
    /// its deletion never confirmed.
    LosePrimaryNode,
    /// The primary's node lost so (frozen, 5 s grace), and the operator killed the moment it
    /// says it fences the primary, then started anew. The new operator mostly finds it
    /// labelled fenced already (else it fences it itself), promotes a standby, and must restart
    /// the other standby's WAL receiver as the fencing operator would have: it may have
    /// connected to the frozen primary, and would stream nothing for 30 s.
    KillOperatorAtLostNodeFence,
    /// Two stage05 processes under leader election; the leader stopped with SIGSTOP for 25 s
    /// while the primary's postmaster is killed; the standby takes the Lease and fails over;
    /// woken, the old leader must send nothing that changes anything before it has read the
    /// Lease again (the sandbox's request log), and stop.
    PauseLeader,
    /// Two stage05 processes under leader election; the primary's postmaster killed, then the
    /// API server and the kubelet frozen for 10 s (`Faults::freeze`): the leader keeps its
    /// place and writes again once the server answers.
    FreezeApiServer,
    /// The whole node's power cut for [`POWER_DOWNTIME`] (`Faults::power_cut`): the API server
    /// gone, every pod's processes killed at once; then the node boots and runs the pods again,
    /// restart counts from 0, every member in recovery. In turn: the operator dies with the
    /// node (it ran there) and a new one starts once every member is Ready again (as after a
    /// restart of the sandbox), or it runs elsewhere and lives through it.
    PowerLoss,
}

/// How long the node stays without power in [`Fault::PowerLoss`].
const POWER_DOWNTIME: Duration = Duration::from_secs(5);
/// How soon after the node's return the cluster must take writes again.
const WRITABLE_AFTER_RETURN: Duration = Duration::from_secs(30);

/// The faults of one round; the switchover before the lost nodes, which leave a pod
/// Terminating for ever.
const FAULTS: [Fault; 13] = [
    Fault::DeletePrimaryPod,
    Fault::KillPrimaryPostmaster,
    Fault::KillPrimaryBackend,
    Fault::HangPrimary,
    Fault::KillOperatorMidFailover,
    Fault::KillOperatorMidPromotion,
    Fault::LoseReplica,
    Fault::Switchover,
    Fault::LosePrimaryNode,
    Fault::KillOperatorAtLostNodeFence,
    Fault::PauseLeader,
    Fault::FreezeApiServer,
    Fault::PowerLoss,
];

impl Fault {
    fn caption(self) -> &'static str {
        match self {
            Fault::DeletePrimaryPod => "kubectl delete pod <primary>",
            Fault::KillPrimaryPostmaster => "SIGKILL of the primary's postmaster",
            Fault::KillPrimaryBackend => "SIGKILL of one of the primary's backends",
            Fault::HangPrimary => "the primary hung (SIGSTOP)",
            Fault::KillOperatorMidFailover => {
                "the operator killed mid-failover (in turn: 1 s into the delay, at the fence)"
            }
            Fault::KillOperatorMidPromotion => {
                "kubectl delete pod <primary>, the operator killed as it promotes"
            }
            Fault::LoseReplica => "a replica's node lost",
            Fault::Switchover => "a planned switchover (switchover-to annotation)",
            Fault::LosePrimaryNode => "the primary's node lost (frozen, node grace)",
            Fault::KillOperatorAtLostNodeFence => {
                "the primary's node lost (frozen, node grace), the operator killed at the fence"
            }
            Fault::PauseLeader => {
                "two operators, the leader paused 25 s (SIGSTOP) as the primary's postmaster is killed"
            }
            Fault::FreezeApiServer => {
                "two operators, the primary's postmaster killed, the API server and kubelet frozen 10 s"
            }
            Fault::PowerLoss => {
                "the whole node's power cut for 5 s (in turn: the operator with it, elsewhere)"
            }
        }
    }

    /// The goal for the fault's own figure ([`Measured::figure`]), and the bound the run
    /// holds it to. The paused leader's standby writes again within the lease duration + 3 s
    /// of the pause. After a freeze, the goal is writes back within 3 s of the server's
    /// answering again, a failover's 2 s delay included, counted from then since the kubelet
    /// reported the crash only then: printed, not held on a loaded machine; the bound is the
    /// lease duration, sooner than any standby could have taken over. After a power cut: writes
    /// back within 30 s of the node's return.
    fn figure_goal(self) -> Option<(Duration, Duration)> {
        let pause = LEASE_DURATION + Duration::from_secs(3);
        match self {
            Fault::PauseLeader => Some((pause, pause)),
            Fault::FreezeApiServer => Some((Duration::from_secs(3), LEASE_DURATION)),
            Fault::PowerLoss => Some((WRITABLE_AFTER_RETURN, WRITABLE_AFTER_RETURN)),
            _ => None,
        }
    }

    /// Whether the fault needs the operator as two processes under leader election.
    fn needs_two_operators(self) -> bool {
        matches!(self, Fault::PauseLeader | Fault::FreezeApiServer)
    }
}

/// A stage05 process as a learner starts it (`--server`, default flags but a free metrics
/// port), `HOSTNAME=name`; its stdout lines go into the story as `[name] line`.
struct OperatorProcess {
    name: &'static str,
    child: tokio::process::Child,
}

impl OperatorProcess {
    fn start(name: &'static str, server: &str, reporter: &Reporter) -> OperatorProcess {
        use tokio::io::{AsyncBufReadExt, BufReader};
        let mut child = test_support::operator_command(STAGE05, server)
            .args(["--metrics-address", "127.0.0.1:0"])
            .env("HOSTNAME", name)
            .spawn()
            .expect("stage05 starts");
        let pipe = child.stdout.take().expect("stdout piped");
        let reporter = reporter.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                reporter.report_operator(format!("[{name}] {line}"));
            }
        });
        OperatorProcess { name, child }
    }

    /// `kill -SIGNAL pid`.
    async fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let sent = tokio::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .await
            .expect("kill runs");
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// Its exit status, within 60 s.
    async fn exited(&mut self) -> std::process::ExitStatus {
        tokio::time::timeout(Duration::from_secs(60), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("{} exits within 60 s", self.name))
            .expect("wait works")
    }

    /// SIGTERM (a leader releases its Lease) and its exit, if it still runs.
    async fn terminate(mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal("TERM").await;
            let status = self.exited().await;
            println!("chaos: {} stopped: {status}", self.name);
        }
    }
}

/// Whether a request in the sandbox's log may change something: a write, or a command in a pod.
fn changes_something(request: &sandbox::RequestRecord) -> bool {
    (request.method != "GET" && request.method != "HEAD") || request.subresource == "exec"
}

/// How a primary's node is lost: frozen, its pod left Ready for the node lifecycle
/// controller's grace period, `CHAOS_NODE_GRACE` seconds (5 by default; kube-controller-manager
/// waits 40 s, 50 s from Kubernetes 1.32).
fn lost_node() -> LostNode {
    let grace = match std::env::var("CHAOS_NODE_GRACE") {
        Ok(seconds) => seconds
            .parse()
            .unwrap_or_else(|_| panic!("CHAOS_NODE_GRACE={seconds}: say a number of seconds")),
        Err(_) => 5,
    };
    LostNode {
        grace: Duration::from_secs(grace),
        ..LostNode::default()
    }
}

/// Every acknowledged commit: the highest row number, and when each was acknowledged.
#[derive(Default)]
struct Ledger {
    last: AtomicI64,
    times: Mutex<Vec<Instant>>,
}

impl Ledger {
    fn acknowledge(&self, n: i64) {
        let mut times = self.times.lock().expect("ledger");
        times.push(Instant::now());
        // Under the lock, so that `last_acknowledged` reads a row and its own time.
        self.last.store(n, Ordering::SeqCst);
    }

    fn last(&self) -> i64 {
        self.last.load(Ordering::SeqCst)
    }

    /// The highest acknowledged row and when it was acknowledged (now, before any).
    fn last_acknowledged(&self) -> (i64, Instant) {
        let times = self.times.lock().expect("ledger");
        let at = times.last().copied().unwrap_or_else(Instant::now);
        (self.last.load(Ordering::SeqCst), at)
    }

    /// When the first write after `at` was acknowledged, if one was.
    fn first_after(&self, at: Instant) -> Option<Instant> {
        let times = self.times.lock().expect("ledger");
        times.iter().find(|t| **t > at).copied()
    }

    /// The longest stretch without an acknowledged write from the last one before `from` to
    /// `to`.
    fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let times = self.times.lock().expect("ledger");
        let mut previous = times
            .iter()
            .rev()
            .find(|t| **t <= from)
            .copied()
            .unwrap_or(from);
        let mut longest = Duration::ZERO;
        for time in times.iter().filter(|t| **t > from && **t <= to) {
            longest = longest.max(*time - previous);
            previous = *time;
        }
        longest.max(to.saturating_duration_since(previous))
    }
}

/// Commit row 1, 2, 3 ... through `address`; a row counts once psql said COMMIT. A failed or
/// timed-out insert is tried again with the same number (it may have committed: ON CONFLICT).
async fn write(psql: HostPsql, address: String, ledger: Arc<Ledger>, stop: CancellationToken) {
    let mut n = ledger.last() + 1;
    while !stop.is_cancelled() {
        let sql = format!("INSERT INTO ledger VALUES ({n}) ON CONFLICT DO NOTHING");
        match psql.run(&address, &sql, SQL_DEADLINE).await {
            Ok(_) => {
                ledger.acknowledge(n);
                n += 1;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// How far apart two answers of one member may be and still stand for every moment between them.
const BRACKET: Duration = Duration::from_secs(1);
/// Asked of every member: when it answered (by its clock), whether it takes writes, and whether
/// it could acknowledge one: with synchronous replication, only while a synchronous standby
/// streams from it.
const WRITABLE_SQL: &str = "SELECT extract(epoch FROM clock_timestamp()), NOT pg_is_in_recovery(), NOT pg_is_in_recovery() AND (current_setting('synchronous_standby_names') = '' OR EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')))";

/// One member's answers: (when, by the server's clock; yes or no).
type Answers = BTreeMap<String, Vec<(f64, bool)>>;

/// One answer to [`WRITABLE_SQL`]: (when; not in recovery; able to acknowledge a commit).
type Answer = (f64, bool, bool);

/// What the split-brain watch saw since the last reset.
#[derive(Default)]
struct Writable {
    polls: AtomicUsize,
    /// Each member's answers, in the order of their times.
    answers: Mutex<BTreeMap<String, Vec<Answer>>>,
}

impl Writable {
    fn reset(&self) {
        self.polls.store(0, Ordering::SeqCst);
        self.answers.lock().expect("answers").clear();
    }

    /// Members writable at one moment, then members able to acknowledge a commit at one moment.
    fn at_once(&self) -> (Vec<String>, Vec<String>) {
        let answers = self.answers.lock().expect("answers");
        let only = |pick: fn(&Answer) -> bool| -> Answers {
            answers
                .iter()
                .map(|(name, all)| (name.clone(), all.iter().map(|a| (a.0, pick(a))).collect()))
                .collect()
        };
        (at_once(&only(|a| a.1)), at_once(&only(|a| a.2)))
    }
}

/// Two members that said yes at one moment, as the answers prove it: one said yes at a time when
/// another had said yes just before and said so again just after (less than [`BRACKET`] apart).
/// A server that answers is running, and a running primary stays one until it stops, so the
/// other was writable all that while. The members' clocks are one clock: every pod runs on this
/// machine. One poll's answers are not one moment: each member is asked by a psql of its own,
/// seconds apart on a loaded machine.
fn at_once(answers: &Answers) -> Vec<String> {
    let mut found = Vec::new();
    for (b, b_answers) in answers {
        for pair in b_answers.windows(2) {
            let ((from, true), (to, true)) = (pair[0], pair[1]) else {
                continue;
            };
            if to - from > BRACKET.as_secs_f64() {
                continue;
            }
            for (a, a_answers) in answers.iter().filter(|(a, _)| *a != b) {
                if let Some((at, _)) = a_answers
                    .iter()
                    .find(|(at, yes)| *yes && (from..=to).contains(at))
                {
                    found.push(format!("{a} at {at:.3}, {b} from {from:.3} to {to:.3}"));
                }
            }
        }
    }
    found
}

/// Ask every member [`WRITABLE_SQL`] every [`POLL_EVERY`].
async fn watch_writable(client: Client, psql: HostPsql, writable: Arc<Writable>) {
    loop {
        let pods = members(&client).await;
        let asks: Vec<_> = pods
            .iter()
            .filter_map(|pod| {
                let ip = pod["status"]["podIP"].as_str()?.to_string();
                let name = pod["metadata"]["name"].as_str()?.to_string();
                let psql = psql.clone();
                Some(tokio::spawn(async move {
                    let answer = psql.run(&ip, WRITABLE_SQL, Duration::from_secs(2)).await;
                    (name, answer)
                }))
            })
            .collect();
        let mut answered = Vec::new();
        for ask in asks {
            let Ok((name, Ok(answer))) = ask.await else {
                continue;
            };
            let fields: Vec<&str> = answer.trim().split('|').collect();
            if let [at, is_writable, is_acknowledging] = fields[..] {
                if let Ok(at) = at.parse::<f64>() {
                    answered.push((name, (at, is_writable == "t", is_acknowledging == "t")));
                }
            }
        }
        {
            let mut answers = writable.answers.lock().expect("answers");
            for (name, answer) in answered {
                let mine = answers.entry(name).or_default();
                // Asked side by side, answers can come back out of their servers' order.
                let at = mine.partition_point(|earlier| earlier.0 <= answer.0);
                mine.insert(at, answer);
            }
        }
        writable.polls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// Every pod of the cluster, terminating ones included.
async fn members(client: &Client) -> Vec<Value> {
    let path = pods_path(client.namespace(), &format!("{CLUSTER_LABEL}={CLUSTER}"));
    match client.get::<Value>(&path).await {
        Ok(list) => list["items"].as_array().cloned().unwrap_or_default(),
        Err(error) => {
            println!("chaos: listing the cluster's pods failed: {error}");
            Vec::new()
        }
    }
}

/// Each pod's postgres container's `state.running.startedAt`, by pod name.
fn started_at(pods: &[Value]) -> BTreeMap<String, String> {
    pods.iter()
        .filter_map(|pod| {
            let name = pod["metadata"]["name"].as_str()?;
            let container = pod["status"]["containerStatuses"]
                .as_array()?
                .iter()
                .find(|c| c["name"] == POSTGRES_CONTAINER)?;
            let at = container["state"]["running"]["startedAt"].as_str()?;
            Some((name.to_string(), at.to_string()))
        })
        .collect()
}

fn pod_ip(pods: &[Value], name: &str) -> Option<String> {
    pods.iter()
        .find(|p| p["metadata"]["name"] == name)
        .and_then(|p| p["status"]["podIP"].as_str())
        .map(str::to_string)
}

/// Ask the replica at `ip` every [`CATCH_UP_POLL`] whether it holds the `wanted` rows of
/// 1..=`last` (all of them, unless an asynchronous failover lost some), until it does or
/// `deadline` passes: how long after `acknowledged` (row `last`'s acknowledgement) it answered
/// that it did, or its last answer (how far behind, or why no answer). An answer to a query
/// sent before the deadline counts, even if it came after.
async fn catch_up(
    psql: HostPsql,
    ip: String,
    (last, wanted): (i64, i64),
    acknowledged: Instant,
    deadline: Instant,
) -> Result<Duration, String> {
    let sql =
        format!("SELECT count(*) FILTER (WHERE n <= {last}), coalesce(max(n), 0) FROM ledger");
    loop {
        let asked = Instant::now();
        // A frozen replica accepts the connection and never answers: not past the deadline
        // by more than a second.
        let wait = deadline
            .saturating_duration_since(asked)
            .clamp(Duration::from_secs(1), SQL_DEADLINE);
        let seen = match psql.run(&ip, &sql, wait).await {
            Ok(answer) => {
                let held = answer.split('|').next().and_then(|c| c.parse::<i64>().ok());
                match held {
                    Some(held) if held >= wanted => return Ok(acknowledged.elapsed()),
                    Some(held) => format!(
                        "{} rows behind: it holds {held} of rows 1..={last}, {wanted} wanted (count|max: {answer})",
                        wanted - held
                    ),
                    None => format!("answered {answer:?}"),
                }
            }
            Err(error) => format!("no answer: {error}"),
        };
        if Instant::now() >= deadline {
            return Err(seen);
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
}

/// The operator's timings a run uses: what a user gets, or the end-to-end tests' short ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timings {
    /// `PostgresOptions::default()`, which the flags' defaults match.
    Defaults,
    /// `test_support::quick_postgres_options()`: a round every second, shorter replacement
    /// delays, the same failover delay.
    Short,
}

impl Timings {
    fn options(self) -> PostgresOptions {
        match self {
            Timings::Defaults => PostgresOptions::default(),
            Timings::Short => test_support::quick_postgres_options(),
        }
    }

    /// Stage 05's failover layer, as its flags' defaults make it, or the tests' short one.
    fn failover(self) -> Failover {
        match self {
            Timings::Defaults => Failover::default(),
            Timings::Short => test_support::quick_failover(),
        }
    }

    /// How each fault's line names the run.
    fn label(self) -> String {
        let delay = self.failover().delays.failover_after.as_secs();
        match self {
            Timings::Defaults => format!("default flags, failover delay {delay} s"),
            Timings::Short => format!("short timings, failover delay {delay} s"),
        }
    }
}

/// The operator in this process, as `run_postgres_operator` runs it.
struct Operator {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Operator {
    fn start(client: &Client, reporter: &Reporter, timings: Timings) -> Operator {
        let stop = CancellationToken::new();
        let running = run_postgres_operator(
            client.clone(),
            timings.options(),
            timings.failover(),
            reporter.clone(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            if let Err(error) = running.await {
                println!("chaos: the operator ended with an error: {error}");
            }
        });
        Operator { stop, task }
    }

    /// Cancel it and wait for it to end (30 s at most): how long it took.
    async fn stop(self) -> Duration {
        let asked = Instant::now();
        self.stop.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(30), self.task).await;
        asked.elapsed()
    }

    /// End it as SIGKILL would a process: its task and the cluster tasks it owns are dropped
    /// at their next await, whatever they were doing (a round half done, an exec in flight).
    /// The token is cancelled after, only so that the detached watch tasks let go.
    async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        self.stop.cancel();
    }
}

/// Everything the rounds share.
struct Chaos {
    sandbox: Sandbox,
    client: Client,
    story: Story,
    reporter: Reporter,
    operator: Option<Operator>,
    psql: HostPsql,
    ledger: Arc<Ledger>,
    writable: Arc<Writable>,
    replication: Replication,
    timings: Timings,
    /// Acknowledged rows found missing so far (asynchronous replication only).
    lost: i64,
    /// How many times the operator was killed mid-failover (which moment is chosen in turn).
    operator_kills: usize,
    /// How many power cuts so far (whether the operator dies with the node is chosen in turn).
    power_cuts: usize,
    /// A power cut's: when the node came back.
    node_back: Option<Instant>,
    /// The operator's story lines, each with when this test first saw it.
    timeline: Arc<Mutex<Vec<(Instant, String)>>>,
    /// The operator as stage05 processes, leader first, while a fault needs two.
    processes: Vec<OperatorProcess>,
    /// What the last fault measured of its own (the paused leader's failover, the writes'
    /// return after a freeze or after the node's return from a power cut).
    figure: Option<Duration>,
}

/// The cluster as converged: its primary (and that primary's IP).
struct Converged {
    primary: String,
    standbys: Vec<String>,
}

impl Chaos {
    fn namespace(&self) -> &str {
        self.client.namespace()
    }

    async fn status(&self) -> Value {
        self.client
            .get::<Value>(&object_path(self.namespace(), CLUSTER))
            .await
            .map(|cluster| cluster["status"].clone())
            .unwrap_or(Value::Null)
    }

    /// The cluster converged now: SIZE ready members, the recorded primary is the one member
    /// out of recovery, every other member streams from it, and (synchronous) its synchronous
    /// standbys are the other two.
    async fn converged_now(&self) -> Option<Converged> {
        let status = self.status().await;
        let primary = status["primary"].as_str()?.to_string();
        if status["readyInstances"] != SIZE {
            return None;
        }
        if self.replication == Replication::Synchronous {
            let standbys: Vec<&str> = status["synchronous"]["standbys"]
                .as_array()?
                .iter()
                .filter_map(Value::as_str)
                .collect();
            let settled = status["synchronous"]["primary"] == primary.as_str()
                && standbys.len() as u64 == SIZE - 1
                && !standbys.contains(&primary.as_str());
            if !settled {
                return None;
            }
        }
        let pods = members(&self.client).await;
        let live: Vec<&Value> = pods
            .iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        if live.len() as u64 != SIZE {
            return None;
        }
        let mut out_of_recovery = Vec::new();
        let mut replicas = Vec::new();
        for pod in live {
            let ip = pod["status"]["podIP"].as_str()?;
            let name = pod["metadata"]["name"].as_str()?.to_string();
            let answer = self
                .psql
                .run(ip, "SELECT pg_is_in_recovery()", SQL_DEADLINE)
                .await
                .ok()?;
            if answer == "f" {
                out_of_recovery.push(name);
            } else {
                replicas.push(name);
            }
        }
        if out_of_recovery != [primary.clone()] {
            return None;
        }
        // Ready is not enough: a standby left on an old timeline answers queries and follows
        // nothing. Only the primary's pg_stat_replication says who streams from it.
        let primary_ip = pod_ip(&pods, &primary)?;
        let streaming = self
            .psql
            .run(&primary_ip, STREAMING_SQL, SQL_DEADLINE)
            .await
            .ok()?;
        let streaming: Vec<&str> = streaming.lines().map(str::trim).collect();
        if !replicas.iter().all(|r| streaming.contains(&r.as_str())) {
            return None;
        }
        replicas.sort();
        Some(Converged {
            primary,
            standbys: replicas,
        })
    }

    /// Wait for [`Chaos::converged_now`]; on timeout, print what the cluster looks like and the
    /// operator's last lines, then fail naming `what`.
    async fn converged(&self, what: &str) -> Converged {
        let end = Instant::now() + FAULT_DEADLINE;
        loop {
            if let Some(converged) = self.converged_now().await {
                return converged;
            }
            if Instant::now() >= end {
                self.describe().await;
                panic!("{what}: the cluster did not converge within {FAULT_DEADLINE:?}");
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Print the cluster's status, its pods, and the operator's last 40 lines.
    async fn describe(&self) {
        println!("chaos: status {}", self.status().await);
        for pod in members(&self.client).await {
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .map(|c| c["status"].clone());
            println!(
                "chaos: pod {} role={} ip={} ready={:?} deleting={}",
                pod["metadata"]["name"],
                pod["metadata"]["labels"]["workshop.example.com/role"],
                pod["status"]["podIP"],
                ready,
                !pod["metadata"]["deletionTimestamp"].is_null()
            );
        }
        let lines = self.story.lines();
        for line in &lines[lines.len().saturating_sub(40)..] {
            println!("chaos: story: {line}");
        }
    }

    /// Every acknowledged row is on `primary`: rows 1..=last, all of them. Asynchronous: how
    /// many acknowledged rows went missing since the last count, which may be more than none.
    async fn acknowledged_rows_lost(&mut self, primary: &str, fault: &str) -> (i64, i64) {
        let last = self.ledger.last();
        // Polled, not read once: `members` reads an empty list when one GET fails (a loaded
        // machine's timeout), and the primary was there a moment ago.
        let client = &self.client;
        let ip = test_support::eventually(Duration::from_secs(30), "the primary's IP", || async {
            pod_ip(&members(client).await, primary)
        })
        .await;
        let count = self
            .psql
            .run(
                &ip,
                &format!("SELECT count(*) FROM ledger WHERE n <= {last}"),
                Duration::from_secs(10),
            )
            .await
            .unwrap_or_else(|error| panic!("{fault}: counting on {primary}: {error}"));
        if self.replication == Replication::Synchronous {
            assert_eq!(
                count,
                last.to_string(),
                "{fault}: acknowledged rows lost: {last} acknowledged, {count} of them on {primary}"
            );
            return (last, 0);
        }
        let count: i64 = count
            .parse()
            .unwrap_or_else(|_| panic!("{fault}: count(*) said {count:?}"));
        let lost_now = last - count - self.lost;
        self.lost = last - count;
        (last, lost_now)
    }

    /// Wait until `more` rows beyond the current last were acknowledged.
    async fn writes_resume(&self, more: i64, what: &str) -> Instant {
        let target = self.ledger.last() + more;
        test_support::eventually(FAULT_DEADLINE, what, || async {
            (self.ledger.last() >= target).then(Instant::now)
        })
        .await
    }

    /// Every replica of `converged` holds every row acknowledged so far within
    /// [`CATCH_UP_DEADLINE`] of the last one's acknowledgement (the writer may go on writing
    /// meanwhile). Each replica's time: from that acknowledgement to the answer that showed all
    /// of them (a psql connection included). Else the test fails naming the replica, how far
    /// behind it was, what its WAL receiver and its waiting processes say and what the primary
    /// says it sent, after printing the cluster and the timeline since `since`.
    async fn replicas_caught_up(
        &self,
        converged: &Converged,
        what: &str,
        since: Instant,
    ) -> Vec<(String, Duration)> {
        let (last, acknowledged) = self.ledger.last_acknowledged();
        let deadline = acknowledged + CATCH_UP_DEADLINE;
        let client = &self.client;
        let named = || converged.standbys.iter().chain([&converged.primary]);
        let ips = test_support::eventually(Duration::from_secs(30), "the members' IPs", || async {
            let pods = members(client).await;
            named()
                .map(|name| pod_ip(&pods, name).map(|ip| (name.clone(), ip)))
                .collect::<Option<Vec<_>>>()
        })
        .await;
        let (primary_ip, replicas) = ips.split_last().expect("the primary is named last");
        // Asynchronous: what the primary holds of them, which may be fewer (counted as lost).
        let wanted = match self.replication {
            Replication::Synchronous => last,
            Replication::Asynchronous => {
                let count = format!("SELECT count(*) FROM ledger WHERE n <= {last}");
                let held = self.psql.run(&primary_ip.1, &count, SQL_DEADLINE).await;
                held.ok().and_then(|c| c.parse().ok()).unwrap_or(last)
            }
        };
        let asks = replicas.iter().map(|(_, ip)| {
            let psql = self.psql.clone();
            let rows = (last, wanted);
            tokio::spawn(catch_up(psql, ip.clone(), rows, acknowledged, deadline))
        });
        let answers = futures_util::future::join_all(asks).await;
        let mut caught_up = Vec::new();
        let mut behind = Vec::new();
        for ((name, ip), answer) in replicas.iter().zip(answers) {
            match answer.expect("the catch-up task") {
                Ok(took) => caught_up.push((name.clone(), took)),
                Err(seen) => {
                    let answer = |sql| async move {
                        let answer = self.psql.run(ip, sql, SQL_DEADLINE).await;
                        answer.unwrap_or_else(|error| format!("no answer: {error}"))
                    };
                    let (receiver, waits) = (answer(RECEIVER_SQL).await, answer(WAITS_SQL).await);
                    behind.push(format!(
                        "{name} ({ip}) {seen}; it says: {receiver}; {waits}"
                    ));
                }
            }
        }
        if behind.is_empty() {
            return caught_up;
        }
        let primary = &primary_ip.0;
        let senders = self
            .psql
            .run(&primary_ip.1, SENDERS_SQL, SQL_DEADLINE)
            .await;
        self.describe().await;
        self.print_timeline(since);
        panic!(
            "{what}: not every replica held the {last} acknowledged rows {CATCH_UP_DEADLINE:?} after the last one: {}; the primary {primary} says: {}",
            behind.join("; "),
            senders.unwrap_or_else(|error| format!("no answer: {error}"))
        );
    }

    /// The first story line after the first `from` lines that names `pod` and says `words`
    /// (within 30 s and a lost node's grace period; else the test fails). Polled every 2 ms, not
    /// at `eventually`'s pace: the operator faults are meant to land inside a step that takes
    /// tens of milliseconds.
    async fn said_after(&self, from: usize, pod: &str, words: &str) -> String {
        let within = Duration::from_secs(30) + lost_node().grace;
        let deadline = Instant::now() + within;
        loop {
            let wanted = |line: &str| line.contains(pod) && line.contains(words);
            if let Some(line) = self.story.first_after(from, wanted) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "{pod} {words}: not said in {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Inject `fault` against the converged cluster `before`.
    async fn inject(&mut self, fault: Fault, before: &Converged) {
        let namespace = self.namespace().to_string();
        let primary = before.primary.as_str();
        let faults = self.sandbox.faults();
        match fault {
            Fault::DeletePrimaryPod => {
                let path = format!("/api/v1/namespaces/{namespace}/pods/{primary}");
                self.client
                    .delete::<Value>(&path)
                    .await
                    .expect("the primary pod deleted");
            }
            Fault::KillPrimaryPostmaster => {
                assert!(faults.crash_container(&namespace, primary, POSTGRES_CONTAINER));
            }
            Fault::KillPrimaryBackend => {
                let sql = "COPY (SELECT 1) TO PROGRAM 'kill -KILL $PPID'";
                let argv = psql_argv(sql);
                let killed = psql_in_pod(&self.client, &namespace, primary, &argv).await;
                assert!(killed.is_err(), "the killed backend answered: {killed:?}");
            }
            Fault::HangPrimary => assert!(faults.hang_pod(&namespace, primary)),
            Fault::KillOperatorMidFailover => {
                let said_before = self.story.count();
                assert!(faults.lose_node_for_pod(&namespace, primary));
                // In turn: while the failover delay runs (nothing done yet, the new operator
                // must not start the delay again), and at the fence (the old primary deleted,
                // no replica promoted yet: the new operator must finish it).
                self.operator_kills += 1;
                if self.operator_kills % 2 == 1 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    println!("chaos: killing the operator 1 s after the primary's loss");
                } else {
                    let fenced = self.said_after(said_before, primary, "Member lost").await;
                    println!("chaos: killing the operator at the fence: {fenced}");
                }
                self.restart_operator().await;
            }
            Fault::KillOperatorMidPromotion => {
                let said_before = self.story.count();
                let path = format!("/api/v1/namespaces/{namespace}/pods/{primary}");
                self.client
                    .delete::<Value>(&path)
                    .await
                    .expect("the primary pod deleted");
                // Any replica's promotion: the pod is the operator's choice.
                let promoting = self.said_after(said_before, "", "Promoting").await;
                println!("chaos: killing the operator as it promotes: {promoting}");
                self.restart_operator().await;
            }
            Fault::LoseReplica => {
                let replica = before.standbys.first().expect("a standby");
                assert!(faults.lose_node_for_pod(&namespace, replica));
            }
            Fault::Switchover => {
                let target = before.standbys.first().expect("a standby");
                let path = postgres_operator::api::object_path(&namespace, CLUSTER);
                let patch = serde_json::json!({"metadata": {"annotations": {
                    postgres_operator::failover::api::SWITCHOVER_ANNOTATION: target,
                }}});
                self.client
                    .patch::<Value>(&path, &postgres_operator::client::Patch::Merge(patch))
                    .await
                    .expect("annotated");
            }
            Fault::LosePrimaryNode => {
                assert!(faults.lose_node(&namespace, primary, lost_node()));
            }
            Fault::KillOperatorAtLostNodeFence => {
                let said_before = self.story.count();
                assert!(faults.lose_node(&namespace, primary, lost_node()));
                let fenced = self.said_after(said_before, primary, "Member lost").await;
                println!("chaos: killing the operator at the fence: {fenced}");
                self.restart_operator().await;
            }
            Fault::PauseLeader => self.pause_leader(primary).await,
            Fault::FreezeApiServer => {
                let said_before = self.story.count();
                assert!(faults.crash_container(&namespace, primary, POSTGRES_CONTAINER));
                faults.freeze(true);
                self.mark("the API server and kubelet frozen");
                tokio::time::sleep(FREEZE).await;
                faults.freeze(false);
                self.mark("the API server and kubelet thawed");
                let thawed = Instant::now();
                let back = self.writes_resume(1, "writes after the thaw").await;
                let back = self.ledger.first_after(thawed).unwrap_or(back) - thawed;
                // The leader kept its place (renewed, if its gate closed): the standby never led.
                let renewed = self.story.first_after(said_before, |line| {
                    line.contains("[op-a]") && line.contains("still ours, renewed")
                });
                let taken = self.story.first_after(said_before, |line| {
                    line.contains("[op-b]") && line.contains("leading as")
                });
                println!(
                    "chaos: frozen API server: writes back {:.1} s after it answered again; op-a said {renewed:?}",
                    back.as_secs_f64()
                );
                let running = matches!(self.processes[0].child.try_wait(), Ok(None));
                assert!(
                    running && taken.is_none(),
                    "op-a ended, or op-b led: {taken:?}"
                );
                self.figure = Some(back);
            }
            Fault::PowerLoss => {
                let started_before = started_at(&members(&self.client).await);
                self.power_cuts += 1;
                let with_the_operator = self.power_cuts % 2 == 1;
                let cut_at = Instant::now();
                if with_the_operator {
                    if let Some(operator) = self.operator.take() {
                        operator.kill().await;
                    }
                    println!("chaos: the operator dies with the node");
                }
                let cut = faults.power_cut(POWER_DOWNTIME).await;
                assert!(cut >= SIZE as usize, "{cut} pods lost their power");
                let back = cut_at + POWER_DOWNTIME;
                self.node_back = Some(back);
                if with_the_operator {
                    tokio::time::sleep_until(back.into()).await;
                    self.all_ready_again(&started_before).await;
                    self.restart_operator().await;
                }
            }
        }
    }

    /// Wait until every member pod is Ready in a postgres container started since `before`
    /// (each member's `startedAt` then): the node back, each started again.
    async fn all_ready_again(&self, before: &BTreeMap<String, String>) {
        let client = &self.client;
        test_support::eventually(FAULT_DEADLINE, "every member Ready again", || async {
            let pods = members(client).await;
            let now = started_at(&pods);
            let ready = pods.iter().filter(|pod| {
                let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                let conditions = pod["status"]["conditions"].as_array();
                now.get(name).is_some_and(|at| before.get(name) != Some(at))
                    && conditions
                        .into_iter()
                        .flatten()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            (ready.count() as u64 == SIZE && pods.len() as u64 == SIZE).then_some(())
        })
        .await;
        self.mark("every member Ready again");
    }

    /// The operator as two stage05 processes under leader election, in place of the one in
    /// this process: `op-a` leads, `op-b` waits.
    async fn start_two_operators(&mut self) {
        if let Some(operator) = self.operator.take() {
            operator.stop().await;
        }
        let said_before = self.story.count();
        let url = self.sandbox.url();
        self.processes
            .push(OperatorProcess::start("op-a", &url, &self.reporter));
        self.said_after(said_before, "[op-a]", "leading as").await;
        self.processes
            .push(OperatorProcess::start("op-b", &url, &self.reporter));
        self.said_after(said_before, "[op-b]", "waiting for lease")
            .await;
    }

    /// Back to the one operator in this process, the processes stopped.
    async fn back_to_one_operator(&mut self) {
        for process in std::mem::take(&mut self.processes) {
            process.terminate().await;
        }
        self.operator = Some(Operator::start(&self.client, &self.reporter, self.timings));
    }

    /// The leader (`op-a`) paused for [`PAUSE`] as the primary's postmaster is killed: the
    /// standby must have written again within the lease duration + 3 s of the pause, and the
    /// woken leader send nothing that changes anything before reading the Lease, then stop.
    async fn pause_leader(&mut self, primary: &str) {
        let said_before = self.story.count();
        self.processes[0].signal("STOP").await;
        let paused = Instant::now();
        self.mark("the leader op-a paused (SIGSTOP)");
        let namespace = self.namespace().to_string();
        let faults = self.sandbox.faults();
        assert!(faults.crash_container(&namespace, primary, POSTGRES_CONTAINER));
        let led = self.said_after(said_before, "[op-b]", "leading as").await;
        let led_after = paused.elapsed();
        let written = self.writes_resume(1, "writes after the pause").await;
        // The first write after the standby led: nothing is promoted before, and a commit
        // acknowledged between the pause and the kill must not count.
        let failed_over = self.ledger.first_after(paused + led_after);
        let failed_over = failed_over.unwrap_or(written) - paused;
        tokio::time::sleep_until((paused + PAUSE).into()).await;
        let woken = SystemTime::now();
        self.processes[0].signal("CONT").await;
        self.mark("the leader op-a resumed (SIGCONT)");
        let status = self.processes[0].exited().await;
        // Its last lines may still be in the pipe when its exit is seen.
        let lost = self.said_after(said_before, "[op-a]", "lost lease").await;
        // Its requests since it woke, in the order they reached the server.
        let mut sent: Vec<_> = self
            .sandbox
            .requests()
            .into_iter()
            .filter(|r| r.user_agent.contains("(op-a_") && r.received >= woken)
            .collect();
        sent.sort_by_key(|r| r.received);
        let read_lease = sent
            .iter()
            .position(|r| r.verb == "get" && r.resource == "leases");
        let first_change = sent.iter().position(changes_something);
        let listed: Vec<String> = sent
            .iter()
            .map(|r| format!("{} {} {}", r.method, r.path, r.code))
            .collect();
        println!(
            "chaos: paused leader: the standby led {:.1} s after the pause ({led}), writes back {:.1} s after it; woken, op-a {status}, said {lost:?}, and sent {} request(s): {listed:?}",
            led_after.as_secs_f64(),
            failed_over.as_secs_f64(),
            sent.len()
        );
        self.figure = Some(failed_over);
        assert_eq!(status.code(), Some(1), "the woken leader stops: {lost}");
        assert!(lost.contains("held by op-b"), "{lost:?}");
        if let Some(change) = first_change {
            assert!(
                read_lease.is_some_and(|read| read < change),
                "woken, op-a changed something before reading the Lease: {listed:?}"
            );
        }
    }

    /// Kill the operator and start a new one in its place.
    async fn restart_operator(&mut self) {
        if let Some(operator) = self.operator.take() {
            self.mark("killing the operator");
            operator.kill().await;
            println!("chaos: operator killed, starting a new one");
        }
        self.mark("starting a new operator");
        self.operator = Some(Operator::start(&self.client, &self.reporter, self.timings));
    }

    /// One fault: inject it, wait for convergence and resumed writes, check no row was lost,
    /// every replica holds every acknowledged row, and no two primaries were seen. What it
    /// measured, and the cluster as it converged.
    async fn run_fault(&mut self, fault: Fault) -> (Measured, Converged) {
        let caption = fault.caption();
        self.figure = None;
        if fault.needs_two_operators() {
            self.start_two_operators().await;
        }
        let before = self.converged(&format!("before {caption}")).await;
        self.writes_resume(5, &format!("writes before {caption}"))
            .await;
        self.writable.reset();
        println!("chaos: --- {caption} (primary {})", before.primary);
        let injected = Instant::now();
        let said_before = self.story.count();
        self.mark("injecting the fault");
        self.inject(fault, &before).await;
        if fault == Fault::Switchover {
            // Until the operator acts on the annotation, the cluster still looks converged,
            // around the old primary.
            let target = before.standbys.first().expect("a standby");
            self.said_after(said_before, target, "Promoting").await;
        }
        let after = self.converged(caption).await;
        // Converged means every replica streams: one that was stuck behind (its WAL receiver
        // waiting on the old primary) only converges once replaced, and the check of the rows
        // below cannot see it any more. The operator's line says so.
        if let Some(line) = self
            .story
            .first_after(said_before, |line| line.contains(NOT_STREAMING_SAID))
        {
            self.print_timeline(injected);
            panic!("{caption}: a replica fell behind for the not-streaming delay: {line}");
        }
        if fault == Fault::HangPrimary
            && self
                .sandbox
                .faults()
                .resume_pod(self.namespace(), &before.primary)
        {
            // The old primary was never removed: resumed, it must not take writes beside the
            // new one (Patroni's lost rows came from exactly this).
            println!("chaos: resumed the hung {}", before.primary);
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        self.mark("converged");
        let resumed = self
            .writes_resume(5, &format!("writes after {caption}"))
            .await;
        let outage = self.ledger.longest_gap(injected, resumed);
        // A power cut's figure: the first write the cluster took after the node's return.
        let mut writable_at = None;
        if let Some(back) = self.node_back.take() {
            let first = self.ledger.first_after(back).unwrap_or(resumed);
            self.figure = Some(first.saturating_duration_since(back));
            writable_at = Some(first);
        }
        let after = if fault == Fault::HangPrimary {
            self.converged(caption).await
        } else {
            after
        };
        let (last, lost) = self.acknowledged_rows_lost(&after.primary, caption).await;
        let caught_up = self.replicas_caught_up(&after, caption, injected).await;
        // After a power cut, every row acknowledged before it is on every member within
        // CATCH_UP_DEADLINE of the first write taken again: by the time the check above
        // returned at the latest (an upper bound, convergence included).
        if let Some(writable_at) = writable_at {
            let held = writable_at.elapsed();
            println!(
                "chaos: {caption}: every acknowledged row on every member at most {:.1} s after the first write taken again",
                held.as_secs_f64()
            );
            assert!(
                held <= CATCH_UP_DEADLINE,
                "{caption}: every row on every member only {held:?} after writable"
            );
        }
        let (writable, acknowledging) = self.writable.at_once();
        let polls = self.writable.polls.load(Ordering::SeqCst);
        println!(
            "chaos: {caption} ({}): outage {:.1} s, new primary {}, {last} rows acknowledged, {lost} of them lost here, every replica held them after {}; in {polls} polls, two members {}",
            self.timings.label(),
            outage.as_secs_f64(),
            after.primary,
            catch_up_times(&caught_up),
            if writable.is_empty() {
                "never writable at once".to_string()
            } else {
                format!("writable at once, never both able to acknowledge a commit: {writable:?}")
            }
        );
        if fault != Fault::LoseReplica {
            self.print_timeline(injected);
        }
        if let (Some(figure), Some((_, bound))) = (self.figure, fault.figure_goal()) {
            assert!(
                figure <= bound,
                "{caption}: writes back after {figure:?}, over {bound:?}"
            );
        }
        assert!(
            acknowledging.is_empty(),
            "{caption}: two members able to acknowledge a commit at once: {acknowledging:?}"
        );
        let slowest = caught_up.iter().map(|(_, took)| *took).max();
        let measured = Measured {
            outage,
            lost,
            two_writable: !writable.is_empty(),
            slowest_catch_up: slowest.unwrap_or_default(),
            figure: self.figure,
        };
        if fault.needs_two_operators() {
            self.back_to_one_operator().await;
        }
        (measured, after)
    }

    /// Note `what` in the timeline, as a story line would be.
    fn mark(&self, what: &str) {
        let mut timeline = self.timeline.lock().expect("timeline");
        timeline.push((Instant::now(), format!("[chaos] {what}")));
    }

    /// The operator's lines (and the test's marks) since `from`, with their times after it:
    /// where a fault's outage went.
    fn print_timeline(&self, from: Instant) {
        let timeline = self.timeline.lock().expect("timeline");
        for (at, line) in timeline.iter().filter(|(at, _)| *at >= from) {
            let after = at.duration_since(from).as_secs_f64();
            println!("chaos: timeline +{after:5.2} s {line}");
        }
    }
}

/// What one fault measured.
struct Measured {
    /// The longest stretch without an acknowledged write.
    outage: Duration,
    /// Acknowledged rows missing on the new primary (asynchronous replication only).
    lost: i64,
    /// Two members answered "not in recovery" at one moment (neither able to acknowledge, or
    /// the run failed).
    two_writable: bool,
    /// The slowest replica's time to hold every acknowledged row.
    slowest_catch_up: Duration,
    /// The fault's own figure: the paused leader's pause to writes back, the frozen API
    /// server's thaw to writes back, a power cut's node return to writes back.
    figure: Option<Duration>,
}

fn seconds(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

#[test]
fn two_members_say_yes_at_once_only_within_one_members_bracket() {
    let answers = |list: &[(&str, &[(f64, bool)])]| -> Answers {
        list.iter()
            .map(|(name, answers)| (name.to_string(), answers.to_vec()))
            .collect()
    };
    // A handover seen in one poll: the old primary's last answer from just before its kill, the
    // new one's first from just after its promotion, a second later.
    let handover = answers(&[
        ("old", &[(10.0, true)]),
        ("new", &[(9.9, false), (11.0, true), (11.3, true)]),
    ]);
    assert!(at_once(&handover).is_empty());
    // A resumed old primary answering between two answers of the new one.
    let split = answers(&[
        ("old", &[(10.0, true), (12.1, true)]),
        ("new", &[(11.9, true), (12.2, true)]),
    ]);
    assert_eq!(
        at_once(&split),
        ["old at 12.100, new from 11.900 to 12.200".to_string()]
    );
    // Two answers too far apart stand for nothing between them.
    let apart = answers(&[
        ("old", &[(10.0, true), (11.5, true)]),
        ("new", &[(10.7, true)]),
    ]);
    assert!(at_once(&apart).is_empty());
}

/// `db-a 0.12 s, db-b 0.31 s`.
fn catch_up_times(caught_up: &[(String, Duration)]) -> String {
    let times: Vec<String> = caught_up
        .iter()
        .map(|(name, took)| format!("{name} {:.2} s", took.as_secs_f64()))
        .collect();
    times.join(", ")
}

/// Keep `story`'s lines in `timeline`, each with when it was first seen (within 20 ms).
async fn time_lines(story: Story, timeline: Arc<Mutex<Vec<(Instant, String)>>>) {
    let mut seen = 0;
    loop {
        let lines = story.lines();
        let now = Instant::now();
        timeline
            .lock()
            .expect("timeline")
            .extend(lines.iter().skip(seen).map(|line| (now, line.clone())));
        seen = lines.len();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every fault of [`FAULTS`], once per round (`CHAOS_ROUNDS`, default 1), against one
/// synchronous cluster under a steady writer, the operator on its default flags: each
/// converges (every replica streaming from the primary), loses no acknowledged row, and never
/// has two members able to acknowledge a commit at once; the outages are printed. With
/// `CHAOS_REPLICATION=async`, the rows lost are counted instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_converges_without_losing_an_acknowledged_row() {
    run_chaos(Timings::Defaults).await;
}

/// The same, under the end-to-end tests' short timings (a round every second, shorter
/// replacement delays): what the timings add to each outage. Run by name; the run above covers
/// every fault.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a comparison run: `cargo test --test chaos -- --ignored with_the_tests_short_timings`"]
async fn every_fault_converges_with_the_tests_short_timings() {
    run_chaos(Timings::Short).await;
}

/// The chaos run, the operator on `timings`.
async fn run_chaos(timings: Timings) {
    let rounds: usize = std::env::var("CHAOS_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let sandbox = test_support::start_process_sandbox(SandboxOptions::default()).await;
    let client = test_support::plain_client(&sandbox.url());
    test_support::register_crd(&client).await;
    let (reporter, story) = Story::record();
    let operator = Operator::start(&client, &reporter, timings);
    let replication = Replication::from_env();
    let spec = match replication {
        Replication::Synchronous => test_support::synchronous_spec(SIZE as _, 1),
        Replication::Asynchronous => PostgresClusterSpec::new(SIZE as _, "16"),
    };
    let object = PostgresCluster::new(client.namespace(), CLUSTER, spec);
    client
        .create::<_, PostgresCluster>(&collection_path(client.namespace()), &object)
        .await
        .expect("cluster created");

    // The superuser's password from the cluster's Secret, and the primary Service's address.
    let namespace = client.namespace().to_string();
    let secret = test_support::eventually(FAULT_DEADLINE, "the credentials Secret", || async {
        let path = format!(
            "/api/v1/namespaces/{namespace}/secrets/{}",
            credentials_secret_name(CLUSTER)
        );
        let secret: Value = client.get(&path).await.ok()?;
        let encoded = secret["data"][SUPERUSER_PASSWORD_KEY].as_str()?.to_string();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()?;
        String::from_utf8(bytes).ok()
    })
    .await;
    let service_ip = test_support::eventually(FAULT_DEADLINE, "the primary Service", || async {
        let path = format!(
            "/api/v1/namespaces/{namespace}/services/{}",
            primary_service_name(CLUSTER)
        );
        let service: Value = client.get(&path).await.ok()?;
        service["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .map(str::to_string)
    })
    .await;
    let psql = HostPsql::installed("postgres", &secret);
    let timeline = Arc::new(Mutex::new(Vec::new()));
    let timing = tokio::spawn(time_lines(story.clone(), timeline.clone()));
    let mut chaos = Chaos {
        sandbox,
        client: client.clone(),
        story,
        reporter,
        operator: Some(operator),
        psql: psql.clone(),
        ledger: Arc::new(Ledger::default()),
        writable: Arc::new(Writable::default()),
        replication,
        timings,
        lost: 0,
        operator_kills: 0,
        power_cuts: 0,
        node_back: None,
        timeline,
        processes: Vec::new(),
        figure: None,
    };
    chaos.converged("the first start").await;
    test_support::eventually(FAULT_DEADLINE, "the ledger table", || async {
        psql.run(
            &service_ip,
            "CREATE TABLE IF NOT EXISTS ledger (n bigint PRIMARY KEY)",
            SQL_DEADLINE,
        )
        .await
        .ok()
    })
    .await;
    let stop_writing = CancellationToken::new();
    let writer = tokio::spawn(write(
        psql.clone(),
        service_ip.clone(),
        chaos.ledger.clone(),
        stop_writing.clone(),
    ));
    let watch = tokio::spawn(watch_writable(
        client.clone(),
        psql.clone(),
        chaos.writable.clone(),
    ));

    let started = Instant::now();
    let mut last_converged = None;
    // Per fault: what it measured, one per round.
    // `CHAOS_ONLY=KillOperatorMidPromotion,HangPrimary`: these faults only, to study one.
    let only = std::env::var("CHAOS_ONLY").unwrap_or_default();
    let mut measured: Vec<(Fault, Vec<Measured>)> = FAULTS
        .iter()
        .filter(|f| only.is_empty() || only.split(',').any(|name| name == format!("{f:?}")))
        .map(|f| (*f, Vec::new()))
        .collect();
    for name in only.split(',').filter(|name| !name.is_empty()) {
        assert!(
            FAULTS.iter().any(|f| format!("{f:?}") == name),
            "CHAOS_ONLY={only}: no fault {name}; the faults are {FAULTS:?}"
        );
    }
    for round in 1..=rounds {
        println!(
            "chaos: round {round} of {rounds} ({replication:?} replication, {}, node grace {} s)",
            timings.label(),
            lost_node().grace.as_secs()
        );
        for (fault, per_round) in measured.iter_mut() {
            let (measured_here, converged) = chaos.run_fault(*fault).await;
            per_round.push(measured_here);
            last_converged = Some(converged);
        }
    }
    let writing_stopped = Instant::now();
    stop_writing.cancel();
    let _ = writer.await;
    watch.abort();
    // The replicas as the last fault left them, asked at once: the 5 s run from the writer's
    // last commit, and converging again first would spend some of them.
    let last_converged = match last_converged {
        Some(converged) => converged,
        None => chaos.converged("the end").await,
    };
    let caught_up = chaos
        .replicas_caught_up(&last_converged, "the end", writing_stopped)
        .await;
    let replaced = chaos
        .story
        .first_after(0, |line| line.contains(NOT_STREAMING_SAID));
    assert_eq!(replaced, None, "a replica fell behind during the run");
    timing.abort();
    let last = chaos.ledger.last();
    let primary = chaos.converged("the end").await.primary;
    let (_, lost_at_end) = chaos.acknowledged_rows_lost(&primary, "the end").await;

    println!(
        "chaos: {rounds} round(s) in {:.0} s, {replication:?} replication, {}; {last} rows acknowledged, {} lost; at the end, every replica held them after {}",
        started.elapsed().as_secs_f64(),
        timings.label(),
        chaos.lost,
        catch_up_times(&caught_up)
    );
    assert_eq!(lost_at_end, 0, "rows lost after the last fault converged");
    println!(
        "chaos: | fault | outage, s (min / median / max) | acknowledged rows lost (per round) | slowest replica's catch-up, s (per round) | rounds with two members not in recovery at once |"
    );
    println!("chaos: |---|---|---|---|---|");
    let measured_figures: Vec<(Fault, Vec<Duration>)> = measured
        .iter()
        .map(|(f, per_round)| (*f, per_round.iter().filter_map(|m| m.figure).collect()))
        .filter(|(_, figures): &(Fault, Vec<Duration>)| !figures.is_empty())
        .collect();
    for (fault, per_round) in measured {
        let mut outages: Vec<Duration> = per_round.iter().map(|m| m.outage).collect();
        let lost: Vec<i64> = per_round.iter().map(|m| m.lost).collect();
        let catch_ups: Vec<String> = per_round
            .iter()
            .map(|m| format!("{:.2}", m.slowest_catch_up.as_secs_f64()))
            .collect();
        outages.sort();
        let (min, median, max) = (
            outages[0],
            outages[outages.len() / 2],
            outages[outages.len() - 1],
        );
        let lost: Vec<String> = lost.iter().map(i64::to_string).collect();
        let two_writable = per_round.iter().filter(|m| m.two_writable).count();
        println!(
            "chaos: | {} | {} / {} / {} | {} | {} | {two_writable} of {} |",
            fault.caption(),
            seconds(min),
            seconds(median),
            seconds(max),
            lost.join(", "),
            catch_ups.join(", "),
            per_round.len()
        );
    }
    for (fault, per_round) in measured_figures {
        let mut figures = per_round;
        figures.sort();
        let listed: Vec<String> = figures.iter().map(|f| seconds(*f)).collect();
        let goal = fault.figure_goal().map_or(Duration::MAX, |(goal, _)| goal);
        println!(
            "chaos: {}: writes back after the {}, s: {} (min / median / max {} / {} / {}); within the goal of {} s in {} of {}",
            fault.caption(),
            match fault {
                Fault::PauseLeader => "pause",
                Fault::PowerLoss => "node's return",
                _ => "API server answered again",
            },
            listed.join(", "),
            seconds(figures[0]),
            seconds(figures[figures.len() / 2]),
            seconds(figures[figures.len() - 1]),
            seconds(goal),
            figures.iter().filter(|f| **f <= goal).count(),
            figures.len()
        );
    }
    if let Some(operator) = chaos.operator.take() {
        operator.stop().await;
    }
}
