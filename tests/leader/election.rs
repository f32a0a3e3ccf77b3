//! Leader election (`src/leader/`) against the sandbox: candidates in this process, each with
//! its own story, racing for one Lease over real HTTP. One leads and renews, the other waits;
//! a release hands over at once, a vanished leader only after its lease expired; a leader that
//! cannot renew holds its writes back and goes on once it can; one that finds another name in
//! the Lease stops acting. Short durations (a 4 s lease,
//! 3 s to renew) so the test need not wait 15 s; the logic is the same. Not shorter: a leader
//! whose renewals a busy machine holds up for longer than the renew deadline really does lose,
//! and no verdict here may hang on a window under 2 s.
//!
//! The stage-04 binary doing the same, in processes (SIGTERM, kill -9, real Postgres):
//! tests/leader/stage04.rs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres_operator::client::Client;
use postgres_operator::client::{Patch, RequestError};
use postgres_operator::leader::{
    conditional_patch, delete_in_term, holding_back_line, leading_line, lease_path, patch_in_term,
    released_line, renewed_again_line, run_when_leading, stamp_pods, stamped_term, term,
    waiting_line, LeaderElection, LeaderError, Lease, Takeover,
};
use postgres_operator::story::Reporter;
use sandbox::{InjectedFault, Sandbox, SandboxOptions};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const NAMESPACE: &str = "default";
const LEASE_KEY: &str = "default/postgres-operator";
/// Bounds for a hung test, not timings.
const DEADLINE: Duration = Duration::from_secs(30);

/// What happened, in order, across candidates: `a acting`, `a stopped`, ...
type Timeline = Arc<Mutex<Vec<String>>>;

fn client(sandbox: &Sandbox) -> Client {
    test_support::plain_client(&sandbox.url())
}

fn election(identity: &str) -> LeaderElection {
    LeaderElection {
        identity: identity.into(),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(250),
        ..LeaderElection::new(NAMESPACE)
    }
}

/// One candidate running `run_when_leading`; its work notes in the timeline when it starts
/// acting and when it stops (on its token), and keeps its token and its client for the test to
/// look at and write with.
struct Candidate {
    identity: String,
    lines: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
    acting: Arc<Mutex<Option<(CancellationToken, Client)>>>,
    task: tokio::task::JoinHandle<Result<Option<()>, LeaderError>>,
}

impl Candidate {
    fn start(sandbox: &Sandbox, identity: &str, timeline: &Timeline) -> Candidate {
        let (reporter, mut receiver) = Reporter::channel();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let collected = lines.clone();
        tokio::spawn(async move {
            while let Some(line) = receiver.recv().await {
                collected.lock().unwrap().push(line.to_string());
            }
        });
        let stop = CancellationToken::new();
        let acting = Arc::new(Mutex::new(None));
        let (name, timeline, slot) = (identity.to_string(), timeline.clone(), acting.clone());
        let work = move |client: Client, token: CancellationToken| async move {
            timeline.lock().unwrap().push(format!("{name} acting"));
            *slot.lock().unwrap() = Some((token.clone(), client));
            token.cancelled().await;
            timeline.lock().unwrap().push(format!("{name} stopped"));
        };
        let task = tokio::spawn(run_when_leading(
            client(sandbox),
            election(identity),
            reporter,
            stop.clone(),
            work,
        ));
        Candidate {
            identity: identity.into(),
            lines,
            stop,
            acting,
            task,
        }
    }

    /// A new sandbox and timeline, and a candidate started there that leads, having created
    /// the Lease.
    async fn first_leader(identity: &str) -> (Sandbox, Timeline, Candidate) {
        let sandbox = test_support::start_sandbox_with(SandboxOptions::default()).await;
        let timeline = Timeline::default();
        let candidate = Candidate::start(&sandbox, identity, &timeline);
        let created = leading_line(identity, LEASE_KEY, &Takeover::Created);
        candidate.said(&created).await;
        (sandbox, timeline, candidate)
    }

    /// Stop it, and require that it ends cleanly.
    async fn stop_cleanly(self) {
        self.stop.cancel();
        assert!(self.ended().await.expect("a clean stop").is_some());
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    async fn said(&self, line: &str) {
        test_support::eventually(DEADLINE, &format!("{}: {line}", self.identity), || async {
            self.lines().iter().any(|l| l == line).then_some(())
        })
        .await;
    }

    async fn ended(self) -> Result<Option<()>, LeaderError> {
        tokio::time::timeout(DEADLINE, self.task)
            .await
            .expect("the candidate ends")
            .expect("the candidate does not panic")
    }
}

/// A pod of ours (the label the operator watches), with the sandbox's simulated runtime.
async fn member(client: &Client, name: &str) -> String {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "postgres", "role": "replica"}},
        "spec": {"containers": [{"name": "postgres", "image": "postgres:16"}]},
    });
    let created: Value = client
        .create(&format!("/api/v1/namespaces/{NAMESPACE}/pods"), &pod)
        .await
        .expect("pod created");
    assert_eq!(
        stamped_term(&created),
        0,
        "no term before a leader writes it"
    );
    format!("/api/v1/namespaces/{NAMESPACE}/pods/{name}")
}

async fn pod(client: &Client, path: &str) -> Value {
    client.get(path).await.expect("the pod")
}

async fn lease(client: &Client) -> Lease {
    client
        .get(&lease_path(NAMESPACE, "postgres-operator"))
        .await
        .expect("the Lease exists")
}

/// Two candidates: exactly one acts and renews (renewTime moves), the other says once that it
/// waits; when the leader is stopped it releases, and only then does the standby act.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leads_the_other_waits_and_a_release_hands_over() {
    let sandbox = test_support::start_sandbox_with(SandboxOptions::default()).await;
    let api = client(&sandbox);
    let member = member(&api, "member-0").await;
    let timeline = Timeline::default();
    let a = Candidate::start(&sandbox, "a_1", &timeline);
    let b = Candidate::start(&sandbox, "b_2", &timeline);

    let first = test_support::eventually(DEADLINE, "a leader", || async {
        timeline.lock().unwrap().first().cloned()
    })
    .await;
    let (leader, standby) = if first == "a_1 acting" {
        (a, b)
    } else {
        (b, a)
    };
    leader
        .said(&leading_line(
            &leader.identity,
            LEASE_KEY,
            &Takeover::Created,
        ))
        .await;
    let waiting = waiting_line(LEASE_KEY, &leader.identity);
    standby.said(&waiting).await;

    // The holder renews: renewTime moves, twice, and the holder stays.
    let first = lease(&api).await;
    assert_eq!(first.spec.holder(), Some(leader.identity.as_str()));
    let mut seen = first.spec.renew_time.clone();
    for _ in 0..2 {
        seen = test_support::eventually(DEADLINE, "a renewal", || async {
            let now = lease(&api).await;
            assert_eq!(now.spec.holder(), Some(leader.identity.as_str()));
            (now.spec.renew_time != seen).then_some(now.spec.renew_time)
        })
        .await;
    }
    // Many retries later: still one acting, and the standby said it waits once.
    assert_eq!(timeline.lock().unwrap().len(), 1, "{timeline:?}");
    let times = standby.lines().iter().filter(|l| **l == waiting).count();
    assert_eq!(times, 1, "{:?}", standby.lines());

    let term_of = |candidate: &Candidate| {
        let acting = candidate.acting.lock().unwrap();
        acting.as_ref().and_then(|(_, client)| client.term())
    };
    let first_term = term_of(&leader).expect("the work's client carries the leader's term");
    assert_eq!(first_term, term(&first));
    // The Lease's creation second leads it (the sandbox stamps creationTimestamp, as the API
    // server does), so a Lease created again outranks this one whatever its count.
    assert!(first_term / 1_000_000 > 1_700_000_000, "{first_term}");
    // Before it acted, the leader stamped its term on our pods (`src/leader/stamp.rs`).
    assert_eq!(stamped_term(&pod(&api, &member).await), first_term);

    // Stop the leader: its work stops, then it releases, then the standby acts.
    leader.stop.cancel();
    let leader_identity = leader.identity.clone();
    let leader_lines = leader.lines.clone();
    assert!(leader.ended().await.expect("a clean stop").is_some());
    // The story lines reach the test through a channel: poll, the task may have ended first.
    test_support::eventually(DEADLINE, "the released line", || async {
        let said = leader_lines
            .lock()
            .unwrap()
            .contains(&released_line(LEASE_KEY));
        said.then_some(())
    })
    .await;
    let handed_over = Takeover::Released {
        previous: Some(leader_identity.clone()),
    };
    standby
        .said(&leading_line(&standby.identity, LEASE_KEY, &handed_over))
        .await;
    assert_eq!(
        *timeline.lock().unwrap(),
        [
            format!("{leader_identity} acting"),
            format!("{leader_identity} stopped"),
            format!("{} acting", standby.identity),
        ]
    );
    let after = lease(&api).await;
    assert_eq!(after.spec.holder(), Some(standby.identity.as_str()));
    assert_eq!(after.spec.lease_transitions, Some(1), "one change of hands");
    // The next leader's term outranks the first's: a member's fence refuses the first's now.
    let next_term = term_of(&standby).expect("a term");
    assert_eq!((next_term, next_term > first_term), (term(&after), true));
    assert_eq!(stamped_term(&pod(&api, &member).await), next_term);
    standby.stop_cleanly().await;
}

/// The API server's half of the fence (`src/leader/stamp.rs`): once a later leader stamped a
/// pod, the earlier leader's label or deletion of it is refused by the server (a write it
/// prepared before the stamp: 409 on the version it read) or not sent (one read after it), and
/// the pod is as the later leader left it. A client that is not a leader writes as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_leaders_stamp_makes_the_earlier_leaders_pod_writes_fail() {
    let sandbox = test_support::start_sandbox_with(SandboxOptions::default()).await;
    let api = client(&sandbox);
    let path = member(&api, "member-0").await;
    let (old, new) = (api.clone().with_term(6), api.clone().with_term(7));
    let primary = json!({"metadata": {"labels": {"role": "primary"}}});

    // The old leader reads the pod for a relabel and a deletion, then pauses; the new one
    // stamps every pod as it takes over.
    let read = pod(&old, &path).await;
    let version = read["metadata"]["resourceVersion"]
        .as_str()
        .expect("a version");
    assert_eq!(stamp_pods(&new, NAMESPACE).await, (1, Vec::new()));
    assert_eq!(stamped_term(&pod(&api, &path).await), 7);
    // Woken, it sends what it prepared: the server refuses both.
    let late = Patch::Merge(conditional_patch(&primary, version, 6));
    let refused = old.patch::<Value>(&path, &late).await.unwrap_err();
    assert_eq!(refused.status_code(), Some(409), "{refused}");
    let options = json!({"preconditions": {"resourceVersion": version}});
    let refused = old
        .delete_with::<_, Value>(&path, &options)
        .await
        .unwrap_err();
    assert_eq!(refused.status_code(), Some(409), "{refused}");
    // What it sends after reading again is not sent at all.
    for refused in [
        patch_in_term(&old, &path, &primary).await.unwrap_err(),
        delete_in_term(&old, &path, Some(5)).await.unwrap_err(),
    ] {
        assert!(
            matches!(refused.kind(), Some(RequestError::HeldBack { why }) if why.contains("leader term 7, later than ours (6)")),
            "{refused}"
        );
    }
    // Nor does its own stamp lower the new leader's.
    let (stamped, failed) = stamp_pods(&old, NAMESPACE).await;
    assert_eq!((stamped, failed.len()), (0, 1), "{failed:?}");
    let now = pod(&api, &path).await;
    assert_eq!(
        (stamped_term(&now), &now["metadata"]["labels"]["role"]),
        (7, &json!("replica"))
    );
    assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now}");

    // The new leader's own writes go through, and keep its stamp.
    patch_in_term(&new, &path, &primary)
        .await
        .expect("relabelled");
    let now = pod(&api, &path).await;
    assert_eq!(
        (stamped_term(&now), &now["metadata"]["labels"]["role"]),
        (7, &json!("primary"))
    );
    // Without a term (no election), a write is the plain one.
    let replica = json!({"metadata": {"labels": {"role": "replica"}}});
    patch_in_term(&api, &path, &replica)
        .await
        .expect("relabelled");
    delete_in_term(&new, &path, Some(0)).await.expect("deleted");
    test_support::eventually(DEADLINE, "the pod gone", || async {
        let gone = api.get::<Value>(&path).await.err()?.status_code() == Some(404);
        gone.then_some(())
    })
    .await;
}

/// A leader that vanishes without releasing (its task aborted, as `kill -9` would) is replaced
/// only once its lease expired: the standby says so, and the holder's name stayed until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_leader_is_replaced_after_its_lease_expired() {
    let (sandbox, timeline, a) = Candidate::first_leader("a_1").await;
    let b = Candidate::start(&sandbox, "b_2", &timeline);
    b.said(&waiting_line(LEASE_KEY, "a_1")).await;

    a.task.abort();
    let api = client(&sandbox);
    let held = lease(&api).await;
    assert_eq!(held.spec.holder(), Some("a_1"), "no release: still a's");
    let expired = Takeover::Expired {
        previous: "a_1".into(),
    };
    b.said(&leading_line("b_2", LEASE_KEY, &expired)).await;
    let taken = lease(&api).await;
    assert_eq!(taken.spec.holder(), Some("b_2"));
    assert_eq!(taken.spec.lease_transitions, Some(1));
    assert_ne!(taken.spec.acquire_time, held.spec.acquire_time);
    b.stop_cleanly().await;
}

/// A leader whose API server stops answering (frozen: every request held) holds its work's
/// writes back once the renew deadline passed, without sending them, while its work runs on;
/// when the server answers again and the Lease still names it, it renews and writes again, the
/// same work (no new start), the Lease never changed hands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_holds_writes_back_and_goes_on_when_it_can() {
    let (sandbox, timeline, a) = Candidate::first_leader("a_1").await;
    let (token, client) = a.acting.lock().unwrap().clone().expect("the work ran");
    let config_map = |name: &str| serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
    let config_maps = "/api/v1/namespaces/default/configmaps";
    let _: serde_json::Value = client
        .create(config_maps, &config_map("before"))
        .await
        .expect("a write while leading");

    sandbox.faults().freeze(true);
    a.said(&holding_back_line(LEASE_KEY, Duration::from_secs(3)))
        .await;
    // Refused here, not sent: a request the frozen server held would hang.
    let held = tokio::time::timeout(
        Duration::from_secs(5),
        client.create::<_, serde_json::Value>(config_maps, &config_map("held")),
    )
    .await
    .expect("refused at once, not sent")
    .expect_err("no write past the renew deadline");
    assert!(
        held.to_string()
            .contains("not sent: lease default/postgres-operator not renewed within 3s"),
        "{held}"
    );
    assert!(!token.is_cancelled(), "the work runs on");

    sandbox.faults().freeze(false);
    a.said(&renewed_again_line(LEASE_KEY)).await;
    let _: serde_json::Value = client
        .create(config_maps, &config_map("after"))
        .await
        .expect("a write once renewed");
    assert!(!token.is_cancelled());
    assert_eq!(
        *timeline.lock().unwrap(),
        ["a_1 acting"],
        "one start of the work"
    );
    let api = self::client(&sandbox);
    let after = lease(&api).await;
    assert_eq!(after.spec.holder(), Some("a_1"));
    assert_eq!(after.spec.lease_transitions, Some(0));
    // The server saw the two writes made while the Lease was ours, and not the held one.
    let posts = sandbox.requests();
    let posts = posts
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "configmaps");
    assert_eq!(posts.count(), 2);
    a.stop_cleanly().await;
}

/// Someone else's name written into the Lease ends our leadership at the next renewal (409,
/// then a read that names them), long before the renew deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_lease_is_taken_stops_at_once() {
    let (sandbox, _timeline, a) = Candidate::first_leader("a_1").await;
    let api = client(&sandbox);
    let mut stolen = lease(&api).await;
    stolen.spec.holder_identity = Some("intruder_9".into());
    let _: Lease = api
        .replace(&lease_path(NAMESPACE, "postgres-operator"), &stolen)
        .await
        .expect("the overwrite");
    match a.ended().await {
        Err(LeaderError::Lost { why, .. }) => assert_eq!(why, "held by intruder_9 now"),
        other => panic!("expected Lost, got {other:?}"),
    }
}

/// While another holds the Lease, a candidate makes no request but reading the Lease, and
/// its work never starts; a 403 on the Lease (RBAC) ends it with the verb's hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_only_reads_the_lease_until_it_leads() {
    let sandbox = test_support::start_sandbox_with(SandboxOptions::default()).await;
    let api = client(&sandbox);
    let elsewhere = LeaderElection {
        lease_duration: Duration::from_secs(3600),
        ..election("elsewhere_7")
    };
    let mut held = postgres_operator::leader::taken(None, &elsewhere, std::time::SystemTime::now());
    held = api
        .create(&postgres_operator::leader::leases_path(NAMESPACE), &held)
        .await
        .expect("a Lease held elsewhere");
    assert_eq!(held.spec.holder(), Some("elsewhere_7"));
    let before = sandbox.requests().len();

    let timeline = Timeline::default();
    let b = Candidate::start(&sandbox, "b_2", &timeline);
    b.said(&waiting_line(LEASE_KEY, "elsewhere_7")).await;
    // Several rounds of reading.
    test_support::eventually(DEADLINE, "three reads of the Lease", || async {
        (sandbox.requests().len() >= before + 3).then_some(())
    })
    .await;
    let requests = sandbox.requests();
    for record in &requests[before..] {
        assert_eq!(
            (record.verb.as_str(), record.resource.as_str()),
            ("get", "leases"),
            "{record:?}"
        );
    }
    assert!(timeline.lock().unwrap().is_empty(), "the work never ran");

    let forbidden = InjectedFault::Status {
        code: 403,
        reason: "Forbidden".into(),
        retry_after_seconds: None,
    };
    sandbox
        .faults()
        .fail_next(1, "/leases/postgres-operator", forbidden);
    match b.ended().await {
        Err(error @ LeaderError::Refused { .. }) => {
            let hint = error.hint().expect("a hint");
            assert!(hint.contains("kube/rbac.yaml"), "{hint}");
        }
        other => panic!("expected Refused, got {other:?}"),
    }
}
