//! Entering a running container: one more process in the namespaces its PID 1 already has, much
//! as `runc exec` does, for the kubelet's exec probes (`kubectl exec` gets a jail of its own,
//! `exec.rs` says why).
//!
//! WORKSHOP.md, "Set-up: the sandbox". Why: a new bwrap jail builds a user, mount, PID, IPC and
//! UTS namespace and a hundred bind mounts for every process, and tears them down after it:
//! about 18 ms of CPU, four times the `pg_isready` it runs. An exec readiness probe every 2 s
//! on 18 pods is nine of them a second. Entering is a few `setns(2)` calls.
//!
//! The order matters, and comes from how bwrap builds a jail. Run unprivileged, it creates an
//! outer user namespace in which it is root, makes the mount, PID, IPC and UTS namespaces there
//! (so they belong to it), then an inner user namespace that maps the pod's uid, and runs the
//! command in that. Nothing lives in the outer one any more, so it is reached from the inner
//! one's parent (`NS_GET_PARENT`): enter it (its owner, our uid, has every capability in it),
//! then the namespaces it owns, then the inner one, where our uid is the pod's and `execve`
//! drops every capability.
//!
//! The PID namespace is not entered (where `runc exec` would): a process started there whose
//! parent ends first (a probe's `sh` killed at its timeout, its `pg_isready` still running) is
//! handed to the container's PID 1, and postgres as PID 1 takes the death of a child it does
//! not know, with an exit code other than 0 or 1, for a crashed backend: it ends every
//! session and recovers. Outside it, such an orphan goes to the machine's init. `ps` inside
//! still lists the container's processes (its `/proc` is the container's); the price is that
//! `/proc/self` names nothing there, which no probe of ours reads.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use tokio::process::Command;

/// `ioctl(2)` request of `<linux/nsfs.h>`: the parent of a user namespace, as a new descriptor
/// (close-on-exec). `_IO(0xb7, 0x2)`.
const NS_GET_PARENT: libc::c_ulong = 0xb702;

/// The namespaces of one running container, open, in the order they are entered.
pub(crate) struct Namespaces {
    /// The user namespace that owns the others first (see the module doc).
    entries: Vec<OwnedFd>,
}

impl Namespaces {
    /// The namespaces of the process `pid` (the container's PID 1 as this machine sees it).
    pub(crate) fn of(pid: u32) -> std::io::Result<Namespaces> {
        let open = |name: &str| -> std::io::Result<OwnedFd> {
            Ok(File::open(format!("/proc/{pid}/ns/{name}"))?.into())
        };
        let inner = open("user")?;
        // SAFETY: NS_GET_PARENT takes no argument and returns a new descriptor or -1; the one
        // it returns is owned here and nowhere else.
        let parent = unsafe { libc::ioctl(inner.as_raw_fd(), NS_GET_PARENT) };
        let mut outer = None;
        if parent >= 0 {
            // SAFETY: a descriptor ioctl just opened for us (see above).
            let parent = unsafe { OwnedFd::from_raw_fd(parent) };
            let ours = std::fs::metadata("/proc/self/ns/user")?.ino();
            if File::from(parent.try_clone()?).metadata()?.ino() != ours {
                outer = Some(parent);
            }
        }
        let owned = ["mnt", "ipc", "uts"]
            .into_iter()
            .map(open)
            .collect::<std::io::Result<Vec<_>>>()?;
        let entries = match outer {
            // Outer, the namespaces it owns, then the inner one (see the module doc).
            Some(outer) => std::iter::once(outer).chain(owned).chain([inner]).collect(),
            // A jail with one user namespace (its parent is ours): that one owns the others,
            // so it is entered first.
            None => std::iter::once(inner).chain(owned).collect(),
        };
        Ok(Namespaces { entries })
    }

    /// Make `command` enter these namespaces between fork and exec, and start in `working_dir`
    /// (the container's root when none): entering a mount namespace moves to its root.
    pub(crate) fn enter_on_spawn(
        self,
        command: &mut Command,
        working_dir: Option<&str>,
    ) -> std::io::Result<()> {
        let dir = CString::new(working_dir.unwrap_or("/"))
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let entries = self.entries;
        // SAFETY: the closure runs in the forked child before exec and only makes system calls
        // (setns, chdir) on memory prepared before the fork: no allocation, no lock.
        unsafe {
            command.pre_exec(move || {
                for fd in &entries {
                    if libc::setns(fd.as_raw_fd(), 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::chdir(dir.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(())
    }
}
