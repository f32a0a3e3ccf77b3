//! How many idle postgres pods this machine holds before something gives: trusting
//! `postgres:15` pods are created one by one (the process runtime's default settings, as the
//! `sandbox` binary runs them) until one is not Ready within a deadline, memory or disk runs
//! short, or a limit is reached; each pod's line gives its time to Ready, the proportional set
//! size (PSS) of its postgres processes and its files on disk, then the totals.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A measurement, not a check: ignored by `cargo test`.
//! Run it (limits are environment variables; the defaults stop at 40 pods or 10 minutes):
//!
//! ```text
//! CAPACITY_MAX_PODS=40 CAPACITY_MAX_MINUTES=10 \
//!   cargo test -p sandbox --test runtime capacity:: -- --ignored --nocapture
//! ```
//!
//! It stops early when MemAvailable falls under 512 MiB or the data directory's file system
//! has under 1 GiB free, and when a pod is not Ready 120 s after its create.
//!
//! One run (2 cores, 24 GB, PostgreSQL 15, other builds sharing the machine at load 10 to 17):
//! 107 pods in the 10 minutes and nothing gave; each Ready 1 to 4 s after its create while the
//! machine was quiet, 4 to 8 s under that load; per idle pod 15 MiB PSS (postmaster and its
//! children) and 38 MiB on disk (mostly PGDATA), the API server and node 29 MiB RSS in all.

use std::path::Path;
use std::time::{Duration, Instant};

use sandbox::{ProcessRuntime, Runtime, Sandbox, SandboxOptions};
use test_support::runtime::{create, pod_json};
use test_support::Kubectl;

const READY_DEADLINE: Duration = Duration::from_secs(120);
const MIN_MEMORY_KIB: u64 = 512 * 1024;
const MIN_DISK_BYTES: u64 = 1 << 30;

fn limit(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A field of /proc/meminfo, in KiB.
fn meminfo_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find(|line| line.starts_with(&format!("{field}:")))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Free bytes on the file system holding `path` (`df`, as the test may not link libc).
fn free_disk_bytes(path: &Path) -> Option<u64> {
    let output = std::process::Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .ok()?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// Bytes allocated to the files under `dir` (blocks, as `du` counts).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).into_iter().flatten().flatten() {
            let Ok(metadata) = entry.metadata() else {
                continue;
            };
            total += metadata.blocks() * 512;
            if metadata.is_dir() {
                pending.push(entry.path());
            }
        }
    }
    total
}

/// (pid, parent pid, command line) of every process.
fn process_table() -> Vec<(u32, u32, String)> {
    test_support::processes()
        .into_iter()
        .filter_map(|process| Some((process.pid, process.parent?, process.command_line)))
        .collect()
}

/// PSS in KiB of the postmaster listening on `ip` and its children (the backends).
fn postgres_pss_kib(ip: &str) -> u64 {
    let table = process_table();
    let needle = format!("listen_addresses={ip}");
    let Some(postmaster) = table
        .iter()
        .find(|(_, _, cmd)| cmd.contains(&needle))
        .map(|p| p.0)
    else {
        return 0;
    };
    table
        .iter()
        .filter(|(pid, parent, _)| *pid == postmaster || *parent == postmaster)
        .filter_map(|(pid, _, _)| {
            let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
            rollup
                .lines()
                .find(|line| line.starts_with("Pss:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

const MIB: f64 = 1024.0 * 1024.0;

/// Creates idle trusting postgres pods one by one until one is not Ready in time, memory or
/// disk runs short, or CAPACITY_MAX_PODS / CAPACITY_MAX_MINUTES is reached; prints what each
/// pod costs. Asserts only that at least one pod ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement of minutes: cargo test -p sandbox --test runtime capacity:: -- --ignored --nocapture"]
async fn pods_per_machine_before_something_gives() {
    let max_pods = limit("CAPACITY_MAX_PODS", 40);
    let max_time = Duration::from_secs(60 * limit("CAPACITY_MAX_MINUTES", 10));
    let runtime = ProcessRuntime::detect(None).unwrap_or_else(|error| {
        panic!("this measurement runs pods as real processes, which this machine cannot: {error}")
    });
    let data_dir = runtime.data_dir().to_path_buf();
    let sandbox = Sandbox::start_with_runtime(
        SandboxOptions::default(),
        Runtime::Processes(runtime),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .expect("sandbox starts");
    let kubectl = Kubectl::new(&sandbox.url());
    let started = Instant::now();
    let mut ready_pods = 0u64;
    // (pod IP, uid) of each Ready pod, measured again at the end.
    let mut running: Vec<(String, String)> = Vec::new();
    println!("pod  ready_s  pss_MiB  disk_MiB  mem_available_MiB  disk_free_GiB");
    let stopped_because = loop {
        if ready_pods >= max_pods {
            break format!("reached CAPACITY_MAX_PODS={max_pods}");
        }
        if started.elapsed() >= max_time {
            break format!("reached CAPACITY_MAX_MINUTES={}", max_time.as_secs() / 60);
        }
        let available = meminfo_kib("MemAvailable").unwrap_or(0);
        if available < MIN_MEMORY_KIB {
            break format!("memory: MemAvailable {} MiB", available / 1024);
        }
        let free_disk = free_disk_bytes(&data_dir).unwrap_or(0);
        if free_disk < MIN_DISK_BYTES {
            break format!("disk: {} MiB free", free_disk >> 20);
        }
        let name = format!("pg-{ready_pods}");
        create(
            &kubectl,
            &format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n  \
                 - name: postgres\n    image: postgres:15\n    \
                 env: [{{name: POSTGRES_HOST_AUTH_METHOD, value: trust}}]\n    \
                 readinessProbe: {{tcpSocket: {{port: 5432}}, periodSeconds: 1}}\n"
            ),
        )
        .await;
        let created = Instant::now();
        let ready = loop {
            let pod = pod_json(&kubectl, &name).await;
            let is_ready = pod.as_ref().is_some_and(test_support::pod_is_ready);
            if is_ready {
                break pod;
            }
            if created.elapsed() > READY_DEADLINE {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let Some(pod) = ready else {
            break format!(
                "pod {name} not Ready {} s after its create",
                READY_DEADLINE.as_secs()
            );
        };
        let ready_after = created.elapsed();
        ready_pods += 1;
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let pss = postgres_pss_kib(ip);
        let disk = disk_usage(&data_dir.join("pods").join(uid));
        running.push((ip.to_string(), uid.to_string()));
        println!(
            "{ready_pods:>3}  {:>7.1}  {:>7.1}  {:>8.1}  {:>17}  {:>13.1}",
            ready_after.as_secs_f64(),
            pss as f64 / 1024.0,
            disk as f64 / MIB,
            meminfo_kib("MemAvailable").unwrap_or(0) / 1024,
            free_disk_bytes(&data_dir).unwrap_or(0) as f64 / (MIB * 1024.0),
        );
    };
    // Measured again once the last is up: idle pods settle, and PSS shares the pages of the
    // postgres binary and libraries among all the pods that map them.
    let total_pss: u64 = running.iter().map(|(ip, _)| postgres_pss_kib(ip)).sum();
    let total_disk: u64 = running
        .iter()
        .map(|(_, uid)| disk_usage(&data_dir.join("pods").join(uid)))
        .sum();
    let sandbox_rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    println!(
        "stopped after {ready_pods} Ready pods in {:.0} s: {stopped_because}",
        started.elapsed().as_secs_f64()
    );
    if ready_pods > 0 {
        println!(
            "per pod, all measured at the end: PSS {:.1} MiB, disk {:.1} MiB; this process (API server + node + test) RSS {} MiB",
            total_pss as f64 / 1024.0 / ready_pods as f64,
            total_disk as f64 / MIB / ready_pods as f64,
            sandbox_rss / 1024
        );
    }
    assert!(ready_pods > 0, "no pod became Ready: {stopped_because}");
    sandbox.shutdown().await;
}
