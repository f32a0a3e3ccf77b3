//! What every binary does the same way: answer `--help`, install a log subscriber and wait for
//! the signal to stop.
//!
//! WORKSHOP.md, "Set-up". The library itself only emits `tracing` events; only binaries call
//! [`init_logging`], so tests and embedders choose their own subscriber.

use std::fmt;
use std::io::IsTerminal;
use std::process::ExitCode;

use crate::config::{CONNECTION_FLAGS_HELP, CONNECTION_ORDER_HELP};

use tracing_subscriber::EnvFilter;

/// Log to stderr, filtered by `RUST_LOG` (default `info`). In a pod, `kubectl logs` shows stderr.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // try_init: a second call (or a test that already installed one) is not an error worth dying for.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: `kubectl logs` would show raw escape codes.
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

/// Resolves when the process is asked to stop: SIGTERM (what the kubelet sends when a pod is
/// deleted, followed by SIGKILL after the grace period) or Ctrl-C from a terminal.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            // No Ctrl-C handler can be installed (no terminal): rely on SIGTERM alone.
            std::future::pending::<()>().await;
        }
    };

    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();

    tokio::select! {
        _ = ctrl_c => tracing::info!("received Ctrl-C, shutting down"),
        _ = terminate => tracing::info!("received SIGTERM, shutting down"),
    }
}

/// What a binary prints for `--help`: each binary fills one in as a `const`, and `Display` lays
/// it out as command-line tools usually do, adding the connection flags when the binary takes
/// them (so the stages do not repeat those).
pub struct Usage {
    /// The binary's name, as typed on the command line.
    pub name: &'static str,
    /// What it is and which workshop step it belongs to; break lines yourself (`\n`).
    pub about: &'static str,
    /// The binary's own flags as `(flag and value, what it does, with its default)`;
    /// `-h, --help` is added. A `\n` in the description continues it on the next line.
    pub flags: &'static [(&'static str, &'static str)],
    /// Whether it takes the connection flags of `ConfigArgs::parse`.
    pub connection_flags: bool,
    /// Whole command lines, optionally followed by `# why`.
    pub examples: &'static [&'static str],
    /// What each exit status means.
    pub exit_status: &'static str,
}

const HELP_FLAG: (&str, &str) = ("-h, --help", "print this help and exit");

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let connection: &[(&str, &str)] = if self.connection_flags {
            CONNECTION_FLAGS_HELP
        } else {
            &[]
        };
        // One column for every flag, so the descriptions line up across both tables.
        let width = self
            .flags
            .iter()
            .chain(connection)
            .chain([&HELP_FLAG])
            .map(|(flag, _)| flag.len())
            .max()
            .unwrap_or(0);
        let flag_lines = |f: &mut fmt::Formatter<'_>, flags: &[(&str, &str)]| -> fmt::Result {
            for (flag, description) in flags {
                for (index, line) in description.lines().enumerate() {
                    let flag = if index == 0 { flag } else { "" };
                    writeln!(f, "  {flag:width$}  {line}")?;
                }
            }
            Ok(())
        };

        writeln!(f, "{}\n", self.about)?;
        let connection_synopsis = if self.connection_flags {
            " [connection flags]"
        } else {
            ""
        };
        writeln!(f, "usage: {}{connection_synopsis} [flags]\n", self.name)?;
        writeln!(f, "flags:")?;
        flag_lines(f, self.flags)?;
        flag_lines(f, &[HELP_FLAG])?;
        if self.connection_flags {
            writeln!(
                f,
                "\nconnection flags (where the API server is, who we are):"
            )?;
            flag_lines(f, connection)?;
            for line in CONNECTION_ORDER_HELP.lines() {
                writeln!(f, "  {line}")?;
            }
        }
        writeln!(f, "\nexamples:")?;
        for example in self.examples {
            writeln!(f, "  {example}")?;
        }
        write!(f, "\nexit status: {}", self.exit_status)
    }
}

/// `--help` or `-h` anywhere on the command line (arguments without the program name). It wins
/// over every other flag, as in most tools: asking for help never starts anything.
pub fn help_requested(args: &[String]) -> bool {
    args.iter().any(|arg| arg == "--help" || arg == "-h")
}

/// For bad flags: prints `error: MESSAGE (try --help)` on stderr and returns exit status 2, the
/// usual status for a command line that could not be understood.
pub fn usage_error(message: impl fmt::Display) -> ExitCode {
    eprintln!("error: {message} (try --help)");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: Usage = Usage {
        name: "stage99",
        about: "stage99: workshop step 99, a test.",
        flags: &[("--long-flag SECS", "first line\nsecond line (default 1)")],
        connection_flags: true,
        examples: &["stage99 --long-flag 2"],
        exit_status: "0 done, 2 bad flags",
    };

    /// Continued description lines and the connection flags line up under the first column.
    #[test]
    fn descriptions_share_one_column() {
        let text = EXAMPLE.to_string();
        let column = |needle: &str| {
            let line = text.lines().find(|line| line.contains(needle)).unwrap();
            line.find(needle).unwrap()
        };
        assert_eq!(column("first line"), column("second line"), "{text}");
        assert_eq!(column("first line"), column("print this help"), "{text}");
        assert_eq!(column("first line"), column("bearer token given"), "{text}");
        assert!(
            text.contains("usage: stage99 [connection flags] [flags]"),
            "{text}"
        );
        assert!(text.contains("KUBE_SERVER"), "{text}");
    }

    /// A binary without connection flags does not advertise them.
    #[test]
    fn connection_flags_only_when_taken() {
        let text = Usage {
            connection_flags: false,
            ..EXAMPLE
        }
        .to_string();
        assert!(!text.contains("--server"), "{text}");
        assert!(text.contains("usage: stage99 [flags]"), "{text}");
    }

    /// `-h` and `--help` are found anywhere; a value that merely contains them is not help.
    #[test]
    fn help_is_an_exact_argument() {
        let args = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(help_requested(&args(&["--server", "x", "-h"])));
        assert!(help_requested(&args(&["--help"])));
        assert!(!help_requested(&args(&["--namespace=--help", "--helpful"])));
    }
}
