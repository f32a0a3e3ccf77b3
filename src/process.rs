//! Support: skip it on first read — logging, signals and exit codes, the same for every binary.
//!
//! What every binary does the same way: install a log subscriber, turn SIGTERM and Ctrl-C into a
//! cancelled [`CancellationToken`], connect to the API server, read durations from flags, and
//! report an error before exiting.
//!
//! WORKSHOP.md, "Set-up". The library itself only emits `tracing` events and takes a
//! `CancellationToken` wherever it runs until stopped; only binaries call [`init_logging`] and
//! [`cancel_on_signal`], so tests and embedders choose their own subscriber and their own stop.
//! Flags are parsed with clap (each binary's `#[derive(Parser)]`); exit status 2 for bad flags
//! is clap's, 1 is [`exit_error`]'s, 0 is a finished run or a stop by SIGTERM/Ctrl-C.

use std::error::Error;
use std::fmt::Display;
use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

use crate::client::Client;
use crate::config::{Config, ConfigArgs};

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

/// A token that is cancelled when the process is asked to stop (see [`shutdown_signal`]). Pass it
/// (or clones of it) to every library entry point: they all stop on the same signal.
pub fn cancel_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let signal = shutdown_signal();
    let cancel = token.clone();
    tokio::spawn(async move {
        signal.await;
        cancel.cancel();
    });
    token
}

/// Resolves when the process is asked to stop: SIGTERM (what the kubelet sends when a pod is
/// deleted, followed by SIGKILL after the grace period) or Ctrl-C from a terminal.
///
/// The handlers are installed when this is called, not when it is first awaited: once a signal
/// has a handler its default action (ending the process at once) is gone, so a SIGTERM that
/// arrives a moment later is still a clean stop. Call it inside a tokio runtime.
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            let received = |signal: std::io::Result<tokio::signal::unix::Signal>| async move {
                match signal {
                    Ok(mut signal) => signal.recv().await,
                    // No handler could be installed: rely on the other signal.
                    Err(_) => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = received(interrupt) => tracing::info!("received Ctrl-C, shutting down"),
                _ = received(terminate) => tracing::info!("received SIGTERM, shutting down"),
            }
        }
    }
    #[cfg(not(unix))]
    async {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::info!("received Ctrl-C, shutting down");
        } else {
            std::future::pending::<()>().await;
        }
    }
}

/// clap's value parser for every duration flag (`--established-timeout 30`,
/// `--reconcile-interval 0.5`): a positive number of seconds that fits a `Duration`. Never
/// panics: a bad value is clap's usage error naming the flag, exit status 2.
pub fn parse_seconds(value: &str) -> Result<Duration, String> {
    let seconds: f64 = value
        .trim()
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    // `try_`: `Duration::from_secs_f64` panics on 1e30, -1, inf and NaN.
    let duration = Duration::try_from_secs_f64(seconds)
        .map_err(|_| format!("{value} is not a positive number of seconds that fits a Duration"))?;
    if duration.is_zero() {
        // tokio's interval panics on a zero period, and 1e-12 s rounds to zero nanoseconds.
        return Err(format!("{value} s rounds to zero; give at least 1e-9"));
    }
    Ok(duration)
}

/// Find the API server as kubectl would ([`Config::infer`]) and build a client for it; on
/// failure, print why (the message lists every source tried) and return exit status 1.
pub async fn connect(args: &ConfigArgs) -> Result<Client, ExitCode> {
    let args = args.clone();
    // `Config::infer` reads files and may run `kubectl config view` and wait for it, and
    // `Client::new` reads the token file: blocking work, so it runs on tokio's blocking pool
    // instead of holding up a runtime thread (and the signal handler on it). `spawn_blocking`
    // rather than an async `Config::infer`: choosing a source stays one plain function that
    // tests and non-async callers use as it is.
    match tokio::task::spawn_blocking(move || Config::infer(&args).map(Client::new)).await {
        Ok(Ok(Ok(client))) => Ok(client),
        Ok(Ok(Err(error))) => Err(exit_error(&error, None)),
        Ok(Err(error)) => Err(exit_error(&error, None)),
        Err(panicked) => Err(exit_error(&panicked, None)),
    }
}

/// How every binary's `main` begins: logging from `RUST_LOG`, the stop token that SIGTERM and
/// Ctrl-C cancel, and a client for the API server the flags (or kubectl's rules) name. `Err` is
/// the exit status, the reason already printed.
pub async fn start(connection: &ConfigArgs) -> Result<(Client, CancellationToken), ExitCode> {
    init_logging();
    let shutdown = cancel_on_signal();
    let client = connect(connection).await?;
    Ok((client, shutdown))
}

/// [`exit_error`] for an error from talking to `client`'s API server: when the error has no hint
/// of its own and the connection was refused, the hint says what to start on that port.
pub fn fail(error: &(dyn Error + 'static), hint: Option<String>, client: &Client) -> ExitCode {
    let hint = hint.or_else(|| refused_connection_hint(error, client.server()));
    exit_error(error, hint)
}

/// Print `error: ...` (and `hint: ...`) on stderr and return exit status 1: how every binary
/// ends when something other than its flags was wrong.
pub fn exit_error(error: &dyn Display, hint: Option<String>) -> ExitCode {
    eprintln!("error: {error}");
    if let Some(hint) = hint {
        eprintln!("hint: {hint}");
    }
    ExitCode::FAILURE
}

/// "Connection refused" means nothing listens on the server's port: the learner forgot to start
/// the sandbox or `kubectl proxy`. Looks through the whole chain of causes, by kind when an
/// `io::Error` is kept and by its text when a cause was turned into a string.
fn refused_connection_hint(error: &(dyn Error + 'static), server: &str) -> Option<String> {
    let refused = std::iter::successors(Some(error), |&cause| cause.source()).any(|cause| {
        let by_kind = cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
        by_kind || cause.to_string().contains("Connection refused")
    });
    if !refused {
        return None;
    }
    let url = url::Url::parse(server).ok()?;
    let host = url.host_str()?;
    let port = url.port_or_known_default()?;
    Some(format!(
        "nothing is listening on {host}:{port}. Start the sandbox there \
         (`cargo run --bin sandbox -- --listen {host}:{port}`), or `kubectl proxy --port {port}` \
         for a real cluster"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value that would panic `Duration::from_secs_f64` or a tokio interval is an error.
    #[test]
    fn parse_seconds_refuses_what_would_panic() {
        for bad in ["1e30", "-1", "abc", "1e-12", "inf", "NaN", "0", "", "-0"] {
            assert!(parse_seconds(bad).is_err(), "{bad:?} was accepted");
        }
        assert_eq!(parse_seconds("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_seconds("0.5").unwrap(), Duration::from_millis(500));
    }

    /// A refused connection, kept as an `io::Error` or flattened into text, gets the hint naming
    /// the port; other errors get none.
    #[test]
    fn refused_connections_hint_at_what_to_start() {
        let kept = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let hint = refused_connection_hint(&kept, "http://127.0.0.1:8001/").unwrap();
        assert!(hint.contains("--listen 127.0.0.1:8001"), "{hint}");
        assert!(hint.contains("kubectl proxy --port 8001"), "{hint}");
        let text = std::io::Error::other("tcp connect error: Connection refused (os error 111)");
        assert!(refused_connection_hint(&text, "https://10.0.0.1/").is_some());
        let other = std::io::Error::other("certificate verify failed");
        assert!(refused_connection_hint(&other, "http://127.0.0.1:8001/").is_none());
    }
}
