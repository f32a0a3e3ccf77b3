//! Support: skip it on first read — the names every object of a cluster shares: the role label,
//! the Secret's and ConfigMap's keys, the containers, the port, and the official image's user and
//! paths. `manifests.rs` builds the objects from them.
//!
//! WORKSHOP.md, step 04 ("The objects a cluster owns").

/// A pod's place in its cluster: `primary` or `replica`. The Services select on it.
pub const ROLE_LABEL: &str = "workshop.example.com/role";
/// The Secret's keys.
pub const SUPERUSER_PASSWORD_KEY: &str = "superuser-password";
pub const REPLICATION_PASSWORD_KEY: &str = "replication-password";
/// The ConfigMap key, and so the file name in `/docker-entrypoint-initdb.d`: the entrypoint
/// runs `*.sh` and `*.sql` there in sorted order.
pub const INIT_SCRIPT_KEY: &str = "10-replication.sh";
/// The name of the postgres container in every pod (what `pods/exec` asks for).
pub const POSTGRES_CONTAINER: &str = "postgres";
/// The name of a replica's init container.
pub const CLONE_CONTAINER: &str = "clone";
pub const POSTGRES_PORT: u16 = 5432;
/// The container port's and the Services' port's name.
pub const PORT_NAME: &str = "postgres";
/// The official image's postgres user and group (created with fixed ids in its Dockerfile).
pub const POSTGRES_UID: u32 = 999;
/// Where the emptyDir is mounted: the image's `VOLUME` up to PG 17.
pub const DATA_MOUNT: &str = "/var/lib/postgresql/data";
/// PGDATA, a subdirectory of the mount, as the image's docs recommend: a mount point may hold
/// files of its own (`lost+found` on a fresh ext4 volume) and initdb refuses a non-empty
/// directory. Setting it explicitly also keeps PG 18 images (default PGDATA moved to
/// `/var/lib/postgresql/18/docker`) on our volume.
pub const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// Where the official entrypoint looks for init scripts.
pub const INITDB_DIR: &str = "/docker-entrypoint-initdb.d";
