//! The host's process table, read from /proc: how a test sees the processes the sandbox runs as
//! pods (a jailed process is an ordinary process to the host).

/// One process, as /proc shows it.
pub struct Process {
    pub pid: u32,
    /// The parent pid, from `/proc/PID/stat` (None if it could not be read).
    pub parent: Option<u32>,
    /// The arguments as separated by NULs in `/proc/PID/cmdline` (a trailing empty one included).
    pub argv: Vec<String>,
    /// The command line with each NUL turned into a space.
    pub command_line: String,
}

/// Every process whose command line could be read.
pub fn processes() -> Vec<Process> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok();
            // The parent pid is the second field after the command name, which is in parentheses.
            let parent = stat.and_then(|stat| {
                stat.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            });
            Some(Process {
                pid,
                parent,
                argv: cmdline
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect(),
                command_line: String::from_utf8_lossy(&cmdline).replace('\0', " "),
            })
        })
        .collect()
}

/// PIDs of processes whose command line contains `needle`.
pub fn processes_matching(needle: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|process| process.command_line.contains(needle))
        .map(|process| process.pid)
        .collect()
}

/// Run `command` to its end with its stdout and stderr piped here (each read on a thread of its
/// own, so the child never blocks on a full pipe), killing it once it outlives `deadline`. The
/// output, and whether the child had to be killed. Blocking: from async code, call it through
/// `spawn_blocking`.
pub fn run_with_deadline(
    command: &mut std::process::Command,
    deadline: std::time::Duration,
) -> (std::process::Output, bool) {
    use std::io::Read;
    use std::process::Stdio;
    fn read_all(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    }
    let started = std::time::Instant::now();
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let spawned = command.spawn();
    let mut child = spawned.unwrap_or_else(|error| panic!("{command:?} does not start: {error}"));
    let stdout = read_all(child.stdout.take().expect("stdout piped"));
    let stderr = read_all(child.stderr.take().expect("stderr piped"));
    let mut killed = false;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            killed = true;
            break child.wait().expect("wait for the killed child");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let output = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
    (output, killed)
}
