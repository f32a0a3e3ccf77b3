//! The sandbox API server as a program: an in-memory Kubernetes API server for kubectl and the
//! workshop's operator. No containers run; pods only get a simulated status.
//!
//! WORKSHOP.md, "Set-up: the sandbox".
//!
//! ```text
//! cargo run --bin sandbox -- --listen 127.0.0.1:8001
//! kubectl --server http://127.0.0.1:8001 get pgc
//! cargo run --bin sandbox -- --listen 127.0.0.1:8443 --tls-dir /tmp/sandbox-creds
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use postgres_operator::process::{self, Usage};
use postgres_operator::sandbox::{Sandbox, SandboxOptions};

const USAGE: Usage = Usage {
    name: "sandbox",
    about: "sandbox: the workshop's set-up. An in-memory Kubernetes API server for kubectl and the\n\
            operator stages. No containers run: pods only get a simulated status. Stops on SIGTERM\n\
            or Ctrl-C, and forgets everything.",
    flags: &[
        (
            "--listen ADDR:PORT",
            "where to listen (default 127.0.0.1:8001; port 0 picks a free one)",
        ),
        (
            "--tls-dir DIR",
            "serve HTTPS with a generated CA, require a bearer token, and write\n\
             DIR/ca.crt, DIR/token and DIR/namespace (a service-account directory)",
        ),
        (
            "--established-delay-ms N",
            "how long a new CRD waits before it is Established (default 0)",
        ),
        (
            "--kubelet-delay-ms N",
            "how long a new pod stays Pending before it is Running (default 0)",
        ),
        (
            "--pod-termination-delay-ms N",
            "how long a deleted pod stays Terminating (default 0: gone at once)",
        ),
    ],
    connection_flags: false,
    examples: &[
        "sandbox                                   # then: kubectl --server http://127.0.0.1:8001 get pgc",
        "sandbox --listen 127.0.0.1:8443 --tls-dir /tmp/sandbox-creds   # HTTPS with a token, like a cluster",
        "sandbox --established-delay-ms 2000 --kubelet-delay-ms 1000    # slower, like a real cluster",
    ],
    exit_status: "0 stopped by SIGTERM or Ctrl-C, 1 could not start (is the port taken?), 2 bad flags",
};

fn parse_args(args: Vec<String>) -> Result<SandboxOptions, String> {
    let mut options = SandboxOptions {
        listen: ([127, 0, 0, 1], 8001).into(),
        log_requests: true,
        // What a learner sees in `kubectl describe pod`: the scheduler's and kubelet's Events.
        pod_events: true,
        ..SandboxOptions::default()
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_string(), Some(value.to_string()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        let millis = |text: String, flag: &str| {
            text.parse::<u64>()
                .map(Duration::from_millis)
                .map_err(|_| format!("{flag} wants a number of milliseconds, not {text:?}"))
        };
        match flag.as_str() {
            "--listen" => {
                let text = value()?;
                options.listen = text.parse().map_err(|_| {
                    format!("--listen wants ADDRESS:PORT like 127.0.0.1:8001, not {text:?}")
                })?;
            }
            "--tls-dir" => options.credentials_dir = Some(PathBuf::from(value()?)),
            "--established-delay-ms" => options.established_delay = millis(value()?, &flag)?,
            "--kubelet-delay-ms" => options.kubelet_delay = millis(value()?, &flag)?,
            "--pod-termination-delay-ms" => {
                options.pod_termination_delay = millis(value()?, &flag)?
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if process::help_requested(&args) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let options = match parse_args(args) {
        Ok(options) => options,
        Err(message) => return process::usage_error(message),
    };
    process::init_logging();
    let tls_dir = options.credentials_dir.clone();
    let sandbox = match Sandbox::start(options).await {
        Ok(sandbox) => sandbox,
        Err(error) => {
            eprintln!("sandbox: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("sandbox API server at {}", sandbox.url());
    match tls_dir {
        None => println!(
            "use it with:\n  kubectl --server {} get pgc\n  (add --cache-dir \"$(mktemp -d)\" if an earlier server used this port)",
            sandbox.url()
        ),
        Some(dir) => println!(
            "use it with:\n  kubectl --server {} --certificate-authority {} --token \"$(cat {})\" get pgc",
            sandbox.url(),
            dir.join("ca.crt").display(),
            dir.join("token").display()
        ),
    }
    println!("no containers run here: pods get a simulated status only. Ctrl-C stops it.");
    process::shutdown_signal().await;
    sandbox.shutdown().await;
    ExitCode::SUCCESS
}
