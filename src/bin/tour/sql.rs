//! How the tour's SQL reaches Postgres: this host's `psql` through the primary Service, or, where
//! the host has none, `psql` inside the primary pod through `pods/exec`. And the SQL itself: a
//! table of notes, written, read back, and one WAL switch.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine;

use postgres_operator::client::Client;
use postgres_operator::postgres::cluster::psql_in_pod;
use postgres_operator::postgres::manifests::{
    credentials_secret_name, primary_service_name, psql_argv, POSTGRES_CONTAINER, POSTGRES_PORT,
    SUPERUSER_PASSWORD_KEY,
};

use crate::example::EXAMPLE_NAME;
use crate::sandbox::PodRuntime;
use crate::{failed, TourEnd, ACT_DEADLINE};

/// The table the tour writes its notes to.
const TOUR_TABLE: &str = "tour";
/// Asked every 250 ms after the switch: the newest segment archived.
pub const LAST_ARCHIVED: &str = "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver";

/// The tour's SQL, by what it is for. A write answers `inet_server_addr()`: which server took it.
pub enum Sql {
    /// Create the tour's table and write its first note.
    CreateTableAndWrite(&'static str),
    /// Write one more note.
    Write(&'static str),
    /// Read every note back; they must be these, in the order written.
    ReadRows(&'static [&'static str]),
    /// Finish the WAL segment being written, so that it is archived now; its name.
    SwitchWal,
}

impl Sql {
    pub fn text(&self) -> String {
        match self {
            Sql::CreateTableAndWrite(note) => format!(
                "CREATE TABLE {TOUR_TABLE} (note text); INSERT INTO {TOUR_TABLE} VALUES ('{note}') RETURNING inet_server_addr()"
            ),
            Sql::Write(note) => {
                format!("INSERT INTO {TOUR_TABLE} VALUES ('{note}') RETURNING inet_server_addr()")
            }
            Sql::ReadRows(_) => format!("SELECT note, inet_server_addr() FROM {TOUR_TABLE}"),
            Sql::SwitchWal => "SELECT pg_walfile_name(pg_switch_wal())".to_string(),
        }
    }
}

/// How the tour's SQL reaches Postgres.
pub enum SqlRoute {
    /// This host's `psql`, through the primary Service: its ClusterIP is a loopback address on
    /// the sandbox's process runtime, so the host reaches it as any pod would.
    HostPsql(PathBuf),
    /// No `psql` on this host: `psql` inside the primary pod, through `pods/exec`.
    Exec,
}

impl SqlRoute {
    /// `None` for simulated pods: no Postgres runs to answer.
    pub async fn for_runtime(runtime: &PodRuntime) -> Option<SqlRoute> {
        match runtime {
            PodRuntime::Simulated { .. } => None,
            PodRuntime::Processes { .. } => Some(match find_psql(runtime).await {
                Some(psql) => SqlRoute::HostPsql(psql),
                None => SqlRoute::Exec,
            }),
        }
    }

    /// Where to send SQL now that `primary` is the primary.
    pub async fn target(&self, client: &Client, primary: &str) -> Result<SqlTarget, TourEnd> {
        let psql = match self {
            SqlRoute::Exec => return Ok(SqlTarget::Pod(primary.to_string())),
            SqlRoute::HostPsql(psql) => psql.clone(),
        };
        let namespace = client.namespace();
        let service: serde_json::Value = client
            .get(&format!(
                "/api/v1/namespaces/{namespace}/services/{}",
                primary_service_name(EXAMPLE_NAME)
            ))
            .await
            .map_err(failed)?;
        let address = service["spec"]["clusterIP"]
            .as_str()
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .ok_or_else(|| failed("the primary Service has no ClusterIP"))?
            .to_string();
        let secret_name = credentials_secret_name(EXAMPLE_NAME);
        let secret: serde_json::Value = client
            .get(&format!(
                "/api/v1/namespaces/{namespace}/secrets/{secret_name}"
            ))
            .await
            .map_err(failed)?;
        // A Secret's `data` is base64: the API server encodes what was written as `stringData`.
        let password = secret["data"][SUPERUSER_PASSWORD_KEY]
            .as_str()
            .and_then(|encoded| {
                base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .ok()
            })
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                failed(format!(
                    "Secret {secret_name} has no readable {SUPERUSER_PASSWORD_KEY}"
                ))
            })?;
        Ok(SqlTarget::Service {
            psql,
            address,
            password,
        })
    }
}

/// One place to send SQL to.
pub enum SqlTarget {
    /// The primary Service's ClusterIP, as the superuser with the Secret's password.
    Service {
        psql: PathBuf,
        address: String,
        password: String,
    },
    /// The named pod's postgres container, through `pods/exec`.
    Pod(String),
}

impl SqlTarget {
    /// What a learner would type for the same (the password stays out of it).
    pub fn command_line(&self, sql: &str) -> String {
        match self {
            SqlTarget::Service { address, .. } => format!(
                "PGPASSWORD=... psql -h {address} -p {POSTGRES_PORT} -U postgres -c \"{sql}\"   (the Service {}; the password from Secret {})",
                primary_service_name(EXAMPLE_NAME),
                credentials_secret_name(EXAMPLE_NAME)
            ),
            SqlTarget::Pod(pod) => format!(
                "kubectl exec {pod} -c {POSTGRES_CONTAINER} -- psql -U postgres -c \"{sql}\""
            ),
        }
    }

    /// Run `sql`; its output (`-qAt`: bare values, `|` between columns, no command tags).
    pub async fn run(&self, client: &Client, sql: &str) -> Result<String, String> {
        match self {
            SqlTarget::Service {
                psql,
                address,
                password,
            } => {
                let port = POSTGRES_PORT.to_string();
                let mut command = tokio::process::Command::new(psql);
                command
                    .args([
                        "-h", address, "-p", &port, "-U", "postgres", "-d", "postgres",
                    ])
                    .args(["-v", "ON_ERROR_STOP=1", "-qAtX", "-c", sql])
                    // The password in the environment, never in the command line (which
                    // `ps` shows to every user of the machine).
                    .env("PGPASSWORD", password)
                    .env("PGCONNECT_TIMEOUT", "5")
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true);
                let output = command
                    .output()
                    .await
                    .map_err(|error| format!("running {}: {error}", psql.display()))?;
                if output.status.success() {
                    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
                } else {
                    Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
                }
            }
            SqlTarget::Pod(pod) => {
                let mut argv = psql_argv(sql);
                // Quiet: no `CREATE TABLE`/`INSERT 0 1` command tags between the values.
                argv.insert(1, "-q".to_string());
                psql_in_pod(client, client.namespace(), pod, &argv).await
            }
        }
    }

    /// [`SqlTarget::run`] again until it answers: right after a failover the Service may have
    /// no ready endpoint for a moment (connections are refused), or still the old one.
    pub async fn run_until_answered(&self, client: &Client, sql: &str) -> Result<String, String> {
        let deadline = Instant::now() + ACT_DEADLINE;
        loop {
            match self.run(client, sql).await {
                Ok(answer) => return Ok(answer),
                Err(error) if Instant::now() >= deadline => return Err(error),
                Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
    }
}

/// The host's `psql`: beside the PostgreSQL the sandbox runs, else `pg_config --bindir`, else
/// the newest of Debian's `/usr/lib/postgresql/*/bin`.
async fn find_psql(runtime: &PodRuntime) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = runtime.postgres_bin().into_iter().collect();
    if let Ok(output) = tokio::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .await
    {
        if output.status.success() {
            dirs.push(PathBuf::from(
                String::from_utf8_lossy(&output.stdout).trim(),
            ));
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    debian.sort();
    dirs.extend(debian.into_iter().rev().map(|(_, dir)| dir));
    dirs.into_iter()
        .map(|dir| dir.join("psql"))
        .find(|psql| psql.is_file())
}
