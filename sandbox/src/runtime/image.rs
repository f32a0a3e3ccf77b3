//! What an image name means on this node: `postgres:<tag>` is the installed PostgreSQL behind a
//! stand-in for the official image's entrypoint; `postgres-operator:<tag>` (the image the
//! Dockerfile builds, from any registry) is the stage binaries built from this checkout; any
//! other image runs its `command` with the host's tools, or, with no command, is only simulated
//! (there is no image to read one from).
//!
//! WORKSHOP.md, "Set-up: the sandbox". Kubernetes' rule for what a container runs: `command`
//! replaces the image's ENTRYPOINT and `args` its CMD; `args` alone keeps the ENTRYPOINT. The
//! official postgres image has ENTRYPOINT `docker-entrypoint.sh` and CMD `postgres`; the
//! Dockerfile's image has ENTRYPOINT `/stage06` and no CMD.
//!
//! What the sandbox does with what `kube/deployment.yaml` asks of the operator's pod:
//! - `command: ["/stage06"]`, `args: ["--namespace=$(NAMESPACE)"]`: run as written, `$(NAMESPACE)`
//!   expanded from the container's env (`env.rs`); every `/stageNN` binary is there, read-only.
//! - `env` from `fieldRef: metadata.namespace`: the downward API (`env.rs`).
//! - `runAsUser: 65532`, `runAsNonRoot`: honoured when the sandbox runs as root; otherwise the pod
//!   runs as the sandbox's own user (never root either way).
//! - `readOnlyRootFilesystem: true`: every pod's root is read-only here (the image's root,
//!   `jail.rs`); only the pod's private /tmp and /run and its volumes are writable.
//! - `allowPrivilegeEscalation: false`, `capabilities: drop: [ALL]`: what every pod gets anyway:
//!   an unprivileged user namespace with no capabilities. `seccompProfile` and `resources` are
//!   not applied (no seccomp filter, no cgroups).
//! - `imagePullPolicy: IfNotPresent`: nothing is pulled; the binaries must have been built
//!   (`cargo build --bins`), else the pull fails (`ErrImagePull`, then `ImagePullBackOff`).
//! - The distroless base has no shell; here every root binds the host's /usr, so the binaries
//!   find the same C library they were linked against (and a shell, which distroless lacks).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::jail::Mount;
use super::process;

/// Where the stand-in entrypoint appears inside a postgres pod, as in the official image.
pub(crate) const POSTGRES_ENTRYPOINT: &str = "/usr/local/bin/docker-entrypoint.sh";
/// The official image's `VOLUME`: an anonymous volume holds PGDATA when nothing is mounted there.
pub(crate) const POSTGRES_DATA_VOLUME: &str = "/var/lib/postgresql/data";

/// An image as this node runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Image {
    /// `postgres:<tag>` (or `docker.io/library/postgres:<tag>`): runs the installed PostgreSQL.
    Postgres { tag: String },
    /// `postgres-operator:<tag>` (any registry, any tag): the stage binaries of this checkout.
    Operator,
    /// Any other image: only its `command` can run, with the host's programs.
    Other,
    /// A postgres tag no registry has: the pull fails (`ErrImagePull`, then `ImagePullBackOff`).
    Unpullable { message: String },
}

/// Tag suffixes the official image publishes (`16-alpine`, `16.4-bookworm`).
const POSTGRES_VARIANTS: [&str; 5] = ["alpine", "bookworm", "bullseye", "trixie", "latest"];

impl Image {
    pub(crate) fn parse(image: &str) -> Image {
        let name = image
            .trim_start_matches("docker.io/")
            .trim_start_matches("library/");
        let (repository, tag) = match name.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, tag),
            _ => (name, "latest"),
        };
        let repository = repository.split('@').next().unwrap_or(repository);
        // `ghcr.io/someone/postgres-operator:v1`: whoever pushed it, it is the Dockerfile's image.
        if repository.rsplit('/').next() == Some(OPERATOR_REPOSITORY) {
            return Image::Operator;
        }
        if repository != "postgres" {
            return Image::Other;
        }
        let known = tag.split(['-', '.']).all(|part| {
            part.chars().all(|c| c.is_ascii_digit()) && !part.is_empty()
                || POSTGRES_VARIANTS.contains(&part)
                || part.starts_with("alpine3")
        });
        if known {
            Image::Postgres {
                tag: tag.to_string(),
            }
        } else {
            // containerd's words, as `kubectl describe pod` shows them.
            Image::Unpullable {
                message: format!(
                    "failed to pull and unpack image \"docker.io/library/postgres:{tag}\": failed to resolve reference \"docker.io/library/postgres:{tag}\": docker.io/library/postgres:{tag}: not found"
                ),
            }
        }
    }

    /// The image's `STOPSIGNAL`, which the runtime sends a container it stops (containerd reads
    /// it from the image's config; `command` does not change it): SIGTERM unless the image says
    /// otherwise. The official postgres image says `STOPSIGNAL SIGINT`, since to PostgreSQL
    /// SIGTERM is a smart shutdown, which waits for every client session to end (one waiting for
    /// a synchronous standby that is gone waits for ever), and SIGINT a fast shutdown, which
    /// ends them and then writes the shutdown checkpoint.
    pub(crate) fn stop_signal(&self) -> i32 {
        match self {
            Image::Postgres { .. } => process::SIGINT,
            Image::Operator | Image::Other | Image::Unpullable { .. } => process::SIGTERM,
        }
    }

    /// The major version a postgres tag asks for ("16" of "16.4-bookworm"), if it names one.
    pub(crate) fn postgres_major(&self) -> Option<&str> {
        match self {
            Image::Postgres { tag } => tag
                .split(['.', '-'])
                .next()
                .filter(|m| m.chars().all(|c| c.is_ascii_digit()) && !m.is_empty()),
            _ => None,
        }
    }
}

/// The argv a container runs, by Kubernetes' command/args rule; None when there is nothing to
/// run (another image without `command`: its ENTRYPOINT is unknown here).
pub(crate) fn argv(image: &Image, command: &[String], args: &[String]) -> Option<Vec<String>> {
    if !command.is_empty() {
        return Some(command.iter().chain(args).cloned().collect());
    }
    match image {
        Image::Postgres { .. } => {
            let mut argv = vec![POSTGRES_ENTRYPOINT.to_string()];
            if args.is_empty() {
                argv.push("postgres".to_string());
            } else {
                argv.extend(args.iter().cloned());
            }
            Some(argv)
        }
        Image::Operator => Some(
            std::iter::once(OPERATOR_ENTRYPOINT.to_string())
                .chain(args.iter().cloned())
                .collect(),
        ),
        Image::Other | Image::Unpullable { .. } => None,
    }
}

/// The last path component of the operator image's repository (the Dockerfile's `-t`).
pub(crate) const OPERATOR_REPOSITORY: &str = "postgres-operator";
/// The Dockerfile's ENTRYPOINT; it copies every stage binary to `/stageNN`.
pub(crate) const OPERATOR_ENTRYPOINT: &str = "/stage06";

/// The readiness agent the Dockerfile copies into the image beside the stages, which every
/// member pod's init container copies out of it.
pub(crate) const OPERATOR_AGENT: &str = "pg-ready";

/// What "pulling" the operator image means here: each stage binary cargo built into `binaries`
/// (`stage01`, `stage02`, ...; not `stage01.d` or `stage01-<hash>`) and the agent (`pg-ready`),
/// bound read-only at `/stageNN` and `/pg-ready` where the Dockerfile copies them. Err: the
/// pull fails, with what to do.
pub(crate) fn operator_mounts(binaries: Option<&Path>, image: &str) -> Result<Vec<Mount>, String> {
    let pull_failed = |why: String| {
        // containerd's opening words, as `kubectl describe pod` shows them, then the sandbox's.
        format!(
            "failed to pull and unpack image \"{image}\": {why}: build them with `cargo build --bins` (debug) or `cargo build --release --bins`, or start the sandbox with --operator-binaries DIR"
        )
    };
    let Some(dir) = binaries else {
        return Err(pull_failed(
            "the sandbox runs this image from the operator's binaries (stage01 ... stage06, pg-ready), and was given no directory holding them".to_string(),
        ));
    };
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| is_image_binary(path))
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(pull_failed(format!(
            "the sandbox runs this image from the operator's binaries (stage01 ... stage06, pg-ready), and {} holds none",
            dir.display()
        )));
    }
    Ok(found
        .into_iter()
        .filter_map(|source| {
            let name = source.file_name()?.to_str()?.to_string();
            Some(Mount {
                destination: PathBuf::from("/").join(name),
                source,
                writable: false,
            })
        })
        .collect())
}

/// `stage` then digits, or the agent: an executable regular file (following a symlink).
fn is_image_binary(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str());
    let stage = name
        .and_then(|n| n.strip_prefix("stage"))
        .is_some_and(|digits| !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()));
    (stage || name == Some(OPERATOR_AGENT))
        && std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn postgres_tags_are_recognised_and_a_bad_tag_cannot_be_pulled() {
        for good in [
            "postgres",
            "postgres:16",
            "postgres:16.4",
            "postgres:16.4-bookworm",
            "postgres:15-alpine3.20",
            "docker.io/library/postgres:17",
        ] {
            assert!(
                matches!(Image::parse(good), Image::Postgres { .. }),
                "{good}"
            );
        }
        assert!(matches!(
            Image::parse("postgres:notatag"),
            Image::Unpullable { .. }
        ));
        assert_eq!(Image::parse("busybox:1.36"), Image::Other);
        assert_eq!(Image::parse("postgres:16").stop_signal(), process::SIGINT);
        assert_eq!(Image::parse("busybox:1.36").stop_signal(), process::SIGTERM);
        assert_eq!(Image::parse("postgres:16.4").postgres_major(), Some("16"));
        assert_eq!(Image::parse("postgres").postgres_major(), None);
    }

    #[test]
    fn command_replaces_the_entrypoint_and_args_alone_keep_it() {
        let postgres = Image::parse("postgres:16");
        assert_eq!(
            argv(&postgres, &[], &[]),
            Some(strings(&[POSTGRES_ENTRYPOINT, "postgres"]))
        );
        assert_eq!(
            argv(
                &postgres,
                &[],
                &strings(&["postgres", "-c", "wal_keep_size=512MB"])
            ),
            Some(strings(&[
                POSTGRES_ENTRYPOINT,
                "postgres",
                "-c",
                "wal_keep_size=512MB"
            ]))
        );
        assert_eq!(
            argv(&postgres, &strings(&["sh", "-c"]), &strings(&["exit 3"])),
            Some(strings(&["sh", "-c", "exit 3"]))
        );
        assert_eq!(argv(&Image::Other, &[], &strings(&["x"])), None);
    }

    #[test]
    fn the_operator_image_is_recognised_from_any_registry_and_runs_stage06_unless_told_otherwise() {
        for operator in [
            "postgres-operator",
            "postgres-operator:latest",
            "localhost:5000/postgres-operator:dev",
            "ghcr.io/someone/postgres-operator@sha256:0123abcd",
        ] {
            assert_eq!(Image::parse(operator), Image::Operator, "{operator}");
        }
        assert_eq!(Image::parse("postgres-operator-ui:1"), Image::Other);
        assert_eq!(
            argv(&Image::Operator, &[], &[]),
            Some(strings(&[OPERATOR_ENTRYPOINT]))
        );
        assert_eq!(
            argv(&Image::Operator, &[], &strings(&["--namespace=db"])),
            Some(strings(&["/stage06", "--namespace=db"]))
        );
        assert_eq!(
            argv(
                &Image::Operator,
                &strings(&["/stage02"]),
                &strings(&["--server", "http://127.0.0.1:8001"])
            ),
            Some(strings(&["/stage02", "--server", "http://127.0.0.1:8001"]))
        );
    }

    #[test]
    fn the_stage_binaries_and_the_agent_are_bound_read_only_and_without_them_the_pull_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, mode: u32| {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").expect("write");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        let failed = operator_mounts(Some(dir.path()), "postgres-operator:latest")
            .expect_err("an empty directory holds no stages");
        assert!(
            failed.starts_with("failed to pull and unpack image \"postgres-operator:latest\": ")
                && failed.contains("cargo build --bins"),
            "{failed}"
        );
        assert!(operator_mounts(None, "postgres-operator").is_err());
        write("stage02", 0o755);
        write("stage01", 0o755);
        write("stage01.d", 0o644);
        write("stage03", 0o644);
        write("stage", 0o755);
        write("sandbox", 0o755);
        write("pg-ready", 0o755);
        let mounts = operator_mounts(Some(dir.path()), "postgres-operator").expect("stages");
        assert_eq!(
            mounts,
            vec![
                Mount {
                    source: dir.path().join("pg-ready"),
                    destination: "/pg-ready".into(),
                    writable: false
                },
                Mount {
                    source: dir.path().join("stage01"),
                    destination: "/stage01".into(),
                    writable: false
                },
                Mount {
                    source: dir.path().join("stage02"),
                    destination: "/stage02".into(),
                    writable: false
                },
            ]
        );
    }
}
