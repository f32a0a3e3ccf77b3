//! A container's view of the machine, as a bubblewrap command line: a root built for its image,
//! the pod's volumes writable at their `mountPath`, a private `/tmp` and `/run` (where postgres
//! puts its Unix socket), its own hostname, user, PID and IPC namespaces.
//!
//! WORKSHOP.md, "Set-up". A container on a node sees its image and its volumes, nothing of the
//! node. Here the image's programs are the host's, so its root is what they need and nothing
//! more: `/usr` read-only (with the `/bin`, `/lib*` and `/sbin` links of a merged-usr system,
//! or those directories where they are real), an `/etc` of the pod's own files plus the few the
//! C library and TLS read ([`HOST_ETC`]), the pod's volumes, its own `/tmp`, `/run` and `/dev`,
//! and `/proc` of its PID namespace. No other host path: not `/home`, `/opt`, `/srv`, `/var`,
//! nor the directory the sandbox runs in. Still shared with the host: the network namespace (each
//! pod has its own loopback address, `addresses.rs`) and the kernel.
//!
//! bwrap builds the new root on an empty tmpfs and creates mount points on it. A read-only
//! directory cannot receive a new mount point, so where a `mountPath` inside `/usr` does not
//! exist on the host (`/usr/local/bin/docker-entrypoint.sh`) its ancestors are rebuilt as tmpfs
//! directories whose other entries are bound one by one.
//! `--die-with-parent` plus a PID namespace (`--unshare-pid --as-pid-1`: the command is its
//! PID 1) mean that when the sandbox dies, even by SIGKILL, bwrap dies, the command dies, and the
//! kernel kills everything else in that PID namespace: no orphan postgres.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The host's root entries an image's programs need: `/usr`, and the merged-usr links to it
/// (or, on an older layout, the directories themselves). Those missing on this host are skipped.
const IMAGE_ROOT: [&str; 7] = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// What the image's programs read in `/etc` beyond the pod's own files (`volumes::write_etc`):
/// the dynamic loader's cache, the `alternatives` links some of `/usr/bin` points through, the
/// CA bundle and OpenSSL's configuration (libpq's TLS). All come with the packages in `/usr`.
pub(crate) const HOST_ETC: [&str; 4] = [
    "ld.so.cache",
    "alternatives",
    "ssl/certs",
    "ssl/openssl.cnf",
];

/// The official images' `/etc/localtime`: UTC.
const LOCALTIME: &str = "/usr/share/zoneinfo/Etc/UTC";

/// One bind mount into the container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    pub(crate) source: PathBuf,
    pub(crate) destination: PathBuf,
    pub(crate) writable: bool,
}

/// Everything bwrap needs to start one process of one container.
#[derive(Clone, Debug)]
pub(crate) struct Jail {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) hostname: String,
    /// The container's private /tmp and /run, on the host.
    pub(crate) tmp: PathBuf,
    pub(crate) run: PathBuf,
    /// Volumes, the generated /etc files, the entrypoint script.
    pub(crate) mounts: Vec<Mount>,
    /// Host directories the image's programs need outside `/usr`, bound read-only where they
    /// are (PostgreSQL installed under another prefix).
    pub(crate) host_paths: Vec<PathBuf>,
    pub(crate) working_dir: Option<String>,
}

impl Jail {
    /// Whether host path `path` is in the container's root at the same place: under `/usr`,
    /// the `/bin`-like links, [`Jail::host_paths`] or [`HOST_ETC`] (not a volume's contents).
    pub(crate) fn shows_host_path(&self, path: &Path) -> bool {
        IMAGE_ROOT
            .iter()
            .map(|entry| Path::new("/").join(entry))
            .chain(HOST_ETC.iter().map(|entry| Path::new("/etc").join(entry)))
            .chain(self.host_paths.iter().cloned())
            .any(|root| path.starts_with(root))
    }

    /// `bwrap` arguments up to (not including) the command.
    pub(crate) fn bwrap_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_os_string()));
        };
        let uid = self.uid.to_string();
        let gid = self.gid.to_string();
        push(&[
            &"--die-with-parent",
            &"--unshare-user",
            &"--uid",
            &uid,
            &"--gid",
            &gid,
            &"--unshare-pid",
            &"--as-pid-1",
            &"--unshare-ipc",
            &"--unshare-uts",
            &"--hostname",
            &self.hostname,
        ]);
        let mut mounts = self.mounts.clone();
        // Parents before children: a volume inside another volume is mounted on top of it.
        mounts.sort_by_key(|m| m.destination.components().count());
        let carve: Vec<&Path> = mounts
            .iter()
            .map(|m| m.destination.as_path())
            .filter(|d| std::fs::symlink_metadata(d).is_err())
            .collect();
        let image_root = IMAGE_ROOT
            .iter()
            .map(|entry| Path::new("/").join(entry))
            .chain(self.host_paths.iter().cloned());
        for path in image_root {
            bind_read_only(&path, &carve, &mut args);
        }
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_os_string()));
        };
        push(&[
            &"--dev",
            &"/dev",
            &"--tmpfs",
            &"/dev/shm",
            &"--proc",
            &"/proc",
        ]);
        push(&[&"--bind", &self.tmp, &"/tmp", &"--bind", &self.run, &"/run"]);
        // Debian's layout, and the official images': /var/run is /run.
        push(&[&"--symlink", &"../run", &"/var/run"]);
        push(&[&"--dir", &"/etc"]);
        for entry in HOST_ETC {
            let path = Path::new("/etc").join(entry);
            if path.exists() {
                push(&[&"--ro-bind", &path, &path]);
            }
        }
        if Path::new(LOCALTIME).exists() {
            push(&[&"--symlink", &LOCALTIME, &"/etc/localtime"]);
        }
        for mount in &mounts {
            let kind = if mount.writable {
                "--bind"
            } else {
                "--ro-bind"
            };
            push(&[&kind, &mount.source, &mount.destination]);
        }
        // The tmpfs root itself: read-only too, as the image's layers would be to a non-root user.
        push(&[&"--remount-ro", &"/"]);
        if let Some(dir) = &self.working_dir {
            push(&[&"--chdir", dir]);
        }
        args
    }
}

/// Bind host path `path` read-only at the same place (a symlink as the same symlink), except
/// an ancestor of a mount point that does not exist on the host: that becomes a directory whose
/// entries are bound in turn. Nothing if it does not exist.
fn bind_read_only(path: &Path, carve: &[&Path], args: &mut Vec<OsString>) {
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return;
    };
    if metadata.file_type().is_symlink() {
        if let Ok(target) = std::fs::read_link(path) {
            args.extend(["--symlink".into(), target.into(), path.into()]);
        }
    } else if metadata.is_dir() && carve.iter().any(|d| d.starts_with(path) && *d != path) {
        args.extend(["--dir".into(), path.into()]);
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .collect();
        entries.sort();
        for entry in entries {
            bind_read_only(&entry, carve, args);
        }
    } else {
        args.extend(["--ro-bind".into(), path.into(), path.into()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jail(mounts: Vec<Mount>) -> Jail {
        Jail {
            uid: 999,
            gid: 999,
            hostname: "pg-0".into(),
            tmp: "/data/pod/tmp".into(),
            run: "/data/pod/run".into(),
            mounts,
            host_paths: Vec::new(),
            working_dir: None,
        }
    }

    fn text(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_root_is_usr_the_pods_files_and_volumes() {
        let args = text(
            &jail(vec![
                Mount {
                    source: "/data/pod/volumes/data".into(),
                    destination: "/srv/no-such-dir-here/data".into(),
                    writable: true,
                },
                Mount {
                    source: "/data/bin/entrypoint.sh".into(),
                    destination: "/usr/no-such-dir-here/entrypoint.sh".into(),
                    writable: false,
                },
            ])
            .bwrap_args(),
        );
        let has = |window: &[&str]| args.windows(window.len()).any(|w| w == window);
        // /usr holds a mount point the host lacks: rebuilt, its entries bound one by one.
        assert!(has(&["--dir", "/usr"]), "{args:?}");
        assert!(has(&["--ro-bind", "/usr/share", "/usr/share"]), "{args:?}");
        assert!(has(&["--dir", "/etc"]), "{args:?}");
        // Nothing else of the host: a volume's parent is made by bwrap on the empty root.
        for host in ["/home", "/opt", "/root", "/mnt", "/media", "/work"] {
            let named = |a: &String| a == host || a.starts_with(&format!("{host}/"));
            assert!(!args.iter().any(named), "{host}: {args:?}");
        }
        for host in ["/srv", "/var"] {
            assert!(!has(&["--ro-bind", host, host]), "{host}: {args:?}");
        }
        assert!(!has(&["--dir", "/srv"]), "{args:?}");
        assert!(has(&[
            "--bind",
            "/data/pod/volumes/data",
            "/srv/no-such-dir-here/data"
        ]));
        assert!(has(&["--bind", "/data/pod/tmp", "/tmp"]));
        assert!(has(&["--symlink", "../run", "/var/run"]));
        assert!(has(&["--uid", "999", "--gid", "999"]));
        assert!(!has(&["--ro-bind", "/proc", "/proc"]), "{args:?}");
        assert!(has(&["--die-with-parent"]) && has(&["--unshare-pid", "--as-pid-1"]));
    }

    /// A program is found only where the root shows it: not in the host's /home or /opt.
    #[test]
    fn only_the_roots_host_paths_are_shown() {
        let mut jail = jail(Vec::new());
        assert!(jail.shows_host_path(Path::new("/usr/bin/sh")));
        assert!(jail.shows_host_path(Path::new("/bin/sh")));
        assert!(jail.shows_host_path(Path::new("/etc/ssl/certs/ca-certificates.crt")));
        assert!(!jail.shows_host_path(Path::new("/etc/shadow")));
        assert!(!jail.shows_host_path(Path::new("/home/you/tool")));
        assert!(!jail.shows_host_path(Path::new("/opt/pgsql/bin/postgres")));
        jail.host_paths.push("/opt/pgsql".into());
        assert!(jail.shows_host_path(Path::new("/opt/pgsql/bin/postgres")));
    }
}
