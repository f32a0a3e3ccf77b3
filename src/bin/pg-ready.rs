//! `pg-ready`: the readiness agent beside each postgres server (`src/failover/agent.rs` says
//! why and how). Two commands:
//!
//! ```text
//! pg-ready install /agent/pg-ready        # the init container: copy this binary into the emptyDir
//! pg-ready serve --listen $(POD_IP):8008  # the `ready` container: answer GET /readyz and /livez
//! ```
//!
//! `serve` connects through `psql` with libpq's variables (`PGHOST`, `PGPORT`, `PGUSER`,
//! `PGPASSWORD`, `PGDATABASE`), which the member pod's `ready` container sets. SIGTERM or SIGINT
//! (the postgres image's STOPSIGNAL) ends it at once, with exit status 0.

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use postgres_operator::failover::agent::{
    install, pg_isready, serve, Session, AGENT_PORT, DEFAULT_DEADLINE, LIVE_PATH, READY_PATH,
};
use postgres_operator::process::{exit_error, init_logging, shutdown_signal};

/// pg-ready: answers the kubelet's probes from one long-lived psql session
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
    /// Answer GET /readyz (200 when postgres answers `SELECT n;` within the deadline, else 503) and GET /livez (200 while the postmaster is there at all)
    Serve {
        /// Where to listen, as IP:PORT
        #[arg(long, value_name = "IP:PORT", default_value_t = SocketAddr::from(([0, 0, 0, 0], AGENT_PORT)))]
        listen: SocketAddr,
        /// How long one probe's query may take, in milliseconds
        #[arg(long, value_name = "MS", default_value_t = DEFAULT_DEADLINE.as_millis() as u64)]
        deadline_ms: u64,
    },
}

fn main() -> ExitCode {
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
        } => match TcpListener::bind(listen) {
            Ok(listener) => {
                exit_on_signal();
                tracing::info!(%listen, "pg-ready: answering GET {READY_PATH} and {LIVE_PATH}");
                let mut session = Session::new(Duration::from_millis(deadline_ms));
                serve(&listener, &mut session, &pg_isready());
                ExitCode::SUCCESS
            }
            Err(error) => exit_error(&format!("cannot listen on {listen}: {error}"), None),
        },
    }
}

/// Exit (status 0) on SIGTERM or SIGINT, from a thread of its own, once the handlers are in
/// place. Needed, not a nicety: the agent is its container's PID 1, and the kernel gives PID 1 no
/// default action for a signal it does not handle. Without handlers the kubelet's stop signal
/// would be ignored, and a deleted pod would wait out its whole grace period for this container
/// (60 s; the operator's failover waits for the old primary's pod to stop).
fn exit_on_signal() {
    let (installed, ready) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let Ok(runtime) = runtime else {
            let _ = installed.send(());
            return;
        };
        // Exit whatever happens after the signal (its log line may fail to write: a panic).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(async {
                // `shutdown_signal` installs the handlers when called, before it is awaited.
                let signal = shutdown_signal();
                let _ = installed.send(());
                signal.await;
            })
        }));
        std::process::exit(0);
    });
    let _ = ready.recv();
}
