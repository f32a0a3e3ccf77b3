//! The sandbox API server as a child process: start the `sandbox` binary (built first under
//! `cargo run`), read its banner (the URL, the kubeconfig that names its CA and token, then what
//! runs its pods), and stop it with SIGTERM at the end. Everything about how the tour starts the
//! sandbox is in this file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use postgres_operator::config::Config;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The sandbox binary as a child process, for as long as the tour runs.
pub struct SandboxProcess {
    child: tokio::process::Child,
    pub url: String,
    /// The kubeconfig the sandbox wrote: its `https://` URL, its CA and its token file.
    kubeconfig: PathBuf,
    pub runtime: PodRuntime,
}

/// The last line of the sandbox's banner, in every mode.
const BANNER_END: &str = "Ctrl-C stops it.";
/// The banner's line for a learner's other terminals; the path after it is the kubeconfig.
const KUBECONFIG_EXPORT: &str = "export KUBECONFIG=";

impl SandboxProcess {
    /// Start `sandbox --listen 127.0.0.1:0` (with `--runtime KIND` if given), and read its
    /// banner: the URL first, the kubeconfig, then what runs its pods. It serves HTTPS and wants
    /// its token, as it does for a learner.
    pub async fn start(runtime: Option<&str>) -> Result<SandboxProcess, String> {
        let program = sandbox_binary().await?;
        let mut command = tokio::process::Command::new(&program);
        command.args(["--listen", "127.0.0.1:0"]);
        if let Some(runtime) = runtime {
            command.args(["--runtime", runtime]);
        }
        let mut child = command
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("cannot run {}: {error}", program.display()))?;
        let stdout = child.stdout.take().ok_or("the sandbox has no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let read_banner = async {
            let mut banner = Vec::new();
            loop {
                match lines.next_line().await {
                    Ok(Some(line)) if line == BANNER_END => return Ok(banner),
                    Ok(Some(line)) => banner.push(line),
                    Ok(None) => return Err("the sandbox exited before it was ready".to_string()),
                    Err(error) => return Err(format!("reading the sandbox's output: {error}")),
                }
            }
        };
        let banner = tokio::time::timeout(Duration::from_secs(30), read_banner)
            .await
            .map_err(|_| "the sandbox printed no address within 30 s".to_string())??;
        let first = banner.first().map(String::as_str).unwrap_or_default();
        let url = first
            .strip_prefix("sandbox API server at ")
            .ok_or_else(|| format!("unexpected first line from the sandbox: {first:?}"))?
            .to_string();
        let kubeconfig = banner
            .iter()
            .find_map(|line| line.trim().strip_prefix(KUBECONFIG_EXPORT))
            .map(PathBuf::from)
            .ok_or_else(|| format!("the sandbox printed no `{KUBECONFIG_EXPORT}...` line"))?;
        let runtime = PodRuntime::from_banner(&banner);
        // Keep reading its stdout, so the child never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(SandboxProcess {
            child,
            url,
            kubeconfig,
            runtime,
        })
    }

    /// How to reach the sandbox: its kubeconfig, read as kubectl would (the sandbox writes it as
    /// JSON, which is YAML too, so no kubectl is needed to read it).
    pub fn config(&self) -> Result<Config, String> {
        let path = &self.kubeconfig;
        let text = std::fs::read(path).map_err(|error| {
            format!(
                "reading the sandbox's kubeconfig {}: {error}",
                path.display()
            )
        })?;
        let json: serde_json::Value = serde_json::from_slice(&text).map_err(|error| {
            format!(
                "the sandbox's kubeconfig {} is not JSON: {error}",
                path.display()
            )
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Config::from_kubeconfig_json(&json, dir).map_err(|error| error.to_string())
    }

    /// SIGTERM first: the sandbox then stops every pod's PostgreSQL and removes its temporary
    /// data directory, which SIGKILL would leave behind (its bubblewrap jails die with it
    /// either way). SIGKILL if it has not exited after the pods' own grace.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = tokio::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// The `sandbox` binary beside this one. Under `cargo run` it is built first (`cargo run` builds
/// only the tour, and a sandbox older than its source would mislead); otherwise it must be there.
async fn sandbox_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|error| format!("where am I? {error}"))?;
    let dir = exe.parent().ok_or("this binary has no directory")?;
    let program = dir.join("sandbox");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    if let (Some(cargo), true) = (std::env::var_os("CARGO"), manifest.exists()) {
        let mut build = tokio::process::Command::new(cargo);
        // The sandbox, and the readiness agent its postgres pods copy from the operator's image
        // (which the sandbox finds beside itself).
        build.args([
            "build",
            "--quiet",
            "-p",
            "sandbox",
            "-p",
            "postgres-operator",
            "--bin",
            "sandbox",
            "--bin",
            "pg-ready",
            "--manifest-path",
        ]);
        build.arg(&manifest);
        if dir.ends_with("release") {
            build.arg("--release");
        }
        let status = build
            .status()
            .await
            .map_err(|error| format!("running cargo build for the sandbox: {error}"))?;
        if !status.success() {
            return Err("cargo build of the sandbox and pg-ready failed (see above)".to_string());
        }
    }
    if program.exists() {
        Ok(program)
    } else {
        Err(format!(
            "{} is missing: build it with `cargo build -p sandbox`, or pass --server",
            program.display()
        ))
    }
}

/// What runs the sandbox's pods, as the sandbox's banner says.
pub enum PodRuntime {
    /// `pods run as processes: PostgreSQL 15.14 from /usr/lib/postgresql/15/bin, bubblewrap ...`
    Processes { banner: String },
    /// `no containers run here: pods get a simulated status only.` and the reason.
    Simulated { banner: String },
}

impl PodRuntime {
    const PROCESSES: &'static str = "pods run as processes:";
    const SIMULATED: &'static str = "no containers run here:";

    /// Read the sandbox's banner lines.
    fn from_banner(lines: &[String]) -> PodRuntime {
        if let Some(line) = lines.iter().find(|l| l.starts_with(Self::PROCESSES)) {
            return PodRuntime::Processes {
                banner: line.clone(),
            };
        }
        let at = lines.iter().position(|l| l.starts_with(Self::SIMULATED));
        let banner = match at {
            // The reason is on the next line, in parentheses.
            Some(at) => lines[at..]
                .iter()
                .take(2)
                .map(|line| line.trim())
                .collect::<Vec<_>>()
                .join(" "),
            None => {
                "the sandbox did not say what runs its pods; taking them for simulated".to_string()
            }
        };
        PodRuntime::Simulated { banner }
    }

    pub fn banner(&self) -> &str {
        match self {
            PodRuntime::Processes { banner } | PodRuntime::Simulated { banner } => banner,
        }
    }

    /// The directory of the PostgreSQL the sandbox runs pods with, from its banner.
    pub fn postgres_bin(&self) -> Option<PathBuf> {
        let PodRuntime::Processes { banner } = self else {
            return None;
        };
        let (_, rest) = banner.split_once(" from ")?;
        let (dir, _) = rest.split_once(", ")?;
        Some(Path::new(dir).to_path_buf())
    }
}
