//! `pg-ready`: the readiness agent beside each postgres server (`src/postgres/agent.rs` says
//! why and how). Two commands:
//!
//! ```text
//! pg-ready install /agent/pg-ready        # the init container: copy this binary into the emptyDir
//! pg-ready serve --listen $(POD_IP):8008  # the `ready` container: answer GET /readyz
//! ```
//!
//! `serve` connects through `psql` with libpq's variables (`PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD`, `PGDATABASE`), which the member pod's `ready` container sets. It stops on
//! SIGTERM or SIGINT, with exit status 0.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use postgres_operator::metrics::serve_with;
use postgres_operator::postgres::agent::{
    install, Agent, Session, AGENT_PORT, DEFAULT_DEADLINE, READY_PATH,
};
use postgres_operator::process::{cancel_on_signal, exit_error, init_logging};

/// pg-ready: answers the kubelet's readiness probe from one long-lived psql session
#[derive(Parser, Debug)]
#[command(name = "pg-ready")]
struct Flags {
    #[command(subcommand)]
    command: Action,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Copy this binary to DESTINATION (an emptyDir shared with the container that runs it)
    Install { destination: PathBuf },
    /// Answer GET /readyz: 200 when postgres answers `SELECT n;` within the deadline, else 503
    Serve {
        /// Where to listen, as IP:PORT
        #[arg(long, value_name = "IP:PORT", default_value_t = SocketAddr::from(([0, 0, 0, 0], AGENT_PORT)))]
        listen: SocketAddr,
        /// How long one probe's query may take, in milliseconds
        #[arg(long, value_name = "MS", default_value_t = DEFAULT_DEADLINE.as_millis() as u64)]
        deadline_ms: u64,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_logging();
    match Flags::parse().command {
        Action::Install { destination } => match install(&destination) {
            Ok(()) => {
                println!("pg-ready: installed {}", destination.display());
                ExitCode::SUCCESS
            }
            Err(error) => exit_error(
                &format!(
                    "cannot install pg-ready at {}: {error}",
                    destination.display()
                ),
                None,
            ),
        },
        Action::Serve {
            listen,
            deadline_ms,
        } => {
            let shutdown = cancel_on_signal();
            let agent = Agent::new(Session::new(Duration::from_millis(deadline_ms)));
            match serve_with(listen, "pg-ready", agent, shutdown).await {
                Ok((address, task)) => {
                    tracing::info!(%address, "pg-ready: answering GET {READY_PATH}");
                    let _ = task.await;
                    ExitCode::SUCCESS
                }
                Err(error) => exit_error(&format!("cannot listen on {listen}: {error}"), None),
            }
        }
    }
}
