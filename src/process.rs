//! What every binary does the same way: install a log subscriber and wait for the signal to stop.
//!
//! WORKSHOP.md, "Set-up". The library itself only emits `tracing` events; only binaries call
//! [`init_logging`], so tests and embedders choose their own subscriber.

use std::io::IsTerminal;

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
