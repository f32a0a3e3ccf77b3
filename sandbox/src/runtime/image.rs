//! What an image name means on this node: `postgres:<tag>` is the installed PostgreSQL behind a
//! stand-in for the official image's entrypoint; any other image runs its `command` with the
//! host's tools, or, with no command, is only simulated (there is no image to read one from).
//!
//! WORKSHOP.md, "Set-up: the sandbox". Kubernetes' rule for what a container runs: `command`
//! replaces the image's ENTRYPOINT and `args` its CMD; `args` alone keeps the ENTRYPOINT. The
//! official postgres image has ENTRYPOINT `docker-entrypoint.sh` and CMD `postgres`.

/// Where the stand-in entrypoint appears inside a postgres pod, as in the official image.
pub(crate) const POSTGRES_ENTRYPOINT: &str = "/usr/local/bin/docker-entrypoint.sh";
/// The official image's `VOLUME`: an anonymous volume holds PGDATA when nothing is mounted there.
pub(crate) const POSTGRES_DATA_VOLUME: &str = "/var/lib/postgresql/data";

/// An image as this node runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Image {
    /// `postgres:<tag>` (or `docker.io/library/postgres:<tag>`): runs the installed PostgreSQL.
    Postgres { tag: String },
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
        Image::Other | Image::Unpullable { .. } => None,
    }
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
}
