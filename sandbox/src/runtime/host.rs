//! What the machine offers the process runtime: loopback addresses beyond 127.0.0.1, a
//! PostgreSQL server installation, bubblewrap, and user namespaces. Found once at start; the banner and the errors say what is missing.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Debian installs each PostgreSQL major version in
//! `/usr/lib/postgresql/N/bin` and puts only wrappers on PATH, so that directory is looked at
//! first; elsewhere `pg_config --bindir` or a `postgres` on PATH will do.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian and Ubuntu install each PostgreSQL major version.
const DEBIAN_POSTGRES_ROOT: &str = "/usr/lib/postgresql";

/// How to get what is missing, printed with every "not found".
pub const INSTALL_HINT: &str = "apt install postgresql bubblewrap";

/// The host programs pods run with.
#[derive(Clone, Debug)]
pub struct HostTools {
    /// The directory holding `postgres`, `initdb`, `pg_ctl`, `pg_basebackup`, `psql`, ...
    pub postgres_bin: PathBuf,
    /// "15.14", from `postgres --version`.
    pub postgres_version: String,
    pub bwrap: PathBuf,
}

/// Why the process runtime cannot run here.
#[derive(Debug)]
pub enum HostError {
    /// Only 127.0.0.1 is a local address (macOS, where every other loopback address needs an
    /// `ifconfig lo0 alias`), so pods cannot each have their own.
    NoLoopbackAliases {
        source: std::io::Error,
    },
    NoPostgres,
    NoBubblewrap,
    /// bwrap exists but could not create a sandbox (user namespaces disabled, or no kernel support).
    BubblewrapFails {
        stderr: String,
    },
    /// Creating or preparing the data directory failed.
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The sandbox runs as root, so pods run as another user, who cannot enter `blocked`, a
    /// directory on the way to the data directory (bwrap would fail with "Can't find source
    /// path ...: Permission denied" in every pod).
    DataDirUnreachable {
        data_dir: PathBuf,
        blocked: PathBuf,
        mode: u32,
        pod_user: u32,
    },
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::NoLoopbackAliases { source } => write!(
                f,
                "pods need addresses of their own in 127.0.0.0/8, which Linux gives every process but this system does not (binding {LOOPBACK_PROBE} failed: {source}); run the sandbox on Linux (or in a Linux VM or container) to run pods as processes"
            ),
            HostError::NoPostgres => write!(
                f,
                "no PostgreSQL server found (looked in {DEBIAN_POSTGRES_ROOT}/*/bin, pg_config --bindir and PATH); install it: {INSTALL_HINT}"
            ),
            HostError::NoBubblewrap => {
                write!(f, "bubblewrap (bwrap) not found on PATH; install it: {INSTALL_HINT}")
            }
            HostError::BubblewrapFails { stderr } => write!(
                f,
                "bwrap cannot create a sandbox here ({}); user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)",
                stderr.trim()
            ),
            HostError::DataDir { path, source } => {
                write!(f, "cannot prepare the data directory {}: {source}", path.display())
            }
            HostError::DataDirUnreachable { data_dir, blocked, mode, pod_user } => write!(
                f,
                "pods cannot reach the data directory {}: they run as uid {pod_user}, which may not enter {} (mode {:o}); allow it with `chmod o+x {}`, or choose a --data-dir below directories everyone may enter (such as /var/tmp)",
                data_dir.display(),
                blocked.display(),
                mode & 0o7777,
                blocked.display()
            ),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::DataDir { source, .. } => Some(source),
            HostError::NoLoopbackAliases { source } => Some(source),
            _ => None,
        }
    }
}

/// The first directory on the way to `path` (itself included) that a process of `uid`/`gid`,
/// with no supplementary groups, may not enter (search, the `x` bit), with its mode. Read from
/// the mode bits, as the kernel checks them for a non-root user; ACLs are not looked at.
pub(crate) fn first_unsearchable(
    path: &Path,
    uid: u32,
    gid: u32,
) -> std::io::Result<Option<(PathBuf, u32)>> {
    use std::os::unix::fs::MetadataExt;
    // Symbolic links resolved: the kernel checks the directories the path really crosses.
    let path = path.canonicalize()?;
    let mut ancestors: Vec<&Path> = path.ancestors().collect();
    ancestors.reverse();
    for dir in ancestors {
        let meta = std::fs::metadata(dir)?;
        let mode = meta.mode();
        let search = if meta.uid() == uid {
            mode & 0o100
        } else if meta.gid() == gid {
            mode & 0o010
        } else {
            mode & 0o001
        };
        if search == 0 {
            return Ok(Some((dir.to_path_buf(), mode)));
        }
    }
    Ok(None)
}

impl HostTools {
    /// Find PostgreSQL and bubblewrap, and check that bwrap can make a user namespace.
    pub fn detect() -> Result<HostTools, HostError> {
        check_loopback_aliases(|address| std::net::TcpListener::bind(address).map(drop))?;
        let postgres_bin = find_postgres_bin().ok_or(HostError::NoPostgres)?;
        let bwrap = find_on_path("bwrap").ok_or(HostError::NoBubblewrap)?;
        let postgres_version = postgres_version(&postgres_bin).ok_or(HostError::NoPostgres)?;
        check_bwrap(&bwrap)?;
        Ok(HostTools {
            postgres_bin,
            postgres_version,
            bwrap,
        })
    }

    /// The major version, "15" of "15.14".
    pub fn postgres_major(&self) -> &str {
        self.postgres_version
            .split('.')
            .next()
            .unwrap_or(&self.postgres_version)
    }
}

/// The newest `/usr/lib/postgresql/N/bin` with a `postgres` in it, else `pg_config --bindir`,
/// else the directory of a `postgres` on PATH.
fn find_postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_POSTGRES_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("postgres").is_file().then_some((major, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|bin| bin.join("postgres").is_file());
    from_pg_config
        .or_else(|| find_on_path("postgres").and_then(|p| p.parent().map(Path::to_path_buf)))
}

/// `postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)` → `15.14`.
fn postgres_version(bin: &Path) -> Option<String> {
    let output = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_postgres_version(&text)
}

pub(crate) fn parse_postgres_version(text: &str) -> Option<String> {
    text.split_whitespace()
        .find(|word| word.starts_with(|c: char| c.is_ascii_digit()))
        .map(String::from)
}

pub(crate) fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// An address that is local only where the whole of 127.0.0.0/8 is: on Linux, not on macOS.
const LOOPBACK_PROBE: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), 0);

/// Can pods have their own loopback addresses? `bind` tries to listen on an address (port 0:
/// any free port); if 127.0.0.2 cannot be bound, only 127.0.0.1 is local here.
pub(crate) fn check_loopback_aliases(
    bind: impl Fn(SocketAddr) -> std::io::Result<()>,
) -> Result<(), HostError> {
    bind(LOOPBACK_PROBE).map_err(|source| HostError::NoLoopbackAliases { source })
}

/// Run `true` in a throw-away user namespace, as every pod will.
fn check_bwrap(bwrap: &Path) -> Result<(), HostError> {
    let output = Command::new(bwrap)
        .args(["--unshare-user", "--ro-bind", "/", "/", "true"])
        .output()
        .map_err(|e| HostError::BubblewrapFails {
            stderr: e.to_string(),
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(HostError::BubblewrapFails {
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_first_number_in_postgres_version_output() {
        assert_eq!(
            parse_postgres_version("postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n"),
            Some("15.14".to_string())
        );
        assert_eq!(parse_postgres_version("nothing here"), None);
    }

    #[test]
    fn pods_need_a_second_loopback_address_to_be_bindable() {
        let tried = std::cell::Cell::new(None);
        let linux = check_loopback_aliases(|address| {
            tried.set(Some(address));
            Ok(())
        });
        assert!(linux.is_ok());
        assert_eq!(
            tried.get(),
            Some("127.0.0.2:0".parse().expect("an address"))
        );
        // macOS answers EADDRNOTAVAIL for any 127.x.y.z but 127.0.0.1 without an alias.
        let macos = check_loopback_aliases(|_| {
            Err(std::io::Error::from(std::io::ErrorKind::AddrNotAvailable))
        });
        let message = macos.map_err(|e| e.to_string()).expect_err("no aliases");
        assert!(message.contains("binding 127.0.0.2:0 failed"), "{message}");
    }

    /// A 0700 directory stops another user at its door; `o+x` lets them through.
    #[test]
    fn a_private_directory_on_the_way_is_found() {
        use std::os::unix::fs::PermissionsExt;
        let private = tempfile::tempdir().expect("a temporary directory");
        let inner = private.path().join("data");
        std::fs::create_dir(&inner).expect("mkdir");
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod");
        let found = first_unsearchable(&inner, 54_321, 54_321).expect("readable metadata");
        let canonical = private.path().canonicalize().expect("canonical");
        assert_eq!(found, Some((canonical, 0o40700)));
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o701))
            .expect("chmod");
        assert_eq!(
            first_unsearchable(&inner, 54_321, 54_321).expect("readable metadata"),
            None
        );
    }
}
