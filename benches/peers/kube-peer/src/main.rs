//! kube-peer: the reference the project's `watch-bench` is measured against. kube-rs's own
//! `kube::runtime::watcher` (the list-then-watch loop every kube-rs controller runs on) over
//! `Api<DynamicObject>` for `postgresclusters.workshop.example.com/v1` in namespace `default`,
//! counting the objects it hands over until `--expect N`.
//!
//! ```text
//! kube-peer --server http://127.0.0.1:PORT [--expect N] [--threads T] [--reflect]
//!     -> kube-rs events=N seconds=S events_per_s=R max_rss_kb=K
//! ```
//!
//! - `--reflect`: the watcher feeds a reflector store, which keeps the latest copy of every
//!   object as an informer's cache does (label `kube-rs-reflector`). The project's watch keeps
//!   such a copy too (for its relist diffs), so this is the like-for-like figure.
//! - `--threads 1` (the default) runs tokio's current-thread runtime, as watch-bench does;
//!   `T > 1` the multi-thread one with T workers (labels get `-mt`).
//! - The clock starts just before the watcher is first polled: it covers the initial list, the
//!   watch request and every event. `max_rss_kb` is VmHWM from /proc/self/status.

use std::process::ExitCode;
use std::time::Instant;

use futures::{Stream, StreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Config};

const USAGE: &str = "\
usage: kube-peer --server http://127.0.0.1:PORT [--expect N] [--threads T] [--reflect]
defaults: --expect 200000 --threads 1 (1: tokio's current-thread runtime)";

struct Options {
    server: String,
    expect: u64,
    threads: usize,
    reflect: bool,
}

fn options() -> Result<Options, String> {
    let mut server = None;
    let mut expect = 200_000;
    let mut threads = 1;
    let mut reflect = false;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--reflect" {
            reflect = true;
            continue;
        }
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = || format!("{flag}: cannot use {value:?}");
        match flag.as_str() {
            "--server" => server = Some(value.clone()),
            "--expect" => expect = value.parse().map_err(|_| bad())?,
            "--threads" => threads = value.parse().map_err(|_| bad())?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    let server = server.ok_or("--server is required")?;
    Ok(Options {
        server,
        expect,
        threads: threads.max(1),
        reflect,
    })
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("kube-peer: {error}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = if options.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.threads)
            .enable_all()
            .build()
    }
    .expect("a tokio runtime");
    match runtime.block_on(run(&options)) {
        Ok(line) => {
            println!("{line}");
            // Straight out: after the last event the watcher may sit in a re-watch that the
            // server holds open, and dropping the runtime would wait for nothing useful.
            std::process::exit(0)
        }
        Err(error) => {
            eprintln!("kube-peer: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: &Options) -> Result<String, Box<dyn std::error::Error>> {
    let client = Client::try_from(Config::new(options.server.parse()?))?;
    let gvk = GroupVersionKind::gvk("workshop.example.com", "v1", "PostgresCluster");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "postgresclusters");
    let api = Api::<DynamicObject>::namespaced_with(client, "default", &resource);

    let started = Instant::now();
    let events = watcher::watcher(api, watcher::Config::default()).default_backoff();
    let (label, counted) = if options.reflect {
        let writer = Writer::<DynamicObject>::new(resource.clone());
        let store = writer.as_reader();
        let counted = count(reflector::reflector(writer, events), options.expect).await?;
        eprintln!("kube-peer: the store holds {} objects", store.state().len());
        ("kube-rs-reflector", counted)
    } else {
        ("kube-rs", count(events, options.expect).await?)
    };
    let seconds = started.elapsed().as_secs_f64();

    let suffix = if options.threads > 1 { "-mt" } else { "" };
    Ok(format!(
        "{label}{suffix} events={counted} seconds={seconds:.3} events_per_s={:.0} max_rss_kb={}",
        counted as f64 / seconds,
        peak_rss_kb()
    ))
}

/// Objects handed over (`Apply` from the watch, `InitApply` from the initial list) until
/// `expect`. A watcher error is retried by the stream's backoff; a run of them is fatal.
async fn count<K>(
    events: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    expect: u64,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut events = std::pin::pin!(events);
    let mut objects = 0;
    let mut errors = 0;
    while objects < expect {
        match events.next().await {
            Some(Ok(Event::Apply(_) | Event::InitApply(_))) => objects += 1,
            Some(Ok(Event::Delete(_) | Event::Init | Event::InitDone)) => {}
            Some(Err(error)) => {
                errors += 1;
                eprintln!("kube-peer: watcher error after {objects} objects: {error}");
                if errors == 10 {
                    return Err("ten watcher errors: giving up".into());
                }
            }
            None => return Err(format!("the watch ended after {objects} objects").into()),
        }
    }
    Ok(objects)
}

fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}
