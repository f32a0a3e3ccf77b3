//! Every shell transcript in WORKSHOP.md is re-run here, against the sandbox, so the text cannot
//! drift from the code.
//!
//! A transcript is a fenced block tagged `console`, written as a learner sees their terminals:
//! - `$ COMMAND` runs a command to completion. `cargo run --bin NAME -- ARGS` runs the built binary,
//!   `cargo run` the tour, `kubectl ARGS` the real kubectl (with a fresh `--cache-dir`). The lines
//!   after it are everything it prints, in order (`...` stands for any number of lines).
//! - `$ COMMAND` of a program that runs until stopped (the sandbox, an operator stage: see
//!   [`runs_until_stopped`]) starts it in the current terminal, which the learner then leaves to
//!   it. The lines after it are what it prints on its own; they must appear before the
//!   transcript goes on. At the end of the block it gets SIGTERM and must exit 0 (the sandbox
//!   instead keeps serving the rest of the document). No command ends with `&`: a job in the
//!   background of a shell gets no Ctrl-C, and the text tells the learner to stop these with it.
//! - `# terminal NAME` switches terminal. Lines after it, before the next `$`, are what the command
//!   running in that terminal prints next, in reaction to what came before: the test waits for
//!   them, in order, continuing from the last line it matched there.
//! - Other lines starting with `#` are comments.
//!
//! Output is compared after normalising what changes from run to run: every run of digits becomes
//! `N` (resourceVersions, ages, ports, uids), runs of spaces become one (kubectl aligns columns),
//! the random 5-character suffix the API server gives a `generateName` (`example-pg-7xk2p`;
//! Kubernetes picks from digits and consonants only, so no word is mistaken for one) becomes
//! `-N` like a number (a five-digit port can look like one), a Postgres WAL position
//! (`0/501E4E8`) becomes `N/N` (`0_501E4E8` in a base backup's name, `N_N`), and a WAL
//! segment's file name (`00000002000000000000000A`) `N`.
//!
//! A command's words are split at spaces, except inside double quotes (`psql -c "SELECT 1"`),
//! which are removed as a shell would; there is no other shell syntax.
//!
//! `cargo run --bin sandbox` starts the sandbox for real, on a free port instead of 8001
//! (`127.0.0.1:8001` in any command is that port). Every command runs as in a terminal where the
//! learner ran the `export KUBECONFIG=...` line the sandbox prints: with `KUBECONFIG` naming the
//! kubeconfig it wrote (its URL, CA and token), so kubectl and the stage binaries find it as
//! they would. `$ export KUBECONFIG=PATH` itself checks that PATH is that file (numbers aside). A
//! transcript that does not start a sandbox gets one started before its first use. Blocks run in
//! document order against the same sandbox, as a learner working through the text would.
//!
//! Shell sessions outside `console` blocks are not allowed: a test below checks that no other
//! fenced block holds a `$ ` prompt, so every transcript in the text is one this test runs.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DOC_ADDRESS: &str = "127.0.0.1:8001";
/// Bounds for a hung command, not timings: step 04 starts real PostgreSQL servers (initdb, base
/// backups) on a machine that may be busy with other tests.
const BACKGROUND_DEADLINE: Duration = Duration::from_secs(120);
const FOREGROUND_DEADLINE: Duration = Duration::from_secs(240);

/// One thing a transcript does, in document order.
#[derive(Debug, PartialEq)]
enum Action {
    /// `$ COMMAND`: run to completion; it prints exactly `expected`.
    Run {
        command: String,
        expected: Vec<String>,
        line: usize,
    },
    /// `$ COMMAND &`: start in `terminal`; it prints `expected` before the transcript goes on.
    Start {
        command: String,
        terminal: String,
        expected: Vec<String>,
        line: usize,
    },
    /// Lines under `# terminal NAME`: the job there prints these next.
    Expect {
        terminal: String,
        expected: Vec<String>,
        line: usize,
    },
}

impl Action {
    fn expected_mut(&mut self) -> &mut Vec<String> {
        match self {
            Action::Run { expected, .. }
            | Action::Start { expected, .. }
            | Action::Expect { expected, .. } => expected,
        }
    }
}

#[derive(Debug, PartialEq)]
struct Transcript {
    line: usize,
    actions: Vec<Action>,
}

/// The programs that serve or reconcile until Ctrl-C or SIGTERM: the sandbox and the operator
/// stages from 02 on (stage 01 registers the CRD and exits; the tour ends by itself).
fn runs_until_stopped(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    let binary = match words.as_slice() {
        ["cargo", "run", "--bin", binary, ..] => binary,
        ["cargo", "run", "--release", "--bin", binary, ..] => binary,
        _ => return false,
    };
    *binary == "sandbox"
        || *binary == "deployer"
        || (binary.starts_with("stage") && *binary != "stage01")
}

fn parse_transcripts(markdown: &str) -> Vec<Transcript> {
    let mut transcripts = Vec::new();
    let mut current: Option<Transcript> = None;
    let mut terminal = String::from("1");
    // Output lines go to the last action, unless a `# terminal` line opened a new Expect.
    let mut expecting_terminal: Option<String> = None;
    for (index, raw) in markdown.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim_end();
        let Some(transcript) = current.as_mut() else {
            if trimmed.trim_start() == "```console" {
                current = Some(Transcript {
                    line,
                    actions: Vec::new(),
                });
                terminal = String::from("1");
                expecting_terminal = None;
            }
            continue;
        };
        if trimmed.trim_start() == "```" {
            transcripts.extend(current.take());
        } else if let Some(command) = trimmed.strip_prefix("$ ") {
            expecting_terminal = None;
            let command = command.trim().to_string();
            transcript.actions.push(if runs_until_stopped(&command) {
                Action::Start {
                    command,
                    terminal: terminal.clone(),
                    expected: Vec::new(),
                    line,
                }
            } else {
                Action::Run {
                    command,
                    expected: Vec::new(),
                    line,
                }
            });
        } else if let Some(name) = trimmed.strip_prefix("# terminal ") {
            terminal = name.trim().to_string();
            expecting_terminal = Some(terminal.clone());
        } else if trimmed.starts_with('#') {
            continue;
        } else if let Some(name) = expecting_terminal.take() {
            transcript.actions.push(Action::Expect {
                terminal: name,
                expected: vec![trimmed.to_string()],
                line,
            });
        } else if let Some(action) = transcript.actions.last_mut() {
            action.expected_mut().push(trimmed.to_string());
        }
    }
    transcripts
}

/// Fenced blocks that are not `console` but hold a `$ ` prompt: transcripts nobody re-runs.
fn untested_transcripts(markdown: &str) -> Vec<usize> {
    let mut found = Vec::new();
    let mut fence: Option<String> = None;
    for (index, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        match &fence {
            None if trimmed.starts_with("```") => fence = Some(trimmed[3..].trim().to_string()),
            Some(_) if trimmed.starts_with("```") => fence = None,
            Some(tag) if tag != "console" && trimmed.starts_with("$ ") => found.push(index + 1),
            _ => {}
        }
    }
    found
}

/// The characters Kubernetes draws a `generateName` suffix from (`utilrand.String`): no vowels,
/// no 0, 1 or 3, so a suffix never spells a word.
const GENERATED_NAME_CHARS: &str = "bcdfghjklmnpqrstvwxz2456789";

/// `-7xk2p` after a name becomes `-?????`; `0/501E4E8` (an LSN) becomes `N/N`, `0_501E4E8` (one
/// in a base backup's name) `N_N`; `00000002000000000000000A` (a WAL segment) `N`.
fn mask_generated(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let is_word = |c: Option<&char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        let suffix_end = i + 6;
        if chars[i] == '-'
            && i > 0
            && is_word(chars.get(i - 1))
            && suffix_end <= chars.len()
            && chars[i + 1..suffix_end]
                .iter()
                .all(|c| GENERATED_NAME_CHARS.contains(*c))
            && !is_word(chars.get(suffix_end))
        {
            out.push_str("-?????");
            i = suffix_end;
            continue;
        }
        let hex = |c: &char| c.is_ascii_digit() || ('A'..='F').contains(c);
        if hex(&chars[i]) && (i == 0 || !is_word(chars.get(i - 1))) {
            let high = chars[i..].iter().take_while(|c| hex(c)).count();
            // An LSN, or the same with `_` in a base backup's name (`20261122T211751Z-0_6000110`).
            if let Some(separator @ ('/' | '_')) = chars.get(i + high) {
                let low = chars[i + high + 1..].iter().take_while(|c| hex(c)).count();
                if low > 0 && !is_word(chars.get(i + high + 1 + low)) {
                    out.push_str(&format!("N{separator}N"));
                    i += high + 1 + low;
                    continue;
                }
            }
            // A WAL segment's file name: timeline, log and segment, 8 hex digits each.
            if high == 24 && !is_word(chars.get(i + high)) {
                out.push('N');
                i += high;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// A command's words: split at whitespace, except inside double quotes, which are dropped.
fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for ch in text.chars() {
        match ch {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

fn normalise(line: &str) -> String {
    // A generated suffix and a number are the same to the matcher: a port such as 42485 is
    // also five characters of the generated-name alphabet, and `cache-8001` in the text must
    // match `cache-42485` in the output.
    let line = mask_generated(line.trim()).replace("-?????", "-N");
    let mut out = String::with_capacity(line.len());
    let mut previous_digit = false;
    let mut previous_space = false;
    for ch in line.chars() {
        if ch.is_ascii_digit() {
            if !previous_digit {
                out.push('N');
            }
            previous_digit = true;
            previous_space = false;
        } else if ch == ' ' || ch == '\t' {
            if !previous_space {
                out.push(' ');
            }
            previous_space = true;
            previous_digit = false;
        } else {
            out.push(ch);
            previous_digit = false;
            previous_space = false;
        }
    }
    out
}

/// Does `actual` match `expected` line by line, where `...` in `expected` skips any lines?
fn matches_exactly(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.iter().all(|line| line.trim().is_empty()),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| matches_exactly(rest, &actual[skip..]))
        }
        Some((first, rest)) => match actual.split_first() {
            Some((line, actual_rest)) if line.trim().is_empty() => {
                matches_exactly(expected, actual_rest)
            }
            Some((line, actual_rest)) => {
                normalise(first) == normalise(line) && matches_exactly(rest, actual_rest)
            }
            None => false,
        },
    }
}

/// Find the expected lines in `actual[from..]`, in order (other lines in between allowed).
/// Returns the index just past the last one matched, or the first line not found.
fn find_in_order(expected: &[String], actual: &[String], from: usize) -> Result<usize, String> {
    let mut position = from;
    for wanted in expected
        .iter()
        .filter(|l| l.trim() != "..." && !l.trim().is_empty())
    {
        let wanted = normalise(wanted);
        match actual[position.min(actual.len())..]
            .iter()
            .position(|line| normalise(line) == wanted)
        {
            Some(offset) => position += offset + 1,
            None => return Err(wanted),
        }
    }
    Ok(position)
}

/// A long-running command from a transcript, with what it has printed so far.
struct Background {
    terminal: String,
    command: String,
    child: Child,
    output: Arc<Mutex<Vec<String>>>,
    /// Lines before this index have been matched by the transcript already.
    cursor: usize,
}

impl Background {
    /// Start `command` (the transcript's `text`, in `terminal`), collecting its stdout lines;
    /// stderr is diagnostics, not story.
    fn spawn(command: &mut Command, terminal: &str, text: &str) -> Background {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("start the background command {text:?}: {error}"));
        let output = collect_lines(child.stdout.take().expect("stdout"));
        Background {
            terminal: terminal.to_string(),
            command: text.to_string(),
            child,
            output,
            cursor: 0,
        }
    }

    fn lines(&self) -> Vec<String> {
        self.output
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default()
    }

    /// Wait (with a deadline) until the job prints `expected`, in order, after what was matched.
    fn wait_for(&mut self, expected: &[String], line: usize) {
        let deadline = Instant::now() + BACKGROUND_DEADLINE;
        loop {
            let lines = self.lines();
            match find_in_order(expected, &lines, self.cursor) {
                Ok(position) => {
                    self.cursor = position;
                    return;
                }
                Err(missing) if Instant::now() > deadline => panic!(
                    "WORKSHOP.md line {line}: `{}` never printed `{missing}`; it printed:\n{}",
                    self.command,
                    lines.join("\n")
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(25)),
            }
        }
    }

    fn is_sandbox(&self) -> bool {
        self.command.starts_with("cargo run --bin sandbox")
    }

    /// SIGTERM, as Kubernetes sends it, then the exit status within a deadline.
    fn terminate(mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Collect a child's stdout lines on a thread, so the test can look at them while it runs.
fn collect_lines(stdout: std::process::ChildStdout) -> Arc<Mutex<Vec<String>>> {
    let output = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&output);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(mut lines) = sink.lock() {
                lines.push(line);
            }
        }
    });
    output
}

/// What the sandbox's banner tells a learner: where it is, and the kubeconfig to export.
#[derive(Clone)]
struct SandboxAddress {
    /// `127.0.0.1:PORT`
    host_port: String,
    kubeconfig: PathBuf,
}

struct Runner {
    repo: PathBuf,
    cache_dir: tempfile::TempDir,
    server: Option<SandboxAddress>,
    sandbox: Option<Background>,
}

impl Runner {
    fn new() -> Runner {
        Runner {
            repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
            cache_dir: tempfile::tempdir().expect("a temporary kubectl cache dir"),
            server: None,
            sandbox: None,
        }
    }

    /// Start the sandbox binary on a free port, and use it for every later command.
    fn start_sandbox(&mut self, command: &str, terminal: &str) -> Background {
        let words = shell_words(command);
        let (_, args) = binary_and_args(&words[2..]);
        let mut args: Vec<String> = args
            .iter()
            .map(|arg| arg.replace(DOC_ADDRESS, "127.0.0.1:0"))
            .collect();
        if !args.iter().any(|arg| arg.starts_with("--listen")) {
            args.extend(["--listen".to_string(), "127.0.0.1:0".to_string()]);
        }
        let mut sandbox = Command::new(binary_path("sandbox"));
        sandbox.args(&args).current_dir(&self.repo);
        let job = Background::spawn(&mut sandbox, terminal, command);
        let deadline = Instant::now() + Duration::from_secs(30);
        let address = loop {
            let found = job
                .output
                .lock()
                .ok()
                .and_then(|lines| sandbox_address(&lines));
            match found {
                Some(address) => break address,
                None if Instant::now() > deadline => {
                    panic!("the sandbox never printed its address and an `export KUBECONFIG=` line")
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        self.server = Some(address);
        job
    }

    /// The sandbox every command talks to, started now if no transcript has started one yet.
    fn sandbox_address(&mut self) -> SandboxAddress {
        match &self.server {
            Some(address) => address.clone(),
            None => {
                let sandbox = self.start_sandbox("cargo run --bin sandbox", "sandbox");
                self.sandbox = Some(sandbox);
                self.sandbox_address()
            }
        }
    }

    /// Turn a transcript command into a process to run.
    fn command_for(&mut self, text: &str) -> Command {
        let words = shell_words(text);
        // The tour starts a sandbox of its own; every other command uses the learner's.
        let tour = match words.as_slice() {
            [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" => {
                binary_and_args(rest).0 == "tour"
            }
            _ => false,
        };
        let sandbox = if tour {
            self.server.clone()
        } else {
            Some(self.sandbox_address())
        };
        let (address, kubeconfig) = match &sandbox {
            Some(sandbox) => (sandbox.host_port.clone(), sandbox.kubeconfig.clone()),
            None => (String::new(), PathBuf::from("/dev/null")),
        };
        let words: Vec<String> = words
            .into_iter()
            .map(|word| word.replace(DOC_ADDRESS, &address))
            .collect();
        match words.as_slice() {
            [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" => {
                let (binary, args) = binary_and_args(rest);
                let mut command = Command::new(binary_path(&binary));
                // Under `cargo run` the tour builds the sandbox first; here cargo already did, and
                // holds the build directory while the tests run.
                command
                    .args(args)
                    .env_remove("CARGO")
                    .env_remove("KUBE_SERVER")
                    .env("KUBECONFIG", &kubeconfig);
                command
            }
            // `export KUBECACHEDIR=...`: every kubectl here already gets a fresh cache directory.
            [export, variable] if export == "export" && variable.starts_with("KUBECACHEDIR=") => {
                let mut command = Command::new("true");
                command.arg(variable);
                command
            }
            // `export KUBECONFIG=...`: every command here already runs with it; it must be the
            // file the sandbox wrote.
            [export, variable] if export == "export" && variable.starts_with("KUBECONFIG=") => {
                let written = kubeconfig.display().to_string().replacen(
                    &std::env::temp_dir().display().to_string(),
                    "/tmp",
                    1,
                );
                let exported = &variable["KUBECONFIG=".len()..];
                assert_eq!(
                    normalise(exported),
                    normalise(&written),
                    "`{text}` does not name the kubeconfig the sandbox wrote"
                );
                let mut command = Command::new("true");
                command.arg(variable);
                command
            }
            [kubectl, rest @ ..] if kubectl == "kubectl" => {
                let mut command = Command::new("kubectl");
                command
                    .arg("--cache-dir")
                    .arg(self.cache_dir.path())
                    .args(rest)
                    .env("KUBECONFIG", &kubeconfig);
                command
            }
            _ => panic!("WORKSHOP.md transcript runs a command this test does not know: {text}"),
        }
    }
}

impl Drop for Runner {
    /// SIGTERM, so the sandbox removes its credentials directory as it does for a learner.
    fn drop(&mut self) {
        if let Some(sandbox) = self.sandbox.take() {
            let _ = sandbox.terminate();
        }
    }
}

/// `sandbox API server at https://127.0.0.1:PORT` and `export KUBECONFIG=PATH`, from the
/// sandbox's banner, once it has printed both.
fn sandbox_address(banner: &[String]) -> Option<SandboxAddress> {
    let url = banner
        .iter()
        .find_map(|line| line.strip_prefix("sandbox API server at "))?;
    let (_, host_port) = url.split_once("://")?;
    let kubeconfig = banner
        .iter()
        .find_map(|line| line.trim().strip_prefix("export KUBECONFIG="))?;
    Some(SandboxAddress {
        host_port: host_port.to_string(),
        kubeconfig: PathBuf::from(kubeconfig),
    })
}

/// `--bin NAME -- ARGS` → (NAME, ARGS); no `--bin` → the default binary, the tour.
fn binary_and_args(words: &[String]) -> (String, Vec<String>) {
    let mut binary = "tour".to_string();
    let mut args = Vec::new();
    let mut iter = words.iter();
    while let Some(word) = iter.next() {
        match word.as_str() {
            "--bin" => binary = iter.next().cloned().unwrap_or_default(),
            "--release" | "-q" | "--quiet" => {}
            "--" => {
                args.extend(iter.by_ref().cloned());
            }
            other => panic!("unexpected cargo argument in a transcript: {other}"),
        }
    }
    (binary, args)
}

fn binary_path(name: &str) -> PathBuf {
    // Integration tests know where cargo put this package's binaries; the sandbox's binary is the
    // other workspace member's, built beside them by `cargo test` at the top of the workspace.
    let stage01 = Path::new(env!("CARGO_BIN_EXE_stage01"));
    let dir = stage01.parent().expect("the binaries' directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` at the top of the workspace builds it (or `cargo build -p sandbox`)",
        path.display()
    );
    path
}

/// Run to completion; the lines a learner's terminal shows: stdout, and for kubectl its stderr too
/// (it prints warnings and some answers there). Our binaries' stderr is diagnostics, not story.
fn run_foreground(command: &mut Command, with_stderr: bool) -> (bool, Vec<String>) {
    let (output, _) = test_support::run_with_deadline(command, FOREGROUND_DEADLINE);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = if with_stderr {
        String::from_utf8_lossy(&output.stderr)
    } else {
        "".into()
    };
    let lines = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::to_string)
        .collect();
    (output.status.success(), lines)
}

fn start_background(runner: &mut Runner, command: &str, terminal: &str) -> Background {
    if command.starts_with("cargo run --bin sandbox") {
        return runner.start_sandbox(command, terminal);
    }
    Background::spawn(&mut runner.command_for(command), terminal, command)
}

fn run_transcript(runner: &mut Runner, transcript: &Transcript) {
    let mut jobs: Vec<Background> = Vec::new();
    for action in &transcript.actions {
        match action {
            Action::Start {
                command,
                terminal,
                expected,
                line,
            } => {
                let mut job = start_background(runner, command, terminal);
                job.wait_for(expected, *line);
                jobs.push(job);
            }
            Action::Expect {
                terminal,
                expected,
                line,
            } => {
                let job = jobs
                    .iter_mut()
                    .rev()
                    .find(|job| &job.terminal == terminal)
                    .unwrap_or_else(|| {
                        panic!("WORKSHOP.md line {line}: nothing runs in terminal {terminal}")
                    });
                job.wait_for(expected, *line);
            }
            Action::Run {
                command,
                expected,
                line,
            } => {
                let with_stderr = command.starts_with("kubectl");
                let (success, lines) =
                    run_foreground(&mut runner.command_for(command), with_stderr);
                assert!(
                    success,
                    "WORKSHOP.md line {line}: `{command}` failed:\n{}",
                    lines.join("\n")
                );
                assert!(
                    matches_exactly(expected, &lines),
                    "WORKSHOP.md line {line}: `{command}` printed\n{}\nbut the text says\n{}",
                    lines.join("\n"),
                    expected.join("\n")
                );
            }
        }
    }
    for job in jobs {
        if job.is_sandbox() {
            runner.sandbox = Some(job);
            continue;
        }
        let command = job.command.clone();
        let status = job.terminate();
        assert!(
            status.is_some_and(|s| s.success()),
            "WORKSHOP.md transcript at line {}: `{command}` did not exit 0 within 15 s of SIGTERM ({status:?})",
            transcript.line
        );
    }
}

/// Every `console` transcript in WORKSHOP.md runs and prints what the text says it prints.
#[test]
fn workshop_transcripts_match_the_code() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(repo.join("WORKSHOP.md")).expect("read WORKSHOP.md");
    let transcripts = parse_transcripts(&markdown);
    assert!(
        transcripts.len() >= 4,
        "WORKSHOP.md should carry transcripts for set-up and steps 01-03, found {}",
        transcripts.len()
    );
    let mut runner = Runner::new();
    for transcript in &transcripts {
        run_transcript(&mut runner, transcript);
    }
}

/// A command the text means for a terminal of its own is not sent to the background with `&`
/// (it would get no Ctrl-C), in WORKSHOP.md and README.md alike.
#[test]
fn no_command_in_the_docs_runs_in_the_background() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    for doc in ["WORKSHOP.md", "README.md"] {
        let text = std::fs::read_to_string(repo.join(doc)).expect("read the doc");
        let backgrounded: Vec<usize> = text
            .lines()
            .enumerate()
            .filter(|(_, line)| {
                let command = line.split(" # ").next().unwrap_or_default().trim_end();
                command.ends_with(" &") && !command.ends_with("&&")
            })
            .map(|(index, _)| index + 1)
            .collect();
        assert_eq!(
            backgrounded,
            Vec::<usize>::new(),
            "{doc}: these lines end a command with `&`"
        );
    }
}

/// No shell session hides in a block this test does not run.
#[test]
fn every_shell_session_in_the_workshop_is_a_console_block() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(repo.join("WORKSHOP.md")).expect("read WORKSHOP.md");
    assert_eq!(
        untested_transcripts(&markdown),
        Vec::<usize>::new(),
        "these WORKSHOP.md lines hold `$ ` prompts outside a console block"
    );
}

/// The parser reads commands, background jobs, terminal switches and expected output.
#[test]
fn parser_reads_commands_background_jobs_and_terminals() {
    let markdown = "text\n```console\n# terminal 1\n$ cargo run --bin stage02\nWatch version: 12\n# terminal 2\n$ kubectl get pgc\nNAME   SIZE\n# terminal 1\nPostgresCluster event: ADDED\n# a comment\n```\n```sh\n$ not a transcript\n```\n";
    let transcripts = parse_transcripts(markdown);
    assert_eq!(transcripts.len(), 1);
    let actions = &transcripts[0].actions;
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert!(
        matches!(&actions[0], Action::Start { terminal, expected, .. }
        if terminal == "1" && expected == &vec!["Watch version: 12".to_string()])
    );
    assert!(matches!(&actions[1], Action::Run { command, expected, .. }
        if command == "kubectl get pgc" && expected == &vec!["NAME   SIZE".to_string()]));
    assert!(
        matches!(&actions[2], Action::Expect { terminal, expected, .. }
        if terminal == "1" && expected == &vec!["PostgresCluster event: ADDED".to_string()])
    );
    assert_eq!(untested_transcripts(markdown), vec![14]);
}

/// Numbers and column alignment may change between runs; words may not.
#[test]
fn comparison_ignores_numbers_and_alignment_but_not_words() {
    let expected = vec!["NAME   SIZE   AGE".to_string(), "db  3  5s".to_string()];
    let actual = vec!["NAME SIZE AGE".to_string(), "db   5   12s".to_string()];
    assert!(matches_exactly(&expected, &actual));
    let wrong = vec!["NAME SIZE AGE".to_string(), "other 5 12s".to_string()];
    assert!(!matches_exactly(&expected, &wrong));
    let elided = vec!["first".to_string(), "...".to_string(), "last".to_string()];
    let many: Vec<String> = ["first", "x", "y", "last"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(matches_exactly(&elided, &many));
    assert_eq!(find_in_order(&elided, &many, 0), Ok(4));
    assert_eq!(
        find_in_order(&["x".to_string()], &many, 2),
        Err("x".to_string())
    );
}

/// Generated names, WAL positions and segment names differ from run to run; other words with
/// hyphens or underscores do not.
#[test]
fn comparison_ignores_generated_names_and_wal_positions() {
    assert_eq!(
        normalise("Promoting db-7xk2p to primary (WAL received up to 0/501E4E8, replayed up to 0/3000148)"),
        normalise("Promoting db-bb9zz to primary (WAL received up to 0/60000D8, replayed up to 0/60000D8)")
    );
    assert_eq!(
        normalise("Backup 20261122T211751Z-0_6000110 complete, 00000002000000000000000A archived"),
        normalise("Backup 20261122T211752Z-0_80000D8 complete, 000000020000000000000007 archived")
    );
    assert_eq!(
        normalise("pod \"db-7xk2p\" deleted"),
        "pod \"db-N\" deleted"
    );
    // A port made only of the alphabet's digits is a number like any other.
    assert_eq!(
        normalise("export KUBECACHEDIR=/tmp/sandbox-kubectl-cache-42485"),
        normalise("export KUBECACHEDIR=/tmp/sandbox-kubectl-cache-8001")
    );
    assert_ne!(normalise("db-7xk2p"), normalise("other-7xk2p"));
    // Vowels, longer suffixes and words of their own are left alone.
    for kept in [
        "example-cluster",
        "db-primary",
        "db-init",
        "kube-node-lease",
        "a-bcdfgh",
        "-bcdfg",
        "ON_ERROR_STOP=1",
    ] {
        assert_eq!(mask_generated(kept), kept);
    }
}

/// Double quotes keep a word together and are dropped, as a shell does.
#[test]
fn commands_split_at_spaces_outside_double_quotes() {
    assert_eq!(
        shell_words(r#"kubectl exec svc/db -- psql -Atc "SELECT note FROM kept"  -q"#),
        [
            "kubectl",
            "exec",
            "svc/db",
            "--",
            "psql",
            "-Atc",
            "SELECT note FROM kept",
            "-q"
        ]
    );
    assert_eq!(shell_words(r#"a "" b"#), ["a", "", "b"]);
}
