//! A pod's files on the host: its volumes (`emptyDir`, `configMap`, `secret`,
//! `persistentVolumeClaim`), each container's private /tmp and /run, and the generated
//! /etc/passwd, /etc/group and /etc/hosts every container sees.
//!
//! WORKSHOP.md, "Set-up: the sandbox". Layout under the data directory:
//! `pods/<uid>/volumes/<volume>`, `pods/<uid>/containers/<container>/{tmp,run,log}`,
//! `pods/<uid>/etc/`, and `claims/<namespace>/<claim>`, a symlink to the bound PersistentVolume's
//! directory `persistentvolumes/pvc-<claim uid>` (`claims.rs`), which outlives its pods and goes
//! with the claim. ConfigMap and Secret files are
//! written when the pod starts and not kept current afterwards (a simplification).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use super::env::Lookup;
use super::jail::Mount;

/// The kubelet's FailedMount message for a volume it cannot set up.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MountError(pub(crate) String);

/// Who owns the pod's files: the user its processes run as (None: leave them to us).
pub(crate) type Owner = Option<(u32, u32)>;

/// Create a directory (and parents) with `mode`, owned by `owner`.
pub(crate) fn make_dir(path: &Path, mode: u32, owner: Owner) -> std::io::Result<()> {
    std::fs::create_dir_all(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

fn write_file(path: &Path, bytes: &[u8], mode: u32, owner: Owner) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    file.write_all(bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid))?;
    }
    Ok(())
}

/// Set up every volume of `pod`: name → directory on the host.
pub(crate) fn prepare(
    pod: &Value,
    pod_dir: &Path,
    claims_dir: &Path,
    objects: &dyn Lookup,
    claim_exists: &dyn Fn(&str) -> bool,
    service_account_token: Option<&str>,
    owner: Owner,
) -> Result<BTreeMap<String, PathBuf>, MountError> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let mut prepared = BTreeMap::new();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let name = volume["name"].as_str().unwrap_or_default();
        let failed = |e: std::io::Error| {
            MountError(format!(
                "MountVolume.SetUp failed for volume \"{name}\" : {e}"
            ))
        };
        let dir = if volume["emptyDir"].is_object() {
            let dir = pod_dir.join("volumes").join(name);
            // An emptyDir is world-writable, as the kubelet makes it.
            make_dir(&dir, 0o777, owner).map_err(failed)?;
            dir
        } else if volume["configMap"].is_object() || volume["secret"].is_object() {
            let secret = volume["secret"].is_object();
            let source = if secret {
                &volume["secret"]
            } else {
                &volume["configMap"]
            };
            let object_name = source[if secret { "secretName" } else { "name" }]
                .as_str()
                .unwrap_or_default();
            let object = if secret {
                objects.secret(object_name)
            } else {
                objects.config_map(object_name)
            };
            let dir = pod_dir.join("volumes").join(name);
            match object {
                Some(object) => {
                    make_dir(&dir, 0o755, owner).map_err(failed)?;
                    write_keys(&dir, source, &object, secret, owner).map_err(failed)?;
                }
                None if source["optional"].as_bool() == Some(true) => {
                    make_dir(&dir, 0o755, owner).map_err(failed)?;
                }
                None => {
                    let kind = if secret { "secret" } else { "configmap" };
                    return Err(MountError(format!(
                        "MountVolume.SetUp failed for volume \"{name}\" : {kind} \"{object_name}\" not found"
                    )));
                }
            }
            dir
        } else if volume["projected"].is_object() {
            let dir = pod_dir.join("volumes").join(name);
            make_dir(&dir, 0o755, owner).map_err(failed)?;
            write_projected(
                &dir,
                pod,
                &volume["projected"],
                objects,
                service_account_token,
                owner,
            )
            .map_err(|ProjectionError(message)| {
                MountError(format!(
                    "MountVolume.SetUp failed for volume \"{name}\" : {message}"
                ))
            })?;
            dir
        } else if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
            super::claims::volume_dir(claims_dir, namespace, claim, claim_exists)
                .map_err(MountError)?
        } else {
            return Err(MountError(format!(
                "volume \"{name}\": the sandbox supports emptyDir, configMap, secret, projected and persistentVolumeClaim volumes only"
            )));
        };
        prepared.insert(name.to_string(), dir);
    }
    Ok(prepared)
}

/// Why a projected volume could not be written.
struct ProjectionError(String);

impl From<std::io::Error> for ProjectionError {
    fn from(error: std::io::Error) -> Self {
        ProjectionError(error.to_string())
    }
}

/// A projected volume: each source's files in one directory, as the kubelet writes the
/// service-account volume `kube-api-access-*` — `token` (a token bound to this pod),
/// `ca.crt` (from the `kube-root-ca.crt` ConfigMap) and `namespace` (the downward API).
/// Written once when the pod starts: the token is valid for the pod's life (see
/// `Node::pod_token`), so unlike the kubelet the sandbox never rewrites it.
fn write_projected(
    dir: &Path,
    pod: &Value,
    projected: &Value,
    objects: &dyn Lookup,
    service_account_token: Option<&str>,
    owner: Owner,
) -> Result<(), ProjectionError> {
    let default_mode = projected["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    for source in projected["sources"].as_array().into_iter().flatten() {
        if source["serviceAccountToken"].is_object() {
            let token = service_account_token.ok_or_else(|| {
                ProjectionError(format!(
                    "failed to fetch token: serviceaccount \"{}\" not found",
                    pod["spec"]["serviceAccountName"]
                        .as_str()
                        .unwrap_or("default")
                ))
            })?;
            let path = source["serviceAccountToken"]["path"]
                .as_str()
                .unwrap_or("token");
            // The token is the pod's credential: readable by its owner only, whatever
            // defaultMode says (the kubelet makes it 0600 too when it sets fsGroup).
            write_file(
                &dir.join(safe_relative(path)),
                token.as_bytes(),
                0o600,
                owner,
            )?;
        } else if source["configMap"].is_object() || source["secret"].is_object() {
            let secret = source["secret"].is_object();
            let inner = if secret {
                &source["secret"]
            } else {
                &source["configMap"]
            };
            let object_name = inner["name"].as_str().unwrap_or_default();
            let object = if secret {
                objects.secret(object_name)
            } else {
                objects.config_map(object_name)
            };
            match object {
                Some(object) => {
                    let mut with_mode = inner.clone();
                    if with_mode["defaultMode"].is_null() {
                        with_mode["defaultMode"] = serde_json::json!(default_mode);
                    }
                    write_keys(dir, &with_mode, &object, secret, owner)?;
                }
                None if inner["optional"].as_bool() == Some(true) => {}
                None => {
                    let kind = if secret { "secret" } else { "configmap" };
                    return Err(ProjectionError(format!(
                        "{kind} \"{object_name}\" not found"
                    )));
                }
            }
        } else if source["downwardAPI"].is_object() {
            for item in source["downwardAPI"]["items"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let path = item["path"].as_str().unwrap_or_default();
                let value = match item["fieldRef"]["fieldPath"].as_str() {
                    Some("metadata.namespace") => pod["metadata"]["namespace"].as_str(),
                    Some("metadata.name") => pod["metadata"]["name"].as_str(),
                    Some("metadata.uid") => pod["metadata"]["uid"].as_str(),
                    Some("spec.serviceAccountName") => pod["spec"]["serviceAccountName"].as_str(),
                    _ => None,
                };
                if let (false, Some(value)) = (path.is_empty(), value) {
                    write_file(
                        &dir.join(safe_relative(path)),
                        value.as_bytes(),
                        default_mode,
                        owner,
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Each key (or each `items[]` entry) as a file, with `defaultMode`/`mode` (default 0644).
fn write_keys(
    dir: &Path,
    source: &Value,
    object: &Value,
    secret: bool,
    owner: Owner,
) -> std::io::Result<()> {
    let default_mode = source["defaultMode"].as_u64().unwrap_or(0o644) as u32;
    let bytes_of = |key: &str| -> Option<Vec<u8>> {
        let value = object["data"][key].as_str()?;
        if secret {
            base64::engine::general_purpose::STANDARD.decode(value).ok()
        } else {
            Some(value.as_bytes().to_vec())
        }
    };
    match source["items"].as_array() {
        Some(items) => {
            for item in items {
                let key = item["key"].as_str().unwrap_or_default();
                let path = item["path"].as_str().unwrap_or(key);
                let mode = item["mode"]
                    .as_u64()
                    .map(|m| m as u32)
                    .unwrap_or(default_mode);
                if let Some(bytes) = bytes_of(key) {
                    write_file(&dir.join(safe_relative(path)), &bytes, mode, owner)?;
                }
            }
        }
        None => {
            for key in object["data"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
            {
                if let Some(bytes) = bytes_of(key) {
                    write_file(&dir.join(safe_relative(key)), &bytes, default_mode, owner)?;
                }
            }
        }
    }
    Ok(())
}

/// A key or item path stays inside the volume: no `..`, no leading `/`.
fn safe_relative(path: &str) -> PathBuf {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".." && *part != ".")
        .collect()
}

/// A container's bind mounts for its `volumeMounts`; a mount naming no volume is an error.
pub(crate) fn mounts_for(
    container: &Value,
    volumes: &BTreeMap<String, PathBuf>,
    pod: &Value,
) -> Result<Vec<Mount>, MountError> {
    let read_only_kind = |name: &str| {
        pod["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == name)
            .is_some_and(|v| {
                v["configMap"].is_object()
                    || v["secret"].is_object()
                    || v["projected"].is_object()
                    || super::claims::read_only(v)
            })
    };
    let mut mounts = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let name = mount["name"].as_str().unwrap_or_default();
        let Some(dir) = volumes.get(name) else {
            return Err(MountError(format!(
                "volumeMount \"{name}\" names no volume of the pod"
            )));
        };
        let source = match mount["subPath"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => {
                let source = dir.join(safe_relative(sub));
                // The kubelet creates a missing subPath directory.
                let _ = std::fs::create_dir_all(&source);
                source
            }
            None => dir.clone(),
        };
        mounts.push(Mount {
            source,
            destination: without_var_run_link(mount["mountPath"].as_str().unwrap_or("/")),
            writable: mount["readOnly"].as_bool() != Some(true) && !read_only_kind(name),
        });
    }
    Ok(mounts)
}

/// `/var/run/...` as `/run/...`: every container's /var/run is a link to its own /run
/// (`jail.rs`), and bubblewrap cannot create a mount point through a symlink (the
/// service-account volume's `/var/run/secrets/kubernetes.io/serviceaccount` would fail). The
/// path reads the same inside.
fn without_var_run_link(mount_path: &str) -> PathBuf {
    match mount_path.strip_prefix("/var/run/") {
        Some(rest) => Path::new("/run").join(rest),
        _ => PathBuf::from(mount_path),
    }
}

/// The files of a pod's own /etc, written by [`write_etc`] and [`write_hosts`], bound read-only
/// into each of its containers (the rest of its /etc is `jail::HOST_ETC`).
pub(crate) const POD_ETC: [&str; 6] = [
    "passwd",
    "group",
    "hosts",
    "hostname",
    "resolv.conf",
    "nsswitch.conf",
];

/// The pod's /etc: passwd and group naming root, nobody and the pod's user `uid`/`gid` (initdb
/// refuses to run as a user with no name, which the official image solves the same way, with
/// nss_wrapper) and nobody else; hostname; resolv.conf with the host's name servers (the pod
/// shares its network); nsswitch.conf reading files, then DNS. /etc/hosts is [`write_hosts`]'s.
pub(crate) fn write_etc(
    etc: &Path,
    uid: u32,
    gid: u32,
    user_name: &str,
    hostname: &str,
) -> std::io::Result<()> {
    std::fs::create_dir_all(etc)?;
    let mut passwd = String::from(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    );
    if uid != 0 && uid != 65534 {
        passwd.push_str(&format!(
            "{user_name}:x:{uid}:{gid}:{user_name}:/var/lib/postgresql:/bin/sh\n"
        ));
    }
    let mut group = String::from("root:x:0:\nnogroup:x:65534:\n");
    if gid != 0 && gid != 65534 {
        group.push_str(&format!("{user_name}:x:{gid}:\n"));
    }
    // Only what a resolver reads; a `search` line would send the pods' short names to the
    // host's DNS, where no Service is known (they are in /etc/hosts).
    let resolv: String = std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("nameserver") || line.starts_with("options"))
        .map(|line| format!("{line}\n"))
        .collect();
    let nsswitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n";
    write_file(&etc.join("passwd"), passwd.as_bytes(), 0o644, None)?;
    write_file(&etc.join("group"), group.as_bytes(), 0o644, None)?;
    write_file(&etc.join("resolv.conf"), resolv.as_bytes(), 0o644, None)?;
    write_file(&etc.join("nsswitch.conf"), nsswitch.as_bytes(), 0o644, None)?;
    write_file(
        &etc.join("hostname"),
        format!("{hostname}\n").as_bytes(),
        0o644,
        None,
    )?;
    Ok(())
}

/// A pod's /etc/hosts: `localhost` and the pod's name are the pod IP, then one line per
/// Service address with the names it answers to (`services.rs`'s `host_names`).
pub(crate) fn hosts_file(
    pod_ip: &str,
    hostname: &str,
    services: &[(IpAddr, Vec<String>)],
) -> String {
    let mut hosts = format!(
        "# Kubernetes-managed hosts file (written by the sandbox).\n\
         # Every pod shares the machine's network: `localhost` here is this pod's own address.\n\
         {pod_ip}\tlocalhost\n{pod_ip}\t{hostname}\n::1\tip6-localhost ip6-loopback\n"
    );
    if !services.is_empty() {
        hosts.push_str("# Services, kept current (a cluster's DNS answers these names).\n");
    }
    for (address, names) in services {
        hosts.push_str(&format!("{address}\t{}\n", names.join(" ")));
    }
    hosts
}

/// Write `etc/hosts` in place: truncate and rewrite the same file (inode), never a new file
/// renamed over it, because each running container's jail bind-mounts this very inode at
/// /etc/hosts and would go on reading a replaced one. A reader may catch the file half
/// written for the microseconds that takes; the next lookup reads it whole.
pub(crate) fn write_hosts(etc: &Path, text: &str) -> std::io::Result<()> {
    write_file(&etc.join("hosts"), text.as_bytes(), 0o644, None)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Objects;
    impl Lookup for Objects {
        fn secret(&self, name: &str) -> Option<Value> {
            (name == "creds").then(|| json!({"data": {"password": "czNjcjN0"}}))
        }
        fn config_map(&self, name: &str) -> Option<Value> {
            (name == "init").then(|| json!({"data": {"10-init.sh": "echo hi", "other": "x"}}))
        }
    }

    #[test]
    fn volumes_become_directories_with_their_objects_files() {
        let dir = std::env::temp_dir().join(format!("sandbox-volumes-test-{}", std::process::id()));
        let pod = json!({"metadata": {"namespace": "db"}, "spec": {"volumes": [
            {"name": "data", "emptyDir": {}},
            {"name": "scripts", "configMap": {"name": "init", "items": [{"key": "10-init.sh", "path": "10-init.sh"}]}},
            {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}}
        ]}});
        let volumes = prepare(
            &pod,
            &dir,
            &dir.join("claims"),
            &Objects,
            &|_| false,
            None,
            None,
        )
        .expect("volumes are prepared");
        assert_eq!(
            std::fs::read_to_string(volumes["scripts"].join("10-init.sh"))
                .ok()
                .as_deref(),
            Some("echo hi")
        );
        assert!(!volumes["scripts"].join("other").exists());
        assert_eq!(
            std::fs::read_to_string(volumes["creds"].join("password"))
                .ok()
                .as_deref(),
            Some("s3cr3t")
        );
        let container = json!({"volumeMounts": [
            {"name": "data", "mountPath": "/var/lib/postgresql/data"},
            {"name": "scripts", "mountPath": "/docker-entrypoint-initdb.d"}
        ]});
        let mounts = mounts_for(&container, &volumes, &pod).expect("mounts");
        assert!(mounts[0].writable && !mounts[1].writable);
        let missing = json!({"metadata": {}, "spec": {"volumes": [{"name": "x", "secret": {"secretName": "gone"}}]}});
        assert_eq!(
            prepare(&missing, &dir, &dir, &Objects, &|_| false, None, None),
            Err(MountError(
                "MountVolume.SetUp failed for volume \"x\" : secret \"gone\" not found".into()
            ))
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The service-account volume holds the pod's token, the cluster CA and its namespace.
    #[test]
    fn the_service_account_volume_holds_token_ca_and_namespace() {
        struct Root;
        impl Lookup for Root {
            fn secret(&self, _: &str) -> Option<Value> {
                None
            }
            fn config_map(&self, name: &str) -> Option<Value> {
                (name == "kube-root-ca.crt").then(|| json!({"data": {"ca.crt": "PEM"}}))
            }
        }
        let dir =
            std::env::temp_dir().join(format!("sandbox-projected-test-{}", std::process::id()));
        let pod = json!({"metadata": {"namespace": "db", "name": "p"}, "spec": {"volumes": [
            {"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}
        ]}});
        let volumes = prepare(&pod, &dir, &dir, &Root, &|_| false, Some("a.b.c"), None)
            .expect("volumes are prepared");
        let read =
            |file: &str| std::fs::read_to_string(volumes["kube-api-access-x"].join(file)).ok();
        assert_eq!(read("token").as_deref(), Some("a.b.c"));
        assert_eq!(read("ca.crt").as_deref(), Some("PEM"));
        assert_eq!(read("namespace").as_deref(), Some("db"));
        let container = json!({"volumeMounts": [{"name": "kube-api-access-x",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]});
        assert!(!mounts_for(&container, &volumes, &pod).expect("mounts")[0].writable);
        assert!(
            prepare(&pod, &dir, &dir, &Root, &|_| false, None, None).is_err(),
            "no token"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_hosts_file_is_rewritten_in_the_same_inode() {
        use std::os::unix::fs::MetadataExt;
        let etc = std::env::temp_dir().join(format!("sandbox-hosts-test-{}", std::process::id()));
        let db: IpAddr = "127.9.192.4".parse().expect("an address");
        write_hosts(&etc, &hosts_file("127.9.0.2", "pg-0", &[])).expect("first write");
        let before = std::fs::metadata(etc.join("hosts")).expect("hosts").ino();
        let names = vec!["db".to_string(), "db.default".to_string()];
        write_hosts(&etc, &hosts_file("127.9.0.2", "pg-0", &[(db, names)])).expect("rewrite");
        assert_eq!(
            std::fs::metadata(etc.join("hosts")).expect("hosts").ino(),
            before
        );
        let text = std::fs::read_to_string(etc.join("hosts")).expect("hosts");
        assert!(text.contains("127.9.0.2\tpg-0\n"), "{text}");
        assert!(text.ends_with("127.9.192.4\tdb db.default\n"), "{text}");
        let _ = std::fs::remove_dir_all(&etc);
    }
}
