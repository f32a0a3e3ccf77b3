//! How fast does `list_then_watch` hand events to a consumer, end to end over HTTP, and with how
//! much memory? Prints exactly one line:
//!
//! ```text
//! watch-bench events=N seconds=S events_per_s=R max_rss_kb=K first_event_s=F rss_per_object_b=B
//! ```
//!
//! WORKSHOP.md, "How fast is it, end to end?". The watch is the library's, unchanged: list, then
//! watch `default/postgresclusters`, counting events handed over until `--expect N` have arrived.
//!
//! ```text
//! # against any API server (someone else creates the objects):
//! cargo run --release --bin watch-bench -- --server http://127.0.0.1:8001 --expect 10000
//! # feed a sandbox (started in a terminal of its own, on plain HTTP: this bench takes a URL
//! # only): create N objects (16 writers) while watching; max_rss_kb is the watcher's (plus the
//! # feeding client's) alone:
//! cargo run --release --bin sandbox -- --insecure-http
//! cargo run --release --bin watch-bench -- --server http://127.0.0.1:8001 --feed 20000
//! # the client alone, not bounded by a server's write rate: an in-process replay server sends
//! # N recorded ~2 KB events in 16 KB chunks as fast as the watch takes them:
//! cargo run --release --bin watch-bench -- --replay 50000
//! # the floor: no HTTP, no watch; decode each line of a file of watch lines (split before the
//! # clock starts), as benches/peers' kube-peer --decode-file does:
//! cargo run --release --bin watch-bench -- --decode-file /tmp/watch-feed-events.ndjson
//! ```
//!
//! `max_rss_kb` is the process's peak resident set (VmHWM in /proc/self/status); with `--replay`
//! it includes the replay server's copy of the stream. `first_event_s` is the time to the first
//! event (with a big collection: the first list page). `rss_per_object_b` is the growth of the
//! resident set from the start of the watch to the end, divided by the objects the consumer was
//! told about (ADDED events): the watch's store, the dominant cost that grows with the collection,
//! plus whatever else stayed allocated. Each fed object carries ~1.5 KB of annotations, the size
//! of a typical object with kubectl's last-applied annotation.
//!
//! The runtime is tokio's current-thread one unless `--threads N` (the same flag and default as
//! the kube-rs peer it is measured against): the watch task and the consumer then share one
//! thread, and handing an event over the channel wakes no other thread.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use postgres_operator::api::{collection_path, PostgresCluster};
use postgres_operator::client::Client;
use postgres_operator::config::{parse_server, Config};
use postgres_operator::crd_check;
use postgres_operator::process::{cancel_on_signal, exit_error, init_logging};
use postgres_operator::watch::event::decode_line;
use postgres_operator::watch::{list_then_watch, Event, WatchNotice, WatchOptions};
use tokio::time::Instant;

/// watch-bench: workshop step 02, "How fast is it?". Measures how fast list_then_watch hands
/// events to a consumer over HTTP, and with how much memory. Prints one line:
/// watch-bench events=N seconds=S events_per_s=R max_rss_kb=K first_event_s=F rss_per_object_b=B
#[derive(Parser)]
#[command(after_help = EXAMPLES)]
#[command(group(clap::ArgGroup::new("count").required(true).multiple(true).args(["expect", "feed", "replay", "decode_file"])))]
struct Flags {
    /// A plain-http API server (kubectl proxy, the sandbox); needed unless --replay or --decode-file
    #[arg(long, value_name = "URL", value_parser = parse_server, required_unless_present_any = ["replay", "decode_file"])]
    server: Option<String>,
    /// Stop after N events reached the consumer (default: --feed or --replay)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    expect: Option<usize>,
    /// Create N PostgresClusters while watching
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    feed: Option<usize>,
    /// How many concurrent writers --feed uses
    #[arg(long, value_name = "W", default_value = "16", value_parser = at_least_one)]
    writers: usize,
    /// No API server: a replay server in this process streams N recorded events as fast as the
    /// watch takes them (the client alone)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    replay: Option<usize>,
    /// No HTTP: decode every line of FILE (watch events, one per line), the decoding floor
    #[arg(long, value_name = "FILE", conflicts_with_all = ["server", "replay", "feed", "expect"])]
    decode_file: Option<std::path::PathBuf>,
    /// 1: tokio's current-thread runtime; N > 1: the multi-thread runtime with N workers
    #[arg(long, value_name = "N", default_value = "1", value_parser = at_least_one)]
    threads: usize,
}

const EXAMPLES: &str = "\
Examples:
  watch-bench --server http://127.0.0.1:8001 --feed 20000     # feed a `sandbox --insecure-http`
  watch-bench --server http://127.0.0.1:8001 --expect 10000   # someone else creates them
  watch-bench --replay 50000

Exit status: 0 measured or stopped by SIGTERM/Ctrl-C, 1 the API server or the watch failed, 2 bad flags";

/// A count of 1 or more (clap's usage error otherwise).
fn at_least_one(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(count) if count > 0 => Ok(count),
        _ => Err(format!("{value:?} is not a whole number of 1 or more")),
    }
}

/// Peak resident set size in kB, from the kernel's own bookkeeping.
fn max_rss_kb() -> u64 {
    proc_status_kb("VmHWM:")
}

/// The resident set size now, in kB.
fn rss_kb() -> u64 {
    proc_status_kb("VmRSS:")
}

fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

fn bench_object(prefix: &str, index: usize) -> serde_json::Value {
    let name = format!("{prefix}-{index:06}");
    let last_applied = serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {"annotations": {}, "name": name, "namespace": "default"},
        "spec": {"size": 3, "version": "16"}
    })
    .to_string();
    serde_json::json!({
        "apiVersion": "workshop.example.com/v1", "kind": "PostgresCluster",
        "metadata": {
            "name": name,
            "labels": {"app": "postgres", "bench": prefix},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied,
                "workshop.example.com/notes": "x".repeat(1100),
            }
        },
        "spec": {"size": 3, "version": "16"}
    })
}

/// Create `count` objects with `writers` concurrent tasks. Returns how many were created.
async fn feed(client: Client, count: usize, writers: usize) -> usize {
    let prefix = format!("bench-{}", std::process::id());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (client, next, prefix) = (client.clone(), next.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut created = 0;
            loop {
                let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if index >= count {
                    return created;
                }
                let body = bench_object(&prefix, index);
                match client
                    .create::<_, serde_json::Value>(&collection_path("default"), &body)
                    .await
                {
                    Ok(_) => created += 1,
                    Err(error) => tracing::warn!(%error, "feeding: create failed"),
                }
            }
        }));
    }
    let mut created = 0;
    for task in tasks {
        created += task.await.unwrap_or(0);
    }
    created
}

fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logging();
    if let Some(file) = &flags.decode_file {
        return decode_file(file);
    }
    let runtime = if flags.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(flags.threads)
            .enable_all()
            .build()
    };
    match runtime {
        Ok(runtime) => runtime.block_on(bench(flags)),
        Err(error) => exit_error(&format!("starting the tokio runtime: {error}"), None),
    }
}

async fn bench(flags: Flags) -> ExitCode {
    let shutdown = cancel_on_signal();
    let (feed_count, replay_count) = (flags.feed.unwrap_or(0), flags.replay.unwrap_or(0));
    let expect = flags.expect.unwrap_or(feed_count.max(replay_count));
    let server = match &flags.server {
        Some(server) => server.clone(),
        // clap made --server required unless --replay was given.
        None => match replay_server(replay_count).await {
            Ok(url) => url,
            Err(error) => return exit_error(&format!("starting the replay server: {error}"), None),
        },
    };
    let client = match Config::from_url(&server).map(Client::new) {
        Ok(Ok(client)) => client,
        Ok(Err(error)) => return exit_error(&error, None),
        Err(error) => return exit_error(&error, None),
    };
    if replay_count == 0 {
        // Checked, never changed: a benchmark must not rewrite the server's schema.
        if let Err(error) = crd_check::check(&client, Duration::from_secs(30), |_| {}).await {
            return exit_error(&error, error.hint());
        }
    }
    let rss_kb_before_watching = rss_kb();
    tracing::info!(rss_kb_before_watching, "starting the watch");

    let started = Instant::now();
    let mut first_event = None;
    let mut objects = 0usize;
    let mut watcher = list_then_watch::<PostgresCluster>(
        client.clone(),
        collection_path("default"),
        WatchOptions::default(),
        shutdown.clone(),
    );
    let mut feeder = None;
    let mut events = 0usize;
    while events < expect {
        match watcher.events.recv().await {
            // Feed only once the watch is open, so the events come through the watch.
            Some(Event::Notice(WatchNotice::Watching { .. }))
                if feeder.is_none() && feed_count > 0 =>
            {
                feeder = Some(tokio::spawn(feed(
                    client.clone(),
                    feed_count,
                    flags.writers,
                )));
            }
            Some(Event::Notice(notice)) => tracing::debug!(?notice, "watch notice"),
            Some(event) => {
                first_event.get_or_insert_with(|| started.elapsed());
                if let Event::Added(_) = event {
                    objects += 1;
                }
                std::hint::black_box(&event);
                events += 1;
            }
            None if shutdown.is_cancelled() => return ExitCode::SUCCESS,
            None => return exit_error(&"the watch task ended early", None),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss_growth_kb = rss_kb().saturating_sub(rss_kb_before_watching);
    if let Some(feeder) = feeder {
        let created = feeder.await.unwrap_or(0);
        tracing::info!(created, "feeding done");
    }
    println!(
        "watch-bench events={events} seconds={seconds:.3} events_per_s={:.0} max_rss_kb={} first_event_s={:.3} rss_per_object_b={}",
        events as f64 / seconds,
        max_rss_kb(),
        first_event.unwrap_or_default().as_secs_f64(),
        rss_growth_kb * 1024 / objects.max(1) as u64,
    );
    ExitCode::SUCCESS
}

/// The decoding floor: every line of `file` through `decode_line`, the lines split before the
/// clock starts. Prints `watch-bench-decode events=N seconds=S events_per_s=R max_rss_kb=K`.
fn decode_file(file: &std::path::Path) -> ExitCode {
    let text = match std::fs::read(file) {
        Ok(text) => text,
        Err(error) => return exit_error(&format!("reading {}: {error}", file.display()), None),
    };
    let lines: Vec<&[u8]> = text
        .split(|byte| *byte == b'\n')
        .filter(|line| !line.is_empty())
        .collect();
    let started = Instant::now();
    let mut events = 0usize;
    for line in &lines {
        match decode_line::<PostgresCluster>(line) {
            Ok(line) => {
                std::hint::black_box(&line);
                events += 1;
            }
            Err(error) => return exit_error(&format!("line {}: {error}", events + 1), None),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "watch-bench-decode events={events} seconds={seconds:.3} events_per_s={:.0} max_rss_kb={}",
        events as f64 / seconds,
        max_rss_kb(),
    );
    ExitCode::SUCCESS
}

/// A minimal HTTP/1.1 server: the list is empty at resourceVersion 1; the first watch streams
/// `count` recorded ADDED events in 16 KB chunks, then stays open. Later watches get nothing.
async fn replay_server(count: usize) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = Vec::with_capacity(count * 2200);
    for index in 0..count {
        let mut object = bench_object("replay", index);
        object["metadata"]["namespace"] = "default".into();
        object["metadata"]["uid"] = format!("00000000-0000-4000-8000-{index:012}").into();
        object["metadata"]["resourceVersion"] = (index + 2).to_string().into();
        stream.extend_from_slice(b"{\"type\":\"ADDED\",\"object\":");
        serde_json::to_writer(&mut stream, &object).map_err(std::io::Error::other)?;
        stream.extend_from_slice(b"}\n");
    }
    let stream = Arc::new(stream);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let served_once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (stream, served_once) = (stream.clone(), served_once.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buffer = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buffer[..n]),
                    }
                }
                if !String::from_utf8_lossy(&head).contains("watch=true") {
                    let body = r#"{"kind":"PostgresClusterList","apiVersion":"workshop.example.com/v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
                    let response = format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                    let _ = socket.write_all(response.as_bytes()).await;
                    return;
                }
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                if !served_once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    for chunk in stream.chunks(16 * 1024) {
                        let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
                        frame.extend_from_slice(chunk);
                        frame.extend_from_slice(b"\r\n");
                        if socket.write_all(&frame).await.is_err() {
                            return;
                        }
                    }
                }
                std::future::pending::<()>().await;
            });
        }
    });
    Ok(url)
}
