//! One container: what it runs, starting it, its probes, restarting it per `restartPolicy` with
//! the kubelet's back-off, and stopping it.
//!
//! WORKSHOP.md, "Set-up: the sandbox". The states kubectl users know come from here:
//! `CreateContainerConfigError` (a missing Secret or key: retried until it appears),
//! `ErrImagePull`/`ImagePullBackOff` (a postgres tag that does not exist), `StartError` (a
//! command not found: exit code 128), `CrashLoopBackOff` (a first crash is restarted at once,
//! the next ones after 10 s, 20 s, 40 s … 5 min), `Completed` and `Error` (exit codes), and
//! restarts after a failed liveness or startup probe.

use std::io::{Read, Seek, SeekFrom};
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::env::{self, ConfigError};
use super::image::{self, Image, POSTGRES_DATA_VOLUME, POSTGRES_ENTRYPOINT};
use super::jail::{Jail, Mount};
use super::probes::{self, Check, Probe};
use super::process::{self, Place};
use super::status::{
    self, ContainerRecord, State, MESSAGE_FILE_BYTES, MESSAGE_LOG_BYTES, TERMINATION_MESSAGE_PATH,
};
use super::worker::{PodWorker, StoreLookup};
use super::{logs, services, volumes, Node, SIMULATED_CONTAINER_ID};
use crate::sync::lock;
use crate::timefmt;

/// A container that ran this long without failing starts the next back-off from the beginning.
const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);

/// The standard PATH of a Debian-based image.
const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Init,
    Main,
}

impl Kind {
    fn field(self) -> &'static str {
        match self {
            Kind::Init => "initContainers",
            Kind::Main => "containers",
        }
    }
}

/// Everything needed to start one instance of a container (or an exec beside it).
pub(super) struct Plan {
    pub(super) argv: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    pub(super) jail: Jail,
}

/// Why a container cannot start (yet).
pub(super) enum Blocked {
    Config(String),
    Mount(String),
    Image(String),
    /// Not an error: an image with nothing the sandbox can run stays simulated.
    Simulated(String),
}

impl Blocked {
    /// What blocks it, in words.
    pub(super) fn message(&self) -> &str {
        match self {
            Blocked::Config(m) | Blocked::Mount(m) | Blocked::Image(m) | Blocked::Simulated(m) => m,
        }
    }
}

/// How one instance ended.
struct Ended {
    exit_code: i32,
    state: State,
    /// The pod is stopping: no restart.
    stopped: bool,
    started_at: Instant,
}

/// Read a container record.
fn with_record<T>(
    worker: &PodWorker,
    kind: Kind,
    index: usize,
    read: impl FnOnce(&ContainerRecord) -> T,
) -> T {
    let record = lock(&worker.record);
    let containers = match kind {
        Kind::Init => &record.init,
        Kind::Main => &record.main,
    };
    read(&containers[index])
}

/// Change a container record (and have the status written).
fn update(worker: &PodWorker, kind: Kind, index: usize, change: impl FnOnce(&mut ContainerRecord)) {
    worker.update(|record| {
        let containers = match kind {
            Kind::Init => &mut record.init,
            Kind::Main => &mut record.main,
        };
        if let Some(container) = containers.get_mut(index) {
            change(container);
        }
    });
}

fn spec_of(worker: &PodWorker, kind: Kind, index: usize) -> Value {
    worker.pod["spec"][kind.field()][index].clone()
}

/// An init container, restarted on failure unless `restartPolicy: Never`. True when it
/// completed (exit 0); false if the pod is stopping or has failed.
pub(crate) async fn run_init(node: &Arc<Node>, worker: &Arc<PodWorker>, index: usize) -> bool {
    let mut backoff = Duration::ZERO;
    loop {
        let Some(ended) = run_once(node, worker, Kind::Init, index).await else {
            return false;
        };
        if ended.stopped {
            return false;
        }
        if ended.exit_code == 0 {
            update(worker, Kind::Init, index, |c| {
                c.state = ended.state;
                c.finished = true;
            });
            return true;
        }
        if worker.pod["spec"]["restartPolicy"] == "Never" {
            update(worker, Kind::Init, index, |c| {
                c.state = ended.state;
                c.finished = true;
            });
            worker.update(|record| record.init_failed = true);
            return false;
        }
        if !back_off(node, worker, Kind::Init, index, ended, &mut backoff).await {
            return false;
        }
    }
}

/// A main container, for the pod's whole life: restarted per `restartPolicy`.
pub(crate) async fn supervise(node: Arc<Node>, worker: Arc<PodWorker>, kind: Kind, index: usize) {
    let mut backoff = Duration::ZERO;
    loop {
        // A lost node restarts nothing: nobody is there to.
        if worker.lost.is_cancelled() || worker.silent.is_cancelled() {
            return;
        }
        let Some(ended) = run_once(&node, &worker, kind, index).await else {
            return;
        };
        let restart = match worker.pod["spec"]["restartPolicy"].as_str() {
            Some("Never") => false,
            Some("OnFailure") => ended.exit_code != 0,
            _ => true,
        };
        if ended.stopped || !restart {
            update(&worker, kind, index, |c| {
                c.state = ended.state;
                c.ready = false;
                c.finished = true;
            });
            return;
        }
        if !back_off(&node, &worker, kind, index, ended, &mut backoff).await {
            return;
        }
    }
}

/// After a crash: the last state is kept and the container restarted, a first crash (`backoff`
/// zero) at once, as the kubelet's `doBackOff` finds no back-off recorded for it yet; after
/// that it waits in CrashLoopBackOff, 10 s, then doubling each time. False if the pod stopped
/// meanwhile.
async fn back_off(
    node: &Node,
    worker: &PodWorker,
    kind: Kind,
    index: usize,
    ended: Ended,
    backoff: &mut Duration,
) -> bool {
    if ended.started_at.elapsed() >= BACKOFF_RESET_AFTER {
        *backoff = Duration::ZERO;
    }
    // This crash's wait, and the next one's: none for a first crash, then 10 s, doubling.
    let wait = *backoff;
    *backoff = if wait.is_zero() {
        node.config.restart_backoff
    } else {
        (wait * 2).min(node.config.max_restart_backoff)
    };
    let name = with_record(worker, kind, index, |c| c.name.clone());
    let pod = format!("{}_{}({})", worker.name, worker.namespace, worker.uid);
    update(worker, kind, index, |c| {
        c.last_state = Some(ended.state.clone());
        c.ready = false;
        c.started = false;
        // Restarted at once, it shows the exited instance until the new one runs.
        c.state = if wait.is_zero() {
            ended.state
        } else {
            State::waiting(
                "CrashLoopBackOff",
                format!(
                    "back-off {} restarting failed container={name} pod={pod}",
                    go_duration(wait)
                ),
            )
        };
    });
    let waited = if wait.is_zero() {
        !worker.stop.is_cancelled()
    } else {
        node.event(
            &worker.pod,
            true,
            "BackOff",
            format!("Back-off restarting failed container {name} in pod {pod}"),
        );
        worker.sleep(wait).await
    };
    // A frozen kubelet restarts nothing until thawed (`Node::freeze`).
    let waited = waited
        && tokio::select! {
            () = crate::sync::thawed(&node.frozen) => true,
            () = worker.stop.cancelled() => false,
        };
    if waited {
        update(worker, kind, index, |c| c.restart_count += 1);
    }
    waited
}

/// `10s`, `1m20s`, `5m0s`: Go's duration format, as the kubelet's messages print it.
fn go_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds >= 60 {
        format!("{}m{}s", seconds / 60, seconds % 60)
    } else if duration.subsec_millis() > 0 && seconds == 0 {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{seconds}s")
    }
}

/// Wait until the container can start, start it, and wait for it to end. None: the pod stopped
/// before it ever started.
async fn run_once(
    node: &Arc<Node>,
    worker: &Arc<PodWorker>,
    kind: Kind,
    index: usize,
) -> Option<Ended> {
    let spec = spec_of(worker, kind, index);
    let name = spec["name"].as_str().unwrap_or_default().to_string();
    let image_name = spec["image"].as_str().unwrap_or_default().to_string();
    let mut pull_backoff = node.config.restart_backoff;
    let plan = loop {
        if worker.stop.is_cancelled() {
            return None;
        }
        match plan(node, worker, &spec) {
            Ok(plan) => break plan,
            Err(Blocked::Config(message)) => {
                update(worker, kind, index, |c| {
                    c.state = State::waiting("CreateContainerConfigError", message.clone())
                });
                node.event(&worker.pod, true, "Failed", format!("Error: {message}"));
                if !worker.sleep(node.config.retry_period).await {
                    return None;
                }
            }
            Err(Blocked::Mount(message)) => {
                update(worker, kind, index, |c| {
                    c.state = State::waiting("ContainerCreating", "")
                });
                node.event(&worker.pod, true, "FailedMount", message);
                if !worker.sleep(node.config.retry_period).await {
                    return None;
                }
            }
            Err(Blocked::Image(message)) => {
                update(worker, kind, index, |c| {
                    c.state = State::waiting("ErrImagePull", message.clone())
                });
                node.event(
                    &worker.pod,
                    true,
                    "Failed",
                    format!("Failed to pull image \"{image_name}\": {message}"),
                );
                node.event(&worker.pod, true, "Failed", "Error: ErrImagePull".into());
                if !worker.sleep(Duration::from_millis(500)).await {
                    return None;
                }
                update(worker, kind, index, |c| {
                    c.state = State::waiting(
                        "ImagePullBackOff",
                        format!("Back-off pulling image \"{image_name}\""),
                    )
                });
                node.event(
                    &worker.pod,
                    false,
                    "BackOff",
                    format!("Back-off pulling image \"{image_name}\""),
                );
                if !worker.sleep(pull_backoff).await {
                    return None;
                }
                pull_backoff = (pull_backoff * 2).min(node.config.max_restart_backoff);
            }
            Err(Blocked::Simulated(why)) => {
                return Some(run_simulated(node, worker, kind, index, &why).await)
            }
        }
    };
    let first = with_record(worker, kind, index, |c| {
        c.restart_count == 0 && c.last_state.is_none()
    });
    if first {
        let image = Image::parse(&image_name);
        let message = if matches!(image, Image::Postgres { .. }) {
            format!(
                "Container image \"{image_name}\" already present on machine: {image_name} runs the installed PostgreSQL {}",
                node.config.tools.postgres_version
            )
        } else if image == Image::Operator {
            format!(
                "Container image \"{image_name}\" already present on machine: {image_name} runs the stage binaries in {}",
                node.config
                    .cluster
                    .operator_binaries
                    .as_deref()
                    .unwrap_or(Path::new("?"))
                    .display()
            )
        } else {
            format!(
                "Container image \"{image_name}\" is not pulled: its command runs with the machine's own programs"
            )
        };
        node.event(&worker.pod, false, "Pulled", message);
        if let Some(major) = image.postgres_major() {
            if major != node.config.tools.postgres_major() {
                node.event(
                    &worker.pod,
                    true,
                    "VersionMismatch",
                    format!(
                        "{image_name} asks for PostgreSQL {major}; the sandbox runs the installed PostgreSQL {} for every postgres tag",
                        node.config.tools.postgres_version
                    ),
                );
            }
        }
    }
    Some(run_instance(node, worker, kind, index, &spec, plan, &name).await)
}

/// The command, environment and jail for the next instance (re-read each time, as the kubelet
/// re-reads Secrets on every start).
pub(super) fn plan(node: &Node, worker: &PodWorker, spec: &Value) -> Result<Plan, Blocked> {
    let image_name = spec["image"].as_str().unwrap_or_default();
    let image = Image::parse(image_name);
    let image_mounts = match &image {
        Image::Unpullable { message } => return Err(Blocked::Image(message.clone())),
        Image::Operator => {
            image::operator_mounts(node.config.cluster.operator_binaries.as_deref(), image_name)
                .map_err(Blocked::Image)?
        }
        Image::Postgres { .. } | Image::Other => Vec::new(),
    };
    let strings = |field: &str| -> Vec<String> {
        spec[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| a.as_str().unwrap_or_default().to_string())
            .collect()
    };
    let pod_ip = worker.pod_ip().map(|ip| ip.to_string()).unwrap_or_default();
    let lookup = StoreLookup {
        store: &node.store,
        namespace: &worker.namespace,
    };
    // The Services of the pod's namespace as they are now, before the container's own `env`,
    // which wins; `enableServiceLinks: false` leaves them out.
    let mut service_env = Vec::new();
    if worker.pod["spec"]["enableServiceLinks"] != false {
        let in_namespace = node.store.lock().list("/services", Some(&worker.namespace));
        service_env.extend(services::service_links(&in_namespace));
    }
    // The API server's variables go into every pod, service links or not (the kubelet's
    // "master service" variables); an in-cluster client reads KUBERNETES_SERVICE_HOST/PORT.
    if let Some(api_server) = node.config.cluster.api_server {
        service_env.extend(services::kubernetes_service_env(api_server));
    }
    let user_env = env::resolve(&worker.pod, spec, &pod_ip, &service_env, &lookup)
        .map_err(|ConfigError(message)| Blocked::Config(message))?;
    let postgres = matches!(image, Image::Postgres { .. });
    let mut environment = base_env(node, worker, postgres, &pod_ip);
    environment.extend(service_env);
    environment.extend(user_env);
    let expand = |items: Vec<String>| -> Vec<String> {
        items
            .iter()
            .map(|item| env::expand(item, &environment))
            .collect()
    };
    let Some(argv) = image::argv(
        &image,
        &expand(strings("command")),
        &expand(strings("args")),
    ) else {
        return Err(Blocked::Simulated(format!(
            "image {} has no command: the sandbox pulls no images, so only a container's `command` can run",
            spec["image"].as_str().unwrap_or_default()
        )));
    };
    let volumes = lock(&worker.volumes).clone();
    let mut mounts = volumes::mounts_for(spec, &volumes, &worker.pod)
        .map_err(|volumes::MountError(message)| Blocked::Mount(message))?;
    mounts.extend(image_mounts);
    let name = spec["name"].as_str().unwrap_or_default();
    let container_dir = worker.dir.join("containers").join(name);
    let owner = worker.host_user;
    let dirs = (|| -> std::io::Result<(PathBuf, PathBuf)> {
        let tmp = container_dir.join("tmp");
        let run = container_dir.join("run");
        volumes::make_dir(&tmp, 0o1777, None)?;
        volumes::make_dir(&run, 0o755, owner)?;
        // Debian's PostgreSQL puts its Unix socket in /var/run/postgresql (= /run/postgresql).
        volumes::make_dir(&run.join("postgresql"), 0o2775, owner)?;
        volumes::make_dir(&container_dir.join("log"), 0o755, None)?;
        // Created once, never truncated here: an exec plans too, while the container runs.
        let message_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(termination_message_file(&worker.dir, name))?;
        // 0666, as the kubelet leaves it: whatever user the container runs as may write it.
        message_file.set_permissions(std::fs::Permissions::from_mode(0o666))?;
        if postgres
            && !mounts
                .iter()
                .any(|m| m.destination == Path::new(POSTGRES_DATA_VOLUME))
        {
            volumes::make_dir(&container_dir.join("data"), 0o700, owner)?;
        }
        Ok((tmp, run))
    })();
    let (tmp, run) = dirs
        .map_err(|e| Blocked::Mount(format!("cannot create {}: {e}", container_dir.display())))?;
    // The container's termination message file, bound writable at `terminationMessagePath`
    // (a file mount: bwrap creates the mount point, in /dev's tmpfs for the default path).
    mounts.push(Mount {
        source: termination_message_file(&worker.dir, name),
        destination: PathBuf::from(
            spec["terminationMessagePath"]
                .as_str()
                .filter(|path| path.starts_with('/'))
                .unwrap_or(TERMINATION_MESSAGE_PATH),
        ),
        writable: true,
    });
    let etc = worker.dir.join("etc");
    for file in volumes::POD_ETC {
        mounts.push(Mount {
            source: etc.join(file),
            destination: PathBuf::from("/etc").join(file),
            writable: false,
        });
    }
    if postgres {
        mounts.push(Mount {
            source: node
                .config
                .data_dir()
                .join("bin")
                .join("docker-entrypoint.sh"),
            destination: PathBuf::from(POSTGRES_ENTRYPOINT),
            writable: false,
        });
        // The image's `VOLUME /var/lib/postgresql/data`: an anonymous volume if nothing is there.
        if !mounts
            .iter()
            .any(|m| m.destination == Path::new(POSTGRES_DATA_VOLUME))
        {
            mounts.push(Mount {
                source: container_dir.join("data"),
                destination: PathBuf::from(POSTGRES_DATA_VOLUME),
                writable: true,
            });
        }
    }
    Ok(Plan {
        argv,
        env: environment,
        jail: Jail {
            uid: worker.ids.0,
            gid: worker.ids.1,
            hostname: worker.name.clone(),
            tmp,
            run,
            mounts,
            host_paths: postgres_prefix(node, postgres).into_iter().collect(),
            working_dir: spec["workingDir"].as_str().map(String::from),
        },
    })
}

/// Where PostgreSQL is installed, when that is outside `/usr` (which every root has): the
/// directory above its `bin`, bound read-only into postgres containers.
fn postgres_prefix(node: &Node, postgres: bool) -> Option<PathBuf> {
    let bin = &node.config.tools.postgres_bin;
    let prefix = bin.parent().filter(|p| *p != Path::new("/"))?;
    (postgres && !bin.starts_with("/usr")).then(|| prefix.to_path_buf())
}

/// Where a container's termination message file lives on the host: one per container, emptied
/// as each instance starts (the kubelet makes a new file per instance).
fn termination_message_file(pod_dir: &Path, container: &str) -> PathBuf {
    pod_dir
        .join("containers")
        .join(container)
        .join("termination-log")
}

/// The message for an instance that exited with `exit_code`: its termination message file, or
/// under `FallbackToLogsOnError` the end of its log (`status::termination_message`).
fn read_termination_message(
    spec: &Value,
    message_file: &Path,
    log_path: &Path,
    exit_code: i32,
) -> String {
    let written = read_end(message_file, MESSAGE_FILE_BYTES);
    let fallback = spec["terminationMessagePolicy"] == "FallbackToLogsOnError";
    let log_end = if fallback && exit_code != 0 {
        read_end(log_path, MESSAGE_LOG_BYTES).unwrap_or_default()
    } else {
        Vec::new()
    };
    status::termination_message(written.as_deref(), &log_end, fallback, exit_code)
}

/// The last `limit` bytes of `path`; None if it cannot be read.
fn read_end(path: &Path, limit: usize) -> Option<Vec<u8>> {
    let mut file = std::fs::File::open(path).ok()?;
    let length = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(length.saturating_sub(limit as u64)))
        .ok()?;
    let mut bytes = Vec::new();
    file.take(limit as u64).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// What every container's environment starts with (the image's ENV, and the kubelet's own).
fn base_env(
    node: &Node,
    worker: &PodWorker,
    postgres: bool,
    pod_ip: &str,
) -> Vec<(String, String)> {
    let mut environment = vec![
        ("HOSTNAME".to_string(), worker.name.clone()),
        ("SANDBOX_POD_IP".to_string(), pod_ip.to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ];
    if postgres {
        let bin = node.config.tools.postgres_bin.display();
        environment.extend([
            ("PATH".to_string(), format!("{bin}:{IMAGE_PATH}")),
            ("HOME".to_string(), "/var/lib/postgresql".to_string()),
            ("PGDATA".to_string(), POSTGRES_DATA_VOLUME.to_string()),
            (
                "PG_MAJOR".to_string(),
                node.config.tools.postgres_major().to_string(),
            ),
        ]);
    } else {
        environment.extend([
            ("PATH".to_string(), IMAGE_PATH.to_string()),
            ("HOME".to_string(), "/".to_string()),
        ]);
    }
    environment
}

/// Does `program` exist where the jail will look for it? A command that does not is a
/// StartError (exit code 128), as containerd reports it — not a crash of the program. A host
/// path outside the container's root (`/home/you/tool`) does not count.
fn command_exists(program: &str, env: &[(String, String)], jail: &Jail) -> bool {
    if program.contains('/') {
        let path = PathBuf::from(program);
        // Inside a volume we cannot tell from here; let it run and fail if need be.
        return jail.mounts.iter().any(|m| path.starts_with(&m.destination))
            || (jail.shows_host_path(&path) && path.exists());
    }
    let path = env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map(|(_, value)| value.as_str())
        .unwrap_or(IMAGE_PATH);
    path.split(':').any(|dir| {
        let candidate = PathBuf::from(dir).join(program);
        jail.shows_host_path(&candidate) && candidate.is_file()
    })
}

/// Start the process, run its probes, and wait for it to end (or for the pod to stop).
async fn run_instance(
    node: &Arc<Node>,
    worker: &Arc<PodWorker>,
    kind: Kind,
    index: usize,
    spec: &Value,
    plan: Plan,
    name: &str,
) -> Ended {
    let started = Instant::now();
    let started_at = timefmt::now_rfc3339();
    let instance = with_record(worker, kind, index, |c| c.restart_count);
    let log_path = logs::path(&worker.dir, name, instance);
    let program = plan.argv.first().cloned().unwrap_or_default();
    if !command_exists(&program, &plan.env, &plan.jail) {
        let message = format!(
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: \"{program}\": executable file not found in $PATH: unknown"
        );
        node.event(&worker.pod, true, "Failed", format!("Error: {message}"));
        return Ended {
            exit_code: 128,
            state: State::Terminated {
                exit_code: 128,
                reason: "StartError".into(),
                message,
                started_at: "1970-01-01T00:00:00Z".into(),
                finished_at: timefmt::now_rfc3339(),
            },
            stopped: false,
            started_at: started,
        };
    }
    let message_file = termination_message_file(&worker.dir, name);
    // Each instance starts with an empty message: a restart must not report the last one's.
    let log = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&message_file)
        .and_then(|_| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
        });
    let spawned = log.and_then(|log| {
        process::spawn(
            &node.config.tools.bwrap,
            &plan.jail,
            &plan.argv,
            &plan.env,
            worker.host_user,
            Some(&log),
        )
    });
    let mut jailed = match spawned {
        Ok(jailed) => jailed,
        Err(error) => {
            let message = format!("failed to start {program}: {error}");
            node.event(&worker.pod, true, "Failed", format!("Error: {message}"));
            return Ended {
                exit_code: 128,
                state: State::Terminated {
                    exit_code: 128,
                    reason: "StartError".into(),
                    message,
                    started_at: started_at.clone(),
                    finished_at: timefmt::now_rfc3339(),
                },
                stopped: false,
                started_at: started,
            };
        }
    };
    let set_running = |pid: Option<u32>| {
        if kind == Kind::Main {
            if let Some(slot) = lock(&worker.running).get_mut(index) {
                *slot = pid;
            }
        }
    };
    set_running(jailed.pid());
    let has_startup = Probe::from_spec(spec, "startupProbe").is_some();
    let has_readiness = Probe::from_spec(spec, "readinessProbe").is_some();
    update(worker, kind, index, |c| {
        c.state = State::Running {
            started_at: started_at.clone(),
        };
        c.container_id = format!(
            "sandbox://{}-{name}-{instance}",
            &worker.uid[..8.min(worker.uid.len())]
        );
        c.started = kind == Kind::Init || !has_startup;
        c.ready = kind == Kind::Main && !has_startup && !has_readiness;
    });
    node.event(
        &worker.pod,
        false,
        "Created",
        format!("Created container {name}"),
    );
    node.event(
        &worker.pod,
        false,
        "Started",
        format!("Started container {name}"),
    );

    let probes_stop = CancellationToken::new();
    let (restart_tx, mut restart_rx) = mpsc::channel::<String>(1);
    if kind == Kind::Main {
        if let Some(ip) = worker.pod_ip() {
            let probes = run_probes(
                node.clone(),
                worker.clone(),
                index,
                spec.clone(),
                Arc::new((plan.jail.clone(), plan.env.clone(), jailed.pid())),
                ip,
                restart_tx,
                probes_stop.clone(),
            );
            // A node that stopped reporting probes nothing more: its kubelet is gone with it.
            let silent = worker.silent.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = probes => {}
                    () = silent.cancelled() => {}
                }
            });
        }
    }
    let no_crash = Notify::new();
    let crash = match kind {
        Kind::Main => worker.crash.get(index).unwrap_or(&no_crash),
        Kind::Init => &no_crash,
    };
    let stop_signal = Image::parse(spec["image"].as_str().unwrap_or_default()).stop_signal();
    let (exit_code, stopped) = tokio::select! {
        code = jailed.wait() => (code, false),
        _ = worker.lost.cancelled() => {
            jailed.kill();
            (jailed.wait().await, true)
        }
        _ = crash.notified() => {
            // As if the process had died on its own: SIGKILL, exit code 137, restart per policy.
            jailed.kill();
            (jailed.wait().await, false)
        }
        _ = worker.stop.cancelled() => {
            let grace = *lock(&worker.grace);
            node.event(&worker.pod, false, "Killing", format!("Stopping container {name}"));
            (jailed.stop(grace, stop_signal).await, true)
        }
        Some(why) = restart_rx.recv() => {
            node.event(&worker.pod, false, "Killing", format!("Container {name} {why}, will be restarted"));
            let grace = Duration::from_secs(worker.pod["spec"]["terminationGracePeriodSeconds"].as_u64().unwrap_or(30));
            (jailed.stop(grace, stop_signal).await, false)
        }
    };
    probes_stop.cancel();
    set_running(None);
    let message = read_termination_message(spec, &message_file, &log_path, exit_code);
    Ended {
        exit_code,
        state: State::exited(exit_code, started_at, timefmt::now_rfc3339()).with_message(message),
        stopped,
        started_at: started,
    }
}

/// An image the sandbox cannot run: it shows Running (and Ready) and runs nothing, until the
/// pod stops. Its events say so.
async fn run_simulated(
    node: &Node,
    worker: &PodWorker,
    kind: Kind,
    index: usize,
    why: &str,
) -> Ended {
    let started = Instant::now();
    let started_at = timefmt::now_rfc3339();
    let name = with_record(worker, kind, index, |c| c.name.clone());
    update(worker, kind, index, |c| {
        c.state = State::Running {
            started_at: started_at.clone(),
        };
        c.started = true;
        c.ready = kind == Kind::Main;
        c.container_id = format!("{SIMULATED_CONTAINER_ID}{name}");
    });
    node.event(
        &worker.pod,
        false,
        "Started",
        format!("Started container {name} (simulated, no process runs: {why})"),
    );
    if kind == Kind::Init {
        // An init container that runs nothing completes at once.
        return Ended {
            exit_code: 0,
            state: State::exited(0, started_at, timefmt::now_rfc3339()),
            stopped: false,
            started_at: started,
        };
    }
    worker.stop.cancelled().await;
    Ended {
        exit_code: 0,
        state: State::exited(0, started_at, timefmt::now_rfc3339()),
        stopped: true,
        started_at: started,
    }
}

/// What an exec probe needs: the container's jail and environment, and its bwrap's PID.
type ExecContext = (Jail, Vec<(String, String)>, Option<u32>);

/// Startup, then readiness and liveness, for one instance of a main container.
#[allow(clippy::too_many_arguments)]
async fn run_probes(
    node: Arc<Node>,
    worker: Arc<PodWorker>,
    index: usize,
    spec: Value,
    context: Arc<ExecContext>,
    pod_ip: Ipv4Addr,
    restart: mpsc::Sender<String>,
    stop: CancellationToken,
) {
    let check = |probe: Probe| {
        let node = node.clone();
        let worker = worker.clone();
        let context = context.clone();
        async move { check(&node, &worker, &context, pod_ip, &probe).await }
    };
    let sleep = |delay: Duration| {
        let stop = stop.clone();
        async move {
            tokio::select! {
                _ = tokio::time::sleep(delay) => true,
                _ = stop.cancelled() => false,
            }
        }
    };
    // A probe's verdict is about this instance only. One that was running when the instance
    // ended must not mark the next one (or the crash-looping container) started or ready: the
    // kubelet drops a dead container's probe results. Checked under the record's lock, which
    // the instance's end takes after cancelling `stop`.
    let record = |change: &dyn Fn(&mut ContainerRecord)| {
        update(&worker, Kind::Main, index, |c| {
            if !stop.is_cancelled() {
                change(c);
            }
        })
    };
    if let Some(probe) = Probe::from_spec(&spec, "startupProbe") {
        if !sleep(probe.initial_delay).await {
            return;
        }
        let mut ticks = ticker(probe.period);
        let mut failures = 0;
        loop {
            match check(probe.clone()).await {
                Ok(()) => break,
                Err(output) => {
                    failures += 1;
                    node.event(
                        &worker.pod,
                        true,
                        "Unhealthy",
                        format!("Startup probe failed: {output}"),
                    );
                    if failures >= probe.failure_threshold {
                        let _ = restart.send("failed startup probe".into()).await;
                        return;
                    }
                }
            }
            if !next_tick(&mut ticks, &stop).await {
                return;
            }
        }
        let has_readiness = Probe::from_spec(&spec, "readinessProbe").is_some();
        record(&|c| {
            c.started = true;
            c.ready = !has_readiness;
        });
    }
    let readiness = async {
        let Some(probe) = Probe::from_spec(&spec, "readinessProbe") else {
            return;
        };
        if !sleep(probe.initial_delay).await {
            return;
        }
        let mut ticks = ticker(probe.period);
        let (mut successes, mut failures) = (0, 0);
        loop {
            match check(probe.clone()).await {
                Ok(()) => {
                    failures = 0;
                    successes += 1;
                    if successes >= probe.success_threshold {
                        record(&|c| c.ready = true);
                    }
                }
                Err(output) => {
                    successes = 0;
                    failures += 1;
                    node.event(
                        &worker.pod,
                        true,
                        "Unhealthy",
                        format!("Readiness probe failed: {output}"),
                    );
                    if failures >= probe.failure_threshold {
                        record(&|c| c.ready = false);
                    }
                }
            }
            if !next_tick(&mut ticks, &stop).await {
                return;
            }
        }
    };
    let liveness = async {
        let Some(probe) = Probe::from_spec(&spec, "livenessProbe") else {
            return;
        };
        if !sleep(probe.initial_delay).await {
            return;
        }
        let mut ticks = ticker(probe.period);
        let mut failures = 0;
        loop {
            match check(probe.clone()).await {
                Ok(()) => failures = 0,
                Err(output) => {
                    failures += 1;
                    node.event(
                        &worker.pod,
                        true,
                        "Unhealthy",
                        format!("Liveness probe failed: {output}"),
                    );
                    if failures >= probe.failure_threshold {
                        let _ = restart.send("failed liveness probe".into()).await;
                        return;
                    }
                }
            }
            if !next_tick(&mut ticks, &stop).await {
                return;
            }
        }
    };
    tokio::join!(readiness, liveness);
}

/// Probes start `period` apart, however long each took, as the kubelet's prober worker runs
/// them off a ticker: a probe that waits out its timeout does not push the next one a whole
/// period later (a hung server's second miss would come a timeout late). One that outlasts the
/// period is followed by the next at once, as a Go ticker's one buffered tick does. The first
/// tick is a period from now: the first probe runs at once, before any tick.
fn ticker(period: Duration) -> tokio::time::Interval {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}

/// Wait for the next tick of `ticks`: false if `stop` comes first.
async fn next_tick(ticks: &mut tokio::time::Interval, stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = ticks.tick() => true,
        _ = stop.cancelled() => false,
    }
}

/// Run one probe; Err carries what the kubelet would put in the Unhealthy event.
async fn check(
    node: &Node,
    worker: &PodWorker,
    context: &ExecContext,
    pod_ip: Ipv4Addr,
    probe: &Probe,
) -> Result<(), String> {
    match &probe.check {
        Check::Exec(command) => {
            let (jail, env, bwrap_pid) = context;
            let argv = probes::exec_argv(command, pod_ip);
            // As the kubelet's runtime does: inside the running container (`enter.rs`).
            let place = Place {
                bwrap: &node.config.tools.bwrap,
                jail,
                enter: *bwrap_pid,
            };
            match process::run_captured(&place, &argv, env, worker.host_user, probe.timeout).await {
                Ok((Some(0), _)) => Ok(()),
                Ok((_, output)) => Err(output.trim().to_string()),
                Err(error) => Err(error.to_string()),
            }
        }
        Check::Tcp { port } => probes::tcp(pod_ip, *port, probe.timeout).await,
        Check::Http { port, path } => probes::http(pod_ip, *port, path, probe.timeout).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Probes start a period apart whatever each takes (a 3 s probe every 4 s starts at 0, 4, 8),
    /// and one that outlasts the period is followed at once (a 5 s one at 0, 5, 10).
    #[tokio::test(start_paused = true)]
    async fn probes_start_a_period_apart_as_on_a_ticker() {
        let stop = CancellationToken::new();
        for (takes, expected) in [(3, [0, 4, 8]), (5, [0, 5, 10])] {
            let begin = tokio::time::Instant::now();
            let mut ticks = ticker(Duration::from_secs(4));
            let mut starts = Vec::new();
            for _ in 0..3 {
                starts.push(begin.elapsed().as_secs());
                tokio::time::sleep(Duration::from_secs(takes)).await;
                assert!(next_tick(&mut ticks, &stop).await);
            }
            assert_eq!(starts, expected, "a probe of {takes} s");
        }
        stop.cancel();
        let mut ticks = ticker(Duration::from_secs(4));
        assert!(!next_tick(&mut ticks, &stop).await, "a stop ends the wait");
    }

    #[test]
    fn back_off_durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_millis(200)), "200ms");
    }
}
