//! A container's view of the machine, as a bubblewrap command line: the host's files read-only,
//! the pod's volumes writable at their `mountPath`, a private `/tmp` and `/run` (where postgres
//! puts its Unix socket), its own hostname, user, PID and IPC namespaces.
//!
//! WORKSHOP.md, "Set-up: the sandbox". bwrap builds the new root on an empty tmpfs, so the host
//! is mirrored into it entry by entry, read-only. A read-only directory cannot receive a new
//! mount point, so where a `mountPath` does not exist on the host (`/var/lib/postgresql/data`)
//! its ancestors are rebuilt as tmpfs directories whose other entries are bound one by one.
//! `--die-with-parent` plus a PID namespace (`--unshare-pid --as-pid-1`: the command is its
//! PID 1) mean that when the sandbox dies, even by SIGKILL, bwrap dies, the command dies, and the
//! kernel kills everything else in that PID namespace: no orphan postgres.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Root entries never mirrored: bwrap makes its own /proc and /dev, and /tmp and /run are the
/// container's own.
const NOT_MIRRORED: [&str; 4] = ["proc", "dev", "tmp", "run"];

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
    pub(crate) working_dir: Option<String>,
}

impl Jail {
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
        mirror(Path::new("/"), &carve, &mut args);
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

/// Bind every entry of host directory `dir` read-only at the same place, except the ancestors
/// of mount points that do not exist on the host: those become directories, mirrored in turn.
fn mirror(dir: &Path, carve: &[&Path], args: &mut Vec<OsString>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .collect();
    entries.sort();
    for path in entries {
        let is_root_entry = dir == Path::new("/");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if is_root_entry && NOT_MIRRORED.contains(&name) {
            continue;
        }
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if metadata.file_type().is_symlink() {
            if let Ok(target) = std::fs::read_link(&path) {
                args.extend(["--symlink".into(), target.into(), path.into()]);
            }
        } else if metadata.is_dir() && carve.iter().any(|d| d.starts_with(&path) && *d != path) {
            args.extend(["--dir".into(), path.clone().into()]);
            mirror(&path, carve, args);
        } else {
            args.extend(["--ro-bind".into(), path.clone().into(), path.into()]);
        }
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
            working_dir: None,
        }
    }

    fn text(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_host_is_mirrored_read_only_and_volumes_bound_writable() {
        let args = text(
            &jail(vec![Mount {
                source: "/data/pod/volumes/data".into(),
                destination: "/srv/no-such-dir-here/data".into(),
                writable: true,
            }])
            .bwrap_args(),
        );
        let has = |window: &[&str]| args.windows(window.len()).any(|w| w == window);
        assert!(has(&["--ro-bind", "/usr", "/usr"]), "{args:?}");
        // The missing mount point's existing ancestor is rebuilt, not bound.
        assert!(has(&["--dir", "/srv"]), "{args:?}");
        assert!(!has(&["--ro-bind", "/srv", "/srv"]), "{args:?}");
        assert!(has(&[
            "--bind",
            "/data/pod/volumes/data",
            "/srv/no-such-dir-here/data"
        ]));
        assert!(has(&["--bind", "/data/pod/tmp", "/tmp"]));
        assert!(has(&["--uid", "999", "--gid", "999"]));
        assert!(!has(&["--ro-bind", "/proc", "/proc"]), "{args:?}");
        assert!(has(&["--die-with-parent"]) && has(&["--unshare-pid", "--as-pid-1"]));
    }
}
