//! What each running container uses, for `kubectl top` (`metrics.rs` serves it): CPU and memory
//! of the processes below the container's bwrap, read from /proc.
//!
//! WORKSHOP.md, "Set-up: the sandbox". A kubelet's cAdvisor reads a container's cgroup: its
//! cumulative CPU time and its working set; metrics-server turns two CPU readings into a rate.
//! The sandbox has no cgroup per container, so it adds up the container's process tree:
//! `utime + stime` of each live process, plus `cutime + cstime` (the children each has
//! waited for, so a finished backend still counts), and each process's proportional share of
//! the memory it maps (`Pss`: postgres's shared buffers are counted once, not once per backend).
//! An `exec`'s processes run beside the container (`exec.rs`), so they are not counted.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::process;

/// A CPU rate is taken over at least this long; a reading sooner gets the last rate again, as
/// metrics-server answers from its last scrape.
const MIN_WINDOW: Duration = Duration::from_secs(1);

/// One container's use, as `PodMetrics` carries it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ContainerUsage {
    pub(crate) name: String,
    /// Billionths of a core, averaged over `window`.
    pub(crate) cpu_nanocores: u64,
    pub(crate) memory_bytes: u64,
    pub(crate) window: Duration,
}

/// metrics-server's usual window, for containers with nothing to measure.
const IDLE_WINDOW: Duration = Duration::from_secs(10);

impl ContainerUsage {
    /// A container that runs no process (a simulated one): zero, as it uses nothing.
    pub(crate) fn nothing_runs(name: &str) -> ContainerUsage {
        ContainerUsage {
            name: name.to_string(),
            cpu_nanocores: 0,
            memory_bytes: 0,
            window: IDLE_WINDOW,
        }
    }
}

/// The last CPU reading of each container instance, to take the next rate from.
#[derive(Default)]
pub(crate) struct Samples {
    last: HashMap<(String, u32), Sample>,
}

#[derive(Clone, Copy)]
struct Sample {
    at: Instant,
    cpu: Duration,
    nanocores: u64,
    window: Duration,
}

impl Samples {
    /// The use of the container whose bwrap is `root`: None if it is gone. `key` names the
    /// pod's container, `root` its instance (a restart starts the rate afresh).
    pub(crate) fn read(&mut self, key: &str, name: &str, root: u32) -> Option<ContainerUsage> {
        let tree = tree_usage(root)?;
        let now = Instant::now();
        let id = (key.to_string(), root);
        let sample = match self.last.get(&id) {
            Some(last) if now.duration_since(last.at) < MIN_WINDOW => *last,
            Some(last) => {
                let window = now.duration_since(last.at);
                let used = tree.cpu.saturating_sub(last.cpu);
                Sample {
                    at: now,
                    cpu: tree.cpu,
                    nanocores: nanocores(used, window),
                    window,
                }
            }
            // A first reading: the average since the container started.
            None => {
                let window = tree.age.max(Duration::from_millis(1));
                Sample {
                    at: now,
                    cpu: tree.cpu,
                    nanocores: nanocores(tree.cpu, window),
                    window,
                }
            }
        };
        self.last.retain(|(k, _), _| k != key);
        self.last.insert(id, sample);
        Some(ContainerUsage {
            name: name.to_string(),
            cpu_nanocores: sample.nanocores,
            memory_bytes: tree.memory,
            window: sample.window,
        })
    }

    /// Forget the readings of a pod that is gone (its keys start with `prefix`).
    pub(crate) fn forget(&mut self, prefix: &str) {
        self.last.retain(|(k, _), _| !k.starts_with(prefix));
    }
}

fn nanocores(used: Duration, window: Duration) -> u64 {
    let rate = used.as_nanos() * 1_000_000_000 / window.as_nanos().max(1);
    u64::try_from(rate).unwrap_or(u64::MAX)
}

/// What a process tree uses right now.
struct TreeUsage {
    cpu: Duration,
    memory: u64,
    /// How long since the tree's root started.
    age: Duration,
}

/// Add up every process below `root` (bwrap itself, the runtime's shim, aside).
fn tree_usage(root: u32) -> Option<TreeUsage> {
    let ticks = clock_ticks();
    let root_stat = std::fs::read_to_string(format!("/proc/{root}/stat")).ok()?;
    let started = stat_fields(&root_stat)
        .and_then(|fields| fields.get(STARTTIME).and_then(|f| f.parse::<u64>().ok()))
        .unwrap_or(0);
    let uptime = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    let age = Duration::from_secs_f64((uptime - started as f64 / ticks as f64).max(0.0));
    let (mut cpu_ticks, mut memory) = (0u64, 0u64);
    for pid in process::descendants(root) {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(fields) = stat_fields(&stat) else {
            continue;
        };
        let number = |index: usize| -> u64 {
            fields
                .get(index)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        cpu_ticks += number(UTIME) + number(STIME) + number(CUTIME) + number(CSTIME);
        memory += proportional_memory(pid).unwrap_or_else(|| number(RSS) * page_size());
    }
    Some(TreeUsage {
        cpu: Duration::from_nanos(cpu_ticks.saturating_mul(1_000_000_000) / ticks.max(1)),
        memory,
        age,
    })
}

/// proc(5)'s fields of /proc/PID/stat, counted from `state` (field 3) as index 0.
const UTIME: usize = 14 - 3;
const STIME: usize = 15 - 3;
const CUTIME: usize = 16 - 3;
const CSTIME: usize = 17 - 3;
const STARTTIME: usize = 22 - 3;
const RSS: usize = 24 - 3;

/// The fields after the command name, which is in parentheses and may hold spaces or `)`.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// `Pss:` of /proc/PID/smaps_rollup, in bytes.
fn proportional_memory(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|line| line.starts_with("Pss:"))?;
    let kilobytes: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kilobytes * 1024)
}

fn clock_ticks() -> u64 {
    // SAFETY: sysconf(3) reads a constant of the system and touches no memory of ours.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|t| *t > 0).unwrap_or(100)
}

fn page_size() -> u64 {
    // SAFETY: as above.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command name with spaces and parentheses does not shift the fields.
    #[test]
    fn stat_fields_start_after_the_command_name() {
        let stat = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 2 1 20 0 1 0 500 1000 25";
        let fields = stat_fields(stat).expect("parsed");
        assert_eq!(fields[0], "S");
        assert_eq!(
            (fields[UTIME], fields[STIME], fields[CUTIME], fields[CSTIME]),
            ("7", "3", "2", "1")
        );
        assert_eq!((fields[STARTTIME], fields[RSS]), ("500", "25"));
    }

    /// A busy child of this test process shows as CPU use, and its memory is counted.
    #[test]
    fn a_busy_process_tree_uses_cpu() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh runs");
        let mut samples = Samples::default();
        let me = std::process::id();
        let first = samples.read("pod/c", "c", me).expect("read");
        // Spin until a second window of use has passed, measured by the clock, not slept.
        let start = Instant::now();
        while start.elapsed() < MIN_WINDOW + Duration::from_millis(200) {
            std::hint::spin_loop();
        }
        let second = samples.read("pod/c", "c", me).expect("read");
        let _ = child.kill();
        let _ = child.wait();
        assert!(first.memory_bytes > 0, "{first:?}");
        assert!(second.window >= MIN_WINDOW, "{second:?}");
        // The shell spins on a core of its own (or shares one): well above a tenth of a core.
        assert!(second.cpu_nanocores > 100_000_000, "{second:?}");
    }
}
