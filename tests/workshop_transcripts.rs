//! Every shell transcript in WORKSHOP.md is re-run here, against the sandbox, so the text cannot
//! drift from the code.
//!
//! A transcript is a fenced block tagged `console`. Inside it:
//! - `$ COMMAND` runs a command. `cargo run --bin NAME -- ARGS` runs the built binary, `cargo run`
//!   the tour, `kubectl ARGS` the real kubectl (with a fresh `--cache-dir` and no kubeconfig).
//! - `$ COMMAND &` starts it in the background, as in a second terminal. Its expected lines follow
//!   it; they are checked, in order, once the block's other commands have run (the operator's
//!   output usually reacts to them). At the end of the block it gets SIGTERM and must exit 0.
//! - Other lines are the expected output of the command above them: for a foreground command,
//!   all of its output lines, in order (`...` stands for any number of lines).
//! - Lines starting with `#` are comments.
//!
//! Output is compared after normalising what changes from run to run: every run of digits becomes
//! `N` (resourceVersions, ages, ports, uids) and runs of spaces become one (kubectl aligns columns).
//!
//! `127.0.0.1:8001` in a command is the sandbox the test runs: `cargo run --bin sandbox -- --listen
//! 127.0.0.1:8001 &` starts it for real on a free port; a transcript that does not start one gets
//! a sandbox started before its first block. Blocks run in document order against the same sandbox,
//! as a learner working through the text would.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DOC_ADDRESS: &str = "127.0.0.1:8001";
const BACKGROUND_DEADLINE: Duration = Duration::from_secs(40);
const FOREGROUND_DEADLINE: Duration = Duration::from_secs(60);

#[derive(Debug, PartialEq)]
struct Step {
    command: String,
    background: bool,
    expected: Vec<String>,
    line: usize,
}

#[derive(Debug, PartialEq)]
struct Transcript {
    line: usize,
    steps: Vec<Step>,
}

fn parse_transcripts(markdown: &str) -> Vec<Transcript> {
    let mut transcripts = Vec::new();
    let mut current: Option<Transcript> = None;
    for (index, raw) in markdown.lines().enumerate() {
        let line_number = index + 1;
        let trimmed = raw.trim_end();
        match current.as_mut() {
            None => {
                if trimmed.trim_start() == "```console" {
                    current = Some(Transcript {
                        line: line_number,
                        steps: Vec::new(),
                    });
                }
            }
            Some(transcript) => {
                if trimmed.trim_start() == "```" {
                    transcripts.extend(current.take());
                } else if let Some(command) = trimmed.strip_prefix("$ ") {
                    let (command, background) = match command.strip_suffix(" &") {
                        Some(foreground) => (foreground.trim().to_string(), true),
                        None => (command.trim().to_string(), false),
                    };
                    transcript.steps.push(Step {
                        command,
                        background,
                        expected: Vec::new(),
                        line: line_number,
                    });
                } else if trimmed.starts_with('#') {
                    continue;
                } else if let Some(step) = transcript.steps.last_mut() {
                    step.expected.push(trimmed.to_string());
                }
            }
        }
    }
    transcripts
}

fn normalise(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut previous_digit = false;
    let mut previous_space = false;
    for ch in line.trim().chars() {
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

/// Does every expected line appear in `actual`, in order (other lines in between allowed)?
fn appears_in_order(expected: &[String], actual: &[String]) -> Result<(), String> {
    let mut actual_lines = actual.iter().map(|line| normalise(line));
    for wanted in expected
        .iter()
        .filter(|l| l.trim() != "..." && !l.trim().is_empty())
    {
        let wanted = normalise(wanted);
        if !actual_lines.any(|line| line == wanted) {
            return Err(wanted);
        }
    }
    Ok(())
}

struct Background {
    step_line: usize,
    command: String,
    expected: Vec<String>,
    child: Child,
    output: Arc<Mutex<Vec<String>>>,
}

impl Background {
    fn lines(&self) -> Vec<String> {
        self.output
            .lock()
            .map(|lines| lines.clone())
            .unwrap_or_default()
    }
}

struct Runner {
    repo: PathBuf,
    cache_dir: tempfile::TempDir,
    server: Option<String>,
    sandbox: Option<Child>,
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

    /// Start the sandbox binary on a free port and remember its address.
    fn start_sandbox(&mut self, args: &[String]) -> (Child, Arc<Mutex<Vec<String>>>) {
        let args: Vec<String> = args
            .iter()
            .map(|arg| arg.replace(DOC_ADDRESS, "127.0.0.1:0"))
            .collect();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sandbox"))
            .args(&args)
            .current_dir(&self.repo)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the sandbox binary");
        let stdout = child.stdout.take().expect("sandbox stdout");
        let output = Arc::new(Mutex::new(Vec::new()));
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(address) = find_http_address(&line) {
                        let _ = address_tx.send(address);
                        sent = true;
                    }
                }
                if let Ok(mut lines) = sink.lock() {
                    lines.push(line);
                }
            }
        });
        let address = address_rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the sandbox prints its http://127.0.0.1:PORT address");
        self.server = Some(address);
        (child, output)
    }

    fn server_address(&mut self) -> String {
        if self.server.is_none() {
            let (child, _) = self.start_sandbox(&["--listen".into(), DOC_ADDRESS.into()]);
            self.sandbox = Some(child);
        }
        self.server.clone().unwrap_or_default()
    }

    /// Turn a transcript command into a process to run.
    fn command_for(&mut self, text: &str) -> Command {
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        let address = if text.contains(DOC_ADDRESS) {
            self.server_address()
        } else {
            String::new()
        };
        let words: Vec<String> = words
            .into_iter()
            .map(|word| word.replace(DOC_ADDRESS, &address))
            .collect();
        match words.as_slice() {
            [cargo, run, rest @ ..] if cargo == "cargo" && run == "run" => {
                let (binary, args) = binary_and_args(rest);
                let mut command = Command::new(binary_path(&binary));
                command.args(args);
                command
            }
            [kubectl, rest @ ..] if kubectl == "kubectl" => {
                let mut command = Command::new("kubectl");
                command
                    .arg("--cache-dir")
                    .arg(self.cache_dir.path())
                    .args(rest)
                    .env("KUBECONFIG", "/dev/null");
                command
            }
            _ => panic!("WORKSHOP.md transcript runs a command this test does not know: {text}"),
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(mut sandbox) = self.sandbox.take() {
            let _ = sandbox.kill();
            let _ = sandbox.wait();
        }
    }
}

fn find_http_address(line: &str) -> Option<String> {
    let start = line.find("http://127.0.0.1:")?;
    let address: String = line[start + "http://".len()..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
        .collect();
    Some(address)
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
    // Integration tests know where cargo put the binaries they depend on.
    let sandbox = Path::new(env!("CARGO_BIN_EXE_sandbox"));
    let dir = sandbox.parent().expect("the binaries' directory");
    dir.join(name)
}

/// Run to completion; the lines a learner's terminal shows: stdout, and for kubectl its stderr too
/// (it prints warnings and some answers there). Our binaries' stderr is diagnostics, not story.
fn run_foreground(command: &mut Command, with_stderr: bool) -> (bool, Vec<String>) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a transcript command");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut stderr = child.stderr.take().expect("stderr");
    let out_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + FOREGROUND_DEADLINE;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            break child.wait().expect("wait for a killed command");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let stderr = if with_stderr { stderr } else { String::new() };
    let lines = stdout
        .lines()
        .chain(stderr.lines())
        .map(str::to_string)
        .collect();
    (status.success(), lines)
}

fn start_background(runner: &mut Runner, step: &Step) -> Background {
    let output = Arc::new(Mutex::new(Vec::new()));
    if step.command.starts_with("cargo run --bin sandbox") {
        let words: Vec<String> = step
            .command
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let (_, args) = binary_and_args(&words[2..]);
        let (child, output) = runner.start_sandbox(&args);
        return Background {
            step_line: step.line,
            command: step.command.clone(),
            expected: step.expected.clone(),
            child,
            output,
        };
    }
    let mut child = runner
        .command_for(&step.command)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start a background transcript command");
    let stdout = child.stdout.take().expect("stdout");
    let sink = Arc::clone(&output);
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(mut lines) = sink.lock() {
                lines.push(line);
            }
        }
    });
    Background {
        step_line: step.line,
        command: step.command.clone(),
        expected: step.expected.clone(),
        child,
        output,
    }
}

fn run_transcript(runner: &mut Runner, transcript: &Transcript) {
    let mut background: Vec<Background> = Vec::new();
    for step in &transcript.steps {
        if step.background {
            background.push(start_background(runner, step));
            // Let a background operator reach its watch before the next command changes things,
            // by waiting (with a deadline) for its first expected line.
            if let (Some(job), Some(first)) = (background.last(), step.expected.first()) {
                wait_for_lines(job, std::slice::from_ref(first));
            }
            continue;
        }
        let with_stderr = step.command.starts_with("kubectl");
        let (success, lines) = run_foreground(&mut runner.command_for(&step.command), with_stderr);
        assert!(
            success,
            "WORKSHOP.md line {}: `{}` failed:\n{}",
            step.line,
            step.command,
            lines.join("\n")
        );
        assert!(
            matches_exactly(&step.expected, &lines),
            "WORKSHOP.md line {}: `{}` printed\n{}\nbut the text says\n{}",
            step.line,
            step.command,
            lines.join("\n"),
            step.expected.join("\n")
        );
    }
    for mut job in background {
        wait_for_lines(&job, &job.expected);
        if job.command.starts_with("cargo run --bin sandbox") {
            // The sandbox keeps serving the rest of the document.
            runner.sandbox = Some(job.child);
            continue;
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(job.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Ok(Some(status)) = job.child.try_wait() {
                break Some(status);
            }
            if Instant::now() > deadline {
                let _ = job.child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            status.is_some_and(|s| s.success()),
            "WORKSHOP.md line {}: `{}` did not exit 0 within 15 s of SIGTERM",
            job.step_line,
            job.command
        );
    }
}

fn wait_for_lines(job: &Background, expected: &[String]) {
    let deadline = Instant::now() + BACKGROUND_DEADLINE;
    loop {
        let lines = job.lines();
        match appears_in_order(expected, &lines) {
            Ok(()) => return,
            Err(missing) if Instant::now() > deadline => panic!(
                "WORKSHOP.md line {}: `{}` never printed `{}`; it printed:\n{}",
                job.step_line,
                job.command,
                missing,
                lines.join("\n")
            ),
            Err(_) => std::thread::sleep(Duration::from_millis(25)),
        }
    }
}

/// Every `console` transcript in WORKSHOP.md runs and prints what the text says it prints.
#[test]
fn workshop_transcripts_match_the_code() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let markdown = std::fs::read_to_string(repo.join("WORKSHOP.md")).expect("read WORKSHOP.md");
    let transcripts = parse_transcripts(&markdown);
    assert!(
        transcripts.len() >= 3,
        "WORKSHOP.md should carry a transcript for each of steps 01-03, found {}",
        transcripts.len()
    );
    let mut runner = Runner::new();
    for transcript in &transcripts {
        run_transcript(&mut runner, transcript);
    }
}

/// The transcript parser splits commands, background jobs, expected lines and comments.
#[test]
fn parser_reads_commands_background_jobs_and_output() {
    let markdown = "text\n```console\n# terminal 1\n$ cargo run --bin stage02 -- --server http://127.0.0.1:8001 &\nWatch version: 12\n$ kubectl get pgc\nNAME   SIZE\n```\n```sh\n$ not a transcript\n```\n";
    let transcripts = parse_transcripts(markdown);
    assert_eq!(transcripts.len(), 1);
    let steps = &transcripts[0].steps;
    assert_eq!(steps.len(), 2);
    assert!(steps[0].background);
    assert_eq!(steps[0].expected, vec!["Watch version: 12".to_string()]);
    assert_eq!(steps[1].command, "kubectl get pgc");
    assert!(!steps[1].background);
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
    assert!(appears_in_order(&elided, &many).is_ok());
    assert!(appears_in_order(&["y".to_string(), "x".to_string()], &many).is_err());
}
