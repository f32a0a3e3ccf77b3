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
