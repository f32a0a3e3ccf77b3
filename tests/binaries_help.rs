//! Every binary answers `--help` and `-h` as command-line tools do: what it is (its workshop
//! step), every flag it accepts with its default, and example command lines, on stdout, exit 0.
//! A flag it does not know is exit 2 with a message that names the flag and points at `--help`.
//!
//! WORKSHOP.md, "Set-up". None of these runs reaches an API server: help and bad flags are
//! answered before any connection is made (the `--server` given points at a closed port).

use std::process::{Command, Output};

use postgres_operator::controller::DEFAULT_RECONCILE_INTERVAL;
use postgres_operator::crd::DEFAULT_ESTABLISHED_TIMEOUT;

/// The flags every binary built on `ConfigArgs::parse` accepts.
const CONNECTION_FLAGS: &[&str] = &[
    "--server",
    "--certificate-authority",
    "--token-file",
    "--token",
    "--namespace",
    "KUBE_SERVER",
    "in-cluster",
    "kubeconfig",
];

struct Binary {
    name: &'static str,
    path: &'static str,
    /// What the first lines must say: the binary's name and its place in the workshop.
    step: &'static str,
    own_flags: &'static [&'static str],
    takes_connection_flags: bool,
}

const BINARIES: &[Binary] = &[
    Binary {
        name: "stage01",
        path: env!("CARGO_BIN_EXE_stage01"),
        step: "workshop step 01",
        own_flags: &["--established-timeout SECS"],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage02",
        path: env!("CARGO_BIN_EXE_stage02"),
        step: "workshop step 02",
        own_flags: &[],
        takes_connection_flags: true,
    },
    Binary {
        name: "stage03",
        path: env!("CARGO_BIN_EXE_stage03"),
        step: "workshop step 03",
        own_flags: &["--reconcile-interval SECS"],
        takes_connection_flags: true,
    },
    Binary {
        name: "tour",
        path: env!("CARGO_BIN_EXE_tour"),
        step: "the whole workshop",
        own_flags: &["--real-cluster", "--reconcile-interval SECS"],
        takes_connection_flags: true,
    },
    Binary {
        name: "watch-bench",
        path: env!("CARGO_BIN_EXE_watch-bench"),
        step: "workshop step 02",
        own_flags: &[
            "--server URL",
            "--expect N",
            "--feed N",
            "--writers W",
            "--replay N",
        ],
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

/// `--help` prints the name, the workshop step, every flag, examples and exit statuses; exit 0.
#[test]
fn help_lists_every_flag_and_exits_0() {
    for binary in BINARIES {
        let output = run(binary.path, &["--help"]);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{}: {stdout}", binary.name);
        assert!(
            output.stderr.is_empty(),
            "{}: help goes to stdout",
            binary.name
        );
        let first_line = stdout.lines().next().unwrap_or_default();
        assert!(
            first_line.starts_with(binary.name) && first_line.contains(binary.step),
            "{}: {first_line:?}",
            binary.name
        );
        assert!(
            stdout.contains(&format!("usage: {} ", binary.name)),
            "{}: {stdout}",
            binary.name
        );
        for flag in binary.own_flags.iter().chain(["-h, --help"].iter()) {
            assert!(
                stdout.contains(flag),
                "{} lacks {flag}: {stdout}",
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
                !stdout.contains("connection flags") && !stdout.contains("--token-file"),
                "{} takes no connection flags: {stdout}",
                binary.name
            );
        }
        let examples = stdout
            .split("examples:")
            .nth(1)
            .and_then(|rest| rest.split("exit status:").next())
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
            stdout.contains("exit status: 0 "),
            "{}: {stdout}",
            binary.name
        );
    }
}

/// `-h` is the same text as `--help`, and help wins over other flags: nothing is started, not
/// even a connection to the (closed) port given.
#[test]
fn short_h_and_help_among_other_flags_print_the_same_text() {
    for binary in BINARIES {
        let help = run(binary.path, &["--help"]);
        let short = run(binary.path, &["-h"]);
        assert_eq!(short.status.code(), Some(0), "{}", binary.name);
        assert_eq!(short.stdout, help.stdout, "{}", binary.name);
        let args: &[&str] = if binary.takes_connection_flags || binary.name == "watch-bench" {
            &["--server", "http://127.0.0.1:1", "--help"]
        } else {
            &["--listen", "127.0.0.1:0", "--help"]
        };
        let mixed = run(binary.path, args);
        assert_eq!(mixed.status.code(), Some(0), "{}", binary.name);
        assert_eq!(mixed.stdout, help.stdout, "{}", binary.name);
    }
}

/// The defaults `--help` states are the ones the code uses.
#[test]
fn help_states_the_real_defaults() {
    let help = |path: &str| String::from_utf8_lossy(&run(path, &["--help"]).stdout).to_string();
    let stage01 = help(env!("CARGO_BIN_EXE_stage01"));
    let established = format!("(default {})", DEFAULT_ESTABLISHED_TIMEOUT.as_secs());
    assert!(stage01.contains(&established), "{stage01}");
    let stage03 = help(env!("CARGO_BIN_EXE_stage03"));
    let reconcile = format!("(default {}", DEFAULT_RECONCILE_INTERVAL.as_secs());
    assert!(stage03.contains(&reconcile), "{stage03}");
}

/// An unknown flag is exit 2, nothing on stdout, and stderr names the flag and says `--help`.
#[test]
fn unknown_flag_exits_2_and_points_at_help() {
    for binary in BINARIES {
        let output = run(binary.path, &["--frobnicate"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{}: {stderr}", binary.name);
        assert!(output.stdout.is_empty(), "{}", binary.name);
        assert!(
            stderr.contains("unknown argument \"--frobnicate\"") && stderr.contains("(try --help)"),
            "{}: {stderr}",
            binary.name
        );
    }
}
