//! json-baseline: how fast can the events be decoded at all? Each line of a watch-feed events file
//! goes through `serde_json::from_slice::<serde_json::Value>`: no HTTP, no framing, no typed
//! object, one generic tree per event. A watch client cannot beat this by much; the gap between
//! it and a client is what the client's transport, framing and bookkeeping cost.
//!
//! ```text
//! json-baseline EVENTS_FILE
//!     -> json-value events=N seconds=S events_per_s=R max_rss_kb=K
//! ```
//!
//! The file is read and split into lines before the clock starts; `max_rss_kb` (VmHWM) therefore
//! includes the whole file, about 420 MB for 200,000 events.

use std::process::ExitCode;
use std::time::Instant;

fn peak_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(0)
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1).filter(|a| !a.starts_with('-')) else {
        eprintln!("usage: json-baseline EVENTS_FILE");
        return ExitCode::from(2);
    };
    let data = match std::fs::read(&path) {
        Ok(data) => data,
        Err(error) => {
            eprintln!("json-baseline: cannot read {path}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let lines: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();

    let started = Instant::now();
    for (n, line) in lines.iter().enumerate() {
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(event) => drop(std::hint::black_box(event)),
            Err(error) => {
                eprintln!("json-baseline: line {}: {error}", n + 1);
                return ExitCode::FAILURE;
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();

    println!(
        "json-value events={} seconds={seconds:.3} events_per_s={:.0} max_rss_kb={}",
        lines.len(),
        lines.len() as f64 / seconds,
        peak_rss_kb()
    );
    eprintln!(
        "json-baseline: {} bytes, {:.0} MiB/s",
        data.len(),
        data.len() as f64 / seconds / (1024.0 * 1024.0)
    );
    ExitCode::SUCCESS
}
