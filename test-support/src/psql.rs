//! This host's `psql`, with a deadline: SQL to a pod or a Service address from the test itself,
//! as a client outside the cluster would send it (the process runtime's pod and Service
//! addresses are loopback addresses on this machine).

use std::path::PathBuf;
use std::time::Duration;

/// The installed PostgreSQL's `psql`, as one user with one password.
#[derive(Clone, Debug)]
pub struct HostPsql {
    pub psql: PathBuf,
    pub user: String,
    pub password: String,
}

impl HostPsql {
    /// The `psql` of the PostgreSQL the process runtime runs pods with.
    pub fn installed(user: &str, password: &str) -> HostPsql {
        HostPsql {
            psql: crate::process_runtime().tools.postgres_bin.join("psql"),
            user: user.to_string(),
            password: password.to_string(),
        }
    }

    /// `psql -qAtX -c SQL` on `host`:5432, its output trimmed. Fails after `deadline` whatever
    /// the server does (a stopped server accepts the connection and never answers): the
    /// process is killed, and what it sent may or may not have been committed.
    pub async fn run(&self, host: &str, sql: &str, deadline: Duration) -> Result<String, String> {
        let mut command = tokio::process::Command::new(&self.psql);
        command
            .args(["-h", host, "-p", "5432", "-U", &self.user, "-d", "postgres"])
            .args(["-v", "ON_ERROR_STOP=1", "-qAtX", "-c", sql])
            // The password in the environment, never in the command line.
            .env("PGPASSWORD", &self.password)
            .env(
                "PGCONNECT_TIMEOUT",
                deadline.as_secs().clamp(1, 10).to_string(),
            )
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let output = tokio::time::timeout(deadline, command.output())
            .await
            .map_err(|_| format!("no answer from {host} within {deadline:?}"))?
            .map_err(|error| format!("running {}: {error}", self.psql.display()))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
        }
    }
}
