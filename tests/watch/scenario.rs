//! Chaos for the watch: random creates, updates and deletes while the server ends watches, cuts
//! them short and compacts its history. At the end, what the consumer believes equals what the
//! server has, and nothing was handed over twice.
//!
//! WORKSHOP.md, step 02 ("Testing against faults"). Seeded: `WATCH_SCENARIO_SEED=N` replays a run.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use postgres_operator::api::{collection_path, object_path, PostgresCluster};
use postgres_operator::client::{Client, Patch};
use postgres_operator::watch::backoff::BackoffPolicy;
use postgres_operator::watch::{Event, WatchNotice, WatchOptions};
use sandbox::SandboxOptions;
use tokio::time::Instant;

use crate::support::*;

struct Xorshift(u64);
impl Xorshift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// (uid, resourceVersion, size) per `namespace/name`.
type Beliefs = BTreeMap<String, (String, String, i64)>;

/// What the consumer believes of one object: its uid, resourceVersion and size.
fn belief(object: &PostgresCluster) -> (String, String, i64) {
    let meta = &object.metadata;
    (
        meta.uid.to_string(),
        meta.resource_version.clone(),
        object.spec.size,
    )
}

/// Apply one event to the consumer's beliefs, checking it makes sense given what came before:
/// ADDED only for unknown names, MODIFIED/DELETED only for known ones (same uid), MODIFIED only
/// with a new resourceVersion, and no (type, name, resourceVersion) ever twice.
fn apply(beliefs: &mut Beliefs, seen: &mut HashSet<String>, event: &Event<PostgresCluster>) {
    let object = event.object().expect("a change, not a notice");
    let key = object.key();
    let meta = &object.metadata;
    let id = format!("{} {key} {}", event.type_name(), meta.resource_version);
    assert!(seen.insert(id.clone()), "handed over twice: {id}");
    if let Event::Added(_) = event {
        assert!(
            !beliefs.contains_key(&key),
            "ADDED for a name already known: {id}"
        );
        beliefs.insert(key, belief(object));
        return;
    }
    // MODIFIED and DELETED: only for a known name, and the same incarnation of it.
    let kind = event.type_name();
    let known = beliefs
        .remove(&key)
        .unwrap_or_else(|| panic!("{kind} for an unknown name: {id}"));
    assert_eq!(known.0, meta.uid, "{kind} of another incarnation: {id}");
    if let Event::Modified(_) = event {
        assert_ne!(
            known.1, meta.resource_version,
            "MODIFIED without change: {id}"
        );
        beliefs.insert(key, belief(object));
    }
}

async fn server_state(client: &Client) -> Beliefs {
    #[derive(serde::Deserialize)]
    struct List {
        items: Vec<PostgresCluster>,
    }
    let list: List = client.get(&collection_path("default")).await.expect("list");
    list.items
        .into_iter()
        .map(|c| (c.key(), belief(&c)))
        .collect()
}

/// 300 random steps of writes and watch faults; the consumer ends up agreeing with the server,
/// with every event consistent with the ones before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_changes_under_broken_watches_end_in_agreement() {
    let seed = test_support::env_number("WATCH_SCENARIO_SEED").unwrap_or(0x5eed_2026_u64);
    println!("WATCH_SCENARIO_SEED={seed}");
    let mut random = Xorshift(seed.max(1));

    // A short history, so reconnecting watches often find their resourceVersion compacted away.
    let options = SandboxOptions {
        history_window: 25,
        bookmark_interval: Duration::from_millis(150),
        ..SandboxOptions::default()
    };
    let (sandbox, client) = test_support::sandbox_with_crd(options).await;

    let watch_options = WatchOptions {
        backoff: BackoffPolicy {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            ..BackoffPolicy::default()
        },
        ..test_options()
    };
    let mut running = start_watch(client.clone(), watch_options);
    let mut beliefs = Beliefs::new();
    let mut seen = HashSet::new();
    let faults = sandbox.faults();
    let names: Vec<String> = (0..12).map(|i| format!("pg-{i}")).collect();

    for _ in 0..300 {
        let name = &names[random.below(names.len() as u64) as usize];
        match random.below(100) {
            0..=34 => {
                let size = 1 + random.below(7) as i64;
                let _ = client
                    .create::<_, serde_json::Value>(
                        &collection_path("default"),
                        &cluster_json(name, size),
                    )
                    .await; // 409 AlreadyExists is part of the game
            }
            35..=64 => {
                let patch =
                    Patch::Merge(serde_json::json!({"spec": {"size": 1 + random.below(7)}}));
                let _ = client
                    .patch::<serde_json::Value>(&object_path("default", name), &patch)
                    .await;
            }
            65..=79 => {
                let _ = client
                    .delete::<serde_json::Value>(&object_path("default", name))
                    .await;
            }
            80..=87 => faults.end_all_watches_now(),
            88..=92 => faults.compact_history(),
            93..=96 => faults.end_watches_after_events(Some(1 + random.below(4) as usize)),
            _ => faults.end_watches_after_events(None),
        }
        for event in running.take_available_events() {
            apply(&mut beliefs, &mut seen, &event);
        }
        if random.below(10) == 0 {
            tokio::time::sleep(Duration::from_millis(random.below(30))).await; // let watches reconnect mid-run
        }
    }

    faults.end_watches_after_events(None);
    // Whatever the timing did above, end with one outage that must end in a relist: the watch
    // reconnects into a stall (no bytes, so its resourceVersion stays put), the objects change and
    // the history is compacted meanwhile, and the next watch from the old resourceVersion gets 410.
    faults.stall_watches(true);
    faults.end_all_watches_now();
    for name in &names[..3] {
        let _ = client
            .delete::<serde_json::Value>(&object_path("default", name))
            .await;
    }
    let _ = client
        .create::<_, serde_json::Value>(&collection_path("default"), &cluster_json("pg-late", 2))
        .await;
    faults.compact_history();
    faults.stall_watches(false);
    faults.end_all_watches_now();

    let expected = server_state(&client).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while beliefs != expected {
        assert!(
            Instant::now() < deadline,
            "the consumer never caught up.\nconsumer: {beliefs:#?}\nserver: {expected:#?}\nnotices: {:#?}",
            running.notices
        );
        let _ = running.no_event_for(Duration::from_millis(50)).await;
        for event in running.take_available_events() {
            apply(&mut beliefs, &mut seen, &event);
        }
    }
    let resumed = running.count_notices(|n| matches!(n, WatchNotice::Resumed { .. }));
    let relisted = running.count_notices(|n| matches!(n, WatchNotice::Relisted { .. }));
    println!(
        "events {} resumed {resumed} relisted {relisted} objects {}",
        seen.len(),
        beliefs.len()
    );
    assert!(
        resumed > 5,
        "the scenario must exercise resumes ({resumed})"
    );
    assert!(
        relisted > 0,
        "the scenario must exercise relists ({relisted})"
    );
    running.stop().await;
}
