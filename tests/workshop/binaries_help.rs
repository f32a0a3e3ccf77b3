//! Every operator binary parses its flags with clap: `--help` says what it is (its workshop
//! step), every flag with its default, the order connection sources are tried, examples and exit
//! statuses, on stdout, exit 0. An unknown flag or a bad duration is exit 2 with a message that
//! names the flag — never a panic (101).
//!
//! WORKSHOP.md, "Set-up". None of these runs reaches an API server: help and bad flags are
//! answered before any connection is made. (The sandbox binary's own test is in sandbox/tests.)

use std::process::{Command, Output};

use postgres_operator::controller::DEFAULT_RECONCILE_INTERVAL;
use postgres_operator::crd::DEFAULT_ESTABLISHED_TIMEOUT;

/// What the help of every binary that takes `ConfigArgs` shows.
const CONNECTION_FLAGS: &[&str] = &[
    "--server <URL>",
    "--certificate-authority <FILE>",
    "--token-file <FILE>",
    "--token <TOKEN>",
    "-n, --namespace <NS>",
    "KUBE_SERVER",
    "in-cluster",
    "kubeconfig",
];

struct Binary {
    name: &'static str,
    path: &'static str,
    /// What the first line must say: the binary's name and its place in the workshop.
    step: &'static str,
    /// Its flags, in groups: a stage's, then a layer's.
    own_flags: &'static [&'static [&'static str]],
    /// Flags it must not have: a later step's, which a layer adds, never a flag of an earlier stage.
    absent_flags: &'static [&'static str],
    /// Its flags that take a duration in seconds.
    duration_flags: &'static [&'static [&'static str]],
    takes_connection_flags: bool,
}

/// Stage 04's own flags (stage 05 and 06 have them too): the cluster task's timings and leader
/// election.
const STAGE04_FLAGS: &[&str] = &[
    "--reconcile-interval <SECS>",
    "--member-lost-after <SECS>",
    "--watch-timeout <SECS>",
    "--metrics-address <IP:PORT>",
    "--leader-elect[=<BOOL>]",
    "--lease-name <NAME>",
    "--lease-duration <SECS>",
    "--renew-deadline <SECS>",
    "--retry-period <SECS>",
];
const STAGE04_DURATION_FLAGS: &[&str] = &[
    "--reconcile-interval",
    "--member-lost-after",
    "--watch-timeout",
    "--lease-duration",
    "--renew-deadline",
    "--retry-period",
];

/// The flags step 05's failover layer adds (`FailoverFlags`): stage 05's and stage 06's only.
const FAILOVER_FLAGS: &[&str] = &[
    "--failover-after <SECS>",
    "--stop-timeout <SECS>",
    "--not-streaming-after <SECS>",
    "--agent-image <IMAGE>",
];

/// The failover layer's flags that take a duration in seconds.
const FAILOVER_DURATION_FLAGS: &[&str] = &[
    "--failover-after",
    "--stop-timeout",
    "--not-streaming-after",
];

const BINARIES: &[Binary] = &[
    Binary {
        name: "stage01",
        path: env!("CARGO_BIN_EXE_stage01"),
        step: "workshop step 01",
        own_flags: &[&["--established-timeout <SECS>"]],
        absent_flags: FAILOVER_FLAGS,
        duration_flags: &[&["--established-timeout"]],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage02",
        path: env!("CARGO_BIN_EXE_stage02"),
        step: "workshop step 02",
        own_flags: &[],
        absent_flags: FAILOVER_FLAGS,
        duration_flags: &[],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage03",
        path: env!("CARGO_BIN_EXE_stage03"),
        step: "workshop step 03",
        own_flags: &[&["--reconcile-interval <SECS>"]],
        absent_flags: FAILOVER_FLAGS,
        duration_flags: &[&["--reconcile-interval"]],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage04",
        path: env!("CARGO_BIN_EXE_stage04"),
        step: "workshop step 04",
        own_flags: &[STAGE04_FLAGS],
        absent_flags: FAILOVER_FLAGS,
        duration_flags: &[STAGE04_DURATION_FLAGS],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage05",
        path: env!("CARGO_BIN_EXE_stage05"),
        step: "workshop step 05",
        // Stage 04's flags and the failover layer's (`FailoverFlags`).
        own_flags: &[STAGE04_FLAGS, FAILOVER_FLAGS],
        absent_flags: &[],
        duration_flags: &[STAGE04_DURATION_FLAGS, FAILOVER_DURATION_FLAGS],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage06",
        path: env!("CARGO_BIN_EXE_stage06"),
        step: "workshop step 06",
        // Stage 05's flags: the backup layer adds none of its own.
        own_flags: &[STAGE04_FLAGS, FAILOVER_FLAGS],
        absent_flags: &[],
        duration_flags: &[STAGE04_DURATION_FLAGS, FAILOVER_DURATION_FLAGS],
        takes_connection_flags: true,
    },
    Binary {
        name: "deployer",
        path: env!("CARGO_BIN_EXE_deployer"),
        step: "the workshop's second operator",
        own_flags: &[&["--reconcile-interval <SECS>"]],
        absent_flags: FAILOVER_FLAGS,
        duration_flags: &[&["--reconcile-interval"]],
        takes_connection_flags: true,
    },
    Binary {
        name: "tour",
        path: env!("CARGO_BIN_EXE_tour"),
        step: "the whole workshop",
        own_flags: &[&["--real-cluster", "--reconcile-interval <SECS>"]],
        absent_flags: &[],
        duration_flags: &[&["--reconcile-interval"]],
        takes_connection_flags: true,
    },
    Binary {
        name: "watch-bench",
        path: env!("CARGO_BIN_EXE_watch-bench"),
        step: "workshop step 02",
        own_flags: &[&[
            "--server <URL>",
            "--expect <N>",
            "--feed <N>",
            "--writers <W>",
            "--replay <N>",
        ]],
        absent_flags: &[],
        duration_flags: &[],
        takes_connection_flags: false,
    },
];

/// Runs a binary with no way to reach a real cluster: no kubeconfig, no KUBE_SERVER, no pod.
fn run(path: &str, args: &[&str]) -> Output {
    Command::new(path)
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .env_remove("KUBE_SERVER")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the binary runs")
}

/// Run `binary` with `args`, requiring exit `code` (the failure shows both streams): its stdout
/// and stderr.
fn exits(binary: &Binary, args: &[&str], code: i32) -> (String, String) {
    let output = run(binary.path, args);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(
        output.status.code(),
        Some(code),
        "{} {args:?}:\n{stdout}{stderr}",
        binary.name
    );
    (stdout, stderr)
}

/// `--help` prints the name, the workshop step, every flag, examples and exit statuses; exit 0.
#[test]
fn help_lists_every_flag_and_exits_0() {
    for binary in BINARIES {
        let (stdout, stderr) = exits(binary, &["--help"], 0);
        assert!(stderr.is_empty(), "{}: help goes to stdout", binary.name);
        let first_line = stdout.lines().next().unwrap_or_default();
        assert!(
            first_line.starts_with(binary.name) && first_line.contains(binary.step),
            "{}: {first_line:?}",
            binary.name
        );
        assert!(
            stdout.contains(&format!("Usage: {} ", binary.name)),
            "{}: {stdout}",
            binary.name
        );
        for flag in binary
            .own_flags
            .iter()
            .copied()
            .flatten()
            .chain(["-h, --help"].iter())
        {
            assert!(
                stdout.contains(flag),
                "{} lacks {flag}: {stdout}",
                binary.name
            );
        }
        for flag in binary.absent_flags {
            let name = flag.split_whitespace().next().unwrap_or(flag);
            assert!(
                !stdout.contains(name),
                "{} has {name}, a later step's flag: {stdout}",
                binary.name
            );
        }
        if binary.takes_connection_flags {
            for flag in CONNECTION_FLAGS {
                assert!(
                    stdout.contains(flag),
                    "{} lacks {flag}: {stdout}",
                    binary.name
                );
            }
        } else {
            assert!(
                !stdout.contains("Connection") && !stdout.contains("--token-file"),
                "{} takes no connection flags: {stdout}",
                binary.name
            );
        }
        let examples = stdout
            .split("Examples:")
            .nth(1)
            .and_then(|rest| rest.split("Exit status:").next())
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(binary.name))
            .count();
        assert!(
            examples >= 2,
            "{}: {examples} examples: {stdout}",
            binary.name
        );
        assert!(
            stdout.contains("Exit status: 0 "),
            "{}: {stdout}",
            binary.name
        );
    }
}

/// `-h` works too, and help wins over other flags: nothing is started, not even a connection to
/// the (closed) port given.
#[test]
fn short_h_and_help_among_other_flags_print_the_help() {
    for binary in BINARIES {
        let help = run(binary.path, &["--help"]);
        let short = run(binary.path, &["-h"]);
        assert_eq!(short.status.code(), Some(0), "{}", binary.name);
        assert_eq!(short.stdout, help.stdout, "{}", binary.name);
        let mixed = run(binary.path, &["--server", "http://127.0.0.1:1", "--help"]);
        assert_eq!(mixed.status.code(), Some(0), "{}", binary.name);
        assert_eq!(mixed.stdout, help.stdout, "{}", binary.name);
    }
}

/// The defaults `--help` states are the ones the library uses.
#[test]
fn help_states_the_real_defaults() {
    let help = |path: &str| String::from_utf8_lossy(&run(path, &["--help"]).stdout).to_string();
    let stage01 = help(env!("CARGO_BIN_EXE_stage01"));
    let established = format!("[default: {}]", DEFAULT_ESTABLISHED_TIMEOUT.as_secs());
    assert!(stage01.contains(&established), "{stage01}");
    let stage03 = help(env!("CARGO_BIN_EXE_stage03"));
    let reconcile = format!("[default: {}]", DEFAULT_RECONCILE_INTERVAL.as_secs());
    assert!(stage03.contains(&reconcile), "{stage03}");
}

/// An unknown flag is exit 2, nothing on stdout, and stderr names the flag and says `--help`.
#[test]
fn unknown_flag_exits_2_and_points_at_help() {
    for binary in BINARIES {
        let (stdout, stderr) = exits(binary, &["--frobnicate"], 2);
        assert!(stdout.is_empty(), "{}", binary.name);
        assert!(
            stderr.contains("'--frobnicate'") && stderr.contains("--help"),
            "{}: {stderr}",
            binary.name
        );
    }
}

/// Every duration flag refuses what would panic `Duration::from_secs_f64` or a tokio interval
/// (too large, negative, not a number, rounding to zero, infinite, NaN): exit 2 naming the flag,
/// in both spellings (`--flag value`, `--flag=value`).
#[test]
fn bad_durations_exit_2_naming_the_flag() {
    for binary in BINARIES {
        for flag in binary.duration_flags.iter().copied().flatten() {
            for value in ["1e30", "-1", "abc", "1e-12", "inf", "NaN", "0"] {
                for args in [
                    vec![flag.to_string(), value.to_string()],
                    vec![format!("{flag}={value}")],
                ] {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let output = run(binary.path, &args);
                    let stderr = String::from_utf8_lossy(&output.stderr);
                    assert_eq!(
                        output.status.code(),
                        Some(2),
                        "{} {args:?}: {stderr}",
                        binary.name
                    );
                    assert!(
                        stderr.contains(&format!("'{flag} <SECS>'")),
                        "{} {args:?}: {stderr}",
                        binary.name
                    );
                }
            }
        }
    }
}

/// watch-bench's counts must be whole numbers of at least 1, and one of them must be given.
#[test]
fn watch_bench_counts_are_checked() {
    let path = env!("CARGO_BIN_EXE_watch-bench");
    for args in [
        &["--feed", "0"][..],
        &["--writers", "x", "--feed", "1"],
        &[],
    ] {
        let output = run(path, args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
}
